/* ln_check.cu - the bf16 LayerNorm backward (tr_cu_ln_bwd) on its own, at
 * the model widths (part of gpu.train.parity_bf16 and the `ln_bwd` case).
 *
 * The model-level parity tests run a width of 128 only; the kernel picks its
 * variant by the number of 256-column chunks of a row (1 to 4 in bf16), and
 * its grid by the row count, so this drives it at C = 64 (a partial chunk),
 * 768 and 1024 (the GPT-2 124M and 350M widths, exact chunks) and 1000 (a
 * partial last chunk), with row counts from a few to more than one pass of
 * the grid (rows left over per warp, a warp with no row at all). The
 * reference is double precision on the same bf16 inputs. dinp must match to
 * 1% relative L2 error per tensor and 4% of each row's norm in its worst row
 * (bf16 output rounding is about 0.2%); the column sums dw and db (same bf16
 * terms, fp32 sums) to 1e-3 and dres (sums of the rounded dinp) to 2e-2 of
 * each column's term norm. All three outputs start non-zero, since the
 * kernel adds into them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cu_kernels.h"

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static float rb(float x) /* round to bf16 and back */
{
    return __bfloat162float(__float2bfloat16(x));
}

/* one (N, C) case; returns 0 when it passes */
static int ln_case(int N, int C, uint64_t seed)
{
    size_t n = (size_t)N * C;
    float *g = (float *)malloc(n * 4), *x = (float *)malloc(n * 4), *d0 = (float *)malloc(n * 4);
    float *w = (float *)malloc(C * 4), *mean = (float *)malloc(N * 4), *rstd = (float *)malloc(N * 4);
    double *rd = (double *)malloc(n * 8), *rw = (double *)calloc(3 * C, 8), *nw = (double *)calloc(3 * C, 8);
    bf16 *hb = (bf16 *)malloc(n * sizeof(bf16));
    float *gs = (float *)malloc(3 * C * 4);
    bf16 *dd = NULL, *dg = NULL, *dx = NULL, *dw16 = NULL;
    float *dsums = NULL, *dmean = NULL, *drstd = NULL;
    int bad = 1;
    for (size_t i = 0; i < n; i++) {
        g[i] = rb(frand(&seed) * 0.5f);
        x[i] = rb(frand(&seed) * 2.0f + 0.3f);
        d0[i] = rb(frand(&seed) * 0.25f);
    }
    for (int c = 0; c < C; c++) {
        w[c] = rb(1.0f + 0.5f * frand(&seed));
    }
    for (int r = 0; r < N; r++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) {
            m += x[(size_t)r * C + c];
        }
        m /= C;
        for (int c = 0; c < C; c++) {
            double t = x[(size_t)r * C + c] - m;
            v += t * t;
        }
        mean[r] = (float)m;
        rstd[r] = (float)(1.0 / sqrt(v / C + 1e-5));
    }
    for (int c = 0; c < 3 * C; c++) {
        gs[c] = 0.5f; /* the kernel adds into dw, db, dres */
        rw[c] = 0.5;
    }
    for (int r = 0; r < N; r++) {
        const float *gr = g + (size_t)r * C, *xr = x + (size_t)r * C;
        double s1 = 0, s2 = 0;
        for (int c = 0; c < C; c++) {
            double dn = (double)gr[c] * w[c], nrm = (xr[c] - mean[r]) * (double)rstd[r];
            s1 += dn;
            s2 += dn * nrm;
        }
        s1 /= C;
        s2 /= C;
        for (int c = 0; c < C; c++) {
            double dn = (double)gr[c] * w[c], nrm = (xr[c] - mean[r]) * (double)rstd[r];
            double v = d0[(size_t)r * C + c] + (dn - s1 - nrm * s2) * rstd[r];
            rd[(size_t)r * C + c] = v;
            rw[c] += gr[c] * nrm;
            rw[C + c] += gr[c];
            rw[2 * C + c] += v;
            nw[c] += (gr[c] * nrm) * (gr[c] * nrm);
            nw[C + c] += (double)gr[c] * gr[c];
            nw[2 * C + c] += v * v;
        }
    }
    if (cudaMalloc(&dd, n * sizeof(bf16)) != cudaSuccess ||
        cudaMalloc(&dg, n * sizeof(bf16)) != cudaSuccess ||
        cudaMalloc(&dx, n * sizeof(bf16)) != cudaSuccess ||
        cudaMalloc(&dw16, C * sizeof(bf16)) != cudaSuccess || cudaMalloc(&dsums, 3 * C * 4) != cudaSuccess ||
        cudaMalloc(&dmean, N * 4) != cudaSuccess || cudaMalloc(&drstd, N * 4) != cudaSuccess) {
        printf("  ln_bwd N=%d C=%d: cudaMalloc failed\n", N, C);
        goto out;
    }
    {
        const float *src[3] = {d0, g, x};
        bf16 *dst[3] = {dd, dg, dx};
        for (int t = 0; t < 3; t++) {
            for (size_t i = 0; i < n; i++) {
                hb[i] = __float2bfloat16(src[t][i]);
            }
            cudaMemcpy(dst[t], hb, n * sizeof(bf16), cudaMemcpyHostToDevice);
        }
        for (int c = 0; c < C; c++) {
            hb[c] = __float2bfloat16(w[c]);
        }
        cudaMemcpy(dw16, hb, C * sizeof(bf16), cudaMemcpyHostToDevice);
    }
    cudaMemcpy(dsums, gs, 3 * C * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dmean, mean, N * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(drstd, rstd, N * 4, cudaMemcpyHostToDevice);
    if (tr_cu_ln_bwd<bf16>(dd, dsums, dsums + C, dsums + 2 * C, dg, dx, dw16, dmean, drstd, N, C, 0) !=
            cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
        printf("  ln_bwd N=%d C=%d: launch failed: %s\n", N, C, cudaGetErrorString(cudaGetLastError()));
        goto out;
    }
    cudaMemcpy(hb, dd, n * sizeof(bf16), cudaMemcpyDeviceToHost);
    cudaMemcpy(gs, dsums, 3 * C * 4, cudaMemcpyDeviceToHost);
    {
        double e2 = 0, r2 = 0, worst = 0, sworst[3] = {0, 0, 0};
        for (int r = 0; r < N; r++) {
            double re = 0, rn = 0;
            for (int c = 0; c < C; c++) {
                double a = __bfloat162float(hb[(size_t)r * C + c]), b = rd[(size_t)r * C + c];
                re += (a - b) * (a - b);
                rn += b * b;
            }
            e2 += re;
            r2 += rn;
            worst = fmax(worst, sqrt(re / fmax(rn, 1e-6)));
        }
        for (int k = 0; k < 3; k++) {
            for (int c = 0; c < C; c++) {
                double err = fabs(gs[k * C + c] - rw[k * C + c]) / fmax(sqrt(nw[k * C + c]), 1e-6);
                sworst[k] = fmax(sworst[k], err);
            }
        }
        double rel = sqrt(e2 / r2);
        bad = !(rel < 1e-2 && worst < 4e-2 && sworst[0] < 1e-3 && sworst[1] < 1e-3 && sworst[2] < 2e-2);
        printf(
            "  ln_bwd N=%-5d C=%-4d dinp rel %.2e worst row %.2e; column sums vs term norm: dw %.2e db %.2e "
            "dres %.2e%s\n",
            N, C, rel, worst, sworst[0], sworst[1], sworst[2], bad ? "  FAIL" : "");
    }
out:
    cudaFree(dd), cudaFree(dg), cudaFree(dx), cudaFree(dw16), cudaFree(dsums), cudaFree(dmean),
        cudaFree(drstd);
    free(g), free(x), free(d0), free(w), free(mean), free(rstd), free(rd), free(rw), free(nw), free(hb),
        free(gs);
    return bad;
}

/* tr_test_ln_bwd returns the number of failed (N, C) cases. */
extern "C" int tr_test_ln_bwd(void)
{
    static const int cases[][2] = {{37, 64},      {3000, 768}, {20000, 768}, {1000, 1000},
                                   {20000, 1024}, {5, 1024},   {2, 1024}};
    int bad = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bad += ln_case(cases[i][0], cases[i][1], 1234 + i);
    }
    return bad;
}
