/*
 * ktls-frames.c - the kernel's work alone for sending 2 MiB objects over kernel TLS
 * as HTTP/1.1 does and as HTTP/2 DATA frames do, and nothing else: no HTTP parsing,
 * no event loop, no HPACK. The limit issue 24's "zero-copy h2 over kTLS >= 0.9x
 * HTTP/1.1 over kTLS" target is measured against (docs/benchmarks.md, "HTTP/2").
 *
 * A loopback TCP pair; kTLS TX (TLS 1.3 AES-128-GCM, fixed key) on the sender, kTLS
 * RX on the receiver (a forked child that reads and drops the plaintext). The
 * sender sends OBJECTS x 2 MiB from a file, timing its own CPU (getrusage) and the
 * wall clock, in four ways:
 *
 *   h1        send(200-byte head, MSG_MORE) + sendfile(2 MiB)       (linerate HTTP/1.1)
 *   h2        per frame: send(9-byte header, MSG_MORE) + sendfile(16,375)
 *             (linerate HTTP/2: a frame fills one 16 KiB record)
 *   h2-16k    the same with 16,384-byte payloads (a frame spans two records)
 *   h2-splice per frame: write(pipe, header) + splice(file -> pipe, 16,375); per 256 KiB
 *             turn: splice(pipe -> socket, SPLICE_F_MORE) until the pipe is empty
 *   h2-cork   as h2, the socket corked (TCP_CORK) for each 256 KiB turn: with
 *             TCP_NODELAY (which linerate sets) each sendfile's record otherwise goes
 *             out at once as its own segments
 *
 * The sender sets TCP_NODELAY, as linerate does. KTLS_FRAMES_PLAIN=1: plain TCP
 * instead of kernel TLS (runs on any kernel).
 *
 * Build: gcc -O2 -Wall -static -o ktls-frames ktls-frames.c
 * Run (in the kTLS VM): ktls-frames [OBJECTS]   (default 48); two passes over the four
 * ways, the second reported in the ratios.
 * Exit status: 0, 2 when kTLS is unavailable, 1 on any error.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/tls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SOL_TLS
#define SOL_TLS 282
#endif
#ifndef TCP_ULP
#define TCP_ULP 31
#endif

#define OBJECT (2 * 1024 * 1024)
#define TURN (256 * 1024)

static void die(const char *what) { perror(what); exit(1); }

static void make_pair(int *client, int *server)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&a, &alen))
		die("listen");
	*client = socket(AF_INET, SOCK_STREAM, 0);
	if (*client < 0 || connect(*client, (struct sockaddr *)&a, sizeof(a)))
		die("connect");
	*server = accept(l, NULL, NULL);
	if (*server < 0)
		die("accept");
	close(l);
}

static int ktls(int fd, int dir)
{
	struct tls12_crypto_info_aes_gcm_128 c;
	memset(&c, 0, sizeof(c));
	c.info.version = TLS_1_3_VERSION;
	c.info.cipher_type = TLS_CIPHER_AES_GCM_128;
	memset(c.key, 0x11, sizeof(c.key));
	memset(c.iv, 0x22, sizeof(c.iv));
	memset(c.salt, 0x33, sizeof(c.salt));
	if (setsockopt(fd, SOL_TCP, TCP_ULP, "tls", sizeof("tls")))
		return errno == ENOENT ? -2 : -1;
	return setsockopt(fd, SOL_TLS, dir, &c, sizeof(c));
}

static void send_all(int fd, const void *p, size_t n, int flags)
{
	while (n > 0) {
		ssize_t w = send(fd, p, n, flags);
		if (w <= 0) die("send");
		p = (const char *)p + w;
		n -= w;
	}
}

static void sendfile_all(int fd, int f, off_t off, size_t n)
{
	while (n > 0) {
		ssize_t w = sendfile(fd, f, &off, n);
		if (w <= 0) die("sendfile");
		n -= w;
	}
}

static void frame_header(unsigned char h[9], uint32_t len, int end)
{
	h[0] = len >> 16; h[1] = len >> 8; h[2] = len;
	h[3] = 0; /* DATA */
	h[4] = end ? 1 : 0;
	h[5] = 0; h[6] = 0; h[7] = 0; h[8] = 1;
}

enum mode { H1, H2, H2_16K, H2_SPLICE, H2_CORK };
static const char *names[] = { "h1", "h2", "h2-16k", "h2-splice", "h2-cork" };

static void send_object(enum mode m, int s, int f, int pipefd[2])
{
	unsigned char head[200];
	memset(head, 'h', sizeof(head));
	if (m == H1) {
		send_all(s, head, sizeof(head), MSG_MORE);
		sendfile_all(s, f, 0, OBJECT);
		return;
	}
	uint32_t frame = m == H2_16K ? 16384 : 16384 - 9;
	send_all(s, head, 60, MSG_MORE); /* the HEADERS frame */
	size_t off = 0, in_pipe = 0;
	while (off < OBJECT) {
		uint32_t n = OBJECT - off < frame ? OBJECT - off : frame;
		unsigned char h[9];
		frame_header(h, n, off + n == OBJECT);
		if (m == H2_SPLICE) {
			if (write(pipefd[1], h, 9) != 9) die("write pipe");
			loff_t o = off;
			size_t left = n;
			while (left > 0) {
				ssize_t w = splice(f, &o, pipefd[1], NULL, left, SPLICE_F_MORE);
				if (w <= 0) die("splice file");
				left -= w;
			}
			in_pipe += 9 + n;
			if (in_pipe >= TURN || off + n == OBJECT) {
				while (in_pipe > 0) {
					ssize_t w = splice(pipefd[0], NULL, s, NULL, in_pipe,
							   off + n == OBJECT ? 0 : SPLICE_F_MORE);
					if (w <= 0) die("splice socket");
					in_pipe -= w;
				}
			}
		} else {
			int one = 1, zero = 0;
			if (m == H2_CORK && off % TURN == 0 &&
			    setsockopt(s, IPPROTO_TCP, TCP_CORK, &one, sizeof(one)))
				die("cork");
			send_all(s, h, 9, MSG_MORE);
			sendfile_all(s, f, off, n);
			if (m == H2_CORK && ((off + n) / TURN != off / TURN || off + n == OBJECT) &&
			    setsockopt(s, IPPROTO_TCP, TCP_CORK, &zero, sizeof(zero)))
				die("uncork");
		}
		off += n;
	}
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static double cpu(void)
{
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
	int objects = argc > 1 ? atoi(argv[1]) : 48;
	char path[] = "/tmp/ktls-frames-XXXXXX";
	int f = mkstemp(path);
	if (f < 0) die("mkstemp");
	unsigned char *buf = malloc(OBJECT);
	for (size_t i = 0; i < OBJECT; i++) buf[i] = (unsigned char)(i * 2654435761u >> 13);
	if (write(f, buf, OBJECT) != OBJECT) die("write file");
	unlink(path);
	double rate[5], cost[5];
	int plain = getenv("KTLS_FRAMES_PLAIN") != NULL;
	/* Two passes; the first warms the emulator's translation cache and the page cache
	 * (under TCG the first mode run would pay for both), the second is reported. */
	for (int pass = 0; pass < 2; pass++)
	for (int m = H1; m <= H2_CORK; m++) {
		int c, s;
		make_pair(&c, &s);
		/* As linerate: TCP_NODELAY on every connection. */
		int nodelay = 1;
		if (setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof(nodelay)))
			die("nodelay");
		int r = plain ? 0 : ktls(s, TLS_TX);
		if (r == -2) { fprintf(stderr, "no kTLS (tls ULP missing)\n"); return 2; }
		if (r || (!plain && ktls(c, TLS_RX))) die("kTLS setup");
		pid_t pid = fork();
		if (pid == 0) { /* receiver: read and drop everything */
			close(s);
			static char sink[1 << 20];
			while (read(c, sink, sizeof(sink)) > 0) {}
			_exit(0);
		}
		close(c);
		int pipefd[2];
		if (pipe(pipefd)) die("pipe");
		fcntl(pipefd[1], F_SETPIPE_SZ, 1 << 20);
		send_object(m, s, f, pipefd); /* warm-up */
		double t0 = now(), c0 = cpu();
		for (int i = 0; i < objects; i++) send_object(m, s, f, pipefd);
		double secs = now() - t0, used = cpu() - c0;
		shutdown(s, SHUT_WR);
		close(s);
		waitpid(pid, NULL, 0);
		double gb = (double)objects * OBJECT / 1e9;
		rate[m] = gb * 1000 / secs;
		cost[m] = used / gb;
		printf("pass %d: %-9s %7.1f MB/s  sender CPU %7.2f s/GB  (%d x 2 MiB, %s)\n",
		       pass + 1, names[m], rate[m], cost[m], objects, plain ? "plain TCP" : "kernel TLS");
	}
	for (int m = H2; m <= H2_CORK; m++)
		printf("%s / h1: %.2fx throughput, %.2fx sender CPU per GB\n", names[m],
		       rate[m] / rate[H1], cost[m] / cost[H1]);
	return 0;
}
