/* rpc.h - troupe.v1 unary RPC over nng REQ/REP ("gRPC-style").
 *
 * Wire: one nng message is a packed troupe.v1.Request or troupe.v1.Reply
 * (proto/troupe/v1/troupe.proto). Status codes are gRPC's (troupe_status).
 *
 * Server: a REP socket with a pool of contexts, each driven by its own aio
 * callback (nng's async server pattern). The callback only hands a received
 * request to a small pool of handler threads (nng's callbacks must not block),
 * one of which is kept for quick methods, so slow calls never hold up Ping.
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
/* A frame over max_frame but at most TR_RPC_FRAME_SLACK times it is read,
 * answered RESOURCE_EXHAUSTED, logged with the peer's address and the size,
 * and counted (tr_rpc_server_oversized). A larger one never reaches the
 * server: nng drops it and closes that connection (nng 1.5 reports nothing
 * the server could log). */
#define TR_RPC_FRAME_SLACK 2u

/* ---- server -------------------------------------------------------------- */

typedef struct tr_rpc_server tr_rpc_server;
typedef struct tr_rpc_call tr_rpc_call;

/* A handler runs on one of the server's handler threads (never on nng's own
 * callback threads, which only hand requests over). It must reply
 * (tr_rpc_reply*) or defer (tr_rpc_defer) before returning. */
typedef void (*tr_rpc_handler)(tr_rpc_call *call, void *user);

/* Credentials and scopes.
 *
 * Every call is authenticated before its method is looked up, and every
 * method is registered with the scopes allowed to call it (tr_rpc_method.scopes):
 *   admin  - the cluster credential (the head's `token`); may call every method
 *   user   - minted by `troupe token create --scope user`: the CLI and libtroupe
 *   node   - minted by `troupe token create --scope node`: one agent's own node
 *   worker - minted by the head per job and attempt: calls about its own job
 * A call whose credential's scope is not in the method's set is answered
 * PERMISSION_DENIED naming the scope it lacks. scopes = 0 means admin only, so
 * a method added without thinking about scopes is closed, not open.
 *
 * Finer checks ("its own job", "its own node") are the handler's: it reads
 * the caller with tr_rpc_call_principal. For worker methods use
 * tr_rpc_require_job below.
 *
 * Contract with the worker runtime (libtroupe's worker API): a worker reads
 * its credential from the file named by $TROUPE_CREDENTIALS (the whole file,
 * one trailing newline stripped), else from $TROUPE_TOKEN. A new worker-scoped
 * method (rendezvous, barriers, profile control, metrics) is one table entry
 *     {"troupe.v1.Head/Barrier", tr_head_barrier, TR_SCOPES_WORKER_JOB},
 * plus, in its handler, after unpacking the request:
 *     if (!tr_rpc_require_job(call, req->job_id)) { goto out; }  // answered
 * or, when the call speaks as one worker (it carries a WorkerRef),
 *     if (!tr_rpc_require_worker(call, from->job_id, from->worker)) { goto out; }
 */
enum {
    TR_SCOPE_ADMIN = 1u << 0,
    TR_SCOPE_USER = 1u << 1,
    TR_SCOPE_NODE = 1u << 2,
    TR_SCOPE_WORKER = 1u << 3,
};
#define TR_SCOPES_USER (TR_SCOPE_ADMIN | TR_SCOPE_USER)
#define TR_SCOPES_NODE (TR_SCOPE_ADMIN | TR_SCOPE_NODE)
/* users, and workers about their own job (the handler calls tr_rpc_require_job) */
#define TR_SCOPES_WORKER_JOB (TR_SCOPE_ADMIN | TR_SCOPE_USER | TR_SCOPE_WORKER)
#define TR_SCOPES_ANY (TR_SCOPE_ADMIN | TR_SCOPE_USER | TR_SCOPE_NODE | TR_SCOPE_WORKER)

typedef struct tr_rpc_principal {
    unsigned scope;   /* exactly one TR_SCOPE_* */
    uint64_t cred_id; /* minted user/node credentials: their id; 0 otherwise */
    uint64_t job_id;  /* worker credentials: the job */
    uint32_t attempt; /* worker credentials: the job's attempt */
    char worker[128]; /* worker credentials: the one worker it speaks for ("job7-policy-3") */
} tr_rpc_principal;

/* tr_rpc_auth_fn maps a presented token (never NULL, may be "") to a
 * principal, or returns UNAUTHENTICATED with a reason in err that names no
 * secret. Called on the handler threads, concurrently. */
typedef int (*tr_rpc_auth_fn)(void *user, const char *token, tr_rpc_principal *out, tr_err *err);

/* tr_rpc_scope_name returns "admin", "user", "node", "worker" (one bit). */
const char *tr_rpc_scope_name(unsigned scope);

/* A method flag, or-ed into tr_rpc_method.scopes (no scope bit): the
 * handler answers from the request alone, takes no lock of the owner's and
 * never waits, so it may run on the handler thread kept back from every other
 * method and is answered while those are all busy (Ping). */
#define TR_METHOD_QUICK (1u << 16)

typedef struct tr_rpc_method {
    const char *name; /* "troupe.v1.Head/RegisterNode"; NULL ends the table */
    tr_rpc_handler fn;
    unsigned scopes; /* TR_SCOPE_* allowed to call it (0 = admin only), plus TR_METHOD_QUICK */
} tr_rpc_method;

/* TLS (tls+tcp:// URLs; nng's TLS transport). Files are PEM. */
enum {
    TR_TLS_CLIENT_NONE = 0,  /* server: no client certificates */
    TR_TLS_CLIENT_NODES = 1, /* server: node credentials (agents) must come over a connection whose client
                              * certificate verified against ca_file; others need none */
    TR_TLS_CLIENT_ALL = 2,   /* server: every client must present one (the handshake fails otherwise) */
};
typedef struct tr_rpc_tls {
    const char *ca_file;     /* client: the CA that signed the server's certificate (required);
                              * server: the CA that signs client certificates (with client_auth) */
    const char *cert_file;   /* own certificate (chain); required on a server */
    const char *key_file;    /* own private key (unencrypted) */
    const char *server_name; /* client: the name the server's certificate must carry; NULL = the URL's host */
    int client_auth;         /* server: TR_TLS_CLIENT_* */
} tr_rpc_tls;

typedef struct tr_rpc_server_opts {
    const char *url;             /* tcp://host:port, tls+tcp://host:port or ipc:///path */
    tr_rpc_tls tls;              /* for tls+tcp:// */
    const char *token;           /* admin credential; NULL or "" = no auth (every caller is admin) */
    tr_rpc_auth_fn auth;         /* other credentials, when token is set; NULL = admin only */
    void *auth_user;
    size_t max_frame;            /* larger frames are refused, see TR_RPC_FRAME_SLACK; 0 = default */
    int contexts;                /* receiving contexts; 0 = 64 */
    int threads;                 /* handler threads; 0 = 4. One of them runs only TR_METHOD_QUICK methods
                                  * while the others are busy */
    int queue;                   /* requests waiting for a busy handler thread at most; 0 = contexts (never
                                  * reached). One more is answered UNAVAILABLE ("busy, retry") at once */
    uint32_t default_timeout_ms; /* for requests that carry none; 0 = 30000 */
    uint32_t max_timeout_ms;     /* clamp on request deadlines; 0 = 24 h */
    const tr_rpc_method *methods;
    void *user; /* passed to handlers */
    /* Called (on an nng thread, with no server lock held) when a peer's
     * connection closes, with the pipe id tr_rpc_call_pipe gave for its
     * calls; NULL = not wanted. Must not call back into the server. */
    void (*on_pipe_closed)(uint32_t pipe, void *user);
    /* Bounds before authentication (rpc_conns.h says how they work). */
    int max_connections;         /* connection cap; 0 = 16384. Lowered to fit the
                                  * descriptor limit less fd_reserve */
    int fd_reserve;              /* descriptors kept for the owner's own files; 0 = 128 */
    size_t inflight_budget;      /* frame bytes strangers may hold together; 0 = 64 MiB */
    size_t frame_floor;          /* the per-frame limit never drops below it; 0 = 64 KiB */
    uint32_t preauth_timeout_ms; /* close a connection with no authenticated call by then; 0 = 10 s */
    uint32_t idle_timeout_ms;    /* close an authenticated connection idle this long; 0 = 5 min */
} tr_rpc_server_opts;

/* Connection counters (tr_rpc_server_conn_stats). */
typedef struct tr_rpc_conn_stats {
    uint64_t open;         /* connections now */
    uint64_t unauthenticated; /* of which never made an authenticated call */
    uint64_t max;          /* the effective cap */
    uint64_t refused;      /* refused at the cap (every connection had authenticated) */
    uint64_t displaced;    /* strangers closed at the cap to make room */
    uint64_t closed_idle;  /* closed by preauth_timeout_ms / idle_timeout_ms */
    uint64_t frame_limit;  /* per-frame receive limit now (bytes) */
} tr_rpc_conn_stats;

/* tr_rpc_server_start listens on opts->url and starts serving. On success *out
 * owns the server; stop it with tr_rpc_server_stop. The methods table is
 * borrowed and must outlive the server. */
int tr_rpc_server_start(const tr_rpc_server_opts *opts, tr_rpc_server **out, tr_err *err);

/* tr_rpc_server_stop answers deferred calls and requests still waiting for a
 * handler thread UNAVAILABLE, lets running handlers finish, waits until every
 * reference tr_rpc_defer gave is released (an owner may still be between its
 * answer and its release, on its own thread), closes the socket, waits for
 * running callbacks and frees the server. The wait is bounded (30 s, logged
 * every 5 s): a reference still held then is logged and the server is left
 * allocated (socket closed) rather than freed under its owner. NULL is a
 * no-op. Must not be called from a handler, nor while holding a lock an
 * owner needs to release its calls. */
void tr_rpc_server_stop(tr_rpc_server *srv);

/* tr_rpc_server_served returns the number of requests answered so far. */
uint64_t tr_rpc_server_served(const tr_rpc_server *srv);

/* tr_rpc_server_busy returns the number of requests answered UNAVAILABLE
 * because opts.queue requests were already waiting for a handler thread, and
 * of those that waited past their deadline (answered DEADLINE_EXCEEDED
 * without running). */
uint64_t tr_rpc_server_busy(const tr_rpc_server *srv, uint64_t *expired_waiting);

/* tr_rpc_server_oversized returns the number of oversized frames refused. */
uint64_t tr_rpc_server_oversized(const tr_rpc_server *srv);
/* tr_rpc_server_oversized_replies returns the number of replies that came out
 * larger than max_frame: each was replaced by RESOURCE_EXHAUSTED ("reply of N
 * bytes exceeds max_frame_bytes M; not sent") and logged, never sent. */
uint64_t tr_rpc_server_oversized_replies(const tr_rpc_server *srv);

/* Per-method counts and latency, for the head's /metrics (server/http).
 * Latency is from the request's arrival to its answer, so a deferred call
 * (a long poll) counts the time it was held. Buckets are upper bounds in
 * seconds (Prometheus "le"); the last, +Inf, is implicit. */
#define TR_RPC_LATENCY_BUCKETS 14
extern const double tr_rpc_latency_bounds[TR_RPC_LATENCY_BUCKETS];
#define TR_RPC_CODES 17 /* gRPC status codes 0..16 */

typedef struct tr_rpc_method_stats {
    const char *method;                           /* the table's name; "other": refused before a method */
    uint64_t by_code[TR_RPC_CODES];               /* answers by status code */
    uint64_t buckets[TR_RPC_LATENCY_BUCKETS + 1]; /* answers per bucket, not cumulative; last = +Inf */
    double sum_s;                                 /* total latency */
} tr_rpc_method_stats;

/* tr_rpc_server_stats copies the counters of up to n entries into out: one
 * per method of the table, in its order, then "other" (frames refused before
 * a method was known: undecodable, unauthenticated, unknown method). Returns
 * the number of entries there are (methods + 1), which may exceed n.
 * Thread-safe; method names are borrowed from the server's table. */
size_t tr_rpc_server_stats(tr_rpc_server *srv, tr_rpc_method_stats *out, size_t n);
/* tr_rpc_server_conn_stats copies the connection counters. */
void tr_rpc_server_conn_stats(tr_rpc_server *srv, tr_rpc_conn_stats *out);

/* Accessors valid until the call is answered (and, for deferred calls, until
 * the last reference is released). */
const char *tr_rpc_call_method(const tr_rpc_call *call);
/* tr_rpc_call_pipe names the connection the request came in on (nng pipe id;
 * ids are not reused while the server runs). */
uint32_t tr_rpc_call_pipe(const tr_rpc_call *call);
uint64_t tr_rpc_call_id(const tr_rpc_call *call);
int64_t tr_rpc_call_deadline(const tr_rpc_call *call); /* tr_now_ms() clock */
/* tr_rpc_call_server: the server the call arrived on. Handlers use it rather
 * than a pointer their owner stores after tr_rpc_server_start returns: calls
 * can arrive before that store. */
tr_rpc_server *tr_rpc_call_server(const tr_rpc_call *call);

/* tr_rpc_call_principal returns who made the call (valid like the accessors
 * above). Without auth every caller is admin. */
const tr_rpc_principal *tr_rpc_call_principal(const tr_rpc_call *call);

/* tr_rpc_require_job returns 1 when the caller may act on job_id: any
 * non-worker credential, or a worker credential of that job. Otherwise it
 * answers the call PERMISSION_DENIED itself and returns 0. */
int tr_rpc_require_job(tr_rpc_call *call, uint64_t job_id);

/* tr_rpc_require_worker is tr_rpc_require_job for a call that speaks as one
 * worker (a report, a rendezvous, a control poll): a worker credential is
 * also held to the worker it was minted for, so a rank cannot report as its
 * neighbour. Answers PERMISSION_DENIED itself and returns 0 otherwise. */
int tr_rpc_require_worker(tr_rpc_call *call, uint64_t job_id, const char *worker);

/* tr_rpc_unpack decodes the request payload as desc. On failure it answers the
 * call INVALID_ARGUMENT itself and returns NULL; on success the caller frees the
 * message with protobuf_c_message_free_unpacked(msg, NULL). */
ProtobufCMessage *tr_rpc_unpack(tr_rpc_call *call, const ProtobufCMessageDescriptor *desc);

/* tr_rpc_unpack_scratch is tr_rpc_unpack decoding into the call's scratch
 * memory (arena.h) instead of malloc: for the hot methods (a heartbeat's
 * eight GpuStats were 17 mallocs and frees). The message lives until the
 * handler returns: never free it, and keep nothing that points into it (copy
 * what must outlive the handler, deferred calls included). */
ProtobufCMessage *tr_rpc_unpack_scratch(tr_rpc_call *call, const ProtobufCMessageDescriptor *desc);

/* tr_rpc_reply answers OK with msg packed as payload (msg may be NULL for an
 * empty payload). Returns FAILED_PRECONDITION when the call was already
 * answered (e.g. by the deadline sweeper). Thread-safe. */
int tr_rpc_reply(tr_rpc_call *call, const ProtobufCMessage *msg);

/* tr_rpc_thread_sends_replies declares that the calling thread never holds a
 * lock when it answers deferred calls: their replies are then written on it
 * rather than handed to a handler thread (which is what a reply made under a
 * lock needs). For answerer threads; lasts for the thread's life. */
void tr_rpc_thread_sends_replies(void);

/* tr_rpc_reply_error answers with a non-OK code and a message. Thread-safe. */
int tr_rpc_reply_error(tr_rpc_call *call, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* tr_rpc_defer keeps the call open after the handler returns and gives the
 * caller one reference: answer it later, then drop the reference with
 * tr_rpc_call_release. If the deadline passes first the server answers
 * DEADLINE_EXCEEDED; on_expire (may be NULL) is then called, from the sweeper
 * thread and without server locks held, so the owner can forget the call (it
 * must still release its reference). At tr_rpc_server_stop, deferred calls are
 * answered UNAVAILABLE and on_expire runs for each: release there, or soon
 * after on another thread (stop waits for the release, then frees the call). */
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
    tr_rpc_tls tls;      /* for tls+tcp:// (ca_file required) */
} tr_rpc_client_opts;

enum {
    TR_RPC_IDEMPOTENT = 1u << 0, /* safe to retry on UNAVAILABLE */
};

/* tr_rpc_client_open dials the server. On success *out owns the client; close
 * it with tr_rpc_client_close. UNAVAILABLE with "cannot reach URL: reason" when
 * wait_for_server is 0 and nothing answers. */
int tr_rpc_client_open(const tr_rpc_client_opts *opts, tr_rpc_client **out, tr_err *err);

/* tr_rpc_client_explain: for a tls+tcp:// client whose calls fail to reach
 * the server, repeats the TLS handshake and prefixes err with why it fails
 * (expired certificate, another CA, another name, not TLS); 1 if it did. */
int tr_rpc_client_explain(tr_rpc_client *c, tr_err *err);

/* tr_rpc_client_close closes the client; NULL is a no-op. No call may be in
 * flight on it. Never hangs: nng's close is waited for at most 3 s (nng
 * 1.5.2 can hang there for good), then left to a thread of its own. */
void tr_rpc_client_close(tr_rpc_client *c);

/* tr_rpc_client_shutdown makes calls in flight on other threads return at
 * once with CANCELLED and refuses new ones (CANCELLED); it never blocks. The
 * socket stays open until tr_rpc_client_close, which the owner calls after
 * those threads are done with the client. */
void tr_rpc_client_shutdown(tr_rpc_client *c);

/* tr_rpc_client_cancel makes the calls to method (every call with NULL) in
 * flight on other threads return at once with CANCELLED; calls made after
 * it returns go ahead. */
void tr_rpc_client_cancel(tr_rpc_client *c, const char *method);

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

/* tr_envelope_decode_request_in is tr_envelope_decode_request with the
 * message decoded through alloc (NULL = malloc); *msg is then freed with it
 * (the RPC server decodes into the call's scratch arena, arena.h). */
int tr_envelope_decode_request_in(const uint8_t *buf, size_t len, ProtobufCAllocator *alloc, ProtobufCMessage **msg,
                                  tr_envelope *env, tr_err *err);

/* tr_envelope_encode_request packs a Request into a malloc'ed buffer. */
int tr_envelope_encode_request(const tr_envelope *env, uint8_t **buf, size_t *len, tr_err *err);

/* tr_envelope_encode_reply packs a Reply into a malloc'ed buffer. */
int tr_envelope_encode_reply(uint64_t request_id, int code, const char *message, const uint8_t *payload,
                             size_t payload_len, uint8_t **buf, size_t *len, tr_err *err);

/* tr_envelope_reply_size returns the packed size of a Reply whose payload is
 * payload_len bytes; tr_envelope_reply_write packs that Reply into buf (at
 * least that size) with the payload packed from the message itself, in place
 * (payload_len must be its protobuf_c_message_get_packed_size; NULL or 0 =
 * no payload), and returns the bytes written. The bytes are those of
 * tr_envelope_encode_reply with the payload packed first, without its two
 * intermediate buffers (the server builds every reply this way). */
size_t tr_envelope_reply_size(uint64_t request_id, int code, const char *message, size_t payload_len);
size_t tr_envelope_reply_write(uint8_t *buf, uint64_t request_id, int code, const char *message,
                               const ProtobufCMessage *payload, size_t payload_len);

#endif
