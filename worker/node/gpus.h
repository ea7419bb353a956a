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

/* tr_gpus_translate_visible maps GPU indices as this agent numbered them
 * ("0,1": what the head put in a worker's CUDA_VISIBLE_DEVICES) through the
 * agent's own CUDA_VISIBLE_DEVICES (agent_visible, e.g. "4,5,6,7" or UUIDs),
 * so a worker gets the physical GPUs the agent discovered. Writes the result
 * to out; returns INVALID_ARGUMENT for an index the agent's list lacks. */
int tr_gpus_translate_visible(const char *agent_visible, const char *assigned, char *out, size_t size,
                              tr_err *err);

#endif
