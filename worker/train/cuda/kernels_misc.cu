/* kernels_misc.cu - the memory-bound kernels of the CUDA backend: embeddings,
 * LayerNorm (fused with the residual add), GELU, bias gradients, the fused
 * classifier, AdamW and the gradient norm.
 *
 * All of them move 16-byte vectors per thread (Vec<T>) so that a warp reads
 * whole 128-byte lines, and compute in fp32 whatever T stores. */
#include <stdlib.h>

#include "cu_kernels.h"

/* ---- embeddings ---------------------------------------------------------- */

template <typename T>
__global__ void encoder_fwd_kernel(T *out, const int32_t *idx, const T *wte, const T *wpe, int BT, int Tn,
                                   int C)
{
    constexpr int N = Vec<T>::N;
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
    if (i >= (size_t)BT * C) {
        return;
    }
    int row = (int)(i / C), c = (int)(i % C), t = row % Tn;
    Vec<T> a = Vec<T>::load(wte + (size_t)idx[row] * C + c), b = Vec<T>::load(wpe + (size_t)t * C + c), o;
#pragma unroll
    for (int k = 0; k < N; k++) {
        o.e[k] = tr_from_f<T>(tr_to_f(a.e[k]) + tr_to_f(b.e[k]));
    }
    o.store(out + i);
}

template <typename T>
cudaError_t tr_cu_encoder_fwd(T *out, const int32_t *idx, const T *wte, const T *wpe, int B, int Tn, int C,
                              cudaStream_t s)
{
    size_t threads = (size_t)B * Tn * C / Vec<T>::N;
    encoder_fwd_kernel<<<tr_cdiv(threads, 256), 256, 0, s>>>(out, idx, wte, wpe, B * Tn, Tn, C);
    return cudaGetLastError();
}

/* add4 adds four floats at p (16-byte aligned) with one vector atomic where
 * the architecture has it (sm_90), else four scalar ones. */
__device__ __forceinline__ void add4(float *p, float a, float b, float c, float d)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float4 *>(p), make_float4(a, b, c, d));
#else
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
    atomicAdd(p + 2, c);
    atomicAdd(p + 3, d);
#endif
}

/* Embedding backward. A thread owns 16 bytes of columns of one position t
 * and walks the B tokens at that position: it scatters each token's row into
 * dwte with vector atomics (rows of wte are hit by however many tokens share
 * an id, which no static partition knows) and sums the rows for dwpe[t]
 * itself, which it then owns outright. One atomic per element for wpe and
 * four scalar ones per vector for wte cost 0.25 ms per 124M B=16 step. */
template <typename T>
__global__ void encoder_bwd_kernel(float *dwte, float *dwpe, const T *dout, const int32_t *idx, int B, int Tn,
                                   int C)
{
    constexpr int N = Vec<T>::N;
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
    if (i >= (size_t)Tn * C) {
        return;
    }
    int t = (int)(i / C), c = (int)(i % C);
    float acc[N];
#pragma unroll
    for (int k = 0; k < N; k++) {
        acc[k] = 0.0f;
    }
#pragma unroll 4
    for (int b = 0; b < B; b++) {
        int row = b * Tn + t;
        Vec<T> d = Vec<T>::load(dout + (size_t)row * C + c);
        float *we = dwte + (size_t)idx[row] * C + c;
#pragma unroll
        for (int k = 0; k < N; k += 4) {
            float x0 = tr_to_f(d.e[k]), x1 = tr_to_f(d.e[k + 1]), x2 = tr_to_f(d.e[k + 2]),
                  x3 = tr_to_f(d.e[k + 3]);
            add4(we + k, x0, x1, x2, x3);
            acc[k] += x0, acc[k + 1] += x1, acc[k + 2] += x2, acc[k + 3] += x3;
        }
    }
    float *pe = dwpe + (size_t)t * C + c;
#pragma unroll
    for (int k = 0; k < N; k++) {
        pe[k] += acc[k];
    }
}

template <typename T>
cudaError_t tr_cu_encoder_bwd(float *dwte, float *dwpe, const T *dout, const int32_t *idx, int B, int Tn,
                              int C, cudaStream_t s)
{
    size_t threads = (size_t)Tn * C / Vec<T>::N;
    encoder_bwd_kernel<<<tr_cdiv(threads, 128), 128, 0, s>>>(dwte, dwpe, dout, idx, B, Tn, C);
    return cudaGetLastError();
}

/* ---- LayerNorm ----------------------------------------------------------- */

/* One warp per row. The first pass forms the residual sum (rounded to T, as
 * stored, so backward sees the same input) and the mean; the row is then
 * re-read from cache for the variance and the output. */
template <typename T>
__global__ void residual_ln_fwd_kernel(T *res, T *out, float *mean, float *rstd, const T *a, const T *b,
                                       const T *w, const T *bias, int N, int C)
{
    constexpr int V = Vec<T>::N;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) {
        return;
    }
    const T *x = a + (size_t)row * C;
    if (b != nullptr) {
        T *r = res + (size_t)row * C;
        const T *y = b + (size_t)row * C;
        for (int c = lane * V; c < C; c += 32 * V) {
            Vec<T> p = Vec<T>::load(x + c), q = Vec<T>::load(y + c), o;
#pragma unroll
            for (int k = 0; k < V; k++) {
                o.e[k] = tr_from_f<T>(tr_to_f(p.e[k]) + tr_to_f(q.e[k]));
            }
            o.store(r + c);
        }
        __syncwarp();
        x = r;
    }
    float sum = 0.0f;
    for (int c = lane * V; c < C; c += 32 * V) {
        Vec<T> p = Vec<T>::load(x + c);
#pragma unroll
        for (int k = 0; k < V; k++) {
            sum += tr_to_f(p.e[k]);
        }
    }
    float mu = tr_warp_sum(sum) / C, var = 0.0f;
    for (int c = lane * V; c < C; c += 32 * V) {
        Vec<T> p = Vec<T>::load(x + c);
#pragma unroll
        for (int k = 0; k < V; k++) {
            float d = tr_to_f(p.e[k]) - mu;
            var += d * d;
        }
    }
    float rs = rsqrtf(tr_warp_sum(var) / C + 1e-5f);
    T *o = out + (size_t)row * C;
    for (int c = lane * V; c < C; c += 32 * V) {
        Vec<T> p = Vec<T>::load(x + c), ww = Vec<T>::load(w + c), bb = Vec<T>::load(bias + c), r;
#pragma unroll
        for (int k = 0; k < V; k++) {
            r.e[k] = tr_from_f<T>((tr_to_f(p.e[k]) - mu) * rs * tr_to_f(ww.e[k]) + tr_to_f(bb.e[k]));
        }
        r.store(o + c);
    }
    if (lane == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
}

template <typename T>
cudaError_t tr_cu_residual_ln_fwd(T *res, T *out, float *mean, float *rstd, const T *a, const T *b,
                                  const T *w, const T *bias, int N, int C, cudaStream_t s)
{
    residual_ln_fwd_kernel<<<tr_cdiv(N, 8), 256, 0, s>>>(res, out, mean, rstd, a, b, w, bias, N, C);
    return cudaGetLastError();
}

/* A warp per row, a grid of a few blocks per SM striding over rows. A lane
 * always handles the same columns, so each warp sums the weight and bias
 * gradients (and, with dres, the column sums of the new dinp) into its own
 * slice of shared memory without atomics; the block then adds its warps'
 * slices and issues only 2*C (3*C) global atomics. */
#define TR_LN_BWD_WARPS 4
template <typename T>
__global__ void ln_bwd_kernel(T *dinp, float *dw, float *db, float *dres, const T *dout, const T *inp,
                              const T *w, const float *mean, const float *rstd, int N, int C)
{
    constexpr int V = Vec<T>::N;
    extern __shared__ float sh[]; /* per warp: dw[C], db[C], dres[C] */
    for (int c = threadIdx.x; c < 3 * C * TR_LN_BWD_WARPS; c += blockDim.x) {
        sh[c] = 0.0f;
    }
    __syncthreads();
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *sw = sh + (size_t)warp * 3 * C, *sb = sw + C, *sr = sb + C;
    for (int row = blockIdx.x * TR_LN_BWD_WARPS + warp; row < N; row += gridDim.x * TR_LN_BWD_WARPS) {
        const T *g = dout + (size_t)row * C, *x = inp + (size_t)row * C;
        float mu = mean[row], rs = rstd[row], s1 = 0.0f, s2 = 0.0f;
        for (int c = lane * V; c < C; c += 32 * V) {
            Vec<T> gv = Vec<T>::load(g + c), xv = Vec<T>::load(x + c), wv = Vec<T>::load(w + c);
#pragma unroll
            for (int k = 0; k < V; k++) {
                float dn = tr_to_f(gv.e[k]) * tr_to_f(wv.e[k]), nrm = (tr_to_f(xv.e[k]) - mu) * rs;
                s1 += dn;
                s2 += dn * nrm;
            }
        }
        s1 = tr_warp_sum(s1) / C;
        s2 = tr_warp_sum(s2) / C;
        T *di = dinp + (size_t)row * C;
        for (int c = lane * V; c < C; c += 32 * V) {
            Vec<T> gv = Vec<T>::load(g + c), xv = Vec<T>::load(x + c), wv = Vec<T>::load(w + c),
                   dv = Vec<T>::load(di + c);
#pragma unroll
            for (int k = 0; k < V; k++) {
                float gg = tr_to_f(gv.e[k]), nrm = (tr_to_f(xv.e[k]) - mu) * rs;
                float dn = gg * tr_to_f(wv.e[k]);
                dv.e[k] = tr_from_f<T>(tr_to_f(dv.e[k]) + (dn - s1 - nrm * s2) * rs);
                sw[c + k] += gg * nrm;
                sb[c + k] += gg;
                sr[c + k] += tr_to_f(dv.e[k]);
            }
            dv.store(di + c);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float a = 0.0f, b = 0.0f, r = 0.0f;
#pragma unroll
        for (int k = 0; k < TR_LN_BWD_WARPS; k++) {
            a += sh[(size_t)k * 3 * C + c];
            b += sh[(size_t)k * 3 * C + C + c];
            r += sh[(size_t)k * 3 * C + 2 * C + c];
        }
        atomicAdd(dw + c, a);
        atomicAdd(db + c, b);
        if (dres != nullptr) {
            atomicAdd(dres + c, r);
        }
    }
}

/* Variant for rows of up to 32 * V * CH elements (C <= 1024 in bf16), CH the
 * exact number of 32-lane column chunks. A warp takes R rows per iteration
 * and issues all their loads (3 * R * CH independent 16-byte loads per lane)
 * before it reduces any of them: one row at a time left too few bytes in
 * flight to stream at DRAM bandwidth (ncu, 124M B=16: 1.24 ms for 2.5 GB per
 * step, about 2 TB/s). A lane always handles the same columns, so it keeps
 * its running dw/db (and dres) column sums in its warp's slice of shared
 * memory, laid out lane-minor so that the float4 read-modify-writes are free
 * of bank conflicts; in registers they cost a block per SM. bf16 rows now
 * take ln_bwd_pipe_kernel below; this variant serves fp32 mode. */
template <typename T, int CH, int R>
__global__ void __launch_bounds__(128, CH < 4 ? 4 : 3) /* 4 chunks need more than 128 registers */
    ln_bwd_reg_kernel(T *dinp, float *dw, float *db, float *dres, const T *dout, const T *inp, const T *w,
                      const float *mean, const float *rstd, int N, int C)
{
    constexpr int V = Vec<T>::N, H = V / 4, W = 4; /* H float4 per Vec; W warps */
    constexpr int SLICE = CH * H * 32;             /* float4 per accumulator per warp */
    extern __shared__ float4 sh4[];                /* [warp][dw, db, dres][CH][H][lane] */
    for (int i = threadIdx.x; i < W * 3 * SLICE; i += blockDim.x) {
        sh4[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    __syncthreads();
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float4 *acc = sh4 + warp * 3 * SLICE;
    Vec<T> wv[CH];
#pragma unroll
    for (int k = 0; k < CH; k++) {
        int c = lane * V + k * 32 * V;
        if (c < C) {
            wv[k] = Vec<T>::load(w + c);
        }
    }
    for (int row0 = (blockIdx.x * W + warp) * R; row0 < N; row0 += gridDim.x * W * R) {
        Vec<T> gv[R][CH], xv[R][CH], dv[R][CH];
        float mu[R], rs[R], s1[R], s2[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            int row = min(row0 + r, N - 1); /* a row past N repeats the last; its results are not kept */
            const T *g = dout + (size_t)row * C, *x = inp + (size_t)row * C, *di = dinp + (size_t)row * C;
#pragma unroll
            for (int k = 0; k < CH; k++) {
                int c = lane * V + k * 32 * V;
                if (c < C) {
                    gv[r][k] = Vec<T>::load(g + c);
                    xv[r][k] = Vec<T>::load(x + c);
                    dv[r][k] = Vec<T>::load(di + c);
                }
            }
            mu[r] = mean[row];
            rs[r] = rstd[row];
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            s1[r] = s2[r] = 0.0f;
#pragma unroll
            for (int k = 0; k < CH; k++) {
                if (lane * V + k * 32 * V < C) {
#pragma unroll
                    for (int e = 0; e < V; e++) {
                        float dn = tr_to_f(gv[r][k].e[e]) * tr_to_f(wv[k].e[e]),
                              nrm = (tr_to_f(xv[r][k].e[e]) - mu[r]) * rs[r];
                        s1[r] += dn;
                        s2[r] += dn * nrm;
                    }
                }
            }
            s1[r] = tr_warp_sum(s1[r]) / C;
            s2[r] = tr_warp_sum(s2[r]) / C;
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            int row = row0 + r;
            if (row >= N) {
                break;
            }
            T *di = dinp + (size_t)row * C;
#pragma unroll
            for (int k = 0; k < CH; k++) {
                int c = lane * V + k * 32 * V;
                if (c < C) {
#pragma unroll
                    for (int hh = 0; hh < H; hh++) {
                        int at = (k * H + hh) * 32 + lane;
                        float4 a = acc[at], b = acc[SLICE + at], q = acc[2 * SLICE + at];
                        float *pa = &a.x, *pb = &b.x, *pq = &q.x;
#pragma unroll
                        for (int j = 0; j < 4; j++) {
                            int e = hh * 4 + j;
                            float gg = tr_to_f(gv[r][k].e[e]), nrm = (tr_to_f(xv[r][k].e[e]) - mu[r]) * rs[r];
                            float dn = gg * tr_to_f(wv[k].e[e]);
                            dv[r][k].e[e] =
                                tr_from_f<T>(tr_to_f(dv[r][k].e[e]) + (dn - s1[r] - nrm * s2[r]) * rs[r]);
                            pa[j] += gg * nrm;
                            pb[j] += gg;
                            pq[j] += tr_to_f(dv[r][k].e[e]); /* the rounded value, as stored */
                        }
                        acc[at] = a;
                        acc[SLICE + at] = b;
                        if (dres != nullptr) {
                            acc[2 * SLICE + at] = q;
                        }
                    }
                    dv[r][k].store(di + c);
                }
            }
        }
    }
    __syncthreads();
    /* float f of accumulator slot i is column lane * V + k * 32 * V + hh * 4 + f */
    const float *shf = reinterpret_cast<const float *>(sh4);
    for (int i = threadIdx.x; i < SLICE * 4; i += blockDim.x) {
        int f = i & 3, l = (i >> 2) & 31, kh = i >> 7, c = l * V + (kh / H) * 32 * V + (kh % H) * 4 + f;
        if (c >= C) {
            continue;
        }
        float a = 0.0f, b = 0.0f, q = 0.0f;
#pragma unroll
        for (int k = 0; k < W; k++) {
            a += shf[(k * 3 * SLICE) * 4 + i];
            b += shf[(k * 3 * SLICE + SLICE) * 4 + i];
            q += shf[(k * 3 * SLICE + 2 * SLICE) * 4 + i];
        }
        atomicAdd(dw + c, a);
        atomicAdd(db + c, b);
        if (dres != nullptr) {
            atomicAdd(dres + c, q);
        }
    }
}

/* carveout_max asks for the largest shared-memory carveout for fn, so that
 * four blocks of ln_bwd_reg_kernel (36 KB each at C = 768) fit on an SM.
 * Skipped while the stream is being captured into a graph (the attribute
 * set on the eager pass before capture stays). */
static cudaError_t carveout_max(const void *fn, cudaStream_t s)
{
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(s, &st);
    if (e != cudaSuccess || st != cudaStreamCaptureStatusNone) {
        return e;
    }
    return cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                cudaSharedmemCarveoutMaxShared);
}

template <typename T, int CH>
static cudaError_t ln_bwd_reg_launch(T *dinp, float *dw, float *db, float *dres, const T *dout, const T *inp,
                                     const T *w, const float *mean, const float *rstd, int N, int C,
                                     cudaStream_t s)
{
    enum { R = 2 };
    size_t shmem = (size_t)4 * 3 * CH * 32 * Vec<T>::N * sizeof(float);
    int blocks = (int)tr_cdiv(N, 4 * R * 4); /* >= 4 iterations per warp, at most 4 blocks per SM */
    if (blocks > 132 * 4) {
        blocks = 132 * 4;
    }
    cudaError_t e = carveout_max((const void *)ln_bwd_reg_kernel<T, CH, R>, s);
    if (e != cudaSuccess) {
        return e;
    }
    ln_bwd_reg_kernel<T, CH, R>
        <<<blocks, 128, shmem, s>>>(dinp, dw, db, dres, dout, inp, w, mean, rstd, N, C);
    return cudaGetLastError();
}

/* bf16 variant for C <= 1024 (CH 256-column chunks): the rows stream
 * through shared memory with cp.async, LN_STAGES rows deep per warp, so a
 * warp computes on one row while the next two are in flight; the register
 * variant above issued a warp's loads in bursts, computed with none in flight,
 * and ran at about 2 TB/s (ncu, 124M B=16: 42 us per call, 350M: 62 us). A
 * lane copies and reads only its own columns, so the stream needs no
 * barrier. The dw/db/dres column sums stay in registers (24 * CH floats per
 * lane), which also drops the shared-memory read-modify-write per element. */
#define LN_STAGES 3
__device__ __forceinline__ void ln_cp_async16(void *dst, const void *src)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}

template <int CH>
__global__ void __launch_bounds__(128, 3)
    ln_bwd_pipe_kernel(bf16 *dinp, float *dw, float *db, float *dres, const bf16 *dout, const bf16 *inp,
                       const bf16 *w, const float *mean, const float *rstd, int N, int C)
{
    constexpr int V = 8, CW = CH * 32 * V;        /* elements of one staged row of one tensor */
    extern __shared__ __align__(16) bf16 ln_sh[]; /* [warp][stage][dout, inp, dinp][CW] */
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = gridDim.x * 4;
    int row0 = blockIdx.x * 4 + warp;
    bf16 *st = ln_sh + (size_t)warp * LN_STAGES * 3 * CW;
    float aw[CH][V], ab[CH][V], ar[CH][V];
    Vec<bf16> wv[CH];
#pragma unroll
    for (int k = 0; k < CH; k++) {
        int c = lane * V + k * 32 * V;
        if (c < C) {
            wv[k] = Vec<bf16>::load(w + c);
        }
#pragma unroll
        for (int e = 0; e < V; e++) {
            aw[k][e] = ab[k][e] = ar[k][e] = 0.0f;
        }
    }
    /* queue row i of this warp into stage i % LN_STAGES; every call commits a
     * group (empty past the last row) so that the wait counts stay uniform */
    auto queue = [&](int i) {
        int row = row0 + i * nw;
        if (row < N) {
            bf16 *d = st + (i % LN_STAGES) * 3 * CW;
#pragma unroll
            for (int k = 0; k < CH; k++) {
                int c = lane * V + k * 32 * V;
                if (c < C) {
                    size_t o = (size_t)row * C + c;
                    ln_cp_async16(d + c, dout + o);
                    ln_cp_async16(d + CW + c, inp + o);
                    ln_cp_async16(d + 2 * CW + c, dinp + o);
                }
            }
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
#pragma unroll
    for (int i = 0; i < LN_STAGES - 1; i++) {
        queue(i);
    }
    float mu = row0 < N ? mean[row0] : 0.0f, rs = row0 < N ? rstd[row0] : 0.0f;
    for (int i = 0, row = row0; row < N; i++, row += nw) {
        queue(i + LN_STAGES - 1); /* into the stage this lane finished with last iteration */
        int nx = row + nw;
        float mu_n = nx < N ? mean[nx] : 0.0f, rs_n = nx < N ? rstd[nx] : 0.0f;
        asm volatile("cp.async.wait_group %0;\n" ::"n"(LN_STAGES - 1));
        const bf16 *sg = st + (i % LN_STAGES) * 3 * CW, *sx = sg + CW, *sd = sx + CW;
        float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int k = 0; k < CH; k++) {
            int c = lane * V + k * 32 * V;
            if (c < C) {
                Vec<bf16> gv = Vec<bf16>::load(sg + c), xv = Vec<bf16>::load(sx + c);
#pragma unroll
                for (int e = 0; e < V; e++) {
                    float dn = tr_to_f(gv.e[e]) * tr_to_f(wv[k].e[e]), nrm = (tr_to_f(xv.e[e]) - mu) * rs;
                    s1 += dn;
                    s2 += dn * nrm;
                }
            }
        }
        s1 = tr_warp_sum(s1) / C;
        s2 = tr_warp_sum(s2) / C;
        bf16 *di = dinp + (size_t)row * C;
#pragma unroll
        for (int k = 0; k < CH; k++) {
            int c = lane * V + k * 32 * V;
            if (c < C) {
                Vec<bf16> gv = Vec<bf16>::load(sg + c), xv = Vec<bf16>::load(sx + c),
                          dv = Vec<bf16>::load(sd + c);
#pragma unroll
                for (int e = 0; e < V; e++) {
                    float gg = tr_to_f(gv.e[e]), nrm = (tr_to_f(xv.e[e]) - mu) * rs;
                    float dn = gg * tr_to_f(wv[k].e[e]);
                    dv.e[e] = tr_from_f<bf16>(tr_to_f(dv.e[e]) + (dn - s1 - nrm * s2) * rs);
                    aw[k][e] += gg * nrm;
                    ab[k][e] += gg;
                    ar[k][e] += tr_to_f(dv.e[e]); /* the rounded value, as stored */
                }
                dv.store(di + c);
            }
        }
        mu = mu_n;
        rs = rs_n;
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads(); /* the stages become the block's column-sum area: [warp][dw, db, dres][CW] floats */
    float *sf = reinterpret_cast<float *>(ln_sh) + (size_t)warp * 3 * CW;
#pragma unroll
    for (int k = 0; k < CH; k++) {
        int c = lane * V + k * 32 * V;
#pragma unroll
        for (int e = 0; e < V; e++) {
            sf[c + e] = aw[k][e];
            sf[CW + c + e] = ab[k][e];
            sf[2 * CW + c + e] = ar[k][e];
        }
    }
    __syncthreads();
    const float *all = reinterpret_cast<const float *>(ln_sh);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float a = 0.0f, b = 0.0f, r = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            a += all[(size_t)k * 3 * CW + c];
            b += all[(size_t)k * 3 * CW + CW + c];
            r += all[(size_t)k * 3 * CW + 2 * CW + c];
        }
        atomicAdd(dw + c, a);
        atomicAdd(db + c, b);
        if (dres != nullptr) {
            atomicAdd(dres + c, r);
        }
    }
}

/* The shared-memory size and carveout are set on the eager pass; setting
 * them is skipped while the stream is being captured into a graph. */
template <int CH>
static cudaError_t ln_bwd_pipe_launch(bf16 *dinp, float *dw, float *db, float *dres, const bf16 *dout,
                                      const bf16 *inp, const bf16 *w, const float *mean, const float *rstd,
                                      int N, int C, cudaStream_t s)
{
    constexpr int CW = CH * 32 * 8;
    size_t shmem = (size_t)4 * LN_STAGES * 3 * CW * sizeof(bf16);
    static_assert((size_t)4 * 3 * CW * sizeof(float) <= (size_t)4 * LN_STAGES * 3 * CW * sizeof(bf16),
                  "the column sums reuse the stages");
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(s, &cs);
    if (e == cudaSuccess && cs == cudaStreamCaptureStatusNone) {
        e = cudaFuncSetAttribute((const void *)ln_bwd_pipe_kernel<CH>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem);
        if (e == cudaSuccess) {
            e = cudaFuncSetAttribute((const void *)ln_bwd_pipe_kernel<CH>,
                                     cudaFuncAttributePreferredSharedMemoryCarveout,
                                     cudaSharedmemCarveoutMaxShared);
        }
    }
    if (e != cudaSuccess) {
        return e;
    }
    int blocks = (int)tr_cdiv(N, 4 * 4); /* at least 4 rows per warp, at most 3 blocks per SM */
    if (blocks > 132 * 3) {
        blocks = 132 * 3;
    }
    ln_bwd_pipe_kernel<CH><<<blocks, 128, shmem, s>>>(dinp, dw, db, dres, dout, inp, w, mean, rstd, N, C);
    return cudaGetLastError();
}

/* TR_CUDA_LN_BWD_PIPE=0 keeps the register variant in bf16 too (to compare). */
static bool ln_bwd_pipe_env(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("TR_CUDA_LN_BWD_PIPE");
        on = e == NULL || atoi(e) != 0;
    }
    return on != 0;
}

template <typename T>
static cudaError_t ln_bwd_pipe(T *, float *, float *, float *, const T *, const T *, const T *, const float *,
                               const float *, int, int, int, cudaStream_t, bool *taken)
{
    *taken = false; /* fp32 mode keeps the register variant */
    return cudaSuccess;
}

template <>
cudaError_t ln_bwd_pipe<bf16>(bf16 *dinp, float *dw, float *db, float *dres, const bf16 *dout,
                              const bf16 *inp, const bf16 *w, const float *mean, const float *rstd, int N,
                              int C, int ch, cudaStream_t s, bool *taken)
{
    *taken = true;
    switch (ch) {
    case 1: return ln_bwd_pipe_launch<1>(dinp, dw, db, dres, dout, inp, w, mean, rstd, N, C, s);
    case 2: return ln_bwd_pipe_launch<2>(dinp, dw, db, dres, dout, inp, w, mean, rstd, N, C, s);
    case 3: return ln_bwd_pipe_launch<3>(dinp, dw, db, dres, dout, inp, w, mean, rstd, N, C, s);
    case 4: return ln_bwd_pipe_launch<4>(dinp, dw, db, dres, dout, inp, w, mean, rstd, N, C, s);
    default: break;
    }
    *taken = false;
    return cudaSuccess;
}

template <typename T>
cudaError_t tr_cu_ln_bwd(T *dinp, float *dw, float *db, float *dres, const T *dout, const T *inp, const T *w,
                         const float *mean, const float *rstd, int N, int C, cudaStream_t s)
{
    int ch = (int)tr_cdiv(C, 32 * Vec<T>::N);
    if (ln_bwd_pipe_env()) {
        bool taken = false;
        cudaError_t pe = ln_bwd_pipe<T>(dinp, dw, db, dres, dout, inp, w, mean, rstd, N, C, ch, s, &taken);
        if (taken || pe != cudaSuccess) {
            return pe;
        }
    }
    switch (ch) {
    case 1: return ln_bwd_reg_launch<T, 1>(dinp, dw, db, dres, dout, inp, w, mean, rstd, N, C, s);
    case 2: return ln_bwd_reg_launch<T, 2>(dinp, dw, db, dres, dout, inp, w, mean, rstd, N, C, s);
    case 3: return ln_bwd_reg_launch<T, 3>(dinp, dw, db, dres, dout, inp, w, mean, rstd, N, C, s);
    case 4: return ln_bwd_reg_launch<T, 4>(dinp, dw, db, dres, dout, inp, w, mean, rstd, N, C, s);
    default: break;
    }
    int blocks = (int)tr_cdiv(N, TR_LN_BWD_WARPS * 8); /* about 8 rows per warp */
    if (blocks > 132 * 4) {
        blocks = 132 * 4;
    }
    size_t shmem = (size_t)3 * C * TR_LN_BWD_WARPS * sizeof(float);
    if (shmem > 48 * 1024) {
        cudaError_t e =
            cudaFuncSetAttribute(ln_bwd_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem);
        if (e != cudaSuccess) {
            return e;
        }
    }
    ln_bwd_kernel<<<blocks, 32 * TR_LN_BWD_WARPS, shmem, s>>>(dinp, dw, db, dres, dout, inp, w, mean, rstd, N,
                                                              C);
    return cudaGetLastError();
}

/* ---- GELU ---------------------------------------------------------------- */

#define TR_GELU_S 0.7978845608028654f /* sqrt(2/pi) */

__device__ __forceinline__ float gelu_f(float x)
{
    return 0.5f * x * (1.0f + tanhf(TR_GELU_S * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float gelu_grad_f(float x)
{
    float u = TR_GELU_S * (x + 0.044715f * x * x * x), th = tanhf(u);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * TR_GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
}

template <typename T> __global__ void gelu_fwd_kernel(T *out, const T *inp, size_t n)
{
    constexpr int N = Vec<T>::N;
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
    if (i >= n) {
        return;
    }
    Vec<T> x = Vec<T>::load(inp + i), o;
#pragma unroll
    for (int k = 0; k < N; k++) {
        o.e[k] = tr_from_f<T>(gelu_f(tr_to_f(x.e[k])));
    }
    o.store(out + i);
}

template <typename T> __global__ void gelu_bwd_kernel(T *d, const T *inp, size_t n)
{
    constexpr int N = Vec<T>::N;
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
    if (i >= n) {
        return;
    }
    Vec<T> x = Vec<T>::load(inp + i), g = Vec<T>::load(d + i);
#pragma unroll
    for (int k = 0; k < N; k++) {
        g.e[k] = tr_from_f<T>(tr_to_f(g.e[k]) * gelu_grad_f(tr_to_f(x.e[k])));
    }
    g.store(d + i);
}

template <typename T> cudaError_t tr_cu_gelu_fwd(T *out, const T *inp, size_t n, cudaStream_t s)
{
    gelu_fwd_kernel<<<tr_cdiv(n / Vec<T>::N, 256), 256, 0, s>>>(out, inp, n);
    return cudaGetLastError();
}

template <typename T> cudaError_t tr_cu_gelu_bwd(T *d, const T *inp, size_t n, cudaStream_t s)
{
    gelu_bwd_kernel<<<tr_cdiv(n / Vec<T>::N, 256), 256, 0, s>>>(d, inp, n);
    return cudaGetLastError();
}

/* ---- bias gradient -------------------------------------------------------- */

/* Block (32 x 8): lanes take consecutive 16-byte column groups, the 8 warps
 * and grid.y split the rows; partial sums meet in shared memory, then one
 * atomic per column per block. */
template <typename T>
__global__ void bias_grad_kernel(float *dbias, T *dout, const T *pre, int N, int OC, int rows_per_y)
{
    constexpr int V = Vec<T>::N;
    __shared__ float sh[8][32 * V];
    int c = (blockIdx.x * 32 + threadIdx.x) * V;
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++) {
        acc[k] = 0.0f;
    }
    int r0 = blockIdx.y * rows_per_y, r1 = min(N, r0 + rows_per_y);
    if (c < OC) {
#pragma unroll 4
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            Vec<T> d = Vec<T>::load(dout + (size_t)r * OC + c);
            if (pre != nullptr) { /* fused GELU backward: d *= gelu'(pre), written back */
                Vec<T> x = Vec<T>::load(pre + (size_t)r * OC + c);
#pragma unroll
                for (int k = 0; k < V; k++) {
                    d.e[k] = tr_from_f<T>(tr_to_f(d.e[k]) * gelu_grad_f(tr_to_f(x.e[k])));
                }
                d.store(dout + (size_t)r * OC + c);
            }
#pragma unroll
            for (int k = 0; k < V; k++) {
                acc[k] += tr_to_f(d.e[k]);
            }
        }
    }
#pragma unroll
    for (int k = 0; k < V; k++) {
        sh[threadIdx.y][threadIdx.x * V + k] = acc[k];
    }
    __syncthreads();
    for (int j = threadIdx.y * 32 + threadIdx.x; j < 32 * V; j += 256) {
        int col = blockIdx.x * 32 * V + j;
        if (col < OC) {
            float s = 0.0f;
#pragma unroll
            for (int y = 0; y < 8; y++) {
                s += sh[y][j];
            }
            atomicAdd(dbias + col, s);
        }
    }
}

template <typename T>
static cudaError_t bias_grad_launch(float *dbias, T *dout, const T *pre, int N, int OC, cudaStream_t s)
{
    int gx = (int)tr_cdiv(OC, 32 * Vec<T>::N);
    /* about eight blocks per SM in all: at two (264 blocks) the loads in
     * flight were too few to stream at DRAM bandwidth (ncu, 124M B=16: 1.83
     * ms per step for 5.1 GB, about 2.8 TB/s); the extra per-block sums and
     * atomics are one per column per block */
    int gy = (int)tr_cdiv(132 * 8, gx);
    int rows = (int)tr_cdiv(N, gy);
    bias_grad_kernel<<<dim3(gx, gy), dim3(32, 8), 0, s>>>(dbias, dout, pre, N, OC, rows);
    return cudaGetLastError();
}

template <typename T> cudaError_t tr_cu_bias_grad(float *dbias, const T *dout, int N, int OC, cudaStream_t s)
{
    return bias_grad_launch(dbias, (T *)dout, (const T *)nullptr, N, OC, s);
}

template <typename T>
cudaError_t tr_cu_gelu_bwd_bias(float *dbias, T *d, const T *pre, int N, int OC, cudaStream_t s)
{
    return bias_grad_launch(dbias, d, pre, N, OC, s);
}

/* ---- fused classifier ---------------------------------------------------- */

/* Online softmax state: running max m and sum of exp(x - m). */
__device__ __forceinline__ void sm_merge(float &m, float &l, float m2, float l2)
{
    float mn = fmaxf(m, m2);
    l = (m == -INFINITY ? 0.0f : l * __expf(m - mn)) + (m2 == -INFINITY ? 0.0f : l2 * __expf(m2 - mn));
    m = mn;
}

/* One block per row: one pass for max and sum (online), then a second pass
 * over the row, which is still in L2, writes the gradient in place. */
template <typename T>
__global__ void __launch_bounds__(1024) classifier_kernel(T *logits, float *losses, const int32_t *targets,
                                                          int V, int Vp, float dloss, int write_grad)
{
    constexpr int N = Vec<T>::N;
    __shared__ float shm[32], shl[32];
    int row = blockIdx.x;
    T *x = logits + (size_t)row * Vp;
    float m = -INFINITY, l = 0.0f;
    for (int c = threadIdx.x * N; c < V; c += blockDim.x * N) {
        Vec<T> v = Vec<T>::load(x + c);
#pragma unroll
        for (int k = 0; k < N; k++) {
            if (c + k < V) {
                float f = tr_to_f(v.e[k]);
                if (f > m) {
                    l = l * __expf(m - f) + 1.0f;
                    m = f;
                } else {
                    l += __expf(f - m);
                }
            }
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
        sm_merge(m, l, m2, l2);
    }
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    if (lane == 0) {
        shm[warp] = m;
        shl[warp] = l;
    }
    __syncthreads();
    m = lane < nw ? shm[lane] : -INFINITY;
    l = lane < nw ? shl[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
        sm_merge(m, l, m2, l2);
    }
    int tgt = targets[row];
    if (threadIdx.x == 0) {
        losses[row] = logf(l) + m - tr_to_f(x[tgt]);
    }
    if (!write_grad) {
        return;
    }
    __syncthreads(); /* the target logit is read above before it is overwritten below */
    float inv = 1.0f / l;
    for (int c = threadIdx.x * N; c < Vp; c += blockDim.x * N) {
        Vec<T> v = Vec<T>::load(x + c);
#pragma unroll
        for (int k = 0; k < N; k++) {
            int col = c + k;
            float p = col < V ? __expf(tr_to_f(v.e[k]) - m) * inv : 0.0f;
            v.e[k] = tr_from_f<T>(dloss * (p - (col == tgt ? 1.0f : 0.0f)));
        }
        v.store(x + c);
    }
}

/* The same with the row staged in shared memory (bf16 GPT-2 vocab: 100 KB,
 * two rows per SM): every thread queues all its pieces of the row with
 * cp.async at once, and the passes for the max, the sum and the gradient
 * read shared memory, so the row leaves DRAM once and the writing pass does
 * not depend on it staying in L2. */
#define TR_CLS_SMEM_MAX (112 * 1024)
template <typename T>
__global__ void __launch_bounds__(1024, 2)
    classifier_smem_kernel(T *logits, float *losses, const int32_t *targets, int V, int Vp, float dloss,
                           int write_grad)
{
    constexpr int N = Vec<T>::N;
    extern __shared__ int4 cls_row[];
    __shared__ float red[32];
    T *row = reinterpret_cast<T *>(cls_row), *x = logits + (size_t)blockIdx.x * Vp;
    for (int c = threadIdx.x * N; c < Vp; c += blockDim.x * N) {
        unsigned d = (unsigned)__cvta_generic_to_shared(row + c);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(x + c));
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
    __syncthreads();
    float m = -INFINITY, l = 0.0f;
    for (int c = threadIdx.x * N; c < V; c += blockDim.x * N) {
        Vec<T> v = Vec<T>::load(row + c);
#pragma unroll
        for (int k = 0; k < N; k++) {
            m = c + k < V ? fmaxf(m, tr_to_f(v.e[k])) : m;
        }
    }
    m = tr_warp_max(m);
    if (threadIdx.x % 32 == 0) {
        red[threadIdx.x / 32] = m;
    }
    __syncthreads();
    m = tr_warp_max(threadIdx.x % 32 < blockDim.x / 32 ? red[threadIdx.x % 32] : -INFINITY);
    for (int c = threadIdx.x * N; c < V; c += blockDim.x * N) {
        Vec<T> v = Vec<T>::load(row + c);
#pragma unroll
        for (int k = 0; k < N; k++) {
            l += c + k < V ? __expf(tr_to_f(v.e[k]) - m) : 0.0f;
        }
    }
    l = tr_block_sum(l, red); /* its first barrier also ends every read of red above */
    int tgt = targets[blockIdx.x];
    if (threadIdx.x == 0) {
        losses[blockIdx.x] = logf(l) + m - tr_to_f(row[tgt]);
    }
    if (!write_grad) {
        return;
    }
    float inv = 1.0f / l;
    for (int c = threadIdx.x * N; c < Vp; c += blockDim.x * N) {
        Vec<T> v = Vec<T>::load(row + c);
#pragma unroll
        for (int k = 0; k < N; k++) {
            int col = c + k;
            float p = col < V ? __expf(tr_to_f(v.e[k]) - m) * inv : 0.0f;
            v.e[k] = tr_from_f<T>(dloss * (p - (col == tgt ? 1.0f : 0.0f)));
        }
        v.store(x + c);
    }
}

/* cls_smem_setup lets classifier_smem_kernel<T> take bytes of dynamic shared
 * memory with the largest carveout. Attributes cannot be set while the
 * stream is being captured; the eager pass before capture has set them. */
template <typename T> static cudaError_t cls_smem_setup(size_t bytes, cudaStream_t s)
{
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(s, &st);
    if (e != cudaSuccess || st != cudaStreamCaptureStatusNone) {
        return e;
    }
    e = cudaFuncSetAttribute(classifier_smem_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)bytes);
    if (e != cudaSuccess) {
        return e;
    }
    return cudaFuncSetAttribute(classifier_smem_kernel<T>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                cudaSharedmemCarveoutMaxShared);
}

template <typename T>
cudaError_t tr_cu_classifier(T *logits, float *losses, const int32_t *targets, int N, int V, int Vp,
                             float dloss, int write_grad, cudaStream_t s)
{
    size_t bytes = (size_t)Vp * sizeof(T);
    if (bytes <= TR_CLS_SMEM_MAX) {
        cudaError_t e = cls_smem_setup<T>(bytes, s);
        if (e != cudaSuccess) {
            return e;
        }
        classifier_smem_kernel<<<N, 1024, bytes, s>>>(logits, losses, targets, V, Vp, dloss, write_grad);
        return cudaGetLastError();
    }
    /* 1024 threads, so at most two rows per SM are in flight: 264 rows of
     * 100 KB (GPT-2 vocab, bf16) stay inside the 50 MB L2 between the
     * reading pass and the writing pass, and the row is read from DRAM once. */
    classifier_kernel<<<N, 1024, 0, s>>>(logits, losses, targets, V, Vp, dloss, write_grad);
    return cudaGetLastError();
}

__global__ void mean_kernel(float *out, const float *x, int n)
{
    __shared__ float sh[32];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        acc += x[i];
    }
    acc = tr_block_sum(acc, sh);
    if (threadIdx.x == 0) {
        out[0] = acc / n;
    }
}

cudaError_t tr_cu_mean(float *out, const float *x, int n, cudaStream_t s)
{
    mean_kernel<<<1, 1024, 0, s>>>(out, x, n);
    return cudaGetLastError();
}

/* ---- gradient norm ------------------------------------------------------- */

__global__ void sumsq_kernel(float *partial, const float *x, size_t n)
{
    __shared__ float sh[32];
    float acc = 0.0f;
    size_t n4 = n / 4;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 v = x4[i];
        acc += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    if (blockIdx.x == 0) {
        for (size_t i = n4 * 4 + threadIdx.x; i < n; i += blockDim.x) {
            acc += x[i] * x[i];
        }
    }
    acc = tr_block_sum(acc, sh);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = acc;
    }
}

__global__ void sum_partials_kernel(float *out, const float *partial, int n)
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

cudaError_t tr_cu_sumsq(float *out, float *partial, const float *x, size_t n, cudaStream_t s)
{
    sumsq_kernel<<<TR_CU_SUMSQ_BLOCKS, 512, 0, s>>>(partial, x, n);
    sum_partials_kernel<<<1, 1024, 0, s>>>(out, partial, TR_CU_SUMSQ_BLOCKS);
    return cudaGetLastError();
}

/* ---- AdamW --------------------------------------------------------------- */

/* Four consecutive parameters per thread; tensor sizes are multiples of 8, so
 * a group never straddles two tensors and one lookup serves all four. */
template <typename T>
__global__ void adamw_kernel(T *param, float *master, const float *grad, float *m, float *v, size_t n,
                             tr_cu_adamw_args a)
{
    size_t stride = (size_t)gridDim.x * blockDim.x * 4;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 4; i < n; i += stride) {
        int t = 0;
        while (t < 15 && i >= a.offs[t + 1]) {
            t++;
        }
        float wd = (a.decay_mask >> t) & 1u ? a.wd : 0.0f;
        float4 g = *reinterpret_cast<const float4 *>(grad + i), mm = *reinterpret_cast<float4 *>(m + i),
               vv = *reinterpret_cast<float4 *>(v + i), p = *reinterpret_cast<float4 *>(master + i);
        float *gs = &g.x, *ms = &mm.x, *vs = &vv.x, *ps = &p.x;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float gk = gs[k] * a.grad_scale;
            ms[k] = a.beta1 * ms[k] + (1.0f - a.beta1) * gk;
            vs[k] = a.beta2 * vs[k] + (1.0f - a.beta2) * gk * gk;
            float mh = ms[k] / a.bc1, vh = vs[k] / a.bc2;
            ps[k] -= a.lr * (mh / (sqrtf(vh) + a.eps) + wd * ps[k]);
        }
        *reinterpret_cast<float4 *>(m + i) = mm;
        *reinterpret_cast<float4 *>(v + i) = vv;
        *reinterpret_cast<float4 *>(master + i) = p;
        if (param != nullptr) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                param[i + k] = tr_from_f<T>(ps[k]);
            }
        }
    }
}

template <typename T>
cudaError_t tr_cu_adamw(T *param, float *master, const float *grad, float *m, float *v, size_t n,
                        const tr_cu_adamw_args *a, cudaStream_t s)
{
    unsigned blocks = tr_cdiv(n / 4, 256);
    if (blocks > 132 * 16) {
        blocks = 132 * 16;
    }
    adamw_kernel<<<blocks, 256, 0, s>>>(param, master, grad, m, v, n, *a);
    return cudaGetLastError();
}

/* ---- conversions --------------------------------------------------------- */

template <typename T> __global__ void convert_kernel(T *dst, const float *src, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        dst[i] = tr_from_f<T>(src[i]);
    }
}

template <typename T> cudaError_t tr_cu_convert(T *dst, const float *src, size_t n, cudaStream_t s)
{
    convert_kernel<<<1024, 256, 0, s>>>(dst, src, n);
    return cudaGetLastError();
}

__global__ void fill_random_kernel(bf16 *dst, size_t n, uint32_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16;
        h *= 0x7feb352du;
        h ^= h >> 15;
        h *= 0x846ca68bu;
        h ^= h >> 16;
        dst[i] = __float2bfloat16((float)(h >> 8) / 8388608.0f - 1.0f);
    }
}

cudaError_t tr_cu_fill_random(bf16 *dst, size_t n, uint32_t seed, cudaStream_t s)
{
    fill_random_kernel<<<1024, 256, 0, s>>>(dst, n, seed);
    return cudaGetLastError();
}

/* ---- explicit instantiations -------------------------------------------- */

#define TR_INST(T)                                                                                           \
    template cudaError_t tr_cu_encoder_fwd<T>(T *, const int32_t *, const T *, const T *, int, int, int,     \
                                              cudaStream_t);                                                 \
    template cudaError_t tr_cu_encoder_bwd<T>(float *, float *, const T *, const int32_t *, int, int, int,   \
                                              cudaStream_t);                                                 \
    template cudaError_t tr_cu_residual_ln_fwd<T>(T *, T *, float *, float *, const T *, const T *,          \
                                                  const T *, const T *, int, int, cudaStream_t);             \
    template cudaError_t tr_cu_ln_bwd<T>(T *, float *, float *, float *, const T *, const T *, const T *,    \
                                         const float *, const float *, int, int, cudaStream_t);              \
    template cudaError_t tr_cu_gelu_fwd<T>(T *, const T *, size_t, cudaStream_t);                            \
    template cudaError_t tr_cu_gelu_bwd<T>(T *, const T *, size_t, cudaStream_t);                            \
    template cudaError_t tr_cu_bias_grad<T>(float *, const T *, int, int, cudaStream_t);                     \
    template cudaError_t tr_cu_gelu_bwd_bias<T>(float *, T *, const T *, int, int, cudaStream_t);            \
    template cudaError_t tr_cu_classifier<T>(T *, float *, const int32_t *, int, int, int, float, int,       \
                                             cudaStream_t);                                                  \
    template cudaError_t tr_cu_adamw<T>(T *, float *, const float *, float *, float *, size_t,               \
                                        const tr_cu_adamw_args *, cudaStream_t);                             \
    template cudaError_t tr_cu_convert<T>(T *, const float *, size_t, cudaStream_t);

TR_INST(float)
TR_INST(bf16)
