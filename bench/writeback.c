// writeback.c — what storing a cache's objects costs the machine, with and without a
// flush: the kernel's work of a miss's file operations alone (issue 21). Run by
// bench/writeback.sh, which reads it against the kernel's writeback settings.
//
// For each of N objects of SIZE bytes it creates a temporary file (CACHE/tmp, a unique
// name, as linerate and nginx do), writes the body in one pwrite, and publishes the file
// under its final name in one of 4,096 fan-out directories (CACHE/objects/XXX/):
//   flush    every BATCH files written: one syncfs of the filesystem, then the batch's
//            renames (linerate's `durability = "sync_before_publish"` group commit)
//   none     renamed at once, never flushed (nginx's proxy_cache): the data reaches the
//            disk when the kernel's flusher writes it back
//   tmpfile  as `flush`, but each file is created unnamed in its final directory
//            (O_TMPFILE) and linked there (linkat through /proc/self/fd) instead of renamed
// and reports, per file: wall time, its own CPU time (user + system) and the CPU time of
// the whole machine (/proc/stat: the flusher, the journal and the loop device's workers
// wherever they ran). Pin it to one CPU (taskset); the machine's other CPUs take the
// kernel threads' work and are counted too.
//
//   gcc -O2 -Wall -o /tmp/writeback bench/writeback.c
//   taskset -c 0 /tmp/writeback CACHE flush 40000 65536 1000
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum mode { FLUSH, NONE, TMPFILE };

static double wall(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double own_cpu(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6;
}

// Busy time of all CPUs together, in seconds (user, nice, system, irq, softirq, steal).
static double machine_cpu(void) {
    long long u, n, s, idle, iow, irq, sirq, steal;
    FILE *f = fopen("/proc/stat", "r");
    if (!f || fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &u, &n, &s, &idle, &iow, &irq,
                     &sirq, &steal) != 8) {
        perror("/proc/stat");
        exit(1);
    }
    fclose(f);
    return (u + n + s + irq + sirq + steal) / (double)sysconf(_SC_CLK_TCK);
}

static void die(const char *what, const char *path) {
    fprintf(stderr, "%s %s: %s\n", what, path, strerror(errno));
    exit(1);
}

// The name object `i` of this run gets: a 128-bit-looking hash spread over the fan-out.
static unsigned long long hash_of(long i) {
    return ((unsigned long long)getpid() << 40) ^ ((unsigned long long)i * 0x9E3779B97F4A7C15ULL);
}

static void final_path(char *out, size_t len, const char *cache, unsigned long long h) {
    snprintf(out, len, "%s/objects/%03llx/%016llx%016llx", cache, (h >> 20) & 4095, h, ~h);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s CACHE flush|none|tmpfile N SIZE BATCH\n", argv[0]);
        return 2;
    }
    const char *cache = argv[1];
    enum mode mode = !strcmp(argv[2], "flush") ? FLUSH : !strcmp(argv[2], "none") ? NONE
                   : !strcmp(argv[2], "tmpfile") ? TMPFILE : (enum mode)-1;
    long n = atol(argv[3]), size = atol(argv[4]), batch = atol(argv[5]);
    if ((int)mode < 0 || n <= 0 || size <= 0 || batch <= 0 || batch > 4096) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    char *buf = malloc(size);
    memset(buf, 'x', size);
    char tmp[4096], dst[4096];
    snprintf(tmp, sizeof tmp, "%s/tmp", cache);
    mkdir(tmp, 0755);
    snprintf(tmp, sizeof tmp, "%s/objects", cache);
    mkdir(tmp, 0755);
    for (int d = 0; d < 4096; d++) {  // made once, as the caches make them, before the clock
        snprintf(tmp, sizeof tmp, "%s/objects/%03x", cache, d);
        if (mkdir(tmp, 0755) && errno != EEXIST) die("mkdir", tmp);
    }
    int fds[4096];
    long first = 0, pending = 0;
    double w0 = wall(), c0 = own_cpu(), m0 = machine_cpu();
    for (long i = 0; i < n; i++) {
        unsigned long long h = hash_of(i);
        int fd;
        if (mode == TMPFILE) {
            snprintf(tmp, sizeof tmp, "%s/objects/%03llx", cache, (h >> 20) & 4095);
            fd = open(tmp, O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
        } else {
            snprintf(tmp, sizeof tmp, "%s/tmp/%016llx.%d.%ld", cache, h, getpid(), i);
            fd = open(tmp, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644);
        }
        if (fd < 0) die("create", tmp);
        if (pwrite(fd, buf, size, 0) != size) die("pwrite", tmp);
        if (mode == NONE) {
            final_path(dst, sizeof dst, cache, h);
            if (rename(tmp, dst)) die("rename", dst);
            close(fd);
            continue;
        }
        fds[pending++] = fd;
        if (pending < batch && i < n - 1) continue;
        if (syncfs(fds[0])) die("syncfs", cache);
        for (long k = 0; k < pending; k++) {
            unsigned long long hk = hash_of(first + k);
            final_path(dst, sizeof dst, cache, hk);
            if (mode == TMPFILE) {
                snprintf(tmp, sizeof tmp, "/proc/self/fd/%d", fds[k]);
                if (linkat(AT_FDCWD, tmp, AT_FDCWD, dst, AT_SYMLINK_FOLLOW)) die("linkat", dst);
            } else {
                snprintf(tmp, sizeof tmp, "%s/tmp/%016llx.%d.%ld", cache, hk, getpid(), first + k);
                if (rename(tmp, dst)) die("rename", dst);
            }
            close(fds[k]);
        }
        first = i + 1;
        pending = 0;
    }
    double w1 = wall(), c1 = own_cpu(), m1 = machine_cpu();
    printf("%s: %ld files of %ld bytes: %.1f us wall, %.1f us own CPU, %.1f us machine CPU per file\n",
           argv[2], n, size, (w1 - w0) / n * 1e6, (c1 - c0) / n * 1e6, (m1 - m0) / n * 1e6);
    return 0;
}
