/* cu_common.cuh - shared pieces of the CUDA backend: error mapping, element
 * types and 16-byte vector access.
 *
 * Every kernel is a template over the storage type T (float in fp32 mode,
 * __nv_bfloat16 in bf16 mode) and computes in fp32; the launchers declared in
 * cu_kernels.h are explicitly instantiated for both types. */
#ifndef TR_CU_COMMON_CUH
#define TR_CU_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "err.h"
#include "log.h"
}

typedef __nv_bfloat16 bf16;

/* tr_cu_status maps a CUDA runtime error onto troupe's status codes. */
static inline int tr_cu_status(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return TROUPE_OK;
    case cudaErrorMemoryAllocation: return TROUPE_RESOURCE_EXHAUSTED;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice: return TROUPE_UNAVAILABLE;
    case cudaErrorInvalidValue: return TROUPE_INVALID_ARGUMENT;
    default: return TROUPE_INTERNAL;
    }
}

/* TR_CU_TRY checks a CUDA runtime call; on failure it logs file:line with the
 * runtime's own message, fills err, sets rv and jumps to the caller's `out`
 * label (one cleanup label per function, as everywhere in troupe). */
#define TR_CU_TRY(call)                                                                                      \
    do {                                                                                                     \
        cudaError_t tr_e_ = (call);                                                                          \
        if (tr_e_ != cudaSuccess) {                                                                          \
            rv = tr_err_set(err, tr_cu_status(tr_e_), "%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call,       \
                            cudaGetErrorString(tr_e_), cudaGetErrorName(tr_e_));                             \
            TR_LOG(TR_LOG_ERR, "cuda error: %s", err != NULL ? err->msg : #call);                            \
            cudaGetLastError(); /* reset a non-sticky error so later checks see their own */                 \
            goto out;                                                                                        \
        }                                                                                                    \
    } while (0)

/* TR_TRY propagates a troupe_status from an internal call. */
#define TR_TRY(call)                                                                                         \
    do {                                                                                                     \
        rv = (call);                                                                                         \
        if (rv != TROUPE_OK) {                                                                               \
            goto out;                                                                                        \
        }                                                                                                    \
    } while (0)

/* Conversions usable from templates. */
__device__ __forceinline__ float tr_to_f(float x)
{
    return x;
}
__device__ __forceinline__ float tr_to_f(bf16 x)
{
    return __bfloat162float(x);
}
template <typename T> __device__ __forceinline__ T tr_from_f(float x);
template <> __device__ __forceinline__ float tr_from_f<float>(float x)
{
    return x;
}
template <> __device__ __forceinline__ bf16 tr_from_f<bf16>(float x)
{
    return __float2bfloat16_rn(x);
}

/* Vec<T> is 16 bytes of T: the unit of every coalesced load/store here, so a
 * warp moves 512 contiguous bytes per instruction. Callers guarantee 16-byte
 * alignment (widths are multiples of 8 elements; see tr_backend_cuda_create). */
template <typename T> struct Vec {
    static constexpr int N = 16 / sizeof(T);
    union {
        int4 raw;
        T e[N];
    };
    __device__ __forceinline__ static Vec load(const T *p)
    {
        Vec v;
        v.raw = *reinterpret_cast<const int4 *>(p);
        return v;
    }
    /* load_cs streams data read once (no L1 allocation, evict-first in L2). */
    __device__ __forceinline__ static Vec load_cs(const T *p)
    {
        Vec v;
        v.raw = __ldcs(reinterpret_cast<const int4 *>(p));
        return v;
    }
    __device__ __forceinline__ void store(T *p) const
    {
        *reinterpret_cast<int4 *>(p) = raw;
    }
};

__device__ __forceinline__ float tr_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}

__device__ __forceinline__ float tr_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    }
    return v;
}

/* tr_block_sum reduces over a block of up to 1024 threads; every thread gets
 * the total. shared must hold 32 floats. */
__device__ __forceinline__ float tr_block_sum(float v, float *shared)
{
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
    v = tr_warp_sum(v);
    __syncthreads();
    if (lane == 0) {
        shared[warp] = v;
    }
    __syncthreads();
    v = lane < nw ? shared[lane] : 0.0f;
    return tr_warp_sum(v);
}

static inline unsigned tr_cdiv(size_t a, size_t b)
{
    return (unsigned)((a + b - 1) / b);
}

#endif
