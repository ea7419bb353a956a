/* test_liveness.c - unit.server.liveness: the node state machine
 * (server/liveness.c): ALIVE -> SUSPECT -> DEAD, SUSPECT -> ALIVE on a
 * heartbeat, DEAD final; the lease; the period told growing with the number
 * of agents while the DEAD timeout and the lease stay. */
#include "test_helpers.h"

#include "liveness.h"
#include "troupe/v1/troupe.pb-c.h"

enum { ALIVE = TROUPE__V1__NODE_STATE__NODE_ALIVE,
       SUSPECT = TROUPE__V1__NODE_STATE__NODE_SUSPECT,
       DEAD = TROUPE__V1__NODE_STATE__NODE_DEAD,
       LEFT = TROUPE__V1__NODE_STATE__NODE_LEFT };

static const char *name(int s)
{
    return s == ALIVE ? "ALIVE" : s == SUSPECT ? "SUSPECT" : s == DEAD ? "DEAD" : "?";
}

#define ASSERT_NEXT(cfg, from, silent, want)                                                       \
    do {                                                                                           \
        int got_ = tr_liveness_next((cfg), (from), (silent), (cfg)->heartbeat_ms);                 \
        if (got_ != (want)) {                                                                      \
            fail_msg("%s after %lld ms silent: expected %s, got %s", name(from), (long long)(silent), \
                     name(want), name(got_));                                                      \
        }                                                                                          \
    } while (0)

/* heartbeat 1000 ms, SUSPECT after 3 missed, DEAD after 10 (the head's defaults). */
static const tr_liveness_cfg cfg = {.heartbeat_ms = 1000, .suspect_after = 3, .dead_after = 10};

static void thresholds(void **state)
{
    ASSERT_NEXT(&cfg, ALIVE, 0, ALIVE);
    ASSERT_NEXT(&cfg, ALIVE, 2999, ALIVE);
    ASSERT_NEXT(&cfg, ALIVE, 3000, SUSPECT); /* inclusive */
    ASSERT_NEXT(&cfg, ALIVE, 9999, SUSPECT);
    ASSERT_NEXT(&cfg, ALIVE, 10000, DEAD); /* inclusive */
    ASSERT_NEXT(&cfg, ALIVE, INT64_MAX / 2, DEAD);
    ASSERT_NEXT(&cfg, SUSPECT, 3000, SUSPECT);
    ASSERT_NEXT(&cfg, SUSPECT, 10000, DEAD);
    /* A clock that steps back reads as "just heard from". */
    ASSERT_NEXT(&cfg, ALIVE, -500, ALIVE);
}

static void heartbeat_revives(void **state)
{
    /* A heartbeat resets silence to 0: SUSPECT goes back to ALIVE. */
    ASSERT_NEXT(&cfg, SUSPECT, 0, ALIVE);
    ASSERT_NEXT(&cfg, SUSPECT, 2999, ALIVE);
}

static void dead_is_final(void **state)
{
    ASSERT_NEXT(&cfg, DEAD, 0, DEAD);
    ASSERT_NEXT(&cfg, DEAD, -1, DEAD);
    ASSERT_NEXT(&cfg, DEAD, 1, DEAD);
    ASSERT_NEXT(&cfg, DEAD, 3000, DEAD);
}

static void left_is_final(void **state)
{
    ASSERT_NEXT(&cfg, LEFT, 0, LEFT);
    ASSERT_NEXT(&cfg, LEFT, 100000, LEFT);
}

/* The lease ends before the DEAD verdict by a quarter of the DEAD timeout, at
 * least two heartbeats and TR_LEASE_MARGIN_MS; an explicit one is kept. */
static void lease(void **state)
{
    tr_liveness_cfg c = {.heartbeat_ms = 500, .suspect_after = 2, .dead_after = 8};
    (void)state;
    assert_int_equal(tr_liveness_lease_ms(&c), 3000); /* the defaults: DEAD at 4 s */
    c = (tr_liveness_cfg){.heartbeat_ms = 100, .suspect_after = 3, .dead_after = 10};
    assert_int_equal(tr_liveness_lease_ms(&c), 1000 - TR_LEASE_MARGIN_MS);
    c = (tr_liveness_cfg){.heartbeat_ms = 1000, .suspect_after = 1, .dead_after = 2};
    assert_int_equal(tr_liveness_lease_ms(&c), 1000); /* never below one period */
    c = (tr_liveness_cfg){.heartbeat_ms = 1000, .suspect_after = 3, .dead_after = 40};
    assert_int_equal(tr_liveness_lease_ms(&c), 30000);
    c.lease_ms = 5000;
    assert_int_equal(tr_liveness_lease_ms(&c), 5000);
}

/* The head's defaults: 500 ms, SUSPECT after 2, DEAD after 8 (4 s), at most
 * 10,000 heartbeats a second. */
static const tr_liveness_cfg head_defaults = {
    .heartbeat_ms = 500, .suspect_after = 2, .dead_after = 8, .max_beats_per_s = 10000};

/* Up to 5,000 agents beat every 500 ms; beyond, the period grows in steps of
 * 125 ms so that all of them stay within 10,000 a second, up to 1 s (a
 * quarter of the DEAD timeout, a third of the 3 s lease). */
static void period_grows_with_nodes(void **state)
{
    static const struct {
        int64_t nodes, want;
    } rows[] = {{0, 500}, {1, 500}, {5000, 500}, {5001, 625}, {6250, 625}, {6251, 750},
                {7500, 750}, {9000, 1000}, {10000, 1000}, {20000, 1000}, {1000000, 1000}};
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int64_t got = tr_liveness_period_ms(&head_defaults, rows[i].nodes);
        if (got != rows[i].want) {
            fail_msg("%lld nodes: period %lld ms, expected %lld", (long long)rows[i].nodes, (long long)got,
                     (long long)rows[i].want);
        }
        /* Whatever the period, the rate asked for stays within the bound
         * until the cap is reached. */
        if (got < 1000 && rows[i].nodes * 1000 / got > head_defaults.max_beats_per_s) {
            fail_msg("%lld nodes at %lld ms exceed 10,000 heartbeats/s", (long long)rows[i].nodes, (long long)got);
        }
    }
    /* The DEAD timeout and the lease do not move with it. */
    assert_int_equal(tr_liveness_dead_ms(&head_defaults), 4000);
    assert_int_equal(tr_liveness_lease_ms(&head_defaults), 3000);
}

/* No bound, or a bound the cap leaves no room for: heartbeat_ms as given. */
static void period_caps(void **state)
{
    tr_liveness_cfg c = head_defaults;
    (void)state;
    c.max_beats_per_s = 0;
    assert_int_equal(tr_liveness_period_ms(&c, 1000000), 500);
    c = head_defaults;
    c.lease_ms = 1200; /* three heartbeats in the lease: at most 400 ms, below 500 */
    assert_int_equal(tr_liveness_period_ms(&c, 1000000), 500);
    c = head_defaults;
    c.suspect_after = 7; /* one period between SUSPECT and DEAD: 4000 / 8 */
    assert_int_equal(tr_liveness_period_ms(&c, 1000000), 500);
    c = (tr_liveness_cfg){.heartbeat_ms = 1000, .suspect_after = 3, .dead_after = 40, .max_beats_per_s = 50};
    assert_int_equal(tr_liveness_period_ms(&c, 100), 2000);      /* 100 agents at 50/s */
    assert_int_equal(tr_liveness_period_ms(&c, 1000), 10000);    /* min(40 s / 4, 30 s / 3, 40 s / 4) */
    c = (tr_liveness_cfg){.heartbeat_ms = 2, .suspect_after = 2, .dead_after = 1000, .lease_ms = 1500,
                          .max_beats_per_s = 1000};
    assert_int_equal(tr_liveness_period_ms(&c, 5), 5); /* a step of at least 1 ms */
}

/* Suspicion counts in the period the node was told (never shorter than
 * heartbeat_ms); DEAD comes after the same 4 s whatever the period. */
static void suspicion_in_told_period(void **state)
{
    (void)state;
    assert_int_equal(tr_liveness_next(&head_defaults, ALIVE, 1999, 1000), ALIVE);
    assert_int_equal(tr_liveness_next(&head_defaults, ALIVE, 2000, 1000), SUSPECT);
    assert_int_equal(tr_liveness_next(&head_defaults, ALIVE, 3999, 1000), SUSPECT);
    assert_int_equal(tr_liveness_next(&head_defaults, ALIVE, 4000, 1000), DEAD);
    assert_int_equal(tr_liveness_next(&head_defaults, ALIVE, 999, 500), ALIVE);
    assert_int_equal(tr_liveness_next(&head_defaults, ALIVE, 1000, 500), SUSPECT);
    assert_int_equal(tr_liveness_next(&head_defaults, ALIVE, 1000, 200), SUSPECT); /* never below 500 */
    assert_int_equal(tr_liveness_next(&head_defaults, ALIVE, 4000, 500), DEAD);
}

/* 10,000 agents: told 1 s, a node beating every second (250 ms into each)
 * is never suspected; cut off at 20 s, it is DEAD 4 s after its last
 * heartbeat, as at 500 ms. */
static void timeline_at_10k(void **state)
{
    int64_t period = tr_liveness_period_ms(&head_defaults, 10000), last_hb = 0, dead_at = -1;
    int s = ALIVE;
    (void)state;
    assert_int_equal(period, 1000);
    for (int64_t t = 0; t <= 30000; t += 125) {
        if (t < 20000 && t % 1000 == 250) {
            last_hb = t;
        }
        int next = tr_liveness_next(&head_defaults, s, t - last_hb, period);
        if (t < 20000 && next != ALIVE) {
            fail_msg("at %lld ms (last heartbeat %lld): %s", (long long)t, (long long)last_hb, name(next));
        }
        if (next == DEAD && s != DEAD) {
            dead_at = t;
        }
        s = next;
    }
    assert_int_equal(dead_at, 19250 + 4000);
}

/* A node heartbeats every second for 5 s, goes quiet for 4 s (SUSPECT), comes
 * back, then goes quiet for good: SUSPECT at +3 s, DEAD at +10 s, and stays
 * DEAD even when its heartbeats resume. Checked every 250 ms, as the head's
 * reaper does. */
static void timeline(void **state)
{
    int s = ALIVE;
    int64_t last_hb = 0;
    int64_t suspect_at = -1, dead_at = -1, revived_at = -1;

    for (int64_t t = 0; t <= 30000; t += 250) {
        int beating = t <= 5000 || (t >= 9000 && t <= 12000) || t >= 25000;
        if (beating && t % 1000 == 0) {
            last_hb = t;
        }
        int next = tr_liveness_next(&cfg, s, t - last_hb, cfg.heartbeat_ms);
        if (next == SUSPECT && s == ALIVE && suspect_at < 0) {
            suspect_at = t;
        }
        if (next == ALIVE && s == SUSPECT && revived_at < 0) {
            revived_at = t;
        }
        if (next == DEAD && s != DEAD) {
            dead_at = t;
        }
        if (s == DEAD) {
            assert_int_equal(next, DEAD);
        }
        s = next;
    }
    assert_int_equal(suspect_at, 8000);  /* last heartbeat 5000 + 3 * 1000 */
    assert_int_equal(revived_at, 9000);  /* first heartbeat back */
    assert_int_equal(dead_at, 22000);    /* last heartbeat 12000 + 10 * 1000 */
    assert_int_equal(s, DEAD);           /* heartbeats from 25000 on change nothing */
}

/* The returned numbers are troupe.v1 NodeState values, as the header says. */
static void states_are_proto_numbers(void **state)
{
    assert_int_equal(ALIVE, 1);
    assert_int_equal(SUSPECT, 2);
    assert_int_equal(DEAD, 3);
    assert_int_equal(tr_liveness_next(&cfg, ALIVE, 0, 1000), 1);
    assert_int_equal(tr_liveness_next(&cfg, ALIVE, 3000, 1000), 2);
    assert_int_equal(tr_liveness_next(&cfg, ALIVE, 10000, 1000), 3);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(thresholds), cmocka_unit_test(heartbeat_revives), cmocka_unit_test(dead_is_final),
        cmocka_unit_test(left_is_final), cmocka_unit_test(lease), cmocka_unit_test(timeline),
        cmocka_unit_test(states_are_proto_numbers), cmocka_unit_test(period_grows_with_nodes),
        cmocka_unit_test(period_caps), cmocka_unit_test(suspicion_in_told_period), cmocka_unit_test(timeline_at_10k),
    };
    return TR_TEST_MAIN("unit.server.liveness", tests, argc, argv);
}
