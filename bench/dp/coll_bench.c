/* coll_bench.c - all-reduce time of the CPU collective (client/lib/coll.c)
 * between processes on one host, for bench/dp/run.sh beside torch gloo.
 *
 *   coll_bench RANK SIZE PORT_BASE MIB ITERS
 *
 * Rank r listens on tcp://127.0.0.1:PORT_BASE+r and joins the ring (the
 * addresses are known, so no head is needed); then 2 warm-up all-reduces of
 * MIB MiB of float32 and ITERS timed ones, each after a barrier so they start
 * together. Every rank checks the sum. Rank 0 prints one JSON line: size,
 * bytes, median and min ms, and the bus bandwidth 2 (n-1)/n x bytes / time
 * (the bytes each rank sends and receives in a ring all-reduce; nccl-tests'
 * busbw). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: coll_bench RANK SIZE PORT_BASE MIB ITERS\n");
        return 2;
    }
    uint32_t rank = (uint32_t)atoi(argv[1]), size = (uint32_t)atoi(argv[2]);
    int base = atoi(argv[3]), iters = atoi(argv[5]);
    size_t count = (size_t)(atof(argv[4]) * 1048576.0) / sizeof(float);
    char urls[64][64], names[64][32];
    const char *u[64], *nm[64];
    float *buf = malloc(count * sizeof(float));
    double *ms = calloc((size_t)iters, sizeof(double));
    troupe_coll *c = NULL;
    tr_err e = {0};
    int rv;

    if (size < 1 || size > 64 || rank >= size || buf == NULL || ms == NULL || iters < 1) {
        fprintf(stderr, "coll_bench: bad arguments\n");
        return 2;
    }
    for (uint32_t r = 0; r < size; r++) {
        snprintf(urls[r], sizeof(urls[r]), "tcp://127.0.0.1:%d", base + (int)r);
        snprintf(names[r], sizeof(names[r]), "rank %u", r);
        u[r] = urls[r];
        nm[r] = names[r];
    }
    rv = tr_coll_listen(&c, rank, size, urls[rank], 120000, NULL, &e);
    if (rv == TROUPE_OK) {
        rv = tr_coll_connect(c, u, nm, &e);
    }
    for (int i = -2; i < iters && rv == TROUPE_OK; i++) {
        for (size_t k = 0; k < count; k++) {
            buf[k] = (float)(rank + 1);
        }
        rv = tr_coll_barrier(c, &e);
        double t0 = now_ms();
        if (rv == TROUPE_OK) {
            rv = tr_coll_allreduce(c, buf, count, TROUPE_F32, TROUPE_SUM, &e);
        }
        if (i >= 0) {
            ms[i] = now_ms() - t0;
        }
        if (rv == TROUPE_OK && count > 0 && (buf[0] != (float)(size * (size + 1) / 2) || buf[count - 1] != buf[0])) {
            fprintf(stderr, "coll_bench: rank %u: wrong sum %g\n", rank, (double)buf[0]);
            return 1;
        }
    }
    if (rv != TROUPE_OK) {
        fprintf(stderr, "coll_bench: rank %u: %s: %s\n", rank, troupe_strerror(rv), e.msg);
        return 1;
    }
    qsort(ms, (size_t)iters, sizeof(double), cmp);
    if (rank == 0) {
        double bytes = (double)count * sizeof(float), med = ms[iters / 2];
        double bus = size > 1 ? 2.0 * (size - 1) / size * bytes / (med / 1e3) / 1e9 : 0.0;
        printf("{\"impl\":\"troupe-coll\",\"size\":%u,\"bytes\":%.0f,\"iters\":%d,\"median_ms\":%.3f,\"min_ms\":%.3f,"
               "\"busbw_GBps\":%.3f}\n",
               size, bytes, iters, med, ms[0], bus);
    }
    tr_coll_close(c);
    free(buf);
    free(ms);
    return 0;
}
