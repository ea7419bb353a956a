/* test_status.c - unit.common.status: status names (common/status.c), the nng
 * error mapping (tr_rpc_from_nng in common/rpc_client.c) and tr_err. */
#include "test_helpers.h"

#include <nng/nng.h>

#include "rpc.h"

static void names_match_grpc(void **state)
{
    static const char *const want[] = {
        "OK",        "CANCELLED",          "UNKNOWN",           "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
        "NOT_FOUND", "ALREADY_EXISTS",     "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION", "ABORTED",  "OUT_OF_RANGE",      "UNIMPLEMENTED",    "INTERNAL",
        "UNAVAILABLE", "DATA_LOSS",        "UNAUTHENTICATED",
    };
    for (int i = 0; i < (int)(sizeof(want) / sizeof(want[0])); i++) {
        assert_string_equal(troupe_strerror(i), want[i]);
    }
    /* The enum agrees with gRPC's numbering at both ends. */
    assert_string_equal(troupe_strerror(TROUPE_DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
    assert_int_equal(TROUPE_UNAUTHENTICATED, 16);
}

static void unknown_codes(void **state)
{
    assert_string_equal(troupe_strerror(-1), "UNKNOWN_STATUS");
    assert_string_equal(troupe_strerror(17), "UNKNOWN_STATUS");
    assert_string_equal(troupe_strerror(1 << 30), "UNKNOWN_STATUS");
    assert_string_equal(troupe_strerror(INT32_MIN), "UNKNOWN_STATUS");
}

static void nng_mapping(void **state)
{
    static const struct {
        int nng;
        int want;
    } cases[] = {
        {NNG_ETIMEDOUT, TROUPE_DEADLINE_EXCEEDED}, {NNG_ECONNREFUSED, TROUPE_UNAVAILABLE},
        {NNG_ECONNRESET, TROUPE_UNAVAILABLE},      {NNG_ECONNABORTED, TROUPE_UNAVAILABLE},
        {NNG_ECONNSHUT, TROUPE_UNAVAILABLE},       {NNG_ECLOSED, TROUPE_UNAVAILABLE},
        {NNG_EUNREACHABLE, TROUPE_UNAVAILABLE},    {NNG_ENOENT, TROUPE_UNAVAILABLE},
        {NNG_EPEERAUTH, TROUPE_UNAVAILABLE},       {NNG_EADDRINUSE, TROUPE_UNAVAILABLE},
        {NNG_ETRANERR, TROUPE_UNAVAILABLE},        {NNG_ENOMEM, TROUPE_RESOURCE_EXHAUSTED},
        {NNG_EMSGSIZE, TROUPE_RESOURCE_EXHAUSTED}, {NNG_ENOSPC, TROUPE_RESOURCE_EXHAUSTED},
        {NNG_EINVAL, TROUPE_INVALID_ARGUMENT},     {NNG_EADDRINVAL, TROUPE_INVALID_ARGUMENT},
        {NNG_EBADTYPE, TROUPE_INVALID_ARGUMENT},   {NNG_ENOTSUP, TROUPE_UNIMPLEMENTED},
        {NNG_EPERM, TROUPE_PERMISSION_DENIED},     {NNG_ECANCELED, TROUPE_CANCELLED},
        {NNG_EPROTO, TROUPE_DATA_LOSS},            {NNG_EINTERNAL, TROUPE_UNKNOWN},
        {NNG_EBUSY, TROUPE_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tr_err err = {0};
        char want_msg[TR_ERR_MSG_MAX];
        int rv = tr_rpc_from_nng(cases[i].nng, "dial tcp://h:1", &err);

        if (rv != cases[i].want || err.code != cases[i].want) {
            fail_msg("nng error %d (%s): expected %s, got %s", cases[i].nng, nng_strerror(cases[i].nng),
                     troupe_strerror(cases[i].want), troupe_strerror(rv));
        }
        snprintf(want_msg, sizeof(want_msg), "dial tcp://h:1: %s", nng_strerror(cases[i].nng));
        assert_string_equal(err.msg, want_msg);
    }
}

static void nng_zero_is_ok(void **state)
{
    tr_err err = {.code = TROUPE_INTERNAL, .msg = "untouched"};

    assert_int_equal(tr_rpc_from_nng(0, "x", &err), TROUPE_OK);
    assert_string_equal(err.msg, "untouched"); /* success does not write err */
    assert_int_equal(tr_rpc_from_nng(NNG_ETIMEDOUT, "x", NULL), TROUPE_DEADLINE_EXCEEDED);
}

static void err_helpers(void **state)
{
    tr_err err;
    char big[TR_ERR_MSG_MAX * 2];

    assert_int_equal(tr_err_set(&err, TROUPE_NOT_FOUND, "node %d: %s", 3, "gone"), TROUPE_NOT_FOUND);
    assert_int_equal(err.code, TROUPE_NOT_FOUND);
    assert_string_equal(err.msg, "node 3: gone");
    tr_err_prefix(&err, "register %s", "gpu-3");
    assert_string_equal(err.msg, "register gpu-3: node 3: gone");
    assert_int_equal(err.code, TROUPE_NOT_FOUND);
    tr_err_clear(&err);
    assert_int_equal(err.code, TROUPE_OK);
    assert_string_equal(err.msg, "");
    /* NULL is accepted everywhere and the code still comes back. */
    assert_int_equal(tr_err_set(NULL, TROUPE_ABORTED, "x"), TROUPE_ABORTED);
    tr_err_clear(NULL);
    tr_err_prefix(NULL, "p");
    /* Long messages are cut, never overflow. */
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    tr_err_set(&err, TROUPE_INTERNAL, "%s", big);
    assert_int_equal(strlen(err.msg), TR_ERR_MSG_MAX - 1);
    tr_err_prefix(&err, "pre");
    assert_int_equal(strlen(err.msg), TR_ERR_MSG_MAX - 1);
    assert_memory_equal(err.msg, "pre: xxx", 8);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names_match_grpc), cmocka_unit_test(unknown_codes),  cmocka_unit_test(nng_mapping),
        cmocka_unit_test(nng_zero_is_ok),   cmocka_unit_test(err_helpers),
    };
    return TR_TEST_MAIN("unit.common.status", tests, argc, argv);
}
