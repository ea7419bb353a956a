/* dp_cuda.cu - data-parallel gradient all-reduce of the CUDA backend.
 *
 * After the last micro-batch's backward the fp32 gradients are averaged over
 * the ranks through the communicator's device path (NCCL, comm_nccl.c) in
 * buckets of dp.bucket_mb, on a communication stream of their own: an event
 * recorded on the compute stream after backward gates the first bucket, and
 * an event recorded after the last gates the compute stream's next work
 * (norm, AdamW), so nothing is copied through the host and the order is
 * kept by the device. With dp.grad_dtype bf16 each bucket is rounded to bf16
 * into a staging buffer, reduced as bf16 (half the bytes on the wire) and
 * widened back into the fp32 gradients. The host then waits for the
 * communication stream under dp.timeout_ms, checking NCCL's asynchronous
 * errors (wait_device), so a rank whose peer died fails with a message
 * instead of blocking in a kernel forever.
 *
 * Overlap (dp.overlap, the default): train.c calls allreduce_start before
 * the last micro-batch's forward_backward; that backward (eager or a graph
 * of its own slot) records ev_layer[l] as soon as block l's backward is done
 * and ev_layer[L] at its end, and right after launching it the host queues
 * every bucket on the communication stream behind the event of the last
 * layer it holds (tr_cu_dp_issue). A bucket is a run of whole layers, at
 * least dp.bucket_mb, backward order; since the parameters are stored per
 * tensor kind (every layer's qkvw together, ...), a bucket is one slice per
 * kind (12), all-reduced in one NCCL group. The last bucket holds wte (tied:
 * the encoder's backward adds to it last), wpe and the final LayerNorm.
 * NCCL stays outside the captured graph: the graph holds only the events
 * (external event nodes), so the communicator's deadline and asynchronous
 * error checks work as on the eager path. allreduce_grads then only records
 * the end and waits.
 *
 * ZeRO-1 (dp.zero 1): the same buckets, each slice reduce-scattered instead
 * of all-reduced (its tail of fewer than N elements all-reduced; zero.h),
 * so each rank ends with the mean gradient of its piece of every slice.
 * The norm sums the squares of the shard's gradients (read in place
 * through the runs table, which maps each shard element to its place in the
 * flat vector), added over the ranks on the host; AdamW runs over the shard
 * only (m and v are shard-sized, the gradient and weights read in place) and
 * writes the shard's master and its bf16 copy; then the pieces of the bf16
 * copy the next forward reads are all-gathered on the communication stream
 * (half the bytes of the fp32 master; in fp32 precision the master itself),
 * and the compute stream waits for that. The master outside the shard is
 * then stale (master_stale) until gather_params all-gathers it too, which
 * the checkpoint and the refit ask for; get_params and the refit refuse a
 * stale master rather than hand out old weights. The gather is not run
 * behind the next forward: bucket by bucket with the forward waiting per
 * layer it cost more than it hid on 2 H200s (bench/RESULTS.md, ZeRO-1;
 * likely the gather's kernels slowing the forward's GEMMs). */
#include <stdlib.h>

#include "cu_backend.h"

__global__ static void bf16_to_f32_kernel(float *dst, const bf16 *src, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        dst[i] = __bfloat162float(src[i]);
    }
}

/* dp_setup creates the communication stream and events (and the bf16
 * staging buffer) on first use. */
static int dp_setup(cu_backend *cb, int bf16_grads, tr_err *err)
{
    int rv = TROUPE_OK;

    if (cb->comm_s == NULL) {
        TR_CU_TRY(cudaStreamCreateWithFlags(&cb->comm_s, cudaStreamNonBlocking));
        TR_CU_TRY(cudaEventCreateWithFlags(&cb->ev_grads, cudaEventDisableTiming));
        TR_CU_TRY(cudaEventCreateWithFlags(&cb->ev_reduced, cudaEventDisableTiming));
    }
    if (cb->base.opts.dp_overlap && cb->ev_layer == NULL) {
        int n = cb->base.cfg.layers + 1;
        cb->ev_layer = (cudaEvent_t *)calloc((size_t)n, sizeof(cudaEvent_t));
        if (cb->ev_layer == NULL) {
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of host memory");
        }
        for (int i = 0; i < n; i++) {
            TR_CU_TRY(cudaEventCreateWithFlags(&cb->ev_layer[i], cudaEventDisableTiming));
        }
    }
    if (bf16_grads && cb->comm_bf16 == NULL) {
        TR_TRY(tr_cu_alloc(cb, &cb->comm_bf16, cb->base.num_params * sizeof(bf16), err));
    }
out:
    return rv;
}

static int need_device_comm(const tr_comm *c, tr_err *err);

/* zero_check_comm: a sharded rank reduces over the ranks it was sharded for,
 * on a transport with device reduce-scatter and all-gather. */
static int zero_check_comm(const cu_backend *cb, const tr_comm *c, tr_err *err)
{
    if (c->ops->reduce_scatter_device == NULL || c->ops->allgather_device == NULL) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "dp.zero 1 on the cuda backend needs device reduce-scatter and all-gather (NCCL), "
                          "got %s: set dp.zero 0",
                          c->ops->name);
    }
    if (c->rank != cb->base.opts.dp_rank || c->size != cb->base.opts.dp_size) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "cuda backend sharded for rank %d of %d, the communicator is rank %d of %d",
                          cb->base.opts.dp_rank, cb->base.opts.dp_size, c->rank, c->size);
    }
    return TROUPE_OK;
}

static int need_device_comm(const tr_comm *c, tr_err *err)
{
    if (c->ops->allreduce_device == NULL || c->ops->wait_device == NULL) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "the cuda backend needs a communicator with device all-reduce (NCCL), got %s",
                          c->ops->name);
    }
    return TROUPE_OK;
}

int tr_cu_allreduce_start(cu_backend *cb, tr_comm *c, tr_err *err)
{
    int rv = TROUPE_OK;

    if (!cb->base.opts.dp_overlap) {
        return TROUPE_OK; /* allreduce_grads does it all after backward */
    }
    TR_TRY(need_device_comm(c, err));
    if (cb->base.opts.dp_zero) {
        TR_TRY(zero_check_comm(cb, c, err));
    }
    TR_CU_TRY(cudaSetDevice(cb->dev));
    TR_TRY(dp_setup(cb, cb->base.opts.dp_grad_bf16, err));
    cb->dp_comm = c;
    cb->dp_armed = 1;
    cb->dp_issued = 0;
out:
    return rv;
}

/* slice is a run of the flat gradient vector that one NCCL call reduces */
typedef struct slice {
    size_t off, len;
} slice;

/* reduce_slices queues the all-reduce of n slices on the communication
 * stream as one group (with dp.zero 1: the reduce-scatter of each slice's
 * even part and the all-reduce of its tail). bf16: every slice is rounded
 * into the staging buffer first and widened back after, outside the group
 * (NCCL launches a group's work at its end, so a kernel queued inside it
 * would run before it). */
static int reduce_slices(cu_backend *cb, tr_comm *c, const slice *sl, int n, tr_err *err)
{
    const int bf = cb->base.opts.dp_grad_bf16, zero = cb->base.opts.dp_zero;
    const tr_comm_dtype dt = bf ? TR_COMM_BF16 : TR_COMM_F32;
    int rv = TROUPE_OK;

    for (int i = 0; bf && i < n; i++) {
        TR_CU_TRY(tr_cu_convert<bf16>((bf16 *)cb->comm_bf16 + sl[i].off, cb->grads + sl[i].off, sl[i].len,
                                      cb->comm_s));
    }
    if (c->ops->group != NULL) {
        TR_TRY(c->ops->group(c, 1, err));
    }
    for (int i = 0; i < n; i++) {
        size_t even = zero ? sl[i].len / (size_t)c->size * (size_t)c->size : 0;
        char *buf = bf ? (char *)((bf16 *)cb->comm_bf16 + sl[i].off) : (char *)(cb->grads + sl[i].off);
        size_t esz = bf ? sizeof(bf16) : sizeof(float);
        if (even > 0) {
            TR_TRY(c->ops->reduce_scatter_device(c, buf, even, dt, TR_COMM_MEAN, cb->comm_s, err));
        }
        if (sl[i].len > even) {
            TR_TRY(c->ops->allreduce_device(c, buf + even * esz, sl[i].len - even, dt, TR_COMM_MEAN,
                                            cb->comm_s, err));
        }
    }
    if (c->ops->group != NULL) {
        TR_TRY(c->ops->group(c, 0, err));
    }
    for (int i = 0; bf && i < n; i++) {
        bf16_to_f32_kernel<<<1024, 256, 0, cb->comm_s>>>(cb->grads + sl[i].off,
                                                         (const bf16 *)cb->comm_bf16 + sl[i].off, sl[i].len);
        TR_CU_TRY(cudaGetLastError());
    }
out:
    return rv;
}

int tr_cu_dp_plan(cu_backend *cb, tr_err *err)
{
    const int L = cb->base.cfg.layers, bf = cb->base.opts.dp_grad_bf16;
    const tr_backend_opts *o = &cb->base.opts;
    size_t per = o->dp_bucket_bytes / (bf ? sizeof(bf16) : sizeof(float)), layer = 0;
    int nsl = 0, nb = 0;

    cb->plan_sl = (tr_zero_range *)calloc((size_t)L * TR_NUM_PARAM_TENSORS + 2, sizeof(tr_zero_range));
    cb->plan_first = (int *)calloc((size_t)L + 2, sizeof(int));
    cb->plan_ev = (int *)calloc((size_t)L + 1, sizeof(int));
    if (cb->plan_sl == NULL || cb->plan_first == NULL || cb->plan_ev == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of host memory");
    }
    for (int i = TR_P_LN1W; i <= TR_P_FCPROJB; i++) {
        layer += cb->base.param_sizes[i] / (size_t)L;
    }
    for (int hi = L - 1, lo = 0; hi >= 0; hi = lo - 1) {
        size_t got = layer;
        for (lo = hi; lo > 0 && got < per; lo--) {
            got += layer;
        }
        /* layers lo..hi: block lo's backward ends last among them */
        cb->plan_first[nb] = nsl;
        cb->plan_ev[nb++] = lo;
        for (int i = TR_P_LN1W; i <= TR_P_FCPROJB; i++) {
            size_t each = cb->base.param_sizes[i] / (size_t)L;
            cb->plan_sl[nsl++] =
                (tr_zero_range){cb->offs[i] + (size_t)lo * each, (size_t)(hi - lo + 1) * each};
        }
    }
    cb->plan_first[nb] = nsl;
    cb->plan_ev[nb++] = L;
    cb->plan_sl[nsl++] =
        (tr_zero_range){cb->offs[TR_P_WTE], cb->offs[TR_P_LN1W] - cb->offs[TR_P_WTE]}; /* wte, wpe */
    cb->plan_sl[nsl++] =
        (tr_zero_range){cb->offs[TR_P_LNFW], cb->offs[TR_NUM_PARAM_TENSORS] - cb->offs[TR_P_LNFW]};
    cb->plan_first[nb] = nsl;
    cb->plan_nsl = nsl;
    cb->plan_nb = nb;
    /* without dp.zero the map is one rank holding all: m and v whole */
    return tr_zero_map_init(&cb->zmap, cb->plan_sl, nsl, o->dp_zero ? o->dp_rank : 0,
                            o->dp_zero ? o->dp_size : 1, err);
}

/* plan_bucket queues bucket k of the plan (its slices as one group). */
static int plan_bucket(cu_backend *cb, tr_comm *c, int k, tr_err *err)
{
    const int first = cb->plan_first[k], n = cb->plan_first[k + 1] - first;
    slice sl[TR_NUM_PARAM_TENSORS];

    for (int i = 0; i < n; i++) {
        sl[i] = (slice){cb->plan_sl[first + i].off, cb->plan_sl[first + i].len};
    }
    return reduce_slices(cb, c, sl, n, err);
}

int tr_cu_dp_issue(cu_backend *cb, tr_err *err)
{
    int rv = TROUPE_OK;

    for (int k = 0; k < cb->plan_nb; k++) {
        TR_CU_TRY(cudaStreamWaitEvent(cb->comm_s, cb->ev_layer[cb->plan_ev[k]], 0));
        TR_TRY(plan_bucket(cb, cb->dp_comm, k, err));
    }
    cb->dp_issued = 1;
out:
    return rv;
}

int tr_cu_allreduce_grads(cu_backend *cb, tr_comm *c, tr_err *err)
{
    const int bf = cb->base.opts.dp_grad_bf16;
    const size_t n = cb->base.num_params;
    size_t per = cb->base.opts.dp_bucket_bytes / (bf ? sizeof(bf16) : sizeof(float));
    int rv = TROUPE_OK;

    TR_TRY(need_device_comm(c, err));
    per = per > 0 ? per : 1;
    TR_CU_TRY(cudaSetDevice(cb->dev));
    if (cb->base.opts.dp_zero) {
        TR_TRY(zero_check_comm(cb, c, err));
        cb->zcomm = c;
    }
    if (cb->dp_issued && cb->dp_comm == c) { /* queued during backward (overlap): only the end is left */
        cb->dp_issued = 0;
        TR_CU_TRY(cudaEventRecord(cb->ev_reduced, cb->comm_s));
        TR_CU_TRY(cudaStreamWaitEvent(cb->s, cb->ev_reduced, 0));
        return c->ops->wait_device(c, cb->comm_s, err);
    }
    cb->dp_issued = 0;
    TR_TRY(dp_setup(cb, bf, err));
    TR_CU_TRY(cudaEventRecord(cb->ev_grads, cb->s));
    TR_CU_TRY(cudaStreamWaitEvent(cb->comm_s, cb->ev_grads, 0));
    for (int k = 0; cb->base.opts.dp_zero && k < cb->plan_nb; k++) {
        TR_TRY(plan_bucket(cb, c, k, err)); /* the shard map follows the plan's slices */
    }
    for (size_t off = 0; !cb->base.opts.dp_zero && off < n; off += per) {
        size_t len = n - off < per ? n - off : per;
        if (bf) {
            bf16 *stage = (bf16 *)cb->comm_bf16 + off;
            TR_CU_TRY(tr_cu_convert<bf16>(stage, cb->grads + off, len, cb->comm_s));
            TR_TRY(c->ops->allreduce_device(c, stage, len, TR_COMM_BF16, TR_COMM_MEAN, cb->comm_s, err));
            bf16_to_f32_kernel<<<1024, 256, 0, cb->comm_s>>>(cb->grads + off, stage, len);
            TR_CU_TRY(cudaGetLastError());
        } else {
            TR_TRY(c->ops->allreduce_device(c, cb->grads + off, len, TR_COMM_F32, TR_COMM_MEAN, cb->comm_s,
                                            err));
        }
    }
    TR_CU_TRY(cudaEventRecord(cb->ev_reduced, cb->comm_s));
    TR_CU_TRY(cudaStreamWaitEvent(cb->s, cb->ev_reduced, 0));
    rv = c->ops->wait_device(c, cb->comm_s, err);
out:
    return rv;
}

void tr_cu_dp_destroy(cu_backend *cb)
{
    if (cb->comm_s != NULL) {
        cudaStreamSynchronize(cb->comm_s);
        cudaStreamDestroy(cb->comm_s);
    }
    if (cb->ev_grads != NULL) {
        cudaEventDestroy(cb->ev_grads);
    }
    if (cb->ev_reduced != NULL) {
        cudaEventDestroy(cb->ev_reduced);
    }
    for (int i = 0; cb->ev_layer != NULL && i <= cb->base.cfg.layers; i++) {
        if (cb->ev_layer[i] != NULL) {
            cudaEventDestroy(cb->ev_layer[i]);
        }
    }
    free(cb->ev_layer);
    if (cb->ev_updated != NULL) {
        cudaEventDestroy(cb->ev_updated);
    }
    if (cb->ev_gathered != NULL) {
        cudaEventDestroy(cb->ev_gathered);
    }
    free(cb->plan_sl);
    free(cb->plan_first);
    free(cb->plan_ev);
    tr_zero_map_fini(&cb->zmap);
    /* comm_bf16 and zruns_dev are in cb->allocs, freed with the rest */
}

/* ---- ZeRO-1: the shard's kernels ------------------------------------------- */

typedef struct zrun {
    size_t off, len, soff;
} zrun;

/* find_run: the run holding shard element k (runs sorted by soff). */
__device__ static int find_run(const zrun *r, int n, size_t k)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (r[mid].soff <= k) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

/* pack: shard[k] = flat[its place]; unpack the other way */
__global__ static void zero_move_kernel(float *dst, const float *src, const zrun *runs, int nruns,
                                        size_t shard, int pack)
{
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < shard;
         k += (size_t)gridDim.x * blockDim.x) {
        const zrun r = runs[find_run(runs, nruns, k)];
        size_t j = r.off + (k - r.soff);
        if (pack) {
            dst[k] = src[j];
        } else {
            dst[j] = src[k];
        }
    }
}

/* Squares of g over the shard's first n elements, one partial per block
 * (then summed by zero_partials_kernel, in a fixed order). */
__global__ static void zero_sumsq_kernel(float *partial, const float *g, const zrun *runs, int nruns,
                                         size_t n)
{
    __shared__ float sh[32];
    float acc = 0.0f;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        const zrun r = runs[find_run(runs, nruns, k)];
        float x = g[r.off + (k - r.soff)];
        acc += x * x;
    }
    acc = tr_block_sum(acc, sh);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = acc;
    }
}

__global__ static void zero_partials_kernel(float *out, const float *partial, int n)
{
    __shared__ float sh[32];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        acc += partial[i];
    }
    acc = tr_block_sum(acc, sh);
    if (threadIdx.x == 0) {
        out[0] = acc;
    }
}

/* The arithmetic of adamw_kernel (kernels_misc.cu), element by element over
 * the shard: m, v packed; gradient, master and param at the element's flat
 * place. */
template <typename T>
__global__ static void zero_adamw_kernel(T *param, float *master, const float *grad, float *m, float *v,
                                         const zrun *runs, int nruns, size_t shard, tr_cu_adamw_args a)
{
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < shard;
         k += (size_t)gridDim.x * blockDim.x) {
        const zrun r = runs[find_run(runs, nruns, k)];
        size_t j = r.off + (k - r.soff);
        int t = 0;
        while (t < 15 && j >= a.offs[t + 1]) {
            t++;
        }
        float wd = (a.decay_mask >> t) & 1u ? a.wd : 0.0f;
        float gk = grad[j] * a.grad_scale;
        float mk = a.beta1 * m[k] + (1.0f - a.beta1) * gk;
        float vk = a.beta2 * v[k] + (1.0f - a.beta2) * gk * gk;
        float mh = mk / a.bc1, vh = vk / a.bc2, p = master[j];
        p -= a.lr * (mh / (sqrtf(vh) + a.eps) + wd * p);
        m[k] = mk;
        v[k] = vk;
        master[j] = p;
        if (param != nullptr) {
            param[j] = tr_from_f<T>(p);
        }
    }
}

static unsigned zero_blocks(size_t n)
{
    size_t b = (n + 255) / 256;
    return b > 132 * 16 ? 132 * 16 : b > 0 ? (unsigned)b : 1;
}

int tr_cu_zero_alloc(cu_backend *cb, tr_err *err)
{
    const tr_zero_map *zm = &cb->zmap;
    zrun *h = (zrun *)calloc((size_t)zm->nruns + 1, sizeof(zrun));
    int rv = TROUPE_OK;

    if (h == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of host memory");
    }
    for (int k = 0; k < zm->nruns; k++) {
        h[k] = (zrun){zm->runs[k].off, zm->runs[k].len, zm->runs[k].soff};
    }
    TR_TRY(tr_cu_alloc(cb, &cb->zruns_dev, ((size_t)zm->nruns + 1) * sizeof(zrun), err));
    TR_CU_TRY(cudaMemcpy(cb->zruns_dev, h, ((size_t)zm->nruns + 1) * sizeof(zrun), cudaMemcpyHostToDevice));
    TR_CU_TRY(cudaEventCreateWithFlags(&cb->ev_updated, cudaEventDisableTiming));
    TR_CU_TRY(cudaEventCreateWithFlags(&cb->ev_gathered, cudaEventDisableTiming));
out:
    free(h);
    return rv;
}

/* zero_move queues a pack (flat -> shard) or unpack on stream s. */
static cudaError_t zero_move(cu_backend *cb, float *dst, const float *src, int pack, cudaStream_t s)
{
    const tr_zero_map *zm = &cb->zmap;
    zero_move_kernel<<<zero_blocks(zm->shard), 256, 0, s>>>(dst, src, (const zrun *)cb->zruns_dev, zm->nruns,
                                                            zm->shard, pack);
    return cudaGetLastError();
}

static int zero_need_comm(cu_backend *cb, const char *what, tr_err *err)
{
    if (cb->zcomm == NULL) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "cuda backend: %s with dp.zero 1 needs allreduce_grads first (it names the ranks)",
                          what);
    }
    return TROUPE_OK;
}

int tr_cu_zero_norm(cu_backend *cb, float *norm, tr_err *err)
{
    const tr_zero_map *zm = &cb->zmap;
    float part;
    int rv = TROUPE_OK;

    TR_TRY(zero_need_comm(cb, "the gradient norm", err));
    /* the pieces, and on rank 0 also the tails every rank holds */
    zero_sumsq_kernel<<<TR_CU_SUMSQ_BLOCKS, 256, 0, cb->s>>>(cb->norm_partial, cb->grads,
                                                             (const zrun *)cb->zruns_dev, zm->nruns,
                                                             zm->rank == 0 ? zm->shard : zm->pieces);
    zero_partials_kernel<<<1, 1024, 0, cb->s>>>(cb->norm_dev, cb->norm_partial, TR_CU_SUMSQ_BLOCKS);
    TR_CU_TRY(cudaGetLastError());
    TR_CU_TRY(cudaMemcpyAsync(cb->h_scalar, cb->norm_dev, sizeof(float), cudaMemcpyDeviceToHost, cb->s));
    TR_CU_TRY(cudaStreamSynchronize(cb->s));
    part = *cb->h_scalar;
    TR_TRY(cb->zcomm->ops->allreduce(cb->zcomm, &part, 1, TR_COMM_SUM, err));
    *norm = sqrtf(part);
out:
    return rv;
}

/* zero_gather queues the all-gather of x's pieces (every slice's even part;
 * x of dtype) on the communication stream, behind the compute stream's work
 * so far; the compute stream then waits for it. */
static int zero_gather(cu_backend *cb, tr_comm *c, void *x, tr_comm_dtype dtype, tr_err *err)
{
    const size_t esz = dtype == TR_COMM_BF16 ? sizeof(bf16) : sizeof(float);
    int rv = TROUPE_OK;

    TR_CU_TRY(cudaEventRecord(cb->ev_updated, cb->s));
    TR_CU_TRY(cudaStreamWaitEvent(cb->comm_s, cb->ev_updated, 0));
    if (c->ops->group != NULL) {
        TR_TRY(c->ops->group(c, 1, err));
    }
    for (int i = 0; i < cb->zmap.nranges; i++) {
        size_t even = tr_zero_even(&cb->zmap, i);
        if (even > 0) {
            TR_TRY(c->ops->allgather_device(c, (char *)x + cb->zmap.ranges[i].off * esz, even, dtype,
                                            cb->comm_s, err));
        }
    }
    if (c->ops->group != NULL) {
        TR_TRY(c->ops->group(c, 0, err));
    }
    TR_CU_TRY(cudaEventRecord(cb->ev_gathered, cb->comm_s));
    TR_CU_TRY(cudaStreamWaitEvent(cb->s, cb->ev_gathered, 0));
out:
    return rv;
}

int tr_cu_zero_adamw(cu_backend *cb, const tr_cu_adamw_args *a, tr_err *err)
{
    const tr_zero_map *zm = &cb->zmap;
    const zrun *runs = (const zrun *)cb->zruns_dev;
    tr_comm *c = cb->zcomm;
    int rv = TROUPE_OK;

    TR_TRY(zero_need_comm(cb, "the AdamW update", err));
    if (cb->bf16) {
        zero_adamw_kernel<bf16><<<zero_blocks(zm->shard), 256, 0, cb->s>>>(
            (bf16 *)cb->params, cb->master, cb->grads, cb->m, cb->v, runs, zm->nruns, zm->shard, *a);
    } else {
        zero_adamw_kernel<float><<<zero_blocks(zm->shard), 256, 0, cb->s>>>(
            (float *)nullptr, cb->master, cb->grads, cb->m, cb->v, runs, zm->nruns, zm->shard, *a);
    }
    TR_CU_TRY(cudaGetLastError());
    if (cb->bf16) {
        TR_TRY(zero_gather(cb, c, cb->params, TR_COMM_BF16, err));
        cb->master_stale = c->size > 1;
    } else {
        TR_TRY(zero_gather(cb, c, cb->master, TR_COMM_F32, err));
    }
    cb->zcomm = NULL;
    rv = c->ops->wait_device(c, cb->comm_s, err);
out:
    return rv;
}

/* host_shard copies the device shard x to a new host buffer (*out). */
static int host_shard(cu_backend *cb, const float *x, float **out, tr_err *err)
{
    int rv = TROUPE_OK;

    *out = (float *)malloc((cb->zmap.shard + 1) * sizeof(float));
    if (*out == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot allocate the optimiser shard's host copy");
    }
    TR_CU_TRY(cudaSetDevice(cb->dev));
    TR_CU_TRY(cudaMemcpyAsync(*out, x, cb->zmap.shard * sizeof(float), cudaMemcpyDeviceToHost, cb->s));
    TR_CU_TRY(cudaStreamSynchronize(cb->s));
out:
    return rv;
}

int tr_cu_zero_get_opt(cu_backend *cb, float *m, float *v, tr_err *err)
{
    float *h = NULL;
    int rv = host_shard(cb, cb->m, &h, err);

    if (rv == TROUPE_OK) {
        tr_zero_unpack(&cb->zmap, h, m);
        free(h);
        h = NULL;
        rv = host_shard(cb, cb->v, &h, err);
    }
    if (rv == TROUPE_OK) {
        tr_zero_unpack(&cb->zmap, h, v);
    }
    free(h);
    return rv;
}

int tr_cu_zero_set_opt(cu_backend *cb, const float *m, const float *v, tr_err *err)
{
    size_t bytes = cb->zmap.shard * sizeof(float);
    float *h = (float *)malloc(2 * bytes + 1);
    int rv = TROUPE_OK;

    if (h == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot allocate the optimiser shard's host copy");
    }
    tr_zero_pack(&cb->zmap, m, h);
    tr_zero_pack(&cb->zmap, v, h + cb->zmap.shard);
    TR_CU_TRY(cudaSetDevice(cb->dev));
    TR_CU_TRY(cudaMemcpyAsync(cb->m, h, bytes, cudaMemcpyHostToDevice, cb->s));
    TR_CU_TRY(cudaMemcpyAsync(cb->v, h + cb->zmap.shard, bytes, cudaMemcpyHostToDevice, cb->s));
    TR_CU_TRY(cudaStreamSynchronize(cb->s));
out:
    free(h);
    return rv;
}

/* tr_cu_zero_gather_opt: the gradients are free between steps, so each of m
 * and v is unpacked into them, its pieces all-gathered there and copied out;
 * they are zeroed after, a valid state for the next zero_grads. */
int tr_cu_zero_gather_opt(cu_backend *cb, tr_comm *c, float *m, float *v, tr_err *err)
{
    const size_t n = cb->base.num_params;
    float *dst[2] = {m, v};
    const float *src[2] = {cb->m, cb->v};
    int rv = TROUPE_OK;

    TR_TRY(zero_check_comm(cb, c, err));
    TR_CU_TRY(cudaSetDevice(cb->dev));
    TR_TRY(dp_setup(cb, cb->base.opts.dp_grad_bf16, err));
    for (int i = 0; i < 2; i++) {
        TR_CU_TRY(zero_move(cb, cb->grads, src[i], 0, cb->s));
        TR_TRY(zero_gather(cb, c, cb->grads, TR_COMM_F32, err));
        TR_TRY(c->ops->wait_device(c, cb->comm_s, err));
        TR_CU_TRY(cudaMemcpyAsync(dst[i], cb->grads, n * sizeof(float), cudaMemcpyDeviceToHost, cb->s));
        TR_CU_TRY(cudaStreamSynchronize(cb->s));
    }
    TR_CU_TRY(cudaMemsetAsync(cb->grads, 0, n * sizeof(float), cb->s));
    TR_CU_TRY(cudaStreamSynchronize(cb->s));
out:
    return rv;
}

int tr_cu_zero_gather_master(cu_backend *cb, tr_comm *c, tr_err *err)
{
    int rv = TROUPE_OK;

    if (!cb->master_stale) {
        return TROUPE_OK;
    }
    TR_TRY(zero_check_comm(cb, c, err));
    TR_CU_TRY(cudaSetDevice(cb->dev));
    TR_TRY(zero_gather(cb, c, cb->master, TR_COMM_F32, err));
    TR_TRY(c->ops->wait_device(c, cb->comm_s, err));
    cb->master_stale = 0;
out:
    return rv;
}

int tr_cu_master_current(const cu_backend *cb, const char *what, tr_err *err)
{
    if (cb->master_stale) {
        return tr_err_set(
            err, TROUPE_FAILED_PRECONDITION,
            "cuda backend: %s needs the whole fp32 master, which dp.zero 1 keeps current on this "
            "rank's shard only: call gather_params on every rank first",
            what);
    }
    return TROUPE_OK;
}
