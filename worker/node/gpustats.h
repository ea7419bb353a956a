/* gpustats.h - live GPU and node figures for the agent's heartbeats: per
 * GPU memory used/total, utilisation, temperature and power through
 * NVML (libnvidia-ml.so.1, loaded at run time, so the agent links nothing;
 * TROUPE_NVML names another library), or simulated for --fake-gpus; per node
 * the load average and memory from /proc. */
#ifndef TR_GPUSTATS_H
#define TR_GPUSTATS_H

#include <stddef.h>
#include <stdint.h>

#include "gpus.h"

typedef struct tr_gpu_stats {
    uint32_t index;
    int ok; /* 0: this GPU could not be read (the others may be) */
    uint64_t memory_used_bytes, memory_total_bytes;
    uint32_t utilization_pct, temperature_c, power_mw;
} tr_gpu_stats;

typedef struct tr_gpustats tr_gpustats;

/* tr_gpustats_open prepares reading the n GPUs in gpus (the agent's, as
 * registered): simulated ones get made-up figures, real ones NVML's. It does
 * not fail: without NVML the source says why ("none: libnvidia-ml.so.1 not
 * found") and samples have ok = 0. NULL only when out of memory. */
tr_gpustats *tr_gpustats_open(const tr_gpu_info *gpus, size_t n);

/* tr_gpustats_source: "nvml", "simulated" or "none: WHY" (borrowed). */
const char *tr_gpustats_source(const tr_gpustats *g);

/* tr_gpustats_sample fills out[0..n) (n as opened). busy[i] says whether a
 * worker holds GPU i (simulated figures follow it; NULL: none busy). */
void tr_gpustats_sample(tr_gpustats *g, const uint8_t *busy, tr_gpu_stats *out);

/* tr_gpustats_close unloads NVML and frees; NULL is a no-op. */
void tr_gpustats_close(tr_gpustats *g);

/* tr_node_figures reads the 1-minute load average and the memory totals
 * (MemTotal, MemAvailable) from /proc; zeros where unreadable. */
void tr_node_figures(double *load1, uint64_t *mem_total, uint64_t *mem_available);

#endif
