/* health_judge.h - the rules of job health, as pure functions:
 * what the head's health service (health.c) feeds in and what it concludes.
 * No locks, no clock, no I/O: the caller passes "now" and owns the memory,
 * so the unit tests (unit.server.health.*) drive every rule directly.
 *
 * What is fed, per worker and attempt (tr_hj_feed), are the metric points
 * troupe_worker_step_end sends: "step_ms" marks a step done (its step number
 * and time), "gpu_mem_in_use_bytes" and "gpu_mem_total_bytes" the memory.
 * Points arrive in each worker's report order; a step number not above the
 * last one seen (a resend, an older point) changes nothing.
 *
 * What is judged, per worker group (tr_hj_judge_group):
 * - stall: a group takes part once one of its ranks reported a step; a rank
 *   is stalled when its last step is older than stall_after (fixed, or the
 *   larger of stall_min_ms and stall_factor x the group's median step time).
 *   A rank that never reported counts from the group's first step.
 * - stragglers: among ranks with a full window of step times, one whose
 *   median over the window is above straggler_factor x the group's median
 *   (the lower middle of the ranks' medians, so that in a pair the slow
 *   rank is compared with the fast one, not with their mean). In a
 *   synchronous data-parallel group every rank's step lasts as long as the
 *   slowest one's (the others wait in the all-reduce), so whole steps cannot
 *   tell who is slow: when every rank compared also reports phase times
 *   ("forward_ms", "backward_ms", "optimizer_ms", which leave the wait out),
 *   their sum per step ("compute") is compared instead.
 * - memory: a least-squares line through the last memory_window
 *   (step, gpu_mem_in_use_bytes) points; a slope above memory_slope_bytes
 *   per step warns, and so does the latest value at or above memory_near of
 *   the GPU's capacity when that is known. */
#ifndef TR_HEALTH_JUDGE_H
#define TR_HEALTH_JUDGE_H

#include <stddef.h>
#include <stdint.h>

#define TR_HJ_MAX_WINDOW 512  /* the largest straggler or memory window */

/* Thresholds in force for a job: its `health:` over the head's defaults. */
typedef struct tr_hj_cfg {
    int64_t stall_after_ms;     /* > 0: fixed; 0: automatic (below) */
    int64_t stall_min_ms;       /* automatic: max(stall_min_ms, stall_factor x median step) */
    double stall_factor;
    double straggler_factor;    /* > 1 */
    uint32_t straggler_window;  /* step times per rank compared, 2..TR_HJ_MAX_WINDOW */
    uint32_t memory_window;     /* points in the memory fit, 2..TR_HJ_MAX_WINDOW */
    double memory_slope_bytes;  /* growth per step that warns */
    double memory_near;         /* fraction of capacity that warns, (0, 1] */
} tr_hj_cfg;

/* One worker attempt's history. Zero it (or tr_hj_reset) before the first
 * feed; about 16 KiB. */
typedef struct tr_hj_rank {
    uint32_t attempt;
    uint64_t last_step;     /* 0 = no step yet */
    int64_t first_ms;       /* caller's clock at its first step */
    int64_t last_ms;        /* caller's clock when last_step moved */
    double times[TR_HJ_MAX_WINDOW]; /* step_ms, a ring */
    size_t n_times, times_at;
    uint64_t mem_step[TR_HJ_MAX_WINDOW]; /* memory points, a ring */
    double mem[TR_HJ_MAX_WINDOW];
    size_t n_mem, mem_at;
    uint64_t mem_last_step; /* the last memory point's step */
    int mem_seen;
    double mem_total;       /* 0 = unknown */
    double compute[TR_HJ_MAX_WINDOW]; /* per step: forward + backward + optimizer ms, a ring */
    size_t n_compute, compute_at;
    uint64_t acc_step;      /* the step whose phase times are being added up */
    double acc_ms;
    int acc_open;
} tr_hj_rank;

/* What is concluded about one rank. */
typedef struct tr_hj_rank_verdict {
    int stalled;
    int64_t stalled_since; /* caller's clock: its last step, or the group's first */
    int straggler;
    double step_ms, group_step_ms, ratio; /* straggler: its median, the group's, their ratio */
    int by_compute;                        /* ... of compute times (phase sums), not whole steps */
    int memory_growing, memory_near;
    double memory_slope, memory_bytes, memory_total; /* bytes per step; latest; capacity (0 = unknown) */
} tr_hj_rank_verdict;

typedef struct tr_hj_group_verdict {
    int active;             /* a rank reported a step: the group takes part */
    int64_t stall_after_ms; /* in force */
    double median_step_ms;  /* 0 = none yet */
    size_t stalled, stragglers, memory;
} tr_hj_group_verdict;

/* tr_hj_cfg_defaults: 60 s / 10x / 1.3x over 10 steps / 1 MiB per step over
 * 20 steps / 95 % of capacity. */
void tr_hj_cfg_defaults(tr_hj_cfg *c);

/* tr_hj_cfg_check: every threshold within bounds; err gets a sentence naming
 * the first that is not (what: "health" or the config's name). Returns 0 or
 * -1. */
int tr_hj_cfg_check(const tr_hj_cfg *c, char *err, size_t err_size);

/* tr_hj_reset empties r for a new attempt. */
void tr_hj_reset(tr_hj_rank *r, uint32_t attempt);

/* tr_hj_feed takes one point of r's worker at step (the caller's clock now).
 * Names other than the three above are ignored. */
void tr_hj_feed(tr_hj_rank *r, uint64_t step, const char *name, double value, int64_t now_ms);

/* tr_hj_seed starts r (a fresh attempt's history) from a step known from
 * before (a head restart: the last step_ms stored), heard of at now_ms: its
 * stall clock starts then, with no step times yet. */
void tr_hj_seed(tr_hj_rank *r, uint64_t step, int64_t now_ms);

/* tr_hj_median_step: the median of r's last `window` step times (0 when it
 * has none). */
double tr_hj_median_step(const tr_hj_rank *r, uint32_t window);

/* tr_hj_median_compute: the median of r's last `window` compute times (the
 * sum of a step's phase times), counting only steps whose phases are all
 * in; 0 when it has none. */
double tr_hj_median_compute(const tr_hj_rank *r, uint32_t window);

/* tr_hj_memory_fit: the least-squares slope (bytes per step) through r's
 * last `window` memory points; returns 0 and leaves *slope alone when it has
 * fewer than `window`. */
int tr_hj_memory_fit(const tr_hj_rank *r, uint32_t window, double *slope);

/* tr_hj_judge_group judges the n ranks of a group at now_ms: ranks[i] NULL
 * is a rank with no history (never reported in this attempt). out[i] gets
 * rank i's verdict; g the group's. */
void tr_hj_judge_group(const tr_hj_cfg *c, const tr_hj_rank *const *ranks, size_t n, int64_t now_ms,
                       tr_hj_rank_verdict *out, tr_hj_group_verdict *g);

#endif
