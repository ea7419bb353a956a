/* comm_nccl.c - the communicator on NCCL (CUDA builds with NCCL; see comm.h).
 *
 * The communicator comes from troupe_nccl_comm_init (the head hands out the
 * unique ID; non-blocking init under dp.init_timeout_ms). Device operations
 * are enqueued on the caller's stream; wait_device polls the stream and
 * ncclCommGetAsyncError until done or the deadline (dp.timeout_ms), so a rank
 * whose peer died fails with a message instead of hanging in a kernel.
 * Host operations (the loss, the stop flag, a checkpoint's broadcast) go
 * through a device scratch buffer on the communicator's own stream: they are
 * small or rare, and NCCL only reduces device memory. After any failure the
 * communicator is aborted (ncclCommAbort, never Destroy, which can hang). */
#include "comm_troupe.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "troupe/nccl.h"

typedef struct nccl_comm {
    tr_comm base;
    troupe_worker_ctx *w; /* for failure reports; borrowed */
    ncclComm_t comm;
    cudaStream_t s; /* for host operations */
    void *scratch;  /* device buffer for host operations */
    size_t scratch_bytes;
    void *pinned;   /* HOST_PINNED bytes of pinned host memory for small host operations */
    int one_rank_avg; /* TROUPE_NCCL_ONE_RANK_AVG=1: keep ncclAvg on one rank (see mean_op) */
    int failed;     /* an error was seen: refuse everything, abort at close */
    int quiet;      /* failures are not reported to the head (an elastic group goes on) */
    uint32_t epoch; /* the group's communicator epoch this one was built for */
    char name[128]; /* "policy of job 7, epoch 0, rank 0 of 2" */
} nccl_comm;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* nfail marks the communicator failed and tells the head why (as the CPU
 * collective does for its own failures), so the job names this rank. */
static int nfail(nccl_comm *nc, int code, tr_err *err, const char *what, const char *why)
{
    nc->failed = 1;
    nc->base.failed = 1;
    tr_err_set(err, code, "NCCL communicator %s: %s: %s", nc->name, what, why);
    if (!nc->quiet) {
        (void)troupe_worker_fail(nc->w, (troupe_status)code, err->msg, NULL);
    }
    return code;
}

static int refuse_if_failed(nccl_comm *nc, tr_err *err)
{
    if (nc->failed) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "NCCL communicator %s failed earlier; it only refuses now", nc->name);
    }
    return TROUPE_OK;
}

/* membership_moved: in an elastic group the head moved the communicator to
 * a newer epoch (a rank was lost, or one came back). NCCL may never notice
 * a peer that died inside a kernel on the same host (it waits on memory,
 * not a socket), so the head's word, which the control poll brings within
 * its detection time, ends the wait instead of dp.timeout_ms. A local
 * check, no network. Marks the communicator failed. */
static int membership_moved(nccl_comm *nc, tr_err *err)
{
    troupe_comm_info now = {0};
    char why[160];

    if (troupe_worker_membership(nc->w, &now, NULL) != TROUPE_OK || now.epoch <= nc->epoch) {
        return 0;
    }
    snprintf(why, sizeof(why), "the head moved the group to epoch %u (%u ranks): the ranks rejoin there",
             now.epoch, now.size);
    nfail(nc, TROUPE_UNAVAILABLE, err, "collective", why);
    return 1;
}

/* nccl_wait_device waits for stream s under the deadline, checking the
 * communicator's asynchronous error between polls. The first SPIN_US it
 * polls without sleeping: the small host operations (a step's loss, the
 * stop flag) and the tail of an overlapped gradient all-reduce end within
 * tens of microseconds, and a sleep's wake-up would double that on every
 * step. After that polls stay at most 200 us apart (a longer sleep would
 * leave the GPU idle after the all-reduce, on every step). */
#define SPIN_US 100
static int nccl_wait_device(tr_comm *c, void *stream, tr_err *err)
{
    nccl_comm *nc = (nccl_comm *)c;
    int64_t deadline = mono_ms() + c->timeout_ms;
    long sleep_us = 20;
    struct timespec t0, t1;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        ncclResult_t async = ncclSuccess;
        cudaError_t q = cudaStreamQuery((cudaStream_t)stream);
        if (q == cudaSuccess) {
            return TROUPE_OK;
        }
        if (q != cudaErrorNotReady) {
            return nfail(nc, TROUPE_UNAVAILABLE, err, "waiting for the stream", cudaGetErrorString(q));
        }
        if (ncclCommGetAsyncError(nc->comm, &async) != ncclSuccess ||
            (async != ncclSuccess && async != ncclInProgress)) {
            return nfail(nc, TROUPE_UNAVAILABLE, err, "asynchronous error (a peer failed?)",
                         ncclGetErrorString(async));
        }
        if (mono_ms() >= deadline) {
            char why[160];
            snprintf(why, sizeof(why), "not finished after %u ms (dp.timeout_ms): a rank stopped taking part",
                     c->timeout_ms);
            return nfail(nc, TROUPE_DEADLINE_EXCEEDED, err, "collective", why);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000 < SPIN_US) {
            continue;
        }
        if (nc->quiet && membership_moved(nc, err)) {
            return TROUPE_UNAVAILABLE;
        }
        struct timespec ts = {0, sleep_us * 1000};
        nanosleep(&ts, NULL);
        sleep_us = sleep_us < 200 ? sleep_us * 2 : 200;
    }
}

/* nccl_enqueued checks what an NCCL call returned. On a non-blocking
 * communicator ncclInProgress means the call is still being enqueued in the
 * background, and NCCL asks that nothing else be called on the communicator
 * until ncclCommGetAsyncError says it is done: wait for that (under the
 * deadline), so that the next bucket's call is legal. */
static int nccl_enqueued(nccl_comm *nc, ncclResult_t r, const char *what, tr_err *err)
{
    int64_t deadline = mono_ms() + nc->base.timeout_ms;

    while (r == ncclInProgress) {
        struct timespec ts = {0, 20000};
        if (ncclCommGetAsyncError(nc->comm, &r) != ncclSuccess) {
            r = ncclInternalError;
        } else if (r == ncclInProgress && mono_ms() >= deadline) {
            return nfail(nc, TROUPE_DEADLINE_EXCEEDED, err, what, "still being enqueued at the deadline");
        } else if (r == ncclInProgress) {
            nanosleep(&ts, NULL);
        }
    }
    if (r == ncclSuccess) {
        return TROUPE_OK;
    }
    return nfail(nc, TROUPE_UNAVAILABLE, err, what, ncclGetErrorString(r));
}

/* mean_op: the NCCL operation of TR_COMM_MEAN. On one rank the mean is the
 * value itself, and ncclSum in place is what NCCL then does nothing for,
 * while ncclAvg on floats is a pre-multiplied sum that runs a kernel over
 * the whole buffer even in place (x * 1.0: read and write every gradient,
 * 1 GB per step at 124M in fp32, +2.2 % step time measured on an H100).
 * TROUPE_NCCL_ONE_RANK_AVG=1 keeps ncclAvg, to measure the path with work
 * on the communication stream at world size 1. */
static ncclRedOp_t mean_op(const nccl_comm *nc)
{
    return nc->base.size == 1 && !nc->one_rank_avg ? ncclSum : ncclAvg;
}

static int nccl_allreduce_device(tr_comm *c, void *buf, size_t count, tr_comm_dtype dtype, tr_comm_op op,
                                 void *stream, tr_err *err)
{
    nccl_comm *nc = (nccl_comm *)c;
    int rv = refuse_if_failed(nc, err);

    if (rv != TROUPE_OK) {
        return rv;
    }
    return nccl_enqueued(nc,
                         ncclAllReduce(buf, buf, count, dtype == TR_COMM_BF16 ? ncclBfloat16 : ncclFloat32,
                                       op == TR_COMM_MEAN ? mean_op(nc) : ncclSum, nc->comm,
                                       (cudaStream_t)stream),
                         "ncclAllReduce", err);
}

/* nccl_group: ncclGroupStart/End around a bucket's all-reduces (one per
 * tensor slice), so NCCL launches them together. Inside a group the calls
 * only queue; on a non-blocking communicator GroupEnd may answer
 * ncclInProgress, which nccl_enqueued waits out under the deadline. */
/* In place, as NCCL defines it: this rank's segment of buf is the
 * reduce-scatter's output and the all-gather's input. */
static int nccl_reduce_scatter_device(tr_comm *c, void *buf, size_t count, tr_comm_dtype dtype, tr_comm_op op,
                                      void *stream, tr_err *err)
{
    nccl_comm *nc = (nccl_comm *)c;
    size_t per = count / (size_t)c->size, esz = dtype == TR_COMM_BF16 ? 2 : 4;
    int rv = refuse_if_failed(nc, err);

    if (rv != TROUPE_OK) {
        return rv;
    }
    return nccl_enqueued(nc,
                         ncclReduceScatter(buf, (char *)buf + (size_t)c->rank * per * esz, per,
                                           dtype == TR_COMM_BF16 ? ncclBfloat16 : ncclFloat32,
                                           op == TR_COMM_MEAN ? mean_op(nc) : ncclSum, nc->comm,
                                           (cudaStream_t)stream),
                         "ncclReduceScatter", err);
}

static int nccl_allgather_device(tr_comm *c, void *buf, size_t count, tr_comm_dtype dtype, void *stream,
                                 tr_err *err)
{
    nccl_comm *nc = (nccl_comm *)c;
    size_t per = count / (size_t)c->size, esz = dtype == TR_COMM_BF16 ? 2 : 4;
    int rv = refuse_if_failed(nc, err);

    if (rv != TROUPE_OK) {
        return rv;
    }
    return nccl_enqueued(nc,
                         ncclAllGather((char *)buf + (size_t)c->rank * per * esz, buf, per,
                                       dtype == TR_COMM_BF16 ? ncclBfloat16 : ncclFloat32, nc->comm,
                                       (cudaStream_t)stream),
                         "ncclAllGather", err);
}

static int nccl_group(tr_comm *c, int begin, tr_err *err)
{
    nccl_comm *nc = (nccl_comm *)c;
    int rv = refuse_if_failed(nc, err);

    if (rv != TROUPE_OK) {
        return rv;
    }
    return begin ? nccl_enqueued(nc, ncclGroupStart(), "ncclGroupStart", err)
                 : nccl_enqueued(nc, ncclGroupEnd(), "ncclGroupEnd", err);
}

/* nccl_broadcast_device: one ncclBroadcast of the caller's device buffer on
 * the communicator's stream (the refit's weights, GPU to GPU), waited for
 * under the deadline. NCCL splits a large broadcast into its own chunks and
 * pipelines them, so one call for the whole vector is what runs fastest. */
static int nccl_broadcast_device(tr_comm *c, void *buf, size_t count, tr_comm_dtype dtype, int root,
                                 tr_err *err)
{
    nccl_comm *nc = (nccl_comm *)c;
    int rv = refuse_if_failed(nc, err);

    if (rv == TROUPE_OK) {
        rv = nccl_enqueued(nc,
                           ncclBroadcast(buf, buf, count, dtype == TR_COMM_BF16 ? ncclBfloat16 : ncclFloat32,
                                         root, nc->comm, nc->s),
                           "ncclBroadcast (device)", err);
    }
    return rv == TROUPE_OK ? nccl_wait_device(c, nc->s, err) : rv;
}

static int scratch(nccl_comm *nc, size_t bytes, tr_err *err)
{
    cudaError_t e;

    if (bytes <= nc->scratch_bytes) {
        return TROUPE_OK;
    }
    if (nc->scratch != NULL) {
        cudaFree(nc->scratch);
        nc->scratch = NULL;
        nc->scratch_bytes = 0;
    }
    if ((e = cudaMalloc(&nc->scratch, bytes)) != cudaSuccess) {
        return nfail(nc, TROUPE_RESOURCE_EXHAUSTED, err, "scratch buffer", cudaGetErrorString(e));
    }
    nc->scratch_bytes = bytes;
    return TROUPE_OK;
}

/* Host operations go through the device in chunks of this many bytes, so
 * sharing a large model at start (a broadcast of params, m and v) needs a
 * bounded scratch buffer, not one the size of the model. */
#define HOST_CHUNK ((size_t)64 << 20)
#define HOST_PINNED ((size_t)4096)

/* host_chunk runs one host-memory collective of at most HOST_CHUNK bytes
 * through the scratch buffer: a broadcast from bcast_root (>= 0), else an
 * all-reduce of bytes / 4 floats. */
static int host_chunk(nccl_comm *nc, void *buf, size_t bytes, int bcast_root, tr_comm_op op, tr_err *err)
{
    void *user = buf;
    cudaError_t e;
    int rv;

    /* small ones (every step's loss and stop flag) through pinned memory:
     * a pageable copy is staged and waited for by the driver */
    if (nc->pinned != NULL && bytes <= HOST_PINNED) {
        memcpy(nc->pinned, user, bytes);
        buf = nc->pinned;
    }
    if ((e = cudaMemcpyAsync(nc->scratch, buf, bytes, cudaMemcpyHostToDevice, nc->s)) != cudaSuccess) {
        return nfail(nc, TROUPE_UNAVAILABLE, err, "copy to the device", cudaGetErrorString(e));
    }
    if (bcast_root >= 0) {
        rv = nccl_enqueued(
            nc, ncclBroadcast(nc->scratch, nc->scratch, bytes, ncclUint8, bcast_root, nc->comm, nc->s),
            "ncclBroadcast", err);
    } else {
        rv =
            nccl_allreduce_device(&nc->base, nc->scratch, bytes / sizeof(float), TR_COMM_F32, op, nc->s, err);
    }
    if (rv == TROUPE_OK &&
        (e = cudaMemcpyAsync(buf, nc->scratch, bytes, cudaMemcpyDeviceToHost, nc->s)) != cudaSuccess) {
        rv = nfail(nc, TROUPE_UNAVAILABLE, err, "copy to the host", cudaGetErrorString(e));
    }
    rv = rv == TROUPE_OK ? nccl_wait_device(&nc->base, nc->s, err) : rv;
    if (rv == TROUPE_OK && buf != user) {
        memcpy(user, buf, bytes);
    }
    return rv;
}

/* host_op runs a host-memory collective chunk by chunk (chunks are whole
 * floats; every rank cuts the same chunks). bytes 0 still takes part. */
static int host_op(nccl_comm *nc, void *buf, size_t bytes, int bcast_root, tr_comm_op op, tr_err *err)
{
    size_t off = 0;
    int rv = refuse_if_failed(nc, err);

    if (rv == TROUPE_OK) {
        rv = scratch(nc, bytes < HOST_CHUNK ? (bytes > 0 ? bytes : 4) : HOST_CHUNK, err);
    }
    do {
        size_t len = bytes - off < HOST_CHUNK ? bytes - off : HOST_CHUNK;
        if (rv == TROUPE_OK) {
            rv = host_chunk(nc, (char *)buf + off, len, bcast_root, op, err);
        }
        off += len;
    } while (rv == TROUPE_OK && off < bytes);
    return rv;
}

static int nccl_allreduce(tr_comm *c, float *buf, size_t count, tr_comm_op op, tr_err *err)
{
    return host_op((nccl_comm *)c, buf, count * sizeof(float), -1, op, err);
}

static int nccl_broadcast(tr_comm *c, void *buf, size_t bytes, int root, tr_err *err)
{
    return host_op((nccl_comm *)c, buf, bytes, root, TR_COMM_SUM, err);
}

static int nccl_barrier(tr_comm *c, tr_err *err)
{
    float one = 1.0f;
    return host_op((nccl_comm *)c, &one, sizeof(one), -1, TR_COMM_SUM, err);
}

static void nccl_close(tr_comm *c, int failed)
{
    nccl_comm *nc = (nccl_comm *)c;

    if (failed || nc->failed) {
        ncclCommAbort(nc->comm);
    } else {
        ncclCommDestroy(nc->comm);
    }
    if (nc->scratch != NULL) {
        cudaFree(nc->scratch);
    }
    if (nc->pinned != NULL) {
        cudaFreeHost(nc->pinned);
    }
    if (nc->s != NULL) {
        cudaStreamDestroy(nc->s);
    }
    free(nc);
}

static const tr_comm_ops nccl_ops = {
    .name = "nccl",
    .allreduce = nccl_allreduce,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .allreduce_device = nccl_allreduce_device,
    .wait_device = nccl_wait_device,
    .close = nccl_close,
    .group = nccl_group,
    .broadcast_device = nccl_broadcast_device,
    .reduce_scatter_device = nccl_reduce_scatter_device,
    .allgather_device = nccl_allgather_device,
};

int tr_comm_nccl_open(troupe_worker_ctx *w, int gpu, uint32_t init_ms, uint32_t op_ms, tr_comm **out,
                      tr_err *err)
{
    return tr_comm_nccl_open_named(w, NULL, gpu, init_ms, op_ms, out, err);
}

int tr_comm_nccl_open_named(troupe_worker_ctx *w, const char *comm, int gpu, uint32_t init_ms, uint32_t op_ms,
                            tr_comm **out, tr_err *err)
{
    return tr_comm_nccl_open_quiet(w, comm, gpu, init_ms, op_ms, 0, out, err);
}

int tr_comm_nccl_open_quiet(troupe_worker_ctx *w, const char *comm, int gpu, uint32_t init_ms, uint32_t op_ms,
                            int quiet, tr_comm **out, tr_err *err)
{
    troupe_nccl_opts o = {.comm = comm, .device = gpu, .wait_ms = init_ms};
    troupe_nccl_info info;
    troupe_error e = {0};
    nccl_comm *nc;
    cudaError_t ce;

    *out = NULL;
    if ((nc = calloc(1, sizeof(*nc))) == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot allocate the communicator");
    }
    if (troupe_nccl_comm_init(w, &o, &nc->comm, &info, &e) != TROUPE_OK) {
        free(nc);
        return tr_err_set(err, e.code, "%s", e.message);
    }
    snprintf(nc->name, sizeof(nc->name), "%s", info.name);
    nc->w = w;
    nc->quiet = quiet;
    nc->epoch = info.epoch;
    if ((ce = cudaStreamCreateWithFlags(&nc->s, cudaStreamNonBlocking)) != cudaSuccess) {
        ncclCommAbort(nc->comm);
        free(nc);
        return tr_err_set(err, TROUPE_UNAVAILABLE, "NCCL communicator %s: cudaStreamCreate: %s", info.name,
                          cudaGetErrorString(ce));
    }
    if (cudaMallocHost(&nc->pinned, HOST_PINNED) != cudaSuccess) {
        cudaGetLastError(); /* not fatal: small host operations then copy from pageable memory */
        nc->pinned = NULL;
    }
    nc->one_rank_avg = getenv("TROUPE_NCCL_ONE_RANK_AVG") != NULL && atoi(getenv("TROUPE_NCCL_ONE_RANK_AVG")) != 0;
    TR_LOG(TR_LOG_NOTICE,
           "nccl: communicator %s ready from the head's ID (%u ID%s, %s): rendezvous %llu ms, init %llu ms, "
           "warm-up all-reduce %llu ms",
           info.name, info.n_ids, info.n_ids == 1 ? "" : "s",
           info.published ? "created and published by this rank" : "received from the head",
           (unsigned long long)info.rendezvous_ms, (unsigned long long)info.init_ms,
           (unsigned long long)info.warmup_ms);
    nc->base =
        (tr_comm){.ops = &nccl_ops, .rank = (int)info.rank, .size = (int)info.size, .timeout_ms = op_ms,
                  .reports_failures = !quiet};
    *out = &nc->base;
    return TROUPE_OK;
}

void *tr_comm_nccl_handle(tr_comm *c)
{
    return c != NULL && c->ops == &nccl_ops ? (void *)((nccl_comm *)c)->comm : NULL;
}
