/* health_judge.c - the rules of job health (see health_judge.h). */
#include "health_judge.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tr_hj_cfg_defaults(tr_hj_cfg *c)
{
    c->stall_after_ms = 0;
    c->stall_min_ms = 60000;
    c->stall_factor = 10.0;
    c->straggler_factor = 1.3;
    c->straggler_window = 10;
    c->memory_window = 20;
    c->memory_slope_bytes = 1048576.0;
    c->memory_near = 0.95;
}

int tr_hj_cfg_check(const tr_hj_cfg *c, char *err, size_t err_size)
{
    const char *bad = NULL;

    if (c->stall_after_ms < 0 || c->stall_after_ms > 7 * 24 * 3600 * 1000LL) {
        bad = "stall_after must be between 0 (automatic) and 7 days";
    } else if (c->stall_min_ms < 100 || c->stall_min_ms > 7 * 24 * 3600 * 1000LL) {
        bad = "the minimum stall time must be between 100 ms and 7 days";
    } else if (!(c->stall_factor >= 1.0 && c->stall_factor <= 1000.0)) {
        bad = "the stall factor must be between 1 and 1000";
    } else if (!(c->straggler_factor > 1.0 && c->straggler_factor <= 100.0)) {
        bad = "straggler_factor must be above 1 and at most 100";
    } else if (c->straggler_window < 2 || c->straggler_window > TR_HJ_MAX_WINDOW) {
        bad = "straggler_window must be between 2 and 512 steps";
    } else if (c->memory_window < 2 || c->memory_window > TR_HJ_MAX_WINDOW) {
        bad = "memory_window must be between 2 and 512 steps";
    } else if (!(c->memory_slope_bytes > 0.0 && c->memory_slope_bytes < 1e15)) {
        bad = "memory_slope_mb must be above 0";
    } else if (!(c->memory_near > 0.0 && c->memory_near <= 1.0)) {
        bad = "memory_near must be above 0 and at most 1 (a fraction of the GPU's memory)";
    }
    if (bad != NULL) {
        snprintf(err, err_size, "%s", bad);
        return -1;
    }
    return 0;
}

void tr_hj_reset(tr_hj_rank *r, uint32_t attempt)
{
    memset(r, 0, sizeof(*r));
    r->attempt = attempt;
}

/* feed_step: a step is done. Its time joins the ring only when it is finite
 * and not negative (the first step_end of a loop without step_begin has no
 * time, and a clock step must not poison the medians). */
static void feed_step(tr_hj_rank *r, uint64_t step, double ms, int64_t now_ms)
{
    if (step <= r->last_step && r->last_ms != 0) {
        return; /* a resend or an older point */
    }
    if (r->last_ms == 0) {
        r->first_ms = now_ms;
    }
    r->last_step = step;
    r->last_ms = now_ms;
    if (isfinite(ms) && ms >= 0.0) {
        r->times[r->times_at] = ms;
        r->times_at = (r->times_at + 1) % TR_HJ_MAX_WINDOW;
        r->n_times += r->n_times < TR_HJ_MAX_WINDOW;
    }
}

void tr_hj_seed(tr_hj_rank *r, uint64_t step, int64_t now_ms)
{
    if (r->last_ms != 0) {
        return; /* reports arrived first: they know better */
    }
    r->last_step = step;
    r->first_ms = r->last_ms = now_ms;
}

static void feed_memory(tr_hj_rank *r, uint64_t step, double bytes)
{
    if ((r->mem_seen && step <= r->mem_last_step) || !isfinite(bytes)) {
        return;
    }
    r->mem_seen = 1;
    r->mem_last_step = step;
    r->mem_step[r->mem_at] = step;
    r->mem[r->mem_at] = bytes;
    r->mem_at = (r->mem_at + 1) % TR_HJ_MAX_WINDOW;
    r->n_mem += r->n_mem < TR_HJ_MAX_WINDOW;
}

/* feed_phase adds a phase time to its step's compute time; a step's sum
 * joins the ring when the next step's first phase arrives (the phases of a
 * step come together, in one step_end). */
static void feed_phase(tr_hj_rank *r, uint64_t step, double ms)
{
    if (!isfinite(ms) || ms < 0.0 || (r->acc_open && step < r->acc_step)) {
        return;
    }
    if (r->acc_open && step > r->acc_step) {
        r->compute[r->compute_at] = r->acc_ms;
        r->compute_at = (r->compute_at + 1) % TR_HJ_MAX_WINDOW;
        r->n_compute += r->n_compute < TR_HJ_MAX_WINDOW;
        r->acc_open = 0;
    }
    if (!r->acc_open) {
        r->acc_open = 1;
        r->acc_step = step;
        r->acc_ms = 0.0;
    }
    r->acc_ms += ms;
}

void tr_hj_feed(tr_hj_rank *r, uint64_t step, const char *name, double value, int64_t now_ms)
{
    if (strcmp(name, "forward_ms") == 0 || strcmp(name, "backward_ms") == 0 || strcmp(name, "optimizer_ms") == 0) {
        feed_phase(r, step, value);
    } else if (strcmp(name, "step_ms") == 0) {
        feed_step(r, step, value, now_ms);
    } else if (strcmp(name, "gpu_mem_in_use_bytes") == 0) {
        feed_memory(r, step, value);
    } else if (strcmp(name, "gpu_mem_total_bytes") == 0 && isfinite(value) && value > 0.0) {
        r->mem_total = value;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* lower_median sorts v and returns its middle element (the lower of the two
 * middle ones for an even count); 0 for none. */
static double lower_median(double *v, size_t n)
{
    if (n == 0) {
        return 0.0;
    }
    qsort(v, n, sizeof(*v), cmp_double);
    return v[(n - 1) / 2];
}

/* ring_median: the median of the newest min(have, window) values of a ring
 * whose next slot is at. */
static double ring_median(const double *ring, size_t have, size_t at, uint32_t window)
{
    double v[TR_HJ_MAX_WINDOW];
    size_t n = have < window ? have : window;

    for (size_t i = 0; i < n; i++) { /* the newest n */
        v[i] = ring[(at + TR_HJ_MAX_WINDOW - 1 - i) % TR_HJ_MAX_WINDOW];
    }
    if (n == 0) {
        return 0.0;
    }
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

double tr_hj_median_step(const tr_hj_rank *r, uint32_t window)
{
    return ring_median(r->times, r->n_times, r->times_at, window);
}

double tr_hj_median_compute(const tr_hj_rank *r, uint32_t window)
{
    return ring_median(r->compute, r->n_compute, r->compute_at, window);
}

int tr_hj_memory_fit(const tr_hj_rank *r, uint32_t window, double *slope)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0, x0;
    size_t n = window;

    if (r->n_mem < window || window < 2) {
        return 0;
    }
    /* x relative to the oldest step of the window: no precision lost on big
     * step numbers; y in bytes (exact below 2^53). */
    x0 = (double)r->mem_step[(r->mem_at + TR_HJ_MAX_WINDOW - n) % TR_HJ_MAX_WINDOW];
    for (size_t i = 0; i < n; i++) {
        size_t k = (r->mem_at + TR_HJ_MAX_WINDOW - n + i) % TR_HJ_MAX_WINDOW;
        double x = (double)r->mem_step[k] - x0, y = r->mem[k];
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    double d = (double)n * sxx - sx * sx;
    if (d <= 0.0) {
        return 0; /* every point at one step: no line */
    }
    *slope = ((double)n * sxy - sx * sy) / d;
    return 1;
}

/* stall_after: fixed, or from the group's median step time. */
static int64_t stall_after(const tr_hj_cfg *c, double median_ms)
{
    double autod = c->stall_factor * median_ms;

    if (c->stall_after_ms > 0) {
        return c->stall_after_ms;
    }
    return autod > (double)c->stall_min_ms ? (int64_t)autod : c->stall_min_ms;
}

static void judge_stall(const tr_hj_cfg *c, const tr_hj_rank *const *ranks, size_t n, int64_t now_ms,
                        tr_hj_rank_verdict *out, tr_hj_group_verdict *g)
{
    int64_t group_first = 0;

    for (size_t i = 0; i < n; i++) {
        if (ranks[i] != NULL && ranks[i]->last_ms != 0 &&
            (group_first == 0 || ranks[i]->first_ms < group_first)) {
            group_first = ranks[i]->first_ms;
        }
    }
    g->active = group_first != 0;
    g->stall_after_ms = stall_after(c, g->median_step_ms);
    for (size_t i = 0; g->active && i < n; i++) {
        int64_t last = (ranks[i] != NULL && ranks[i]->last_ms != 0) ? ranks[i]->last_ms : group_first;
        if (now_ms - last >= g->stall_after_ms) {
            out[i].stalled = 1;
            out[i].stalled_since = last;
            g->stalled++;
        }
    }
}

/* use_compute: every rank with a full window of steps has one of compute
 * times too, so the phase sums can be compared (see the header). */
static int use_compute(const tr_hj_cfg *c, const tr_hj_rank *const *ranks, size_t n)
{
    size_t full = 0;
    for (size_t i = 0; i < n; i++) {
        if (ranks[i] != NULL && ranks[i]->n_times >= c->straggler_window) {
            if (ranks[i]->n_compute < c->straggler_window) {
                return 0;
            }
            full++;
        }
    }
    return full > 0;
}

static void judge_stragglers(const tr_hj_cfg *c, const tr_hj_rank *const *ranks, size_t n,
                             tr_hj_rank_verdict *out, tr_hj_group_verdict *g, const double *step_med)
{
    double v[n > 0 ? n : 1], cm[n > 0 ? n : 1];
    const double *med = step_med;
    int by_compute = use_compute(c, ranks, n);
    size_t full = 0;

    if (by_compute) {
        for (size_t i = 0; i < n; i++) {
            cm[i] = ranks[i] != NULL ? tr_hj_median_compute(ranks[i], c->straggler_window) : 0.0;
        }
        med = cm;
    }
    for (size_t i = 0; i < n; i++) {
        if (ranks[i] != NULL && ranks[i]->n_times >= c->straggler_window) {
            v[full++] = med[i];
        }
    }
    if (full < 2) {
        return; /* nobody to compare with */
    }
    double group = lower_median(v, full);
    for (size_t i = 0; i < n && group > 0.0; i++) {
        if (ranks[i] == NULL || ranks[i]->n_times < c->straggler_window || out[i].stalled) {
            continue;
        }
        if (med[i] > c->straggler_factor * group) {
            out[i].straggler = 1;
            out[i].step_ms = med[i];
            out[i].group_step_ms = group;
            out[i].ratio = med[i] / group;
            out[i].by_compute = by_compute;
            g->stragglers++;
        }
    }
}

static void judge_memory(const tr_hj_cfg *c, const tr_hj_rank *r, tr_hj_rank_verdict *o, tr_hj_group_verdict *g)
{
    double slope = 0.0;

    if (r == NULL || r->n_mem == 0) {
        return;
    }
    o->memory_bytes = r->mem[(r->mem_at + TR_HJ_MAX_WINDOW - 1) % TR_HJ_MAX_WINDOW];
    o->memory_total = r->mem_total;
    if (tr_hj_memory_fit(r, c->memory_window, &slope) && slope > c->memory_slope_bytes) {
        o->memory_growing = 1;
        o->memory_slope = slope;
    }
    if (r->mem_total > 0.0 && o->memory_bytes >= c->memory_near * r->mem_total) {
        o->memory_near = 1;
    }
    g->memory += o->memory_growing || o->memory_near;
}

void tr_hj_judge_group(const tr_hj_cfg *c, const tr_hj_rank *const *ranks, size_t n, int64_t now_ms,
                       tr_hj_rank_verdict *out, tr_hj_group_verdict *g)
{
    double med[n > 0 ? n : 1], v[n > 0 ? n : 1];
    size_t have = 0;

    memset(g, 0, sizeof(*g));
    memset(out, 0, n * sizeof(*out));
    for (size_t i = 0; i < n; i++) {
        med[i] = ranks[i] != NULL ? tr_hj_median_step(ranks[i], c->straggler_window) : 0.0;
        if (med[i] > 0.0) {
            v[have++] = med[i];
        }
    }
    if (have > 0) {
        /* the usual median here: the stall time scales with the typical rank */
        qsort(v, have, sizeof(*v), cmp_double);
        g->median_step_ms = have % 2 ? v[have / 2] : (v[have / 2 - 1] + v[have / 2]) / 2.0;
    }
    judge_stall(c, ranks, n, now_ms, out, g);
    judge_stragglers(c, ranks, n, out, g, med);
    for (size_t i = 0; i < n; i++) {
        judge_memory(c, ranks[i], &out[i], g);
    }
}
