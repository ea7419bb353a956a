/* test_health.c - unit.server.health: the rules of job health
 * (server/health_judge.c) driven with made-up histories and clocks: stalls
 * (fixed and automatic stall_after, ranks that never reported), stragglers
 * (window, factor, lower median), the memory fit and capacity, feeding
 * (resends, attempts) and the threshold checks. */
#include <math.h>
#include <stdlib.h>

#include "test_helpers.h"

#include "health_judge.h"

/* ranks_new: n zeroed histories (12 KiB each, so on the heap). */
static tr_hj_rank *ranks_new(size_t n)
{
    tr_hj_rank *r = calloc(n, sizeof(*r));
    assert_non_null(r);
    return r;
}

/* steps feeds steps first..last to r, each ms long, the clock advancing with
 * them from *clock. */
static void steps(tr_hj_rank *r, uint64_t first, uint64_t last, double ms, int64_t *clock)
{
    for (uint64_t s = first; s <= last; s++) {
        *clock += (int64_t)ms;
        tr_hj_feed(r, s, "step_ms", ms, *clock);
    }
}

static void judge(const tr_hj_cfg *c, tr_hj_rank *r, size_t n, int64_t now, tr_hj_rank_verdict *out,
                  tr_hj_group_verdict *g)
{
    const tr_hj_rank *p[16];
    for (size_t i = 0; i < n; i++) {
        p[i] = &r[i];
    }
    tr_hj_judge_group(c, p, n, now, out, g);
}

/* A fixed stall_after: the rank that stopped is stalled from its last step
 * on, exactly at the threshold, and the others are not. */
static void stall_fixed(void **state)
{
    tr_hj_cfg c;
    tr_hj_rank *r = ranks_new(3);
    tr_hj_rank_verdict v[3];
    tr_hj_group_verdict g;
    int64_t t0 = 1000, t1 = 1000, t2 = 1000;

    tr_hj_cfg_defaults(&c);
    c.stall_after_ms = 3000;
    steps(&r[0], 1, 50, 100, &t0);
    steps(&r[1], 1, 10, 100, &t1); /* stops at step 10, clock 2000 */
    steps(&r[2], 1, 50, 100, &t2);
    judge(&c, r, 3, 4999, v, &g);
    assert_int_equal(g.stalled, 0);
    assert_int_equal(g.stall_after_ms, 3000);
    judge(&c, r, 3, 5000, v, &g);
    assert_true(g.active);
    assert_int_equal(g.stalled, 1);
    assert_true(v[1].stalled);
    assert_int_equal(v[1].stalled_since, 2000);
    assert_int_equal(r[1].last_step, 10);
    assert_false(v[0].stalled);
    assert_false(v[2].stalled);
    /* a step again: no longer stalled */
    tr_hj_feed(&r[1], 11, "step_ms", 100, 5100);
    judge(&c, r, 3, 5200, v, &g);
    assert_int_equal(g.stalled, 0);
    free(r);
}

/* Automatic: the larger of stall_min_ms and stall_factor x the median step
 * time; a group where nobody reported is not judged at all. */
static void stall_automatic(void **state)
{
    tr_hj_cfg c;
    tr_hj_rank *r = ranks_new(2);
    tr_hj_rank_verdict v[2];
    tr_hj_group_verdict g;
    int64_t t = 0, u = 0;

    tr_hj_cfg_defaults(&c);
    judge(&c, r, 2, 10LL * 3600 * 1000, v, &g);
    assert_false(g.active); /* a job that reports no steps is never STALLED */
    assert_int_equal(g.stalled, 0);
    steps(&r[0], 1, 20, 100, &t);
    steps(&r[1], 1, 20, 100, &u);
    judge(&c, r, 2, t, v, &g);
    assert_true(g.median_step_ms == 100.0);
    assert_int_equal(g.stall_after_ms, 60000); /* 10 x 100 ms < 60 s */
    tr_hj_reset(&r[0], 0);
    tr_hj_reset(&r[1], 0);
    t = u = 0;
    steps(&r[0], 1, 20, 9000, &t); /* 9 s steps: 90 s */
    steps(&r[1], 1, 20, 9000, &u);
    judge(&c, r, 2, t + 89999, v, &g);
    assert_int_equal(g.stall_after_ms, 90000);
    assert_int_equal(g.stalled, 0);
    judge(&c, r, 2, t + 90000, v, &g);
    assert_int_equal(g.stalled, 2); /* none of the workers reported: all named */
    assert_true(v[0].stalled && v[1].stalled);
    free(r);
}

/* A rank that never reported counts from the group's first step. */
static void stall_never_reported(void **state)
{
    tr_hj_cfg c;
    tr_hj_rank *r = ranks_new(1);
    const tr_hj_rank *p[2];
    tr_hj_rank_verdict v[2];
    tr_hj_group_verdict g;
    int64_t t = 500;

    tr_hj_cfg_defaults(&c);
    c.stall_after_ms = 2000;
    steps(&r[0], 1, 1, 100, &t); /* first step at 600 */
    steps(&r[0], 2, 40, 100, &t);
    p[0] = &r[0];
    p[1] = NULL;
    tr_hj_judge_group(&c, p, 2, 2599, v, &g);
    assert_int_equal(g.stalled, 0);
    tr_hj_judge_group(&c, p, 2, 2600, v, &g);
    assert_int_equal(g.stalled, 1);
    assert_true(v[1].stalled);
    assert_int_equal(v[1].stalled_since, 600);
    assert_false(v[0].stalled);
    free(r);
}

/* Stragglers: above factor x the group's lower median over a full window;
 * a short history, a lone rank or a rank just under the factor is not one. */
static void stragglers(void **state)
{
    tr_hj_cfg c;
    tr_hj_rank *r = ranks_new(4);
    tr_hj_rank_verdict v[4];
    tr_hj_group_verdict g;
    int64_t t[4] = {0, 0, 0, 0};

    tr_hj_cfg_defaults(&c); /* 1.3x over 10 steps */
    steps(&r[0], 1, 9, 100, &t[0]);
    steps(&r[1], 1, 9, 300, &t[1]);
    judge(&c, r, 2, 3000, v, &g);
    assert_int_equal(g.stragglers, 0); /* 9 steps: the window is not full */
    steps(&r[0], 10, 10, 100, &t[0]);
    steps(&r[1], 10, 10, 300, &t[1]);
    judge(&c, r, 2, 3000, v, &g);
    assert_int_equal(g.stragglers, 1); /* a pair: 300 against 100, not against their mean */
    assert_true(v[1].straggler);
    assert_true(fabs(v[1].ratio - 3.0) < 1e-9);
    assert_true(v[1].step_ms == 300.0 && v[1].group_step_ms == 100.0);
    judge(&c, r, 1, 3000, v, &g);
    assert_int_equal(g.stragglers, 0); /* alone: nobody to compare with */

    /* four ranks: 100, 100, 129 (just under 1.3x), 140 */
    tr_hj_rank_verdict w[4];
    for (int i = 0; i < 4; i++) {
        tr_hj_reset(&r[i], 0);
        t[i] = 0;
    }
    steps(&r[0], 1, 20, 100, &t[0]);
    steps(&r[1], 1, 20, 100, &t[1]);
    steps(&r[2], 1, 20, 129, &t[2]);
    steps(&r[3], 1, 20, 140, &t[3]);
    judge(&c, r, 4, 3000, w, &g);
    assert_int_equal(g.stragglers, 1);
    assert_false(w[2].straggler);
    assert_true(w[3].straggler);
    /* one slow step in ten is not "staying above": the median decides */
    tr_hj_feed(&r[0], 21, "step_ms", 5000, 3000);
    judge(&c, r, 4, 3000, w, &g);
    assert_false(w[0].straggler);
    free(r);
}

/* Memory: the slope of a least-squares line over the window, against the
 * threshold; a flat or noisy-but-flat history does not warn; capacity. */
static void memory_trend(void **state)
{
    tr_hj_cfg c;
    tr_hj_rank *r = ranks_new(2);
    tr_hj_rank_verdict v[2];
    tr_hj_group_verdict g;
    double slope = 0;

    tr_hj_cfg_defaults(&c); /* 1 MiB per step over 20 steps */
    for (uint64_t s = 1; s <= 19; s++) {
        tr_hj_feed(&r[0], s, "gpu_mem_in_use_bytes", 1e9 + 2.0 * 1048576.0 * (double)s, 0);
        tr_hj_feed(&r[1], s, "gpu_mem_in_use_bytes", 1e9 + (s % 2 ? 4e6 : -4e6), 0);
    }
    assert_int_equal(tr_hj_memory_fit(&r[0], 20, &slope), 0); /* 19 points */
    judge(&c, r, 2, 0, v, &g);
    assert_int_equal(g.memory, 0);
    tr_hj_feed(&r[0], 20, "gpu_mem_in_use_bytes", 1e9 + 2.0 * 1048576.0 * 20, 0);
    tr_hj_feed(&r[1], 20, "gpu_mem_in_use_bytes", 1e9 - 4e6, 0);
    assert_int_equal(tr_hj_memory_fit(&r[0], 20, &slope), 1);
    assert_true(fabs(slope - 2.0 * 1048576.0) < 1e-3);
    judge(&c, r, 2, 0, v, &g);
    assert_int_equal(g.memory, 1);
    assert_true(v[0].memory_growing);
    assert_true(fabs(v[0].memory_slope - 2097152.0) < 1e-3);
    assert_false(v[1].memory_growing); /* +-4 MB noise around a flat line */
    assert_false(v[0].memory_near);
    /* 0.5 MiB per step: under the threshold */
    tr_hj_reset(&r[0], 0);
    for (uint64_t s = 1; s <= 30; s++) {
        tr_hj_feed(&r[0], s, "gpu_mem_in_use_bytes", 524288.0 * (double)s, 0);
    }
    judge(&c, r, 1, 0, v, &g);
    assert_false(v[0].memory_growing);
    /* near capacity: at 95 % of the total */
    tr_hj_feed(&r[0], 31, "gpu_mem_total_bytes", 80e9, 0);
    tr_hj_feed(&r[0], 31, "gpu_mem_in_use_bytes", 75.9e9, 0);
    judge(&c, r, 1, 0, v, &g);
    assert_false(v[0].memory_near);
    tr_hj_feed(&r[0], 32, "gpu_mem_in_use_bytes", 76.1e9, 0);
    judge(&c, r, 1, 0, v, &g);
    assert_true(v[0].memory_near);
    assert_true(v[0].memory_total == 80e9 && v[0].memory_bytes == 76.1e9);
    free(r);
}

/* Feeding: a resend (same or older step) changes nothing; NaN and negative
 * step times mark progress without joining the medians; other names are
 * ignored. */
static void feeding(void **state)
{
    tr_hj_rank *r = ranks_new(1);

    tr_hj_feed(r, 1, "step_ms", NAN, 100); /* the first step_end of a loop without begin */
    assert_int_equal(r->last_step, 1);
    assert_int_equal(r->n_times, 0);
    tr_hj_feed(r, 2, "step_ms", 50, 200);
    tr_hj_feed(r, 2, "step_ms", 50, 900); /* resend */
    tr_hj_feed(r, 1, "step_ms", 50, 950); /* older */
    assert_int_equal(r->last_step, 2);
    assert_int_equal(r->last_ms, 200);
    assert_int_equal(r->n_times, 1);
    assert_int_equal(r->first_ms, 100);
    tr_hj_feed(r, 3, "step_ms", -5, 300);
    assert_int_equal(r->n_times, 1);
    assert_int_equal(r->last_step, 3);
    tr_hj_feed(r, 4, "loss", 2.5, 400);
    assert_int_equal(r->last_step, 3);
    tr_hj_feed(r, 4, "gpu_mem_in_use_bytes", 10, 400);
    tr_hj_feed(r, 4, "gpu_mem_in_use_bytes", 99, 400); /* resend of the step */
    tr_hj_feed(r, 5, "gpu_mem_in_use_bytes", INFINITY, 400);
    assert_int_equal(r->n_mem, 1);
    assert_true(r->mem[0] == 10.0);
    /* the ring keeps the newest window */
    tr_hj_reset(r, 2);
    assert_int_equal(r->attempt, 2);
    for (uint64_t s = 1; s <= TR_HJ_MAX_WINDOW + 7; s++) {
        tr_hj_feed(r, s, "step_ms", s <= TR_HJ_MAX_WINDOW ? 1000.0 : 10.0, (int64_t)s);
    }
    assert_true(tr_hj_median_step(r, 7) == 10.0);
    assert_true(tr_hj_median_step(r, 14) == 505.0);
    free(r);
}

/* A seed (the last step stored before a head restart) makes the group take
 * part from the restart on: a rank that stays silent is stalled after
 * stall_after from then, one that reports again is not; a seed after a
 * report changes nothing. */
static void seeded(void **state)
{
    tr_hj_cfg c;
    tr_hj_rank *r = ranks_new(2);
    tr_hj_rank_verdict v[2];
    tr_hj_group_verdict g;

    tr_hj_cfg_defaults(&c);
    c.stall_after_ms = 3000;
    tr_hj_seed(&r[0], 40, 10000);
    tr_hj_seed(&r[1], 41, 10000);
    assert_int_equal(r[0].last_step, 40);
    assert_int_equal(r[0].n_times, 0);
    tr_hj_feed(&r[1], 42, "step_ms", 50, 11000);
    tr_hj_feed(&r[1], 43, "step_ms", 50, 12500);
    judge(&c, r, 2, 12999, v, &g);
    assert_true(g.active);
    assert_int_equal(g.stalled, 0);
    judge(&c, r, 2, 13000, v, &g);
    assert_int_equal(g.stalled, 1);
    assert_true(v[0].stalled && v[0].stalled_since == 10000);
    tr_hj_seed(&r[1], 7, 20000); /* reports came first */
    assert_int_equal(r[1].last_step, 43);
    assert_int_equal(r[1].last_ms, 12500);
    free(r);
}

/* feed_dp: a synchronous data-parallel step: every rank's step takes wall
 * ms (the slowest one's), its compute is the sum of its phases. */
static void feed_dp(tr_hj_rank *r, uint64_t s, double wall, double compute, int64_t now)
{
    tr_hj_feed(r, s, "step_ms", wall, now);
    tr_hj_feed(r, s, "forward_ms", compute * 0.5, now);
    tr_hj_feed(r, s, "backward_ms", compute * 0.4, now);
    tr_hj_feed(r, s, "optimizer_ms", compute * 0.1, now);
}

/* Data parallelism: whole steps are equal (the fast ranks wait in the
 * all-reduce), the compute times are not: the slow rank is named by its
 * compute; a rank without phase times makes the judge fall back on whole
 * steps, which name nobody here. */
static void compute_stragglers(void **state)
{
    tr_hj_cfg c;
    tr_hj_rank *r = ranks_new(3);
    tr_hj_rank_verdict v[3];
    tr_hj_group_verdict g;

    tr_hj_cfg_defaults(&c); /* 1.3x over 10 steps */
    for (uint64_t s = 1; s <= 11; s++) { /* step 11's phases close step 10's sum */
        feed_dp(&r[0], s, 150, 40, (int64_t)s * 150);
        feed_dp(&r[1], s, 150, 42, (int64_t)s * 150);
        feed_dp(&r[2], s, 150, 150, (int64_t)s * 150);
    }
    assert_int_equal(r[2].n_compute, 10);
    assert_true(fabs(tr_hj_median_compute(&r[2], 10) - 150.0) < 1e-9);
    judge(&c, r, 3, 11 * 150, v, &g);
    assert_int_equal(g.stragglers, 1);
    assert_true(v[2].straggler && v[2].by_compute);
    assert_true(fabs(v[2].ratio - 150.0 / 42.0) < 1e-9); /* against the middle rank's 42 */
    assert_true(fabs(v[2].group_step_ms - 42.0) < 1e-9);
    /* a rank without phase times: whole steps are compared, all equal */
    tr_hj_reset(&r[1], 0);
    for (uint64_t s = 1; s <= 11; s++) {
        tr_hj_feed(&r[1], s, "step_ms", 150, (int64_t)s * 150);
    }
    judge(&c, r, 3, 11 * 150, v, &g);
    assert_int_equal(g.stragglers, 0);
    free(r);
}

/* Thresholds out of bounds are refused with a sentence naming them. */
static void cfg_check(void **state)
{
    tr_hj_cfg c;
    char err[256];

    tr_hj_cfg_defaults(&c);
    assert_int_equal(tr_hj_cfg_check(&c, err, sizeof(err)), 0);
    c.straggler_factor = 1.0;
    assert_int_equal(tr_hj_cfg_check(&c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "straggler_factor"));
    tr_hj_cfg_defaults(&c);
    c.memory_window = 1;
    assert_int_equal(tr_hj_cfg_check(&c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "memory_window"));
    tr_hj_cfg_defaults(&c);
    c.memory_near = 1.5;
    assert_int_equal(tr_hj_cfg_check(&c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "memory_near"));
    tr_hj_cfg_defaults(&c);
    c.straggler_window = TR_HJ_MAX_WINDOW + 1;
    assert_int_equal(tr_hj_cfg_check(&c, err, sizeof(err)), -1);
    tr_hj_cfg_defaults(&c);
    c.memory_slope_bytes = NAN;
    assert_int_equal(tr_hj_cfg_check(&c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "memory_slope_mb"));
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stall_fixed),   cmocka_unit_test(stall_automatic), cmocka_unit_test(stall_never_reported),
        cmocka_unit_test(stragglers),    cmocka_unit_test(memory_trend),    cmocka_unit_test(feeding),
        cmocka_unit_test(cfg_check),     cmocka_unit_test(seeded),          cmocka_unit_test(compute_stragglers),
    };
    return TR_TEST_MAIN("unit.server.health", tests, argc, argv);
}
