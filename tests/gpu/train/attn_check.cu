/* attn_check.cu - the flash attention kernels against the reference path,
 * on their own (part of gpu.train.parity_bf16 and the `attention` case).
 *
 * The model-level parity tests see attention only through a few layers at
 * two sequence lengths; this drives tr_cu_flash_fwd / tr_cu_flash_bwd
 * directly at lengths around the 64-row tile (1, 63, 64, 65, 100, 128, 130,
 * 257, 1024) so that partial tiles, the diagonal tile's mask and the last
 * query tile are all exercised. The reference is the naive kernel in fp32 on
 * the same bf16-rounded inputs, so the only differences are the flash path's
 * bf16 probabilities and its summation order: we require an L2 error below
 * 2% of the reference's per tensor and, per row of 64, an error below 10% of
 * the average row norm (a wrong tile or mask shows as O(1) errors in whole
 * rows); norms below 1e-3 per row count as 1e-3. Seen on the H200: about
 * 0.2% per tensor and at most 4% for the worst row at T = 1024. The column
 * sums of dq, dk and dv that backward adds into the qkv bias gradient are
 * checked against the reference's: error below 2% of the larger of their norm
 * and the norm of the columns summed (the dk sums are zero in exact
 * arithmetic, since softmax ignores a shift shared by all keys, so only the
 * rounding of the terms is left there). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cu_kernels.h"

#define D 64

/* check_close prints and judges one tensor of n rows of D values: row i is
 * head i % nh of token i / nh, tokens gs elements apart (C for y, 3C for the
 * q, k or v part of dqkv). */
static int check_close(const char *what, int Tn, const float *got, const float *ref, size_t n, int nh,
                       size_t gs)
{
    double d2 = 0, r2 = 0, worst = 0;
    for (size_t i = 0; i < n; i++) {
        double dr = 0;
        for (int j = 0; j < D; j++) {
            size_t at = (i / nh) * gs + (i % nh) * D + j;
            double a = got[at], b = ref[at];
            d2 += (a - b) * (a - b);
            r2 += b * b;
            dr += (a - b) * (a - b);
        }
        worst = fmax(worst, sqrt(dr));
    }
    /* floor: at T = 1 dq and dk are zero in exact arithmetic (dS = P (dP - D)
     * with P = 1 and D = dP), so only an absolute error makes sense there */
    double scale = fmax(sqrt(r2 / (double)n), 1e-3);
    double rel = sqrt(d2 / (double)n) / scale, row = worst / scale;
    int ok = rel < 2e-2 && row < 0.1 && isfinite(rel);
    printf("  attention T=%-4d %-2s rel %.2e worst row %.2e%s\n", Tn, what, rel, row, ok ? "" : "  FAIL");
    return ok;
}

/* check_bias compares the flash backward's qkv bias gradient with the column
 * sums of the reference dqkv (rows tokens of 3C). */
static int check_bias(int Tn, const float *got, const float *rdq, size_t tokens, int C)
{
    int ok = 1;
    for (int part = 0; part < 3; part++) {
        double d2 = 0, r2 = 0, t2 = 0;
        for (int j = 0; j < C; j++) {
            double ref = 0;
            for (size_t i = 0; i < tokens; i++) {
                double v = rdq[i * 3 * C + part * C + j];
                ref += v;
                t2 += v * v;
            }
            double a = got[part * C + j];
            d2 += (a - ref) * (a - ref);
            r2 += ref * ref;
        }
        double rel = sqrt(d2) / fmax(fmax(sqrt(r2), sqrt(t2)), 1e-3);
        int good = rel < 2e-2 && isfinite(rel);
        printf("  attention T=%-4d bias %c rel %.2e%s\n", Tn, "qkv"[part], rel, good ? "" : "  FAIL");
        ok &= good;
    }
    return ok;
}

#define CU(call)                                                                                             \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));      \
            ok = 0;                                                                                          \
            goto out;                                                                                        \
        }                                                                                                    \
    } while (0)

/* one_length runs forward and backward at B=2, NH=3, sequence length Tn. */
static int one_length(int Tn)
{
    const int B = 2, NH = 3, C = NH * D;
    size_t nqkv = (size_t)B * Tn * 3 * C, ny = (size_t)B * Tn * C, natt = (size_t)B * NH * Tn * Tn;
    float *hqkv = (float *)malloc(nqkv * sizeof(float)), *hdy = (float *)malloc(ny * sizeof(float));
    float *ry = (float *)malloc(ny * sizeof(float)), *rdq = (float *)malloc(nqkv * sizeof(float));
    float *gy = (float *)malloc(ny * sizeof(float)), *gdq = (float *)malloc(nqkv * sizeof(float));
    bf16 *hb = (bf16 *)malloc(nqkv * sizeof(bf16)), *hdyb = (bf16 *)malloc(ny * sizeof(bf16));
    float *fqkv = NULL, *fdy = NULL, *fy = NULL, *fatt = NULL, *fscr = NULL, *fdq = NULL, *lse = NULL,
          *dsum = NULL, *dbias = NULL, hbias[3 * C];
    bf16 *bqkv = NULL, *bdy = NULL, *by = NULL, *bdq = NULL;
    int ok = 1;
    uint32_t x = 12345u + (uint32_t)Tn;
    /* scores of a few units, so the softmax is neither flat nor one-hot */
    for (size_t i = 0; i < nqkv; i++) {
        x = x * 1664525u + 1013904223u;
        hb[i] = __float2bfloat16(((float)(x >> 8) / 16777216.0f - 0.5f) * 3.0f);
        hqkv[i] = __bfloat162float(hb[i]);
    }
    for (size_t i = 0; i < ny; i++) {
        x = x * 1664525u + 1013904223u;
        hdyb[i] = __float2bfloat16((float)(x >> 8) / 16777216.0f - 0.5f);
        hdy[i] = __bfloat162float(hdyb[i]);
    }
    CU(cudaMalloc(&fqkv, nqkv * sizeof(float)));
    CU(cudaMalloc(&fdq, nqkv * sizeof(float)));
    CU(cudaMalloc(&fdy, ny * sizeof(float)));
    CU(cudaMalloc(&fy, ny * sizeof(float)));
    CU(cudaMalloc(&fatt, natt * sizeof(float)));
    CU(cudaMalloc(&fscr, natt * sizeof(float)));
    CU(cudaMalloc(&lse, (size_t)B * NH * Tn * sizeof(float)));
    CU(cudaMalloc(&dsum, (size_t)B * NH * Tn * sizeof(float)));
    CU(cudaMalloc(&dbias, 3 * C * sizeof(float)));
    CU(cudaMemset(dbias, 0, 3 * C * sizeof(float)));
    CU(cudaMalloc(&bqkv, nqkv * sizeof(bf16)));
    CU(cudaMalloc(&bdq, nqkv * sizeof(bf16)));
    CU(cudaMalloc(&bdy, ny * sizeof(bf16)));
    CU(cudaMalloc(&by, ny * sizeof(bf16)));
    CU(cudaMemcpy(fqkv, hqkv, nqkv * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(fdy, hdy, ny * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(bqkv, hb, nqkv * sizeof(bf16), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(bdy, hdyb, ny * sizeof(bf16), cudaMemcpyHostToDevice));
    CU(cudaMemset(bdq, 0xff, nqkv * sizeof(bf16))); /* NaN: every element must be written */
    CU(tr_cu_attn_naive_fwd<float>(fy, fatt, fqkv, B, Tn, NH, D, 0));
    CU(tr_cu_attn_naive_bwd<float>(fdq, fscr, fdy, fatt, fqkv, B, Tn, NH, D, 0));
    CU(tr_cu_flash_fwd(by, lse, bqkv, B, Tn, NH, 0));
    CU(tr_cu_flash_bwd(bdq, dbias, dsum, bdy, by, lse, bqkv, B, Tn, NH, 0));
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(hbias, dbias, 3 * C * sizeof(float), cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(ry, fy, ny * sizeof(float), cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(rdq, fdq, nqkv * sizeof(float), cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(hb, bdq, nqkv * sizeof(bf16), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < nqkv; i++) {
        gdq[i] = __bfloat162float(hb[i]);
    }
    CU(cudaMemcpy(hb, by, ny * sizeof(bf16), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < ny; i++) {
        gy[i] = __bfloat162float(hb[i]);
    }
    ok &= check_close("y", Tn, gy, ry, (size_t)B * Tn * NH, NH, C);
    /* dqkv rows are [q | k | v] of C each; walk the NH heads of each part */
    {
        const char *names[3] = {"dq", "dk", "dv"};
        for (int part = 0; part < 3; part++) {
            ok &= check_close(names[part], Tn, gdq + part * C, rdq + part * C, (size_t)B * Tn * NH, NH,
                              3 * (size_t)C);
        }
    }
    ok &= check_bias(Tn, hbias, rdq, (size_t)B * Tn, C);
out:
    cudaFree(fqkv), cudaFree(fdq), cudaFree(fdy), cudaFree(fy), cudaFree(fatt), cudaFree(fscr);
    cudaFree(lse), cudaFree(dsum), cudaFree(dbias), cudaFree(bqkv), cudaFree(bdq), cudaFree(bdy),
        cudaFree(by);
    free(hqkv), free(hdy), free(ry), free(rdq), free(gy), free(gdq), free(hb), free(hdyb);
    return ok;
}

/* tr_test_attention returns the number of failed sequence lengths. */
extern "C" int tr_test_attention(void)
{
    static const int lengths[] = {1, 63, 64, 65, 100, 128, 130, 257, 1024};
    int failed = 0;
    for (size_t i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
        failed += !one_length(lengths[i]);
    }
    return failed;
}
