/* envelope.c - encode/decode the troupe.v1 Request/Reply envelope.
 *
 * Pure functions, no I/O: the fuzz target drives tr_envelope_decode_request
 * directly with arbitrary bytes. */
#include <stdlib.h>
#include <string.h>

#include "rpc.h"
#include "troupe/v1/troupe.pb-c.h"

#define METHOD_MAX 128

static int method_ok(const char *m)
{
    size_t n = strlen(m);
    if (n == 0 || n > METHOD_MAX) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)m[i];
        if (c <= 0x20 || c >= 0x7f) {
            return 0;
        }
    }
    return 1;
}

int tr_envelope_decode_request(const uint8_t *buf, size_t len, ProtobufCMessage **msg, tr_envelope *env,
                               tr_err *err)
{
    return tr_envelope_decode_request_in(buf, len, NULL, msg, env, err);
}

int tr_envelope_decode_request_in(const uint8_t *buf, size_t len, ProtobufCAllocator *alloc, ProtobufCMessage **msg,
                                  tr_envelope *env, tr_err *err)
{
    Troupe__V1__Request *req;

    *msg = NULL;
    memset(env, 0, sizeof(*env));
    if (len == 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "empty request frame");
    }
    req = troupe__v1__request__unpack(alloc, len, buf);
    if (req == NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "malformed request envelope (%zu bytes)", len);
    }
    if (!method_ok(req->method)) {
        troupe__v1__request__free_unpacked(req, alloc);
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "request envelope has no valid method name");
    }
    env->method = req->method;
    env->request_id = req->request_id;
    env->timeout_ms = req->timeout_ms;
    env->token = req->token;
    env->payload = req->payload.data;
    env->payload_len = req->payload.len;
    *msg = &req->base;
    return TROUPE_OK;
}

int tr_envelope_encode_request(const tr_envelope *env, uint8_t **buf, size_t *len, tr_err *err)
{
    Troupe__V1__Request req = TROUPE__V1__REQUEST__INIT;
    size_t n;

    req.method = (char *)env->method;
    req.request_id = env->request_id;
    req.timeout_ms = env->timeout_ms;
    req.token = (char *)(env->token ? env->token : "");
    req.payload.data = (uint8_t *)env->payload;
    req.payload.len = env->payload_len;
    n = troupe__v1__request__get_packed_size(&req);
    *buf = malloc(n ? n : 1);
    if (*buf == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory packing a request");
    }
    *len = troupe__v1__request__pack(&req, *buf);
    return TROUPE_OK;
}

int tr_envelope_encode_reply(uint64_t request_id, int code, const char *message, const uint8_t *payload,
                             size_t payload_len, uint8_t **buf, size_t *len, tr_err *err)
{
    Troupe__V1__Reply rep = TROUPE__V1__REPLY__INIT;
    size_t n;

    rep.request_id = request_id;
    rep.code = code;
    rep.message = (char *)(message ? message : "");
    rep.payload.data = (uint8_t *)payload;
    rep.payload.len = payload_len;
    n = troupe__v1__reply__get_packed_size(&rep);
    *buf = malloc(n ? n : 1);
    if (*buf == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory packing a reply");
    }
    *len = troupe__v1__reply__pack(&rep, *buf);
    return TROUPE_OK;
}

/* The reply's payload is field 4 (bytes): tag, length, the packed message. */
#define REPLY_PAYLOAD_TAG ((4u << 3) | 2u)

static size_t varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t varint_put(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

/* reply_head: the Reply without its payload (fields 1-3, in field order, so
 * that the payload written after them gives the bytes protobuf-c would). */
static Troupe__V1__Reply reply_head(uint64_t request_id, int code, const char *message)
{
    Troupe__V1__Reply rep = TROUPE__V1__REPLY__INIT;
    rep.request_id = request_id;
    rep.code = code;
    rep.message = (char *)(message ? message : "");
    return rep;
}

size_t tr_envelope_reply_size(uint64_t request_id, int code, const char *message, size_t payload_len)
{
    Troupe__V1__Reply rep = reply_head(request_id, code, message);
    size_t n = troupe__v1__reply__get_packed_size(&rep);

    if (payload_len > 0) { /* proto3: an empty bytes field is not written */
        n += 1 + varint_size(payload_len) + payload_len;
    }
    return n;
}

size_t tr_envelope_reply_write(uint8_t *buf, uint64_t request_id, int code, const char *message,
                               const ProtobufCMessage *payload, size_t payload_len)
{
    Troupe__V1__Reply rep = reply_head(request_id, code, message);
    size_t n = troupe__v1__reply__pack(&rep, buf);

    if (payload != NULL && payload_len > 0) {
        buf[n++] = REPLY_PAYLOAD_TAG;
        n += varint_put(buf + n, payload_len);
        n += protobuf_c_message_pack(payload, buf + n);
    }
    return n;
}
