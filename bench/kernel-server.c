// kernel-server.c — the kernel's work of serving whole files over HTTP/1.1, and
// nothing else: the "physical limit" beside which bench/zipf.py's figures are read
// (issue 20: a Zipf library larger than memory).
//
// One thread per connection, blocking sockets and files: read a request, open the
// file under ROOT, send the status line and Content-Length with MSG_MORE, send the
// body, close the file, next request. No event loop, no cache of open files, no
// residency checks, no logging, no parsing beyond the request line: every cycle of
// CPU it costs is a system call the kernel had to do for the bytes (disk reads into
// the page cache, memory-cgroup charging and reclaim, TCP on loopback) or a context
// switch between connections. A real server can only add to that.
//
// Two ways to move a body, the two an edge server on Linux chooses between:
//   sendfile  one blocking sendfile(2) of the whole file; the kernel reads the pages
//             that are not resident inside the call (what nginx's `aio threads`
//             does in its pool, and linerate's inline path for resident bytes)
//   pipe      splice(2) the file into a 1 MiB pipe and the pipe into the socket,
//             1 MiB at a time (what linerate's disk pool does for a cold window:
//             one large read asks readahead for 1 MiB at once)
//
// Build and run (bench/zipf.py does both when `--servers` names kernel-sendfile or
// kernel-pipe):
//   gcc -O2 -Wall -pthread -o /tmp/kernel-server bench/kernel-server.c
//   taskset -c 0 /tmp/kernel-server 127.0.0.1 8080 /var/tmp/linerate-bench/zipf/lib sendfile
//
// Answers: 200 with the body for a regular file; 404 for anything else (a path with
// "..", a missing file, a directory); 400 for a request line it cannot read, and
// then the connection is closed. GET only; request bodies are not read (the bench
// generator sends none). Only for 127.0.0.1 benchmarks: it follows no other rule of
// HTTP.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *root;
static int use_pipe;

enum { REQ_MAX = 8192, PIPE_SIZE = 1 << 20 };

static int send_all(int fd, const char *p, size_t n, int flags) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, flags | MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int body_sendfile(int sock, int file, off_t len) {
    off_t off = 0;
    while (off < len) {
        ssize_t w = sendfile(sock, file, &off, (size_t)(len - off));
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) return -1;  // the file shrank under us
    }
    return 0;
}

static int body_pipe(int sock, int file, off_t len, int pipefd[2]) {
    loff_t off = 0;
    while (off < len) {
        size_t want = (size_t)(len - off) < PIPE_SIZE ? (size_t)(len - off) : PIPE_SIZE;
        ssize_t in = splice(file, &off, pipefd[1], NULL, want, SPLICE_F_MORE);
        if (in < 0 && errno == EINTR) continue;
        if (in <= 0) return -1;
        while (in > 0) {
            ssize_t out = splice(pipefd[0], NULL, sock, NULL, (size_t)in,
                                 off < len ? SPLICE_F_MORE : 0);
            if (out < 0 && errno == EINTR) continue;
            if (out <= 0) return -1;
            in -= out;
        }
    }
    return 0;
}

static void *conn_main(void *arg) {
    int sock = (int)(long)arg;
    int one = 1;
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int pipefd[2] = {-1, -1};
    if (use_pipe) {
        if (pipe2(pipefd, O_CLOEXEC) < 0) goto out;
        fcntl(pipefd[1], F_SETPIPE_SZ, PIPE_SIZE);
    }
    char buf[REQ_MAX + 1];
    size_t have = 0;
    for (;;) {
        char *end;
        buf[have] = 0;
        while ((end = strstr(buf, "\r\n\r\n")) == NULL) {
            if (have == REQ_MAX) goto out;
            ssize_t r = recv(sock, buf + have, REQ_MAX - have, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) goto out;
            have += (size_t)r;
            buf[have] = 0;
        }
        size_t used = (size_t)(end + 4 - buf);
        // "GET /path?query HTTP/1.1"
        char *path = NULL, *stop = NULL;
        if (strncmp(buf, "GET /", 5) == 0) {
            path = buf + 4;
            stop = strpbrk(path, " ?\r");
        }
        if (path == NULL || stop == NULL) {
            static const char bad[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            send_all(sock, bad, sizeof bad - 1, 0);
            goto out;
        }
        char file_path[4096];
        int n = snprintf(file_path, sizeof file_path, "%s%.*s", root, (int)(stop - path), path);
        int file = -1;
        struct stat st;
        if (n > 0 && (size_t)n < sizeof file_path && strstr(path, "..") == NULL)
            file = open(file_path, O_RDONLY | O_CLOEXEC);
        if (file >= 0 && (fstat(file, &st) < 0 || !S_ISREG(st.st_mode))) {
            close(file);
            file = -1;
        }
        if (file < 0) {
            static const char nf[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
            if (send_all(sock, nf, sizeof nf - 1, 0) < 0) goto out;
        } else {
            char head[128];
            int hl = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Length: %lld\r\n\r\n",
                              (long long)st.st_size);
            int rc = send_all(sock, head, (size_t)hl, st.st_size > 0 ? MSG_MORE : 0);
            if (rc == 0 && st.st_size > 0)
                rc = use_pipe ? body_pipe(sock, file, st.st_size, pipefd)
                              : body_sendfile(sock, file, st.st_size);
            close(file);
            if (rc < 0) goto out;
        }
        memmove(buf, buf + used, have - used);
        have -= used;
    }
out:
    if (pipefd[0] >= 0) close(pipefd[0]);
    if (pipefd[1] >= 0) close(pipefd[1]);
    close(sock);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5 || (strcmp(argv[4], "sendfile") != 0 && strcmp(argv[4], "pipe") != 0)) {
        fprintf(stderr, "usage: %s ADDR PORT ROOT sendfile|pipe\n", argv[0]);
        return 2;
    }
    root = argv[3];
    use_pipe = strcmp(argv[4], "pipe") == 0;
    signal(SIGPIPE, SIG_IGN);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
    if (inet_pton(AF_INET, argv[1], &a.sin_addr) != 1) {
        fprintf(stderr, "bad address %s\n", argv[1]);
        return 2;
    }
    if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 4096) < 0) {
        perror("bind/listen");
        return 1;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 << 10);
    for (;;) {
        int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        if (s < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            perror("accept");
            return 1;
        }
        pthread_t t;
        if (pthread_create(&t, &attr, conn_main, (void *)(long)s) != 0) close(s);
    }
}
