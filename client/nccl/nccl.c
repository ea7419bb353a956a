/* nccl.c - troupe_nccl_comm_init (troupe/nccl.h): rendezvous, non-blocking
 * init under a deadline, warm-up all-reduce, ncclCommAbort on any failure. */
#include "troupe/nccl.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "nccl_wait.h"

#define DEFAULT_WAIT_MS 300000u

typedef struct init_ctx {
    troupe_worker_ctx *w;
    const char *comm;
    troupe_nccl_info *info;
    uint64_t deadline;
    char what[256];
} init_ctx;

static uint32_t left_ms(const init_ctx *c)
{
    uint64_t t = tr_nccl_now_ms();
    return t >= c->deadline ? 1u : (uint32_t)(c->deadline - t);
}

/* poll_comm: the communicator's pending operation (init or a collective). */
static int poll_comm(void *user, char *why, size_t len)
{
    ncclComm_t comm = user;
    ncclResult_t st = ncclSuccess, rc = ncclCommGetAsyncError(comm, &st);

    if (rc != ncclSuccess) {
        snprintf(why, len, "ncclCommGetAsyncError: %s", ncclGetErrorString(rc));
        return -1;
    }
    if (st == ncclInProgress) {
        return 0;
    }
    if (st != ncclSuccess) {
        snprintf(why, len, "%s (%s)", ncclGetErrorString(st), ncclGetLastError(comm));
        return -1;
    }
    return 1;
}

typedef struct warm_poll {
    ncclComm_t comm;
    cudaStream_t stream;
} warm_poll;

/* poll_warm: the all-reduce kernel finished on the stream, and NCCL saw no
 * error meanwhile (a peer gone fails here, not by hanging). */
static int poll_warm(void *user, char *why, size_t len)
{
    warm_poll *p = user;
    int r = poll_comm(p->comm, why, len);
    if (r <= 0) {
        return r;
    }
    cudaError_t ce = cudaStreamQuery(p->stream);
    if (ce == cudaErrorNotReady) {
        return 0;
    }
    if (ce != cudaSuccess) {
        snprintf(why, len, "cudaStreamQuery: %s", cudaGetErrorString(ce));
        return -1;
    }
    return 1;
}

/* rendezvous: rank 0 creates and publishes the IDs, the others wait. */
static troupe_status rendezvous(init_ctx *c, const troupe_nccl_opts *o, ncclUniqueId *ids, troupe_error *err)
{
    troupe_comm_info ci = {0};
    size_t n = o->n_ids == 0 ? 1 : o->n_ids, got = 0;
    troupe_status st = troupe_worker_comm_info(c->w, c->comm, &ci, err);

    if (st != TROUPE_OK) {
        return st;
    }
    if (n > TROUPE_MAX_NCCL_IDS) {
        return tr_nccl_err(err, TROUPE_INVALID_ARGUMENT, "n_ids %zu: at most %d", n, TROUPE_MAX_NCCL_IDS);
    }
    if (ci.rank == 0) {
        for (size_t i = 0; i < n; i++) {
            ncclResult_t rc = ncclGetUniqueId(&ids[i]);
            if (rc != ncclSuccess) {
                return tr_nccl_err(err, TROUPE_UNAVAILABLE, "ncclGetUniqueId: %s (%s)",
                                   ncclGetErrorString(rc), ncclGetLastError(NULL));
            }
        }
        st = troupe_worker_publish_ids(c->w, c->comm, ids, n, &ci, err);
        got = n;
        c->info->published = 1;
    } else {
        st = troupe_worker_wait_ids(c->w, c->comm, ids, TROUPE_MAX_NCCL_IDS, &got, left_ms(c), &ci, err);
    }
    if (st == TROUPE_OK) {
        c->info->epoch = ci.epoch;
        c->info->rank = ci.rank;
        c->info->size = ci.size;
        c->info->n_ids = (uint32_t)got;
    }
    return st;
}

/* fail_abort aborts comm and says why, naming the communicator. */
static troupe_status fail_abort(init_ctx *c, ncclComm_t comm, troupe_status code, const char *reason,
                                troupe_error *err)
{
    char msg[sizeof(err->message)];
    snprintf(msg, sizeof(msg), "%s", reason);
    if (comm != NULL) {
        ncclCommAbort(comm);
    }
    return tr_nccl_err(err, code, "NCCL communicator %s: %s; aborted (ncclCommAbort)%s", c->info->name, msg,
                       code == TROUPE_DEADLINE_EXCEEDED ? ": a rank did not join in time, see troupe job"
                                                        : "");
}

static troupe_status init_comm(init_ctx *c, const ncclUniqueId *ids, ncclComm_t *comm, troupe_error *err)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclResult_t rc;
    troupe_error e = {0};
    troupe_status st;
    const char *fn = c->info->n_ids > 1 ? "ncclCommInitRankScalable" : "ncclCommInitRankConfig";

    cfg.blocking = 0;
    if (c->info->n_ids > 1) {
        rc = ncclCommInitRankScalable(comm, (int)c->info->size, (int)c->info->rank, (int)c->info->n_ids,
                                      (ncclUniqueId *)ids, &cfg);
    } else {
        rc = ncclCommInitRankConfig(comm, (int)c->info->size, ids[0], (int)c->info->rank, &cfg);
    }
    if (rc != ncclSuccess && rc != ncclInProgress) {
        snprintf(e.message, sizeof(e.message), "%s: %s (%s)", fn, ncclGetErrorString(rc),
                 ncclGetLastError(*comm));
        return fail_abort(c, *comm, TROUPE_UNAVAILABLE, e.message, err);
    }
    st = tr_nccl_wait(NULL, poll_comm, *comm, c->deadline, fn, &e);
    if (st != TROUPE_OK) {
        return fail_abort(c, *comm, st, e.message, err);
    }
    return TROUPE_OK;
}

/* warmup all-reduces one float of 1.0 per rank and checks the sum. */
static troupe_status warmup(init_ctx *c, ncclComm_t comm, troupe_error *err)
{
    warm_poll p = {.comm = comm};
    float one = 1.0f, sum = 0.0f, *buf = NULL;
    troupe_error e = {0};
    troupe_status st = TROUPE_UNAVAILABLE;
    cudaError_t ce = cudaStreamCreateWithFlags(&p.stream, cudaStreamNonBlocking);

    if (ce == cudaSuccess) {
        ce = cudaMalloc((void **)&buf, sizeof(float));
    }
    if (ce == cudaSuccess) {
        ce = cudaMemcpyAsync(buf, &one, sizeof(float), cudaMemcpyHostToDevice, p.stream);
    }
    if (ce != cudaSuccess) {
        snprintf(e.message, sizeof(e.message), "warm-up buffers: %s", cudaGetErrorString(ce));
        goto out;
    }
    ncclResult_t rc = ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm, p.stream);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        snprintf(e.message, sizeof(e.message), "warm-up ncclAllReduce: %s (%s)", ncclGetErrorString(rc),
                 ncclGetLastError(comm));
        goto out;
    }
    st = tr_nccl_wait(NULL, poll_warm, &p, c->deadline, "warm-up ncclAllReduce", &e);
    if (st != TROUPE_OK) {
        goto out;
    }
    ce = cudaMemcpy(&sum, buf, sizeof(float), cudaMemcpyDeviceToHost);
    if (ce != cudaSuccess || sum != (float)c->info->size) {
        st = TROUPE_UNAVAILABLE;
        snprintf(e.message, sizeof(e.message), "warm-up ncclAllReduce: %s",
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "wrong sum");
        if (ce == cudaSuccess) {
            snprintf(e.message, sizeof(e.message), "warm-up ncclAllReduce summed %g, want %u", (double)sum,
                     c->info->size);
        }
    }
out:
    if (buf != NULL) {
        cudaFree(buf);
    }
    if (p.stream != NULL) {
        cudaStreamDestroy(p.stream);
    }
    return st == TROUPE_OK ? TROUPE_OK : fail_abort(c, comm, st, e.message, err);
}

static troupe_status comm_init(troupe_worker_ctx *w, const troupe_nccl_opts *opts, ncclComm_t *out,
                               troupe_nccl_info *info, troupe_error *err)
{
    static const troupe_nccl_opts none = {.device = -1};
    const troupe_nccl_opts *o = opts != NULL ? opts : &none;
    const troupe_worker_self *self = troupe_worker_self_info(w);
    troupe_nccl_info local;
    init_ctx c = {.w = w, .comm = o->comm != NULL && o->comm[0] != '\0' ? o->comm : NULL};
    ncclUniqueId ids[TROUPE_MAX_NCCL_IDS];
    ncclComm_t comm = NULL;
    troupe_status st;
    uint64_t t0 = tr_nccl_now_ms(), t1;

    if (out == NULL) {
        return tr_nccl_err(err, TROUPE_INVALID_ARGUMENT, "troupe_nccl_comm_init: out is NULL");
    }
    *out = NULL;
    c.info = info != NULL ? info : &local;
    memset(c.info, 0, sizeof(*c.info));
    c.deadline = t0 + (o->wait_ms != 0 ? o->wait_ms : DEFAULT_WAIT_MS);
    if (o->device >= 0) {
        cudaError_t ce = cudaSetDevice(o->device);
        if (ce != cudaSuccess) {
            return tr_nccl_err(err, TROUPE_UNAVAILABLE, "cudaSetDevice(%d): %s", o->device,
                               cudaGetErrorString(ce));
        }
    }
    st = rendezvous(&c, o, ids, err);
    if (st != TROUPE_OK) {
        return st;
    }
    snprintf(c.info->name, sizeof(c.info->name), "%s of job %llu, epoch %u, rank %u of %u",
             c.comm != NULL ? c.comm : self->group, (unsigned long long)self->job_id, c.info->epoch,
             c.info->rank, c.info->size);
    t1 = tr_nccl_now_ms();
    c.info->rendezvous_ms = t1 - t0;
    st = init_comm(&c, ids, &comm, err);
    if (st != TROUPE_OK) {
        return st;
    }
    c.info->init_ms = tr_nccl_now_ms() - t1;
    if (!o->no_warmup) {
        t1 = tr_nccl_now_ms();
        st = warmup(&c, comm, err);
        if (st != TROUPE_OK) {
            return st;
        }
        c.info->warmup_ms = tr_nccl_now_ms() - t1;
    }
    *out = comm;
    return TROUPE_OK;
}

/* The public call reports a failure to the head (troupe_worker_fail) before
 * it returns, so a job whose communicator never forms names the first rank
 * that gave up and why (deadline, a peer's error, the abort). A caller's
 * INVALID_ARGUMENT is its own to handle. */
TROUPE_API troupe_status troupe_nccl_comm_init(troupe_worker_ctx *w, const troupe_nccl_opts *opts,
                                               ncclComm_t *out, troupe_nccl_info *info, troupe_error *err)
{
    troupe_error local = {0};
    troupe_error *e = err != NULL ? err : &local;
    troupe_status st = comm_init(w, opts, out, info, e);
    char reason[sizeof(e->message) + 32];

    if (st != TROUPE_OK && st != TROUPE_INVALID_ARGUMENT && w != NULL) {
        snprintf(reason, sizeof(reason), "NCCL init: %s", e->message);
        (void)troupe_worker_fail(w, st, reason, NULL);
    }
    return st;
}
