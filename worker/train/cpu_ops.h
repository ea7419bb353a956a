/* cpu_ops.h - plain C fp32 forward/backward kernels of the GPT-2 layers.
 *
 * Shapes follow llm.c: activations are [B*T][C] row-major, matrices [out][in].
 * Reductions accumulate in double so that finite-difference checks in fp32 are
 * meaningful and results do not depend on the width. Every kernel is
 * deterministic and single-threaded.
 *
 * Accumulation rule: parameter gradients are always added to (+=). Input
 * gradients are written (=) by tr_cpu_matmul_backward and tr_cpu_gelu_backward
 * and added to (+=) by tr_cpu_layernorm_backward and tr_cpu_attention_backward,
 * which is what the residual stream and the q/k/v split need. */
#ifndef TR_TRAIN_CPU_OPS_H
#define TR_TRAIN_CPU_OPS_H

#include <stdint.h>

/* out[b,t,:] = wte[inp[b,t],:] + wpe[t,:] */
void tr_cpu_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T,
                            int C);
void tr_cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T,
                             int C);

/* LayerNorm over C with eps 1e-5; mean and rstd ([N]) are kept for backward. */
void tr_cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                              const float *b, int N, int C);
void tr_cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                               const float *w, const float *mean, const float *rstd, int N, int C);

/* out[n][o] = bias[o] + sum_i inp[n][i] * w[o][i]; bias may be NULL. */
void tr_cpu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int IC,
                           int OC);
/* dinp (may be NULL) = dout @ w; dw += dout^T @ inp; dbias (may be NULL) += sum dout.
 * scratch holds max(IC, OC) doubles. */
void tr_cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                            const float *w, int N, int IC, int OC, double *scratch);

/* Causal multi-head attention over qkv [B*T][3C] into out [B*T][C]; att
 * [B][NH][T][T] keeps the softmax weights for backward. scratch: T doubles. */
void tr_cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                              double *scratch);
/* dqkv += d/dqkv; scratch: 2*T doubles. */
void tr_cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                               int T, int C, int NH, double *scratch);

/* GELU, tanh approximation. */
void tr_cpu_gelu_forward(float *out, const float *inp, int n);
void tr_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, int n);

/* out = a + b */
void tr_cpu_residual_forward(float *out, const float *a, const float *b, int n);

/* Softmax over the first V logits of each row and cross-entropy against
 * targets: probs [N][V], losses [N] (natural log). Returns the sum of losses. */
double tr_cpu_softmax_xent_forward(float *probs, float *losses, const float *logits, const int32_t *targets,
                                   int N, int V);
/* dlogits = (probs - onehot(target)) * dloss, in place over probs. */
void tr_cpu_softmax_xent_backward(float *dlogits_probs, const int32_t *targets, int N, int V, float dloss);

#endif
