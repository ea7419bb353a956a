/* coll_worker - a worker for tests/integration/coll: opens the CPU
 * collective on its group, all-reduces known values (f32 and f64, an odd
 * count), reduce-scatters and all-gathers the same f32 values (uneven
 * segments: the count is odd), broadcasts from the last rank, passes a
 * barrier, and checks every element exactly. Prints "cw: ..." lines the scripts grep.
 *
 * Environment: CW_COUNT (elements, default 1000003), CW_TIMEOUT_MS (default
 * 20000), CW_EXIT=WORKER: that worker opens the collective, then exits 0 at
 * once (a rank that leaves early). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "troupe/worker.h"

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double value(unsigned rank, size_t i)
{
    return (double)(i % 4099) + 7.0 * rank + 1.0;
}

static double expected(unsigned n, size_t i)
{
    return n * (double)(i % 4099) + 7.0 * n * (n - 1) / 2 + n;
}

static int fail(const char *what, const troupe_error *err, long long t0)
{
    printf("cw: %s: %s: %s (after %lld ms)\n", what, troupe_strerror(err->code), err->message, now_ms() - t0);
    fflush(stdout);
    return 1;
}

/* reduce_check all-reduces one buffer of dtype and checks every element. */
static int reduce_check(troupe_coll *c, size_t count, troupe_dtype dt, troupe_error *err)
{
    size_t es = dt == TROUPE_F32 ? sizeof(float) : sizeof(double);
    unsigned r = troupe_coll_rank(c), n = troupe_coll_size(c);
    char *buf = malloc(count * es + 1);
    int rv;

    for (size_t i = 0; i < count; i++) {
        if (dt == TROUPE_F32) {
            ((float *)buf)[i] = (float)value(r, i);
        } else {
            ((double *)buf)[i] = value(r, i);
        }
    }
    if ((rv = troupe_coll_allreduce(c, buf, count, dt, TROUPE_SUM, err)) == TROUPE_OK) {
        for (size_t i = 0; i < count; i++) {
            double got = dt == TROUPE_F32 ? ((float *)buf)[i] : ((double *)buf)[i];
            if (got != expected(n, i)) {
                printf("cw: rank %u: element %zu is %.1f, expected %.1f\n", r, i, got, expected(n, i));
                rv = TROUPE_DATA_LOSS;
                break;
            }
        }
    }
    if (rv == TROUPE_OK) {
        printf("cw: rank %u/%u allreduce %s %zu exact, [0]=%.0f [last]=%.0f\n", r, n,
               dt == TROUPE_F32 ? "f32" : "f64", count, expected(n, 0), count ? expected(n, count - 1) : 0.0);
    }
    free(buf);
    return rv;
}

/* scatter_gather_check reduce-scatters f32 values and checks this rank's
 * segment, then all-gathers and checks every element: together they are an
 * all-reduce. */
static int scatter_gather_check(troupe_coll *c, size_t count, troupe_error *err)
{
    unsigned r = troupe_coll_rank(c), n = troupe_coll_size(c);
    size_t lo = (size_t)((unsigned __int128)count * r / n),
           hi = (size_t)((unsigned __int128)count * (r + 1) / n);
    float *buf = malloc(count * sizeof(float) + 1);
    int rv;

    for (size_t i = 0; i < count; i++) {
        buf[i] = (float)value(r, i);
    }
    rv = troupe_coll_reduce_scatter(c, buf, count, TROUPE_F32, TROUPE_SUM, err);
    for (size_t i = lo; rv == TROUPE_OK && i < hi; i++) {
        if (buf[i] != expected(n, i)) {
            printf("cw: rank %u: reduce-scatter element %zu is %.1f, expected %.1f\n", r, i, buf[i],
                   expected(n, i));
            rv = TROUPE_DATA_LOSS;
        }
    }
    for (size_t i = 0; rv == TROUPE_OK && i < count; i++) {
        if (i < lo || i >= hi) {
            buf[i] = -1.0f; /* what the all-gather must overwrite */
        }
    }
    if (rv == TROUPE_OK) {
        rv = troupe_coll_allgather(c, buf, count, TROUPE_F32, err);
    }
    for (size_t i = 0; rv == TROUPE_OK && i < count; i++) {
        if (buf[i] != expected(n, i)) {
            printf("cw: rank %u: all-gather element %zu is %.1f, expected %.1f\n", r, i, buf[i],
                   expected(n, i));
            rv = TROUPE_DATA_LOSS;
        }
    }
    if (rv == TROUPE_OK) {
        printf("cw: rank %u/%u reduce-scatter+all-gather f32 %zu exact, own segment [%zu, %zu)\n", r, n,
               count, lo, hi);
    }
    free(buf);
    return rv;
}

int main(void)
{
    const char *cnt = getenv("CW_COUNT"), *tmo = getenv("CW_TIMEOUT_MS"), *ex = getenv("CW_EXIT");
    size_t count = cnt ? strtoull(cnt, NULL, 10) : 1000003;
    troupe_coll_opts o = {.timeout_ms = tmo ? (uint32_t)strtoul(tmo, NULL, 10) : 20000};
    troupe_worker_opts wo = {.no_control = 1};
    troupe_worker_ctx *w = NULL;
    troupe_coll *c = NULL;
    troupe_error err = {0};
    long long t0 = now_ms();
    unsigned char bc[1000];
    int rc = 1;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (troupe_worker_open(&w, &wo, &err) != TROUPE_OK) {
        return fail("open", &err, t0);
    }
    if (troupe_worker_coll_open(w, NULL, &c, &o, &err) != TROUPE_OK) {
        rc = fail("coll_open", &err, t0);
        goto out;
    }
    if (ex != NULL && strcmp(ex, troupe_worker_self_info(w)->worker) == 0) {
        printf("cw: %s leaves early\n", ex);
        fflush(stdout);
        _Exit(0); /* no close: the process is gone, as if it crashed */
    }
    t0 = now_ms();
    if (reduce_check(c, count, TROUPE_F32, &err) != TROUPE_OK) {
        rc = err.code ? fail("allreduce", &err, t0) : 1;
        goto out;
    }
    if (reduce_check(c, count, TROUPE_F64, &err) != TROUPE_OK) {
        rc = err.code ? fail("allreduce", &err, t0) : 1;
        goto out;
    }
    if (scatter_gather_check(c, count, &err) != TROUPE_OK) {
        rc = err.code ? fail("reduce-scatter/all-gather", &err, t0) : 1;
        goto out;
    }
    for (size_t i = 0; i < sizeof(bc); i++) {
        bc[i] = troupe_coll_rank(c) + 1 == troupe_coll_size(c) ? (unsigned char)(i * 13) : 0;
    }
    if (troupe_coll_broadcast(c, bc, sizeof(bc), troupe_coll_size(c) - 1, &err) != TROUPE_OK) {
        rc = fail("broadcast", &err, t0);
        goto out;
    }
    for (size_t i = 0; i < sizeof(bc); i++) {
        if (bc[i] != (unsigned char)(i * 13)) {
            printf("cw: broadcast byte %zu is %u\n", i, bc[i]);
            goto out;
        }
    }
    if (troupe_coll_barrier(c, &err) != TROUPE_OK) {
        rc = fail("barrier", &err, t0);
        goto out;
    }
    printf("cw: rank %u ok\n", troupe_coll_rank(c));
    rc = 0;
out:
    troupe_coll_close(c);
    troupe_worker_close(w);
    return rc;
}
