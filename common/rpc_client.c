/* rpc_client.c - the REQ side of troupe.v1 RPC.
 *
 * One nng REQ socket per client; every call opens its own context, so calls
 * from many threads proceed independently and replies are matched by nng.
 * nng re-sends a request whose connection dropped (a restarted head), which is
 * why only idempotent calls get our own retries on top: a non-idempotent call
 * is tried once, within its deadline. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "log.h"
#include "rpc.h"
#include "rpc_tls.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

/* A REQ context with its aio, kept between calls: opening and closing a
 * context and allocating an aio for every call cost about as much as the
 * envelope codec (callgrind), so finished slots go back to a free list. */
typedef struct slot {
    nng_ctx ctx;
    nng_aio *aio;
    const char *method; /* while busy: the call's method (the caller's string) */
    int cancelled;      /* while busy: tr_rpc_client_cancel named this call */
    struct slot *next, *prev; /* on idle (next only) or on busy */
} slot;

struct tr_rpc_client {
    nng_socket sock;
    char *url;
    char *token;
    atomic_uint_least64_t next_id;
    pthread_mutex_t mu; /* guards idle, busy and shut */
    slot *idle;
    slot *busy; /* slots of calls in flight, so that shutdown can cancel them */
    int shut;   /* tr_rpc_client_shutdown ran: new calls are refused */
    tr_rpc_tls tls; /* owned copies, for tr_rpc_client_explain */
};

static void tls_free(tr_rpc_tls *t)
{
    free((char *)t->ca_file);
    free((char *)t->cert_file);
    free((char *)t->key_file);
    free((char *)t->server_name);
    memset(t, 0, sizeof(*t));
}

static char *dup_or_null(const char *s)
{
    return (s && s[0]) ? strdup(s) : NULL;
}

/* dial starts the connection; a tls+tcp:// URL gets its TLS configuration on
 * its own dialer (nng 1.5.2's default would verify nothing we chose). */
static int dial(tr_rpc_client *c, const tr_rpc_client_opts *opts, tr_err *err)
{
    int flags = opts->wait_for_server ? NNG_FLAG_NONBLOCK : 0;
    nng_tls_config *cfg = NULL;
    nng_dialer d;
    int rv;

    if (!tr_rpc_is_tls(opts->url)) {
        rv = nng_dial(c->sock, opts->url, NULL, flags);
    } else if ((rv = tr_rpc_tls_config(&opts->tls, 0, opts->url, &cfg, err)) != TROUPE_OK) {
        return -rv; /* a troupe status, already in err */
    } else if ((rv = nng_dialer_create(&d, c->sock, opts->url)) == 0 &&
               (rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg)) == 0) {
        rv = nng_dialer_start(d, flags);
    }
    if (cfg != NULL) {
        nng_tls_config_free(cfg); /* the dialer holds its own reference */
    }
    return rv;
}

/* dial_failed words a failed dial: for TLS the handshake repeated by
 * mbedTLS says why; a plain tcp:// dial cut short may have met a TLS head. */
static int dial_failed(int rv, const tr_rpc_client_opts *opts, tr_err *err)
{
    char what[900], why[600] = "";

    if (tr_rpc_is_tls(opts->url) && rv != NNG_ECONNREFUSED && rv != NNG_EADDRINVAL) {
        tr_rpc_tls_diagnose(&opts->tls, opts->url, why, sizeof(why));
    } else if (!tr_rpc_is_tls(opts->url) &&
               (rv == NNG_ECLOSED || rv == NNG_ECONNRESET || rv == NNG_ECONNSHUT || rv == NNG_EPROTO)) {
        snprintf(why, sizeof(why), "%s (if the head listens on tls+tcp://, use that URL and --tls-ca)",
                 nng_strerror(rv));
    }
    if (why[0] != '\0') {
        snprintf(what, sizeof(what), "cannot reach %s: %s", opts->url, why);
        return tr_err_set(err, TROUPE_UNAVAILABLE, "%s", what);
    }
    snprintf(what, sizeof(what), "cannot reach %s", opts->url);
    return tr_rpc_from_nng(rv, what, err);
}

int tr_rpc_client_explain(tr_rpc_client *c, tr_err *err)
{
    char why[600] = "";

    if (c == NULL || !tr_rpc_is_tls(c->url)) {
        return 0;
    }
    tr_rpc_tls_diagnose(&c->tls, c->url, why, sizeof(why));
    if (why[0] == '\0') {
        return 0;
    }
    tr_err_prefix(err, "%s", why);
    return 1;
}

int tr_rpc_from_nng(int rv, const char *what, tr_err *err)
{
    int code;

    switch (rv) {
    case 0: return TROUPE_OK;
    case NNG_ETIMEDOUT: code = TROUPE_DEADLINE_EXCEEDED; break;
    case NNG_ECONNREFUSED:
    case NNG_ECONNRESET:
    case NNG_ECONNABORTED:
    case NNG_ECONNSHUT:
    case NNG_ECLOSED:
    case NNG_EUNREACHABLE:
    case NNG_ENOENT:
    case NNG_EPEERAUTH:
    case NNG_EADDRINUSE:
    case NNG_ETRANERR: code = TROUPE_UNAVAILABLE; break;
    case NNG_ENOMEM:
    case NNG_EMSGSIZE:
    case NNG_ENOSPC: code = TROUPE_RESOURCE_EXHAUSTED; break;
    case NNG_EINVAL:
    case NNG_EADDRINVAL:
    case NNG_EBADTYPE: code = TROUPE_INVALID_ARGUMENT; break;
    case NNG_ENOTSUP: code = TROUPE_UNIMPLEMENTED; break;
    case NNG_EPERM: code = TROUPE_PERMISSION_DENIED; break;
    case NNG_ECANCELED: code = TROUPE_CANCELLED; break;
    case NNG_EPROTO: code = TROUPE_DATA_LOSS; break;
    default: code = TROUPE_UNKNOWN; break;
    }
    return tr_err_set(err, code, "%s: %s", what, nng_strerror(rv));
}

int tr_rpc_client_open(const tr_rpc_client_opts *opts, tr_rpc_client **out, tr_err *err)
{
    tr_rpc_client *c;
    int rv;

    *out = NULL;
    if (opts->url == NULL || opts->url[0] == '\0') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "no server URL given");
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    c->url = strdup(opts->url);
    c->token = strdup(opts->token ? opts->token : "");
    atomic_init(&c->next_id, ((uint64_t)tr_wall_ms() << 20) ^ (uint64_t)(uintptr_t)c);
    pthread_mutex_init(&c->mu, NULL);
    if (c->url == NULL || c->token == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        goto fail;
    }
    if ((rv = nng_req0_open(&c->sock)) != 0) {
        rv = tr_rpc_from_nng(rv, "open REQ socket", err);
        goto fail;
    }
    nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ,
                        opts->max_frame ? opts->max_frame : TR_RPC_DEFAULT_MAX_FRAME);
    /* Reconnect fast after a head restart, and do not let nng re-send on its
     * own timer: deadlines and retries are ours. */
    nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, 50);
    nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT, 1000);
    nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    c->tls.ca_file = dup_or_null(opts->tls.ca_file);
    c->tls.cert_file = dup_or_null(opts->tls.cert_file);
    c->tls.key_file = dup_or_null(opts->tls.key_file);
    c->tls.server_name = dup_or_null(opts->tls.server_name);
    rv = dial(c, opts, err);
    if (rv != 0) {
        rv = rv < 0 ? -rv : dial_failed(rv, opts, err);
        nng_close(c->sock);
        goto fail;
    }
    *out = c;
    return TROUPE_OK;
fail:
    tls_free(&c->tls);
    free(c->url);
    free(c->token);
    free(c);
    return rv;
}

/* TR_RPC_CLOSE_WAIT_MS: how long a close waits for nng. nng 1.5.2's
 * nng_close of a REQ socket can hang for good after a request timed out on
 * one of its contexts (nng#648, nng#1543): a CLI whose submit reached its
 * deadline while the head's disk was full then never exited
 * (integration.jobs.store_failpoint under ASan). A close that takes longer
 * leaves the socket to its thread and returns; it is logged. */
#define TR_RPC_CLOSE_WAIT_MS 3000

/* Why shutdown cancels rather than closes the socket: a call in flight on
 * another thread then ends with nng_ctx_close on its context while nng_close
 * tears the socket down, and nng 1.5.2 lets the two race (nni_ctx_rele wakes
 * the closer before it destroys the context, whose fini then locks the freed
 * protocol mutex): a worker aborted with "panic: pthread_mutex_unlock:
 * Invalid argument" at exit (integration.runtime.trace_restart under ASan).
 * Cancelling the calls' aios ends them as fast, and the socket is closed
 * once, by tr_rpc_client_close, after every caller is done. */
void tr_rpc_client_shutdown(tr_rpc_client *c)
{
    if (c == NULL) {
        return;
    }
    pthread_mutex_lock(&c->mu);
    c->shut = 1;
    for (slot *sl = c->busy; sl != NULL; sl = sl->next) {
        nng_aio_cancel(sl->aio);
    }
    pthread_mutex_unlock(&c->mu);
}

void tr_rpc_client_cancel(tr_rpc_client *c, const char *method)
{
    if (c == NULL) {
        return;
    }
    pthread_mutex_lock(&c->mu);
    for (slot *sl = c->busy; sl != NULL; sl = sl->next) {
        if (method == NULL || strcmp(sl->method, method) == 0) {
            sl->cancelled = 1; /* for the step it has not begun yet */
            nng_aio_cancel(sl->aio);
        }
    }
    pthread_mutex_unlock(&c->mu);
}

/* client_free closes the socket and frees the client (tr_run_bounded's fn). */
static void client_free(void *arg)
{
    tr_rpc_client *c = arg;

    nng_close(c->sock);
    pthread_mutex_destroy(&c->mu);
    tls_free(&c->tls);
    free(c->url);
    free(c->token);
    free(c);
}

void tr_rpc_client_close(tr_rpc_client *c)
{
    char url[256];

    if (c == NULL) {
        return;
    }
    while (c->idle != NULL) {
        slot *sl = c->idle;
        c->idle = sl->next;
        nng_aio_free(sl->aio);
        nng_ctx_close(sl->ctx);
        free(sl);
    }
    tr_strlcpy(url, c->url, sizeof(url));
    switch (tr_run_bounded(client_free, c, TR_RPC_CLOSE_WAIT_MS)) {
    case 1:
        break;
    case 0:
        TR_LOG(TR_LOG_WARNING, "closing the connection to %s did not finish in %d ms (nng 1.5.2 can hang "
               "here: nng#648); left to finish on its own", url, TR_RPC_CLOSE_WAIT_MS);
        break;
    default:
        client_free(c); /* no thread to spare: close here */
        break;
    }
}

/* slot_get takes an idle context or opens one, and lists it as busy with
 * method's call. */
static int slot_get(tr_rpc_client *c, const char *method, slot **out, tr_err *err)
{
    slot *sl;
    int rv;

    pthread_mutex_lock(&c->mu);
    if (c->shut) {
        pthread_mutex_unlock(&c->mu);
        return tr_err_set(err, TROUPE_CANCELLED, "the connection to %s is shutting down", c->url);
    }
    sl = c->idle;
    if (sl != NULL) {
        c->idle = sl->next;
    }
    pthread_mutex_unlock(&c->mu);
    if (sl == NULL) {
        if ((sl = calloc(1, sizeof(*sl))) == NULL) {
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        }
        if ((rv = nng_ctx_open(&sl->ctx, c->sock)) != 0) {
            free(sl);
            return tr_rpc_from_nng(rv, "open context", err);
        }
        if ((rv = nng_aio_alloc(&sl->aio, NULL, NULL)) != 0) {
            nng_ctx_close(sl->ctx);
            free(sl);
            return tr_rpc_from_nng(rv, "alloc aio", err);
        }
    }
    pthread_mutex_lock(&c->mu);
    sl->method = method;
    sl->cancelled = 0;
    sl->prev = NULL;
    sl->next = c->busy;
    if (c->busy != NULL) {
        c->busy->prev = sl;
    }
    c->busy = sl;
    pthread_mutex_unlock(&c->mu);
    *out = sl;
    return TROUPE_OK;
}

/* started: the operation just begun on sl's aio ends at once if shutdown
 * or a cancel came first (they cancel what has begun; this catches what
 * began after they looked). */
static void started(tr_rpc_client *c, slot *sl)
{
    pthread_mutex_lock(&c->mu);
    if (c->shut || sl->cancelled) {
        nng_aio_cancel(sl->aio);
    }
    pthread_mutex_unlock(&c->mu);
}

/* slot_put keeps a slot whose exchange completed; one that failed may still
 * hold a request in nng, so it is closed instead. */
static void slot_put(tr_rpc_client *c, slot *sl, int ok)
{
    pthread_mutex_lock(&c->mu);
    if (sl->prev != NULL) {
        sl->prev->next = sl->next;
    } else {
        c->busy = sl->next;
    }
    if (sl->next != NULL) {
        sl->next->prev = sl->prev;
    }
    if (ok) {
        sl->next = c->idle;
        c->idle = sl;
    }
    pthread_mutex_unlock(&c->mu);
    if (!ok) {
        nng_aio_free(sl->aio);
        nng_ctx_close(sl->ctx);
        free(sl);
    }
}

/* exchange sends one framed request on an idle context and waits for the
 * reply frame until deadline. */
static int exchange(tr_rpc_client *c, const char *method, nng_msg *req, nng_msg **rep, int64_t deadline,
                    tr_err *err)
{
    slot *sl = NULL;
    int64_t left = deadline - tr_now_ms();
    int rv;

    *rep = NULL;
    if (left <= 0) {
        nng_msg_free(req);
        return tr_err_set(err, TROUPE_DEADLINE_EXCEEDED, "deadline exceeded before sending to %s", c->url);
    }
    if ((rv = slot_get(c, method, &sl, err)) != TROUPE_OK) {
        nng_msg_free(req);
        return rv;
    }
    nng_aio_set_timeout(sl->aio, (nng_duration)left);
    nng_aio_set_msg(sl->aio, req);
    nng_ctx_send(sl->ctx, sl->aio);
    started(c, sl);
    nng_aio_wait(sl->aio);
    if ((rv = nng_aio_result(sl->aio)) != 0) {
        nng_msg_free(req);
        goto nng_fail;
    }
    left = deadline - tr_now_ms();
    nng_aio_set_timeout(sl->aio, (nng_duration)(left > 0 ? left : 1));
    nng_ctx_recv(sl->ctx, sl->aio);
    started(c, sl);
    nng_aio_wait(sl->aio);
    if ((rv = nng_aio_result(sl->aio)) != 0) {
        goto nng_fail;
    }
    *rep = nng_aio_get_msg(sl->aio);
    slot_put(c, sl, 1);
    return TROUPE_OK;
nng_fail:
    slot_put(c, sl, 0);
    if (rv == NNG_ETIMEDOUT) {
        return tr_err_set(err, TROUPE_DEADLINE_EXCEEDED,
                          "no reply from %s before the deadline (is it running?)", c->url);
    }
    return tr_rpc_from_nng(rv, c->url, err);
}

static int attempt(tr_rpc_client *c, const char *method, const uint8_t *payload, size_t len,
                   uint8_t **reply_payload, size_t *reply_len, int64_t deadline, tr_err *err)
{
    tr_envelope env = {0};
    uint8_t *buf = NULL;
    size_t n = 0;
    nng_msg *req = NULL, *rep = NULL;
    Troupe__V1__Reply *r = NULL;
    int64_t left = deadline - tr_now_ms();
    int rv;

    env.method = method;
    env.request_id = atomic_fetch_add(&c->next_id, 1);
    env.timeout_ms = (uint32_t)(left > 0 ? left : 1);
    env.token = c->token;
    env.payload = payload;
    env.payload_len = len;
    if ((rv = tr_envelope_encode_request(&env, &buf, &n, err)) != TROUPE_OK) {
        return rv;
    }
    if (nng_msg_alloc(&req, 0) != 0 || nng_msg_append(req, buf, n) != 0) {
        nng_msg_free(req);
        free(buf);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    free(buf);
    if ((rv = exchange(c, method, req, &rep, deadline, err)) != TROUPE_OK) {
        return rv;
    }
    r = troupe__v1__reply__unpack(NULL, nng_msg_len(rep), nng_msg_body(rep));
    if (r == NULL) {
        rv = tr_err_set(err, TROUPE_DATA_LOSS, "malformed reply from %s", c->url);
        goto out;
    }
    rv = r->code;
    if (rv != TROUPE_OK) {
        tr_err_set(err, rv, "%s", r->message[0] ? r->message : troupe_strerror(rv));
        goto out;
    }
    *reply_len = r->payload.len;
    *reply_payload = malloc(r->payload.len ? r->payload.len : 1);
    if (*reply_payload == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    if (r->payload.len > 0) { /* an all-defaults reply has no payload bytes at all */
        memcpy(*reply_payload, r->payload.data, r->payload.len);
    }
out:
    if (r != NULL) {
        troupe__v1__reply__free_unpacked(r, NULL);
    }
    nng_msg_free(rep);
    return rv;
}

int tr_rpc_client_call_raw(tr_rpc_client *c, const char *method, const uint8_t *payload, size_t len,
                           uint8_t **reply_payload, size_t *reply_len, uint32_t timeout_ms, unsigned flags,
                           tr_err *err)
{
    int64_t deadline = tr_now_ms() + (timeout_ms ? timeout_ms : 30000);
    int64_t backoff = 50;
    int rv;

    *reply_payload = NULL;
    *reply_len = 0;
    for (;;) {
        rv = attempt(c, method, payload, len, reply_payload, reply_len, deadline, err);
        if (rv != TROUPE_UNAVAILABLE || !(flags & TR_RPC_IDEMPOTENT) || tr_now_ms() + backoff >= deadline) {
            return rv;
        }
        tr_sleep_ms(backoff);
        backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
    }
}

int tr_rpc_client_call(tr_rpc_client *c, const char *method, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *reply_desc, ProtobufCMessage **reply,
                       uint32_t timeout_ms, unsigned flags, tr_err *err)
{
    uint8_t *buf = NULL, *rbuf = NULL;
    size_t n = 0, rn = 0;
    int rv;

    if (reply != NULL) {
        *reply = NULL;
    }
    if (req != NULL) {
        n = protobuf_c_message_get_packed_size(req);
        buf = malloc(n ? n : 1);
        if (buf == NULL) {
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        }
        protobuf_c_message_pack(req, buf);
    }
    rv = tr_rpc_client_call_raw(c, method, buf, n, &rbuf, &rn, timeout_ms, flags, err);
    free(buf);
    if (rv != TROUPE_OK || reply_desc == NULL || reply == NULL) {
        free(rbuf);
        return rv;
    }
    *reply = protobuf_c_message_unpack(reply_desc, NULL, rn, rbuf);
    free(rbuf);
    if (*reply == NULL) {
        return tr_err_set(err, TROUPE_DATA_LOSS, "malformed %s from %s", reply_desc->name, c->url);
    }
    return TROUPE_OK;
}
