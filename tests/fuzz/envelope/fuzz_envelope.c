/* fuzz_envelope.c - libFuzzer target for request decoding.
 *
 * Each input is one nng frame as troupe-head receives it. The target runs
 * tr_envelope_decode_request (common/envelope.c) on it and, when the envelope
 * is accepted, unpacks its payload as the request message of the method it
 * names, found through the protobuf-c service descriptors so every troupe.v1
 * request type is covered without a hand-kept list. A method no service knows
 * has its payload tried against every request type, so the fuzzer's payload
 * mutations reach all decoders whatever the method string says.
 *
 * Besides memory errors (ASan) and undefined behaviour (UBSan), it checks
 * properties and aborts when one fails:
 *   - a refused frame leaves *msg NULL, env zeroed and err->code = the status;
 *   - an accepted method is 1..128 printable ASCII characters without spaces;
 *   - re-encoding an accepted envelope and decoding it again gives the same
 *     fields (method, id, timeout, token, payload);
 *   - a payload that unpacks re-packs to the size protobuf-c predicted, and the
 *     re-packed bytes unpack again and pack to the same bytes (normal form). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.h"
#include "troupe/v1/troupe.pb-c.h"

static const ProtobufCServiceDescriptor *const services[] = {
    &troupe__v1__head__descriptor,
};
#define NSERVICES (sizeof(services) / sizeof(services[0]))

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_envelope: property failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* input_for maps "troupe.v1.Head/Ping" to troupe.v1.PingRequest's descriptor. */
static const ProtobufCMessageDescriptor *input_for(const char *method)
{
    const char *slash = strchr(method, '/');

    if (slash == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < NSERVICES; i++) {
        size_t n = strlen(services[i]->name);
        if ((size_t)(slash - method) == n && memcmp(method, services[i]->name, n) == 0) {
            const ProtobufCMethodDescriptor *m =
                protobuf_c_service_descriptor_get_method_by_name(services[i], slash + 1);
            return m ? m->input : NULL;
        }
    }
    return NULL;
}

/* pack packs m into a malloc'ed buffer, checking the predicted size. */
static uint8_t *pack(const ProtobufCMessage *m, size_t *len)
{
    size_t want = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(want ? want : 1);

    CHECK(buf != NULL);
    *len = protobuf_c_message_pack(m, buf);
    CHECK(*len == want);
    return buf;
}

/* has_unknown_fields reports unknown fields in m or any message inside it. */
static int has_unknown_fields(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;

    if (m->n_unknown_fields > 0) {
        return 1;
    }
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const char *base = (const char *)m + f->offset;
        if (f->type != PROTOBUF_C_TYPE_MESSAGE) {
            continue;
        }
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)((const char *)m + f->quantifier_offset);
            ProtobufCMessage *const *arr = *(ProtobufCMessage *const *const *)base;
            for (size_t k = 0; k < n; k++) {
                if (has_unknown_fields(arr[k])) {
                    return 1;
                }
            }
        } else if (*(ProtobufCMessage *const *)base != NULL && has_unknown_fields(*(ProtobufCMessage *const *)base)) {
            return 1;
        }
    }
    return 0;
}

static void check_payload(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, n, p);
    ProtobufCMessage *m2;
    uint8_t *b1, *b2;
    size_t n1, n2;

    if (m == NULL) {
        return;
    }
    CHECK(protobuf_c_message_check(m));
    b1 = pack(m, &n1);
    m2 = protobuf_c_message_unpack(d, NULL, n1, b1);
    if (m2 == NULL) {
        /* protobuf-c 1.4.1 accepts some unknown fields (e.g. field number 0)
         * that it then writes back in a form it refuses to read. The head
         * answers INVALID_ARGUMENT when its copy fails; here, only such a
         * message may fail the round trip. */
        CHECK(has_unknown_fields(m));
        free(b1);
        protobuf_c_message_free_unpacked(m, NULL);
        return;
    }
    b2 = pack(m2, &n2);
    CHECK(n1 == n2 && memcmp(b1, b2, n1) == 0);
    free(b2);
    free(b1);
    protobuf_c_message_free_unpacked(m2, NULL);
    protobuf_c_message_free_unpacked(m, NULL);
}

static int method_ok(const char *m)
{
    size_t n = strlen(m);
    if (n == 0 || n > 128) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)m[i] <= 0x20 || (unsigned char)m[i] >= 0x7f) {
            return 0;
        }
    }
    return 1;
}

/* check_reencode encodes env again and decodes the result. */
static void check_reencode(const tr_envelope *env)
{
    ProtobufCMessage *msg = NULL;
    tr_envelope back;
    tr_err err;
    uint8_t *buf = NULL;
    size_t len = 0;

    CHECK(tr_envelope_encode_request(env, &buf, &len, &err) == TROUPE_OK);
    CHECK(tr_envelope_decode_request(buf, len, &msg, &back, &err) == TROUPE_OK);
    CHECK(strcmp(back.method, env->method) == 0);
    CHECK(back.request_id == env->request_id);
    CHECK(back.timeout_ms == env->timeout_ms);
    CHECK(strcmp(back.token, env->token) == 0);
    CHECK(back.payload_len == env->payload_len);
    CHECK(env->payload_len == 0 || memcmp(back.payload, env->payload, env->payload_len) == 0);
    protobuf_c_message_free_unpacked(msg, NULL);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ProtobufCMessage *msg = (ProtobufCMessage *)1; /* must be overwritten */
    const ProtobufCMessageDescriptor *d;
    tr_envelope env;
    tr_err err;
    int rv;

    memset(&env, 0x5a, sizeof(env));
    err.code = -1;
    rv = tr_envelope_decode_request(data, size, &msg, &env, &err);
    if (rv != TROUPE_OK) {
        CHECK(rv == TROUPE_INVALID_ARGUMENT);
        CHECK(err.code == rv && err.msg[0] != '\0');
        CHECK(msg == NULL && env.method == NULL && env.token == NULL && env.payload == NULL);
        CHECK(env.payload_len == 0 && env.request_id == 0 && env.timeout_ms == 0);
        return 0;
    }
    CHECK(msg != NULL && env.token != NULL);
    CHECK(method_ok(env.method));
    CHECK(env.payload_len == 0 || env.payload != NULL);
    check_reencode(&env);

    d = input_for(env.method);
    if (d != NULL) {
        check_payload(d, env.payload, env.payload_len);
    } else {
        for (size_t i = 0; i < NSERVICES; i++) {
            for (unsigned j = 0; j < services[i]->n_methods; j++) {
                check_payload(services[i]->methods[j].input, env.payload, env.payload_len);
            }
        }
    }
    protobuf_c_message_free_unpacked(msg, NULL);
    return 0;
}
