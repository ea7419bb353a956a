/* allreduce_bench.c - bus bandwidth of troupe-train's gradient all-reduce
 * beside a plain all-reduce of the same bytes on the same communicator, in
 * the same run (bench/mgpu; nccl-tests' algbw/busbw conventions).
 *
 *   troupe-bench-allreduce [--model 124M,350M] [--bucket-mb 25[,M...]] [--grad-dtype fp32|bf16]
 *                          [--iters N] [--warmup N] [--json FILE]
 *
 * Runs as every worker of a troupe job (one group, N workers x 1 GPU): the
 * group's communicator comes from the head exactly as troupe-train's does
 * (tr_comm_nccl_open in CUDA builds with NCCL; the worker API's CPU
 * collective otherwise, which is what a dry run on a machine without GPUs
 * measures). For each model shape the training backend is created as
 * troupe-train creates it (CUDA: bf16 weights, fp32 gradients) and:
 *   - check: one forward/backward on rank-dependent tokens, the gradient
 *     all-reduce, and every rank's gradient checksum equal to rank 0's;
 *   - "troupe": the backend's allreduce_grads, the call troupe-train makes
 *     once per step (event after backward, buckets of dp.bucket_mb on the
 *     communication stream, ncclAvg, the host's wait_device under the
 *     deadline), timed on the host, one call per iteration;
 *   - "plain-bucketed": the same buckets as bare ncclAllReduce calls on a
 *     buffer of the same size, one cudaStreamSynchronize per iteration;
 *   - "plain-one": one ncclAllReduce of all the gradient bytes per
 *     iteration, synchronised (what nccl-tests' all_reduce_perf -c 0 times);
 *   - "nccl-tests": the same single call ITERS times back to back, one
 *     synchronise at the end, time / ITERS (nccl-tests' default loop).
 * The four are interleaved per iteration so that a noisy neighbour hits all
 * alike; medians are reported. busbw = algbw x 2 (n-1) / n, algbw = bytes /
 * time. Rank 0 prints a table and writes one JSON object (--json). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "comm_troupe.h"
#include "model.h"
#include "rng.h"
#include "troupe/worker.h"

#ifdef TR_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#define TRANSPORT "nccl"
#else
#define TRANSPORT "cpu-coll"
#endif

#define MAX_LIST 8
#define N_IMPL 4
static const char *const impl_names[N_IMPL] = {"troupe", "plain-bucketed", "plain-one", "nccl-tests"};

typedef struct opts {
    const char *models[MAX_LIST];
    int n_models;
    int bucket_mb[MAX_LIST];
    int n_buckets;
    int bf16, iters, warmup;
    const char *json;
} opts;

typedef struct row {
    const char *model;
    size_t params, bytes;
    int bucket_mb;
    double ms[N_IMPL]; /* median per iteration; 0 = not measured */
} row;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int model_cfg(const char *name, tr_model_config *c)
{
    if (strcmp(name, "124M") == 0) {
        *c = (tr_model_config){12, 768, 12, 1024, 50257, 50304};
    } else if (strcmp(name, "350M") == 0) {
        *c = (tr_model_config){24, 1024, 16, 1024, 50257, 50304};
    } else if (strcmp(name, "tiny") == 0) { /* dry runs on the CPU */
        *c = (tr_model_config){2, 64, 4, 64, 64, 128};
    } else {
        return -1;
    }
    return 0;
}

static int split_list(char *s, const char **out, int max)
{
    int n = 0;
    for (char *t = strtok(s, ","); t != NULL && n < max; t = strtok(NULL, ",")) {
        out[n++] = t;
    }
    return n;
}

static int parse(opts *o, int argc, char **argv)
{
    static char models[256], buckets[256];
    const char *b[MAX_LIST];

    *o = (opts){.iters = 20, .warmup = 3};
    snprintf(models, sizeof(models), "124M,350M");
    snprintf(buckets, sizeof(buckets), "25");
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            fprintf(stderr, "troupe-bench-allreduce: %s needs a value\n", f);
            return -1;
        }
        if (strcmp(f, "--model") == 0) {
            snprintf(models, sizeof(models), "%s", v);
        } else if (strcmp(f, "--bucket-mb") == 0) {
            snprintf(buckets, sizeof(buckets), "%s", v);
        } else if (strcmp(f, "--grad-dtype") == 0 && (strcmp(v, "fp32") == 0 || strcmp(v, "bf16") == 0)) {
            o->bf16 = strcmp(v, "bf16") == 0;
        } else if (strcmp(f, "--iters") == 0 && atoi(v) > 0) {
            o->iters = atoi(v);
        } else if (strcmp(f, "--warmup") == 0 && atoi(v) >= 0) {
            o->warmup = atoi(v);
        } else if (strcmp(f, "--json") == 0) {
            o->json = v;
        } else {
            fprintf(stderr, "troupe-bench-allreduce: bad flag or value: %s %s\n", f, v);
            return -1;
        }
    }
    o->n_models = split_list(models, o->models, MAX_LIST);
    o->n_buckets = split_list(buckets, b, MAX_LIST);
    for (int i = 0; i < o->n_models; i++) {
        tr_model_config c;
        if (model_cfg(o->models[i], &c) != 0) {
            fprintf(stderr, "troupe-bench-allreduce: --model %s: expected 124M, 350M or tiny\n", o->models[i]);
            return -1;
        }
    }
    for (int i = 0; i < o->n_buckets; i++) {
        if ((o->bucket_mb[i] = atoi(b[i])) < 1) {
            fprintf(stderr, "troupe-bench-allreduce: --bucket-mb %s: expected MiB >= 1\n", b[i]);
            return -1;
        }
    }
    return o->n_models > 0 && o->n_buckets > 0 ? 0 : -1;
}

/* ---- the plain all-reduce on the same communicator --------------------------- */

typedef struct plain {
    tr_comm *c;
    size_t count; /* elements */
    int bf16;
#ifdef TR_HAVE_NCCL
    ncclComm_t nc;
    cudaStream_t s;
    void *buf;
#else
    float *buf;
#endif
} plain;

#ifdef TR_HAVE_NCCL
/* enqueued: a non-blocking communicator may answer ncclInProgress; nothing
 * else may be called on it until ncclCommGetAsyncError says done. */
static int enqueued(plain *p, ncclResult_t r, tr_err *err)
{
    while (r == ncclInProgress) {
        if (ncclCommGetAsyncError(p->nc, &r) != ncclSuccess) {
            r = ncclInternalError;
        }
    }
    return r == ncclSuccess ? TROUPE_OK : tr_err_set(err, TROUPE_UNAVAILABLE, "ncclAllReduce: %s", ncclGetErrorString(r));
}
#endif

static int plain_open(plain *p, tr_comm *c, size_t count, int bf16, tr_err *err)
{
    *p = (plain){.c = c, .count = count, .bf16 = bf16};
#ifdef TR_HAVE_NCCL
    cudaError_t ce;
    if ((p->nc = (ncclComm_t)tr_comm_nccl_handle(c)) == NULL) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "the communicator is not NCCL's");
    }
    if ((ce = cudaStreamCreateWithFlags(&p->s, cudaStreamNonBlocking)) != cudaSuccess ||
        (ce = cudaMalloc(&p->buf, count * (bf16 ? 2 : 4))) != cudaSuccess ||
        (ce = cudaMemset(p->buf, 0, count * (bf16 ? 2 : 4))) != cudaSuccess) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "plain buffer of %zu elements: %s", count,
                          cudaGetErrorString(ce));
    }
#else
    if ((p->buf = calloc(count, sizeof(float))) == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "plain buffer of %zu floats", count);
    }
#endif
    return TROUPE_OK;
}

static void plain_close(plain *p)
{
#ifdef TR_HAVE_NCCL
    if (p->buf != NULL) {
        cudaFree(p->buf);
    }
    if (p->s != NULL) {
        cudaStreamDestroy(p->s);
    }
#else
    free(p->buf);
#endif
    p->buf = NULL;
}

/* plain_run: `calls` all-reduces of `per` elements each (the last one
 * shorter) covering the buffer, `reps` times, then one synchronisation. */
static int plain_run(plain *p, size_t per, int reps, tr_err *err)
{
    int rv = TROUPE_OK;
    for (int r = 0; r < reps && rv == TROUPE_OK; r++) {
        for (size_t off = 0; off < p->count && rv == TROUPE_OK; off += per) {
            size_t len = p->count - off < per ? p->count - off : per;
#ifdef TR_HAVE_NCCL
            char *at = (char *)p->buf + off * (p->bf16 ? 2 : 4);
            rv = enqueued(p,
                          ncclAllReduce(at, at, len, p->bf16 ? ncclBfloat16 : ncclFloat32, ncclAvg, p->nc, p->s),
                          err);
#else
            rv = p->c->ops->allreduce(p->c, p->buf + off, len, TR_COMM_MEAN, err);
#endif
        }
    }
#ifdef TR_HAVE_NCCL
    if (rv == TROUPE_OK) {
        /* the same deadline and async-error checks as troupe-train's wait */
        rv = p->c->ops->wait_device(p->c, p->s, err);
    }
#endif
    return rv;
}

/* ---- one model ------------------------------------------------------------------ */

static int create_backend(const tr_model_config *cfg, const opts *o, int bucket_mb, tr_backend **b,
                          tr_err *err)
{
    tr_backend_opts bo = {.micro_batch = 1,
                          .precision = TR_PRECISION_BF16,
                          .recompute = 1,
                          .device = 0,
                          .dp_bucket_bytes = (size_t)bucket_mb << 20,
                          .dp_grad_bf16 = o->bf16};
#ifdef TR_HAVE_CUDA
    return tr_backend_cuda_create(cfg, &bo, b, err);
#else
    bo.precision = TR_PRECISION_FP32;
    return tr_backend_cpu_create(cfg, &bo, b, err);
#endif
}

/* check: after one backward on this rank's own tokens and the all-reduce,
 * every rank holds rank 0's gradients (checksum broadcast from rank 0). */
static int check(tr_backend *b, tr_comm *c, const tr_model_config *cfg, tr_err *err)
{
    int T = cfg->seq_len < 64 ? cfg->seq_len : 64, rv;
    int32_t in[64], tg[64];
    float loss, *g = malloc(b->num_params * sizeof(float)), *p = malloc(b->num_params * sizeof(float));
    double sum[2] = {0, 0}, root[2];
    float bad;
    uint64_t rng = 1000 + (uint64_t)c->rank;

    if (g == NULL || p == NULL) {
        free(g), free(p);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of host memory");
    }
    tr_model_init_params(cfg, 1, p);
    for (int i = 0; i < T; i++) {
        in[i] = (int32_t)tr_rng_below(&rng, (uint64_t)cfg->vocab);
        tg[i] = (int32_t)tr_rng_below(&rng, (uint64_t)cfg->vocab);
    }
    if ((rv = b->ops->set_params(b, p, err)) == TROUPE_OK && (rv = b->ops->zero_grads(b, err)) == TROUPE_OK &&
        (rv = b->ops->forward_backward(b, in, tg, 1, T, 1.0f, &loss, err)) == TROUPE_OK &&
        (rv = b->ops->allreduce_grads(b, c, err)) == TROUPE_OK && (rv = b->ops->sync(b, err)) == TROUPE_OK &&
        (rv = b->ops->get_grads(b, g, err)) == TROUPE_OK) {
        for (size_t i = 0; i < b->num_params; i++) {
            sum[0] += g[i];
            sum[1] += (double)g[i] * (double)(i % 1009);
        }
        memcpy(root, sum, sizeof(root));
        rv = c->ops->broadcast(c, root, sizeof(root), 0, err);
    }
    if (rv == TROUPE_OK) {
        bad = memcmp(root, sum, sizeof(root)) != 0;
        rv = c->ops->allreduce(c, &bad, 1, TR_COMM_SUM, err);
        if (rv == TROUPE_OK && bad != 0) {
            rv = tr_err_set(err, TROUPE_DATA_LOSS,
                            "after the all-reduce %.0f rank(s) hold other gradients than rank 0 (checksum %.17g, "
                            "rank 0 %.17g)",
                            bad, sum[0], root[0]);
        }
    }
    free(g), free(p);
    return rv;
}

static int bench_model(const char *name, const opts *o, tr_comm *c, row *rows, int *nrows, tr_err *err)
{
    tr_model_config cfg;
    tr_backend *b = NULL;
    plain p = {0};
    double *t[N_IMPL] = {0};
    int rv;

    model_cfg(name, &cfg);
    if ((rv = create_backend(&cfg, o, o->bucket_mb[0], &b, err)) != TROUPE_OK ||
        (rv = check(b, c, &cfg, err)) != TROUPE_OK ||
        (rv = plain_open(&p, c, b->num_params, o->bf16, err)) != TROUPE_OK) {
        goto out;
    }
    for (int k = 0; k < N_IMPL; k++) {
        if ((t[k] = calloc((size_t)o->iters, sizeof(double))) == NULL) {
            rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of host memory");
            goto out;
        }
    }
    for (int bi = 0; bi < o->n_buckets; bi++) {
        size_t per = ((size_t)o->bucket_mb[bi] << 20) / (o->bf16 ? 2 : 4);
        row *r = &rows[(*nrows)++];
        b->opts.dp_bucket_bytes = (size_t)o->bucket_mb[bi] << 20; /* read by every allreduce_grads call */
        *r = (row){.model = name, .params = b->num_params, .bytes = b->num_params * (o->bf16 ? 2 : 4),
                   .bucket_mb = o->bucket_mb[bi]};
        for (int it = -o->warmup; it < o->iters; it++) {
            double t0;
            /* every rank starts each measurement together, the GPU idle */
            if ((rv = b->ops->sync(b, err)) != TROUPE_OK || (rv = c->ops->barrier(c, err)) != TROUPE_OK) {
                goto out;
            }
            t0 = now_ms();
            if ((rv = b->ops->allreduce_grads(b, c, err)) != TROUPE_OK || (rv = b->ops->sync(b, err)) != TROUPE_OK) {
                goto out;
            }
            double t1 = now_ms();
            if ((rv = plain_run(&p, per, 1, err)) != TROUPE_OK) {
                goto out;
            }
            double t2 = now_ms();
            if ((rv = plain_run(&p, p.count, 1, err)) != TROUPE_OK) {
                goto out;
            }
            double t3 = now_ms();
            if (it >= 0) {
                t[0][it] = t1 - t0, t[1][it] = t2 - t1, t[2][it] = t3 - t2;
            }
        }
        /* nccl-tests' loop: ITERS calls back to back, one wait */
        if ((rv = c->ops->barrier(c, err)) != TROUPE_OK) {
            goto out;
        }
        double t0 = now_ms();
        if ((rv = plain_run(&p, p.count, o->iters, err)) != TROUPE_OK) {
            goto out;
        }
        r->ms[3] = (now_ms() - t0) / o->iters;
        for (int k = 0; k < 3; k++) {
            r->ms[k] = median(t[k], o->iters);
        }
        /* the mean over the ranks: each measurement starts at a barrier and
         * a collective ends on every rank at about the same time */
        for (int k = 0; k < N_IMPL; k++) {
            float v = (float)r->ms[k];
            if ((rv = c->ops->allreduce(c, &v, 1, TR_COMM_MEAN, err)) != TROUPE_OK) {
                goto out;
            }
            r->ms[k] = v;
        }
    }
out:
    for (int k = 0; k < N_IMPL; k++) {
        free(t[k]);
    }
    plain_close(&p);
    if (b != NULL) {
        b->ops->destroy(b);
    }
    return rv;
}

static double busbw(const row *r, int n, int k)
{
    return r->ms[k] > 0 ? (double)r->bytes / (r->ms[k] * 1e-3) / 1e9 * 2.0 * (n - 1) / n : 0;
}

static void report(const opts *o, const row *rows, int nrows, int n, const char *device)
{
    printf("all-reduce of the gradients over %d rank(s) (%s, %s gradients, %s): median ms and bus bandwidth GB/s\n", n,
           TRANSPORT, o->bf16 ? "bf16" : "fp32", device);
    printf("%-5s %10s %9s %6s", "model", "params", "MiB", "bucket");
    for (int k = 0; k < N_IMPL; k++) {
        printf(" %14s %7s", impl_names[k], "busbw");
    }
    printf(" %12s\n", "troupe/plain");
    for (int i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        printf("%-5s %10zu %9.1f %6d", r->model, r->params, r->bytes / 1048576.0, r->bucket_mb);
        for (int k = 0; k < N_IMPL; k++) {
            printf(" %14.3f %7.1f", r->ms[k], busbw(r, n, k));
        }
        printf(" %12.3f\n", r->ms[1] > 0 ? r->ms[1] / r->ms[0] : 0);
    }
    if (o->json == NULL) {
        return;
    }
    FILE *f = fopen(o->json, "w");
    if (f == NULL) {
        fprintf(stderr, "troupe-bench-allreduce: cannot write %s\n", o->json);
        return;
    }
    fprintf(f, "{\"transport\":\"%s\",\"device\":\"%s\",\"ranks\":%d,\"grad_dtype\":\"%s\",\"iters\":%d,\"rows\":[",
            TRANSPORT, device, n, o->bf16 ? "bf16" : "fp32", o->iters);
    for (int i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        fprintf(f, "%s{\"model\":\"%s\",\"params\":%zu,\"bytes\":%zu,\"bucket_mb\":%d", i ? "," : "", r->model,
                r->params, r->bytes, r->bucket_mb);
        for (int k = 0; k < N_IMPL; k++) {
            fprintf(f, ",\"%s_ms\":%.6g,\"%s_busbw_GBps\":%.6g", impl_names[k], r->ms[k], impl_names[k],
                    busbw(r, n, k));
        }
        fprintf(f, ",\"troupe_over_plain_bucketed\":%.6g}", r->ms[1] > 0 ? r->ms[1] / r->ms[0] : 0);
    }
    fprintf(f, "]}\n");
    fclose(f);
}

int main(int argc, char **argv)
{
    opts o;
    troupe_worker_ctx *w = NULL;
    troupe_error e = {0};
    tr_comm *c = NULL;
    tr_err err = {0};
    row rows[MAX_LIST * MAX_LIST];
    int nrows = 0, rv;
    char device[256] = "cpu";

    if (parse(&o, argc, argv) != 0) {
        fprintf(stderr, "usage: troupe-bench-allreduce [--model 124M,350M] [--bucket-mb 25[,M...]] "
                        "[--grad-dtype fp32|bf16] [--iters N] [--warmup N] [--json FILE]\n");
        return 2;
    }
    if (troupe_worker_open(&w, NULL, &e) != TROUPE_OK) {
        fprintf(stderr, "troupe-bench-allreduce: run it as a troupe job's workers: %s\n", e.message);
        return 2;
    }
#ifdef TR_HAVE_NCCL
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
        snprintf(device, sizeof(device), "%s", prop.name);
    }
    rv = tr_comm_nccl_open(w, 0, 600000, 300000, &c, &err);
#else
    rv = tr_comm_coll_open(w, 600000, 300000, &c, &err);
#endif
    for (int i = 0; i < o.n_models && rv == TROUPE_OK; i++) {
        rv = bench_model(o.models[i], &o, c, rows, &nrows, &err);
    }
    if (rv == TROUPE_OK && c->rank == 0) {
        report(&o, rows, nrows, c->size, device);
    }
    if (rv != TROUPE_OK) {
        fprintf(stderr, "troupe-bench-allreduce: %s\n", err.msg);
        (void)troupe_worker_fail(w, (troupe_status)rv, err.msg, NULL);
    }
    tr_comm_close(c, rv != TROUPE_OK);
    troupe_worker_close(w);
    return rv == TROUPE_OK ? 0 : 1;
}
