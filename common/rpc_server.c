/* rpc_server.c - the REP side of troupe.v1 RPC.
 *
 * Each tr_rpc_call owns one nng context and one aio, and cycles
 *
 *     RECV --msg--> QUEUED --> HANDLER --reply stored--> SEND --sent--> RECV ...
 *
 * The aio callback does no handler work: nng runs every callback of the
 * process on a few shared threads that must not block (nng_aio_alloc(3)), and
 * a handler waits for its owner's locks. On receipt the callback appends the
 * call to the incoming queue and returns; a small pool of handler threads
 * decodes, authenticates and runs the handler, then sends the reply itself
 * after the handler returned (no lock of the owner's held). A reply made while
 * the handler is still running is only stored, so the call struct is never
 * reused under a running handler's feet.
 *
 * Lanes. One handler thread is kept back: the methods flagged
 * TR_METHOD_QUICK (Ping) run on any thread, every other method on at most
 * threads - 1 at a time. The callback puts a request naming a quick method
 * (a look at the frame's first field, no decoding) on a queue of its own
 * that the threads take first, so Ping does not wait behind a flood of
 * reports. A request that finds the general threads busy waits in the
 * waiting list, in arrival order; when opts.queue are already waiting it is
 * answered UNAVAILABLE at once (clients retry idempotent calls with back-off)
 * rather than left in the socket until its client gives up, and one that
 * waited past its deadline is answered DEADLINE_EXCEEDED without running.
 *
 * Replies to deferred calls (answered later from any thread, often under
 * the owner's lock) are not written there either: answer() queues them and a
 * handler thread hands them to nng, unless the answering thread declared it
 * holds no lock then (tr_rpc_thread_sends_replies).
 *
 * A deferred call leaves the cycle: its context stays open until a later reply
 * (from any thread, or the deadline sweeper), and a fresh call is opened so the
 * number of receiving contexts stays constant. After its reply is sent a
 * deferred call is retired: it goes to the graveyard and the sweeper thread
 * frees it once no owner holds a reference (aios are never freed from their own
 * callback).
 *
 * Locking: one server mutex guards call state, the deferred list and the
 * graveyard. It is never held while a handler or on_expire runs. */
#include <arpa/inet.h>
#include <dirent.h>
#include <malloc.h>
#include <sys/resource.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "arena.h"
#include "log.h"
#include "rpc.h"
#include "rpc_backlog.h"
#include "rpc_conns.h"
#include "rpc_tls.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

enum call_state { ST_RECV, ST_QUEUED, ST_HANDLER, ST_DEFERRED, ST_SEND };

struct tr_rpc_call {
    tr_rpc_server *srv;
    nng_ctx ctx;
    nng_aio *aio;
    enum call_state state;
    ProtobufCMessage *req_msg; /* decoded envelope, in arena; env borrows from it */
    tr_envelope env;
    /* What the request decodes into (the envelope, and payloads decoded with
     * tr_rpc_unpack_scratch): reset when the handler returns, so env is
     * only valid until then; request_id and the method's name (the table's)
     * are what outlives it. */
    tr_arena arena;
    uint64_t request_id;
    tr_rpc_principal who; /* set by admit before the handler runs */
    int64_t deadline;
    int answered;
    int deferred;     /* retire after the reply is sent */
    int refs;         /* owner references from tr_rpc_defer */
    nng_msg *pending; /* reply stored while the handler runs */
    void (*on_expire)(tr_rpc_call *, void *);
    void *expire_arg;
    tr_rpc_call *next;  /* deferred list or graveyard */
    tr_rpc_call **pprev; /* on the deferred list: the pointer to this call; else NULL */
    tr_rpc_call *xnext; /* sweeper's private list of calls to expire */
    uint32_t pipe;      /* nng pipe id the request came in on */
    int64_t arrived_us; /* monotonic, when the request was received (stats) */
    int method_idx;     /* index in the method table; -1 until found ("other") */
    int authed;         /* the request carried a valid credential */
    int counted;        /* tr_conns_begin was called for this request (on arrival) */
    size_t pool_idx;    /* its place in srv->pool */
    nng_msg *request;   /* ST_QUEUED before admit: the received frame */
    const tr_rpc_method *method; /* admitted, waiting for a handler thread */
    tr_rpc_call *qnext; /* on one of the handler threads' queues (srv->qmu) */
};

/* A FIFO of calls through qnext. */
typedef struct call_fifo {
    tr_rpc_call *head, *tail;
    size_t len;
} call_fifo;

struct tr_rpc_server {
    nng_socket sock;
    tr_rpc_server_opts opts;
    char *token;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t sweeper;
    atomic_int stopping; /* written under mu; on_sent reads it without */
    tr_rpc_call **pool; /* every live call, for shutdown */
    size_t pool_len, pool_cap;
    /* Deferred calls, doubly linked: an answer unlinks its call in O(1) (a
     * scan from the head made every NodeSync answer cost a walk over every
     * agent's open long poll: 10,000 of them with 10,000 agents). */
    tr_rpc_call *deferred;
    /* No deferred call's deadline is earlier than this (a lower bound, reset
     * by each walk): the sweeper walks the list only once it has passed, not
     * every 20 ms under mu while every answer waits for the lock. */
    int64_t deferred_min;
    tr_rpc_call *graveyard;
    atomic_uint_least64_t served;
    atomic_uint_least64_t oversized;
    atomic_uint_least64_t oversized_replies;
    tr_rpc_method_stats *stats; /* n_methods + 1 ("other"); under mu */
    size_t n_stats;
    /* The method table by name hash (open addressing: index + 1, 0 = empty;
     * size a power of two, at least twice the methods): a request's method
     * is one hash and one strcmp, not a strcmp per method of the head's
     * table (0.7% of the head's time with 10,000 agents). */
    uint32_t *by_name;
    size_t by_name_mask;
    nng_listener listener;
    /* Connections (rpc_conns.h), under conns_mu: never held with mu. */
    pthread_mutex_t conns_mu;
    tr_conns conns;
    size_t frame_limit;            /* the listener's NNG_OPT_RECVMAXSZ now */
    size_t frame_limit_logged;     /* the last one logged */
    size_t frame_limit_low;        /* the lowest since the last sweep (a flood may come and go between) */
    size_t frame_limit_low_unauth; /* strangers then */
    int64_t conn_log_ms;           /* when the last refusal line was logged */
    uint64_t conn_refused_unlogged; /* refused/displaced since that line */
    int64_t expire_ms;             /* next idle sweep */
    tr_rpc_conn_stats cstats;
    int tls;               /* a tls+tcp:// listener */
    tr_tls_errors tls_seen; /* its handshake errors already logged (sweeper only) */
    atomic_uint_least64_t tls_closed; /* its connections closed after they were established */
    int64_t tls_other_prev, tls_other_logged; /* see tls_errors_log */
    size_t trim_due; /* strangers' charges released by the last sweep (trim_heap) */
    /* Handler threads (see the top of the file), under qmu: never held with
     * mu, nor while a handler runs or nng is called. */
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    call_fifo quick;    /* received, naming a quick method (peek_quick): taken first */
    call_fifo incoming; /* received, not yet admitted */
    call_fifo waiting;  /* admitted, for a thread of the general lane */
    call_fifo sends;    /* deferred calls' replies to hand to nng */
    int threads, general_max, general_busy, idle_threads;
    size_t queue_max;
    int q_stop;      /* stop: no new work; threads answer what waits and leave */
    int pool_done;   /* threads joined: answer() sends deferred replies itself */
    const tr_rpc_method **quick_methods; /* the table's TR_METHOD_QUICK entries, NULL-terminated */
    pthread_t *handler_tids;
    int n_handler_tids;
    atomic_uint_least64_t busy_refused, busy_expired;
    int64_t busy_log_ms;        /* when the last busy line was logged (qmu) */
    uint64_t busy_unlogged;     /* refused since (qmu) */
    uint64_t tls_sweeps;                      /* tls_errors_log rounds (debug log) */
};

/* Strangers' charges released before the heap is trimmed (trim_heap). */
#define TRIM_AFTER_BYTES ((size_t)1 << 20)

static void call_cb(void *arg);

static void fifo_push(call_fifo *f, tr_rpc_call *c)
{
    c->qnext = NULL;
    if (f->tail != NULL) {
        f->tail->qnext = c;
    } else {
        f->head = c;
    }
    f->tail = c;
    f->len++;
}

static tr_rpc_call *fifo_pop(call_fifo *f)
{
    tr_rpc_call *c = f->head;

    if (c != NULL) {
        f->head = c->qnext;
        if (f->head == NULL) {
            f->tail = NULL;
        }
        c->qnext = NULL;
        f->len--;
    }
    return c;
}

static int pool_add(tr_rpc_server *srv, tr_rpc_call *call)
{
    if (srv->pool_len == srv->pool_cap) {
        size_t cap = srv->pool_cap ? srv->pool_cap * 2 : 64;
        tr_rpc_call **p = realloc(srv->pool, cap * sizeof(*p));
        if (p == NULL) {
            return -1;
        }
        srv->pool = p;
        srv->pool_cap = cap;
    }
    call->pool_idx = srv->pool_len;
    srv->pool[srv->pool_len++] = call;
    return 0;
}

/* pool_remove: O(1), the last call takes the removed one's place (every
 * deferred call is retired and freed, thousands a second under a metrics
 * load, so a scan of the pool here was a cost per call). */
static void pool_remove(tr_rpc_server *srv, tr_rpc_call *call)
{
    size_t i = call->pool_idx;

    if (i < srv->pool_len && srv->pool[i] == call) {
        srv->pool[i] = srv->pool[--srv->pool_len];
        srv->pool[i]->pool_idx = i;
    }
}

/* call_open makes a call with its context and starts it receiving. Not on
 * an nng callback (it allocates and opens a context), and not under srv->mu:
 * only the pool takes it. */
static int call_open(tr_rpc_server *srv)
{
    tr_rpc_call *call = calloc(1, sizeof(*call));
    int rv;

    if (call == NULL) {
        return NNG_ENOMEM;
    }
    call->srv = srv;
    tr_arena_init(&call->arena);
    if ((rv = nng_aio_alloc(&call->aio, call_cb, call)) != 0) {
        free(call);
        return rv;
    }
    if ((rv = nng_ctx_open(&call->ctx, srv->sock)) != 0) {
        nng_aio_free(call->aio);
        free(call);
        return rv;
    }
    call->state = ST_RECV;
    pthread_mutex_lock(&srv->mu);
    if (pool_add(srv, call) != 0) {
        pthread_mutex_unlock(&srv->mu);
        nng_ctx_close(call->ctx);
        nng_aio_free(call->aio);
        free(call);
        return NNG_ENOMEM;
    }
    pthread_mutex_unlock(&srv->mu);
    nng_ctx_recv(call->ctx, call->aio);
    return 0;
}

/* request_done gives back what the request decoded into, once its handler
 * has returned: a deferred call keeps no scratch block while it waits (there
 * is one waiting NodeSync per agent). */
static void request_done(tr_rpc_call *call)
{
    call->req_msg = NULL; /* in the arena */
    memset(&call->env, 0, sizeof(call->env));
    if (call->deferred) {
        tr_arena_fini(&call->arena);
    } else {
        tr_arena_reset(&call->arena);
    }
}

static void call_reset(tr_rpc_call *call)
{
    call->method = NULL;
    call->req_msg = NULL;
    memset(&call->env, 0, sizeof(call->env));
    tr_arena_reset(&call->arena);
    call->request_id = 0;
    memset(&call->who, 0, sizeof(call->who));
    call->answered = 0;
    call->deadline = 0;
}

#define LOG_BEFORE_REPLY_MS 500

/* start_send hands a reply message to nng. No lock held: on loopback nng
 * writes in this thread, and the write runs the receiver's TCP work too. The
 * call is in ST_SEND: nothing but its own callback touches it now. */
static void start_send(tr_rpc_call *call, nng_msg *msg)
{
    /* What the handler logged (a refusal's reason) is in the log before the
     * client holds the answer; bounded, so a stalled stderr only slows the
     * calls that log. */
    tr_log_flush_mine(LOG_BEFORE_REPLY_MS);
    nng_aio_set_msg(call->aio, msg);
    nng_ctx_send(call->ctx, call->aio);
}

/* Set on threads that never hold a lock when they answer deferred calls
 * (tr_rpc_thread_sends_replies): their replies are written where they are
 * made, which spares a hand-off and keeps the cost on that thread (a report
 * queue's answerer, niced with ingest_nice, writes a round of replies). */
static __thread int sends_here;

void tr_rpc_thread_sends_replies(void)
{
    sends_here = 1;
}

/* queue_send gives a deferred call's reply to a handler thread to send; once
 * the threads have been joined (stop), or on a thread that sends its own
 * replies, it is sent here. */
static void queue_send(tr_rpc_server *srv, tr_rpc_call *call)
{
    nng_msg *msg;

    pthread_mutex_lock(&srv->qmu);
    if (!srv->pool_done && !sends_here) {
        fifo_push(&srv->sends, call);
        if (srv->idle_threads > 0) {
            pthread_cond_signal(&srv->qcv);
        }
        pthread_mutex_unlock(&srv->qmu);
        return;
    }
    pthread_mutex_unlock(&srv->qmu);
    msg = call->pending;
    call->pending = NULL;
    start_send(call, msg);
}

const double tr_rpc_latency_bounds[TR_RPC_LATENCY_BUCKETS] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                               0.025,  0.05,    0.1,    0.25,  1,      5,     30};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* count_answer adds an answer to its method's counters. Caller holds srv->mu
 * (answer() does), which is also what readers take. */
static void count_answer(tr_rpc_server *srv, const tr_rpc_call *call, int code)
{
    tr_rpc_method_stats *st;
    double s;
    size_t b = 0;

    if (srv->stats == NULL) {
        return;
    }
    st = &srv->stats[call->method_idx >= 0 ? (size_t)call->method_idx : srv->n_stats - 1];
    s = call->arrived_us > 0 ? (double)(now_us() - call->arrived_us) / 1e6 : 0;
    while (b < TR_RPC_LATENCY_BUCKETS && s > tr_rpc_latency_bounds[b]) {
        b++;
    }
    st->buckets[b]++;
    st->sum_s += s;
    st->by_code[code >= 0 && code < TR_RPC_CODES ? code : TROUPE_UNKNOWN]++;
}

size_t tr_rpc_server_stats(tr_rpc_server *srv, tr_rpc_method_stats *out, size_t n)
{
    pthread_mutex_lock(&srv->mu);
    for (size_t i = 0; i < n && i < srv->n_stats; i++) {
        out[i] = srv->stats[i];
    }
    pthread_mutex_unlock(&srv->mu);
    return srv->n_stats;
}

/* build_reply packs a reply frame straight into an nng message (envelope and
 * payload in one buffer, no copies); NULL when out of memory. */
static nng_msg *build_reply(tr_rpc_call *call, int code, const char *message, const ProtobufCMessage *payload)
{
    size_t plen = payload != NULL ? protobuf_c_message_get_packed_size(payload) : 0;
    size_t n = tr_envelope_reply_size(call->request_id, code, message, plen);
    nng_msg *msg = NULL;

    if (nng_msg_alloc(&msg, n) != 0) {
        return NULL;
    }
    tr_envelope_reply_write(nng_msg_body(msg), call->request_id, code, message, payload, plen);
    return msg;
}

/* answer builds the reply frame (outside srv->mu: request_id does not change
 * while the call is open) and sends it, or stores it while the handler still
 * runs. Returns FAILED_PRECONDITION for a second answer. */
static int answer(tr_rpc_call *call, int code, const char *message, const ProtobufCMessage *payload)
{
    tr_rpc_server *srv = call->srv;
    nng_msg *msg = build_reply(call, code, message, payload);
    char why[200];
    int rv = TROUPE_OK, send_later = 0;

    if (msg == NULL && payload != NULL) {
        code = TROUPE_RESOURCE_EXHAUSTED;
        message = "server out of memory";
        msg = build_reply(call, code, message, NULL);
    } else if (msg != NULL && nng_msg_len(msg) > srv->opts.max_frame) {
        /* A peer drops a frame over its receive limit (the same max_frame
         * on both sides) by closing its connection, and with nng 1.5.2 a
         * connection closed while a reply larger than the socket buffer is
         * half written never finishes closing: its send never completes, so
         * nng's one reaper thread waits on it for ever and no connection of
         * the process is freed again (a descriptor leaked per reconnect).
         * The caller gets an error it can read instead, and the log says so. */
        snprintf(why, sizeof(why), "reply of %zu bytes exceeds max_frame_bytes %zu; not sent",
                 nng_msg_len(msg), srv->opts.max_frame);
        TR_LOG(TR_LOG_ERR, "rpc: %s method=%s", why, tr_rpc_call_method(call));
        atomic_fetch_add(&srv->oversized_replies, 1);
        nng_msg_free(msg);
        code = TROUPE_RESOURCE_EXHAUSTED;
        message = why;
        msg = build_reply(call, code, message, NULL);
    }
    pthread_mutex_lock(&srv->mu);
    if (call->answered) {
        rv = TROUPE_FAILED_PRECONDITION;
        goto out;
    }
    if (msg == NULL) {
        /* Nothing can be sent; the client's deadline will tell it. */
        TR_LOG(TR_LOG_ERR, "rpc: cannot build reply method=%s", tr_rpc_call_method(call));
        rv = TROUPE_RESOURCE_EXHAUSTED;
        goto out;
    }
    call->answered = 1;
    atomic_fetch_add(&srv->served, 1);
    count_answer(srv, call, code);
    if (call->state == ST_HANDLER) {
        call->pending = msg;
        msg = NULL;
    } else if (call->state == ST_DEFERRED) {
        /* Unlink from the deferred list before the context moves on. */
        if (call->pprev != NULL) {
            *call->pprev = call->next;
            if (call->next != NULL) {
                call->next->pprev = call->pprev;
            }
            call->pprev = NULL;
        }
        call->next = NULL;
        call->state = ST_SEND;
        call->pending = msg;
        msg = NULL;
        send_later = 1;
    } else {
        rv = TROUPE_FAILED_PRECONDITION;
    }
out:
    pthread_mutex_unlock(&srv->mu);
    if (msg != NULL) {
        nng_msg_free(msg);
    }
    if (send_later) {
        /* The caller often holds its own lock (an event answering parked
         * calls): the write happens on a handler thread instead. */
        queue_send(srv, call);
    }
    return rv;
}

int tr_rpc_reply(tr_rpc_call *call, const ProtobufCMessage *msg)
{
    return answer(call, TROUPE_OK, "", msg);
}

int tr_rpc_reply_error(tr_rpc_call *call, int code, const char *fmt, ...)
{
    char message[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    return answer(call, code, message, NULL);
}

uint32_t tr_rpc_call_pipe(const tr_rpc_call *call)
{
    return call->pipe;
}

const char *tr_rpc_call_method(const tr_rpc_call *call)
{
    if (call->method_idx >= 0) {
        return call->srv->opts.methods[call->method_idx].name;
    }
    return call->env.method ? call->env.method : "";
}

uint64_t tr_rpc_call_id(const tr_rpc_call *call)
{
    return call->request_id;
}

int64_t tr_rpc_call_deadline(const tr_rpc_call *call)
{
    return call->deadline;
}

int tr_rpc_call_answered(tr_rpc_call *call)
{
    int a;
    pthread_mutex_lock(&call->srv->mu);
    a = call->answered;
    pthread_mutex_unlock(&call->srv->mu);
    return a;
}

ProtobufCMessage *tr_rpc_unpack(tr_rpc_call *call, const ProtobufCMessageDescriptor *desc)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, call->env.payload_len, call->env.payload);
    if (m == NULL) {
        TR_LOG(TR_LOG_WARNING, "rpc: malformed payload method=%s bytes=%zu", tr_rpc_call_method(call),
               call->env.payload_len);
        tr_rpc_reply_error(call, TROUPE_INVALID_ARGUMENT, "malformed %s payload (%zu bytes)", desc->name,
                           call->env.payload_len);
    }
    return m;
}

ProtobufCMessage *tr_rpc_unpack_scratch(tr_rpc_call *call, const ProtobufCMessageDescriptor *desc)
{
    ProtobufCMessage *m =
        protobuf_c_message_unpack(desc, &call->arena.pb, call->env.payload_len, call->env.payload);
    if (m == NULL) {
        TR_LOG(TR_LOG_WARNING, "rpc: malformed payload method=%s bytes=%zu", tr_rpc_call_method(call),
               call->env.payload_len);
        tr_rpc_reply_error(call, TROUPE_INVALID_ARGUMENT, "malformed %s payload (%zu bytes)", desc->name,
                           call->env.payload_len);
    }
    return m;
}

void tr_rpc_defer(tr_rpc_call *call, void (*on_expire)(tr_rpc_call *, void *), void *arg)
{
    tr_rpc_server *srv = call->srv;

    pthread_mutex_lock(&srv->mu);
    call->deferred = 1;
    call->refs++;
    call->on_expire = on_expire;
    call->expire_arg = arg;
    pthread_mutex_unlock(&srv->mu);
}

void tr_rpc_call_release(tr_rpc_call *call)
{
    tr_rpc_server *srv = call->srv;

    pthread_mutex_lock(&srv->mu);
    call->refs--; /* the sweeper frees it at its next round (20 ms) */
    if (call->refs == 0 && srv->stopping) {
        pthread_cond_broadcast(&srv->cv); /* stop waits for the last reference */
    }
    pthread_mutex_unlock(&srv->mu);
}

static uint64_t name_hash(const char *name)
{
    uint64_t x = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        x = (x ^ *p) * 0x100000001b3ull;
    }
    return x;
}

/* methods_index fills srv->by_name from the table; -1 when out of memory. A
 * name the table has twice resolves to its first entry, as a scan did. */
static int methods_index(tr_rpc_server *srv)
{
    size_t n = srv->n_stats - 1, size = 8;

    while (size < 2 * n) {
        size *= 2;
    }
    if ((srv->by_name = calloc(size, sizeof(*srv->by_name))) == NULL) {
        return -1;
    }
    srv->by_name_mask = size - 1;
    for (size_t i = 0; i < n; i++) {
        size_t k = (size_t)name_hash(srv->opts.methods[i].name) & srv->by_name_mask;
        int dup = 0;
        while (srv->by_name[k] != 0 && !dup) {
            dup = strcmp(srv->opts.methods[srv->by_name[k] - 1].name, srv->opts.methods[i].name) == 0;
            k = (k + 1) & srv->by_name_mask;
        }
        if (!dup) {
            srv->by_name[k] = (uint32_t)i + 1;
        }
    }
    return 0;
}

/* quick_index lists the table's quick methods for peek_quick. */
static int quick_index(tr_rpc_server *srv)
{
    size_t n = 0, k = 0;

    for (const tr_rpc_method *m = srv->opts.methods; m->name != NULL; m++) {
        n += (m->scopes & TR_METHOD_QUICK) != 0;
    }
    if ((srv->quick_methods = calloc(n + 1, sizeof(*srv->quick_methods))) == NULL) {
        return -1;
    }
    for (const tr_rpc_method *m = srv->opts.methods; m->name != NULL; m++) {
        if (m->scopes & TR_METHOD_QUICK) {
            srv->quick_methods[k++] = m;
        }
    }
    return 0;
}

static const tr_rpc_method *find_method(const tr_rpc_server *srv, const char *name)
{
    for (size_t k = (size_t)name_hash(name) & srv->by_name_mask; srv->by_name[k] != 0;
         k = (k + 1) & srv->by_name_mask) {
        const tr_rpc_method *m = &srv->opts.methods[srv->by_name[k] - 1];
        if (strcmp(m->name, name) == 0) {
            return m;
        }
    }
    return NULL;
}

const char *tr_rpc_scope_name(unsigned scope)
{
    switch (scope) {
    case TR_SCOPE_ADMIN: return "admin";
    case TR_SCOPE_USER: return "user";
    case TR_SCOPE_NODE: return "node";
    case TR_SCOPE_WORKER: return "worker";
    default: return "none";
    }
}

const tr_rpc_principal *tr_rpc_call_principal(const tr_rpc_call *call)
{
    return &call->who;
}

int tr_rpc_require_job(tr_rpc_call *call, uint64_t job_id)
{
    if (call->who.scope != TR_SCOPE_WORKER || call->who.job_id == job_id) {
        return 1;
    }
    TR_LOG(TR_LOG_WARNING, "rpc: permission denied method=%s scope=worker job=%llu asked_job=%llu",
           tr_rpc_call_method(call), (unsigned long long)call->who.job_id, (unsigned long long)job_id);
    tr_rpc_reply_error(call, TROUPE_PERMISSION_DENIED,
                       "a worker credential of job %llu cannot act on job %llu (needs scope user)",
                       (unsigned long long)call->who.job_id, (unsigned long long)job_id);
    return 0;
}

int tr_rpc_require_worker(tr_rpc_call *call, uint64_t job_id, const char *worker)
{
    if (!tr_rpc_require_job(call, job_id)) {
        return 0;
    }
    if (call->who.scope != TR_SCOPE_WORKER || (worker != NULL && strcmp(call->who.worker, worker) == 0)) {
        return 1;
    }
    TR_LOG(TR_LOG_WARNING,
           "rpc: permission denied method=%s scope=worker job=%llu worker=%s asked_worker=%.128s",
           tr_rpc_call_method(call), (unsigned long long)job_id, call->who.worker, worker ? worker : "");
    tr_rpc_reply_error(
        call, TROUPE_PERMISSION_DENIED,
        "the worker credential of %s cannot speak for worker '%.128s': each worker has its own",
        call->who.worker, worker ? worker : "");
    return 0;
}

/* authenticate fills call->who; 0 after answering UNAUTHENTICATED. The admin
 * token is compared in constant time; other credentials are the auth
 * callback's (which compares hashes in constant time). */
static int authenticate(tr_rpc_call *call)
{
    tr_rpc_server *srv = call->srv;
    const char *token = call->env.token ? call->env.token : "";
    tr_err err;

    call->who.scope = TR_SCOPE_ADMIN;
    if (srv->token == NULL || tr_ct_equal(token, srv->token)) {
        call->authed = 1;
        return 1;
    }
    if (srv->opts.auth != NULL && token[0] != '\0' &&
        srv->opts.auth(srv->opts.auth_user, token, &call->who, &err) == TROUPE_OK) {
        call->authed = 1;
        return 1;
    }
    memset(&call->who, 0, sizeof(call->who));
    TR_LOG(TR_LOG_WARNING, "rpc: unauthenticated call method=%s id=%llu", call->env.method,
           (unsigned long long)call->env.request_id);
    answer(call, TROUPE_UNAUTHENTICATED,
           "missing, wrong or expired credential (set --token-file, TROUPE_TOKEN or TROUPE_CREDENTIALS)",
           NULL);
    return 0;
}

/* scope_names writes the scopes in mask as "user or admin". */
static void scope_names(unsigned mask, char *buf, size_t size)
{
    static const unsigned order[] = {TR_SCOPE_USER, TR_SCOPE_NODE, TR_SCOPE_WORKER, TR_SCOPE_ADMIN};
    size_t used = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
        if ((mask | TR_SCOPE_ADMIN) & order[i]) {
            int n = snprintf(buf + used, size - used, "%s%s", used ? " or " : "", tr_rpc_scope_name(order[i]));
            used += (n > 0 && (size_t)n < size - used) ? (size_t)n : 0;
        }
    }
}

/* pipe_peer writes a connection's remote address ("127.0.0.1:40312"). */
static void pipe_peer(nng_pipe p, char *buf, size_t size)
{
    nng_sockaddr sa;

    snprintf(buf, size, "unknown peer");
    if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) != 0) {
        return;
    }
    if (sa.s_family == NNG_AF_INET) {
        const uint8_t *a = (const uint8_t *)&sa.s_in.sa_addr;
        snprintf(buf, size, "%u.%u.%u.%u:%u", a[0], a[1], a[2], a[3], (unsigned)ntohs(sa.s_in.sa_port));
    } else if (sa.s_family == NNG_AF_IPC) {
        if (snprintf(buf, size, "ipc://%s", sa.s_ipc.sa_path) >= (int)size && size > 4) {
            memcpy(buf + size - 4, "...", 4);
        }
    } else if (sa.s_family == NNG_AF_INET6) {
        snprintf(buf, size, "[ipv6]:%u", (unsigned)ntohs(sa.s_in6.sa_port));
    }
}

/* peer_name writes the address of the peer that sent msg. */
static void peer_name(nng_msg *msg, char *buf, size_t size)
{
    pipe_peer(nng_msg_get_pipe(msg), buf, size);
}

/* refuse_oversized answers a frame over max_frame (up to the transport's
 * slack) with RESOURCE_EXHAUSTED, one log line and a count; 1 if refused. */
static int refuse_oversized(tr_rpc_call *call, nng_msg *msg)
{
    tr_rpc_server *srv = call->srv;
    size_t len = nng_msg_len(msg);
    char peer[128], why[160];

    if (len <= srv->opts.max_frame) {
        return 0;
    }
    atomic_fetch_add(&srv->oversized, 1);
    peer_name(msg, peer, sizeof(peer));
    snprintf(why, sizeof(why), "frame of %zu bytes exceeds max_frame_bytes %zu", len, srv->opts.max_frame);
    TR_LOG(TR_LOG_WARNING, "rpc: oversized frame from %s: %s", peer, why);
    answer(call, TROUPE_RESOURCE_EXHAUSTED, why, NULL);
    return 1;
}

/* node_cert_ok: with tls_client_auth "nodes", an agent's method (one node
 * credentials may call and user credentials may not) needs a connection
 * whose client certificate verified against the client CA, whatever the
 * credential. 0 after answering PERMISSION_DENIED with one log line. */
static int node_cert_ok(tr_rpc_call *call, const tr_rpc_method *m, nng_msg *msg)
{
    bool verified = false;
    char peer[128];

    if (!call->srv->tls || call->srv->opts.tls.client_auth != TR_TLS_CLIENT_NODES ||
        (m->scopes & TR_SCOPE_NODE) == 0 || (m->scopes & TR_SCOPE_USER) != 0) {
        return 1;
    }
    if (nng_pipe_get_bool(nng_msg_get_pipe(msg), NNG_OPT_TLS_VERIFIED, &verified) == 0 && verified) {
        return 1;
    }
    peer_name(msg, peer, sizeof(peer));
    TR_LOG(TR_LOG_WARNING, "rpc: %s from %s refused: no client certificate signed by tls_client_ca", m->name, peer);
    tr_rpc_reply_error(call, TROUPE_PERMISSION_DENIED,
                       "%s needs a client certificate signed by the head's tls_client_ca (tls_client_auth: nodes); "
                       "this connection presented none, or one that did not verify (expired, another CA): "
                       "give the agent tls_cert and tls_key",
                       m->name);
    return 0;
}

/* admit decodes and checks a request; returns the handler to run, or NULL
 * after answering the call with the reason it was refused. */
static const tr_rpc_method *admit(tr_rpc_call *call, nng_msg *msg)
{
    tr_rpc_server *srv = call->srv;
    const tr_rpc_method *m;
    uint32_t t;
    tr_err err;

    if (refuse_oversized(call, msg)) {
        return NULL;
    }
    if (tr_envelope_decode_request_in(nng_msg_body(msg), nng_msg_len(msg), &call->arena.pb, &call->req_msg,
                                      &call->env, &err) != TROUPE_OK) {
        TR_LOG(TR_LOG_WARNING, "rpc: refused frame: %s", err.msg);
        answer(call, err.code, err.msg, NULL);
        return NULL;
    }
    call->request_id = call->env.request_id;
    if (!authenticate(call)) {
        return NULL;
    }
    m = find_method(srv, call->env.method);
    if (m != NULL) {
        call->method_idx = (int)(m - srv->opts.methods);
    }
    if (m == NULL) {
        TR_LOG(TR_LOG_WARNING, "rpc: unknown method=%s", call->env.method);
        tr_rpc_reply_error(call, TROUPE_UNIMPLEMENTED, "unknown method '%s'", call->env.method);
        return NULL;
    }
    if (call->who.scope != TR_SCOPE_ADMIN && (m->scopes & call->who.scope) == 0) {
        char need[64];
        scope_names(m->scopes, need, sizeof(need));
        TR_LOG(TR_LOG_WARNING, "rpc: permission denied method=%s scope=%s", m->name,
               tr_rpc_scope_name(call->who.scope));
        tr_rpc_reply_error(call, TROUPE_PERMISSION_DENIED, "%s needs scope %s; this credential has scope %s",
                           m->name, need, tr_rpc_scope_name(call->who.scope));
        return NULL;
    }
    if (!node_cert_ok(call, m, msg)) {
        return NULL;
    }
    t = call->env.timeout_ms ? call->env.timeout_ms : srv->opts.default_timeout_ms;
    if (t > srv->opts.max_timeout_ms) {
        t = srv->opts.max_timeout_ms;
    }
    call->deadline = tr_now_ms() + t;
    return m;
}

/* ---- connections: bounds before authentication (rpc_conns.h) ---------- */

/* frame_limit_update gives the listener the per-frame limit the table asks
 * for now; nng 1.5.2 applies a listener's NNG_OPT_RECVMAXSZ to its open
 * connections too, at their next frame header. Caller holds conns_mu. */
static void frame_limit_update(tr_rpc_server *srv)
{
    size_t limit = tr_conns_frame_limit(&srv->conns);

    if (limit != srv->frame_limit && nng_listener_set_size(srv->listener, NNG_OPT_RECVMAXSZ, limit) == 0) {
        srv->frame_limit = limit;
        if (limit < srv->frame_limit_low) {
            srv->frame_limit_low = limit;
            srv->frame_limit_low_unauth = srv->conns.unauth;
        }
    }
}

/* conn_arrived counts a request as in flight on its connection from the
 * moment its frame is whole (on_received, before any handler thread has
 * looked at it): a burst of ranks connecting at once then displaces none
 * whose first call merely waits for a handler thread, which would end that
 * call with a reset connection. The frame limit cannot change here (only an
 * authenticated call raises it), so nng is not called back into. */
static void conn_arrived(tr_rpc_call *call)
{
    tr_rpc_server *srv = call->srv;

    pthread_mutex_lock(&srv->conns_mu);
    tr_conns_begin(&srv->conns, call->pipe, 0, tr_now_ms());
    pthread_mutex_unlock(&srv->conns_mu);
    call->counted = 1;
}

/* conn_authed marks the connection authenticated once admit found the
 * request's credential valid. */
static void conn_authed(tr_rpc_call *call)
{
    tr_rpc_server *srv = call->srv;

    if (!call->authed) {
        return;
    }
    pthread_mutex_lock(&srv->conns_mu);
    tr_conns_authed(&srv->conns, call->pipe);
    frame_limit_update(srv);
    pthread_mutex_unlock(&srv->conns_mu);
}

static void conn_end(tr_rpc_call *call)
{
    tr_rpc_server *srv = call->srv;

    if (!call->counted) {
        return;
    }
    call->counted = 0;
    pthread_mutex_lock(&srv->conns_mu);
    tr_conns_end(&srv->conns, call->pipe, tr_now_ms());
    pthread_mutex_unlock(&srv->conns_mu);
}

/* conn_log_due says whether a refusal may be logged now (one line a second
 * at most, the next one counting those left out); caller holds conns_mu. */
static int conn_log_due(tr_rpc_server *srv, int64_t now, uint64_t *left_out)
{
    if (now - srv->conn_log_ms < 1000) {
        srv->conn_refused_unlogged++;
        return 0;
    }
    *left_out = srv->conn_refused_unlogged;
    srv->conn_refused_unlogged = 0;
    srv->conn_log_ms = now;
    return 1;
}

/* refusal_log writes the line for a refused or displaced connection. */
static void refusal_log(tr_rpc_server *srv, nng_pipe p, uint32_t displaced, int why, uint64_t left_out)
{
    nng_pipe old = NNG_PIPE_INITIALIZER;
    unsigned long long cap = (unsigned long long)srv->conns.lim.max_conns, more = (unsigned long long)left_out;
    size_t budget = srv->opts.inflight_budget;
    char peer[128];

    old.id = displaced;
    pipe_peer(displaced != 0 ? old : p, peer, sizeof(peer));
    switch (why) {
    case TR_CONN_WHY_CAP_STRANGER:
        TR_LOG(TR_LOG_WARNING,
               "rpc: at %llu connections (max_connections): closed the oldest one that never "
               "authenticated (%s) to admit a new one (%llu more refused or displaced since the last such line)",
               cap, peer, more);
        break;
    case TR_CONN_WHY_CAP_IDLE:
        TR_LOG(TR_LOG_WARNING,
               "rpc: at %llu connections (max_connections): closed the one idle longest (%s; no credential is "
               "configured, so a call proves nothing) to admit a new one (%llu more refused or displaced since "
               "the last such line)",
               cap, peer, more);
        break;
    case TR_CONN_WHY_BUDGET:
        TR_LOG(TR_LOG_WARNING,
               "rpc: inflight_budget_bytes=%zu is held by connections that never authenticated: closed the "
               "oldest (%s) to admit a new one (%llu more refused or displaced since the last such line)",
               budget, peer, more);
        break;
    case TR_CONN_WHY_BUDGET_BUSY:
        TR_LOG(TR_LOG_WARNING,
               "rpc: connection from %s refused: inflight_budget_bytes=%zu is held by connections that never "
               "authenticated and have calls in flight (%llu more refused or displaced since the last such line)",
               peer, budget, more);
        break;
    default:
        TR_LOG(TR_LOG_WARNING,
               "rpc: connection from %s refused: %llu connections (max_connections) and every one has "
               "authenticated or has a call in flight (%llu more refused or displaced since the last such line)",
               peer, cap, more);
        break;
    }
}

/* pipe_added admits a new connection, displaces one to make room (the
 * oldest stranger; without credentials the one idle longest), or refuses it
 * (nng lets an ADD_PRE callback close the pipe). */
static void pipe_added(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    tr_rpc_server *srv = arg;
    int64_t now = tr_now_ms();
    uint32_t displaced = 0;
    uint64_t left_out = 0;
    int verdict, why = TR_CONN_WHY_NONE, log_it = 0;

    (void)ev;
    pthread_mutex_lock(&srv->conns_mu);
    verdict = tr_conns_add(&srv->conns, (uint32_t)nng_pipe_id(p), now, &displaced, &why);
    if (verdict == TR_CONN_REFUSED) {
        srv->cstats.refused++;
    } else if (displaced != 0) {
        srv->cstats.displaced++;
    }
    if (verdict == TR_CONN_REFUSED || displaced != 0) {
        log_it = conn_log_due(srv, now, &left_out);
    }
    frame_limit_update(srv);
    pthread_mutex_unlock(&srv->conns_mu);

    if (log_it) {
        refusal_log(srv, p, displaced, why, left_out);
    }
    if (verdict == TR_CONN_REFUSED) {
        nng_pipe_close(p);
    }
    if (displaced != 0) {
        nng_pipe old = NNG_PIPE_INITIALIZER;
        old.id = displaced;
        nng_pipe_close(old);
    }
}

/* pipe_removed forgets a closed connection and relays the event to the owner
 * (liveness: an agent whose connection drops is noticed at once). */
static void pipe_removed(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    tr_rpc_server *srv = arg;

    (void)ev;
    if (srv->tls) {
        atomic_fetch_add(&srv->tls_closed, 1);
    }
    pthread_mutex_lock(&srv->conns_mu);
    tr_conns_remove(&srv->conns, (uint32_t)nng_pipe_id(p));
    frame_limit_update(srv);
    pthread_mutex_unlock(&srv->conns_mu);
    if (srv->opts.on_pipe_closed != NULL) {
        srv->opts.on_pipe_closed((uint32_t)nng_pipe_id(p), srv->opts.user);
    }
}

/* tls_errors_log: nng counts failed handshakes on the listener but reports
 * none of them; one line a second at most says how many failed and how.
 * nng 1.5.2's TLS transport also counts every established connection that
 * later closes as an "other" accept error (seen: one per `troupe status`), so
 * "other" failures are those beyond the closes pipe_removed counted, taken
 * over two sweeps (the two counters move a moment apart). */
static void tls_errors_log(tr_rpc_server *srv)
{
    tr_tls_errors now, *was = &srv->tls_seen;
    int64_t unexplained, other = 0;

    if (tr_rpc_listener_errors(srv->listener, &now) != 0) {
        return;
    }
    unexplained = (int64_t)now.other - (int64_t)atomic_load(&srv->tls_closed);
    if (unexplained > srv->tls_other_prev) {
        int64_t settled = srv->tls_other_prev; /* what the last sweep saw too */
        other = settled > srv->tls_other_logged ? settled - srv->tls_other_logged : 0;
    } else if (unexplained > srv->tls_other_logged) {
        other = unexplained - srv->tls_other_logged;
    }
    srv->tls_other_logged += other;
    srv->tls_other_prev = unexplained;
    if (now.auth != was->auth || now.proto != was->proto || other > 0 || now.timeout != was->timeout) {
        TR_LOG(TR_LOG_WARNING,
               "rpc: TLS connections refused: %llu failed authentication (a certificate that did not verify on "
               "either side: expired, another CA, another host name, or none where one is required), %llu not "
               "SP after TLS, %lld failed otherwise (not TLS at all: a tcp:// client?), %llu timed out",
               (unsigned long long)(now.auth - was->auth), (unsigned long long)(now.proto - was->proto),
               (long long)other, (unsigned long long)(now.timeout - was->timeout));
    }
    *was = now;
    /* A failure is logged by the second round after it: what a test waits on. */
    TR_LOG(TR_LOG_DEBUG, "rpc: TLS handshake failures checked round=%llu", (unsigned long long)++srv->tls_sweeps);
}

/* trim_heap gives the heap back to the system a sweep after strangers that
 * may have held large frames closed (nng frees their buffers as the pipes
 * finish closing). Without it glibc keeps the freed frames resident: 12,000
 * strangers of 60 KiB each left 413 MB behind after they had gone. Sweeper
 * only. */
static void trim_heap(tr_rpc_server *srv, size_t released)
{
#ifdef __GLIBC__
    if (srv->trim_due >= TRIM_AFTER_BYTES) {
        malloc_trim(0);
    }
#endif
    srv->trim_due = released;
}

/* conns_sweep (the sweeper, about once a second) closes connections past
 * their pre-authentication or idle timeout and logs what changed. */
static void conns_sweep(tr_rpc_server *srv, int64_t now)
{
    uint32_t ids[1024];
    size_t n, preauth = 0, limit = 0, unauth = 0, released;
    uint64_t left_out = 0;
    int limit_changed = 0;

    pthread_mutex_lock(&srv->conns_mu);
    if (now < srv->expire_ms) {
        pthread_mutex_unlock(&srv->conns_mu);
        return;
    }
    srv->expire_ms = now + 1000;
    n = tr_conns_expire(&srv->conns, now, ids, sizeof(ids) / sizeof(ids[0]), &preauth);
    srv->cstats.closed_idle += n;
    tr_conns_relax(&srv->conns);
    frame_limit_update(srv);
    released = tr_conns_released(&srv->conns);
    if (srv->frame_limit_low < srv->frame_limit_logged) {
        limit_changed = 1; /* lowered, even if it rose again since: say how far */
        limit = srv->frame_limit_low;
        unauth = srv->frame_limit_low_unauth;
    } else if (srv->frame_limit != srv->frame_limit_logged) {
        limit_changed = 1;
        limit = srv->frame_limit;
        unauth = srv->conns.unauth;
    }
    srv->frame_limit_logged = limit_changed ? limit : srv->frame_limit_logged;
    srv->frame_limit_low = srv->frame_limit;
    if (srv->conn_refused_unlogged > 0 && now - srv->conn_log_ms >= 1000) {
        left_out = srv->conn_refused_unlogged;
        srv->conn_refused_unlogged = 0;
        srv->conn_log_ms = now;
    }
    pthread_mutex_unlock(&srv->conns_mu);

    for (size_t i = 0; i < n; i++) {
        nng_pipe p = NNG_PIPE_INITIALIZER;
        p.id = ids[i];
        nng_pipe_close(p);
    }
    if (n > 0) {
        TR_LOG(TR_LOG_NOTICE,
               "rpc: closed %zu connections: %zu made no authenticated call within preauth_timeout_ms=%u, "
               "%zu idle for idle_timeout_ms=%u",
               n, preauth, srv->opts.preauth_timeout_ms, n - preauth, srv->opts.idle_timeout_ms);
    }
    if (left_out > 0) {
        TR_LOG(TR_LOG_WARNING, "rpc: %llu more connections refused or displaced at max_connections=%llu",
               (unsigned long long)left_out, (unsigned long long)srv->conns.lim.max_conns);
    }
    if (srv->tls) {
        tls_errors_log(srv);
    }
    trim_heap(srv, released);
    if (limit_changed) {
        TR_LOG(TR_LOG_NOTICE,
               "rpc: frames over %zu bytes now close their connection (%zu unauthenticated connections share "
               "inflight_budget_bytes=%zu)",
               limit, unauth, srv->opts.inflight_budget);
    }
}

void tr_rpc_server_conn_stats(tr_rpc_server *srv, tr_rpc_conn_stats *out)
{
    pthread_mutex_lock(&srv->conns_mu);
    *out = srv->cstats;
    out->open = srv->conns.live;
    out->unauthenticated = srv->conns.unauth;
    out->max = srv->conns.lim.max_conns;
    out->frame_limit = srv->frame_limit;
    pthread_mutex_unlock(&srv->conns_mu);
}

/* open_descriptors counts this process's open descriptors. */
static long open_descriptors(void)
{
    DIR *d = opendir("/proc/self/fd");
    long n = 0;

    if (d == NULL) {
        return 64; /* a guess where /proc is missing */
    }
    while (readdir(d) != NULL) {
        n++;
    }
    closedir(d);
    return n - 3; /* ".", ".." and the directory's own descriptor */
}

/* conns_open sizes the table: max_connections, lowered so connections plus
 * the descriptors open now plus fd_reserve fit the descriptor limit (the
 * owner's state files and logs still open when peers hold every other one). */
static int conns_open(tr_rpc_server *srv, tr_err *err)
{
    tr_rpc_server_opts *o = &srv->opts;
    tr_conns_limits lim = {0};
    struct rlimit rl;
    long open_now = open_descriptors(), room = -1;

    lim.max_conns = (size_t)o->max_connections;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        room = (long)rl.rlim_cur - open_now - o->fd_reserve;
        if (room < 8) {
            room = 8;
        }
        if ((size_t)room < lim.max_conns) {
            lim.max_conns = (size_t)room;
        }
    }
    lim.budget = o->inflight_budget;
    lim.frame_max = o->max_frame > SIZE_MAX / TR_RPC_FRAME_SLACK ? SIZE_MAX : o->max_frame * TR_RPC_FRAME_SLACK;
    lim.frame_floor = o->frame_floor < lim.frame_max ? o->frame_floor : lim.frame_max;
    lim.preauth_ms = o->preauth_timeout_ms;
    lim.idle_ms = o->idle_timeout_ms;
    lim.displace_idle = srv->token == NULL;
    if (tr_conns_init(&srv->conns, &lim) != 0) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory for %zu connections", lim.max_conns);
    }
    srv->frame_limit = lim.frame_max;
    srv->frame_limit_logged = lim.frame_max;
    srv->frame_limit_low = lim.frame_max;
    if (lim.max_conns < (size_t)o->max_connections) {
        TR_LOG(TR_LOG_NOTICE,
               "rpc: at most %zu connections: the descriptor limit %llu less %ld open and fd_reserve=%d "
               "(max_connections=%d)",
               lim.max_conns, (unsigned long long)rl.rlim_cur, open_now, o->fd_reserve, o->max_connections);
    }
    return TROUPE_OK;
}

/* finish_handler does what follows a handler (or a refusal before one):
 * gives back the request's memory, sends a stored reply, parks a deferred
 * call on the deferred list, and opens a replacement context for a deferred
 * call. A handler thread, no lock held. */
static void finish_handler(tr_rpc_call *call)
{
    tr_rpc_server *srv = call->srv;
    nng_msg *pending, *send_now = NULL;
    int replace;

    request_done(call);
    pthread_mutex_lock(&srv->mu);
    pending = call->pending;
    call->pending = NULL;
    /* A deferred call retires after its reply (its owner holds a reference),
     * even one answered before the handler returned: replace it either way so
     * the number of receiving contexts stays constant. */
    replace = call->deferred && !srv->stopping;
    if (pending != NULL) {
        /* Sent below, outside srv->mu. In ST_SEND nothing but this call's
         * own callback touches it. */
        call->state = ST_SEND;
        send_now = pending;
    } else if (call->deferred && !call->answered) {
        /* No wake-up for the sweeper: it looks every 20 ms (the deadline
         * resolution), and waking it per deferred call made it walk the
         * deferred list thousands of times a second under srv->mu. */
        call->state = ST_DEFERRED;
        call->next = srv->deferred;
        if (call->next != NULL) {
            call->next->pprev = &call->next;
        }
        call->pprev = &srv->deferred;
        srv->deferred = call;
        if (call->deadline < srv->deferred_min) {
            srv->deferred_min = call->deadline;
        }
    } else {
        pthread_mutex_unlock(&srv->mu);
        TR_LOG(TR_LOG_ERR, "rpc: handler for %s returned without replying", tr_rpc_call_method(call));
        tr_rpc_reply_error(call, TROUPE_INTERNAL, "handler did not reply");
        pthread_mutex_lock(&srv->mu);
        if (call->pending != NULL) {
            call->state = ST_SEND;
            send_now = call->pending;
            call->pending = NULL;
        }
    }
    pthread_mutex_unlock(&srv->mu);
    /* Opened before the send: a deferred call answered already may be
     * retired and freed by the sweeper once its reply is out. */
    if (replace && call_open(srv) != 0) {
        TR_LOG(TR_LOG_ERR, "rpc: cannot open a replacement context; capacity reduced");
    }
    if (send_now != NULL) {
        start_send(call, send_now);
    }
}

static void run_handler(tr_rpc_call *call, const tr_rpc_method *m)
{
    call->state = ST_HANDLER;
    m->fn(call, call->srv->opts.user);
    finish_handler(call);
}

/* busy_refuse answers a request that found opts.queue others waiting for a
 * handler thread (one log line a second at most, counting the others). */
static void busy_refuse(tr_rpc_call *call)
{
    tr_rpc_server *srv = call->srv;
    int64_t now = tr_now_ms();
    uint64_t more = 0;
    int log_it = 0;

    atomic_fetch_add(&srv->busy_refused, 1);
    pthread_mutex_lock(&srv->qmu);
    if (now - srv->busy_log_ms >= 1000) {
        log_it = 1;
        more = srv->busy_unlogged;
        srv->busy_unlogged = 0;
        srv->busy_log_ms = now;
    } else {
        srv->busy_unlogged++;
    }
    pthread_mutex_unlock(&srv->qmu);
    if (log_it) {
        TR_LOG(TR_LOG_WARNING,
               "rpc: busy: %zu requests already wait for %d handler threads (rpc_queue); answered method=%s "
               "UNAVAILABLE (%llu more since the last such line)",
               srv->queue_max, srv->general_max, tr_rpc_call_method(call), (unsigned long long)more);
    }
    tr_rpc_reply_error(call, TROUPE_UNAVAILABLE,
                       "server busy: %zu requests already wait for its %d handler threads; retry with back-off",
                       srv->queue_max, srv->general_max);
}

/* dispatch admits a request taken from the incoming queue and runs its
 * handler now (a quick method, or a general one while a general slot is
 * free and nothing waits before it), parks it on the waiting list, or
 * refuses it. A handler thread, no lock held. */
static void dispatch(tr_rpc_call *call)
{
    tr_rpc_server *srv = call->srv;
    nng_msg *msg = call->request;
    const tr_rpc_method *m;

    call->request = NULL;
    call->state = ST_HANDLER; /* replies made in admit are stored, sent by finish_handler */
    m = admit(call, msg);
    nng_msg_free(msg);
    conn_authed(call);
    if (m == NULL) {
        finish_handler(call);
        return;
    }
    pthread_mutex_lock(&srv->qmu);
    if (srv->q_stop) {
        pthread_mutex_unlock(&srv->qmu);
        tr_rpc_reply_error(call, TROUPE_UNAVAILABLE, "server shutting down");
        finish_handler(call);
        return;
    }
    pthread_mutex_unlock(&srv->qmu);
    if (m->scopes & TR_METHOD_QUICK) {
        run_handler(call, m);
        return;
    }
    pthread_mutex_lock(&srv->qmu);
    if (srv->waiting.len == 0 && srv->general_busy < srv->general_max) {
        srv->general_busy++;
        pthread_mutex_unlock(&srv->qmu);
        run_handler(call, m);
        pthread_mutex_lock(&srv->qmu);
        srv->general_busy--;
        pthread_mutex_unlock(&srv->qmu);
        return;
    }
    if (srv->waiting.len >= srv->queue_max || srv->q_stop) {
        int stopping = srv->q_stop;
        pthread_mutex_unlock(&srv->qmu);
        if (stopping) {
            tr_rpc_reply_error(call, TROUPE_UNAVAILABLE, "server shutting down");
        } else {
            busy_refuse(call);
        }
        finish_handler(call);
        return;
    }
    call->method = m;
    call->state = ST_QUEUED;
    fifo_push(&srv->waiting, call);
    pthread_mutex_unlock(&srv->qmu);
}

/* run_waiting runs a call that waited for a general slot (the caller took
 * the slot), unless its deadline passed meanwhile or the server stops. */
static void run_waiting(tr_rpc_call *call)
{
    tr_rpc_server *srv = call->srv;
    const tr_rpc_method *m = call->method;
    int64_t now = tr_now_ms();

    int stopping;

    pthread_mutex_lock(&srv->qmu);
    stopping = srv->q_stop;
    pthread_mutex_unlock(&srv->qmu);
    call->method = NULL;
    call->state = ST_HANDLER;
    if (stopping) {
        tr_rpc_reply_error(call, TROUPE_UNAVAILABLE, "server shutting down");
    } else if (now >= call->deadline) {
        atomic_fetch_add(&srv->busy_expired, 1);
        TR_LOG(TR_LOG_WARNING, "rpc: method=%s waited %lld ms for a handler thread, past its deadline; not run",
               tr_rpc_call_method(call), (long long)(now_us() - call->arrived_us) / 1000);
        tr_rpc_reply_error(call, TROUPE_DEADLINE_EXCEEDED,
                           "waited %lld ms for a handler thread of the busy server, past the call's deadline",
                           (long long)(now_us() - call->arrived_us) / 1000);
    } else {
        m->fn(call, srv->opts.user);
    }
    finish_handler(call);
}

/* handler_main is one handler thread: it takes a quick request first, then
 * sends queued replies (they finish calls), then runs a waiting call when a
 * general slot is free, then admits the next received request. At stop it finishes what it holds and
 * answers what waits. */
static void *handler_main(void *arg)
{
    tr_rpc_server *srv = arg;
    tr_rpc_call *c;

    pthread_mutex_lock(&srv->qmu);
    for (;;) {
        if ((c = fifo_pop(&srv->quick)) != NULL) {
            pthread_mutex_unlock(&srv->qmu);
            dispatch(c);
        } else if ((c = fifo_pop(&srv->sends)) != NULL) {
            nng_msg *msg = c->pending;
            c->pending = NULL;
            pthread_mutex_unlock(&srv->qmu);
            start_send(c, msg);
        } else if (srv->waiting.len > 0 && (srv->general_busy < srv->general_max || srv->q_stop)) {
            c = fifo_pop(&srv->waiting);
            srv->general_busy++;
            pthread_mutex_unlock(&srv->qmu);
            run_waiting(c);
            pthread_mutex_lock(&srv->qmu);
            srv->general_busy--;
            pthread_mutex_unlock(&srv->qmu);
        } else if ((c = fifo_pop(&srv->incoming)) != NULL) {
            pthread_mutex_unlock(&srv->qmu);
            dispatch(c);
        } else if (srv->q_stop) {
            break;
        } else {
            srv->idle_threads++;
            pthread_cond_wait(&srv->qcv, &srv->qmu);
            srv->idle_threads--;
            continue;
        }
        pthread_mutex_lock(&srv->qmu);
    }
    pthread_mutex_unlock(&srv->qmu);
    return NULL;
}

/* peek_quick says whether a frame names a quick method, from its first
 * field alone (protobuf-c writes fields in number order; the method is field
 * 1): it only picks the queue, admit() decodes and checks the request. */
static int peek_quick(const tr_rpc_server *srv, nng_msg *msg)
{
    const uint8_t *b = nng_msg_body(msg);
    size_t len = nng_msg_len(msg), n = 0, i = 1;

    if (srv->quick_methods == NULL || srv->quick_methods[0] == NULL || len < 2 || b[0] != 0x0A) {
        return 0;
    }
    for (int shift = 0; i < len && shift < 14; shift += 7) { /* a method name is shorter than 16 KiB */
        n |= (size_t)(b[i] & 0x7F) << shift;
        if ((b[i++] & 0x80) == 0) {
            break;
        }
    }
    if (n == 0 || n > len - i) {
        return 0;
    }
    for (const tr_rpc_method **m = srv->quick_methods; *m != NULL; m++) {
        if (strlen((*m)->name) == n && memcmp((*m)->name, b + i, n) == 0) {
            return 1;
        }
    }
    return 0;
}

/* on_received (the aio callback) only queues the request for the handler
 * threads: no decoding, no allocation, no lock but the queue's and the
 * connection table's (a lookup, to count the request in flight). */
static void on_received(tr_rpc_call *call)
{
    tr_rpc_server *srv = call->srv;
    nng_msg *msg = nng_aio_get_msg(call->aio);

    call->state = ST_QUEUED;
    call->pipe = nng_pipe_id(nng_msg_get_pipe(msg));
    call->arrived_us = now_us();
    call->method_idx = -1;
    call->authed = 0;
    call->request = msg;
    conn_arrived(call);
    pthread_mutex_lock(&srv->qmu);
    if (srv->q_stop) {
        /* Stopping: no thread will take it. Its client sees the connection
         * close; the call stays idle until it is freed. */
        pthread_mutex_unlock(&srv->qmu);
        conn_end(call);
        call->request = NULL;
        call->state = ST_RECV;
        nng_msg_free(msg);
        return;
    }
    fifo_push(peek_quick(srv, msg) ? &srv->quick : &srv->incoming, call);
    if (srv->idle_threads > 0) {
        pthread_cond_signal(&srv->qcv);
    }
    pthread_mutex_unlock(&srv->qmu);
}

static void on_sent(tr_rpc_call *call, int rv)
{
    tr_rpc_server *srv = call->srv;

    if (rv != 0) {
        /* The client went away; nng gives the message back to us. */
        nng_msg_free(nng_aio_get_msg(call->aio));
    }
    conn_end(call);
    if (!call->deferred) {
        /* Not deferred: no other thread holds it; start receiving again
         * outside srv->mu (nng may hand over a waiting request at once).
         * Stop closes the socket before it stops the aios, so a receive
         * started after that fails with NNG_ECLOSED. */
        if (!atomic_load(&srv->stopping)) {
            call_reset(call);
            call->state = ST_RECV;
            nng_ctx_recv(call->ctx, call->aio);
        }
        return;
    }
    pthread_mutex_lock(&srv->mu);
    call->next = srv->graveyard; /* freed at the sweeper's next round */
    srv->graveyard = call;
    pthread_mutex_unlock(&srv->mu);
}

static void call_cb(void *arg)
{
    tr_rpc_call *call = arg;
    int rv = nng_aio_result(call->aio);

    switch (call->state) {
    case ST_RECV:
        if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
            return;
        }
        if (rv != 0) {
            TR_LOG(TR_LOG_WARNING, "rpc: receive failed: %s", nng_strerror(rv));
            pthread_mutex_lock(&call->srv->mu);
            if (!call->srv->stopping) {
                nng_ctx_recv(call->ctx, call->aio);
            }
            pthread_mutex_unlock(&call->srv->mu);
            return;
        }
        on_received(call);
        return;
    case ST_SEND: on_sent(call, rv); return;
    default: return;
    }
}

static void call_free(tr_rpc_call *call)
{
    nng_aio_stop(call->aio);
    nng_ctx_close(call->ctx);
    nng_aio_free(call->aio);
    if (call->pending != NULL) {
        nng_msg_free(call->pending);
    }
    if (call->request != NULL) {
        nng_msg_free(call->request);
    }
    call_reset(call);
    tr_arena_fini(&call->arena);
    free(call);
}

/* collect_expired lists deferred calls past their deadline (or all of them)
 * through xnext, taking a reference on each so they outlive the unlocked
 * answer and on_expire below. They stay on the deferred list: answer() unlinks
 * them. Before the earliest deadline it does not walk at all; a walk sets that
 * bound again over every call left on the list, the expired ones included (so
 * one that could not be answered, out of memory, is looked at again next
 * round). Caller holds srv->mu. */
static tr_rpc_call *collect_expired(tr_rpc_server *srv, int64_t now, int all)
{
    tr_rpc_call *expired = NULL;
    int64_t min = INT64_MAX;

    if (!all && now < srv->deferred_min) {
        return NULL;
    }
    for (tr_rpc_call *c = srv->deferred; c != NULL; c = c->next) {
        if (all || c->deadline <= now) {
            c->xnext = expired;
            expired = c;
            c->refs++;
        }
        min = c->deadline < min ? c->deadline : min;
    }
    srv->deferred_min = min;
    return expired;
}

static void expire_list(tr_rpc_server *srv, tr_rpc_call *list, int code, const char *why)
{
    while (list != NULL) {
        tr_rpc_call *c = list;
        list = c->xnext;
        c->xnext = NULL;
        if (answer(c, code, why, NULL) == TROUPE_OK) {
            TR_LOG(TR_LOG_INFO, "rpc: deferred call ended method=%s code=%s", tr_rpc_call_method(c),
                   troupe_strerror(code));
            if (c->on_expire != NULL) {
                c->on_expire(c, c->expire_arg);
            }
        }
        tr_rpc_call_release(c);
    }
}

/* The sweeper answers expired deferred calls and frees retired ones. */
static void *sweeper_main(void *arg)
{
    tr_rpc_server *srv = arg;

    tr_rpc_thread_sends_replies(); /* it answers with no lock held */
    pthread_mutex_lock(&srv->mu);
    while (!srv->stopping) {
        int64_t now = tr_now_ms();
        tr_rpc_call *expired = collect_expired(srv, now, 0);
        tr_rpc_call **pp = &srv->graveyard;
        tr_rpc_call *dead = NULL;

        while (*pp != NULL) {
            tr_rpc_call *c = *pp;
            if (c->refs == 0) {
                *pp = c->next;
                pool_remove(srv, c);
                c->next = dead;
                dead = c;
            } else {
                pp = &c->next;
            }
        }
        pthread_mutex_unlock(&srv->mu);
        conns_sweep(srv, now);
        expire_list(srv, expired, TROUPE_DEADLINE_EXCEEDED, "deadline exceeded while waiting");
        while (dead != NULL) {
            tr_rpc_call *c = dead;
            dead = c->next;
            call_free(c);
        }
        pthread_mutex_lock(&srv->mu);
        /* Sleep even with retired calls still referenced: they are freed at
         * a later round, without spinning. Nothing signals this wait but
         * stop; every 20 ms is the resolution of deadlines and of freeing. */
        if (!srv->stopping) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 20 * 1000000L; /* deadline resolution: 20 ms */
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&srv->cv, &srv->mu, &ts);
        }
    }
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}

/* stats_alloc makes one counter set per method plus "other". */
static int stats_alloc(tr_rpc_server *srv)
{
    size_t n = 0;
    while (srv->opts.methods[n].name != NULL) {
        n++;
    }
    if ((srv->stats = calloc(n + 1, sizeof(*srv->stats))) == NULL) {
        return -1;
    }
    srv->n_stats = n + 1;
    for (size_t i = 0; i < n; i++) {
        srv->stats[i].method = srv->opts.methods[i].name;
    }
    srv->stats[n].method = "other";
    return 0;
}

/* listener_tls gives a tls+tcp:// listener its certificate (and client CA). */
static int listener_tls(tr_rpc_server *srv, tr_err *err)
{
    nng_tls_config *cfg;
    int rv;

    if ((rv = tr_rpc_tls_config(&srv->opts.tls, 1, srv->opts.url, &cfg, err)) != TROUPE_OK) {
        return rv;
    }
    rv = nng_listener_set_ptr(srv->listener, NNG_OPT_TLS_CONFIG, cfg);
    nng_tls_config_free(cfg); /* the listener holds its own reference */
    if (rv != 0) {
        return tr_rpc_from_nng(rv, "TLS configuration", err);
    }
    srv->tls = 1;
    tr_rpc_listener_errors(srv->listener, &srv->tls_seen);
    return TROUPE_OK;
}

/* handlers_start starts the handler threads. */
static int handlers_start(tr_rpc_server *srv, tr_err *err)
{
    if ((srv->handler_tids = calloc((size_t)srv->threads, sizeof(pthread_t))) == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    for (int i = 0; i < srv->threads; i++) {
        if (pthread_create(&srv->handler_tids[i], NULL, handler_main, srv) != 0) {
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot start RPC handler thread %d of %d", i + 1,
                              srv->threads);
        }
        srv->n_handler_tids++;
    }
    return TROUPE_OK;
}

/* handlers_stop lets the handler threads finish the handlers they run and
 * answer every request still queued UNAVAILABLE, joins them, and from then
 * on answer() sends deferred replies itself. Safe to call twice. */
static void handlers_stop(tr_rpc_server *srv)
{
    tr_rpc_call *c;

    pthread_mutex_lock(&srv->qmu);
    srv->q_stop = 1;
    pthread_cond_broadcast(&srv->qcv);
    pthread_mutex_unlock(&srv->qmu);
    for (int i = 0; i < srv->n_handler_tids; i++) {
        pthread_join(srv->handler_tids[i], NULL);
    }
    srv->n_handler_tids = 0;
    free(srv->handler_tids);
    srv->handler_tids = NULL;
    pthread_mutex_lock(&srv->qmu);
    srv->pool_done = 1;
    /* Replies queued between the last thread's exit and pool_done. */
    while ((c = fifo_pop(&srv->sends)) != NULL) {
        nng_msg *msg = c->pending;
        c->pending = NULL;
        pthread_mutex_unlock(&srv->qmu);
        start_send(c, msg);
        pthread_mutex_lock(&srv->qmu);
    }
    pthread_mutex_unlock(&srv->qmu);
}

/* The accept queue asked for: room for every connection the table admits
 * arriving at once (a job's ranks starting together), up to what listen()
 * takes; the kernel caps it at net.core.somaxconn. */
#define BACKLOG_MAX 65535
/* Below this a burst of ranks can overflow the queue: said at start. */
#define BACKLOG_LOW 1024

/* backlog_raise lengthens the listener's accept queue past nng's 128
 * (rpc_backlog.c says why); what applies is logged. */
static void backlog_raise(tr_rpc_server *srv)
{
    int want = srv->conns.lim.max_conns < BACKLOG_MAX ? (int)srv->conns.lim.max_conns : BACKLOG_MAX;
    int got = 0;

    if (tr_rpc_listen_backlog(srv->listener, want, &got) != 0) {
        TR_LOG(TR_LOG_NOTICE, "rpc: could not lengthen the accept queue of %s past nng's 128: clients "
               "connecting at once beyond that wait for their handshakes to be sent again (1 s)", srv->opts.url);
    } else if (got < want && got < BACKLOG_LOW) {
        TR_LOG(TR_LOG_NOTICE, "rpc: accept queue of %s is %d connections (net.core.somaxconn): clients connecting "
               "at once beyond that wait for their handshakes to be sent again (1 s); raise net.core.somaxconn "
               "to %d for large jobs", srv->opts.url, got, want);
    } else {
        TR_LOG(TR_LOG_DEBUG, "rpc: accept queue of %s is %d connections", srv->opts.url, got);
    }
}

int tr_rpc_server_start(const tr_rpc_server_opts *opts, tr_rpc_server **out, tr_err *err)
{
    tr_rpc_server *srv;
    int n = opts->contexts > 0 ? opts->contexts : 64;
    int rv;

    *out = NULL;
    srv = calloc(1, sizeof(*srv));
    if (srv == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    srv->opts = *opts;
    if (srv->opts.max_frame == 0) {
        srv->opts.max_frame = TR_RPC_DEFAULT_MAX_FRAME;
    }
    if (srv->opts.default_timeout_ms == 0) {
        srv->opts.default_timeout_ms = 30000;
    }
    if (srv->opts.max_timeout_ms == 0) {
        srv->opts.max_timeout_ms = 24u * 3600u * 1000u;
    }
    if (srv->opts.max_connections <= 0) {
        srv->opts.max_connections = 16384;
    }
    if (srv->opts.fd_reserve <= 0) {
        srv->opts.fd_reserve = 128;
    }
    if (srv->opts.inflight_budget == 0) {
        srv->opts.inflight_budget = 64u * 1024u * 1024u;
    }
    if (srv->opts.frame_floor == 0) {
        srv->opts.frame_floor = 64u * 1024u;
    }
    if (srv->opts.preauth_timeout_ms == 0) {
        srv->opts.preauth_timeout_ms = 10000;
    }
    if (srv->opts.idle_timeout_ms == 0) {
        srv->opts.idle_timeout_ms = 300000;
    }
    if (opts->token != NULL && opts->token[0] != '\0') {
        srv->token = strdup(opts->token);
    }
    if ((rv = stats_alloc(srv)) != 0 || (rv = methods_index(srv)) != 0 || (rv = quick_index(srv)) != 0) {
        free(srv->quick_methods);
        free(srv->by_name);
        free(srv->stats);
        free(srv->token);
        free(srv);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->cv, NULL);
    pthread_mutex_init(&srv->conns_mu, NULL);
    pthread_mutex_init(&srv->qmu, NULL);
    pthread_cond_init(&srv->qcv, NULL);
    srv->threads = opts->threads > 0 ? opts->threads : 4;
    srv->threads = srv->threads < 2 ? 2 : srv->threads; /* one kept for quick methods */
    srv->general_max = srv->threads - 1;
    srv->queue_max = opts->queue > 0 ? (size_t)opts->queue : (size_t)n;
    if ((rv = conns_open(srv, err)) != TROUPE_OK) {
        goto fail;
    }
    if ((rv = handlers_start(srv, err)) != TROUPE_OK) {
        goto fail;
    }
    if ((rv = nng_rep0_open(&srv->sock)) != 0) {
        rv = tr_rpc_from_nng(rv, "open REP socket", err);
        goto fail;
    }
    nng_pipe_notify(srv->sock, NNG_PIPE_EV_ADD_PRE, pipe_added, srv);
    nng_pipe_notify(srv->sock, NNG_PIPE_EV_REM_POST, pipe_removed, srv);
    if ((rv = nng_listener_create(&srv->listener, srv->sock, opts->url)) != 0) {
        rv = tr_rpc_from_nng(rv, opts->url, err);
        tr_err_prefix(err, "cannot listen");
        goto fail_sock;
    }
    /* nng drops larger frames without a word; up to the slack, admit()
     * refuses them with a status code and a log line. frame_limit_update
     * lowers this while many connections have not authenticated. */
    nng_listener_set_size(srv->listener, NNG_OPT_RECVMAXSZ, srv->frame_limit);
    if (tr_rpc_is_tls(opts->url) && (rv = listener_tls(srv, err)) != TROUPE_OK) {
        goto fail_sock;
    }
    if ((rv = nng_listener_start(srv->listener, 0)) != 0) {
        rv = tr_rpc_from_nng(rv, opts->url, err);
        tr_err_prefix(err, "cannot listen");
        goto fail_sock;
    }
    backlog_raise(srv);
    for (int i = 0; i < n; i++) {
        if ((rv = call_open(srv)) != 0) {
            rv = tr_rpc_from_nng(rv, "open context", err);
            goto fail_sock;
        }
    }
    if (pthread_create(&srv->sweeper, NULL, sweeper_main, srv) != 0) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot start the deadline sweeper thread");
        goto fail_sock;
    }
    *out = srv;
    return TROUPE_OK;
fail_sock:
    nng_close(srv->sock);
    for (size_t i = 0; i < srv->pool_len; i++) {
        nng_aio_stop(srv->pool[i]->aio); /* no callback queues a call any more */
    }
    handlers_stop(srv);
    for (size_t i = 0; i < srv->pool_len; i++) {
        call_free(srv->pool[i]);
    }
fail:
    handlers_stop(srv);
    tr_conns_free(&srv->conns);
    pthread_mutex_destroy(&srv->conns_mu);
    free(srv->pool);
    free(srv->stats);
    free(srv->by_name);
    free(srv->quick_methods);
    free(srv->token);
    free(srv);
    return rv;
}

/* referenced counts the calls an owner still holds (tr_rpc_defer's
 * reference not yet released) and names the method of one. Caller holds
 * srv->mu. */
static size_t referenced(tr_rpc_server *srv, const char **method)
{
    size_t n = 0;

    for (size_t i = 0; i < srv->pool_len; i++) {
        if (srv->pool[i]->refs > 0) {
            *method = tr_rpc_call_method(srv->pool[i]);
            n++;
        }
    }
    return n;
}

/* wait_references waits until no owner holds a call, as nng's own sockets
 * wait for their contexts at close: an owner answers a deferred call and
 * releases it a moment later (the report queue's answerer does so on its
 * own thread), so an answered call may still be held after every deferred
 * one was expired; freeing it then would leave the owner a freed call. A
 * call deferred by a handler that ran during stop is expired here too. The
 * wait is bounded (STOP_WAIT_MS) and logged; a reference still held then is
 * the owner's bug, and the server is left allocated rather than freed under
 * it. Returns 1 when no call is referenced. */
#define STOP_WAIT_MS 30000
static int wait_references(tr_rpc_server *srv)
{
    int64_t start = tr_now_ms(), logged = start;
    const char *method = "";
    size_t held;

    pthread_mutex_lock(&srv->mu);
    while ((held = referenced(srv, &method)) > 0 && tr_now_ms() - start < STOP_WAIT_MS) {
        tr_rpc_call *late = collect_expired(srv, 0, 1);
        struct timespec ts;
        if (late != NULL) {
            pthread_mutex_unlock(&srv->mu);
            expire_list(srv, late, TROUPE_UNAVAILABLE, "server shutting down");
            pthread_mutex_lock(&srv->mu);
            continue;
        }
        if (tr_now_ms() - logged >= 5000) {
            logged = tr_now_ms();
            TR_LOG(TR_LOG_WARNING, "rpc: stop waits for %zu calls their owners still hold (method=%s)", held,
                   method);
        }
        tr_abstime_in(&ts, 100);
        pthread_cond_timedwait(&srv->cv, &srv->mu, &ts);
    }
    pthread_mutex_unlock(&srv->mu);
    if (held > 0) {
        TR_LOG(TR_LOG_ERR,
               "rpc: %zu calls still held by their owners %d ms after stop (method=%s): the server is left "
               "allocated",
               held, STOP_WAIT_MS, method);
        return 0;
    }
    return 1;
}

void tr_rpc_server_stop(tr_rpc_server *srv)
{
    tr_rpc_call *pending;

    if (srv == NULL) {
        return;
    }
    /* Tell owners of deferred calls first, while the socket can still send. */
    pthread_mutex_lock(&srv->mu);
    pending = collect_expired(srv, 0, 1);
    pthread_mutex_unlock(&srv->mu);
    expire_list(srv, pending, TROUPE_UNAVAILABLE, "server shutting down");
    /* The handler threads send those answers, finish the handlers they run
     * and answer what still waits for them; requests that arrive after that
     * are dropped with their connections at the close below. */
    handlers_stop(srv);

    pthread_mutex_lock(&srv->mu);
    srv->stopping = 1;
    pthread_cond_signal(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
    pthread_join(srv->sweeper, NULL);

    if (!wait_references(srv)) {
        nng_close(srv->sock); /* nothing more arrives; a late answer fails to send */
        return;               /* left allocated, not freed under an owner that still holds a call */
    }
    nng_close(srv->sock);
    for (size_t i = 0; i < srv->pool_len; i++) {
        nng_aio_stop(srv->pool[i]->aio);
    }
    for (size_t i = 0; i < srv->pool_len; i++) {
        call_free(srv->pool[i]);
    }
    free(srv->pool);
    free(srv->stats);
    free(srv->by_name);
    free(srv->quick_methods);
    free(srv->token);
    tr_conns_free(&srv->conns);
    pthread_mutex_destroy(&srv->conns_mu);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->cv);
    pthread_mutex_destroy(&srv->qmu);
    pthread_cond_destroy(&srv->qcv);
    free(srv);
}

uint64_t tr_rpc_server_busy(const tr_rpc_server *srv, uint64_t *expired_waiting)
{
    if (expired_waiting != NULL) {
        *expired_waiting = atomic_load(&((tr_rpc_server *)srv)->busy_expired);
    }
    return atomic_load(&((tr_rpc_server *)srv)->busy_refused);
}

tr_rpc_server *tr_rpc_call_server(const tr_rpc_call *call)
{
    return call->srv;
}

uint64_t tr_rpc_server_served(const tr_rpc_server *srv)
{
    return atomic_load(&((tr_rpc_server *)srv)->served);
}

uint64_t tr_rpc_server_oversized(const tr_rpc_server *srv)
{
    return atomic_load(&((tr_rpc_server *)srv)->oversized);
}

uint64_t tr_rpc_server_oversized_replies(const tr_rpc_server *srv)
{
    return atomic_load(&((tr_rpc_server *)srv)->oversized_replies);
}
