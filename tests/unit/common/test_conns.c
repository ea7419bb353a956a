/* test_conns.c - unit.common.conns: the RPC server's connection table and
 * its bounds before authentication (common/rpc_conns.c). The server side
 * over real sockets is integration.security.preauth_bounds. */
#include "test_helpers.h"

#include "rpc_conns.h"

static tr_conns_limits lim(size_t max_conns)
{
    return (tr_conns_limits){.max_conns = max_conns,
                             .budget = 64u << 20,
                             .frame_max = 8u << 20,
                             .frame_floor = 64u << 10,
                             .preauth_ms = 10000,
                             .idle_ms = 300000};
}

/* Up to the cap every connection is admitted; at the cap the oldest that
 * never authenticated (and has nothing in flight) makes room. */
static void cap_displaces_oldest_stranger(void **state)
{
    tr_conns t;
    tr_conns_limits l = lim(3);
    uint32_t gone;

    (void)state;
    assert_int_equal(tr_conns_init(&t, &l), 0);
    assert_int_equal(tr_conns_add(&t, 1, 100, &gone, NULL), TR_CONN_ADMITTED);
    assert_int_equal(gone, 0);
    assert_int_equal(tr_conns_add(&t, 2, 200, &gone, NULL), TR_CONN_ADMITTED);
    assert_int_equal(tr_conns_add(&t, 3, 300, &gone, NULL), TR_CONN_ADMITTED);
    assert_int_equal(t.live, 3);
    tr_conns_begin(&t, 1, 1, 400); /* 1 authenticated: never displaced */
    tr_conns_end(&t, 1, 401);
    assert_int_equal(tr_conns_add(&t, 4, 500, &gone, NULL), TR_CONN_ADMITTED);
    assert_int_equal(gone, 2);
    tr_conns_begin(&t, 3, 0, 600); /* 3 has a request in flight: not displaced either */
    assert_int_equal(tr_conns_add(&t, 5, 700, &gone, NULL), TR_CONN_ADMITTED);
    assert_int_equal(gone, 4);
    assert_int_equal(t.live, 3);
    tr_conns_remove(&t, 2); /* already gone: ignored */
    assert_int_equal(t.live, 3);
    tr_conns_free(&t);
}

/* When every connection has authenticated (or is busy) a new one is refused. */
static void cap_refuses_when_all_authenticated(void **state)
{
    tr_conns t;
    tr_conns_limits l = lim(2);
    uint32_t gone;

    (void)state;
    assert_int_equal(tr_conns_init(&t, &l), 0);
    tr_conns_add(&t, 7, 0, &gone, NULL);
    tr_conns_add(&t, 8, 0, &gone, NULL);
    tr_conns_begin(&t, 7, 1, 1);
    tr_conns_begin(&t, 8, 1, 1);
    assert_int_equal(tr_conns_add(&t, 9, 2, &gone, NULL), TR_CONN_REFUSED);
    assert_int_equal(gone, 0);
    assert_int_equal(t.live, 2);
    assert_int_equal(t.unauth, 0);
    tr_conns_remove(&t, 8);
    assert_int_equal(tr_conns_add(&t, 9, 3, &gone, NULL), TR_CONN_ADMITTED);
    tr_conns_free(&t);
}

/* The per-frame limit is budget / strangers, a power of two between the
 * floor and the maximum, and what strangers may hold together stays within
 * the budget whatever the order they came in. Charges above the floor take
 * at most half the budget: the first four strangers were charged 8 MiB each
 * (they may have started 8 MiB frames before the limit dropped), the fifth
 * gets the floor and the limit drops to it; 512 more fit at the floor before
 * the first stranger is displaced; the count of strangers never passes
 * budget / floor. Authenticated connections do not lower the limit, and it
 * is raised again by tr_conns_relax, within half the budget. */
static void frame_limit_shares_budget(void **state)
{
    tr_conns t;
    tr_conns_limits l = lim(16384);
    uint32_t gone, id;
    int why;

    (void)state;
    assert_int_equal(tr_conns_init(&t, &l), 0);
    assert_int_equal(tr_conns_frame_limit(&t), 8u << 20);
    for (id = 1; id <= 4; id++) {
        assert_int_equal(tr_conns_add(&t, id, id, &gone, &why), TR_CONN_ADMITTED);
        assert_int_equal(gone, 0);
    }
    assert_int_equal(tr_conns_frame_limit(&t), 8u << 20); /* 4 x 8 MiB = half the budget */
    assert_int_equal(t.charged, 32u << 20);
    for (id = 5; id <= 4 + 512; id++) {
        assert_int_equal(tr_conns_add(&t, id, id, &gone, &why), TR_CONN_ADMITTED);
        assert_int_equal(gone, 0);
        assert_int_equal(tr_conns_frame_limit(&t), 64u << 10); /* the floor, from the fifth on */
    }
    assert_int_equal(t.charged, 64u << 20);
    assert_int_equal(tr_conns_add(&t, id, id, &gone, &why), TR_CONN_ADMITTED);
    assert_int_equal(gone, 1); /* the oldest 8 MiB holder makes room */
    assert_int_equal(why, TR_CONN_WHY_BUDGET);
    for (id++; id <= 12000; id++) {
        assert_int_equal(tr_conns_add(&t, id, id, &gone, NULL), TR_CONN_ADMITTED);
        assert_true(t.charged <= l.budget);
        assert_true(t.unauth <= l.budget / l.frame_floor);
    }
    assert_int_equal(tr_conns_frame_limit(&t), 64u << 10); /* the floor */
    assert_int_equal(t.unauth, 1024);                      /* 64 MiB / 64 KiB */
    assert_int_equal(t.charged, 64u << 20);
    for (id = 12000 - 1023; id <= 12000 - 5; id++) {
        tr_conns_begin(&t, id, 1, id); /* authenticated now */
    }
    assert_int_equal(t.unauth, 5);
    assert_int_equal(t.charged, 5u * (64u << 10));
    assert_int_equal(tr_conns_frame_limit(&t), 64u << 10); /* raised only by relax */
    tr_conns_relax(&t);
    assert_int_equal(tr_conns_frame_limit(&t), 4u << 20); /* 5 x 8 MiB would pass half the budget */
    assert_int_equal(t.charged, 5u * (4u << 20));
    tr_conns_free(&t);
}

/* A burst of legitimate clients on a quiet head: 516 connections open
 * before any first call arrives (ranks of a rendezvous; 4 at the largest
 * frame and 512 at the floor fill the budget), then each makes its call.
 * None is displaced and the budget holds; once they have all authenticated
 * the limit is the largest frame again. The old charges (the largest frame
 * until the budget was full) displaced the first connection at the ninth.
 * Re-plant: let above_floor_room return budget - charged. */
static void burst_admitted_without_displacement(void **state)
{
    tr_conns t;
    tr_conns_limits l = lim(16384);
    uint32_t gone, id;
    int why;

    (void)state;
    assert_int_equal(tr_conns_init(&t, &l), 0);
    for (id = 1; id <= 516; id++) {
        assert_int_equal(tr_conns_add(&t, id, id, &gone, &why), TR_CONN_ADMITTED);
        if (gone != 0) {
            fail_msg("connection %u displaced %u (why %d) with %zu strangers charged %zu bytes", id, gone,
                     why, t.unauth, t.charged);
        }
        assert_true(t.charged <= l.budget);
    }
    assert_int_equal(t.charged, l.budget);
    for (id = 1; id <= 516; id++) {
        tr_conns_begin(&t, id, 1, 2000);
        tr_conns_end(&t, id, 2001);
    }
    assert_int_equal(t.unauth, 0);
    assert_int_equal(t.charged, 0);
    assert_int_equal(tr_conns_frame_limit(&t), 8u << 20);
    tr_conns_free(&t);
}

/* The server counts a request from its arrival (tr_conns_begin, not yet
 * authenticated) and marks the connection authenticated once the credential
 * is checked (tr_conns_authed): in between the connection is in flight, so
 * a burst of new strangers past the budget displaces an idle stranger, not
 * the one whose first call waits for a handler; once marked it holds no
 * charge, and with no stranger left the limit is the largest frame again.
 * Its reply ends the request once (tr_conns_authed adds none). */
static void arrival_then_authed(void **state)
{
    tr_conns t;
    tr_conns_limits l = lim(16384);
    uint32_t gone = 0, id;
    size_t strangers;

    (void)state;
    assert_int_equal(tr_conns_init(&t, &l), 0);
    for (id = 1; id <= 516 && gone == 0; id++) {
        assert_int_equal(tr_conns_add(&t, id, id, &gone, NULL), TR_CONN_ADMITTED);
    }
    assert_int_equal(gone, 0);
    tr_conns_begin(&t, 1, 0, 600); /* 1's first frame arrived; its credential is not checked yet */
    for (id = 1000; id < 3000 && gone == 0; id++) {
        assert_int_equal(tr_conns_add(&t, id, id, &gone, NULL), TR_CONN_ADMITTED);
    }
    assert_int_equal(gone, 2); /* the budget filled up: the oldest idle stranger went, not 1 */
    strangers = t.unauth;
    tr_conns_authed(&t, 1);
    tr_conns_authed(&t, 1); /* a second mark changes nothing */
    assert_int_equal(t.unauth, strangers - 1);
    tr_conns_end(&t, 1, 700);
    gone = 0;
    for (id = 3000; id < 6000 && gone == 0; id++) {
        assert_int_equal(tr_conns_add(&t, id, id, &gone, NULL), TR_CONN_ADMITTED);
    }
    assert_int_equal(gone, 3); /* 1 authenticated: never displaced; the next oldest stranger went */
    for (id = 1; id <= 6000; id++) {
        tr_conns_remove(&t, id);
    }
    assert_int_equal(t.live, 0);
    assert_int_equal(t.charged, 0);
    assert_int_equal(tr_conns_frame_limit(&t), 8u << 20);
    tr_conns_free(&t);
}

/* A stranger whose frame arrived whole is charged the limit now, not what
 * it was charged when the limit was higher; closed strangers' charges are
 * reported once as released (the heap is trimmed after them). */
static void charge_follows_frames(void **state)
{
    tr_conns t;
    tr_conns_limits l = lim(100);
    uint32_t gone;

    (void)state;
    assert_int_equal(tr_conns_init(&t, &l), 0);
    for (uint32_t id = 1; id <= 9; id++) { /* 4 x 8 MiB, 5 x the floor */
        tr_conns_add(&t, id, id, &gone, NULL);
        assert_int_equal(gone, 0);
    }
    assert_int_equal(tr_conns_frame_limit(&t), 64u << 10);
    tr_conns_begin(&t, 2, 0, 1); /* a frame without credential: 8 MiB -> 64 KiB */
    tr_conns_end(&t, 2, 2);
    assert_int_equal(t.charged, 3u * (8u << 20) + 6u * (64u << 10));
    assert_int_equal(tr_conns_released(&t), 0);
    tr_conns_remove(&t, 1);
    assert_int_equal(tr_conns_released(&t), 8u << 20);
    tr_conns_remove(&t, 2);
    assert_int_equal(tr_conns_released(&t), 64u << 10);
    assert_int_equal(tr_conns_released(&t), 0);
    tr_conns_free(&t);
}

/* When strangers with calls in flight hold the whole budget a new
 * connection is refused, not admitted past it. */
static void budget_refuses_when_strangers_busy(void **state)
{
    tr_conns t;
    tr_conns_limits l = lim(100);
    uint32_t gone;
    int why;

    (void)state;
    l.budget = 128u << 10;
    l.frame_max = 64u << 10;
    assert_int_equal(tr_conns_init(&t, &l), 0);
    tr_conns_add(&t, 1, 0, &gone, NULL);
    tr_conns_add(&t, 2, 0, &gone, NULL);
    tr_conns_begin(&t, 1, 0, 1);
    tr_conns_begin(&t, 2, 0, 1);
    assert_int_equal(tr_conns_add(&t, 3, 2, &gone, &why), TR_CONN_REFUSED);
    assert_int_equal(why, TR_CONN_WHY_BUDGET_BUSY);
    assert_int_equal(gone, 0);
    tr_conns_end(&t, 1, 3);
    assert_int_equal(tr_conns_add(&t, 3, 4, &gone, &why), TR_CONN_ADMITTED);
    assert_int_equal(gone, 1);
    tr_conns_free(&t);
}

/* With no credential configured (displace_idle) a call proves nothing: at
 * the cap the connection idle longest makes room, whether it made a call or
 * not (a client that has just connected goes last); one with a call in
 * flight never does. Without displace_idle such a table refuses. */
static void no_auth_displaces_idle_longest(void **state)
{
    tr_conns t;
    tr_conns_limits l = lim(3);
    uint32_t gone;
    int why;

    (void)state;
    l.displace_idle = 1;
    assert_int_equal(tr_conns_init(&t, &l), 0);
    for (uint32_t id = 1; id <= 3; id++) {
        tr_conns_add(&t, id, 0, &gone, NULL);
        tr_conns_begin(&t, id, 1, 10);
    }
    tr_conns_end(&t, 2, 20); /* 2 idle since 20 */
    tr_conns_end(&t, 3, 30); /* 3 idle since 30; 1 busy */
    assert_int_equal(tr_conns_add(&t, 4, 40, &gone, &why), TR_CONN_ADMITTED);
    assert_int_equal(gone, 2);
    assert_int_equal(why, TR_CONN_WHY_CAP_IDLE);
    tr_conns_begin(&t, 4, 1, 50);
    assert_int_equal(tr_conns_add(&t, 5, 60, &gone, &why), TR_CONN_ADMITTED);
    assert_int_equal(gone, 3);
    assert_int_equal(tr_conns_add(&t, 6, 70, &gone, &why), TR_CONN_ADMITTED);
    assert_int_equal(gone, 5); /* 5 never called, but connected before 6 and is idle since */
    tr_conns_begin(&t, 6, 1, 80);
    assert_int_equal(tr_conns_add(&t, 7, 90, &gone, &why), TR_CONN_REFUSED); /* all busy */
    assert_int_equal(why, TR_CONN_WHY_CAP_BUSY);
    tr_conns_free(&t);
}

/* Strangers go after preauth_ms, authenticated connections after idle_ms
 * with nothing in flight; a request in flight keeps either. */
static void expire_preauth_and_idle(void **state)
{
    tr_conns t;
    tr_conns_limits l = lim(100);
    uint32_t gone, out[16];
    size_t pre, n;

    (void)state;
    assert_int_equal(tr_conns_init(&t, &l), 0);
    tr_conns_add(&t, 1, 0, &gone, NULL);     /* a stranger */
    tr_conns_add(&t, 2, 0, &gone, NULL);     /* authenticates, then idles */
    tr_conns_add(&t, 3, 0, &gone, NULL);     /* authenticated, long call in flight */
    tr_conns_add(&t, 4, 9000, &gone, NULL); /* a younger stranger */
    tr_conns_begin(&t, 2, 1, 10);
    tr_conns_end(&t, 2, 20);
    tr_conns_begin(&t, 3, 1, 10);
    n = tr_conns_expire(&t, 9999, out, 16, &pre);
    assert_int_equal(n, 0);
    n = tr_conns_expire(&t, 10000, out, 16, &pre);
    assert_int_equal(n, 1);
    assert_int_equal(out[0], 1);
    assert_int_equal(pre, 1);
    n = tr_conns_expire(&t, 300020, out, 16, &pre);
    assert_int_equal(n, 2); /* 2 idle, 4 past its preauth; 3 is busy */
    assert_int_equal(pre, 1);
    assert_int_equal(t.live, 1);
    tr_conns_end(&t, 3, 300020);
    assert_int_equal(tr_conns_expire(&t, 600019, out, 16, &pre), 0);
    assert_int_equal(tr_conns_expire(&t, 600020, out, 16, &pre), 1);
    assert_int_equal(t.live, 0);
    tr_conns_free(&t);
}

/* Many adds and removes in a crowded table: every live id stays findable
 * (backward-shift deletion keeps probe runs whole). */
static void table_churn(void **state)
{
    tr_conns t;
    tr_conns_limits l = lim(512);
    uint32_t gone, out[1024];
    size_t pre;

    (void)state;
    l.budget = (size_t)1 << 40; /* no budget displacement: this is about the table */
    assert_int_equal(tr_conns_init(&t, &l), 0);
    for (uint32_t round = 0; round < 20; round++) {
        for (uint32_t i = 1; i <= 512; i++) {
            assert_int_equal(tr_conns_add(&t, round * 1000 + i, round, &gone, NULL), TR_CONN_ADMITTED);
            assert_int_equal(gone, 0);
        }
        for (uint32_t i = 1; i <= 512; i += 2) {
            tr_conns_remove(&t, round * 1000 + i);
        }
        assert_int_equal(t.live, 256);
        for (uint32_t i = 2; i <= 512; i += 2) {
            tr_conns_begin(&t, round * 1000 + i, 1, round); /* found: marks authenticated */
        }
        assert_int_equal(t.unauth, 0);
        for (uint32_t i = 2; i <= 512; i += 2) {
            tr_conns_end(&t, round * 1000 + i, round);
        }
        /* idle_ms later all of them go, and the table is empty again */
        assert_int_equal(tr_conns_expire(&t, round + 300000, out, 1024, &pre), 256);
        assert_int_equal(t.live, 0);
    }
    tr_conns_free(&t);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cap_displaces_oldest_stranger),
        cmocka_unit_test(cap_refuses_when_all_authenticated),
        cmocka_unit_test(frame_limit_shares_budget),
        cmocka_unit_test(burst_admitted_without_displacement),
        cmocka_unit_test(arrival_then_authed),
        cmocka_unit_test(charge_follows_frames),
        cmocka_unit_test(budget_refuses_when_strangers_busy),
        cmocka_unit_test(no_auth_displaces_idle_longest),
        cmocka_unit_test(expire_preauth_and_idle),
        cmocka_unit_test(table_churn),
    };
    return TR_TEST_MAIN("unit.common.conns", tests, argc, argv);
}
