/* coll_bench - the CPU collective's all-reduce (client/lib/coll.c: a ring of
 * nng pair sockets, reduce-scatter then all-gather) between N processes over
 * TCP on loopback, as workers on one node would run it; gloo_bench.py does the
 * same with PyTorch's gloo backend so run.sh can put them side by side.
 *
 *   coll_bench [--ranks 2,4,8] [--sizes 4,1024,65536,1048576,...] [--json FILE]
 *
 * For every rank count the parent forks that many ranks; each listens on
 * tcp://127.0.0.1:0 and the parent hands every rank the others' ports (so no
 * head is involved: this measures the transport and the algorithm). For every
 * size (bytes of float32) each rank runs 2 warm-up all-reduces, then ITERS
 * timed ones, each after a barrier; rank 0's time of each is kept and the
 * median reported, with the algorithm bandwidth (bytes / time) and the bus
 * bandwidth (algbw * 2 (n-1) / n, as nccl-tests count it: what each link
 * carries). Every result is checked: each rank adds rank+1 to its buffer, so
 * every element must be n (n+1) / 2. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coll.h"

#define MAX_RANKS 64
#define MAX_SIZES 32

typedef struct result {
    uint32_t ranks;
    uint64_t bytes;
    uint32_t iters;
    double median_us, min_us;
} result;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int parse_list(const char *s, uint64_t *out, int max)
{
    int n = 0;
    char *end;
    while (*s != '\0' && n < max) {
        out[n++] = strtoull(s, &end, 10);
        if (end == s) {
            return -1;
        }
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

static uint32_t iters_for(uint64_t bytes)
{
    uint64_t it = (64ull << 20) / (bytes ? bytes : 1); /* ~64 MiB of all-reduce per size and rank count */
    return it < 5 ? 5 : it > 200 ? 200 : (uint32_t)it;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* rank_main runs one rank; rank 0 writes its results to out_fd. */
static int rank_main(uint32_t rank, uint32_t n, int port_fd, int urls_fd, int out_fd, const uint64_t *sizes,
                     int n_sizes)
{
    char urls[MAX_RANKS][64], names[MAX_RANKS][32];
    const char *up[MAX_RANKS], *np[MAX_RANKS];
    troupe_coll *c = NULL;
    int port = 0;
    tr_err e = {0};

    if (tr_coll_listen(&c, rank, n, "tcp://127.0.0.1:0", 120000, &port, &e) != TROUPE_OK ||
        write(port_fd, &port, sizeof(port)) != sizeof(port)) {
        fprintf(stderr, "rank %u: listen: %s\n", rank, e.msg);
        return 1;
    }
    for (uint32_t r = 0; r < n; r++) {
        int p;
        if (read(urls_fd, &p, sizeof(p)) != sizeof(p)) {
            return 1;
        }
        snprintf(urls[r], sizeof(urls[r]), "tcp://127.0.0.1:%d", p);
        snprintf(names[r], sizeof(names[r]), "rank %u", r);
        up[r] = urls[r];
        np[r] = names[r];
    }
    if (tr_coll_connect(c, up, np, &e) != TROUPE_OK) {
        fprintf(stderr, "rank %u: connect: %s\n", rank, e.msg);
        return 1;
    }
    for (int s = 0; s < n_sizes; s++) {
        size_t count = sizes[s] / sizeof(float);
        uint32_t iters = iters_for(sizes[s]);
        float *buf = malloc((count ? count : 1) * sizeof(float));
        double *t = calloc(iters, sizeof(double));
        float want = (float)n * (float)(n + 1) / 2.0f;
        result res = {n, sizes[s], iters, 0, 0};
        if (buf == NULL || t == NULL) {
            return 1;
        }
        for (uint32_t i = 0; i < 2 + iters; i++) {
            int64_t t0;
            for (size_t k = 0; k < count; k++) {
                buf[k] = (float)(rank + 1);
            }
            if (tr_coll_barrier(c, &e) != TROUPE_OK) {
                fprintf(stderr, "rank %u: barrier: %s\n", rank, e.msg);
                return 1;
            }
            t0 = now_ns();
            if (tr_coll_allreduce(c, buf, count, TROUPE_F32, TROUPE_SUM, &e) != TROUPE_OK) {
                fprintf(stderr, "rank %u: all-reduce: %s\n", rank, e.msg);
                return 1;
            }
            if (i >= 2) {
                t[i - 2] = (double)(now_ns() - t0) / 1e3;
            }
            if (count > 0 && (buf[0] != want || buf[count - 1] != want)) {
                fprintf(stderr, "rank %u: wrong sum %g (want %g)\n", rank, buf[0], want);
                return 1;
            }
        }
        qsort(t, iters, sizeof(double), cmp_double);
        res.median_us = t[iters / 2];
        res.min_us = t[0];
        if (rank == 0 && write(out_fd, &res, sizeof(res)) != sizeof(res)) {
            return 1;
        }
        free(buf);
        free(t);
    }
    tr_coll_close(c);
    return 0;
}

/* run_ranks forks n ranks, introduces them, collects rank 0's results. */
static int run_ranks(uint32_t n, const uint64_t *sizes, int n_sizes, result *out)
{
    int port_pipe[MAX_RANKS][2], url_pipe[MAX_RANKS][2], res_pipe[2], ports[MAX_RANKS], ok = 1;
    pid_t pids[MAX_RANKS];

    if (pipe(res_pipe) != 0) {
        return -1;
    }
    for (uint32_t r = 0; r < n; r++) {
        if (pipe(port_pipe[r]) != 0 || pipe(url_pipe[r]) != 0) {
            return -1;
        }
        if ((pids[r] = fork()) == 0) {
            close(res_pipe[0]);
            _exit(rank_main(r, n, port_pipe[r][1], url_pipe[r][0], res_pipe[1], sizes, n_sizes));
        }
        close(port_pipe[r][1]);
        close(url_pipe[r][0]);
    }
    close(res_pipe[1]);
    for (uint32_t r = 0; r < n; r++) {
        if (read(port_pipe[r][0], &ports[r], sizeof(int)) != sizeof(int)) {
            ok = 0;
        }
        close(port_pipe[r][0]);
    }
    for (uint32_t r = 0; ok && r < n; r++) {
        if (write(url_pipe[r][1], ports, n * sizeof(int)) != (ssize_t)(n * sizeof(int))) {
            ok = 0;
        }
    }
    for (uint32_t r = 0; r < n; r++) {
        close(url_pipe[r][1]);
    }
    for (int s = 0; ok && s < n_sizes; s++) {
        if (read(res_pipe[0], &out[s], sizeof(out[s])) != sizeof(out[s])) {
            ok = 0;
        }
    }
    close(res_pipe[0]);
    for (uint32_t r = 0; r < n; r++) {
        int st;
        if (!ok) {
            kill(pids[r], SIGKILL);
        }
        if (waitpid(pids[r], &st, 0) != pids[r] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            ok = 0;
        }
    }
    return ok ? 0 : -1;
}

static void human(uint64_t bytes, char *buf, size_t size)
{
    if (bytes >= (1u << 20)) {
        snprintf(buf, size, "%" PRIu64 " MiB", bytes >> 20);
    } else if (bytes >= 1024) {
        snprintf(buf, size, "%" PRIu64 " KiB", bytes >> 10);
    } else {
        snprintf(buf, size, "%" PRIu64 " B", bytes);
    }
}

int main(int argc, char **argv)
{
    uint64_t ranks[16], sizes[MAX_SIZES];
    int n_ranks = parse_list("2,4,8", ranks, 16);
    int n_sizes = parse_list("4,1024,65536,1048576,4194304,16777216,67108864,268435456", sizes, MAX_SIZES);
    const char *json = NULL;
    FILE *jf = NULL;
    int first = 1;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
            n_ranks = parse_list(argv[++i], ranks, 16);
        } else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
            n_sizes = parse_list(argv[++i], sizes, MAX_SIZES);
        } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            json = argv[++i];
        } else {
            fprintf(stderr, "usage: coll_bench [--ranks 2,4,8] [--sizes BYTES,...] [--json FILE]\n");
            return 2;
        }
    }
    if (n_ranks <= 0 || n_sizes <= 0) {
        fprintf(stderr, "coll_bench: bad --ranks or --sizes\n");
        return 2;
    }
    if (json != NULL && (jf = fopen(json, "w")) == NULL) {
        fprintf(stderr, "coll_bench: cannot write %s: %s\n", json, strerror(errno));
        return 1;
    }
    if (jf != NULL) {
        fprintf(jf, "{\"impl\":\"troupe\",\"results\":[");
    }
    printf("troupe CPU collective all-reduce (f32 sum, ring over nng/TCP loopback), %ld cores\n",
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("%5s %10s %6s %12s %12s %12s %12s\n", "ranks", "size", "iters", "median_us", "min_us", "algbw_GB/s",
           "busbw_GB/s");
    for (int r = 0; r < n_ranks; r++) {
        result res[MAX_SIZES];
        if (ranks[r] < 1 || ranks[r] > MAX_RANKS) {
            fprintf(stderr, "coll_bench: %" PRIu64 " ranks: 1 to %d\n", ranks[r], MAX_RANKS);
            return 2;
        }
        if (run_ranks((uint32_t)ranks[r], sizes, n_sizes, res) != 0) {
            fprintf(stderr, "coll_bench: %" PRIu64 " ranks failed\n", ranks[r]);
            return 1;
        }
        for (int s = 0; s < n_sizes; s++) {
            double algbw = res[s].median_us > 0 ? (double)res[s].bytes / res[s].median_us / 1e3 : 0;
            double busbw = algbw * 2.0 * (double)(res[s].ranks - 1) / (double)res[s].ranks;
            char h[32];
            human(res[s].bytes, h, sizeof(h));
            printf("%5u %10s %6u %12.1f %12.1f %12.3f %12.3f\n", res[s].ranks, h, res[s].iters, res[s].median_us,
                   res[s].min_us, algbw, busbw);
            if (jf != NULL) {
                fprintf(jf,
                        "%s{\"ranks\":%u,\"bytes\":%" PRIu64 ",\"iters\":%u,\"median_us\":%.1f,\"min_us\":%.1f,"
                        "\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f}",
                        first ? "" : ",", res[s].ranks, res[s].bytes, res[s].iters, res[s].median_us,
                        res[s].min_us, algbw, busbw);
                first = 0;
            }
        }
        fflush(stdout);
    }
    if (jf != NULL) {
        fprintf(jf, "]}\n");
        fclose(jf);
    }
    return 0;
}
