/* test_kv.c - one space of the job store (server/kv_state.c): TCPStore's
 * semantics (set/get, add, compare_set, delete), waits answered by the set
 * that completes them, deadlines naming the keys never set, the per-job
 * bounds shared by every space, and a space freed with waiters parked. */
#include "test_helpers.h"

#include "kv_state.h"

typedef struct sink {
    int code[8];
    char msg[8][1600];
    char val[8][64];
    size_t n[8];
    int answered;
} sink;

static void answer(void *token, int code, const char *msg, const uint8_t *const *vals, const size_t *lens,
                   size_t n, void *ctx)
{
    sink *s = ctx;
    int t = (int)(intptr_t)token;
    s->code[t] = code;
    s->n[t] = n;
    snprintf(s->msg[t], sizeof(s->msg[t]), "%s", msg ? msg : "");
    if (n > 0) {
        snprintf(s->val[t], sizeof(s->val[t]), "%.*s", (int)lens[0], (const char *)vals[0]);
    }
    s->answered++;
}

#define TOK(i) ((void *)(intptr_t)(i))

static tr_kv_space *mk(tr_kv_usage *u, uint32_t epoch)
{
    tr_kv_space *sp = NULL;
    tr_err err;
    static const char *const names[] = {"job7-policy-0 on na", "job7-policy-1 on nb", NULL};
    TR_ASSERT_OK(tr_kv_space_new("policy", epoch, 3, names, u, &sp, &err), &err);
    return sp;
}

static int set(tr_kv_space *sp, const char *k, const char *v, sink *s, tr_err *err)
{
    return tr_kv_set(sp, k, (const uint8_t *)v, strlen(v), answer, s, err);
}

static void set_get_add(void **state)
{
    tr_kv_usage u = {.max_keys = 100, .max_bytes = 10000};
    tr_kv_space *sp = mk(&u, 0);
    const uint8_t *v;
    size_t len;
    int64_t out;
    sink s = {0};
    tr_err err;

    assert_int_equal(tr_kv_get(sp, "a", &v, &len), 0);
    TR_ASSERT_OK(set(sp, "a", "xyz", &s, &err), &err);
    assert_int_equal(tr_kv_get(sp, "a", &v, &len), 1);
    assert_int_equal(len, 3);
    assert_memory_equal(v, "xyz", 3);
    TR_ASSERT_OK(set(sp, "a", "pq", &s, &err), &err); /* overwrite: one key, bytes follow */
    assert_int_equal(u.keys, 1);
    assert_int_equal(u.bytes, 1 + 2);
    TR_ASSERT_OK(tr_kv_add(sp, "n", 5, &out, answer, &s, &err), &err);
    assert_int_equal(out, 5);
    TR_ASSERT_OK(tr_kv_add(sp, "n", -7, &out, answer, &s, &err), &err);
    assert_int_equal(out, -2);
    assert_int_equal(tr_kv_get(sp, "n", &v, &len), 1);
    assert_int_equal(len, 2);
    assert_memory_equal(v, "-2", 2);
    TR_ASSERT_FAILS(tr_kv_add(sp, "a", 1, &out, answer, &s, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "not a decimal integer");
    TR_ASSERT_OK(set(sp, "big", "9223372036854775807", &s, &err), &err);
    TR_ASSERT_FAILS(tr_kv_add(sp, "big", 1, &out, answer, &s, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "overflows");
    TR_ASSERT_FAILS(set(sp, "", "x", &s, &err), TROUPE_INVALID_ARGUMENT, &err, "1 to 1024 bytes");
    assert_int_equal(tr_kv_num_keys(sp), 3);
    assert_int_equal(tr_kv_delete(sp, "a"), 1);
    assert_int_equal(tr_kv_delete(sp, "a"), 0);
    assert_int_equal(tr_kv_num_keys(sp), 2);
    tr_kv_space_free(sp, TROUPE_FAILED_PRECONDITION, "x", answer, &s);
    assert_int_equal(u.keys, 0);
    assert_int_equal(u.bytes, 0);
    assert_int_equal(s.answered, 0);
}

static void compare_set(void **state)
{
    tr_kv_usage u = {.max_keys = 100, .max_bytes = 10000};
    tr_kv_space *sp = mk(&u, 0);
    const uint8_t *cur;
    size_t len;
    sink s = {0};
    tr_err err;

#define CAS(k, e, d)                                                                                         \
    TR_ASSERT_OK(tr_kv_compare_set(sp, k, (const uint8_t *)e, strlen(e), (const uint8_t *)d, strlen(d),      \
                                   &cur, &len, answer, &s, &err),                                            \
                 &err)
    CAS("k", "e", "d"); /* missing, expected not empty: answers expected, sets nothing */
    assert_int_equal(len, 1);
    assert_memory_equal(cur, "e", 1);
    assert_int_equal(tr_kv_num_keys(sp), 0);
    CAS("k", "", "a"); /* missing, expected empty: sets */
    assert_memory_equal(cur, "a", 1);
    CAS("k", "zz", "b"); /* differs: the value now */
    assert_int_equal(len, 1);
    assert_memory_equal(cur, "a", 1);
    CAS("k", "a", "bc"); /* equal: sets */
    assert_int_equal(len, 2);
    assert_memory_equal(cur, "bc", 2);
#undef CAS
    tr_kv_space_free(sp, TROUPE_FAILED_PRECONDITION, "x", answer, &s);
}

static void waits(void **state)
{
    tr_kv_usage u = {.max_keys = 100, .max_bytes = 10000};
    tr_kv_space *sp = mk(&u, 3);
    const char *one[] = {"a"}, *two[] = {"a", "b"}, *three[] = {"a", "b", "c"};
    int parked = 0;
    sink s = {0};
    tr_err err;

    TR_ASSERT_OK(tr_kv_wait(sp, one, 1, 1, TOK(0), 0, 1000, &parked, &err), &err);
    assert_int_equal(parked, 1);
    TR_ASSERT_OK(tr_kv_wait(sp, two, 2, 0, TOK(1), 0, 1000, &parked, &err), &err);
    TR_ASSERT_OK(tr_kv_wait(sp, three, 3, 0, TOK(2), 0, 500, &parked, &err), &err);
    assert_int_equal(tr_kv_num_waiters(sp), 3);
    TR_ASSERT_OK(set(sp, "a", "va", &s, &err), &err);
    assert_int_equal(s.answered, 1); /* only the get of a */
    assert_int_equal(s.code[0], TROUPE_OK);
    assert_int_equal(s.n[0], 1);
    assert_string_equal(s.val[0], "va");
    TR_ASSERT_OK(tr_kv_add(sp, "b", 1, &(int64_t){0}, answer, &s, &err), &err);
    assert_int_equal(s.answered, 2); /* the wait for a and b; no values */
    assert_int_equal(s.n[1], 0);
    /* 2 waits for c too; at 499 nothing expires, at 500 it does, naming c only */
    assert_int_equal(tr_kv_expire(sp, 499, answer, &s), 500);
    assert_int_equal(tr_kv_expire(sp, 500, answer, &s), INT64_MAX);
    assert_int_equal(s.code[2], TROUPE_DEADLINE_EXCEEDED);
    assert_non_null(
        strstr(s.msg[2], "store of policy (epoch 3): waited 500 ms for key 'c', never set (1 of 3"));
    assert_null(strstr(s.msg[2], "'a'"));
    /* no rank called the space here: all three named, the unknown one as "?" */
    assert_non_null(strstr(s.msg[2], "; 3 of 3 ranks never called this store: 0 job7-policy-0 on na, 1 "
                                     "job7-policy-1 on nb, 2 ?"));
    /* ranks that called are left out; with every rank in, the message asks why instead */
    tr_kv_touch(sp, 0);
    tr_kv_touch(sp, 2);
    tr_kv_touch(sp, 7); /* past the size: ignored */
    TR_ASSERT_OK(tr_kv_wait(sp, (const char *[]){"d"}, 1, 0, TOK(5), 0, 600, &parked, &err), &err);
    assert_int_equal(tr_kv_expire(sp, 600, answer, &s), INT64_MAX);
    assert_non_null(strstr(s.msg[5], "'d', never set (1 of 1 keys missing); 1 of 3 ranks never called this "
                                     "store: 1 job7-policy-1 on nb"));
    assert_null(strstr(s.msg[5], "job7-policy-0"));
    tr_kv_touch(sp, 1);
    TR_ASSERT_OK(tr_kv_wait(sp, (const char *[]){"d"}, 1, 0, TOK(6), 0, 700, &parked, &err), &err);
    assert_int_equal(tr_kv_expire(sp, 700, answer, &s), INT64_MAX);
    assert_non_null(strstr(s.msg[6], "(1 of 1 keys missing): is every rank running and setting it?"));
    assert_null(strstr(s.msg[6], "never called"));
    /* already set: answered at once, nothing parked */
    TR_ASSERT_OK(tr_kv_wait(sp, two, 2, 0, TOK(3), 0, 1000, &parked, &err), &err);
    assert_int_equal(parked, 0);
    /* forget drops a parked token without answering it */
    TR_ASSERT_OK(tr_kv_wait(sp, (const char *[]){"zz"}, 1, 1, TOK(4), 0, 1000, &parked, &err), &err);
    assert_int_equal(tr_kv_forget(sp, TOK(4)), 1);
    assert_int_equal(tr_kv_forget(sp, TOK(4)), 0);
    TR_ASSERT_FAILS(tr_kv_wait(sp, one, 0, 0, TOK(5), 0, 1, &parked, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "wait for 1 to 256 keys");
    /* freed with a waiter parked: answered with the reason */
    TR_ASSERT_OK(tr_kv_wait(sp, (const char *[]){"never"}, 1, 1, TOK(6), 0, 1000, &parked, &err), &err);
    tr_kv_space_free(sp, TROUPE_FAILED_PRECONDITION, "communicator moved", answer, &s);
    assert_int_equal(s.code[6], TROUPE_FAILED_PRECONDITION);
    assert_string_equal(s.msg[6], "communicator moved");
}

static void bounds(void **state)
{
    tr_kv_usage u = {.max_keys = 3, .max_bytes = 20};
    tr_kv_space *a = mk(&u, 0), *b = mk(&u, 0);
    const uint8_t *v;
    size_t len;
    sink s = {0};
    tr_err err;

    TR_ASSERT_OK(set(a, "k1", "12345", &s, &err), &err);
    TR_ASSERT_OK(set(b, "k2", "1", &s, &err), &err);
    TR_ASSERT_OK(set(b, "k3", "1", &s, &err), &err);
    /* the bound is the job's, over both spaces */
    TR_ASSERT_FAILS(set(a, "k4", "1", &s, &err), TROUPE_RESOURCE_EXHAUSTED, &err,
                    "the job's store holds 3 keys, its most (head store_max_keys=3)");
    assert_int_equal(tr_kv_get(a, "k4", &v, &len), 0);
    /* 7 + 3 + 3 = 13 bytes; k1 growing to 16 bytes of value would make 24 */
    TR_ASSERT_FAILS(set(a, "k1", "0123456789abcdef", &s, &err), TROUPE_RESOURCE_EXHAUSTED, &err,
                    "would bring the job's store to 24 bytes, over store_max_bytes=20 (now 13)");
    assert_int_equal(tr_kv_get(a, "k1", &v, &len), 1);
    assert_int_equal(len, 5); /* unchanged */
    tr_kv_space_free(b, TROUPE_FAILED_PRECONDITION, "x", answer, &s);
    assert_int_equal(u.keys, 1);
    TR_ASSERT_OK(set(a, "k4", "1", &s, &err), &err); /* room again once b is gone */
    tr_kv_space_free(a, TROUPE_FAILED_PRECONDITION, "x", answer, &s);
    assert_int_equal(u.keys, 0);
    assert_int_equal(u.bytes, 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(set_get_add),
        cmocka_unit_test(compare_set),
        cmocka_unit_test(waits),
        cmocka_unit_test(bounds),
    };
    return TR_TEST_MAIN("server.kv", tests, argc, argv);
}
