/* rpc_server.c - the REP side of troupe.v1 RPC.
 *
 * Each tr_rpc_call owns one nng context and one aio, and cycles
 *
 *     RECV --msg--> HANDLER --reply stored--> SEND --sent--> RECV ...
 *
 * driven by the aio callback. A reply made while the handler is still running
 * is only stored; the callback starts the send after the handler returns, so
 * the call struct is never reused under a running handler's feet.
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
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "log.h"
#include "rpc.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

enum call_state { ST_RECV, ST_HANDLER, ST_DEFERRED, ST_SEND };

struct tr_rpc_call {
    tr_rpc_server *srv;
    nng_ctx ctx;
    nng_aio *aio;
    enum call_state state;
    ProtobufCMessage *req_msg; /* decoded envelope; env borrows from it */
    tr_envelope env;
    int64_t deadline;
    int answered;
    int deferred;     /* retire after the reply is sent */
    int refs;         /* owner references from tr_rpc_defer */
    nng_msg *pending; /* reply stored while the handler runs */
    void (*on_expire)(tr_rpc_call *, void *);
    void *expire_arg;
    tr_rpc_call *next;  /* deferred list or graveyard */
    tr_rpc_call *xnext; /* sweeper's private list of calls to expire */
};

struct tr_rpc_server {
    nng_socket sock;
    tr_rpc_server_opts opts;
    char *token;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t sweeper;
    int stopping;
    tr_rpc_call **pool; /* every live call, for shutdown */
    size_t pool_len, pool_cap;
    tr_rpc_call *deferred;
    tr_rpc_call *graveyard;
    atomic_uint_least64_t served;
};

static void call_cb(void *arg);

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
    srv->pool[srv->pool_len++] = call;
    return 0;
}

static void pool_remove(tr_rpc_server *srv, tr_rpc_call *call)
{
    for (size_t i = 0; i < srv->pool_len; i++) {
        if (srv->pool[i] == call) {
            srv->pool[i] = srv->pool[--srv->pool_len];
            return;
        }
    }
}

/* call_open makes a call with its context and starts it receiving.
 * Caller holds srv->mu. */
static int call_open(tr_rpc_server *srv)
{
    tr_rpc_call *call = calloc(1, sizeof(*call));
    int rv;

    if (call == NULL) {
        return NNG_ENOMEM;
    }
    call->srv = srv;
    if ((rv = nng_aio_alloc(&call->aio, call_cb, call)) != 0) {
        free(call);
        return rv;
    }
    if ((rv = nng_ctx_open(&call->ctx, srv->sock)) != 0) {
        nng_aio_free(call->aio);
        free(call);
        return rv;
    }
    if (pool_add(srv, call) != 0) {
        nng_ctx_close(call->ctx);
        nng_aio_free(call->aio);
        free(call);
        return NNG_ENOMEM;
    }
    call->state = ST_RECV;
    nng_ctx_recv(call->ctx, call->aio);
    return 0;
}

static void call_reset(tr_rpc_call *call)
{
    if (call->req_msg != NULL) {
        protobuf_c_message_free_unpacked(call->req_msg, NULL);
        call->req_msg = NULL;
    }
    memset(&call->env, 0, sizeof(call->env));
    call->answered = 0;
    call->deadline = 0;
}

/* start_send hands a reply message to nng. Caller holds srv->mu. */
static void start_send(tr_rpc_call *call, nng_msg *msg)
{
    call->state = ST_SEND;
    nng_aio_set_msg(call->aio, msg);
    nng_ctx_send(call->ctx, call->aio);
}

/* answer builds the reply frame and sends it, or stores it while the handler
 * still runs. Returns FAILED_PRECONDITION for a second answer. */
static int answer(tr_rpc_call *call, int code, const char *message, const uint8_t *payload, size_t len)
{
    tr_rpc_server *srv = call->srv;
    uint8_t *buf = NULL;
    size_t n = 0;
    nng_msg *msg = NULL;
    int rv = TROUPE_OK;
    tr_err err;

    pthread_mutex_lock(&srv->mu);
    if (call->answered) {
        rv = TROUPE_FAILED_PRECONDITION;
        goto out;
    }
    rv = tr_envelope_encode_reply(call->env.request_id, code, message, payload, len, &buf, &n, &err);
    if (rv == TROUPE_OK && nng_msg_alloc(&msg, 0) != 0) {
        rv = TROUPE_RESOURCE_EXHAUSTED;
    }
    if (rv == TROUPE_OK && nng_msg_append(msg, buf, n) != 0) {
        nng_msg_free(msg);
        rv = TROUPE_RESOURCE_EXHAUSTED;
    }
    if (rv != TROUPE_OK) {
        /* Nothing can be sent; the client's deadline will tell it. */
        TR_LOG(TR_LOG_ERR, "rpc: cannot build reply method=%s", call->env.method ? call->env.method : "-");
        goto out;
    }
    call->answered = 1;
    atomic_fetch_add(&srv->served, 1);
    if (call->state == ST_HANDLER) {
        call->pending = msg;
    } else if (call->state == ST_DEFERRED) {
        /* Unlink from the deferred list before the context moves on. */
        for (tr_rpc_call **pp = &srv->deferred; *pp != NULL; pp = &(*pp)->next) {
            if (*pp == call) {
                *pp = call->next;
                break;
            }
        }
        call->next = NULL;
        start_send(call, msg);
    } else {
        nng_msg_free(msg);
        rv = TROUPE_FAILED_PRECONDITION;
    }
out:
    pthread_mutex_unlock(&srv->mu);
    free(buf);
    return rv;
}

int tr_rpc_reply(tr_rpc_call *call, const ProtobufCMessage *msg)
{
    uint8_t *buf = NULL;
    size_t n = 0;
    int rv;

    if (msg != NULL) {
        n = protobuf_c_message_get_packed_size(msg);
        buf = malloc(n ? n : 1);
        if (buf == NULL) {
            return answer(call, TROUPE_RESOURCE_EXHAUSTED, "server out of memory", NULL, 0);
        }
        protobuf_c_message_pack(msg, buf);
    }
    rv = answer(call, TROUPE_OK, "", buf, n);
    free(buf);
    return rv;
}

int tr_rpc_reply_error(tr_rpc_call *call, int code, const char *fmt, ...)
{
    char message[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    return answer(call, code, message, NULL, 0);
}

const char *tr_rpc_call_method(const tr_rpc_call *call)
{
    return call->env.method ? call->env.method : "";
}

uint64_t tr_rpc_call_id(const tr_rpc_call *call)
{
    return call->env.request_id;
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
    call->refs--;
    pthread_cond_signal(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
}

static const tr_rpc_method *find_method(const tr_rpc_server *srv, const char *name)
{
    for (const tr_rpc_method *m = srv->opts.methods; m->name != NULL; m++) {
        if (strcmp(m->name, name) == 0) {
            return m;
        }
    }
    return NULL;
}

/* admit decodes and checks a request; returns the handler to run, or NULL
 * after answering the call with the reason it was refused. */
static const tr_rpc_method *admit(tr_rpc_call *call, nng_msg *msg)
{
    tr_rpc_server *srv = call->srv;
    const tr_rpc_method *m;
    uint32_t t;
    tr_err err;

    if (tr_envelope_decode_request(nng_msg_body(msg), nng_msg_len(msg), &call->req_msg, &call->env, &err) !=
        TROUPE_OK) {
        TR_LOG(TR_LOG_WARNING, "rpc: refused frame: %s", err.msg);
        answer(call, err.code, err.msg, NULL, 0);
        return NULL;
    }
    if (srv->token != NULL && !tr_ct_equal(call->env.token, srv->token)) {
        TR_LOG(TR_LOG_WARNING, "rpc: unauthenticated call method=%s id=%llu", call->env.method,
               (unsigned long long)call->env.request_id);
        answer(call, TROUPE_UNAUTHENTICATED, "missing or wrong auth token (set --token or TROUPE_TOKEN)",
               NULL, 0);
        return NULL;
    }
    m = find_method(srv, call->env.method);
    if (m == NULL) {
        TR_LOG(TR_LOG_WARNING, "rpc: unknown method=%s", call->env.method);
        tr_rpc_reply_error(call, TROUPE_UNIMPLEMENTED, "unknown method '%s'", call->env.method);
        return NULL;
    }
    t = call->env.timeout_ms ? call->env.timeout_ms : srv->opts.default_timeout_ms;
    if (t > srv->opts.max_timeout_ms) {
        t = srv->opts.max_timeout_ms;
    }
    call->deadline = tr_now_ms() + t;
    return m;
}

static void on_received(tr_rpc_call *call)
{
    tr_rpc_server *srv = call->srv;
    nng_msg *msg = nng_aio_get_msg(call->aio);
    const tr_rpc_method *m;
    nng_msg *pending;

    pthread_mutex_lock(&srv->mu);
    call->state = ST_HANDLER;
    pthread_mutex_unlock(&srv->mu);

    m = admit(call, msg);
    nng_msg_free(msg);
    if (m != NULL) {
        m->fn(call, srv->opts.user);
    }

    pthread_mutex_lock(&srv->mu);
    pending = call->pending;
    call->pending = NULL;
    /* A deferred call retires after its reply (its owner holds a reference),
     * even one answered before the handler returned: replace it either way so
     * the number of receiving contexts stays constant. */
    if (call->deferred && !srv->stopping && call_open(srv) != 0) {
        TR_LOG(TR_LOG_ERR, "rpc: cannot open a replacement context; capacity reduced");
    }
    if (pending != NULL) {
        start_send(call, pending);
    } else if (call->deferred && !call->answered) {
        call->state = ST_DEFERRED;
        call->next = srv->deferred;
        srv->deferred = call;
        pthread_cond_signal(&srv->cv);
    } else {
        pthread_mutex_unlock(&srv->mu);
        TR_LOG(TR_LOG_ERR, "rpc: handler for %s returned without replying", tr_rpc_call_method(call));
        tr_rpc_reply_error(call, TROUPE_INTERNAL, "handler did not reply");
        pthread_mutex_lock(&srv->mu);
        pending = call->pending;
        call->pending = NULL;
        if (pending != NULL) {
            start_send(call, pending);
        }
    }
    pthread_mutex_unlock(&srv->mu);
}

static void on_sent(tr_rpc_call *call, int rv)
{
    tr_rpc_server *srv = call->srv;

    if (rv != 0) {
        /* The client went away; nng gives the message back to us. */
        nng_msg_free(nng_aio_get_msg(call->aio));
    }
    pthread_mutex_lock(&srv->mu);
    if (call->deferred) {
        call->next = srv->graveyard;
        srv->graveyard = call;
        pthread_cond_signal(&srv->cv);
    } else if (!srv->stopping) {
        call_reset(call);
        call->state = ST_RECV;
        nng_ctx_recv(call->ctx, call->aio);
    }
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
    call_reset(call);
    free(call);
}

/* collect_expired lists deferred calls past their deadline (or all of them)
 * through xnext, taking a reference on each so they outlive the unlocked
 * answer and on_expire below. They stay on the deferred list: answer() unlinks
 * them. Caller holds srv->mu. */
static tr_rpc_call *collect_expired(tr_rpc_server *srv, int64_t now, int all)
{
    tr_rpc_call *expired = NULL;

    for (tr_rpc_call *c = srv->deferred; c != NULL; c = c->next) {
        if (all || c->deadline <= now) {
            c->xnext = expired;
            expired = c;
            c->refs++;
        }
    }
    return expired;
}

static void expire_list(tr_rpc_server *srv, tr_rpc_call *list, int code, const char *why)
{
    while (list != NULL) {
        tr_rpc_call *c = list;
        list = c->xnext;
        c->xnext = NULL;
        if (answer(c, code, why, NULL, 0) == TROUPE_OK) {
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
        expire_list(srv, expired, TROUPE_DEADLINE_EXCEEDED, "deadline exceeded while waiting");
        while (dead != NULL) {
            tr_rpc_call *c = dead;
            dead = c->next;
            call_free(c);
        }
        pthread_mutex_lock(&srv->mu);
        /* Sleep even with retired calls still referenced: a release signals
         * the condition, so they are freed promptly without spinning. */
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
    if (opts->token != NULL && opts->token[0] != '\0') {
        srv->token = strdup(opts->token);
    }
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->cv, NULL);
    if ((rv = nng_rep0_open(&srv->sock)) != 0) {
        rv = tr_rpc_from_nng(rv, "open REP socket", err);
        goto fail;
    }
    nng_socket_set_size(srv->sock, NNG_OPT_RECVMAXSZ, srv->opts.max_frame);
    if ((rv = nng_listen(srv->sock, opts->url, NULL, 0)) != 0) {
        rv = tr_rpc_from_nng(rv, opts->url, err);
        tr_err_prefix(err, "cannot listen");
        goto fail_sock;
    }
    pthread_mutex_lock(&srv->mu);
    for (int i = 0; i < n; i++) {
        if ((rv = call_open(srv)) != 0) {
            pthread_mutex_unlock(&srv->mu);
            rv = tr_rpc_from_nng(rv, "open context", err);
            goto fail_sock;
        }
    }
    pthread_mutex_unlock(&srv->mu);
    if (pthread_create(&srv->sweeper, NULL, sweeper_main, srv) != 0) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot start the deadline sweeper thread");
        goto fail_sock;
    }
    *out = srv;
    return TROUPE_OK;
fail_sock:
    nng_close(srv->sock);
    for (size_t i = 0; i < srv->pool_len; i++) {
        call_free(srv->pool[i]);
    }
fail:
    free(srv->pool);
    free(srv->token);
    free(srv);
    return rv;
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

    pthread_mutex_lock(&srv->mu);
    srv->stopping = 1;
    pthread_cond_signal(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
    pthread_join(srv->sweeper, NULL);

    nng_close(srv->sock);
    for (size_t i = 0; i < srv->pool_len; i++) {
        nng_aio_stop(srv->pool[i]->aio);
    }
    for (size_t i = 0; i < srv->pool_len; i++) {
        call_free(srv->pool[i]);
    }
    free(srv->pool);
    free(srv->token);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->cv);
    free(srv);
}

uint64_t tr_rpc_server_served(const tr_rpc_server *srv)
{
    return atomic_load(&((tr_rpc_server *)srv)->served);
}
