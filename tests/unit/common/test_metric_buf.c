/* test_metric_buf.c - unit.common.metric_buf: the worker's bounded metrics
 * buffer and its drop accounting (common/metric_buf.c). The invariant the
 * head relies on: every seq given out is either sent in a report or counted
 * as dropped here, and a report's `reported` never settles a seq still
 * waiting in the buffer. */
#include "test_helpers.h"

#include <math.h>

#include "metric_buf.h"
#include "troupe/status.h"

static void add_take_ack(void **state)
{
    tr_mbuf *b = tr_mbuf_new(8);
    tr_mpoint out[8];
    tr_mbuf_stats st;
    uint64_t rep = 0;

    assert_non_null(b);
    assert_false(tr_mbuf_pending(b));
    for (int i = 0; i < 5; i++) {
        assert_int_equal(tr_mbuf_add(b, (uint64_t)i + 1, i % 2 ? "loss" : "tok_s", i * 1.5, 1000 + i), TROUPE_OK);
    }
    assert_true(tr_mbuf_pending(b));
    assert_int_equal(tr_mbuf_take(b, 3, out, &rep), 3);
    assert_int_equal(rep, 3); /* only up to the last point taken: 4 and 5 still wait */
    assert_int_equal(out[0].seq, 1);
    assert_string_equal(out[1].name, "loss");
    assert_true(out[2].value == 3.0 && out[2].step == 3 && out[2].ts_ms == 1002);
    assert_ptr_equal(out[0].name, out[2].name); /* interned */
    tr_mbuf_ack(b, 3);
    assert_int_equal(tr_mbuf_take(b, 8, out, &rep), 2);
    assert_int_equal(out[0].seq, 4);
    assert_int_equal(rep, 5);
    tr_mbuf_ack(b, 5);
    tr_mbuf_stats_get(b, &st);
    assert_true(st.reported == 5 && st.acked == 5 && st.dropped == 0 && st.buffered == 0);
    assert_false(tr_mbuf_pending(b));
    tr_mbuf_free(b);
}

/* A full buffer drops the new point, counts it, and the seq is used: the
 * head sees the gap. A report that empties the buffer settles the drops
 * after its last point too. */
static void full_drops_counted(void **state)
{
    tr_mbuf *b = tr_mbuf_new(3);
    tr_mpoint out[3];
    tr_mbuf_stats st;
    uint64_t rep = 0;

    for (int i = 0; i < 3; i++) {
        assert_int_equal(tr_mbuf_add(b, 1, "x", i, 0), TROUPE_OK);
    }
    assert_int_equal(tr_mbuf_add(b, 1, "x", 3, 0), TROUPE_RESOURCE_EXHAUSTED); /* seq 4 */
    assert_int_equal(tr_mbuf_add(b, 1, "x", 4, 0), TROUPE_RESOURCE_EXHAUSTED); /* seq 5 */
    tr_mbuf_stats_get(b, &st);
    assert_true(st.reported == 5 && st.dropped == 2 && st.buffered == 3);
    assert_int_equal(tr_mbuf_take(b, 2, out, &rep), 2);
    assert_int_equal(rep, 2); /* seq 3 waits: 4 and 5 are not settled yet */
    tr_mbuf_ack(b, 2);
    assert_int_equal(tr_mbuf_add(b, 1, "x", 5, 0), TROUPE_OK); /* seq 6: room again */
    assert_int_equal(tr_mbuf_take(b, 3, out, &rep), 2);
    assert_true(out[0].seq == 3 && out[1].seq == 6);
    assert_int_equal(rep, 6); /* the head infers 4 and 5 from the gap */
    tr_mbuf_ack(b, 6);
    /* trailing drops: nothing buffered, yet something to tell */
    for (int i = 0; i < 4; i++) {
        tr_mbuf_add(b, 2, "x", i, 0); /* 7, 8, 9 kept; 10 dropped */
    }
    assert_int_equal(tr_mbuf_take(b, 3, out, &rep), 3);
    assert_int_equal(rep, 10);
    tr_mbuf_ack(b, 10);
    assert_false(tr_mbuf_pending(b));
    tr_mbuf_stats_get(b, &st);
    assert_true(st.reported == 10 && st.acked == 10 && st.dropped == 3 && st.buffered == 0);
    tr_mbuf_free(b);
}

/* Points the head refused for good are counted; ack after them settles. */
static void discard_counts(void **state)
{
    tr_mbuf *b = tr_mbuf_new(4);
    tr_mpoint out[4];
    tr_mbuf_stats st;
    uint64_t rep = 0;

    for (int i = 0; i < 4; i++) {
        tr_mbuf_add(b, 1, "x", i, 0);
    }
    assert_int_equal(tr_mbuf_take(b, 2, out, &rep), 2);
    tr_mbuf_discard(b, rep);
    tr_mbuf_ack(b, rep);
    tr_mbuf_stats_get(b, &st);
    assert_true(st.dropped == 2 && st.buffered == 2 && st.acked == 2);
    assert_int_equal(tr_mbuf_take(b, 4, out, &rep), 2);
    assert_int_equal(out[0].seq, 3);
    tr_mbuf_free(b);
}

static void names(void **state)
{
    tr_mbuf *b = tr_mbuf_new(TR_MBUF_MAX_NAMES + 8);
    char name[200];
    tr_mbuf_stats st;

    assert_false(tr_mbuf_name_ok(NULL));
    assert_false(tr_mbuf_name_ok(""));
    assert_false(tr_mbuf_name_ok("a b"));
    assert_false(tr_mbuf_name_ok("a,b"));
    assert_false(tr_mbuf_name_ok("caf\xc3\xa9"));
    memset(name, 'n', 128);
    name[128] = '\0';
    assert_false(tr_mbuf_name_ok(name)); /* 128 bytes */
    name[127] = '\0';
    assert_true(tr_mbuf_name_ok(name));
    assert_true(tr_mbuf_name_ok("train/loss.mean_0"));
    assert_int_equal(tr_mbuf_add(b, 1, "a b", 1, 0), TROUPE_INVALID_ARGUMENT);
    tr_mbuf_stats_get(b, &st);
    assert_int_equal(st.reported, 0); /* a bad name uses no seq */
    for (int i = 0; i < TR_MBUF_MAX_NAMES; i++) {
        snprintf(name, sizeof(name), "m%d", i);
        assert_int_equal(tr_mbuf_add(b, 1, name, NAN, 0), TROUPE_OK);
    }
    assert_int_equal(tr_mbuf_add(b, 1, "one_too_many", 1, 0), TROUPE_RESOURCE_EXHAUSTED);
    assert_int_equal(tr_mbuf_add(b, 1, "m7", INFINITY, 0), TROUPE_OK); /* known names still fine */
    tr_mbuf_stats_get(b, &st);
    assert_true(st.reported == TR_MBUF_MAX_NAMES + 2 && st.dropped == 1);
    tr_mbuf_free(b);
}

/* The ring wraps: many rounds of add/take/ack through a small buffer keep
 * every point in order and the counts exact. */
static void wraps(void **state)
{
    tr_mbuf *b = tr_mbuf_new(7);
    tr_mpoint out[7];
    tr_mbuf_stats st;
    uint64_t rep = 0, next = 1, kept = 0, seen = 0;

    for (int round = 0; round < 1000; round++) {
        for (int i = 0; i < round % 11; i++) {
            kept += tr_mbuf_add(b, 1, "x", (double)next++, 0) == TROUPE_OK;
        }
        size_t n = tr_mbuf_take(b, (size_t)(round % 5) + 1, out, &rep);
        for (size_t i = 0; i < n; i++) {
            assert_true(out[i].value == (double)out[i].seq);
            assert_true(out[i].seq > seen);
            seen = out[i].seq;
        }
        tr_mbuf_ack(b, rep);
    }
    while (tr_mbuf_pending(b)) {
        size_t n = tr_mbuf_take(b, 7, out, &rep);
        seen = n ? out[n - 1].seq : seen;
        tr_mbuf_ack(b, rep);
    }
    tr_mbuf_stats_get(b, &st);
    assert_int_equal(st.reported, next - 1);
    assert_int_equal(st.dropped, next - 1 - kept);
    assert_int_equal(st.acked, next - 1);
    tr_mbuf_free(b);
}

/* The head's side: a report whose answer was lost comes again, whole or
 * with new points after it; nothing in it is taken twice. */
static void resend_taken_once(void **state)
{
    tr_mseq m = {0};
    (void)state;
    for (uint64_t seq = 1; seq <= 5; seq++) {
        assert_int_equal(tr_mseq_take(&m, seq), 1);
    }
    /* the same report again (its answer was lost), the last point included */
    for (uint64_t seq = 1; seq <= 5; seq++) {
        assert_int_equal(tr_mseq_take(&m, seq), 0);
    }
    assert_int_equal(m.stored, 5);
    assert_int_equal(m.last_seq, 5);
    assert_int_equal(m.dropped, 0);
    assert_true(tr_mseq_resend(5, 5));
    assert_false(tr_mseq_resend(6, 5));
    /* a resend that grew: 4 and 5 again, then 6 and 7 */
    assert_int_equal(tr_mseq_take(&m, 4), 0);
    assert_int_equal(tr_mseq_take(&m, 5), 0);
    assert_int_equal(tr_mseq_take(&m, 6), 1);
    assert_int_equal(tr_mseq_take(&m, 7), 1);
    assert_int_equal(m.stored, 7);
    assert_int_equal(m.dropped, 0);
}

/* Gaps are the sender's drops, counted once, also when resent. */
static void gaps_are_drops(void **state)
{
    tr_mseq m = {0};
    (void)state;
    assert_int_equal(tr_mseq_take(&m, 3), 1); /* 1 and 2 dropped */
    assert_int_equal(tr_mseq_take(&m, 7), 1); /* 4..6 dropped */
    assert_int_equal(m.dropped, 5);
    assert_int_equal(tr_mseq_take(&m, 3), 0);
    assert_int_equal(tr_mseq_take(&m, 7), 0);
    assert_int_equal(m.dropped, 5);
    tr_mseq_settle(&m, 10); /* 8..10 dropped after the last point */
    assert_int_equal(m.dropped, 8);
    assert_int_equal(m.last_seq, 10);
    tr_mseq_settle(&m, 10); /* settled again: nothing more */
    tr_mseq_settle(&m, 4);
    assert_int_equal(m.dropped, 8);
    assert_int_equal(tr_mseq_take(&m, 10), 0);
    assert_int_equal(tr_mseq_take(&m, 11), 1);
    assert_int_equal(m.stored, 3);
    assert_int_equal(m.dropped, 8);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(add_take_ack),
        cmocka_unit_test(full_drops_counted),
        cmocka_unit_test(discard_counts),
        cmocka_unit_test(names),
        cmocka_unit_test(wraps),
        cmocka_unit_test(resend_taken_once),
        cmocka_unit_test(gaps_are_drops),
    };
    return TR_TEST_MAIN("unit.common.metric_buf", tests, argc, argv);
}
