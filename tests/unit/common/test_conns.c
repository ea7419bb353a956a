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
    assert_int_equal(tr_conns_add(&t, 1, 100, &gone), TR_CONN_ADMITTED);
    assert_int_equal(gone, 0);
    assert_int_equal(tr_conns_add(&t, 2, 200, &gone), TR_CONN_ADMITTED);
    assert_int_equal(tr_conns_add(&t, 3, 300, &gone), TR_CONN_ADMITTED);
    assert_int_equal(t.live, 3);
    tr_conns_begin(&t, 1, 1, 400); /* 1 authenticated: never displaced */
    tr_conns_end(&t, 1, 401);
    assert_int_equal(tr_conns_add(&t, 4, 500, &gone), TR_CONN_ADMITTED);
    assert_int_equal(gone, 2);
    tr_conns_begin(&t, 3, 0, 600); /* 3 has a request in flight: not displaced either */
    assert_int_equal(tr_conns_add(&t, 5, 700, &gone), TR_CONN_ADMITTED);
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
    tr_conns_add(&t, 7, 0, &gone);
    tr_conns_add(&t, 8, 0, &gone);
    tr_conns_begin(&t, 7, 1, 1);
    tr_conns_begin(&t, 8, 1, 1);
    assert_int_equal(tr_conns_add(&t, 9, 2, &gone), TR_CONN_REFUSED);
    assert_int_equal(gone, 0);
    assert_int_equal(t.live, 2);
    assert_int_equal(t.unauth, 0);
    tr_conns_remove(&t, 8);
    assert_int_equal(tr_conns_add(&t, 9, 3, &gone), TR_CONN_ADMITTED);
    tr_conns_free(&t);
}

/* The per-frame limit is budget / strangers, a power of two between the
 * floor and the maximum; authenticated connections do not lower it. */
static void frame_limit_shares_budget(void **state)
{
    tr_conns t;
    tr_conns_limits l = lim(1000);
    uint32_t gone, id;

    (void)state;
    assert_int_equal(tr_conns_init(&t, &l), 0);
    assert_int_equal(tr_conns_frame_limit(&t), 8u << 20);
    for (id = 1; id <= 8; id++) {
        tr_conns_add(&t, id, 0, &gone);
    }
    assert_int_equal(tr_conns_frame_limit(&t), 8u << 20); /* 8 x 8 MiB = the budget */
    tr_conns_add(&t, 9, 0, &gone);
    assert_int_equal(tr_conns_frame_limit(&t), 4u << 20); /* 64 MiB / 9 = 7.1 MiB -> 4 MiB */
    for (id = 10; id <= 400; id++) {
        tr_conns_add(&t, id, 0, &gone);
    }
    assert_int_equal(tr_conns_frame_limit(&t), 128u << 10); /* 64 MiB / 400 = 164 KiB -> 128 KiB */
    for (id = 401; id <= 1000; id++) {
        tr_conns_add(&t, id, 0, &gone);
    }
    assert_int_equal(tr_conns_frame_limit(&t), 64u << 10); /* the floor */
    for (id = 1; id <= 995; id++) {
        tr_conns_begin(&t, id, 1, 1); /* authenticated now */
    }
    assert_int_equal(t.unauth, 5);
    assert_int_equal(tr_conns_frame_limit(&t), 8u << 20);
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
    tr_conns_add(&t, 1, 0, &gone);     /* a stranger */
    tr_conns_add(&t, 2, 0, &gone);     /* authenticates, then idles */
    tr_conns_add(&t, 3, 0, &gone);     /* authenticated, long call in flight */
    tr_conns_add(&t, 4, 9000, &gone); /* a younger stranger */
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
    assert_int_equal(tr_conns_init(&t, &l), 0);
    for (uint32_t round = 0; round < 20; round++) {
        for (uint32_t i = 1; i <= 512; i++) {
            assert_int_equal(tr_conns_add(&t, round * 1000 + i, round, &gone), TR_CONN_ADMITTED);
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
        cmocka_unit_test(expire_preauth_and_idle),
        cmocka_unit_test(table_churn),
    };
    return TR_TEST_MAIN("unit.common.conns", tests, argc, argv);
}
