/* cu_kernels.h - launchers of the CUDA backend's kernels (internal, C++).
 *
 * Each launcher queues work on `s` and returns cudaGetLastError(), so a bad
 * launch configuration surfaces at the call site. Pointers are device
 * pointers; T is float (fp32 mode) or bf16. Gradient accumulators (dwte,
 * dbias, LayerNorm dweight/dbias) are fp32 in both modes and are added into. */
#ifndef TR_CU_KERNELS_H
#define TR_CU_KERNELS_H

#include "cu_common.cuh"

/* Token + position embedding: out[b,t,:] = wte[idx[b,t]] + wpe[t]. */
template <typename T>
cudaError_t tr_cu_encoder_fwd(T *out, const int32_t *idx, const T *wte, const T *wpe, int B, int Tn, int C,
                              cudaStream_t s);
/* dwte[idx] += dout, dwpe[t] += sum over b of dout (fp32 atomics). */
template <typename T>
cudaError_t tr_cu_encoder_bwd(float *dwte, float *dwpe, const T *dout, const int32_t *idx, int B, int Tn,
                              int C, cudaStream_t s);

/* LayerNorm over rows of C, optionally fused with the residual add before it:
 * with b != NULL, res = a + b is written to res and normalised; with b == NULL
 * the row a is normalised (res unused). mean/rstd (fp32, N) are kept for
 * backward. */
template <typename T>
cudaError_t tr_cu_residual_ln_fwd(T *res, T *out, float *mean, float *rstd, const T *a, const T *b,
                                  const T *w, const T *bias, int N, int C, cudaStream_t s);
/* dinp += LN backward; dw, db (fp32) += their gradients. With dres != NULL,
 * dres (fp32, C) += the column sums of the updated dinp: dinp is the
 * residual stream's gradient, whose column sums are the bias gradient of the
 * projection that added into that stream. */
template <typename T>
cudaError_t tr_cu_ln_bwd(T *dinp, float *dw, float *db, float *dres, const T *dout, const T *inp, const T *w,
                         const float *mean, const float *rstd, int N, int C, cudaStream_t s);

/* tanh-approximation GELU, as GPT-2 and the CPU backend use. */
template <typename T> cudaError_t tr_cu_gelu_fwd(T *out, const T *inp, size_t n, cudaStream_t s);
/* d = d * gelu'(inp), in place. */
template <typename T> cudaError_t tr_cu_gelu_bwd(T *d, const T *inp, size_t n, cudaStream_t s);

/* dbias[OC] (fp32) += column sums of dout[N][OC]. */
template <typename T> cudaError_t tr_cu_bias_grad(float *dbias, const T *dout, int N, int OC, cudaStream_t s);
/* Fused GELU backward and bias gradient: d[N][OC] *= gelu'(pre) in place,
 * and dbias += the column sums of the result (one pass instead of two). */
template <typename T>
cudaError_t tr_cu_gelu_bwd_bias(float *dbias, T *d, const T *pre, int N, int OC, cudaStream_t s);

/* Fused softmax + cross-entropy (+ backward): for each of N rows of Vp logits
 * writes losses[row]; with write_grad overwrites the logits in place with
 * dloss * (softmax - onehot(target)), zero in the padded columns, so the
 * probabilities never exist as a separate tensor. */
template <typename T>
cudaError_t tr_cu_classifier(T *logits, float *losses, const int32_t *targets, int N, int V, int Vp,
                             float dloss, int write_grad, cudaStream_t s);
/* out[0] = mean of x[0..n) (one block; n is B*T). */
cudaError_t tr_cu_mean(float *out, const float *x, int n, cudaStream_t s);

/* Sum of squares of x[0..n) into out[0] via per-block partials (deterministic).
 * partial must hold TR_CU_SUMSQ_BLOCKS floats. */
#define TR_CU_SUMSQ_BLOCKS 1024
cudaError_t tr_cu_sumsq(float *out, float *partial, const float *x, size_t n, cudaStream_t s);

/* One AdamW step over every parameter in one launch. Tensor boundaries come
 * in `offs` (17 entries) and decay_mask says which get weight decay. master
 * is fp32; param (may be NULL, e.g. fp32 mode where master is the parameter)
 * receives the rounded copy. */
typedef struct tr_cu_adamw_args {
    size_t offs[17];
    unsigned decay_mask;
    float lr, beta1, beta2, eps, wd, grad_scale, bc1, bc2;
} tr_cu_adamw_args;
template <typename T>
cudaError_t tr_cu_adamw(T *param, float *master, const float *grad, float *m, float *v, size_t n,
                        const tr_cu_adamw_args *a, cudaStream_t s);

/* dst = (T)src elementwise. */
template <typename T> cudaError_t tr_cu_convert(T *dst, const float *src, size_t n, cudaStream_t s);
/* Fill with deterministic pseudo-random values in [-1, 1) (GEMM ceiling). */
cudaError_t tr_cu_fill_random(bf16 *dst, size_t n, uint32_t seed, cudaStream_t s);

/* Attention, causal, qkv[B][T][3][NH][hd] -> y[B][T][NH][hd].
 * Reference path (any T, any head size): materialises att[B][NH][T][T]. */
template <typename T>
cudaError_t tr_cu_attn_naive_fwd(T *y, T *att, const T *qkv, int B, int Tn, int NH, int hd, cudaStream_t s);
/* dqkv is overwritten; scratch holds B*NH*T*T of T. */
template <typename T>
cudaError_t tr_cu_attn_naive_bwd(T *dqkv, T *scratch, const T *dy, const T *att, const T *qkv, int B, int Tn,
                                 int NH, int hd, cudaStream_t s);

/* Fused flash-style path (bf16, head size 64): keeps only lse[B][NH][T]
 * (log2 domain) for backward. dsum is scratch of B*NH*T floats. With dbias
 * != NULL, backward also adds the column sums of dqkv (the qkv bias
 * gradient, 3*NH*64 fp32) into dbias. */
cudaError_t tr_cu_flash_fwd(bf16 *y, float *lse, const bf16 *qkv, int B, int Tn, int NH, cudaStream_t s);
cudaError_t tr_cu_flash_bwd(bf16 *dqkv, float *dbias, float *dsum, const bf16 *dy, const bf16 *y,
                            const float *lse, const bf16 *qkv, int B, int Tn, int NH, cudaStream_t s);

#endif
