/* rpc.h - troupe.v1 unary RPC over nng REQ/REP ("gRPC-style").
 *
 * Wire: one nng message is a packed troupe.v1.Request or troupe.v1.Reply
 * (proto/troupe/v1/troupe.proto). Status codes are gRPC's (troupe_status).
 *
 * Server: a REP socket with a pool of contexts, each driven by its own aio
 * callback (nng's async server pattern), so one slow call never blocks another.
 * A handler either replies before it returns, or defers the call (long waits:
 * rendezvous, log follow) and replies later from any thread; a deferred call
 * holds its context, and the server opens another so receiving never stalls.
 * Deferred calls that reach their deadline are answered DEADLINE_EXCEEDED by
 * the server's sweeper.
 *
 * Client: a REQ socket; each call uses its own context, so one client handle
 * may be used from many threads. Every call has a deadline. Only calls marked
 * idempotent are retried (with exponential backoff, within the deadline).
 */
#ifndef TR_RPC_H
#define TR_RPC_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* ---- shared -------------------------------------------------------------- */

/* tr_rpc_from_nng maps an nng error to a troupe_status (the one place it is
 * done) and writes "what: <nng message>" into err. */
int tr_rpc_from_nng(int nng_rv, const char *what, tr_err *err);

#define TR_RPC_DEFAULT_MAX_FRAME (4u * 1024u * 1024u)

/* ---- server -------------------------------------------------------------- */

typedef struct tr_rpc_server tr_rpc_server;
typedef struct tr_rpc_call tr_rpc_call;

/* A handler runs on an nng worker thread. It must reply (tr_rpc_reply*) or
 * defer (tr_rpc_defer) before returning. */
typedef void (*tr_rpc_handler)(tr_rpc_call *call, void *user);

typedef struct tr_rpc_method {
    const char *name; /* "troupe.v1.Head/RegisterNode"; NULL ends the table */
    tr_rpc_handler fn;
} tr_rpc_method;

typedef struct tr_rpc_server_opts {
    const char *url;             /* tcp://host:port or ipc:///path */
    const char *token;           /* NULL or "" = no auth; borrowed for the server's life */
    size_t max_frame;            /* frames larger are dropped by nng; 0 = default */
    int contexts;                /* receiving contexts; 0 = 64 */
    uint32_t default_timeout_ms; /* for requests that carry none; 0 = 30000 */
    uint32_t max_timeout_ms;     /* clamp on request deadlines; 0 = 24 h */
    const tr_rpc_method *methods;
    void *user; /* passed to handlers */
} tr_rpc_server_opts;

/* tr_rpc_server_start listens on opts->url and starts serving. On success *out
 * owns the server; stop it with tr_rpc_server_stop. The methods table is
 * borrowed and must outlive the server. */
int tr_rpc_server_start(const tr_rpc_server_opts *opts, tr_rpc_server **out, tr_err *err);

/* tr_rpc_server_stop closes the socket, answers deferred calls UNAVAILABLE,
 * waits for running callbacks and frees the server. NULL is a no-op. Must not
 * be called from a handler. */
void tr_rpc_server_stop(tr_rpc_server *srv);

/* tr_rpc_server_served returns the number of requests answered so far. */
uint64_t tr_rpc_server_served(const tr_rpc_server *srv);

/* Accessors valid until the call is answered (and, for deferred calls, until
 * the last reference is released). */
const char *tr_rpc_call_method(const tr_rpc_call *call);
uint64_t tr_rpc_call_id(const tr_rpc_call *call);
int64_t tr_rpc_call_deadline(const tr_rpc_call *call); /* tr_now_ms() clock */

/* tr_rpc_unpack decodes the request payload as desc. On failure it answers the
 * call INVALID_ARGUMENT itself and returns NULL; on success the caller frees the
 * message with protobuf_c_message_free_unpacked(msg, NULL). */
ProtobufCMessage *tr_rpc_unpack(tr_rpc_call *call, const ProtobufCMessageDescriptor *desc);

/* tr_rpc_reply answers OK with msg packed as payload (msg may be NULL for an
 * empty payload). Returns FAILED_PRECONDITION when the call was already
 * answered (e.g. by the deadline sweeper). Thread-safe. */
int tr_rpc_reply(tr_rpc_call *call, const ProtobufCMessage *msg);

/* tr_rpc_reply_error answers with a non-OK code and a message. Thread-safe. */
int tr_rpc_reply_error(tr_rpc_call *call, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* tr_rpc_defer keeps the call open after the handler returns and gives the
 * caller one reference: answer it later, then drop the reference with
 * tr_rpc_call_release. If the deadline passes first the server answers
 * DEADLINE_EXCEEDED; on_expire (may be NULL) is then called, from the sweeper
 * thread and without server locks held, so the owner can forget the call (it
 * must still release its reference). At tr_rpc_server_stop, deferred calls are
 * answered UNAVAILABLE and on_expire runs for each: release there, because
 * the call is freed when stop returns. */
void tr_rpc_defer(tr_rpc_call *call, void (*on_expire)(tr_rpc_call *call, void *arg), void *arg);

/* tr_rpc_call_release drops a reference taken by tr_rpc_defer. */
void tr_rpc_call_release(tr_rpc_call *call);

/* tr_rpc_call_answered reports whether the call has been answered. */
int tr_rpc_call_answered(tr_rpc_call *call);

/* ---- client -------------------------------------------------------------- */

typedef struct tr_rpc_client tr_rpc_client;

typedef struct tr_rpc_client_opts {
    const char *url;
    const char *token;   /* copied */
    int wait_for_server; /* 0: fail at open when the server is unreachable;
                          * 1: connect in the background (agents that outlive the head) */
    size_t max_frame;    /* 0 = default */
} tr_rpc_client_opts;

enum {
    TR_RPC_IDEMPOTENT = 1u << 0, /* safe to retry on UNAVAILABLE */
};

/* tr_rpc_client_open dials the server. On success *out owns the client; close
 * it with tr_rpc_client_close. UNAVAILABLE with "cannot reach URL: reason" when
 * wait_for_server is 0 and nothing answers. */
int tr_rpc_client_open(const tr_rpc_client_opts *opts, tr_rpc_client **out, tr_err *err);

/* tr_rpc_client_close closes the client; NULL is a no-op. No call may be in
 * flight on it. */
void tr_rpc_client_close(tr_rpc_client *c);

/* tr_rpc_client_shutdown closes the socket so that calls in flight on other
 * threads return at once (UNAVAILABLE/CANCELLED); the handle must still be
 * freed with tr_rpc_client_close after those threads are done with it. */
void tr_rpc_client_shutdown(tr_rpc_client *c);

/* tr_rpc_client_call sends req to method and waits up to timeout_ms for the
 * reply. On OK, *reply (when reply_desc is not NULL) is a message the caller
 * frees with protobuf_c_message_free_unpacked. On error, *reply is NULL and err
 * holds the server's (or transport's) message. Thread-safe. */
int tr_rpc_client_call(tr_rpc_client *c, const char *method, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *reply_desc, ProtobufCMessage **reply,
                       uint32_t timeout_ms, unsigned flags, tr_err *err);

/* tr_rpc_client_call_raw is tr_rpc_client_call with payload bytes instead of
 * messages (benchmarks, fuzz corpora). *reply_payload is malloc'ed (free()). */
int tr_rpc_client_call_raw(tr_rpc_client *c, const char *method, const uint8_t *payload, size_t len,
                           uint8_t **reply_payload, size_t *reply_len, uint32_t timeout_ms, unsigned flags,
                           tr_err *err);

/* ---- envelope codec (pure; used by both sides and by the fuzzer) ---------- */

typedef struct tr_envelope {
    const char *method; /* borrowed from the decoded message */
    uint64_t request_id;
    uint32_t timeout_ms;
    const char *token;
    const uint8_t *payload;
    size_t payload_len;
} tr_envelope;

/* tr_envelope_decode_request parses a Request frame. On OK *msg owns the
 * decoded message (free with protobuf_c_message_free_unpacked) and env borrows
 * from it. Rejects empty or oversized methods and trailing garbage. */
int tr_envelope_decode_request(const uint8_t *buf, size_t len, ProtobufCMessage **msg, tr_envelope *env,
                               tr_err *err);

/* tr_envelope_encode_request packs a Request into a malloc'ed buffer. */
int tr_envelope_encode_request(const tr_envelope *env, uint8_t **buf, size_t *len, tr_err *err);

/* tr_envelope_encode_reply packs a Reply into a malloc'ed buffer. */
int tr_envelope_encode_reply(uint64_t request_id, int code, const char *message, const uint8_t *payload,
                             size_t payload_len, uint8_t **buf, size_t *len, tr_err *err);

#endif
