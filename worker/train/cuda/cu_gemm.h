/* cu_gemm.h - the cuBLASLt wrapper of the CUDA backend (internal, C++).
 *
 * All matrices are column-major in cuBLAS terms; the backend's row-major
 * tensors are passed transposed (see backend_cuda.cu, linear_*). Matmul
 * descriptors, layouts and the heuristic's algorithm are cached per shape,
 * because asking the heuristic costs tens of microseconds and a training step
 * issues the same ~10 shapes hundreds of times. For a new shape a pool of
 * candidate algorithms (the heuristic's answers under several workspace
 * limits and reduction schemes, plus split-K copies) is timed on the real
 * operands (into a scratch output) and the fastest is kept: the heuristic's
 * first pick is often not the fastest for the tall-skinny products of
 * training, least of all the weight gradients (few output tiles, K = B*T).
 * TR_CUDA_GEMM_TUNE=0|1|2 (default 2) selects heuristic-only, the
 * heuristic's own candidates, or the pool; TR_CUDA_GEMM_LOG=1 prints each
 * shape's pick to stderr. Tuned picks are kept on disk per GPU model, CUDA
 * and cuBLASLt version and tuning level (TR_CUDA_GEMM_CACHE, default
 * $XDG_CACHE_HOME/troupe or ~/.cache/troupe; 0 turns it off), so that only
 * the first start on a machine pays for the tuning (~1.2 s of the first step
 * of GPT-2 124M at B 16 on an H100; ~0.15 s with the cache). */
#ifndef TR_CU_GEMM_H
#define TR_CU_GEMM_H

#include <cublasLt.h>

#include "cu_common.cuh"

typedef struct tr_cu_gemm_ctx tr_cu_gemm_ctx;

/* Epilogues beyond the plain bias add (which bias != NULL selects). */
enum {
    TR_CU_EPI_NONE = 0,
    TR_CU_EPI_GELU_AUX = 1, /* D = gelu(AB + bias); aux = AB + bias (the GELU input), needs bias */
    TR_CU_EPI_DGELU = 2,    /* D = AB * gelu'(aux) */
};

typedef struct tr_cu_gemm_args {
    void *d;          /* m x n, leading dimension m */
    const void *a;    /* m x k, or k x m when ta */
    const void *b;    /* k x n, or n x k when tb */
    const void *bias; /* m entries of d_type, added per row of D (NULL: none) */
    int m, n, k;
    int ta, tb;
    cudaDataType_t ab_type; /* CUDA_R_16BF or CUDA_R_32F */
    cudaDataType_t d_type;  /* CUDA_R_16BF or CUDA_R_32F (fp32 gradients) */
    int accumulate;         /* D += product instead of D = product */
    int epilogue;           /* TR_CU_EPI_*; the GELU ones use aux (m x n, leading dimension m, d_type) */
    void *aux;
} tr_cu_gemm_args;

/* tr_cu_gemm_create makes a context bound to stream s with its own workspace;
 * free with tr_cu_gemm_destroy (NULL is a no-op). */
int tr_cu_gemm_create(tr_cu_gemm_ctx **out, cudaStream_t s, tr_err *err);
void tr_cu_gemm_destroy(tr_cu_gemm_ctx *g);

/* tr_cu_gemm queues D = op(A) op(B) (+ D) (+ bias) with fp32 accumulation. */
int tr_cu_gemm(tr_cu_gemm_ctx *g, const tr_cu_gemm_args *a, tr_err *err);

/* Bytes the context holds on the device (its workspace). */
size_t tr_cu_gemm_device_bytes(const tr_cu_gemm_ctx *g);

#endif
