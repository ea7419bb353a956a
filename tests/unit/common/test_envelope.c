/* test_envelope.c - unit.common.envelope: the troupe.v1 Request/Reply codec
 * (common/envelope.c). Pure functions, no sockets. */
#include "test_helpers.h"

#include "arena.h"
#include "rpc.h"
#include "troupe/v1/troupe.pb-c.h"

/* encode packs env, failing the test on error; the caller frees *buf. */
static size_t encode(const tr_envelope *env, uint8_t **buf)
{
    tr_err err = {0};
    size_t n = 0;
    TR_ASSERT_OK(tr_envelope_encode_request(env, buf, &n, &err), &err);
    return n;
}

static void roundtrip(void **state)
{
    static const uint8_t payload[] = {0x0a, 0x03, 'a', 'b', 'c'};
    tr_envelope in = {.method = "troupe.v1.Head/Ping",
                      .request_id = UINT64_MAX,
                      .timeout_ms = UINT32_MAX,
                      .token = "s3cret",
                      .payload = payload,
                      .payload_len = sizeof(payload)};
    tr_envelope out;
    ProtobufCMessage *msg = NULL;
    tr_err err = {0};
    uint8_t *buf = NULL;
    size_t n = encode(&in, &buf);

    TR_ASSERT_OK(tr_envelope_decode_request(buf, n, &msg, &out, &err), &err);
    assert_non_null(msg);
    assert_string_equal(out.method, "troupe.v1.Head/Ping");
    assert_true(out.request_id == UINT64_MAX);
    assert_true(out.timeout_ms == UINT32_MAX);
    assert_string_equal(out.token, "s3cret");
    assert_int_equal(out.payload_len, sizeof(payload));
    assert_memory_equal(out.payload, payload, sizeof(payload));
    /* env borrows from msg: the pointers lie inside the decoded message. */
    assert_ptr_equal(out.method, ((Troupe__V1__Request *)msg)->method);
    protobuf_c_message_free_unpacked(msg, NULL);
    free(buf);
}

static void null_token_and_empty_payload(void **state)
{
    tr_envelope in = {.method = "m", .request_id = 7};
    tr_envelope out;
    ProtobufCMessage *msg = NULL;
    tr_err err = {0};
    uint8_t *buf = NULL;
    size_t n = encode(&in, &buf);

    TR_ASSERT_OK(tr_envelope_decode_request(buf, n, &msg, &out, &err), &err);
    assert_string_equal(out.token, "");
    assert_int_equal(out.payload_len, 0);
    assert_int_equal(out.timeout_ms, 0);
    assert_true(out.request_id == 7);
    protobuf_c_message_free_unpacked(msg, NULL);
    free(buf);
}

/* A failed decode leaves *msg NULL and env zeroed, whatever was there before. */
static void assert_cleared(ProtobufCMessage *msg, const tr_envelope *env)
{
    assert_null(msg);
    assert_null(env->method);
    assert_null(env->token);
    assert_null(env->payload);
    assert_int_equal(env->payload_len, 0);
    assert_true(env->request_id == 0);
}

static void empty_frame(void **state)
{
    uint8_t b = 0;
    ProtobufCMessage *msg = (ProtobufCMessage *)&b;
    tr_envelope env;
    tr_err err = {0};

    memset(&env, 0xab, sizeof(env));
    TR_ASSERT_FAILS(tr_envelope_decode_request(&b, 0, &msg, &env, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "empty request frame");
    assert_cleared(msg, &env);
    assert_int_equal(err.code, TROUPE_INVALID_ARGUMENT);
}

static void garbage_frame(void **state)
{
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    ProtobufCMessage *msg = NULL;
    tr_envelope env;
    tr_err err = {0};

    memset(&env, 0xab, sizeof(env));
    TR_ASSERT_FAILS(tr_envelope_decode_request(junk, sizeof(junk), &msg, &env, &err), TROUPE_INVALID_ARGUMENT,
                    &err, "malformed request envelope (11 bytes)");
    assert_cleared(msg, &env);
}

static void truncated_frame(void **state)
{
    tr_envelope in = {.method = "troupe.v1.Head/Ping", .token = "tok"};
    ProtobufCMessage *msg = NULL;
    tr_envelope env;
    tr_err err = {0};
    uint8_t *buf = NULL;
    size_t n = encode(&in, &buf);

    /* Fields are packed in number order: method (tag, len, 19 bytes), then
     * token. Every strict prefix cuts a field short except the one that ends
     * right after the method, which is a complete Request without a token. */
    size_t boundary = 2 + strlen(in.method);
    for (size_t cut = 1; cut < n; cut++) {
        int rv = tr_envelope_decode_request(buf, cut, &msg, &env, &err);
        if (cut == boundary) {
            TR_ASSERT_OK(rv, &err);
            assert_string_equal(env.token, "");
            protobuf_c_message_free_unpacked(msg, NULL);
            continue;
        }
        if (rv == TROUPE_OK) {
            fail_msg("prefix of %zu/%zu bytes decoded as method '%s'", cut, n, env.method);
        }
        assert_int_equal(rv, TROUPE_INVALID_ARGUMENT);
        assert_null(msg);
    }
    free(buf);
}

static void trailing_garbage(void **state)
{
    tr_envelope in = {.method = "troupe.v1.Head/Ping"};
    ProtobufCMessage *msg = NULL;
    tr_envelope env;
    tr_err err = {0};
    uint8_t *buf = NULL;
    size_t n = encode(&in, &buf);
    uint8_t *longer = malloc(n + 2);

    assert_non_null(longer);
    memcpy(longer, buf, n);
    longer[n] = 0xff; /* a tag varint that never ends */
    longer[n + 1] = 0xff;
    TR_ASSERT_FAILS(tr_envelope_decode_request(longer, n + 2, &msg, &env, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "malformed request envelope");
    assert_null(msg);
    free(longer);
    free(buf);
}

static void check_method_refused(const char *method)
{
    tr_envelope in = {.method = method, .request_id = 5}; /* never an empty frame */
    ProtobufCMessage *msg = NULL;
    tr_envelope env;
    tr_err err = {0};
    uint8_t *buf = NULL;
    size_t n = encode(&in, &buf);
    int rv = tr_envelope_decode_request(buf, n, &msg, &env, &err);

    if (rv != TROUPE_INVALID_ARGUMENT) {
        fail_msg("method \"%s\" (%zu bytes): expected INVALID_ARGUMENT, got %s", method, strlen(method),
                 troupe_strerror(rv));
    }
    TR_ASSERT_CONTAINS(err.msg, "no valid method name");
    assert_cleared(msg, &env);
    free(buf);
}

static void bad_method_names(void **state)
{
    char long_name[130];

    check_method_refused("");
    check_method_refused("has space");
    check_method_refused("tab\there");
    check_method_refused("del\x7f");
    check_method_refused("high\xc3\xa9");
    check_method_refused("nl\n");
    memset(long_name, 'm', 129);
    long_name[129] = '\0';
    check_method_refused(long_name);
}

static void method_length_limit(void **state)
{
    char name[129];
    tr_envelope in = {.method = name};
    ProtobufCMessage *msg = NULL;
    tr_envelope env;
    tr_err err = {0};
    uint8_t *buf = NULL;
    size_t n;

    memset(name, 'm', 128);
    name[128] = '\0';
    n = encode(&in, &buf);
    TR_ASSERT_OK(tr_envelope_decode_request(buf, n, &msg, &env, &err), &err);
    assert_int_equal(strlen(env.method), 128);
    protobuf_c_message_free_unpacked(msg, NULL);
    free(buf);
}

/* A frame with only unknown fields (no method) is a Request with an empty
 * method, so it is refused for its method, not accepted. */
static void missing_method(void **state)
{
    static const uint8_t only_id[] = {0x10, 0x2a}; /* request_id = 42 */
    ProtobufCMessage *msg = NULL;
    tr_envelope env;
    tr_err err = {0};

    TR_ASSERT_FAILS(tr_envelope_decode_request(only_id, sizeof(only_id), &msg, &env, &err),
                    TROUPE_INVALID_ARGUMENT, &err, "no valid method name");
    assert_null(msg);
}

static void reply_roundtrip(void **state)
{
    static const uint8_t payload[] = {1, 2, 3, 0, 255};
    tr_err err = {0};
    uint8_t *buf = NULL;
    size_t n = 0;
    Troupe__V1__Reply *r;

    TR_ASSERT_OK(tr_envelope_encode_reply(99, TROUPE_NOT_FOUND, "node 3 not found", payload, sizeof(payload),
                                          &buf, &n, &err),
                 &err);
    r = troupe__v1__reply__unpack(NULL, n, buf);
    assert_non_null(r);
    assert_true(r->request_id == 99);
    assert_int_equal(r->code, TROUPE_NOT_FOUND);
    assert_string_equal(r->message, "node 3 not found");
    assert_int_equal(r->payload.len, sizeof(payload));
    assert_memory_equal(r->payload.data, payload, sizeof(payload));
    troupe__v1__reply__free_unpacked(r, NULL);
    free(buf);
}

static void reply_null_message(void **state)
{
    tr_err err = {0};
    uint8_t *buf = NULL;
    size_t n = 0;
    Troupe__V1__Reply *r;

    TR_ASSERT_OK(tr_envelope_encode_reply(0, TROUPE_OK, NULL, NULL, 0, &buf, &n, &err), &err);
    assert_non_null(buf); /* an all-default reply packs to 0 bytes but is still a buffer */
    r = troupe__v1__reply__unpack(NULL, n, buf);
    assert_non_null(r);
    assert_int_equal(r->code, TROUPE_OK);
    assert_string_equal(r->message, "");
    assert_int_equal(r->payload.len, 0);
    troupe__v1__reply__free_unpacked(r, NULL);
    free(buf);
}

/* reply_in_place: the server packs a reply's payload straight into the frame
 * (tr_envelope_reply_write); the bytes must be those of packing the payload
 * first and then the envelope, for payloads around the varint length
 * boundaries (127/128 bytes, 16383/16384), none, and an empty message. */
static void reply_in_place(void **state)
{
    static const size_t sizes[] = {0, 1, 120, 125, 126, 127, 128, 300, 16380, 16381, 16382, 16383, 16384, 70000};
    static const int codes[] = {TROUPE_OK, TROUPE_NOT_FOUND, -1};

    (void)state;
    for (size_t k = 0; k < sizeof(codes) / sizeof(codes[0]); k++) {
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            Troupe__V1__PingReply pay = TROUPE__V1__PING_REPLY__INIT;
            uint8_t *data = malloc(sizes[i] + 1), *want = NULL, *packed, *got;
            size_t plen, n = 0, size, wrote;
            tr_err err = {0};

            memset(data, 0x5a, sizes[i] + 1);
            pay.data.data = data;
            pay.data.len = sizes[i];
            plen = troupe__v1__ping_reply__get_packed_size(&pay);
            packed = malloc(plen + 1);
            troupe__v1__ping_reply__pack(&pay, packed);
            TR_ASSERT_OK(tr_envelope_encode_reply(7 + i, codes[k], codes[k] ? "why" : NULL, packed, plen, &want, &n,
                                                  &err),
                         &err);
            size = tr_envelope_reply_size(7 + i, codes[k], codes[k] ? "why" : NULL, plen);
            assert_int_equal(size, n);
            got = malloc(size + 1);
            wrote = tr_envelope_reply_write(got, 7 + i, codes[k], codes[k] ? "why" : NULL, &pay.base, plen);
            assert_int_equal(wrote, n);
            assert_memory_equal(got, want, n);
            free(got);
            free(want);
            free(packed);
            free(data);
        }
    }
    /* No payload message at all: the envelope alone. */
    {
        uint8_t *want = NULL, got[64];
        size_t n = 0;
        tr_err err = {0};
        TR_ASSERT_OK(tr_envelope_encode_reply(3, TROUPE_OK, "", NULL, 0, &want, &n, &err), &err);
        assert_int_equal(tr_envelope_reply_size(3, TROUPE_OK, "", 0), n);
        assert_int_equal(tr_envelope_reply_write(got, 3, TROUPE_OK, "", NULL, 0), n);
        assert_memory_equal(got, want, n);
        free(want);
    }
}

/* decode_into_arena: a request decoded through another allocator (the
 * server's per-call arena) reads the same and is freed with it. */
static void decode_into_arena(void **state)
{
    static const uint8_t payload[] = {0x0a, 0x03, 'a', 'b', 'c'};
    tr_envelope in = {.method = "troupe.v1.Head/Heartbeat", .request_id = 42, .token = "tr1.n.1.abc",
                      .payload = payload, .payload_len = sizeof(payload)};
    tr_envelope out;
    ProtobufCMessage *msg = NULL;
    tr_err err = {0};
    uint8_t *buf = NULL;
    size_t n = encode(&in, &buf);
    tr_arena a;

    (void)state;
    tr_arena_init(&a);
    TR_ASSERT_OK(tr_envelope_decode_request_in(buf, n, &a.pb, &msg, &out, &err), &err);
    assert_string_equal(out.method, in.method);
    assert_string_equal(out.token, in.token);
    assert_true(out.request_id == 42);
    assert_memory_equal(out.payload, payload, sizeof(payload));
    /* Everything it decoded lies in the arena's block. */
    assert_true((uint8_t *)msg >= a.block && (uint8_t *)msg < a.block + a.cap);
    assert_true((const uint8_t *)out.token >= a.block && (const uint8_t *)out.token < a.block + a.cap);
    assert_null(a.big);
    /* A malformed one fails and leaves nothing behind but the block. */
    TR_ASSERT_STATUS(tr_envelope_decode_request_in(buf, n - 1, &a.pb, &msg, &out, &err), TROUPE_INVALID_ARGUMENT,
                     &err);
    tr_arena_fini(&a);
    free(buf);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(roundtrip),
        cmocka_unit_test(null_token_and_empty_payload),
        cmocka_unit_test(empty_frame),
        cmocka_unit_test(garbage_frame),
        cmocka_unit_test(truncated_frame),
        cmocka_unit_test(trailing_garbage),
        cmocka_unit_test(bad_method_names),
        cmocka_unit_test(method_length_limit),
        cmocka_unit_test(missing_method),
        cmocka_unit_test(reply_roundtrip),
        cmocka_unit_test(reply_null_message),
        cmocka_unit_test(reply_in_place),
        cmocka_unit_test(decode_into_arena),
    };
    return TR_TEST_MAIN("unit.common.envelope", tests, argc, argv);
}
