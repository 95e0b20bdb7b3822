// kernel-cache.c — the kernel's work of a caching proxy's misses, and nothing else: the
// "physical limit" beside which bench/proxy.py's miss figures are read (issue 21).
//
// One thread per client connection, blocking sockets and files, one kept connection
// to the origin per client connection. Each request is a miss (proxy.py's miss tests
// ask every URL once): for each slice of SLICE bytes (one origin request each, with a
// Range header; SLICE 0 = the whole object in one request) it
//   1. sends the origin request and reads the answer's head,
//   2. creates a temporary file in CACHE/tmp,
//   3. streams the body through one 256 KiB buffer (linerate's read buffer's size):
//      recv from the origin, write to the file, sendfile those bytes from the file to
//      the client (the response's head with MSG_MORE before the first slice). Two
//      copies of each byte on the server, as nginx's proxy_cache makes (its event
//      pipe sends from the temporary file). Measured on 2 MiB misses: sending from
//      the buffer instead (a third copy) 0.89x nginx; a 64 KiB buffer 0.76x; 1 MiB
//      the same as 256 KiB.
//   4. closes the file and publishes it under its final name in CACHE/objects/XX/:
//      at once (`none`: rename, as nginx's proxy_cache does, which never flushes), or
//      after its data is on disk (`sync`: a publisher thread takes every file written
//      meanwhile, makes them durable with one `syncfs` of the cache's filesystem and
//      renames them; the client never waits for it: linerate's `durability =
//      "sync_before_publish"` group commit).
// No event loop, no index, no metadata in the files, no parsing beyond the status line,
// Content-Length and Content-Range, no logging: every CPU cycle it costs is a system
// call the kernel had to do for the bytes (TCP on loopback both ways, the page cache
// writes, the directory operations, the flush) or a context switch between connections.
// A real cache can only add to that.
//
// Build and run (bench/proxy.py does both when `--servers` names kernel or kernel-sync):
//   gcc -O2 -Wall -pthread -o /tmp/kernel-cache bench/kernel-cache.c
//   taskset -c 0 /tmp/kernel-cache 127.0.0.1 8080 ORIGIN_PORT CACHE 1048576 sync
//
// Answers: 200 with the origin's body when the origin answers 200 or 206; 502 and the
// connection closed for any other answer or an origin that fails; 400 and closed for
// a request line it cannot read. GET only. Only for 127.0.0.1 benchmarks: it follows
// no other rule of HTTP and trusts the origin.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

enum { REQ_MAX = 8192, HEAD_MAX = 16384, CHUNK = 262144 };

static const char *cache;
static struct sockaddr_in origin;
static long long slice;
static int durable, cache_fd;
static unsigned long long seq;  // temporary file names (atomic)

// ---------------------------------------------------------------- the publisher

struct pending {
    char tmp[512], final[512];
    struct pending *next;
};
static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_ready = PTHREAD_COND_INITIALIZER;
static struct pending *q_head, **q_tail = &q_head;

static void publish_now(struct pending *p) {
    if (rename(p->tmp, p->final) < 0) unlink(p->tmp);
    free(p);
}

static void *publisher(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&q_lock);
        while (q_head == NULL) pthread_cond_wait(&q_ready, &q_lock);
        struct pending *batch = q_head;
        q_head = NULL;
        q_tail = &q_head;
        pthread_mutex_unlock(&q_lock);
        int rc = syncfs(cache_fd);
        while (batch) {
            struct pending *next = batch->next;
            if (rc < 0) {
                unlink(batch->tmp);
                free(batch);
            } else {
                publish_now(batch);
            }
            batch = next;
        }
    }
    return NULL;
}

static void publish(struct pending *p) {
    if (!durable) {
        publish_now(p);
        return;
    }
    p->next = NULL;
    pthread_mutex_lock(&q_lock);
    *q_tail = p;
    q_tail = &p->next;
    pthread_cond_signal(&q_ready);
    pthread_mutex_unlock(&q_lock);
}

// ---------------------------------------------------------------- sockets

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

// sendfile(2) `n` bytes of `fd` from *at.
static int send_file(int sock, int fd, off_t *at, size_t n) {
    while (n > 0) {
        ssize_t w = sendfile(sock, fd, at, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        n -= (size_t)w;
    }
    return 0;
}

static int connect_origin(void) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -1;
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(s, (struct sockaddr *)&origin, sizeof origin) < 0) {
        close(s);
        return -1;
    }
    return s;
}

static uint64_t fnv1a(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

// One origin request for [off, off+slice) (or the whole object), its head read and
// parsed. Returns the body's length, or -1; the body's first *got bytes (read with the
// head) are in chunk. *total: the whole object's length (Content-Range's, or
// Content-Length's for a 200).
static long long fetch(int *up, const char *path, size_t plen, long long off, char *chunk,
                       size_t *got, long long *total) {
    char req[REQ_MAX + 128];
    int n = slice > 0
                ? snprintf(req, sizeof req,
                           "GET %.*s HTTP/1.1\r\nHost: origin\r\nRange: bytes=%lld-%lld\r\n\r\n",
                           (int)plen, path, off, off + slice - 1)
                : snprintf(req, sizeof req, "GET %.*s HTTP/1.1\r\nHost: origin\r\n\r\n", (int)plen, path);
    if (n <= 0 || (size_t)n >= sizeof req) return -1;
    char head[HEAD_MAX + 1];
    size_t have = 0;
    for (int attempt = 0;; attempt++) {
        if (*up < 0 && (*up = connect_origin()) < 0) return -1;
        if (send_all(*up, req, (size_t)n, 0) == 0) {
            ssize_t r;
            do r = recv(*up, head, HEAD_MAX, 0);
            while (r < 0 && errno == EINTR);
            if (r > 0) {
                have = (size_t)r;
                break;
            }
        }
        // A kept connection the origin closed: once more on a new one.
        close(*up);
        *up = -1;
        if (attempt == 1) return -1;
    }
    char *end;
    head[have] = 0;
    while ((end = strstr(head, "\r\n\r\n")) == NULL) {
        if (have == HEAD_MAX) return -1;
        ssize_t r = recv(*up, head + have, HEAD_MAX - have, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        have += (size_t)r;
        head[have] = 0;
    }
    int status = atoi(head + 9);
    char *cl = strcasestr(head, "\r\ncontent-length:");
    if ((status != 200 && status != 206) || cl == NULL || cl > end) return -1;
    long long len = atoll(cl + 17);
    if (status == 206) {
        char *cr = strcasestr(head, "\r\ncontent-range:");
        char *slash = cr ? memchr(cr, '/', (size_t)(end - cr)) : NULL;
        if (slash == NULL) return -1;
        *total = atoll(slash + 1);
    } else {
        *total = len;
    }
    *got = have - (size_t)(end + 4 - head);
    if ((long long)*got > len || *got > CHUNK) return -1;  // bytes the origin never sends
    memcpy(chunk, end + 4, *got);
    return len;
}

// ---------------------------------------------------------------- a connection

static void *conn_main(void *arg) {
    int sock = (int)(long)arg, up = -1;
    int one = 1;
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char buf[REQ_MAX + 1];
    size_t have = 0;
    char *chunk = malloc(CHUNK);
    if (chunk == NULL) goto out;
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
        char *path = NULL, *stop = NULL;
        if (strncmp(buf, "GET /", 5) == 0) {
            path = buf + 4;
            stop = strpbrk(path, " \r");
        }
        if (path == NULL || stop == NULL) {
            static const char bad[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            send_all(sock, bad, sizeof bad - 1, 0);
            goto out;
        }
        size_t plen = (size_t)(stop - path);
        uint64_t key = fnv1a(path, plen);
        long long off = 0, total = -1;
        for (unsigned n = 0; total < 0 || off < total; n++) {
            size_t got = 0;
            long long len = fetch(&up, path, plen, off, chunk, &got, &total);
            if (len < 0 || (len == 0 && off < total)) {
                if (off == 0) {
                    static const char bad[] = "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                    send_all(sock, bad, sizeof bad - 1, 0);
                }
                goto out;  // mid-body: the client sees a short response
            }
            if (off == 0) {
                char h[128];
                int hl = snprintf(h, sizeof h, "HTTP/1.1 200 OK\r\nContent-Length: %lld\r\n\r\n", total);
                if (send_all(sock, h, (size_t)hl, total > 0 ? MSG_MORE : 0) < 0) goto out;
            }
            struct pending *p = malloc(sizeof *p);
            if (p == NULL) goto out;
            snprintf(p->tmp, sizeof p->tmp, "%s/tmp/%llu", cache, __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
            snprintf(p->final, sizeof p->final, "%s/objects/%02x/%016llx.%u", cache, (unsigned)(key & 0xff),
                     (unsigned long long)key, n);
            int fd = open(p->tmp, O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC, 0600);
            off_t at = 0;
            if (fd < 0) {
                free(p);
                goto out;
            }
            // Through the chunk: what came with the head, then recv, write, send.
            long long left = len;
            int rc = 0;
            for (;;) {
                if (got > 0) {
                    left -= (long long)got;
                    if (write(fd, chunk, got) != (ssize_t)got ||
                        send_file(sock, fd, &at, got) < 0) {
                        rc = -1;
                        break;
                    }
                }
                if (left == 0) break;
                ssize_t r = recv(up, chunk, left < CHUNK ? (size_t)left : CHUNK, 0);
                if (r < 0 && errno == EINTR) {
                    got = 0;
                    continue;
                }
                if (r <= 0) {
                    rc = -1;
                    break;
                }
                got = (size_t)r;
            }
            close(fd);
            if (rc < 0) {
                unlink(p->tmp);
                free(p);
                goto out;
            }
            off += len;
            publish(p);
        }
        memmove(buf, buf + used, have - used);
        have -= used;
    }
out:
    free(chunk);
    if (up >= 0) close(up);
    close(sock);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 7 || (strcmp(argv[6], "sync") != 0 && strcmp(argv[6], "none") != 0)) {
        fprintf(stderr, "usage: %s ADDR PORT ORIGIN_PORT CACHE_DIR SLICE_BYTES sync|none\n", argv[0]);
        return 2;
    }
    cache = argv[4];
    slice = atoll(argv[5]);
    durable = strcmp(argv[6], "sync") == 0;
    origin = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3]))};
    inet_pton(AF_INET, "127.0.0.1", &origin.sin_addr);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/tmp", cache);
    mkdir(cache, 0700);
    mkdir(dir, 0700);
    snprintf(dir, sizeof dir, "%s/objects", cache);
    mkdir(dir, 0700);
    for (int i = 0; i < 256; i++) {
        snprintf(dir, sizeof dir, "%s/objects/%02x", cache, i);
        mkdir(dir, 0700);
    }
    if ((cache_fd = open(cache, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        perror(cache);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 << 10);
    pthread_t pub;
    if (durable && pthread_create(&pub, &attr, publisher, NULL) != 0) return 1;
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
    for (;;) {
        int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        if (s < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE) {
                usleep(1000);
                continue;
            }
            perror("accept");
            return 1;
        }
        pthread_t t;
        if (pthread_create(&t, &attr, conn_main, (void *)(long)s) != 0) close(s);
    }
}
