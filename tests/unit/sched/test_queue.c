/* test_queue.c - FIFO with conservative backfill, and a randomized soak. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_restore.h"
#include "sched_test.h"

static tr_sched_placement *place_ok(tr_sched *s, uint64_t id, const char *vn, const char *groups)
{
    tr_sched_placement *p = NULL;
    tr_err err;
    tjob j;
    t_job(&j, vn, groups, NULL);
    assert_status(tr_sched_place(s, id, &j.spec, &p, &err), TROUPE_OK, &err);
    return p;
}

/* A later small job starts on GPUs the waiting big job's shadow does not need. */
static void test_backfill_allowed(void **state)
{
    tr_sched *s = t_cluster("4,8,16");
    tjob j1, j2;
    tr_sched_decision d[2];
    tr_err err;

    place_ok(s, 100, "8", "r:1x8:PACK"); /* running on n2 */
    t_job(&j1, "16,8", "g:3x8:PACK", NULL);
    t_job(&j2, "4", "g:2x2:PACK", NULL);
    tr_sched_pending q[] = {{1, &j1.spec}, {2, &j2.spec}};
    assert_status(tr_sched_schedule(s, q, 2, d, &err), TROUPE_OK, &err);
    assert_status(d[0].status, TROUPE_RESOURCE_EXHAUSTED, &d[0].why);
    assert_null(d[0].placement);
    assert_contains(d[0].why.msg, "waiting for 8 free GPUs on one node (virtual node 1)");
    assert_status(d[1].status, TROUPE_OK, &d[1].why);
    assert_int_equal(tr_sched_placement_vnodes(d[1].placement)[0].node_id, 1);
    t_check_props(s, &j2.spec, d[1].placement);
    /* the running job ends: the big job now starts */
    tr_sched_release(s, tr_sched_find(s, 100));
    assert_status(tr_sched_schedule(s, q, 1, d, &err), TROUPE_OK, &err);
    assert_status(d[0].status, TROUPE_OK, &d[0].why);
    t_check_props(s, &j1.spec, d[0].placement);
    t_check_invariants(s);
    tr_sched_close(s);
}

/* A later job that would take GPUs the earlier job is waiting for must wait. */
static void test_backfill_refused(void **state)
{
    tr_sched *s = t_cluster("4,8,16");
    tjob j1, j2, j3;
    tr_sched_decision d[3];
    tr_err err;

    place_ok(s, 100, "4", "r:1x4:PACK");    /* n1 */
    place_ok(s, 101, "8", "r:1x8:PACK");    /* n2 */
    t_job(&j1, "16,4", "g:5x4:PACK", NULL); /* shadow: all of n3 + n1 */
    t_job(&j2, "8", "g:1x8:PACK", NULL);    /* fits n3 now, but that is j1's */
    t_job(&j3, "8", "g:1x8:STRICT_SPREAD", NULL);
    tr_sched_pending q[] = {{1, &j1.spec}, {2, &j2.spec}, {3, &j3.spec}};
    assert_status(tr_sched_schedule(s, q, 3, d, &err), TROUPE_OK, &err);
    assert_status(d[0].status, TROUPE_RESOURCE_EXHAUSTED, &d[0].why);
    assert_status(d[1].status, TROUPE_RESOURCE_EXHAUSTED, &d[1].why);
    assert_contains(d[1].why.msg, "queued behind earlier pending job 1");
    assert_status(d[2].status, TROUPE_RESOURCE_EXHAUSTED, &d[2].why);
    assert_int_equal(t_free_gpus(s), 16); /* nothing started */
    /* without j1 in the queue, j2 starts at once on n3 */
    assert_status(tr_sched_schedule(s, q + 1, 1, d, &err), TROUPE_OK, &err);
    assert_status(d[0].status, TROUPE_OK, &d[0].why);
    assert_int_equal(tr_sched_placement_vnodes(d[0].placement)[0].node_id, 3);
    t_check_invariants(s);
    tr_sched_close(s);
}

/* Oldest first; an infeasible or bad job does not block the ones behind it. */
static void test_fifo_and_bad_jobs(void **state)
{
    tr_sched *s = t_cluster("16");
    tjob a, b, bad, never, small;
    tr_sched_decision d[5];
    tr_err err;

    t_job(&a, "16", "g:2x8:PACK", NULL);
    t_job(&b, "16", "g:16x1:SPREAD", NULL);
    t_job(&bad, "4", "g:0x1:PACK", NULL);
    t_job(&never, "16,16", "g:2x16:PACK", NULL);
    t_job(&small, "1", "g:1x1:PACK", NULL);
    tr_sched_pending q[] = {{1, &a.spec}, {2, &b.spec}, {3, &bad.spec}, {4, &never.spec}, {5, &small.spec}};
    assert_status(tr_sched_schedule(s, q, 5, d, &err), TROUPE_OK, &err);
    assert_status(d[0].status, TROUPE_OK, &d[0].why);
    assert_status(d[1].status, TROUPE_RESOURCE_EXHAUSTED, &d[1].why);
    assert_contains(d[1].why.msg, "waiting for 16 free GPUs on one node");
    assert_status(d[2].status, TROUPE_INVALID_ARGUMENT, &d[2].why);
    assert_status(d[3].status, TROUPE_FAILED_PRECONDITION, &d[3].why);
    assert_contains(d[3].why.msg, "needs 32 GPUs; alive nodes have 16 in total");  /* no node is SUSPECT: it says only alive */
    assert_status(d[4].status, TROUPE_RESOURCE_EXHAUSTED, &d[4].why); /* behind b, whose shadow is n1 */
    tr_sched_release(s, d[0].placement);
    assert_status(tr_sched_schedule(s, q + 1, 4, d, &err), TROUPE_OK, &err);
    assert_status(d[0].status, TROUPE_OK, &d[0].why);
    assert_status(d[3].status, TROUPE_RESOURCE_EXHAUSTED, &d[3].why);
    assert_status(tr_sched_schedule(s, q, 1, d, &err), TROUPE_OK, &err);
    assert_status(d[0].status, TROUPE_RESOURCE_EXHAUSTED, &d[0].why); /* id 1 reused while 2 runs */
    t_check_invariants(s);
    tr_sched_close(s);
}

/* Several jobs start in one pass; a duplicate id is refused. */
static void test_pass_starts_many(void **state)
{
    tr_sched *s = t_cluster("10*4");
    tjob j;
    tr_sched_decision d[12];
    tr_sched_pending q[12];
    tr_err err;

    t_job(&j, "4", "g:2x2:SPREAD", NULL);
    for (size_t i = 0; i < 12; i++) {
        q[i] = (tr_sched_pending){i < 11 ? i + 1 : 1, &j.spec};
    }
    assert_status(tr_sched_schedule(s, q, 12, d, &err), TROUPE_OK, &err);
    for (size_t i = 0; i < 10; i++) {
        assert_status(d[i].status, TROUPE_OK, &d[i].why);
        assert_int_equal(tr_sched_placement_job(d[i].placement), i + 1);
    }
    assert_status(d[10].status, TROUPE_RESOURCE_EXHAUSTED, &d[10].why);
    assert_status(d[11].status, TROUPE_ALREADY_EXISTS, &d[11].why);
    assert_int_equal(t_free_gpus(s), 0);
    t_check_invariants(s);
    tr_sched_close(s);
}

/* ---- randomized soak ---------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static unsigned rnd(unsigned n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned)(rng_state % n);
}

static void random_job(tjob *j)
{
    static const char *const strat[] = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"};
    static const int sizes[] = {1, 2, 4, 8, 16};
    char vn[128] = "", groups[256] = "";
    size_t nv = 1 + rnd(4), off = 0;
    int smallest = 64;

    for (size_t i = 0; i < nv; i++) {
        int v = sizes[rnd(5)];
        smallest = v < smallest ? v : smallest;
        off += (size_t)snprintf(vn + off, sizeof(vn) - off, "%s%d", i ? "," : "", v);
    }
    int gw = 1 << rnd(3);
    gw = gw > smallest ? smallest : gw;
    snprintf(groups, sizeof(groups), "a:%ux%d:%s", 1 + rnd((unsigned)(nv * smallest / gw)), gw,
             strat[rnd(4)]);
    if (rnd(2)) {
        size_t l = strlen(groups);
        snprintf(groups + l, sizeof(groups) - l, ";b:1x1:%s", strat[rnd(4)]);
    }
    t_job(j, vn, groups, rnd(4) == 0 ? "gpu=H200" : NULL);
}

/* Outcomes seen by the soak, so that it cannot pass by never placing. */
static unsigned soak_ok, soak_wait, soak_never;

static void soak_step(tr_sched *s, uint64_t *next_id)
{
    tr_err err;
    unsigned op = rnd(10);
    tjob j[4];

    if (op < 4) {
        tr_sched_placement *p = NULL;
        random_job(&j[0]);
        int rv = tr_sched_place(s, (*next_id)++, &j[0].spec, &p, &err);
        soak_ok += rv == TROUPE_OK;
        soak_wait += rv == TROUPE_RESOURCE_EXHAUSTED;
        soak_never += rv == TROUPE_FAILED_PRECONDITION;
        if (rv == TROUPE_OK) {
            t_check_props(s, &j[0].spec, p);
        } else {
            assert_null(p);
            assert_true(rv == TROUPE_RESOURCE_EXHAUSTED || rv == TROUPE_FAILED_PRECONDITION ||
                        rv == TROUPE_INVALID_ARGUMENT);
        }
    } else if (op < 7) {
        tr_sched_stats st;
        tr_sched_stats_get(s, &st);
        for (unsigned k = st.placements ? rnd((unsigned)st.placements) + 1 : 0; k > 0; k--) {
            uint64_t id = 1 + rnd((unsigned)*next_id);
            tr_sched_release(s, tr_sched_find(s, id));
        }
    } else if (op < 9) {
        tr_sched_decision d[4];
        tr_sched_pending q[4];
        for (size_t i = 0; i < 4; i++) {
            random_job(&j[i]);
            q[i] = (tr_sched_pending){(*next_id)++, &j[i].spec};
        }
        assert_status(tr_sched_schedule(s, q, 4, d, &err), TROUPE_OK, &err);
        for (size_t i = 0; i < 4; i++) {
            assert_true((d[i].status == TROUPE_OK) == (d[i].placement != NULL));
            soak_ok += d[i].status == TROUPE_OK;
            soak_wait += d[i].status == TROUPE_RESOURCE_EXHAUSTED;
            if (d[i].placement != NULL) {
                t_check_props(s, &j[i].spec, d[i].placement);
            }
        }
    } else {
        uint64_t node = 1 + rnd(40);
        tr_sched_node_info info;
        assert_status(tr_sched_node_get(s, node, &info, &err), TROUPE_OK, &err);
        if (info.state != TR_SCHED_DEAD) {
            int st = rnd(20) == 0 ? TR_SCHED_DEAD : (int)rnd(2);
            assert_status(tr_sched_node_set_state(s, node, st, &err), TROUPE_OK, &err);
        }
    }
}

static void test_random_soak(void **state)
{
    tr_sched *s = t_cluster("5*4,5*8@H200,5*16,5*8,5*16@H200,5*4@H200,5*8,5*16");
    uint64_t next_id = 1;
    tr_sched_stats st;

    for (int i = 0; i < 4000; i++) {
        soak_step(s, &next_id);
        t_check_invariants(s);
    }
    for (uint64_t id = 1; id < next_id; id++) {
        tr_sched_release(s, tr_sched_find(s, id));
    }
    print_message("soak: %u placed, %u waited, %u infeasible\n", soak_ok, soak_wait, soak_never);
    assert_true(soak_ok > 500 && soak_wait > 100 && soak_never > 0);
    tr_sched_stats_get(s, &st);
    assert_int_equal(st.placements, 0);
    assert_int_equal(st.free_gpus, st.alive_gpus);
    t_check_invariants(s);
    tr_sched_close(s);
}

/* 1,000 nodes: ids hash and buckets stay right past several growths. */
static void test_many_nodes(void **state)
{
    tr_sched *s = t_cluster("334*4,333*8,333*16");
    tjob j;
    tr_sched_placement *p = NULL;
    tr_err err;
    tr_sched_stats st;

    tr_sched_stats_get(s, &st);
    assert_int_equal(st.alive_nodes, 1000);
    assert_int_equal(st.alive_gpus, 334 * 4 + 333 * 8 + 333 * 16);
    t_job(&j, "64*1", "g:64x1:STRICT_SPREAD", NULL);
    assert_status(tr_sched_place(s, 1, &j.spec, &p, &err), TROUPE_OK, &err);
    t_check_props(s, &j.spec, p);
    assert_int_equal(tr_sched_placement_workers(p)[0].nnodes, 64);
    t_job(&j, "16", "g:1x16:PACK", NULL);
    assert_status(tr_sched_place(s, 2, &j.spec, &p, &err), TROUPE_OK, &err);
    assert_int_equal(tr_sched_placement_vnodes(p)[0].node_id, 668); /* first 16-GPU node */
    /* PACK of 64 one-GPU bundles fills four 16-GPU nodes, not 64 fragments */
    t_job(&j, "64*1", "g:64x1:PACK", NULL);
    assert_status(tr_sched_place(s, 3, &j.spec, &p, &err), TROUPE_OK, &err);
    t_check_props(s, &j.spec, p);
    assert_int_equal(tr_sched_placement_workers(p)[0].nnodes, 4);
    assert_int_equal(tr_sched_placement_workers(p)[0].node_id, 669);
    t_check_invariants(s);
    tr_sched_close(s);
}

/* A job the ALIVE nodes cannot hold waits while SUSPECT nodes could (a head
 * restart loads every node SUSPECT); its shadow fences the alive GPUs it will
 * need. Only when no ALIVE or SUSPECT node could hold it is it infeasible. */
static void test_waits_for_suspect(void **state)
{
    tr_sched *s = t_cluster("8,8?,4!");
    tjob pair, small, huge;
    tr_sched_decision d[3];
    tr_err err;

    t_job(&pair, "8,8", "g:2x8:STRICT_SPREAD", NULL);
    t_job(&small, "2", "g:1x2:PACK", NULL);
    t_job(&huge, "16", "g:1x16:PACK", NULL);
    assert_status(tr_sched_check(s, &pair.spec, &err), TROUPE_OK, &err); /* submit: admitted, waits */
    assert_status(tr_sched_check(s, &huge.spec, &err), TROUPE_FAILED_PRECONDITION, &err);
    tr_sched_pending q[] = {{1, &pair.spec}, {2, &small.spec}, {3, &huge.spec}};
    assert_status(tr_sched_schedule(s, q, 3, d, &err), TROUPE_OK, &err);
    assert_status(d[0].status, TROUPE_RESOURCE_EXHAUSTED, &d[0].why);
    assert_contains(d[0].why.msg, "waiting for nodes that take no new work now: n2 (SUSPECT: waiting for it to "
                                  "report again); the nodes that do cannot hold it alone");
    assert_status(d[1].status, TROUPE_RESOURCE_EXHAUSTED, &d[1].why); /* n1 is fenced for the pair */
    assert_status(d[2].status, TROUPE_FAILED_PRECONDITION, &d[2].why);
    assert_contains(d[2].why.msg, "largest alive or suspect node has 8");
    assert_status(tr_sched_node_set_state(s, 2, TR_SCHED_ALIVE, &err), TROUPE_OK, &err);
    assert_status(tr_sched_schedule(s, q, 2, d, &err), TROUPE_OK, &err);
    assert_status(d[0].status, TROUPE_OK, &d[0].why);
    t_check_props(s, &pair.spec, d[0].placement);
    assert_status(d[1].status, TROUPE_RESOURCE_EXHAUSTED, &d[1].why);
    t_check_invariants(s);
    tr_sched_close(s);
}

/* A job waiting on a drained node names it as drained, with the command that
 * gives it work again, not as a node that has to report again; a fenced node
 * is named as such. (The old reason read "waiting for SUSPECT nodes to report
 * again ... no alive node at all" for a node that was ALIVE and drained.) */
static void test_waits_for_drained(void **state)
{
    (void)state;
    tr_sched *s = t_cluster("8,4");
    tjob big, small;
    tr_sched_decision d[1];
    tr_err err;

    t_job(&big, "8", "g:1x8:PACK", NULL);
    t_job(&small, "2", "g:1x2:PACK", NULL);
    assert_status(tr_sched_node_set_state(s, 1, TR_SCHED_SUSPECT, &err), TROUPE_OK, &err);
    tr_sched_node_set_hold(s, 1, TR_SCHED_HOLD_DRAINING);
    assert_status(tr_sched_node_set_state(s, 2, TR_SCHED_SUSPECT, &err), TROUPE_OK, &err);
    tr_sched_node_set_hold(s, 2, TR_SCHED_HOLD_FENCED);
    tr_sched_pending q[] = {{1, &big.spec}};
    assert_status(tr_sched_schedule(s, q, 1, d, &err), TROUPE_OK, &err);
    assert_status(d[0].status, TROUPE_RESOURCE_EXHAUSTED, &d[0].why);
    assert_contains(d[0].why.msg, "waiting: no node takes new work now: n1 (DRAINING: `troupe undrain n1` gives it "
                                  "work again); n2 (FENCED: still running workers of its earlier self)");
    assert_null(strstr(d[0].why.msg, "alive node"));
    /* n2 takes work again: the 8-GPU job still waits for the drained n1 */
    assert_status(tr_sched_node_set_state(s, 2, TR_SCHED_ALIVE, &err), TROUPE_OK, &err);
    assert_status(tr_sched_schedule(s, q, 1, d, &err), TROUPE_OK, &err);
    assert_contains(d[0].why.msg, "waiting for nodes that take no new work now: n1 (DRAINING: `troupe undrain n1`");
    tr_sched_pending q2[] = {{2, &small.spec}};
    assert_status(tr_sched_schedule(s, q2, 1, d, &err), TROUPE_OK, &err);
    assert_status(d[0].status, TROUPE_OK, &d[0].why);
    t_check_invariants(s);
    tr_sched_close(s);
}

/* CPU-only workers take CPU slots and give them back: a CPU job waits while
 * the slots are held (saying so), a mixed job is placed whole or not at all,
 * and a GPU job is never held up by CPU slots it does not need. */
static void test_cpu_slots(void **state)
{
    tr_sched *s = t_cluster("1,0c2");
    tjob j1, j2, j3;
    tr_sched_decision d[3];
    tr_sched_placement *p = NULL;
    tr_err err;

    place_ok(s, 100, "", "c:2x0:PACK"); /* both slots of n2 */
    assert_int_equal(t_free_cpu_milli(s, 2), 0);
    t_job(&j1, "", "c:1x0:PACK", NULL);
    t_job(&j2, "1", "g:1x1:PACK;c:1x0:PACK", NULL); /* its GPU is free, its CPU slot is not */
    t_job(&j3, "1", "g:1x1:PACK", NULL);
    tr_sched_pending q[] = {{1, &j1.spec}, {2, &j2.spec}, {3, &j3.spec}};
    assert_status(tr_sched_schedule(s, q, 3, d, &err), TROUPE_OK, &err);
    assert_status(d[0].status, TROUPE_RESOURCE_EXHAUSTED, &d[0].why);
    assert_contains(d[0].why.msg, "waiting for free CPU slots: CPU-only group c needs 1 workers x 1 CPU");
    assert_status(d[1].status, TROUPE_RESOURCE_EXHAUSTED, &d[1].why);
    assert_int_equal(t_free_gpus(s), 1); /* the mixed job took nothing: gang */
    /* j3's GPU is the one j2's shadow holds, so FIFO keeps it waiting too */
    assert_status(d[2].status, TROUPE_RESOURCE_EXHAUSTED, &d[2].why);
    t_check_invariants(s);
    /* tr_sched_place says the same for the mixed job alone */
    assert_status(tr_sched_place(s, 2, &j2.spec, &p, &err), TROUPE_RESOURCE_EXHAUSTED, &err);
    assert_contains(err.msg, "waiting for free CPU slots");
    assert_int_equal(t_free_gpus(s), 1);
    /* the CPU job ends: its slots come back and the queue starts in order */
    tr_sched_release(s, tr_sched_find(s, 100));
    assert_int_equal(t_free_cpu_milli(s, 2), 2000);
    assert_status(tr_sched_schedule(s, q, 3, d, &err), TROUPE_OK, &err);
    assert_status(d[0].status, TROUPE_OK, &d[0].why);
    assert_status(d[1].status, TROUPE_OK, &d[1].why);
    assert_status(d[2].status, TROUPE_RESOURCE_EXHAUSTED, &d[2].why); /* j2 has the one GPU */
    t_check_props(s, &j2.spec, d[1].placement);
    assert_int_equal(t_free_cpu_milli(s, 2), 0);
    uint64_t ids[4];
    size_t n;
    assert_status(tr_sched_jobs_on_node(s, 2, ids, 4, &n, &err), TROUPE_OK, &err);
    assert_int_equal(n, 2); /* node death takes both jobs with CPU workers there */
    t_check_invariants(s);
    tr_sched_release(s, d[0].placement);
    tr_sched_release(s, d[1].placement);
    assert_int_equal(t_free_cpu_milli(s, 2), 2000);
    t_check_invariants(s);
    tr_sched_close(s);
}

/* Relocation (an elastic group's CPU-only rank whose node is gone): the
 * worker goes where the scheduler places one such worker (not the dead
 * node), its CPU share moves with it and the books balance; with no room
 * anywhere nothing changes; a GPU worker is not moved. */
static void test_cpu_relocate(void **state)
{
    tr_sched *s = t_cluster("0c2,0c2,4");
    tr_sched_placement *p;
    uint64_t node = 0, dead;
    tr_err err;
    tjob j, g;

    t_job(&j, "", "c:2x0c1:SPREAD", NULL);
    assert_status(tr_sched_place(s, 7, &j.spec, &p, &err), TROUPE_OK, &err);
    dead = tr_sched_placement_workers(p)[1].node_id;
    assert_status(tr_sched_node_set_state(s, dead, TR_SCHED_DEAD, &err), TROUPE_OK, &err);
    assert_status(tr_sched_relocate(s, 7, &j.spec, 1, &node, &err), TROUPE_OK, &err);
    assert_int_not_equal(node, dead);
    assert_int_equal(tr_sched_placement_workers(p)[1].node_id, node);
    assert_int_equal(t_free_cpu_milli(s, node), 0); /* both ranks there now */
    assert_int_equal(t_free_cpu_milli(s, dead), 2000);
    assert_null(tr_sched_find(s, UINT64_MAX)); /* the scratch placement is gone */
    t_check_invariants(s);
    /* no room left on an ALIVE node: an error, nothing moved */
    assert_true(tr_sched_relocate(s, 7, &j.spec, 0, &node, &err) != TROUPE_OK);
    assert_int_equal(node, 0);
    assert_int_equal(t_free_cpu_milli(s, tr_sched_placement_workers(p)[0].node_id), 0);
    t_check_invariants(s);
    tr_sched_release(s, p);
    t_check_invariants(s);

    t_job(&g, "1", "g:1x1:PACK", NULL);
    assert_status(tr_sched_place(s, 8, &g.spec, &p, &err), TROUPE_OK, &err);
    assert_status(tr_sched_relocate(s, 8, &g.spec, 0, &node, &err), TROUPE_UNIMPLEMENTED, &err);
    assert_contains(err.msg, "only a CPU-only worker");
    tr_sched_release(s, p);
    t_check_invariants(s);
    tr_sched_close(s);
}

static const struct CMUnitTest queue_tests[] = {
    cmocka_unit_test(test_cpu_relocate),
    cmocka_unit_test(test_cpu_slots),         cmocka_unit_test(test_waits_for_drained),
    cmocka_unit_test(test_waits_for_suspect), cmocka_unit_test(test_backfill_allowed),
    cmocka_unit_test(test_backfill_refused),  cmocka_unit_test(test_fifo_and_bad_jobs),
    cmocka_unit_test(test_pass_starts_many),  cmocka_unit_test(test_random_soak),
    cmocka_unit_test(test_many_nodes),
};

const struct CMUnitTest *sched_queue_tests(size_t *n)
{
    *n = sizeof(queue_tests) / sizeof(queue_tests[0]);
    return queue_tests;
}
