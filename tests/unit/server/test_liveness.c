/* test_liveness.c - unit.server.liveness: the node state machine
 * (server/liveness.c): ALIVE -> SUSPECT -> DEAD, SUSPECT -> ALIVE on a
 * heartbeat, DEAD final. */
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
        int got_ = tr_liveness_next((cfg), (from), (silent));                                      \
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
        int next = tr_liveness_next(&cfg, s, t - last_hb);
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
    assert_int_equal(tr_liveness_next(&cfg, ALIVE, 0), 1);
    assert_int_equal(tr_liveness_next(&cfg, ALIVE, 3000), 2);
    assert_int_equal(tr_liveness_next(&cfg, ALIVE, 10000), 3);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(thresholds), cmocka_unit_test(heartbeat_revives), cmocka_unit_test(dead_is_final),
        cmocka_unit_test(left_is_final), cmocka_unit_test(lease), cmocka_unit_test(timeline),
        cmocka_unit_test(states_are_proto_numbers),
    };
    return TR_TEST_MAIN("unit.server.liveness", tests, argc, argv);
}
