/* gpus.h - what GPUs this node has: discovered, or simulated on request. */
#ifndef TR_GPUS_H
#define TR_GPUS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define TR_MAX_GPUS 64

typedef struct tr_gpu_info {
    uint32_t index;
    char model[96];
    uint64_t memory_bytes;
    char uuid[64];
    int simulated;
} tr_gpu_info;

/* tr_gpus_parse_fake parses a --fake-gpus SPEC: "N", "NxMODEL" or
 * "NxMODEL:MEM" (MEM like 141GB, 80GiB, 24000MB), e.g. "8", "4xH200:141GB".
 * Fills up to TR_MAX_GPUS entries of out and sets *n. name seeds the UUIDs. */
int tr_gpus_parse_fake(const char *spec, const char *name, tr_gpu_info *out, size_t *n, tr_err *err);

/* tr_gpus_discover asks the CUDA driver (libcuda.so.1, loaded at run time so
 * any build works) for the real GPUs. *n = 0 with OK when there is no driver or
 * no device; a driver that fails is an error. */
int tr_gpus_discover(tr_gpu_info *out, size_t *n, tr_err *err);

#endif
