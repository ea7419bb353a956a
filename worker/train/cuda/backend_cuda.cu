/* backend_cuda.cu - the CUDA implementation of backend.h: setup, memory, the
 * ops table, the optimizer step and the small public extras of train_cuda.h.
 *
 * All device work goes on one non-blocking stream. forward_backward and
 * forward_loss wait for it at the end, because they return the loss; the
 * other ops return with work queued, and sync() waits. */
#include <cuda_profiler_api.h>
#include <math.h>
#include <nvtx3/nvToolsExt.h>
#include <stdlib.h>
#include <string.h>

#include "cu_backend.h"

extern "C" {
#include "train_cuda.h"
}

extern const tr_backend_ops tr_cu_ops; /* defined at the end */

int tr_cu_alloc(cu_backend *cb, void **p, size_t bytes, tr_err *err)
{
    int rv = TROUPE_OK;
    *p = NULL;
    if (cb->nallocs == TR_CU_MAX_ALLOCS) {
        return tr_err_set(err, TROUPE_INTERNAL, "cuda backend: more than %d allocations", TR_CU_MAX_ALLOCS);
    }
    TR_CU_TRY(cudaMalloc(p, bytes));
    cb->allocs[cb->nallocs++] = *p;
    cb->in_use += bytes;
    if (cb->in_use > cb->peak) {
        cb->peak = cb->in_use;
    }
out:
    if (rv != TROUPE_OK) {
        tr_err_prefix(err, "allocating %zu bytes", bytes);
    }
    return rv;
}

#define ALLOC(ptr, bytes) TR_TRY(tr_cu_alloc(cb, (void **)&(ptr), (bytes), err))

static void cuda_destroy(tr_backend *b)
{
    cu_backend *cb = (cu_backend *)b;
    if (cb == NULL) {
        return;
    }
    cudaSetDevice(cb->dev);
    if (cb->s != NULL) {
        cudaStreamSynchronize(cb->s);
    }
    for (int i = 0; i < cb->nallocs; i++) {
        cudaFree(cb->allocs[i]);
    }
    for (int i = 0; i < 5; i++) {
        if (cb->ev[i] != NULL) {
            cudaEventDestroy(cb->ev[i]);
        }
    }
    cudaFreeHost(cb->h_inputs);
    cudaFreeHost(cb->h_targets);
    cudaFreeHost(cb->h_scalar);
    for (int i = 0; i < TR_CU_GRAPH_SLOTS; i++) {
        if (cb->graph_exec[i] != NULL) {
            cudaGraphExecDestroy(cb->graph_exec[i]);
        }
    }
    tr_cu_dp_destroy(cb);
    tr_cu_gemm_destroy(cb->gemm);
    if (cb->s != NULL) {
        cudaStreamDestroy(cb->s);
    }
    free(cb->layers);
    free(cb);
}

/* alloc_params: the parameter vector in T, fp32 master (aliases it in fp32
 * mode), gradients and AdamW moments, all zeroed. */
static int alloc_params(cu_backend *cb, tr_err *err)
{
    int rv = TROUPE_OK;
    size_t n = cb->base.num_params;
    ALLOC(cb->master, n * sizeof(float));
    cb->params = cb->master;
    if (cb->bf16) {
        ALLOC(cb->params, n * sizeof(bf16));
        TR_CU_TRY(cudaMemsetAsync(cb->params, 0, n * sizeof(bf16), cb->s));
    }
    ALLOC(cb->grads, n * sizeof(float));
    /* AdamW's moments: this rank's shard only with dp.zero 1 */
    ALLOC(cb->m, cb->zmap.shard * sizeof(float));
    ALLOC(cb->v, cb->zmap.shard * sizeof(float));
    TR_CU_TRY(cudaMemsetAsync(cb->master, 0, n * sizeof(float), cb->s));
    TR_CU_TRY(cudaMemsetAsync(cb->grads, 0, n * sizeof(float), cb->s));
    TR_CU_TRY(cudaMemsetAsync(cb->m, 0, cb->zmap.shard * sizeof(float), cb->s));
    TR_CU_TRY(cudaMemsetAsync(cb->v, 0, cb->zmap.shard * sizeof(float), cb->s));
    if (cb->base.opts.dp_zero) {
        TR_TRY(tr_cu_zero_alloc(cb, err));
    }
out:
    return rv;
}

/* alloc_reference_attention: the T x T probabilities per layer and one
 * scratch of the same size, for the reference attention kernels only. */
static int alloc_reference_attention(cu_backend *cb, tr_err *err)
{
    int rv = TROUPE_OK;
    const tr_model_config *c = &cb->base.cfg;
    size_t att = (size_t)cb->base.opts.micro_batch * c->heads * c->seq_len * c->seq_len * cb->esz;
    if (cb->att_scratch != NULL) {
        return TROUPE_OK;
    }
    for (int l = 0; l < c->layers; l++) {
        ALLOC(cb->layers[l].att, att);
    }
    ALLOC(cb->att_scratch, att);
out:
    return rv;
}

static int alloc_activations(cu_backend *cb, tr_err *err)
{
    int rv = TROUPE_OK;
    const tr_model_config *c = &cb->base.cfg;
    size_t bt = cb->cap_bt, C = c->width, e = cb->esz, btc = bt * C * e;
    cb->layers = (cu_layer *)calloc(c->layers, sizeof(cu_layer));
    if (cb->layers == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of host memory");
    }
    for (int l = 0; l < c->layers; l++) {
        cu_layer *ly = &cb->layers[l];
        ALLOC(ly->ln1, btc);
        ALLOC(ly->qkv, 3 * btc);
        ALLOC(ly->atty, btc);
        ALLOC(ly->res2, btc);
        ALLOC(ly->ln2, btc);
        ALLOC(ly->fch, 4 * btc);
        ALLOC(ly->res3, btc);
        ALLOC(ly->ln1_mean, bt * sizeof(float));
        ALLOC(ly->ln1_rstd, bt * sizeof(float));
        ALLOC(ly->ln2_mean, bt * sizeof(float));
        ALLOC(ly->ln2_rstd, bt * sizeof(float));
        ALLOC(ly->lse, bt * c->heads * sizeof(float));
        if (cb->base.opts.recompute == 0) {
            ALLOC(ly->fch_gelu, 4 * btc);
        }
    }
    if (cb->base.opts.recompute > 0) { /* every layer shares one GELU buffer, refilled in backward */
        ALLOC(cb->gelu_tmp, 4 * btc);
        for (int l = 0; l < c->layers; l++) {
            cb->layers[l].fch_gelu = cb->gelu_tmp;
        }
    }
    ALLOC(cb->encoded, btc);
    ALLOC(cb->lnf, btc);
    ALLOC(cb->lnf_mean, bt * sizeof(float));
    ALLOC(cb->lnf_rstd, bt * sizeof(float));
    ALLOC(cb->logits, bt * c->padded_vocab * e);
    ALLOC(cb->losses, bt * sizeof(float));
    ALLOC(cb->loss_dev, sizeof(float));
    ALLOC(cb->dres, btc);
    ALLOC(cb->dbtc, btc);
    ALLOC(cb->dbt4c, 4 * btc);
    ALLOC(cb->dqkv, 3 * btc);
    ALLOC(cb->proj, btc);
    ALLOC(cb->dsum, bt * c->heads * sizeof(float));
    ALLOC(cb->norm_partial, TR_CU_SUMSQ_BLOCKS * sizeof(float));
    ALLOC(cb->norm_dev, sizeof(float));
    ALLOC(cb->d_inputs, bt * sizeof(int32_t));
    ALLOC(cb->d_targets, bt * sizeof(int32_t));
    TR_CU_TRY(cudaMallocHost((void **)&cb->h_inputs, bt * sizeof(int32_t)));
    TR_CU_TRY(cudaMallocHost((void **)&cb->h_targets, bt * sizeof(int32_t)));
    TR_CU_TRY(cudaMallocHost((void **)&cb->h_scalar, sizeof(float)));
    if (!cb->flash) {
        TR_TRY(alloc_reference_attention(cb, err));
    }
out:
    return rv;
}

static int check_config(const tr_model_config *cfg, const tr_backend_opts *opts, tr_err *err)
{
    int rv = tr_model_config_check(cfg, err);
    if (rv != TROUPE_OK) {
        return rv;
    }
    /* 16-byte vector access needs every row and tensor offset on a multiple
     * of 8 elements; all GPT-2 widths satisfy this. */
    if (cfg->width % 8 != 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "cuda backend: width %d is not a multiple of 8",
                          cfg->width);
    }
    if (opts->micro_batch <= 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "cuda backend: micro_batch %d must be positive",
                          opts->micro_batch);
    }
    return TROUPE_OK;
}

extern "C" int tr_backend_cuda_create(const tr_model_config *cfg, const tr_backend_opts *opts,
                                      tr_backend **out, tr_err *err)
{
    int rv = TROUPE_OK, ndev = 0;
    cu_backend *cb = NULL;
    *out = NULL;
    TR_TRY(check_config(cfg, opts, err));
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return tr_err_set(err, TROUPE_UNAVAILABLE, "cuda backend: no CUDA device present");
    }
    if (opts->device < 0 || opts->device >= ndev) {
        return tr_err_set(err, TROUPE_UNAVAILABLE, "cuda backend: device %d requested, %d present",
                          opts->device, ndev);
    }
    cb = (cu_backend *)calloc(1, sizeof(*cb));
    if (cb == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of host memory");
    }
    cb->base.ops = &tr_cu_ops;
    cb->base.cfg = *cfg;
    cb->base.opts = *opts;
    cb->base.num_params = tr_model_param_sizes(cfg, cb->base.param_sizes);
    tr_model_param_offsets(cfg, cb->offs);
    cb->offs[TR_NUM_PARAM_TENSORS] = cb->base.num_params;
    cb->dev = opts->device;
    cb->bf16 = opts->precision == TR_PRECISION_BF16;
    cb->esz = cb->bf16 ? sizeof(bf16) : sizeof(float);
    cb->flash = cb->bf16 && cfg->width / cfg->heads == 64;
    /* measured on the H200: cuBLASLt's GELU epilogues ran slower than the
     * plain matmul plus our elementwise kernel, so they stay opt-in */
    cb->gelu_epi = 0;
    cb->use_graphs = 1;
    cb->zero_elide = getenv("TR_CUDA_ZERO_ELIDE") == NULL || atoi(getenv("TR_CUDA_ZERO_ELIDE")) != 0;
    cb->cap_bt = (size_t)opts->micro_batch * cfg->seq_len;
    TR_CU_TRY(cudaSetDevice(cb->dev));
    TR_CU_TRY(cudaStreamCreateWithFlags(&cb->s, cudaStreamNonBlocking));
    for (int i = 0; i < 5; i++) {
        TR_CU_TRY(cudaEventCreate(&cb->ev[i]));
    }
    TR_TRY(tr_cu_gemm_create(&cb->gemm, cb->s, err));
    cb->in_use += tr_cu_gemm_device_bytes(cb->gemm);
    TR_TRY(tr_cu_dp_plan(cb, err));
    TR_TRY(alloc_params(cb, err));
    TR_TRY(alloc_activations(cb, err));
    TR_CU_TRY(cudaStreamSynchronize(cb->s));
    TR_LOG(TR_LOG_INFO, "cuda backend ready device=%d precision=%s attention=%s params=%zu bytes=%llu",
           cb->dev, cb->bf16 ? "bf16" : "fp32", cb->flash ? "flash" : "reference", cb->base.num_params,
           (unsigned long long)cb->in_use);
    *out = &cb->base;
    cb = NULL;
out:
    if (rv != TROUPE_OK) {
        tr_err_prefix(err, "cuda backend");
    }
    cuda_destroy(cb ? &cb->base : NULL);
    return rv;
}

/* ---- ops ------------------------------------------------------------------ */

static int cuda_set_params(tr_backend *b, const float *params, tr_err *err)
{
    int rv = TROUPE_OK;
    cu_backend *cb = (cu_backend *)b;
    size_t n = b->num_params;
    TR_CU_TRY(cudaSetDevice(cb->dev));
    TR_CU_TRY(cudaMemcpyAsync(cb->master, params, n * sizeof(float), cudaMemcpyHostToDevice, cb->s));
    if (cb->bf16) {
        TR_CU_TRY(tr_cu_convert((bf16 *)cb->params, cb->master, n, cb->s));
    }
    cb->master_stale = 0;
    TR_CU_TRY(cudaStreamSynchronize(cb->s)); /* the caller may free params on return */
out:
    return rv;
}

static int copy_out(cu_backend *cb, float *dst, const float *src, size_t n, tr_err *err)
{
    int rv = TROUPE_OK;
    TR_CU_TRY(cudaSetDevice(cb->dev));
    TR_CU_TRY(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, cb->s));
    TR_CU_TRY(cudaStreamSynchronize(cb->s));
out:
    return rv;
}

static int cuda_get_params(tr_backend *b, float *params, tr_err *err)
{
    cu_backend *cb = (cu_backend *)b;
    int rv = tr_cu_master_current(cb, "get_params", err);
    return rv != TROUPE_OK ? rv : copy_out(cb, params, cb->master, b->num_params, err);
}

static int cuda_gather_params(tr_backend *b, tr_comm *c, tr_err *err)
{
    return tr_cu_zero_gather_master((cu_backend *)b, c, err);
}

/* zero_tensors queues a memset of the gradients of the tensors with
 * tr_cu_dw_tensor(i) == dw, contiguous runs in one call. */
static cudaError_t zero_tensors(cu_backend *cb, int dw)
{
    for (int i = 0; i < TR_NUM_PARAM_TENSORS;) {
        int j = i;
        while (j < TR_NUM_PARAM_TENSORS && (tr_cu_dw_tensor(j) != 0) == (dw != 0)) {
            j++;
        }
        if (j > i) {
            cudaError_t e = cudaMemsetAsync(cb->grads + cb->offs[i], 0,
                                            (cb->offs[j] - cb->offs[i]) * sizeof(float), cb->s);
            if (e != cudaSuccess) {
                return e;
            }
        }
        i = j > i ? j : i + 1;
    }
    return cudaSuccess;
}

/* flush_zero completes an elided zero_grads before anything reads the
 * gradients (see cu_backend.h, zero_elide). */
static int flush_zero(cu_backend *cb, tr_err *err)
{
    int rv = TROUPE_OK;
    if (cb->zero_pending) {
        TR_CU_TRY(cudaSetDevice(cb->dev));
        TR_CU_TRY(zero_tensors(cb, 1));
        cb->zero_pending = 0;
    }
out:
    return rv;
}

static int cuda_get_grads(tr_backend *b, float *grads, tr_err *err)
{
    cu_backend *cb = (cu_backend *)b;
    int rv = flush_zero(cb, err);
    return rv != TROUPE_OK ? rv : copy_out(cb, grads, cb->grads, b->num_params, err);
}

static int cuda_get_opt_state(tr_backend *b, float *m, float *v, tr_err *err)
{
    cu_backend *cb = (cu_backend *)b;
    if (b->opts.dp_zero) {
        return tr_cu_zero_get_opt(cb, m, v, err);
    }
    int rv = copy_out(cb, m, cb->m, b->num_params, err);
    return rv != TROUPE_OK ? rv : copy_out(cb, v, cb->v, b->num_params, err);
}

static int cuda_gather_opt_state(tr_backend *b, tr_comm *c, float *m, float *v, tr_err *err)
{
    cu_backend *cb = (cu_backend *)b;
    return b->opts.dp_zero ? tr_cu_zero_gather_opt(cb, c, m, v, err) : cuda_get_opt_state(b, m, v, err);
}

static int cuda_set_opt_state(tr_backend *b, const float *m, const float *v, tr_err *err)
{
    int rv = TROUPE_OK;
    cu_backend *cb = (cu_backend *)b;
    size_t bytes = b->num_params * sizeof(float);
    if (b->opts.dp_zero) {
        return tr_cu_zero_set_opt(cb, m, v, err);
    }
    TR_CU_TRY(cudaSetDevice(cb->dev));
    TR_CU_TRY(cudaMemcpyAsync(cb->m, m, bytes, cudaMemcpyHostToDevice, cb->s));
    TR_CU_TRY(cudaMemcpyAsync(cb->v, v, bytes, cudaMemcpyHostToDevice, cb->s));
    TR_CU_TRY(cudaStreamSynchronize(cb->s));
out:
    return rv;
}

static int cuda_zero_grads(tr_backend *b, tr_err *err)
{
    int rv = TROUPE_OK;
    cu_backend *cb = (cu_backend *)b;
    TR_CU_TRY(cudaSetDevice(cb->dev));
    if (cb->zero_elide) {
        TR_CU_TRY(zero_tensors(cb, 0));
        cb->zero_pending = 1;
    } else {
        TR_CU_TRY(cudaMemsetAsync(cb->grads, 0, b->num_params * sizeof(float), cb->s));
    }
out:
    return rv;
}

/* stage_batch validates the token ids (an id out of range would index past
 * wte on the device) and queues their copy through pinned memory. */
static int stage_batch(cu_backend *cb, const int32_t *inputs, const int32_t *targets, int B, int Tn,
                       tr_err *err)
{
    int rv = TROUPE_OK, V = cb->base.cfg.vocab;
    size_t n = (size_t)B * Tn;
    if (B <= 0 || Tn <= 0 || Tn > cb->base.cfg.seq_len || n > cb->cap_bt) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "cuda backend: batch %d x %d exceeds %d x %d", B, Tn,
                          cb->base.opts.micro_batch, cb->base.cfg.seq_len);
    }
    for (size_t i = 0; i < n; i++) {
        if (inputs[i] < 0 || inputs[i] >= V || targets[i] < 0 || targets[i] >= V) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "cuda backend: token %zu out of range (vocab %d)",
                              i, V);
        }
    }
    TR_CU_TRY(cudaSetDevice(cb->dev));
    /* the previous call synchronised, so the staging buffers are free */
    memcpy(cb->h_inputs, inputs, n * sizeof(int32_t));
    memcpy(cb->h_targets, targets, n * sizeof(int32_t));
    TR_CU_TRY(
        cudaMemcpyAsync(cb->d_inputs, cb->h_inputs, n * sizeof(int32_t), cudaMemcpyHostToDevice, cb->s));
    TR_CU_TRY(
        cudaMemcpyAsync(cb->d_targets, cb->h_targets, n * sizeof(int32_t), cudaMemcpyHostToDevice, cb->s));
out:
    return rv;
}

static int run_pass(tr_backend *b, const int32_t *inputs, const int32_t *targets, int B, int Tn,
                    float loss_scale, int backward, float *loss, tr_err *err)
{
    int rv = TROUPE_OK;
    cu_backend *cb = (cu_backend *)b;
    TR_TRY(stage_batch(cb, inputs, targets, B, Tn, err));
    TR_TRY(tr_cu_pass(cb, B, Tn, loss_scale / (float)(B * Tn), backward, err));
    TR_CU_TRY(cudaMemcpyAsync(cb->h_scalar, cb->loss_dev, sizeof(float), cudaMemcpyDeviceToHost, cb->s));
    TR_CU_TRY(cudaStreamSynchronize(cb->s));
    *loss = *cb->h_scalar;
out:
    return rv;
}

static int cuda_forward_backward(tr_backend *b, const int32_t *inputs, const int32_t *targets, int B, int T,
                                 float loss_scale, float *loss, tr_err *err)
{
    return run_pass(b, inputs, targets, B, T, loss_scale, 1, loss, err);
}

static int cuda_forward_loss(tr_backend *b, const int32_t *inputs, const int32_t *targets, int B, int T,
                             float *loss, tr_err *err)
{
    return run_pass(b, inputs, targets, B, T, 0.0f, 0, loss, err);
}

static int cuda_grad_norm(tr_backend *b, float *norm, tr_err *err)
{
    int rv = TROUPE_OK;
    cu_backend *cb = (cu_backend *)b;
    TR_TRY(flush_zero(cb, err));
    TR_CU_TRY(cudaSetDevice(cb->dev));
    if (b->opts.dp_zero) {
        return tr_cu_zero_norm(cb, norm, err);
    }
    TR_CU_TRY(tr_cu_sumsq(cb->norm_dev, cb->norm_partial, cb->grads, b->num_params, cb->s));
    TR_CU_TRY(cudaMemcpyAsync(cb->h_scalar, cb->norm_dev, sizeof(float), cudaMemcpyDeviceToHost, cb->s));
    TR_CU_TRY(cudaStreamSynchronize(cb->s));
    *norm = sqrtf(*cb->h_scalar);
out:
    return rv;
}

static int cuda_adamw_update(tr_backend *b, const tr_adamw *opt, tr_err *err)
{
    int rv = TROUPE_OK;
    cu_backend *cb = (cu_backend *)b;
    tr_cu_adamw_args a;
    memset(&a, 0, sizeof(a));
    memcpy(a.offs, cb->offs, sizeof(a.offs));
    for (int i = 0; i < TR_NUM_PARAM_TENSORS; i++) {
        a.decay_mask |= tr_model_param_is_matrix(i) ? 1u << i : 0u;
    }
    a.lr = opt->lr, a.beta1 = opt->beta1, a.beta2 = opt->beta2, a.eps = opt->eps, a.wd = opt->weight_decay;
    a.grad_scale = opt->grad_scale;
    a.bc1 = (float)(1.0 - pow(opt->beta1, (double)opt->t));
    a.bc2 = (float)(1.0 - pow(opt->beta2, (double)opt->t));
    if (opt->t < 1) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "adamw: step t=%lld must be >= 1", (long long)opt->t);
    }
    nvtxRangePushA("optimizer");
    TR_TRY(flush_zero(cb, err));
    TR_CU_TRY(cudaSetDevice(cb->dev));
    TR_CU_TRY(cudaEventRecord(cb->ev[3], cb->s));
    if (b->opts.dp_zero) {
        TR_TRY(tr_cu_zero_adamw(cb, &a, err)); /* the shard, then the all-gather of the weights */
    } else if (cb->bf16) {
        TR_CU_TRY(
            tr_cu_adamw((bf16 *)cb->params, cb->master, cb->grads, cb->m, cb->v, b->num_params, &a, cb->s));
    } else {
        TR_CU_TRY(tr_cu_adamw((float *)NULL, cb->master, cb->grads, cb->m, cb->v, b->num_params, &a, cb->s));
    }
    TR_CU_TRY(cudaEventRecord(cb->ev[4], cb->s));
    cb->have_opt = 1;
out:
    nvtxRangePop();
    return rv;
}

static void cuda_mem_stats(tr_backend *b, tr_mem_stats *out)
{
    cu_backend *cb = (cu_backend *)b;
    size_t free_b = 0, total = 0;
    memset(out, 0, sizeof(*out));
    out->in_use_bytes = cb->in_use;
    out->peak_bytes = cb->peak;
    cudaSetDevice(cb->dev);
    if (cudaMemGetInfo(&free_b, &total) == cudaSuccess) {
        out->total_bytes = total;
    } else {
        cudaGetLastError();
    }
}

static double event_ms(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0.0f;
    if (cudaEventSynchronize(b) != cudaSuccess || cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
        cudaGetLastError();
        return 0.0;
    }
    return ms;
}

/* Phase times of the last forward_backward call and the last optimizer step. */
static void cuda_phase_times(tr_backend *b, tr_phase_times *out)
{
    cu_backend *cb = (cu_backend *)b;
    memset(out, 0, sizeof(*out));
    cudaSetDevice(cb->dev);
    if (cb->have_fb) {
        out->forward_ms = event_ms(cb->ev[0], cb->ev[1]);
        out->backward_ms = event_ms(cb->ev[1], cb->ev[2]);
        out->last_forward_ms = out->forward_ms; /* the events are the last call's */
        out->last_backward_ms = out->backward_ms;
    }
    if (cb->have_opt) {
        out->optimizer_ms = event_ms(cb->ev[3], cb->ev[4]);
    }
}

static int cuda_sync(tr_backend *b, tr_err *err)
{
    int rv = TROUPE_OK;
    cu_backend *cb = (cu_backend *)b;
    TR_CU_TRY(cudaSetDevice(cb->dev));
    TR_CU_TRY(cudaStreamSynchronize(cb->s));
out:
    return rv;
}

static int cuda_allreduce_grads(tr_backend *b, tr_comm *c, tr_err *err)
{
    cu_backend *cb = (cu_backend *)b;
    int rv = flush_zero(cb, err);
    return rv != TROUPE_OK ? rv : tr_cu_allreduce_grads(cb, c, err);
}

static int cuda_allreduce_start(tr_backend *b, tr_comm *c, tr_err *err)
{
    return tr_cu_allreduce_start((cu_backend *)b, c, err);
}

extern const tr_backend_ops tr_cu_ops = {
    "cuda",          cuda_destroy,          cuda_set_params,    cuda_get_params,
    cuda_zero_grads, cuda_forward_backward, cuda_forward_loss,  cuda_grad_norm,
    cuda_get_grads,  cuda_adamw_update,     cuda_get_opt_state, cuda_set_opt_state,
    cuda_mem_stats,  cuda_phase_times,      cuda_sync,          cuda_allreduce_grads,
    cuda_allreduce_start, tr_cu_refit_params,  tr_cu_refit_taken,  tr_cu_refit_hash,
    cuda_gather_opt_state, cuda_gather_params,
};

/* ---- train_cuda.h extras ---------------------------------------------------- */

extern "C" int tr_cuda_set_option(tr_backend *b, tr_cuda_option opt, int value, tr_err *err)
{
    int rv = TROUPE_OK;
    cu_backend *cb = (cu_backend *)b;
    if (b == NULL || b->ops != &tr_cu_ops) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "not a cuda backend");
    }
    switch (opt) {
    case TR_CUDA_OPT_FLASH_ATTENTION:
        if (value && !(cb->bf16 && b->cfg.width / b->cfg.heads == 64)) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "flash attention needs bf16 and head size 64");
        }
        if (!value) {
            TR_CU_TRY(cudaSetDevice(cb->dev));
            TR_TRY(alloc_reference_attention(cb, err));
        }
        cb->flash = value != 0;
        break;
    case TR_CUDA_OPT_GELU_EPILOGUE: cb->gelu_epi = value != 0; break;
    case TR_CUDA_OPT_CUDA_GRAPHS: cb->use_graphs = value != 0; break;
    default: return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "unknown cuda option %d", (int)opt);
    }
out:
    return rv;
}

extern "C" int tr_cuda_device_info(int device, char *name, size_t len, int *sm_count, uint64_t *mem_bytes,
                                   tr_err *err)
{
    int rv = TROUPE_OK;
    cudaDeviceProp p;
    TR_CU_TRY(cudaGetDeviceProperties(&p, device));
    if (name != NULL && len > 0) {
        snprintf(name, len, "%s", p.name);
    }
    if (sm_count != NULL) {
        *sm_count = p.multiProcessorCount;
    }
    if (mem_bytes != NULL) {
        *mem_bytes = p.totalGlobalMem;
    }
out:
    return rv;
}

extern "C" void tr_cuda_profiler_start(void)
{
    cudaProfilerStart();
}
extern "C" void tr_cuda_profiler_stop(void)
{
    cudaProfilerStop();
}
extern "C" void tr_cuda_nvtx_push(const char *name)
{
    nvtxRangePushA(name);
}
extern "C" void tr_cuda_nvtx_pop(void)
{
    nvtxRangePop();
}
