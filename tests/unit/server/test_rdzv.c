/* test_rdzv.c - the rendezvous state machine (server/rdzv_state.c): IDs
 * published before and after waits, bad publishes, deadlines that name the
 * missing ranks, barriers/gathers and their sequence, epochs ending. */
#include "test_helpers.h"

#include "rdzv_state.h"

/* A fake answer sink: records every answer by token (an int index). */
typedef struct sink {
    int code[16];
    char msg[16][2600];
    uint32_t rank[16], n_ids[16], size[16];
    uint8_t first[16];
    int answered;
} sink;

static void answer(void *token, int code, const char *msg, const tr_rdzv_result *res, void *ctx)
{
    sink *s = ctx;
    int t = (int)(intptr_t)token;
    s->code[t] = code;
    snprintf(s->msg[t], sizeof(s->msg[t]), "%s", msg ? msg : "");
    if (res != NULL) {
        s->rank[t] = res->rank;
        s->n_ids[t] = res->n_ids;
        s->size[t] = res->size;
        s->first[t] = res->ids ? res->ids[0] : res->data && res->data[0] ? res->data[0][0] : 0;
    }
    s->answered++;
}

#define TOK(i) ((void *)(intptr_t)(i))

static tr_rdzv_comm *mk(uint32_t size, uint32_t epoch)
{
    const char *names[8] = {"w0 on a", "w1 on a", "w2 on b", "w3 on b", "w4 on c", "w5 on c", "w6", "w7"};
    tr_rdzv_comm *c = NULL;
    tr_err err;
    TR_ASSERT_OK(tr_rdzv_comm_new("policy", epoch, size, names, &c, &err), &err);
    return c;
}

static int publish(tr_rdzv_comm *c, uint32_t rank, uint8_t byte, size_t len, size_t n, sink *s, tr_err *err)
{
    static uint8_t buf[TR_RDZV_MAX_IDS + 1][256];
    const uint8_t *ids[TR_RDZV_MAX_IDS + 1];
    size_t lens[TR_RDZV_MAX_IDS + 1];
    for (size_t i = 0; i < n; i++) {
        memset(buf[i], byte, sizeof(buf[i]));
        ids[i] = buf[i];
        lens[i] = len;
    }
    return tr_rdzv_publish(c, rank, ids, lens, n, answer, s, err);
}

static void wait_then_publish(void **state)
{
    tr_rdzv_comm *c = mk(4, 0);
    tr_rdzv_result res;
    sink s = {0};
    tr_err err;
    int parked;
    (void)state;
    for (uint32_t r = 1; r < 4; r++) {
        TR_ASSERT_OK(tr_rdzv_ids_wait(c, r, TOK(r), 1000, &res, &parked, &err), &err);
        assert_int_equal(parked, 1);
    }
    assert_int_equal(s.answered, 0);
    TR_ASSERT_OK(publish(c, 0, 9, TR_RDZV_ID_BYTES, 2, &s, &err), &err);
    assert_int_equal(s.answered, 3); /* one publish answers every waiter */
    for (uint32_t r = 1; r < 4; r++) {
        assert_int_equal(s.code[r], TROUPE_OK);
        assert_int_equal(s.rank[r], r);
        assert_int_equal(s.n_ids[r], 2);
        assert_int_equal(s.first[r], 9);
        assert_int_equal(s.size[r], 4);
    }
    assert_int_equal(tr_rdzv_expire(c, 5000, answer, &s), INT64_MAX); /* nobody left */
    tr_rdzv_comm_free(c, TROUPE_FAILED_PRECONDITION, "x", answer, &s);
}

static void publish_then_wait(void **state)
{
    tr_rdzv_comm *c = mk(2, 3);
    tr_rdzv_result res;
    sink s = {0};
    tr_err err;
    int parked;
    (void)state;
    TR_ASSERT_OK(publish(c, 0, 5, TR_RDZV_ID_BYTES, 1, &s, &err), &err);
    TR_ASSERT_OK(tr_rdzv_ids_wait(c, 1, TOK(1), 1000, &res, &parked, &err), &err);
    assert_int_equal(parked, 0);
    assert_int_equal(res.epoch, 3);
    assert_int_equal(res.rank, 1);
    assert_int_equal(res.ids[0], 5);
    tr_rdzv_comm_free(c, TROUPE_FAILED_PRECONDITION, "x", answer, &s);
}

static void bad_publish(void **state)
{
    tr_rdzv_comm *c = mk(4, 0);
    tr_rdzv_result res;
    sink s = {0};
    tr_err err;
    int parked;
    (void)state;
    TR_ASSERT_FAILS(publish(c, 1, 1, TR_RDZV_ID_BYTES, 1, &s, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "rank 1 (w1 on a) cannot publish IDs for communicator policy: only rank 0 publishes");
    TR_ASSERT_FAILS(publish(c, 4, 1, TR_RDZV_ID_BYTES, 1, &s, &err), TROUPE_OUT_OF_RANGE, &err,
                    "rank 4 is out of range for communicator policy of 4 ranks");
    TR_ASSERT_FAILS(publish(c, 0, 1, 127, 1, &s, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "ID 0 for communicator policy is 127 bytes; an NCCL unique ID is 128");
    TR_ASSERT_FAILS(publish(c, 0, 1, TR_RDZV_ID_BYTES, 0, &s, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "must publish 1 to 16 IDs, not 0");
    TR_ASSERT_FAILS(publish(c, 0, 1, TR_RDZV_ID_BYTES, 17, &s, &err), TROUPE_INVALID_ARGUMENT, &err, "not 17");
    TR_ASSERT_FAILS(tr_rdzv_ids_wait(c, 0, TOK(0), 100, &res, &parked, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "rank 0 (w0 on a) of communicator policy publishes the IDs");
    TR_ASSERT_FAILS(tr_rdzv_ids_wait(c, 9, TOK(0), 100, &res, &parked, &err), TROUPE_OUT_OF_RANGE, &err,
                    "rank 9 is out of range");
    TR_ASSERT_OK(publish(c, 0, 1, TR_RDZV_ID_BYTES, 1, &s, &err), &err);
    TR_ASSERT_OK(publish(c, 0, 1, TR_RDZV_ID_BYTES, 1, &s, &err), &err); /* a retry */
    TR_ASSERT_FAILS(publish(c, 0, 2, TR_RDZV_ID_BYTES, 1, &s, &err), TROUPE_ALREADY_EXISTS, &err,
                    "communicator policy epoch 0 already has other IDs");
    TR_ASSERT_FAILS(publish(c, 0, 1, TR_RDZV_ID_BYTES, 2, &s, &err), TROUPE_ALREADY_EXISTS, &err, "other IDs");
    TR_ASSERT_OK(tr_rdzv_ids_wait(c, 1, TOK(1), 100, &res, &parked, &err), &err);
    assert_int_equal(res.ids[0], 1); /* the first bytes stand */
    tr_rdzv_comm_free(c, TROUPE_FAILED_PRECONDITION, "x", answer, &s);
}

static void timeout_names_missing(void **state)
{
    tr_rdzv_comm *c = mk(4, 2);
    tr_rdzv_result res;
    sink s = {0};
    tr_err err;
    int parked;
    (void)state;
    TR_ASSERT_OK(tr_rdzv_ids_wait(c, 1, TOK(1), 1000, &res, &parked, &err), &err);
    /* The first and the last rank stay away: both are named (a walk that
     * stopped one short, or started at 1, would leave one out). */
    TR_ASSERT_OK(tr_rdzv_ids_wait(c, 2, TOK(2), 2000, &res, &parked, &err), &err);
    assert_int_equal(tr_rdzv_expire(c, 999, answer, &s), 1000);
    assert_int_equal(s.answered, 0);
    assert_int_equal(tr_rdzv_expire(c, 1000, answer, &s), 2000); /* rank 1's deadline only */
    assert_int_equal(s.answered, 1);
    assert_int_equal(s.code[1], TROUPE_DEADLINE_EXCEEDED);
    TR_ASSERT_CONTAINS(s.msg[1], "communicator policy epoch 2: no IDs yet (rank 0 never published); "
                                 "2 of 4 ranks never arrived: 0 w0 on a, 3 w3 on b");
    tr_rdzv_pending p[4];
    assert_int_equal(tr_rdzv_pending_list(c, p, 4), 1);
    assert_string_equal(p[0].what, "ids");
    assert_int_equal(p[0].arrived, 2);
    assert_int_equal(p[0].n_missing, 2);
    assert_string_equal(p[0].missing[0], "w0 on a");
    assert_string_equal(p[0].missing[1], "w3 on b");
    tr_rdzv_comm_free(c, TROUPE_FAILED_PRECONDITION, "epoch moved", answer, &s);
    assert_int_equal(s.code[2], TROUPE_FAILED_PRECONDITION); /* the epoch's end answers the rest */
    assert_string_equal(s.msg[2], "epoch moved");
}

static int gather(tr_rdzv_comm *c, uint32_t rank, const char *name, uint64_t seq, const char *data, sink *s,
                  tr_rdzv_result *res, int *parked, tr_err *err)
{
    return tr_rdzv_gather(c, rank, name, seq, (const uint8_t *)data, strlen(data), TOK(rank), 1000, answer, s, res,
                          parked, err);
}

static void gather_sequence(void **state)
{
    tr_rdzv_comm *c = mk(3, 0);
    tr_rdzv_result res;
    sink s = {0};
    tr_err err;
    int parked;
    (void)state;
    TR_ASSERT_OK(gather(c, 1, "gather:addr", 1, "b", &s, &res, &parked, &err), &err);
    assert_int_equal(parked, 1);
    TR_ASSERT_OK(gather(c, 1, "gather:addr", 1, "b", &s, &res, &parked, &err), &err); /* a retry */
    TR_ASSERT_FAILS(gather(c, 1, "gather:addr", 1, "x", &s, &res, &parked, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "rank 1 sent different data");
    TR_ASSERT_FAILS(gather(c, 2, "gather:addr", 2, "c", &s, &res, &parked, &err), TROUPE_FAILED_PRECONDITION,
                    &err, "rank 2 (w2 on b) is at number 2 while the others are at 1");
    TR_ASSERT_OK(gather(c, 2, "gather:addr", 1, "c", &s, &res, &parked, &err), &err);
    TR_ASSERT_OK(gather(c, 0, "gather:addr", 1, "a", &s, &res, &parked, &err), &err);
    assert_int_equal(parked, 0); /* the last arrival completes it */
    assert_int_equal(res.size, 3);
    assert_memory_equal(res.data[0], "a", 1);
    assert_memory_equal(res.data[2], "c", 1);
    assert_int_equal(s.answered, 3); /* rank 2, and rank 1's call and its retry */
    assert_int_equal(s.code[1], TROUPE_OK);
    assert_int_equal(s.first[1], 'a');
    /* A rank whose reply was lost asks again: the kept result answers. */
    TR_ASSERT_OK(gather(c, 1, "gather:addr", 1, "b", &s, &res, &parked, &err), &err);
    assert_int_equal(parked, 0);
    assert_memory_equal(res.data[1], "b", 1);
    TR_ASSERT_FAILS(gather(c, 1, "gather:addr", 0, "b", &s, &res, &parked, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "seq starts at 1");
    /* A barrier that times out names who never came. */
    TR_ASSERT_OK(gather(c, 0, "barrier:x", 1, "", &s, &res, &parked, &err), &err);
    tr_rdzv_expire(c, 1000, answer, &s);
    assert_int_equal(s.code[0], TROUPE_DEADLINE_EXCEEDED);
    TR_ASSERT_CONTAINS(s.msg[0], "barrier:x number 1 of communicator policy epoch 0: 2 of 3 ranks never arrived: "
                                 "1 w1 on a, 2 w2 on b");
    tr_rdzv_comm_free(c, TROUPE_FAILED_PRECONDITION, "x", answer, &s);
}

static void forget_and_limits(void **state)
{
    tr_rdzv_comm *c = mk(2, 0);
    tr_rdzv_result res;
    uint8_t big[TR_RDZV_MAX_BLOB + 1] = {0};
    sink s = {0};
    tr_err err;
    int parked;
    (void)state;
    TR_ASSERT_OK(tr_rdzv_ids_wait(c, 1, TOK(1), 1000, &res, &parked, &err), &err);
    assert_int_equal(tr_rdzv_forget(c, TOK(1)), 1);
    assert_int_equal(tr_rdzv_forget(c, TOK(1)), 0);
    assert_int_equal(tr_rdzv_expire(c, 5000, answer, &s), INT64_MAX);
    assert_int_equal(s.answered, 0); /* a forgotten waiter is never answered */
    TR_ASSERT_FAILS(tr_rdzv_gather(c, 0, "g", 1, big, sizeof(big), TOK(0), 1, answer, &s, &res, &parked, &err),
                    TROUPE_INVALID_ARGUMENT, &err, "at most 4096 per rank");
    for (int i = 0; i < TR_RDZV_MAX_GATHERS; i++) {
        char name[16];
        snprintf(name, sizeof(name), "b%d", i);
        TR_ASSERT_OK(tr_rdzv_gather(c, 0, name, 1, NULL, 0, TOK(0), 1, answer, &s, &res, &parked, &err), &err);
    }
    TR_ASSERT_FAILS(tr_rdzv_gather(c, 0, "one-more", 1, NULL, 0, TOK(0), 1, answer, &s, &res, &parked, &err),
                    TROUPE_RESOURCE_EXHAUSTED, &err, "already has 64 named barriers/gathers");
    tr_rdzv_comm_free(c, TROUPE_FAILED_PRECONDITION, "x", answer, &s);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wait_then_publish), cmocka_unit_test(publish_then_wait),
        cmocka_unit_test(bad_publish),       cmocka_unit_test(timeout_names_missing),
        cmocka_unit_test(gather_sequence),   cmocka_unit_test(forget_and_limits),
    };
    return TR_TEST_MAIN("server.rdzv", tests, argc, argv);
}
