/* refit_cuda.cu - the CUDA backend's part of the refit from device memory
 * (backend.h refit_params/refit_taken/refit_hash; refit.h).
 *
 * The refit communicator reads or writes the backend's own parameter vector
 * in place: the fp32 master, or in bf16 precision the bf16 copy the passes
 * compute with. After a receive the other copy is derived from it, so the
 * backend stays consistent. The hash that verifies a refit is computed here
 * over the vector's bytes (tr_refit_mix_hash, refit.h): a sum of independent
 * per-position terms, so thousands of threads can add them up in any order
 * and get the host reference's value, where FNV-1a would be one serial
 * chain over hundreds of megabytes on the host. */
#include "cu_backend.h"

/* mix64 is the splitmix64 finaliser of x + golden ratio; refit.c's
 * reference is the same arithmetic. */
__device__ __forceinline__ unsigned long long mix64(unsigned long long x)
{
    unsigned long long z = x + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* hash_kernel adds mix64(i << 16 | u[i]) over the n 16-bit units of the
 * vector into *out (mod 2^64): per thread, then per warp, then one atomic
 * per warp. blockDim.x is a multiple of 32. */
__global__ void hash_kernel(const unsigned short *u, size_t n, unsigned long long *out)
{
    unsigned long long acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        acc += mix64(((unsigned long long)i << 16) | u[i]);
    }
    for (int o = 16; o > 0; o >>= 1) {
        acc += __shfl_down_sync(0xffffffffu, acc, o);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(out, acc);
    }
}

__global__ void widen_kernel(float *dst, const bf16 *src, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        dst[i] = __bfloat162float(src[i]);
    }
}

/* vec: the backend's vector in dtype. */
static int vec(cu_backend *cb, tr_comm_dtype dtype, void **dev, tr_err *err)
{
    *dev = NULL;
    if (dtype == TR_COMM_BF16 && !cb->bf16) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "cuda backend: a bf16 refit needs train.precision bf16 (this backend is fp32)");
    }
    if (dtype == TR_COMM_F32 && cb->master_stale) {
        return tr_cu_master_current(cb, "an fp32 refit", err);
    }
    *dev = dtype == TR_COMM_BF16 ? cb->params : (void *)cb->master;
    return TROUPE_OK;
}

int tr_cu_refit_params(tr_backend *b, tr_comm_dtype dtype, void **dev, tr_err *err)
{
    cu_backend *cb = (cu_backend *)b;
    int rv = vec(cb, dtype, dev, err);
    if (rv != TROUPE_OK) {
        return rv;
    }
    TR_CU_TRY(cudaSetDevice(cb->dev));
    /* the optimiser step that made these weights is queued on cb->s; the
     * communicator reads them on a stream of its own */
    TR_CU_TRY(cudaStreamSynchronize(cb->s));
out:
    if (rv != TROUPE_OK) {
        *dev = NULL; /* a device that failed must not be written or read by the communicator */
    }
    return rv;
}

int tr_cu_refit_taken(tr_backend *b, tr_comm_dtype dtype, tr_err *err)
{
    cu_backend *cb = (cu_backend *)b;
    size_t n = b->num_params;
    int rv = TROUPE_OK;
    TR_CU_TRY(cudaSetDevice(cb->dev));
    if (dtype == TR_COMM_BF16 && cb->bf16) {
        widen_kernel<<<1024, 256, 0, cb->s>>>(cb->master, (const bf16 *)cb->params, n);
        TR_CU_TRY(cudaGetLastError());
    } else if (dtype == TR_COMM_F32 && cb->bf16) {
        TR_CU_TRY(tr_cu_convert((bf16 *)cb->params, cb->master, n, cb->s));
    }
    cb->master_stale = 0; /* the whole vector was written */
    TR_CU_TRY(cudaStreamSynchronize(cb->s));
out:
    return rv;
}

int tr_cu_refit_hash(tr_backend *b, tr_comm_dtype dtype, uint64_t *hash, tr_err *err)
{
    cu_backend *cb = (cu_backend *)b;
    size_t units = b->num_params * (dtype == TR_COMM_BF16 ? 1 : 2);
    unsigned long long h = 0;
    void *dev;
    int rv = vec(cb, dtype, &dev, err);

    *hash = 0;
    if (rv != TROUPE_OK) {
        return rv;
    }
    TR_CU_TRY(cudaSetDevice(cb->dev));
    if (cb->refit_hash_dev == NULL) {
        TR_TRY(tr_cu_alloc(cb, (void **)&cb->refit_hash_dev, sizeof(unsigned long long), err));
    }
    TR_CU_TRY(cudaMemsetAsync(cb->refit_hash_dev, 0, sizeof(unsigned long long), cb->s));
    hash_kernel<<<1024, 256, 0, cb->s>>>((const unsigned short *)dev, units, cb->refit_hash_dev);
    TR_CU_TRY(cudaGetLastError());
    TR_CU_TRY(cudaMemcpyAsync(&h, cb->refit_hash_dev, sizeof(h), cudaMemcpyDeviceToHost, cb->s));
    TR_CU_TRY(cudaStreamSynchronize(cb->s));
    *hash = (uint64_t)h;
out:
    return rv;
}
