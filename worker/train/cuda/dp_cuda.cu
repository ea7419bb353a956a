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
 * the end and waits. */
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
 * stream as one group. bf16: every slice is rounded into the staging buffer
 * first and widened back after, outside the group (NCCL launches a group's
 * work at its end, so a kernel queued inside it would run before it). */
static int reduce_slices(cu_backend *cb, tr_comm *c, const slice *sl, int n, tr_err *err)
{
    const int bf = cb->base.opts.dp_grad_bf16;
    int rv = TROUPE_OK;

    for (int i = 0; bf && i < n; i++) {
        TR_CU_TRY(tr_cu_convert<bf16>((bf16 *)cb->comm_bf16 + sl[i].off, cb->grads + sl[i].off, sl[i].len,
                                      cb->comm_s));
    }
    if (c->ops->group != NULL) {
        TR_TRY(c->ops->group(c, 1, err));
    }
    for (int i = 0; i < n; i++) {
        void *buf = bf ? (void *)((bf16 *)cb->comm_bf16 + sl[i].off) : (void *)(cb->grads + sl[i].off);
        TR_TRY(c->ops->allreduce_device(c, buf, sl[i].len, bf ? TR_COMM_BF16 : TR_COMM_F32, TR_COMM_MEAN,
                                        cb->comm_s, err));
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

int tr_cu_dp_issue(cu_backend *cb, tr_err *err)
{
    const int L = cb->base.cfg.layers, bf = cb->base.opts.dp_grad_bf16;
    tr_comm *c = cb->dp_comm;
    size_t per = cb->base.opts.dp_bucket_bytes / (bf ? sizeof(bf16) : sizeof(float)), layer = 0;
    slice sl[TR_NUM_PARAM_TENSORS];
    int rv = TROUPE_OK, n;

    for (int i = TR_P_LN1W; i <= TR_P_FCPROJB; i++) {
        layer += cb->base.param_sizes[i] / (size_t)L;
    }
    for (int hi = L - 1, lo = 0; hi >= 0; hi = lo - 1) {
        size_t got = layer;
        for (lo = hi; lo > 0 && got < per; lo--) {
            got += layer;
        }
        /* layers lo..hi: block lo's backward ends last among them */
        TR_CU_TRY(cudaStreamWaitEvent(cb->comm_s, cb->ev_layer[lo], 0));
        n = 0;
        for (int i = TR_P_LN1W; i <= TR_P_FCPROJB; i++) {
            size_t each = cb->base.param_sizes[i] / (size_t)L;
            sl[n++] = (slice){cb->offs[i] + (size_t)lo * each, (size_t)(hi - lo + 1) * each};
        }
        TR_TRY(reduce_slices(cb, c, sl, n, err));
    }
    TR_CU_TRY(cudaStreamWaitEvent(cb->comm_s, cb->ev_layer[L], 0));
    sl[0] = (slice){cb->offs[TR_P_WTE], cb->offs[TR_P_LN1W] - cb->offs[TR_P_WTE]}; /* wte, wpe */
    sl[1] = (slice){cb->offs[TR_P_LNFW], cb->offs[TR_NUM_PARAM_TENSORS] - cb->offs[TR_P_LNFW]};
    TR_TRY(reduce_slices(cb, c, sl, 2, err));
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
    for (size_t off = 0; off < n; off += per) {
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
    /* comm_bf16 is in cb->allocs, freed with the rest */
}
