/* cpu_ops.c - reference kernels of the CPU backend (see cpu_ops.h).
 *
 * These are written for clarity and determinism, after llm.c's train_gpt2.c,
 * with two deliberate differences: dot products accumulate in double, and the
 * matmul backward walks rows so that every inner loop is contiguous. */
#include "cpu_ops.h"

#include <math.h>
#include <string.h>

#define LN_EPS 1e-5

void tr_cpu_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T,
                            int C)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *we = wte + (size_t)inp[b * T + t] * C;
            const float *pe = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) {
                o[i] = we[i] + pe[i];
            }
        }
    }
}

void tr_cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T,
                             int C)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *dwe = dwte + (size_t)inp[b * T + t] * C;
            float *dpe = dwpe + (size_t)t * C;
            for (int i = 0; i < C; i++) {
                dwe[i] += d[i];
                dpe[i] += d[i];
            }
        }
    }
}

void tr_cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                              const float *b, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        double m = 0.0, v = 0.0, s;
        for (int i = 0; i < C; i++) {
            m += x[i];
        }
        m /= C;
        for (int i = 0; i < C; i++) {
            double d = x[i] - m;
            v += d * d;
        }
        v /= C;
        s = 1.0 / sqrt(v + LN_EPS);
        for (int i = 0; i < C; i++) {
            o[i] = (float)((x[i] - m) * s * w[i] + b[i]);
        }
        mean[n] = (float)m;
        rstd[n] = (float)s;
    }
}

void tr_cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                               const float *w, const float *mean, const float *rstd, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *d = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        double m = mean[n], s = rstd[n];
        double dnorm_mean = 0.0, dnorm_norm_mean = 0.0;

        for (int i = 0; i < C; i++) {
            double norm = (x[i] - m) * s;
            double dnorm = (double)w[i] * d[i];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        for (int i = 0; i < C; i++) {
            double norm = (x[i] - m) * s;
            double dnorm = (double)w[i] * d[i];
            db[i] += d[i];
            dw[i] += (float)(norm * d[i]);
            dx[i] += (float)((dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
        }
    }
}

void tr_cpu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int IC,
                           int OC)
{
    /* Four output channels at a time: each input value is loaded once for
     * four independent double accumulators, which keeps the FPU busy without
     * reassociating any sum (results equal the one-at-a-time loop). */
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * IC;
        float *o = out + (size_t)n * OC;
        int oc = 0;
        for (; oc + 4 <= OC; oc += 4) {
            const float *w0 = w + (size_t)oc * IC, *w1 = w0 + IC, *w2 = w1 + IC, *w3 = w2 + IC;
            double a0 = bias ? bias[oc] : 0.0, a1 = bias ? bias[oc + 1] : 0.0;
            double a2 = bias ? bias[oc + 2] : 0.0, a3 = bias ? bias[oc + 3] : 0.0;
            for (int i = 0; i < IC; i++) {
                double xi = x[i];
                a0 += xi * w0[i];
                a1 += xi * w1[i];
                a2 += xi * w2[i];
                a3 += xi * w3[i];
            }
            o[oc] = (float)a0;
            o[oc + 1] = (float)a1;
            o[oc + 2] = (float)a2;
            o[oc + 3] = (float)a3;
        }
        for (; oc < OC; oc++) {
            const float *wr = w + (size_t)oc * IC;
            double acc = bias ? bias[oc] : 0.0;
            for (int i = 0; i < IC; i++) {
                acc += (double)x[i] * wr[i];
            }
            o[oc] = (float)acc;
        }
    }
}

/* dinp[n] = sum_o dout[n][o] * w[o]: accumulate whole rows of w into a double
 * row so the inner loop is contiguous. */
static void matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int IC, int OC,
                                  double *acc)
{
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * OC;
        memset(acc, 0, (size_t)IC * sizeof(*acc));
        for (int oc = 0; oc < OC; oc++) {
            const float *wr = w + (size_t)oc * IC;
            double g = d[oc];
            if (g == 0.0) {
                continue;
            }
            for (int i = 0; i < IC; i++) {
                acc[i] += g * wr[i];
            }
        }
        for (int i = 0; i < IC; i++) {
            dinp[(size_t)n * IC + i] = (float)acc[i];
        }
    }
}

void tr_cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                            const float *w, int N, int IC, int OC, double *scratch)
{
    if (dinp != NULL) {
        matmul_backward_input(dinp, dout, w, N, IC, OC, scratch);
    }
    /* dw[o] = sum_n dout[n][o] * inp[n], one output row at a time. */
    for (int oc = 0; oc < OC; oc++) {
        double bsum = 0.0;
        memset(scratch, 0, (size_t)IC * sizeof(*scratch));
        for (int n = 0; n < N; n++) {
            double g = dout[(size_t)n * OC + oc];
            const float *x = inp + (size_t)n * IC;
            bsum += g;
            if (g == 0.0) {
                continue;
            }
            for (int i = 0; i < IC; i++) {
                scratch[i] += g * x[i];
            }
        }
        for (int i = 0; i < IC; i++) {
            dw[(size_t)oc * IC + i] += (float)scratch[i];
        }
        if (dbias != NULL) {
            dbias[oc] += (float)bsum;
        }
    }
}

void tr_cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                              double *scratch)
{
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    size_t C3 = (size_t)C * 3;

    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                double maxv = -INFINITY, sum = 0.0;

                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
                    double dot = 0.0;
                    for (int i = 0; i < hs; i++) {
                        dot += (double)q[i] * k[i];
                    }
                    scratch[t2] = dot * scale;
                    if (scratch[t2] > maxv) {
                        maxv = scratch[t2];
                    }
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    scratch[t2] = exp(scratch[t2] - maxv);
                    sum += scratch[t2];
                }
                for (int t2 = 0; t2 < T; t2++) {
                    a[t2] = t2 <= t ? (float)(scratch[t2] / sum) : 0.0f;
                }
                for (int i = 0; i < hs; i++) {
                    double acc = 0.0;
                    for (int t2 = 0; t2 <= t; t2++) {
                        acc += (double)a[t2] *
                               qkv[((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs + i];
                    }
                    o[i] = (float)acc;
                }
            }
        }
    }
}

void tr_cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                               int T, int C, int NH, double *scratch)
{
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    size_t C3 = (size_t)C * 3;
    double *datt = scratch, *dpre = scratch + T;

    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                size_t row = ((size_t)b * T + t) * C3 + (size_t)h * hs;
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                const float *d = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                double dot_ad = 0.0;

                /* out = sum_t2 a[t2] v[t2]: gradients to a and to v. */
                for (int t2 = 0; t2 <= t; t2++) {
                    size_t vrow = ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    double acc = 0.0;
                    for (int i = 0; i < hs; i++) {
                        acc += (double)qkv[vrow + i] * d[i];
                        dqkv[vrow + i] += a[t2] * d[i];
                    }
                    datt[t2] = acc;
                    dot_ad += a[t2] * acc;
                }
                /* softmax backward: dpre = a * (datt - sum(a * datt)). */
                for (int t2 = 0; t2 <= t; t2++) {
                    dpre[t2] = a[t2] * (datt[t2] - dot_ad) * scale;
                }
                /* pre = scale * q . k[t2]: gradients to q and k. */
                for (int t2 = 0; t2 <= t; t2++) {
                    size_t krow = ((size_t)b * T + t2) * C3 + (size_t)C + (size_t)h * hs;
                    for (int i = 0; i < hs; i++) {
                        dqkv[row + i] += (float)(dpre[t2] * qkv[krow + i]);
                        dqkv[krow + i] += (float)(dpre[t2] * qkv[row + i]);
                    }
                }
            }
        }
    }
}

#define GELU_S 0.7978845608028654 /* sqrt(2/pi) */

void tr_cpu_gelu_forward(float *out, const float *inp, int n)
{
    for (int i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = (float)(0.5 * x * (1.0 + tanh(GELU_S * (x + 0.044715 * x * x * x))));
    }
}

void tr_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, int n)
{
    for (int i = 0; i < n; i++) {
        double x = inp[i];
        double u = GELU_S * (x + 0.044715 * x * x * x);
        double th = tanh(u);
        double sech2 = 1.0 - th * th;
        double g = 0.5 * (1.0 + th) + 0.5 * x * sech2 * GELU_S * (1.0 + 3.0 * 0.044715 * x * x);
        dinp[i] = (float)(g * dout[i]);
    }
}

void tr_cpu_residual_forward(float *out, const float *a, const float *b, int n)
{
    for (int i = 0; i < n; i++) {
        out[i] = a[i] + b[i];
    }
}

double tr_cpu_softmax_xent_forward(float *probs, float *losses, const float *logits, const int32_t *targets,
                                   int N, int V)
{
    double total = 0.0;

    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * V;
        float *p = probs + (size_t)n * V;
        double maxv = -INFINITY, sum = 0.0, lse;
        for (int v = 0; v < V; v++) {
            if (l[v] > maxv) {
                maxv = l[v];
            }
        }
        for (int v = 0; v < V; v++) {
            sum += exp(l[v] - maxv);
        }
        lse = maxv + log(sum);
        /* Loss from log-sum-exp rather than log(prob): exact in double even
         * when the target's probability underflows in float. */
        losses[n] = (float)(lse - l[targets[n]]);
        total += lse - l[targets[n]];
        for (int v = 0; v < V; v++) {
            p[v] = (float)exp(l[v] - lse);
        }
    }
    return total;
}

void tr_cpu_softmax_xent_backward(float *dlogits_probs, const int32_t *targets, int N, int V, float dloss)
{
    for (int n = 0; n < N; n++) {
        float *p = dlogits_probs + (size_t)n * V;
        for (int v = 0; v < V; v++) {
            double g = p[v] - (v == targets[n] ? 1.0 : 0.0);
            p[v] = (float)(g * dloss);
        }
    }
}
