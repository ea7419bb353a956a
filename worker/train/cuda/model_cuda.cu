/* model_cuda.cu - the GPT-2 forward and backward passes of the CUDA backend.
 *
 * Written once as templates over the storage type T and instantiated for
 * float (fp32 mode) and bf16. Linear layers go through cuBLASLt: the forward
 * product carries its bias in the epilogue; weight gradients are accumulated
 * straight into the fp32 gradient vector (bf16 operands, fp32 C/D), which
 * makes gradient accumulation across micro-batches exact to fp32. */
#include <nvtx3/nvToolsExt.h>

#include <string.h>

#include "cu_backend.h"

#define TR_CU(call) TR_CU_TRY(call)

template <typename T> static cudaDataType_t dtype_of();
template <> cudaDataType_t dtype_of<float>()
{
    return CUDA_R_32F;
}
template <> cudaDataType_t dtype_of<bf16>()
{
    return CUDA_R_16BF;
}

/* Parameter tensor i (layer l's slice of `per_layer` elements) as T. */
template <typename T> static T *P(cu_backend *cb, int i, size_t l = 0, size_t per_layer = 0)
{
    return (T *)cb->params + cb->offs[i] + l * per_layer;
}

static float *G(cu_backend *cb, int i, size_t l = 0, size_t per_layer = 0)
{
    return cb->grads + cb->offs[i] + l * per_layer;
}

/* out[BT][OC] = inp[BT][C] . w[OC][C]^T + bias */
template <typename T>
static int linear_fwd(cu_backend *cb, T *out, const T *inp, const T *w, const T *bias, int BT, int C, int OC,
                      tr_err *err)
{
    tr_cu_gemm_args a = {out, w, inp, bias, OC, BT, C, 1, 0, dtype_of<T>(), dtype_of<T>(), 0, TR_CU_EPI_NONE,
                         NULL};
    return tr_cu_gemm(cb->gemm, &a, err);
}

/* out = gelu(inp . w^T + bias) with pre = the GELU input, in one matmul. */
template <typename T>
static int linear_fwd_gelu(cu_backend *cb, T *out, T *pre, const T *inp, const T *w, const T *bias, int BT,
                           int C, int OC, tr_err *err)
{
    tr_cu_gemm_args a = {
        out, w, inp, bias, OC, BT, C, 1, 0, dtype_of<T>(), dtype_of<T>(), 0, TR_CU_EPI_GELU_AUX, pre};
    return tr_cu_gemm(cb->gemm, &a, err);
}

/* dinp[BT][C] = dout[BT][OC] . w[OC][C] */
template <typename T>
static int linear_dinp(cu_backend *cb, T *dinp, const T *dout, const T *w, int BT, int C, int OC, tr_err *err)
{
    tr_cu_gemm_args a = {dinp,          w, dout,           NULL, C, BT, OC, 0, 0, dtype_of<T>(),
                         dtype_of<T>(), 0, TR_CU_EPI_NONE, NULL};
    return tr_cu_gemm(cb->gemm, &a, err);
}

/* dinp = (dout . w) * gelu'(pre): the MLP's input gradient through the GELU. */
template <typename T>
static int linear_dinp_dgelu(cu_backend *cb, T *dinp, const T *dout, const T *w, const T *pre, int BT, int C,
                             int OC, tr_err *err)
{
    tr_cu_gemm_args a = {
        dinp, w, dout, NULL, C, BT, OC, 0, 0, dtype_of<T>(), dtype_of<T>(), 0, TR_CU_EPI_DGELU, (void *)pre};
    return tr_cu_gemm(cb->gemm, &a, err);
}

/* dw[OC][C] (fp32) += dout[BT][OC]^T . inp[BT][C]. The bias gradients are
 * summed elsewhere (see block_bwd). */
template <typename T>
static int linear_dw(cu_backend *cb, float *dw, const T *inp, const T *dout, int BT, int C, int OC,
                     tr_err *err)
{
    tr_cu_gemm_args a = {dw,         inp, dout,           NULL, C, OC, BT, 0, 1, dtype_of<T>(),
                         CUDA_R_32F, 1,   TR_CU_EPI_NONE, NULL};
    a.accumulate = !cb->fresh_dw; /* after an elided zero_grads the first backward writes (cu_backend.h) */
    return tr_cu_gemm(cb->gemm, &a, err);
}

template <typename T> static int attention_fwd(cu_backend *cb, cu_layer *ly, int B, int Tn, tr_err *err)
{
    int rv = TROUPE_OK, NH = cb->base.cfg.heads, hd = cb->base.cfg.width / NH;
    if (cb->flash) {
        TR_CU(tr_cu_flash_fwd((bf16 *)ly->atty, ly->lse, (const bf16 *)ly->qkv, B, Tn, NH, cb->s));
    } else {
        TR_CU(tr_cu_attn_naive_fwd((T *)ly->atty, (T *)ly->att, (const T *)ly->qkv, B, Tn, NH, hd, cb->s));
    }
out:
    return rv;
}

/* attention_bwd leaves d(loss)/d(qkv) in cb->dqkv and adds the qkv bias
 * gradient into dbias: the flash kernels sum it on the way out, the
 * reference path by a pass over dqkv. */
template <typename T>
static int attention_bwd(cu_backend *cb, cu_layer *ly, float *dbias, const T *dy, int B, int Tn, tr_err *err)
{
    int rv = TROUPE_OK, NH = cb->base.cfg.heads, hd = cb->base.cfg.width / NH;
    if (cb->flash) {
        TR_CU(tr_cu_flash_bwd((bf16 *)cb->dqkv, dbias, cb->dsum, (const bf16 *)dy, (const bf16 *)ly->atty,
                              ly->lse, (const bf16 *)ly->qkv, B, Tn, NH, cb->s));
    } else {
        TR_CU(tr_cu_attn_naive_bwd((T *)cb->dqkv, (T *)cb->att_scratch, dy, (const T *)ly->att,
                                   (const T *)ly->qkv, B, Tn, NH, hd, cb->s));
        TR_CU(tr_cu_bias_grad(dbias, (const T *)cb->dqkv, B * Tn, 3 * NH * hd, cb->s));
    }
out:
    return rv;
}

/* One transformer block forward. The residual add that ends the block is
 * fused with the next LayerNorm (the next block's ln1, or lnf after the last). */
template <typename T> static int block_fwd(cu_backend *cb, int l, int B, int Tn, tr_err *err)
{
    int rv = TROUPE_OK, L = cb->base.cfg.layers, C = cb->base.cfg.width, BT = B * Tn;
    cu_layer *ly = &cb->layers[l];
    const T *x = l == 0 ? (const T *)cb->encoded : (const T *)cb->layers[l - 1].res3;
    T *fg = (T *)ly->fch_gelu;
    TR_TRY(linear_fwd<T>(cb, (T *)ly->qkv, (T *)ly->ln1, P<T>(cb, TR_P_QKVW, l, 3 * C * C),
                         P<T>(cb, TR_P_QKVB, l, 3 * C), BT, C, 3 * C, err));
    TR_TRY(attention_fwd<T>(cb, ly, B, Tn, err));
    TR_TRY(linear_fwd<T>(cb, (T *)cb->proj, (T *)ly->atty, P<T>(cb, TR_P_ATTPROJW, l, C * C),
                         P<T>(cb, TR_P_ATTPROJB, l, C), BT, C, C, err));
    TR_CU(tr_cu_residual_ln_fwd((T *)ly->res2, (T *)ly->ln2, ly->ln2_mean, ly->ln2_rstd, x,
                                (const T *)cb->proj, P<T>(cb, TR_P_LN2W, l, C), P<T>(cb, TR_P_LN2B, l, C), BT,
                                C, cb->s));
    if (cb->gelu_epi) {
        TR_TRY(linear_fwd_gelu<T>(cb, fg, (T *)ly->fch, (T *)ly->ln2, P<T>(cb, TR_P_FCW, l, 4 * C * C),
                                  P<T>(cb, TR_P_FCB, l, 4 * C), BT, C, 4 * C, err));
    } else {
        TR_TRY(linear_fwd<T>(cb, (T *)ly->fch, (T *)ly->ln2, P<T>(cb, TR_P_FCW, l, 4 * C * C),
                             P<T>(cb, TR_P_FCB, l, 4 * C), BT, C, 4 * C, err));
        TR_CU(tr_cu_gelu_fwd(fg, (const T *)ly->fch, (size_t)BT * 4 * C, cb->s));
    }
    TR_TRY(linear_fwd<T>(cb, (T *)cb->proj, fg, P<T>(cb, TR_P_FCPROJW, l, 4 * C * C),
                         P<T>(cb, TR_P_FCPROJB, l, C), BT, 4 * C, C, err));
    if (l + 1 < L) {
        cu_layer *nx = &cb->layers[l + 1];
        TR_CU(tr_cu_residual_ln_fwd((T *)ly->res3, (T *)nx->ln1, nx->ln1_mean, nx->ln1_rstd,
                                    (const T *)ly->res2, (const T *)cb->proj, P<T>(cb, TR_P_LN1W, l + 1, C),
                                    P<T>(cb, TR_P_LN1B, l + 1, C), BT, C, cb->s));
    } else {
        TR_CU(tr_cu_residual_ln_fwd((T *)ly->res3, (T *)cb->lnf, cb->lnf_mean, cb->lnf_rstd,
                                    (const T *)ly->res2, (const T *)cb->proj, P<T>(cb, TR_P_LNFW),
                                    P<T>(cb, TR_P_LNFB), BT, C, cb->s));
    }
out:
    return rv;
}

template <typename T> static int forward(cu_backend *cb, int B, int Tn, float dloss, int bwd, tr_err *err)
{
    int rv = TROUPE_OK, C = cb->base.cfg.width, BT = B * Tn;
    cu_layer *l0 = &cb->layers[0];
    nvtxRangePushA("forward");
    TR_CU(tr_cu_encoder_fwd((T *)cb->encoded, cb->d_inputs, P<T>(cb, TR_P_WTE), P<T>(cb, TR_P_WPE), B, Tn, C,
                            cb->s));
    TR_CU(tr_cu_residual_ln_fwd((T *)NULL, (T *)l0->ln1, l0->ln1_mean, l0->ln1_rstd, (const T *)cb->encoded,
                                (const T *)NULL, P<T>(cb, TR_P_LN1W), P<T>(cb, TR_P_LN1B), BT, C, cb->s));
    for (int l = 0; l < cb->base.cfg.layers; l++) {
        TR_TRY(block_fwd<T>(cb, l, B, Tn, err));
    }
    TR_TRY(linear_fwd<T>(cb, (T *)cb->logits, (T *)cb->lnf, P<T>(cb, TR_P_WTE), (const T *)NULL, BT, C,
                         cb->base.cfg.padded_vocab, err));
    TR_CU(tr_cu_classifier((T *)cb->logits, cb->losses, cb->d_targets, BT, cb->base.cfg.vocab,
                           cb->base.cfg.padded_vocab, dloss, bwd, cb->s));
    TR_CU(tr_cu_mean(cb->loss_dev, cb->losses, BT, cb->s));
out:
    nvtxRangePop();
    return rv;
}

/* One block backward; cb->dres holds d(loss)/d(res3) on entry and
 * d(loss)/d(block input) on return. No bias gradient gets a pass of its own:
 * the projections that add into the residual stream (attproj, fcproj) have
 * as bias gradient the column sums of that stream's gradient, which the
 * LayerNorm backward that finishes it sums on the way (ln2 for attproj here,
 * ln1 for the previous block's fcproj, lnf for the last block's); the fc bias
 * comes with the GELU backward, the qkv bias with the attention backward. */
/* tr_cu_record: while a graph is being captured the event must be recorded
 * as an external event node, or it only orders work inside the capture and
 * is never signalled (neither for the phase times nor for the communication
 * stream waiting on a bucket); outside capture that flag is an error
 * (cudaErrorIllegalState), so a plain record is used. */
cudaError_t tr_cu_record(cu_backend *cb, cudaEvent_t ev)
{
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(cb->s, &st);
    if (e != cudaSuccess) {
        return e;
    }
    if (st == cudaStreamCaptureStatusActive) {
        return cudaEventRecordWithFlags(ev, cb->s, cudaEventRecordExternal);
    }
    return cudaEventRecord(ev, cb->s);
}

template <typename T> static int block_bwd(cu_backend *cb, int l, int B, int Tn, tr_err *err)
{
    int rv = TROUPE_OK, C = cb->base.cfg.width, BT = B * Tn;
    cu_layer *ly = &cb->layers[l];
    const T *x = l == 0 ? (const T *)cb->encoded : (const T *)cb->layers[l - 1].res3;
    T *dres = (T *)cb->dres, *dbtc = (T *)cb->dbtc, *d4 = (T *)cb->dbt4c, *fg = (T *)ly->fch_gelu;
    if (cb->base.opts.recompute > 0) { /* the GELU output was not kept: one cheap elementwise pass */
        TR_CU(tr_cu_gelu_fwd(fg, (const T *)ly->fch, (size_t)BT * 4 * C, cb->s));
    }
    /* MLP: res3 = res2 + fcproj(gelu(fc(ln2(res2)))) */
    TR_TRY(linear_dw<T>(cb, G(cb, TR_P_FCPROJW, l, 4 * C * C), fg, dres, BT, 4 * C, C, err));
    if (cb->gelu_epi) {
        TR_TRY(linear_dinp_dgelu<T>(cb, d4, dres, P<T>(cb, TR_P_FCPROJW, l, 4 * C * C), (const T *)ly->fch,
                                    BT, 4 * C, C, err));
        TR_CU(tr_cu_bias_grad(G(cb, TR_P_FCB, l, 4 * C), (const T *)d4, BT, 4 * C, cb->s));
    } else {
        TR_TRY(linear_dinp<T>(cb, d4, dres, P<T>(cb, TR_P_FCPROJW, l, 4 * C * C), BT, 4 * C, C, err));
        TR_CU(tr_cu_gelu_bwd_bias(G(cb, TR_P_FCB, l, 4 * C), d4, (const T *)ly->fch, BT, 4 * C, cb->s));
    }
    TR_TRY(linear_dw<T>(cb, G(cb, TR_P_FCW, l, 4 * C * C), (T *)ly->ln2, d4, BT, C, 4 * C, err));
    TR_TRY(linear_dinp<T>(cb, dbtc, d4, P<T>(cb, TR_P_FCW, l, 4 * C * C), BT, C, 4 * C, err));
    TR_CU(tr_cu_ln_bwd(dres, G(cb, TR_P_LN2W, l, C), G(cb, TR_P_LN2B, l, C), G(cb, TR_P_ATTPROJB, l, C), dbtc,
                       (const T *)ly->res2, P<T>(cb, TR_P_LN2W, l, C), ly->ln2_mean, ly->ln2_rstd, BT, C,
                       cb->s));
    /* attention: res2 = x + attproj(attn(qkv(ln1(x)))) */
    TR_TRY(linear_dw<T>(cb, G(cb, TR_P_ATTPROJW, l, C * C), (T *)ly->atty, dres, BT, C, C, err));
    TR_TRY(linear_dinp<T>(cb, dbtc, dres, P<T>(cb, TR_P_ATTPROJW, l, C * C), BT, C, C, err));
    TR_TRY(attention_bwd<T>(cb, ly, G(cb, TR_P_QKVB, l, 3 * C), dbtc, B, Tn, err));
    TR_TRY(linear_dw<T>(cb, G(cb, TR_P_QKVW, l, 3 * C * C), (T *)ly->ln1, (T *)cb->dqkv, BT, C, 3 * C, err));
    TR_TRY(linear_dinp<T>(cb, dbtc, (T *)cb->dqkv, P<T>(cb, TR_P_QKVW, l, 3 * C * C), BT, C, 3 * C, err));
    TR_CU(tr_cu_ln_bwd(dres, G(cb, TR_P_LN1W, l, C), G(cb, TR_P_LN1B, l, C),
                       l > 0 ? G(cb, TR_P_FCPROJB, l - 1, C) : (float *)NULL, dbtc, x,
                       P<T>(cb, TR_P_LN1W, l, C), ly->ln1_mean, ly->ln1_rstd, BT, C, cb->s));
out:
    return rv;
}

template <typename T> static int backward(cu_backend *cb, int B, int Tn, tr_err *err)
{
    int rv = TROUPE_OK, L = cb->base.cfg.layers, C = cb->base.cfg.width, Vp = cb->base.cfg.padded_vocab;
    int BT = B * Tn;
    nvtxRangePushA("backward");
    /* the classifier left d(loss)/d(logits) in cb->logits */
    TR_TRY(linear_dw<T>(cb, G(cb, TR_P_WTE), (T *)cb->lnf, (T *)cb->logits, BT, C, Vp, err));
    TR_TRY(linear_dinp<T>(cb, (T *)cb->dbtc, (T *)cb->logits, P<T>(cb, TR_P_WTE), BT, C, Vp, err));
    TR_CU(cudaMemsetAsync(cb->dres, 0, (size_t)BT * C * cb->esz, cb->s));
    TR_CU(tr_cu_ln_bwd((T *)cb->dres, G(cb, TR_P_LNFW), G(cb, TR_P_LNFB), G(cb, TR_P_FCPROJB, L - 1, C),
                       (const T *)cb->dbtc, (const T *)cb->layers[L - 1].res3, P<T>(cb, TR_P_LNFW),
                       cb->lnf_mean, cb->lnf_rstd, BT, C, cb->s));
    for (int l = L - 1; l >= 0; l--) {
        TR_TRY(block_bwd<T>(cb, l, B, Tn, err));
        if (cb->dp_armed) { /* layer l's gradients are final (its fcproj bias was, one block earlier) */
            TR_CU(tr_cu_record(cb, cb->ev_layer[l]));
        }
    }
    TR_CU(tr_cu_encoder_bwd(G(cb, TR_P_WTE), G(cb, TR_P_WPE), (const T *)cb->dres, cb->d_inputs, B, Tn, C,
                            cb->s));
    if (cb->dp_armed) { /* wte (tied: the classifier's part came first), wpe, lnf */
        TR_CU(tr_cu_record(cb, cb->ev_layer[L]));
    }
out:
    nvtxRangePop();
    return rv;
}

static cudaError_t record_phase(cu_backend *cb, int i)
{
    return tr_cu_record(cb, cb->ev[i]);
}

template <typename T> static int pass(cu_backend *cb, int B, int Tn, float dloss, int bwd, tr_err *err)
{
    int rv = TROUPE_OK;
    if (bwd) {
        TR_CU(record_phase(cb, 0));
    }
    TR_TRY(forward<T>(cb, B, Tn, dloss, bwd, err));
    if (bwd) {
        TR_CU(record_phase(cb, 1));
        TR_TRY(backward<T>(cb, B, Tn, err));
        TR_CU(record_phase(cb, 2));
        cb->have_fb = 1;
    }
out:
    return rv;
}

static int pass_any(cu_backend *cb, int B, int Tn, float dloss, int backward, tr_err *err)
{
    return cb->bf16 ? pass<bf16>(cb, B, Tn, dloss, backward, err)
                    : pass<float>(cb, B, Tn, dloss, backward, err);
}

/* capture_pass records one pass into a graph and instantiates it. Any
 * failure leaves graph_exec NULL with the error cleared: the caller falls
 * back to eager launches, which then report a real error if there is one. */
static void capture_pass(cu_backend *cb, int B, int Tn, float dloss, int backward, int slot,
                         const int key[TR_CU_GRAPH_KEY])
{
    tr_err cerr = {0, ""};
    cudaGraph_t graph = NULL;
    if (cudaStreamBeginCapture(cb->s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    int rv = pass_any(cb, B, Tn, dloss, backward, &cerr);
    cudaError_t e = cudaStreamEndCapture(cb->s, &graph);
    if (rv == TROUPE_OK && e == cudaSuccess) {
        e = cudaGraphInstantiate(&cb->graph_exec[slot], graph, 0);
    }
    if (graph != NULL) {
        cudaGraphDestroy(graph);
    }
    if (rv != TROUPE_OK || e != cudaSuccess) {
        TR_LOG(TR_LOG_WARNING, "cuda backend: graph capture failed (%s%s), launching eagerly", cerr.msg,
               e != cudaSuccess ? cudaGetErrorString(e) : "");
        cudaGetLastError();
        cb->graph_exec[slot] = NULL;
        cb->use_graphs = 0;
        return;
    }
    memcpy(cb->graph_key[slot], key, sizeof(cb->graph_key[slot]));
}

/* A training step launches ~300 kernels and matmuls of a few microseconds of
 * launch latency each; replaying them as one CUDA graph removes most of the
 * gaps between them. The first pass of a shape runs eagerly (it also builds
 * and tunes the matmul plans, which allocate and synchronise and so cannot be
 * captured); the second captures a graph, and later passes of the same shape
 * replay it. Everything a pass reads comes from fixed device buffers, except
 * dloss, which is part of the key, as is whether the weight gradients are
 * written fresh (the first backward after an elided zero_grads) or added. */
int tr_cu_pass(cu_backend *cb, int B, int Tn, float dloss, int backward, tr_err *err)
{
    int fresh = backward && cb->zero_pending, armed = backward && cb->dp_armed;
    int slot = backward + fresh + 2 * armed;
    int rv = TROUPE_OK, key[TR_CU_GRAPH_KEY] = {B, Tn, backward, cb->flash, cb->gelu_epi, fresh, 0, armed};
    memcpy(&key[6], &dloss, sizeof(float));
    cudaGraphExec_t *ge = &cb->graph_exec[slot];
    cb->fresh_dw = fresh;
    if (*ge != NULL && (!cb->use_graphs || memcmp(key, cb->graph_key[slot], sizeof(key)) != 0)) {
        cudaGraphExecDestroy(*ge);
        *ge = NULL;
    }
    if (cb->use_graphs && *ge == NULL && cb->have_eager_key[slot] &&
        memcmp(key, cb->eager_key[slot], sizeof(key)) == 0) {
        capture_pass(cb, B, Tn, dloss, backward, slot, key);
    }
    if (cb->use_graphs && *ge != NULL) {
        TR_CU_TRY(cudaGraphLaunch(*ge, cb->s));
        cb->have_fb = cb->have_fb || backward;
        goto done;
    }
    TR_TRY(pass_any(cb, B, Tn, dloss, backward, err));
    memcpy(cb->eager_key[slot], key, sizeof(key));
    cb->have_eager_key[slot] = 1;
done:
    if (fresh) {
        cb->zero_pending = 0;
    }
    if (armed) { /* the events are queued: the buckets go behind them now, while the GPU runs */
        cb->dp_armed = 0;
        TR_TRY(tr_cu_dp_issue(cb, err));
    }
out:
    cb->fresh_dw = 0;
    if (backward) { /* armed for one backward only, also when it failed */
        cb->dp_armed = 0;
    }
    return rv;
}

int tr_cu_dw_tensor(int i)
{
    return i == TR_P_WTE || i == TR_P_QKVW || i == TR_P_ATTPROJW || i == TR_P_FCW || i == TR_P_FCPROJW;
}
