/* The syscall-heavy workload of scripts/bench: N getppid calls, then N stat calls on PATH, each
 * loop split in ROUNDS equal rounds and timed with clock_gettime(CLOCK_MONOTONIC) (vDSO: no
 * syscall, so the clock itself is not filtered by seccomp).
 *
 *   syscalls [N [PATH]]        default N = 1000000, PATH = /usr/bin/true
 *
 * Prints one line of key=value pairs on stdout:
 *   getppid_ns   median over the rounds of the cost of one getppid, in ns
 *   stat_ns      median over the rounds of the cost of one stat of PATH, in ns
 *   loop_ms      wall time of both whole loops (2 N syscalls), in ms
 * Exit 0, or 1 (one line on stderr) when PATH cannot be stat'ed or N is not a positive number.
 *
 * Built by scripts/bench at run time: gcc -O2 -o syscalls syscalls.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 10

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 1000000;
    const char *path = argc > 2 ? argv[2] : "/usr/bin/true";
    if (n < ROUNDS) {
        fprintf(stderr, "syscalls: N must be a number >= %d\n", ROUNDS);
        return 1;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "syscalls: stat %s: %s\n", path, strerror(errno));
        return 1;
    }
    long per_round = n / ROUNDS;
    double ppid_ns[ROUNDS], stat_ns[ROUNDS], total = 0;
    volatile long sink = 0;

    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now_ns();
        for (long i = 0; i < per_round; i++)
            sink += syscall(SYS_getppid); /* not the libc wrapper: never cached */
        double t1 = now_ns();
        ppid_ns[r] = (t1 - t0) / per_round;
        total += t1 - t0;
    }
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now_ns();
        for (long i = 0; i < per_round; i++)
            sink += stat(path, &st);
        double t1 = now_ns();
        stat_ns[r] = (t1 - t0) / per_round;
        total += t1 - t0;
    }
    printf("getppid_ns=%.1f stat_ns=%.1f loop_ms=%.3f\n", median(ppid_ns, ROUNDS),
           median(stat_ns, ROUNDS), total / 1e6);
    return sink == -12345 ? 2 : 0; /* keep the loops */
}
