/* attention.cu - causal multi-head attention, two ways.
 *
 * The flash path (bf16, head size 64) never stores the T x T score matrix:
 * each block holds 64 query rows, streams 64-key tiles of K and V through
 * shared memory and keeps a running softmax (FlashAttention-2). Matrix
 * products use the tensor cores through mma.sync m16n8k16 (bf16 in, fp32
 * accumulate); a warp owns 16 rows, so the score accumulators it produces are
 * already laid out as the A operand of the next product. Backward runs two
 * kernels, one per key tile (dK, dV) and one per query tile (dQ), which
 * recomputes the scores instead of adding dQ with atomics: deterministic and
 * free of contention, for one extra product per tile pair.
 *
 * The naive path (any type, any head size) materialises the probabilities and
 * exists to check the flash path and to run fp32 mode exactly. */
#include "cu_kernels.h"

/* ---- naive reference path ------------------------------------------------ */

/* One warp per (b, h, t) row: scores, softmax in place, then y = att . v. */
template <typename T>
__global__ void attn_naive_fwd_kernel(T *y, T *att, const T *qkv, int B, int Tn, int NH, int hd)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * Tn) {
        return;
    }
    int t = row % Tn, h = (row / Tn) % NH, b = row / (Tn * NH), C = NH * hd;
    const T *q = qkv + ((size_t)b * Tn + t) * 3 * C + h * hd;
    T *a = att + (size_t)row * Tn;
    float scale = rsqrtf((float)hd), mx = -INFINITY;
    for (int s = lane; s <= t; s += 32) {
        const T *k = qkv + ((size_t)b * Tn + s) * 3 * C + C + h * hd;
        float dot = 0.0f;
        for (int d = 0; d < hd; d++) {
            dot += tr_to_f(q[d]) * tr_to_f(k[d]);
        }
        dot *= scale;
        mx = fmaxf(mx, dot);
        a[s] = tr_from_f<T>(dot);
    }
    mx = tr_warp_max(mx);
    __syncwarp();
    float sum = 0.0f;
    for (int s = lane; s <= t; s += 32) {
        sum += expf(tr_to_f(a[s]) - mx);
    }
    sum = tr_warp_sum(sum);
    for (int s = lane; s < Tn; s += 32) {
        a[s] = tr_from_f<T>(s <= t ? expf(tr_to_f(a[s]) - mx) / sum : 0.0f);
    }
    __syncwarp();
    T *out = y + ((size_t)b * Tn + t) * C + h * hd;
    for (int d = lane; d < hd; d += 32) {
        float acc = 0.0f;
        for (int s = 0; s <= t; s++) {
            acc += tr_to_f(a[s]) * tr_to_f(qkv[((size_t)b * Tn + s) * 3 * C + 2 * C + h * hd + d]);
        }
        out[d] = tr_from_f<T>(acc);
    }
}

/* Query side of backward, one warp per (b, h, t): dscore row into scratch,
 * then dq = dscore . k. */
template <typename T>
__global__ void attn_naive_bwd_q_kernel(T *dqkv, T *dpre, const T *dy, const T *att, const T *qkv, int B,
                                        int Tn, int NH, int hd)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * Tn) {
        return;
    }
    int t = row % Tn, h = (row / Tn) % NH, b = row / (Tn * NH), C = NH * hd;
    const T *g = dy + ((size_t)b * Tn + t) * C + h * hd, *a = att + (size_t)row * Tn;
    T *dp = dpre + (size_t)row * Tn;
    float scale = rsqrtf((float)hd), dot = 0.0f;
    for (int s = lane; s <= t; s += 32) {
        const T *v = qkv + ((size_t)b * Tn + s) * 3 * C + 2 * C + h * hd;
        float da = 0.0f;
        for (int d = 0; d < hd; d++) {
            da += tr_to_f(g[d]) * tr_to_f(v[d]);
        }
        dot += da * tr_to_f(a[s]);
        dp[s] = tr_from_f<T>(da);
    }
    dot = tr_warp_sum(dot);
    for (int s = lane; s < Tn; s += 32) {
        dp[s] = tr_from_f<T>(s <= t ? tr_to_f(a[s]) * (tr_to_f(dp[s]) - dot) * scale : 0.0f);
    }
    __syncwarp();
    T *dq = dqkv + ((size_t)b * Tn + t) * 3 * C + h * hd;
    for (int d = lane; d < hd; d += 32) {
        float acc = 0.0f;
        for (int s = 0; s <= t; s++) {
            acc += tr_to_f(dp[s]) * tr_to_f(qkv[((size_t)b * Tn + s) * 3 * C + C + h * hd + d]);
        }
        dq[d] = tr_from_f<T>(acc);
    }
}

/* Key side, one warp per (b, h, s): dk = sum_t dscore[t][s] q_t, dv = sum_t att[t][s] dy_t. */
template <typename T>
__global__ void attn_naive_bwd_kv_kernel(T *dqkv, const T *dpre, const T *dy, const T *att, const T *qkv,
                                         int B, int Tn, int NH, int hd)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * Tn) {
        return;
    }
    int s = row % Tn, h = (row / Tn) % NH, b = row / (Tn * NH), C = NH * hd;
    size_t plane = ((size_t)b * NH + h) * Tn * Tn;
    T *dk = dqkv + ((size_t)b * Tn + s) * 3 * C + C + h * hd, *dv = dk + C;
    for (int d = lane; d < hd; d += 32) {
        float ak = 0.0f, av = 0.0f;
        for (int t = s; t < Tn; t++) {
            size_t i = plane + (size_t)t * Tn + s;
            ak += tr_to_f(dpre[i]) * tr_to_f(qkv[((size_t)b * Tn + t) * 3 * C + h * hd + d]);
            av += tr_to_f(att[i]) * tr_to_f(dy[((size_t)b * Tn + t) * C + h * hd + d]);
        }
        dk[d] = tr_from_f<T>(ak);
        dv[d] = tr_from_f<T>(av);
    }
}

template <typename T>
cudaError_t tr_cu_attn_naive_fwd(T *y, T *att, const T *qkv, int B, int Tn, int NH, int hd, cudaStream_t s)
{
    attn_naive_fwd_kernel<<<tr_cdiv((size_t)B * NH * Tn, 8), 256, 0, s>>>(y, att, qkv, B, Tn, NH, hd);
    return cudaGetLastError();
}

template <typename T>
cudaError_t tr_cu_attn_naive_bwd(T *dqkv, T *scratch, const T *dy, const T *att, const T *qkv, int B, int Tn,
                                 int NH, int hd, cudaStream_t s)
{
    unsigned g = tr_cdiv((size_t)B * NH * Tn, 8);
    attn_naive_bwd_q_kernel<<<g, 256, 0, s>>>(dqkv, scratch, dy, att, qkv, B, Tn, NH, hd);
    attn_naive_bwd_kv_kernel<<<g, 256, 0, s>>>(dqkv, scratch, dy, att, qkv, B, Tn, NH, hd);
    return cudaGetLastError();
}

template cudaError_t tr_cu_attn_naive_fwd<float>(float *, float *, const float *, int, int, int, int,
                                                 cudaStream_t);
template cudaError_t tr_cu_attn_naive_fwd<bf16>(bf16 *, bf16 *, const bf16 *, int, int, int, int,
                                                cudaStream_t);
template cudaError_t tr_cu_attn_naive_bwd<float>(float *, float *, const float *, const float *,
                                                 const float *, int, int, int, int, cudaStream_t);
template cudaError_t tr_cu_attn_naive_bwd<bf16>(bf16 *, bf16 *, const bf16 *, const bf16 *, const bf16 *, int,
                                                int, int, int, cudaStream_t);

/* ---- flash path: tensor-core helpers ------------------------------------ */

#define FA_D 64    /* head size */
#define FA_TILE 64 /* rows per tile (queries or keys) */
#define FA_LD 72   /* shared row length: +16 bytes so ldmatrix rows hit distinct banks */

typedef bf16 fa_tile[FA_TILE][FA_LD];

__device__ __forceinline__ void cp_async16(void *dst, const void *src, int bytes)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}

/* 4-byte variant (.ca: the 16-byte-only .cg does not take it); bytes 0
 * zero-fills. */
__device__ __forceinline__ void cp_async4(void *dst, const void *src, int bytes)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}

__device__ __forceinline__ void cp_async_wait_all()
{
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}

/* cp_async_wait<N> waits until at most N committed groups are in flight. */
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* load_tile copies rows [row0, row0+64) of a 64-wide head slice (row stride
 * rs elements) into shared memory; rows past Tn are zero-filled. Every flash
 * kernel runs FA_THREADS threads: each copies four 16-byte pieces of one
 * column, 16 rows apart, so the address arithmetic is one multiply per tile
 * and the bounds test is paid only by the last, partial tile. */
#define FA_THREADS 128
__device__ __forceinline__ void load_tile(fa_tile dst, const bf16 *src, int row0, int Tn, int rs)
{
    int r = threadIdx.x >> 3, col = (threadIdx.x & 7) * 8;
    const bf16 *p = src + (size_t)(row0 + r) * rs + col;
    size_t step = (size_t)(FA_THREADS / 8) * rs;
    if (row0 + FA_TILE <= Tn) {
#pragma unroll
        for (int i = 0; i < FA_TILE / (FA_THREADS / 8); i++) {
            cp_async16(&dst[r + i * (FA_THREADS / 8)][col], p + i * step, 16);
        }
    } else {
#pragma unroll
        for (int i = 0; i < FA_TILE / (FA_THREADS / 8); i++) {
            int in = row0 + r + i * (FA_THREADS / 8) < Tn;
            cp_async16(&dst[r + i * (FA_THREADS / 8)][col], in ? p + i * step : src, in ? 16 : 0);
        }
    }
}

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const bf16 *p)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const bf16 *p)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* c = A . B with a zero accumulator: saves clearing the registers first. */
__device__ __forceinline__ void mma16816_z(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};\n"
                 : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* A operand (16 rows x 64 k) of a warp from rows r0.. of a tile: 4 k-steps. */
__device__ __forceinline__ void load_a_frags(uint32_t f[4][4], const fa_tile t, int r0)
{
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        ldsm_x4(f[kk], &t[r0 + (lane & 15)][kk * 16 + (lane >> 4) * 8]);
    }
}

/* acc[16 x 64] = A[16 x 64] . X^T where X is a tile stored [n][k] (keys by
 * head dim): the score product Q K^T, or dO V^T. Overwrites acc. */
__device__ __forceinline__ void mma_abt(float acc[8][4], const uint32_t a[4][4], const fa_tile x)
{
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t r[4];
            ldsm_x4(r, &x[np * 16 + (lane & 7) + (lane >> 4) * 8][kk * 16 + ((lane >> 3) & 1) * 8]);
            if (kk == 0) {
                mma16816_z(acc[2 * np], a[kk], r[0], r[1]);
                mma16816_z(acc[2 * np + 1], a[kk], r[2], r[3]);
            } else {
                mma16816(acc[2 * np], a[kk], r[0], r[1]);
                mma16816(acc[2 * np + 1], a[kk], r[2], r[3]);
            }
        }
    }
}

/* acc[16 x 64] += P[16 x 64] . X where P is in accumulator layout (p[8][4],
 * converted to bf16 A fragments on the fly) and X is a tile stored [k][n]. */
__device__ __forceinline__ void mma_px(float acc[8][4], const float p[8][4], const fa_tile x)
{
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t a[4] = {pack_bf16(p[2 * kk][0], p[2 * kk][1]), pack_bf16(p[2 * kk][2], p[2 * kk][3]),
                         pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                         pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t r[4];
            ldsm_x4_t(r, &x[kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8][np * 16 + (lane >> 4) * 8]);
            mma16816(acc[2 * np], a, r[0], r[1]);
            mma16816(acc[2 * np + 1], a, r[2], r[3]);
        }
    }
}

__device__ __forceinline__ void zero_acc(float a[8][4])
{
#pragma unroll
    for (int i = 0; i < 8; i++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            a[i][e] = 0.0f;
        }
    }
}

/* store_rows writes a warp's 16 x 64 accumulator (times mul) as bf16 rows
 * r0 + g and r0 + g + 8 of dst (row stride rs), skipping rows >= Tn. */
__device__ __forceinline__ void store_rows(bf16 *dst, int rs, int r0, int Tn, const float a[8][4], float mul0,
                                           float mul1)
{
    int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        int col = nt * 8 + 2 * t;
        if (r0 + g < Tn) {
            *reinterpret_cast<uint32_t *>(dst + (size_t)(r0 + g) * rs + col) =
                pack_bf16(a[nt][0] * mul0, a[nt][1] * mul0);
        }
        if (r0 + g + 8 < Tn) {
            *reinterpret_cast<uint32_t *>(dst + (size_t)(r0 + g + 8) * rs + col) =
                pack_bf16(a[nt][2] * mul1, a[nt][3] * mul1);
        }
    }
}

/* col_sums writes the column sums of a warp's 16 x 64 accumulator (times
 * mul) to sh[64], the warp's own slot in shared memory, leaving out rows that
 * are padding past Tn. Summed over the block's warps and then the grid, these
 * are the qkv bias gradient, which thus costs no pass of its own over dqkv.
 * (Shared-memory float atomics instead of per-warp slots cost about 10% of
 * the backward kernels' time.) */
__device__ __forceinline__ void col_sums(float *sh, const float a[8][4], float mul, int row0, int row1,
                                         int Tn)
{
    int lane = threadIdx.x % 32, t = lane & 3;
    float in0 = row0 < Tn ? mul : 0.0f, in1 = row1 < Tn ? mul : 0.0f;
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        float c0 = a[nt][0] * in0 + a[nt][2] * in1, c1 = a[nt][1] * in0 + a[nt][3] * in1;
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) {
            c0 += __shfl_xor_sync(0xffffffffu, c0, o);
            c1 += __shfl_xor_sync(0xffffffffu, c1, o);
        }
        if (lane < 4) {
            sh[nt * 8 + 2 * t] = c0;
            sh[nt * 8 + 2 * t + 1] = c1;
        }
    }
}

/* ---- flash forward -------------------------------------------------------- */

/* Blocks per multiprocessor that the register allocation must allow. These
 * kernels are latency-bound (ncu at 124M B=16: 25% occupancy, about half the
 * issue slots used), so occupancy is worth a few spilled bytes: the dK/dV
 * kernel goes from 2 blocks (222 registers) to 3 (168, 8 bytes spilled). An
 * intra-warp pipelined forward (next tile's Q K^T issued before this tile's
 * softmax) was measured no faster: its 168 registers cost a block. */
#define FA_FWD_MINB 4
#define FA_BKV_MINB 3

/* softmax_tile turns a warp's raw scores s (16 rows x 64 keys) into
 * probabilities against the running max m (log2 domain, already scaled),
 * rescales the output accumulator o and the row sums l, and leaves P in s.
 * The 1/sqrt(d) log2(e) scale is folded into the exponent's FMA (the max of
 * the raw scores times a positive scale is the max of the scaled ones). Only
 * the diagonal tile (DIAG) pays for the causal mask. */
template <bool DIAG>
__device__ __forceinline__ void softmax_tile(float s[8][4], float o[8][4], float &m0, float &m1, float &l0,
                                             float &l1, float scale_log2, int key0, int row0, int row1)
{
    int t = threadIdx.x & 3;
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        if (DIAG) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (key0 + nt * 8 + 2 * t + (e & 1) > (e < 2 ? row0 : row1)) {
                    s[nt][e] = -INFINITY;
                }
            }
        }
        mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
        mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    /* every row sees key 0 in its first tile, so n is finite from then on */
    float n0 = fmaxf(m0, mx0 * scale_log2), n1 = fmaxf(m1, mx1 * scale_log2);
    float c0 = exp2f(m0 - n0), c1 = exp2f(m1 - n1);
    m0 = n0;
    m1 = n1;
    l0 *= c0;
    l1 *= c1;
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        s[nt][0] = exp2f(fmaf(s[nt][0], scale_log2, -n0));
        s[nt][1] = exp2f(fmaf(s[nt][1], scale_log2, -n0));
        s[nt][2] = exp2f(fmaf(s[nt][2], scale_log2, -n1));
        s[nt][3] = exp2f(fmaf(s[nt][3], scale_log2, -n1));
        l0 += s[nt][0] + s[nt][1];
        l1 += s[nt][2] + s[nt][3];
    }
    /* skipping this when no row max moved (a warp vote) measured no faster */
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        o[nt][0] *= c0;
        o[nt][1] *= c0;
        o[nt][2] *= c1;
        o[nt][3] *= c1;
    }
}

/* K and V tiles are double-buffered: while the warps compute on key tile j,
 * cp.async brings tile j+1 into the other buffers. Q passes through sV[1]
 * first; once it sits in registers (before the first barrier of the loop)
 * that space is reused. */
__global__ void __launch_bounds__(128, FA_FWD_MINB)
    flash_fwd_kernel(bf16 *y, float *lse, const bf16 *qkv, int Tn, int NH, float scale_log2)
{
    __shared__ __align__(16) fa_tile sK[2], sV[2];
    int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z; /* longest rows first */
    int C = NH * FA_D, rs = 3 * C, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2;
    const bf16 *base = qkv + (size_t)b * Tn * rs + h * FA_D;
    load_tile(sV[1], base, qt * FA_TILE, Tn, rs);
    load_tile(sK[0], base + C, 0, Tn, rs);
    cp_async_commit();
    load_tile(sV[0], base + 2 * C, 0, Tn, rs);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    uint32_t qf[4][4];
    load_a_frags(qf, sV[1], warp * 16);
    float o[8][4], s[8][4], m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    zero_acc(o);
    int row0 = qt * FA_TILE + warp * 16 + g, row1 = row0 + 8;
    for (int j = 0; j <= qt; j++) {
        cp_async_wait<0>();
        __syncthreads(); /* tile j is in; every warp is done with tile j-1 (and with Q) */
        if (j < qt) {
            load_tile(sK[(j + 1) & 1], base + C, (j + 1) * FA_TILE, Tn, rs);
            load_tile(sV[(j + 1) & 1], base + 2 * C, (j + 1) * FA_TILE, Tn, rs);
            cp_async_commit();
        }
        mma_abt(s, qf, sK[j & 1]);
        if (j < qt) {
            softmax_tile<false>(s, o, m0, m1, l0, l1, scale_log2, j * FA_TILE, row0, row1);
        } else {
            softmax_tile<true>(s, o, m0, m1, l0, l1, scale_log2, j * FA_TILE, row0, row1);
        }
        mma_px(o, s, sV[j & 1]);
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    store_rows(y + (size_t)b * Tn * C + h * FA_D, C, qt * FA_TILE + warp * 16, Tn, o, 1.0f / l0, 1.0f / l1);
    if ((lane & 3) == 0) {
        float *ls = lse + ((size_t)b * NH + h) * Tn;
        if (row0 < Tn) {
            ls[row0] = m0 + log2f(l0);
        }
        if (row1 < Tn) {
            ls[row1] = m1 + log2f(l1);
        }
    }
}

/* max_shared asks for the largest shared-memory carveout for a kernel, so
 * that occupancy is bounded by registers rather than by the default split
 * with L1. Skipped while the stream is being captured into a graph (the
 * attribute set on the eager pass before capture stays). */
static cudaError_t max_shared(const void *fn, cudaStream_t s)
{
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(s, &st);
    if (e != cudaSuccess || st != cudaStreamCaptureStatusNone) {
        return e;
    }
    return cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                cudaSharedmemCarveoutMaxShared);
}

cudaError_t tr_cu_flash_fwd(bf16 *y, float *lse, const bf16 *qkv, int B, int Tn, int NH, cudaStream_t s)
{
    float scale_log2 = 1.4426950408889634f / sqrtf((float)FA_D);
    dim3 grid(tr_cdiv(Tn, FA_TILE), NH, B);
    cudaError_t e = max_shared((const void *)flash_fwd_kernel, s);
    if (e != cudaSuccess) {
        return e;
    }
    flash_fwd_kernel<<<grid, 128, 0, s>>>(y, lse, qkv, Tn, NH, scale_log2);
    return cudaGetLastError();
}

/* ---- flash backward ------------------------------------------------------- */

/* causal_zero overwrites with 0 the entries of a warp's 16 x 64 accumulator
 * tile that lie above the diagonal. Rows are a0 (entries 0, 1) and a1 (2, 3);
 * column nt*8 + (e&1) sits at position c0 + nt*8 + (e&1). Without transposed,
 * rows are queries and columns keys (masked: key > query); transposed, rows
 * are keys and columns queries (masked: key > query too). Overwriting rather
 * than multiplying also clears any inf the unmasked exponent made there. */
__device__ __forceinline__ void causal_zero(float a[8][4], int a0, int a1, int c0, bool transposed)
{
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int row = e < 2 ? a0 : a1, col = c0 + nt * 8 + (e & 1);
            if (transposed ? row > col : col > row) {
                a[nt][e] = 0.0f;
            }
        }
    }
}

/* load_q_side queues query tile i (Q, dO) and its lse/dsum rows into one
 * buffer of the dK/dV kernel, all through cp.async: a plain load here would
 * hold two warps at every tile for a round trip to L2. Padding rows come in
 * as zeros (lse 0 makes P = 1 there, but their Q and dO rows are zero, so
 * they add nothing to dK or dV). */
__device__ __forceinline__ void load_q_side(fa_tile *qo, float *sl, float *sd, const bf16 *qb,
                                            const bf16 *dyb, const float *lb, const float *db, int i, int Tn,
                                            int rs, int C)
{
    load_tile(qo[0], qb, i * FA_TILE, Tn, rs);
    load_tile(qo[1], dyb, i * FA_TILE, Tn, C);
    if (threadIdx.x < FA_TILE) {
        int q = i * FA_TILE + threadIdx.x, in = q < Tn;
        cp_async4(&sl[threadIdx.x], in ? lb + q : lb, in ? 4 : 0);
        cp_async4(&sd[threadIdx.x], in ? db + q : db, in ? 4 : 0);
    }
    cp_async_commit();
}

/* dK, dV for one 64-key tile; each warp owns 16 keys and walks the query
 * tiles at or after its own, computing the transposed scores K Q^T so that
 * P^T and dS^T come out as A operands for dV += P^T dO and dK += dS^T Q.
 * K and V live in registers after the first load, so their shared memory
 * becomes the second buffer of the double-buffered (Q, dO) stream. */
__global__ void __launch_bounds__(128, FA_BKV_MINB)
    flash_bwd_kv_kernel(bf16 *dqkv, float *dbias, const bf16 *dy, const float *lse, const float *dsum,
                        const bf16 *qkv, int Tn, int NH, float scale_log2, float scale)
{
    __shared__ __align__(16) fa_tile sQO[2][2]; /* [buffer][Q, dO]; buffer 1 first holds K, V */
    __shared__ float sL[2][FA_TILE], sD[2][FA_TILE];
    __shared__ float sB[FA_THREADS / 32][2 * FA_D]; /* per warp: dK, dV column sums */
    int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, nq = gridDim.x;
    int C = NH * FA_D, rs = 3 * C, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2,
        t = lane & 3;
    const bf16 *base = qkv + (size_t)b * Tn * rs + h * FA_D, *dyb = dy + (size_t)b * Tn * C + h * FA_D;
    const float *lb = lse + ((size_t)b * NH + h) * Tn, *db = dsum + ((size_t)b * NH + h) * Tn;
    load_tile(sQO[1][0], base + C, kt * FA_TILE, Tn, rs);
    load_tile(sQO[1][1], base + 2 * C, kt * FA_TILE, Tn, rs);
    cp_async_commit();
    load_q_side(sQO[0], sL[0], sD[0], base, dyb, lb, db, kt, Tn, rs, C);
    cp_async_wait<1>();
    __syncthreads();
    uint32_t kf[4][4], vf[4][4];
    load_a_frags(kf, sQO[1][0], warp * 16);
    load_a_frags(vf, sQO[1][1], warp * 16);
    float dk[8][4], dv[8][4];
    zero_acc(dk);
    zero_acc(dv);
    int key0 = kt * FA_TILE + warp * 16 + g, key1 = key0 + 8;
    for (int i = kt; i < nq; i++) {
        int buf = (i - kt) & 1;
        cp_async_wait<0>();
        __syncthreads(); /* tile i is in; the other buffer is free */
        if (i + 1 < nq) {
            load_q_side(sQO[buf ^ 1], sL[buf ^ 1], sD[buf ^ 1], base, dyb, lb, db, i + 1, Tn, rs, C);
        }
        const bf16(*sQ)[FA_LD] = sQO[buf][0];
        const bf16(*sO)[FA_LD] = sQO[buf][1];
        const float *L = sL[buf], *D = sD[buf];
        float p[8][4], dp[8][4];
        mma_abt(p, kf, sQ);
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                p[nt][e] = exp2f(p[nt][e] * scale_log2 - L[nt * 8 + 2 * t + (e & 1)]);
            }
        }
        if (i == kt) { /* only the diagonal tile pays for the causal mask */
            causal_zero(p, key0, key1, i * FA_TILE + 2 * t, true);
        }
        mma_px(dv, p, sO);
        mma_abt(dp, vf, sO);
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int qc = nt * 8 + 2 * t + (e & 1);
                dp[nt][e] = p[nt][e] * (dp[nt][e] - D[qc]);
            }
        }
        mma_px(dk, dp, sQ);
    }
    bf16 *out = dqkv + (size_t)b * Tn * rs + h * FA_D;
    store_rows(out + C, rs, kt * FA_TILE + warp * 16, Tn, dk, scale, scale);
    store_rows(out + 2 * C, rs, kt * FA_TILE + warp * 16, Tn, dv, 1.0f, 1.0f);
    if (dbias != nullptr) {
        col_sums(sB[warp], dk, scale, key0, key1, Tn);
        col_sums(sB[warp] + FA_D, dv, 1.0f, key0, key1, Tn);
        __syncthreads();
        int c = threadIdx.x; /* FA_THREADS == 2 * FA_D: one column of dK or dV each */
        atomicAdd(dbias + (c < FA_D ? C : 2 * C - FA_D) + h * FA_D + c,
                  sB[0][c] + sB[1][c] + sB[2][c] + sB[3][c]);
    }
}

/* dQ for one 64-query tile: recompute P from the saved log-sum-exp, then
 * dS = P (dO V^T - dsum) and dQ = dS K. Q and dO go to registers first;
 * (K, V) tiles stream through two buffers. This kernel runs first and also
 * computes the softmax-backward row term dsum = rowsum(dO * O) for its rows,
 * which the dK/dV kernel then reads. */
__global__ void __launch_bounds__(128)
    flash_bwd_q_kernel(bf16 *dqkv, float *dbias, const bf16 *dy, const bf16 *y, const float *lse, float *dsum,
                       const bf16 *qkv, int Tn, int NH, float scale_log2, float scale)
{
    __shared__ __align__(16) fa_tile sKV[2][2]; /* [buffer][K, V]; buffer 1 first holds Q, dO */
    __shared__ float sB[FA_THREADS / 32][FA_D]; /* per warp: dQ column sums */
    int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int C = NH * FA_D, rs = 3 * C, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2,
        t = lane & 3;
    const bf16 *base = qkv + (size_t)b * Tn * rs + h * FA_D, *dyb = dy + (size_t)b * Tn * C + h * FA_D;
    load_tile(sKV[1][0], base, qt * FA_TILE, Tn, rs);
    load_tile(sKV[1][1], dyb, qt * FA_TILE, Tn, C);
    cp_async_commit();
    load_tile(sKV[0][0], base + C, 0, Tn, rs);
    load_tile(sKV[0][1], base + 2 * C, 0, Tn, rs);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    uint32_t qf[4][4], of[4][4];
    load_a_frags(qf, sKV[1][0], warp * 16);
    load_a_frags(of, sKV[1][1], warp * 16);
    int row0 = qt * FA_TILE + warp * 16 + g, row1 = row0 + 8;
    const float *lb = lse + ((size_t)b * NH + h) * Tn;
    float L0 = row0 < Tn ? lb[row0] : INFINITY, L1 = row1 < Tn ? lb[row1] : INFINITY;
    float D0 = 0.0f, D1 = 0.0f; /* each of the 4 threads of a row sums 16 of its 64 columns */
    {
        const bf16 *yb = y + (size_t)b * Tn * C + h * FA_D;
        int r0 = warp * 16 + g;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int r = r0 + 8 * half, row = qt * FA_TILE + r;
            float acc = 0.0f;
            if (row < Tn) {
#pragma unroll
                for (int v = 0; v < 2; v++) {
                    int col = t * 16 + v * 8;
                    Vec<bf16> o = Vec<bf16>::load(yb + (size_t)row * C + col),
                              d = Vec<bf16>::load(&sKV[1][1][r][col]);
#pragma unroll
                    for (int e = 0; e < 8; e++) {
                        acc += tr_to_f(o.e[e]) * tr_to_f(d.e[e]);
                    }
                }
            }
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            acc += __shfl_xor_sync(0xffffffffu, acc, 2);
            if (half == 0) {
                D0 = acc;
            } else {
                D1 = acc;
            }
            if (t == 0 && row < Tn) {
                dsum[((size_t)b * NH + h) * Tn + row] = acc;
            }
        }
    }
    float dq[8][4];
    zero_acc(dq);
    for (int j = 0; j <= qt; j++) {
        cp_async_wait<0>();
        __syncthreads();
        if (j < qt) {
            load_tile(sKV[(j + 1) & 1][0], base + C, (j + 1) * FA_TILE, Tn, rs);
            load_tile(sKV[(j + 1) & 1][1], base + 2 * C, (j + 1) * FA_TILE, Tn, rs);
            cp_async_commit();
        }
        const bf16(*sK)[FA_LD] = sKV[j & 1][0];
        const bf16(*sV)[FA_LD] = sKV[j & 1][1];
        float p[8][4], dp[8][4];
        mma_abt(p, qf, sK);
        mma_abt(dp, of, sV);
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float pv = exp2f(p[nt][e] * scale_log2 - (e < 2 ? L0 : L1));
                dp[nt][e] = pv * (dp[nt][e] - (e < 2 ? D0 : D1));
            }
        }
        if (j == qt) { /* only the diagonal tile pays for the causal mask */
            causal_zero(dp, row0, row1, j * FA_TILE + 2 * t, false);
        }
        mma_px(dq, dp, sK);
    }
    store_rows(dqkv + (size_t)b * Tn * rs + h * FA_D, rs, qt * FA_TILE + warp * 16, Tn, dq, scale, scale);
    if (dbias != nullptr) {
        col_sums(sB[warp], dq, scale, row0, row1, Tn);
        __syncthreads();
        int c = threadIdx.x;
        if (c < FA_D) {
            atomicAdd(dbias + h * FA_D + c, sB[0][c] + sB[1][c] + sB[2][c] + sB[3][c]);
        }
    }
}

cudaError_t tr_cu_flash_bwd(bf16 *dqkv, float *dbias, float *dsum, const bf16 *dy, const bf16 *y,
                            const float *lse, const bf16 *qkv, int B, int Tn, int NH, cudaStream_t s)
{
    float scale = 1.0f / sqrtf((float)FA_D), scale_log2 = 1.4426950408889634f * scale;
    dim3 grid(tr_cdiv(Tn, FA_TILE), NH, B);
    cudaError_t e = max_shared((const void *)flash_bwd_q_kernel, s);
    if (e == cudaSuccess) {
        e = max_shared((const void *)flash_bwd_kv_kernel, s);
    }
    if (e != cudaSuccess) {
        return e;
    }
    flash_bwd_q_kernel<<<grid, 128, 0, s>>>(dqkv, dbias, dy, y, lse, dsum, qkv, Tn, NH, scale_log2, scale);
    flash_bwd_kv_kernel<<<grid, 128, 0, s>>>(dqkv, dbias, dy, lse, dsum, qkv, Tn, NH, scale_log2, scale);
    return cudaGetLastError();
}
