/* train_cuda.h - extras of the CUDA backend of troupe-train beyond backend.h:
 * device facts, the measured GEMM ceiling for MFU, profiler and NVTX hooks.
 *
 * Available only in builds with CUDA (TR_HAVE_CUDA). Plain C. Unless stated,
 * functions may be called from any thread; the backend-taking ones follow the
 * backend's one-thread-at-a-time rule. */
#ifndef TR_TRAIN_CUDA_H
#define TR_TRAIN_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Dense bf16 peak of an H100/H200 SXM in TFLOP/s (datasheet), the MFU
 * denominator used by llm.c and the literature. */
#define TR_CUDA_PEAK_BF16_TFLOPS 989.0

/* tr_cuda_device_info writes the device's name (NUL-terminated, truncated to
 * len), its multiprocessor count and memory size. Returns UNAVAILABLE when
 * there is no such device. Any out-pointer may be NULL. */
int tr_cuda_device_info(int device, char *name, size_t len, int *sm_count, uint64_t *mem_bytes, tr_err *err);

/* tr_cuda_gemm_ceiling times an n x n x n bf16 cuBLASLt GEMM (fp32
 * accumulation, random data) on device and stores the median rate in
 * *tflops. Allocates 3 n^2 bf16 matrices for the duration (n = 8192: 384 MiB).
 * Takes about a second. */
int tr_cuda_gemm_ceiling(int device, int n, double *tflops, tr_err *err);

/* tr_cuda_profiler_start / stop bracket a step range for a profiler started
 * with a capture range on the CUDA profiler API (ncu --profile-from-start off,
 * nsys -c cudaProfilerApi). No-ops without a tool. */
void tr_cuda_profiler_start(void);
void tr_cuda_profiler_stop(void);

/* tr_cuda_nvtx_push / pop open and close a named NVTX range on the calling
 * thread (the backend itself marks forward, backward and optimizer). */
void tr_cuda_nvtx_push(const char *name);
void tr_cuda_nvtx_pop(void);

/* Implementation choices of a CUDA backend, for tests and comparisons. */
typedef enum tr_cuda_option {
    /* 1: fused flash attention (bf16, head size 64 only; the default where it
     * applies); 0: reference kernels that store the T x T probabilities
     * (allocated on first use). */
    TR_CUDA_OPT_FLASH_ATTENTION = 0,
    /* 1: GELU and its gradient in the cuBLASLt epilogues of the MLP matmuls;
     * 0 (the default, faster on the H200): separate elementwise kernels. */
    TR_CUDA_OPT_GELU_EPILOGUE = 1,
    /* 1 (the default): replay a forward(+backward) of an unchanged shape as
     * one captured CUDA graph from its second call on; 0: launch eagerly. */
    TR_CUDA_OPT_CUDA_GRAPHS = 2,
} tr_cuda_option;

/* tr_cuda_set_option sets opt to value on a CUDA backend. Returns
 * INVALID_ARGUMENT for a non-CUDA backend or a choice that cannot apply. */
int tr_cuda_set_option(tr_backend *b, tr_cuda_option opt, int value, tr_err *err);

#ifdef __cplusplus
}
#endif
#endif
