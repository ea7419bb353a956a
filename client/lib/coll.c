/* coll.c - the CPU collective: a ring of nng pair1 sockets between the ranks
 * (pair0 of nng 1.5.2 can hang in nng_close, upstream nng issue #1543).
 *
 * Rank r listens on one pair socket ("left": rank r-1 dials it) and dials
 * rank r+1's ("right"). Data, aborts and goodbyes flow rightwards; only the
 * acknowledgement of a goodbye flows back. Every message starts with a small
 * header (type, operation, sequence number, count) so that ranks making
 * different calls fail with a clear reason instead of mixing buffers.
 *
 * All-reduce: reduce-scatter then all-gather, size-1 steps each; in a step
 * a rank sends one segment (1/size of the buffer) to the right while it
 * receives another from the left, in messages of at most CHUNK bytes, send
 * and receive in flight together (a blocking send before the receive would
 * deadlock a ring once messages outgrow the socket buffers). Broadcast runs
 * the buffer around the ring from the root, chunk by chunk, so the chunks
 * pipeline. Reduce-scatter and all-gather are the two halves of the
 * all-reduce on their own, with the segments renumbered so that rank r ends
 * owning segment r (the all-reduce leaves rank r with segment r+1 complete
 * after its first half; its sums run in another ring order, so its bits may
 * differ from reduce-scatter's by rounding). Barrier is an all-reduce of size elements (one per segment, so
 * every step moves a message and every rank hears from every other).
 *
 * Failure. Sends and receives are aios with the operation's remaining time
 * as timeout (DEADLINE_EXCEEDED naming the neighbour). A pipe notification
 * that a neighbour's connection went away cancels both aios at once
 * (UNAVAILABLE naming it), so a dead peer is reported in milliseconds, not at
 * the deadline. The rank that detects a failure sends ABORT with its message
 * to the right; each rank forwards it, so the whole ring names the same peer.
 *
 * Close. pair1 completes a send as soon as the message is queued, and closing
 * a socket drops what is queued; so close sends BYE right, answers the left
 * neighbour's BYE with ACK, and waits for the right one's ACK (bounded by the
 * timeout) before closing the sockets: the ACK proves the right neighbour
 * has read everything sent before. A BYE met inside an operation means that
 * neighbour left early: UNAVAILABLE naming it. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>

#include "coll.h"
#include "util.h"

#define CHUNK (1u << 20)
#define NAME_MAX_LEN 256
#define SIGNAL_SEND_MS 1000

enum { MSG_DATA = 1, MSG_ABORT = 2, MSG_BYE = 3, MSG_ACK = 4 };
enum { OP_ALLREDUCE = 1, OP_BROADCAST = 2, OP_BARRIER = 3, OP_REDUCE_SCATTER = 4, OP_ALLGATHER = 5 };

typedef struct hdr {
    uint8_t type, op, dtype, code;
    uint32_t seq;
    uint64_t count; /* elements (all-reduce) or bytes (broadcast) */
} hdr;

struct troupe_coll {
    uint32_t rank, size, timeout_ms;
    nng_socket left, right;
    nng_dialer dialer;
    nng_listener listener;
    int dialed, listening;
    nng_aio *aio_s, *aio_r;
    int opened_left, opened_right;
    char (*names)[NAME_MAX_LEN];
    uint32_t seq;
    int broken;
    tr_err cause;
    int left_bye; /* the left neighbour's BYE was read */
    troupe_worker_ctx *owner; /* tr_coll_set_owner; NULL without a head */
    int quiet;                /* tr_coll_set_quiet: failures not reported to the head */
    int aborting;             /* tr_coll_abort: close without the goodbye */

    pthread_mutex_t mu; /* the flags below, set by nng's pipe callbacks */
    pthread_cond_t cv;
    int left_up, right_up, left_gone, right_gone;
    nng_pipe left_pipe, right_pipe;
};

/* The operation in progress, for messages and header checks. */
typedef struct opctx {
    troupe_coll *c;
    int op;
    uint8_t dtype;
    uint64_t count;
    int64_t deadline;
} opctx;

static const char *op_name(int op)
{
    return op == OP_ALLREDUCE        ? "all-reduce"
           : op == OP_BROADCAST      ? "broadcast"
           : op == OP_REDUCE_SCATTER ? "reduce-scatter"
           : op == OP_ALLGATHER      ? "all-gather"
                                     : "barrier";
}

static uint32_t left_of(const troupe_coll *c)
{
    return (c->rank + c->size - 1) % c->size;
}

static uint32_t right_of(const troupe_coll *c)
{
    return (c->rank + 1) % c->size;
}

static int nng_fail(tr_err *e, int rv, const char *what)
{
    return tr_err_set(e, rv == NNG_ENOMEM ? TROUPE_RESOURCE_EXHAUSTED : TROUPE_UNAVAILABLE, "%s: %s", what,
                      nng_strerror(rv));
}

/* pipe_event runs on an nng thread when a neighbour connects or goes away.
 * Each socket has its own callback: by REM_POST a pipe no longer reliably
 * names its socket. */
static void pipe_event(troupe_coll *c, int is_left, nng_pipe p, nng_pipe_ev ev)
{
    pthread_mutex_lock(&c->mu);
    if (ev == NNG_PIPE_EV_ADD_POST) {
        *(is_left ? &c->left_up : &c->right_up) = 1;
        *(is_left ? &c->left_pipe : &c->right_pipe) = p;
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        *(is_left ? &c->left_gone : &c->right_gone) = 1;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (ev == NNG_PIPE_EV_REM_POST) {
        nng_aio_cancel(c->aio_s);
        nng_aio_cancel(c->aio_r);
    }
}

static void left_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    pipe_event(arg, 1, p, ev);
}

static void right_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    pipe_event(arg, 0, p, ev);
}

static int gone(troupe_coll *c, int left)
{
    int g;

    pthread_mutex_lock(&c->mu);
    g = left ? c->left_gone : c->right_gone;
    pthread_mutex_unlock(&c->mu);
    return g;
}

static int open_socket(troupe_coll *c, nng_socket *s, int *opened, nng_pipe_cb cb, tr_err *e)
{
    int rv = nng_pair1_open(s);

    if (rv != 0) {
        return nng_fail(e, rv, "cannot open a pair socket");
    }
    *opened = 1;
    nng_socket_set_size(*s, NNG_OPT_RECVMAXSZ, CHUNK + sizeof(hdr) + 1024);
    nng_socket_set_ms(*s, NNG_OPT_RECONNMINT, 10);
    nng_socket_set_ms(*s, NNG_OPT_RECONNMAXT, 200);
    nng_socket_set_ms(*s, NNG_OPT_SENDTIMEO, SIGNAL_SEND_MS); /* ABORT and ACK only: data uses aios */
    nng_pipe_notify(*s, NNG_PIPE_EV_ADD_POST, cb, c);
    nng_pipe_notify(*s, NNG_PIPE_EV_REM_POST, cb, c);
    return TROUPE_OK;
}

int tr_coll_listen(troupe_coll **out, uint32_t rank, uint32_t size, const char *url, uint32_t timeout_ms,
                   int *port, tr_err *e)
{
    troupe_coll *c = NULL;
    int rv = TROUPE_OK, nrv;

    *out = NULL;
    if (port != NULL) {
        *port = 0;
    }
    if (size == 0 || rank >= size) {
        return tr_err_set(e, TROUPE_INVALID_ARGUMENT, "rank %" PRIu32 " of %" PRIu32 " ranks", rank, size);
    }
    if ((c = calloc(1, sizeof(*c))) == NULL || (c->names = calloc(size, sizeof(*c->names))) == NULL) {
        free(c);
        return tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    c->rank = rank;
    c->size = size;
    c->timeout_ms = timeout_ms;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (size == 1) {
        goto out;
    }
    if ((nrv = nng_aio_alloc(&c->aio_s, NULL, NULL)) != 0 || (nrv = nng_aio_alloc(&c->aio_r, NULL, NULL)) != 0) {
        rv = nng_fail(e, nrv, "cannot allocate an aio");
        goto out;
    }
    if ((rv = open_socket(c, &c->left, &c->opened_left, left_event, e)) != TROUPE_OK ||
        (rv = open_socket(c, &c->right, &c->opened_right, right_event, e)) != TROUPE_OK) {
        goto out;
    }
    if ((nrv = nng_listen(c->left, url, &c->listener, 0)) != 0) {
        rv = tr_err_set(e, TROUPE_UNAVAILABLE, "cannot listen on %s: %s", url, nng_strerror(nrv));
        goto out;
    }
    c->listening = 1;
    if (port != NULL && strncmp(url, "tcp", 3) == 0) {
        nng_listener_get_int(c->listener, NNG_OPT_TCP_BOUND_PORT, port);
    }
out:
    if (rv != TROUPE_OK) {
        tr_coll_close(c);
        return rv;
    }
    *out = c;
    return TROUPE_OK;
}

int tr_coll_connect(troupe_coll *c, const char *const *urls, const char *const *names, tr_err *e)
{
    int64_t deadline = tr_now_ms() + c->timeout_ms;
    struct timespec ts;
    int nrv, rv = TROUPE_OK;

    for (uint32_t i = 0; i < c->size; i++) {
        snprintf(c->names[i], NAME_MAX_LEN, "%s", names[i]);
    }
    if (c->size == 1) {
        return TROUPE_OK;
    }
    if ((nrv = nng_dial(c->right, urls[right_of(c)], &c->dialer, NNG_FLAG_NONBLOCK)) != 0) {
        return tr_err_set(e, TROUPE_UNAVAILABLE, "cannot dial %s at %s: %s", c->names[right_of(c)],
                          urls[right_of(c)], nng_strerror(nrv));
    }
    pthread_mutex_lock(&c->mu);
    while (!(c->left_up && c->right_up) && tr_now_ms() < deadline) {
        tr_abstime_in(&ts, deadline - tr_now_ms());
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    if (!c->right_up) {
        rv = tr_err_set(e, TROUPE_DEADLINE_EXCEEDED, "%s did not accept a connection at %s within %" PRIu32 " ms",
                        c->names[right_of(c)], urls[right_of(c)], c->timeout_ms);
    } else if (!c->left_up) {
        rv = tr_err_set(e, TROUPE_DEADLINE_EXCEEDED, "%s did not connect to %s within %" PRIu32 " ms",
                        c->names[left_of(c)], c->names[c->rank], c->timeout_ms);
    }
    pthread_mutex_unlock(&c->mu);
    c->dialed = 1;
    /* Once connected, a lost connection is a failure, never redialled: a
     * redial racing the peer's close can hang nng_close there (nng 1.5.2). */
    nng_dialer_set_ms(c->dialer, NNG_OPT_RECONNMINT, 3600000);
    nng_dialer_set_ms(c->dialer, NNG_OPT_RECONNMAXT, 3600000);
    return rv;
}

/* fail_peer words a failed send/receive on one side. */
static int fail_peer(opctx *o, int left, int nrv, tr_err *e)
{
    troupe_coll *c = o->c;
    const char *who = c->names[left ? left_of(c) : right_of(c)];

    if (nrv == NNG_ETIMEDOUT || (nrv == 0 && tr_now_ms() >= o->deadline)) {
        return tr_err_set(e, TROUPE_DEADLINE_EXCEEDED, "%s: %s %s %s within %" PRIu32 " ms", op_name(o->op), who,
                          left ? "sent nothing to" : "took nothing from", c->names[c->rank], c->timeout_ms);
    }
    /* A neighbour's departure cancels both aios: name the one that left. */
    if (!gone(c, left) && gone(c, !left)) {
        left = !left;
        who = c->names[left ? left_of(c) : right_of(c)];
    }
    if (gone(c, left) || nrv == NNG_ECANCELED || nrv == NNG_ECLOSED) {
        return tr_err_set(e, TROUPE_UNAVAILABLE, "%s: %s went away (its connection closed: the process exited or "
                          "closed the collective)", op_name(o->op), who);
    }
    return tr_err_set(e, TROUPE_UNAVAILABLE, "%s: with %s: %s", op_name(o->op), who, nng_strerror(nrv));
}

static int64_t remaining(const opctx *o)
{
    int64_t r = o->deadline - tr_now_ms();
    return r > 0 ? r : 0;
}

/* post_send queues len bytes of data to the right neighbour on aio_s. */
static int post_send(opctx *o, const void *data, size_t len, tr_err *e)
{
    troupe_coll *c = o->c;
    nng_msg *m = NULL;
    hdr h = {MSG_DATA, (uint8_t)o->op, o->dtype, 0, c->seq, o->count};
    int nrv;

    if (gone(c, 0) || remaining(o) == 0) {
        return fail_peer(o, 0, 0, e);
    }
    if ((nrv = nng_msg_alloc(&m, sizeof(h) + len)) != 0) {
        return nng_fail(e, nrv, "cannot allocate a message");
    }
    memcpy(nng_msg_body(m), &h, sizeof(h));
    if (len > 0) {
        memcpy((char *)nng_msg_body(m) + sizeof(h), data, len);
    }
    nng_aio_set_msg(c->aio_s, m);
    nng_aio_set_timeout(c->aio_s, (nng_duration)remaining(o));
    nng_send_aio(c->right, c->aio_s);
    if (gone(c, 0)) { /* went away between the check and the post */
        nng_aio_cancel(c->aio_s);
    }
    return TROUPE_OK;
}

/* wait_send waits for the send posted last; the message is freed if unsent. */
static int wait_send(opctx *o, tr_err *e)
{
    troupe_coll *c = o->c;
    int nrv;

    nng_aio_wait(c->aio_s);
    if ((nrv = nng_aio_result(c->aio_s)) != 0) {
        nng_msg_free(nng_aio_get_msg(c->aio_s));
        nng_aio_set_msg(c->aio_s, NULL);
        return fail_peer(o, 0, nrv, e);
    }
    return TROUPE_OK;
}

/* post_recv starts a receive from the left neighbour on aio_r; when that
 * neighbour is already gone the receive is cancelled at once (a pipe event
 * before the post has no aio to cancel), so wait_recv reports it. */
static void post_recv(opctx *o)
{
    nng_aio_set_timeout(o->c->aio_r, (nng_duration)remaining(o));
    nng_recv_aio(o->c->left, o->c->aio_r);
    if (gone(o->c, 1)) {
        nng_aio_cancel(o->c->aio_r);
    }
}

/* check_msg accepts the DATA message of this operation carrying len bytes,
 * and turns anything else into the error it stands for. */
static int check_msg(opctx *o, nng_msg *m, size_t len, tr_err *e)
{
    troupe_coll *c = o->c;
    const char *who = c->names[left_of(c)];
    hdr h;

    if (nng_msg_len(m) < sizeof(h)) {
        return tr_err_set(e, TROUPE_INTERNAL, "%s: %s sent a %zu-byte message", op_name(o->op), who, nng_msg_len(m));
    }
    memcpy(&h, nng_msg_body(m), sizeof(h));
    if (h.type == MSG_ABORT) {
        int code = h.code ? h.code : TROUPE_UNAVAILABLE;
        return tr_err_set(e, code, "%.*s", (int)(nng_msg_len(m) - sizeof(h)), (char *)nng_msg_body(m) + sizeof(h));
    }
    if (h.type == MSG_BYE) {
        c->left_bye = 1;
        return tr_err_set(e, TROUPE_UNAVAILABLE, "%s: %s closed the collective before this operation ended",
                          op_name(o->op), who);
    }
    if (h.type != MSG_DATA || h.op != o->op || h.seq != c->seq || h.dtype != o->dtype || h.count != o->count) {
        return tr_err_set(e, TROUPE_FAILED_PRECONDITION,
                          "%s: %s is at operation %" PRIu32 " (%s of %" PRIu64 ", type %u), %s at %" PRIu32
                          " (%s of %" PRIu64 ", type %u): every rank must make the same calls in the same order",
                          op_name(o->op), who, h.seq, op_name(h.op), h.count, h.dtype, c->names[c->rank], c->seq,
                          op_name(o->op), o->count, o->dtype);
    }
    if (nng_msg_len(m) - sizeof(h) != len) {
        return tr_err_set(e, TROUPE_INTERNAL, "%s: %s sent %zu bytes, expected %zu", op_name(o->op), who,
                          nng_msg_len(m) - sizeof(h), len);
    }
    return TROUPE_OK;
}

/* wait_recv waits for the receive posted last; on OK *m holds len bytes
 * after the header (free it). */
static int wait_recv(opctx *o, size_t len, nng_msg **m, tr_err *e)
{
    troupe_coll *c = o->c;
    int nrv, rv;

    *m = NULL;
    nng_aio_wait(c->aio_r);
    if ((nrv = nng_aio_result(c->aio_r)) != 0) {
        return fail_peer(o, 1, nrv, e);
    }
    *m = nng_aio_get_msg(c->aio_r);
    if ((rv = check_msg(o, *m, len, e)) != TROUPE_OK) {
        nng_msg_free(*m);
        *m = NULL;
    }
    return rv;
}

static uint8_t msg_type(nng_msg *m)
{
    return nng_msg_len(m) >= sizeof(hdr) ? *(const uint8_t *)nng_msg_body(m) : 0;
}

static const void *payload(nng_msg *m)
{
    return (const char *)nng_msg_body(m) + sizeof(hdr);
}

/* reduce adds src into dst. src is a message body, which nng may place at
 * any address (pair1 received bodies sit 4 bytes off), so it is read with
 * memcpy; compilers turn that into plain unaligned loads. */
static void reduce(void *dst, const void *src, size_t bytes, uint8_t dtype)
{
    const char *s = src;

    if (dtype == TROUPE_F32) {
        float *d = dst, v;
        for (size_t i = 0; i < bytes / sizeof(float); i++) {
            memcpy(&v, s + i * sizeof(float), sizeof(v));
            d[i] += v;
        }
    } else {
        double *d = dst, v;
        for (size_t i = 0; i < bytes / sizeof(double); i++) {
            memcpy(&v, s + i * sizeof(double), sizeof(v));
            d[i] += v;
        }
    }
}

/* drain stops the aios still in flight after a failure, so that they can
 * be reused, and frees what they held. */
static void drain(opctx *o, int receiving, int sending)
{
    troupe_coll *c = o->c;

    if (receiving) {
        nng_aio_cancel(c->aio_r);
        nng_aio_wait(c->aio_r);
        if (nng_aio_result(c->aio_r) == 0) {
            nng_msg_free(nng_aio_get_msg(c->aio_r));
        }
    }
    if (sending) {
        nng_aio_cancel(c->aio_s);
        nng_aio_wait(c->aio_s);
        if (nng_aio_result(c->aio_s) != 0) {
            nng_msg_free(nng_aio_get_msg(c->aio_s));
        }
    }
}

/* exchange sends bytes [so, so+slen) of buf right while it receives
 * [ro, ro+rlen) from the left, chunk by chunk, adding (sum) or copying the
 * received bytes into buf. */
static int exchange(opctx *o, char *buf, size_t so, size_t slen, size_t ro, size_t rlen, int sum, tr_err *e)
{
    size_t ns = (slen + CHUNK - 1) / CHUNK, nr = (rlen + CHUNK - 1) / CHUNK;
    int rv = TROUPE_OK, sending = 0, receiving = 0;
    nng_msg *m = NULL;

    for (size_t i = 0; (i < ns || i < nr) && rv == TROUPE_OK; i++) {
        size_t sl = i < ns ? (slen - i * CHUNK < CHUNK ? slen - i * CHUNK : CHUNK) : 0;
        size_t rl = i < nr ? (rlen - i * CHUNK < CHUNK ? rlen - i * CHUNK : CHUNK) : 0;

        if (i < nr) {
            post_recv(o);
            receiving = 1;
        }
        if (i < ns && (rv = post_send(o, buf + so + i * CHUNK, sl, e)) == TROUPE_OK) {
            sending = 1;
        }
        if (rv == TROUPE_OK && receiving) {
            receiving = 0;
            if ((rv = wait_recv(o, rl, &m, e)) == TROUPE_OK) {
                if (sum) {
                    reduce(buf + ro + i * CHUNK, payload(m), rl, o->dtype);
                } else {
                    memcpy(buf + ro + i * CHUNK, payload(m), rl);
                }
                nng_msg_free(m);
            }
        }
        if (rv == TROUPE_OK && sending) {
            sending = 0;
            rv = wait_send(o, e);
        }
    }
    drain(o, receiving, sending);
    return rv;
}

/* begin starts an operation: refuses on a broken handle, numbers it. */
static int begin(troupe_coll *c, opctx *o, int op, uint8_t dtype, uint64_t count, tr_err *e)
{
    *o = (opctx){c, op, dtype, count, tr_now_ms() + c->timeout_ms};
    if (c->broken) {
        return tr_err_set(e, TROUPE_FAILED_PRECONDITION, "the collective failed earlier (%s: %s); close it and open "
                          "a new one", troupe_strerror(c->cause.code), c->cause.msg);
    }
    c->seq++;
    return TROUPE_OK;
}

/* finish_op marks the handle broken after a failure and passes the failure
 * on to the right neighbour, so the whole ring reports the same cause. */
static int finish_op(troupe_coll *c, int rv, tr_err *e)
{
    nng_msg *m = NULL;
    hdr h = {MSG_ABORT, 0, 0, 0, c->seq, 0};

    if (rv == TROUPE_OK || c->broken) {
        return rv;
    }
    c->broken = 1;
    c->cause = *e;
    c->cause.code = rv;
    h.code = (uint8_t)rv;
    if (c->size > 1 && !gone(c, 0) && nng_msg_alloc(&m, sizeof(h) + strlen(e->msg)) == 0) {
        memcpy(nng_msg_body(m), &h, sizeof(h));
        memcpy((char *)nng_msg_body(m) + sizeof(h), e->msg, strlen(e->msg));
        if (nng_sendmsg(c->right, m, 0) != 0) { /* bounded by NNG_OPT_SENDTIMEO */
            nng_msg_free(m);
        }
    }
    return rv;
}

/* Segment i of a buffer of count elements cut in size parts: [off(i), off(i+1)). */
static size_t seg_off(uint64_t count, uint32_t size, uint32_t i)
{
    return (size_t)((unsigned __int128)count * i / size);
}

static size_t seg_len(uint64_t count, uint32_t size, uint32_t i)
{
    return seg_off(count, size, i + 1) - seg_off(count, size, i);
}

/* ring_pass: size-1 steps round the ring. At step t rank r sends segment
 * first-t and receives segment first-t-1, summed into its own when reduce
 * is set, replacing it otherwise. Every ring operation is one or two of
 * these, differing only in the segment each rank starts from. */
static int ring_pass(opctx *o, char *buf, size_t count, size_t esize, uint32_t first, int reduce, tr_err *e)
{
    uint32_t n = o->c->size;
    int rv = TROUPE_OK;

    for (uint32_t t = 0; t + 1 < n && rv == TROUPE_OK; t++) {
        uint32_t s = (first + n - t) % n, q = (first + 2 * n - t - 1) % n;
        rv = exchange(o, buf, seg_off(count, n, s) * esize, seg_len(count, n, s) * esize,
                      seg_off(count, n, q) * esize, seg_len(count, n, q) * esize, reduce, e);
    }
    return rv;
}

/* ring_allreduce: a reduce-scatter from segment r (after step t, segment
 * r-t-1 holds t+2 ranks' sum, so rank r ends with segment r+1 whole), then
 * an all-gather in which rank r passes on that segment first. */
static int ring_allreduce(opctx *o, char *buf, size_t count, size_t esize, tr_err *e)
{
    uint32_t n = o->c->size, r = o->c->rank;
    int rv = ring_pass(o, buf, count, esize, r, 1, e);

    return rv == TROUPE_OK ? ring_pass(o, buf, count, esize, (r + 1) % n, 0, e) : rv;
}

/* ring_reduce_scatter: started one segment earlier than the all-reduce's
 * half, so that after size-1 steps rank r holds the whole sum of segment r. */
static int ring_reduce_scatter(opctx *o, char *buf, size_t count, size_t esize, tr_err *e)
{
    return ring_pass(o, buf, count, esize, (o->c->rank + o->c->size - 1) % o->c->size, 1, e);
}

/* ring_allgather: rank r passes on segment r, then each segment it received. */
static int ring_allgather(opctx *o, char *buf, size_t count, size_t esize, tr_err *e)
{
    return ring_pass(o, buf, count, esize, o->c->rank, 0, e);
}

/* check_args: what every reducing operation refuses. */
static int check_args(const char *what, const void *buf, size_t count, troupe_dtype dtype, troupe_redop op,
                      tr_err *e)
{
    if (dtype != TROUPE_F32 && dtype != TROUPE_F64) {
        return tr_err_set(e, TROUPE_INVALID_ARGUMENT, "%s: unknown type %d (TROUPE_F32 or TROUPE_F64)", what,
                          (int)dtype);
    }
    if (op != TROUPE_SUM) {
        return tr_err_set(e, TROUPE_INVALID_ARGUMENT, "%s: unknown operation %d (TROUPE_SUM)", what, (int)op);
    }
    if (buf == NULL && count > 0) {
        return tr_err_set(e, TROUPE_INVALID_ARGUMENT, "%s: buf is NULL", what);
    }
    return TROUPE_OK;
}

int tr_coll_reduce_scatter(troupe_coll *c, void *buf, size_t count, troupe_dtype dtype, troupe_redop op,
                           tr_err *e)
{
    opctx o;
    int rv = check_args("reduce-scatter", buf, count, dtype, op, e);

    if (rv != TROUPE_OK || (rv = begin(c, &o, OP_REDUCE_SCATTER, (uint8_t)dtype, count, e)) != TROUPE_OK) {
        return rv;
    }
    rv = c->size == 1 ? TROUPE_OK : ring_reduce_scatter(&o, buf, count, dtype == TROUPE_F32 ? 4 : 8, e);
    return finish_op(c, rv, e);
}

int tr_coll_allgather(troupe_coll *c, void *buf, size_t count, troupe_dtype dtype, tr_err *e)
{
    opctx o;
    int rv = check_args("all-gather", buf, count, dtype, TROUPE_SUM, e);

    if (rv != TROUPE_OK || (rv = begin(c, &o, OP_ALLGATHER, (uint8_t)dtype, count, e)) != TROUPE_OK) {
        return rv;
    }
    rv = c->size == 1 ? TROUPE_OK : ring_allgather(&o, buf, count, dtype == TROUPE_F32 ? 4 : 8, e);
    return finish_op(c, rv, e);
}

size_t tr_coll_segment(size_t count, uint32_t size, uint32_t i, size_t *len)
{
    *len = seg_len(count, size, i);
    return seg_off(count, size, i);
}

int tr_coll_allreduce(troupe_coll *c, void *buf, size_t count, troupe_dtype dtype, troupe_redop op, tr_err *e)
{
    opctx o;
    int rv;

    if (dtype != TROUPE_F32 && dtype != TROUPE_F64) {
        return tr_err_set(e, TROUPE_INVALID_ARGUMENT, "all-reduce: unknown type %d (TROUPE_F32 or TROUPE_F64)",
                          (int)dtype);
    }
    if (op != TROUPE_SUM) {
        return tr_err_set(e, TROUPE_INVALID_ARGUMENT, "all-reduce: unknown operation %d (TROUPE_SUM)", (int)op);
    }
    if (buf == NULL && count > 0) {
        return tr_err_set(e, TROUPE_INVALID_ARGUMENT, "all-reduce: buf is NULL");
    }
    if ((rv = begin(c, &o, OP_ALLREDUCE, (uint8_t)dtype, count, e)) != TROUPE_OK) {
        return rv;
    }
    rv = c->size == 1 ? TROUPE_OK : ring_allreduce(&o, buf, count, dtype == TROUPE_F32 ? 4 : 8, e);
    return finish_op(c, rv, e);
}

int tr_coll_broadcast(troupe_coll *c, void *buf, size_t bytes, uint32_t root, tr_err *e)
{
    size_t n = (bytes + CHUNK - 1) / CHUNK;
    int recv = c->rank != root, fwd = right_of(c) != root, rv, sending = 0;
    nng_msg *m = NULL;
    opctx o;

    if (root >= c->size) {
        return tr_err_set(e, TROUPE_INVALID_ARGUMENT, "broadcast: root %" PRIu32 " of %" PRIu32 " ranks", root,
                          c->size);
    }
    if (buf == NULL && bytes > 0) {
        return tr_err_set(e, TROUPE_INVALID_ARGUMENT, "broadcast: buf is NULL");
    }
    if ((rv = begin(c, &o, OP_BROADCAST, (uint8_t)root, bytes, e)) != TROUPE_OK || c->size == 1) {
        return rv;
    }
    /* Chunk i is forwarded while chunk i+1 arrives: one send in flight. */
    for (size_t i = 0; i < n && rv == TROUPE_OK; i++) {
        size_t len = bytes - i * CHUNK < CHUNK ? bytes - i * CHUNK : CHUNK;
        char *p = (char *)buf + i * CHUNK;

        if (recv) {
            post_recv(&o);
            if ((rv = wait_recv(&o, len, &m, e)) != TROUPE_OK) {
                break;
            }
            memcpy(p, payload(m), len);
            nng_msg_free(m);
        }
        if (fwd) {
            if (sending && (rv = wait_send(&o, e)) != TROUPE_OK) {
                sending = 0;
                break;
            }
            sending = 0;
            if ((rv = post_send(&o, p, len, e)) == TROUPE_OK) {
                sending = 1;
            }
        }
    }
    if (rv == TROUPE_OK && sending) {
        sending = 0;
        rv = wait_send(&o, e);
    }
    drain(&o, 0, sending);
    return finish_op(c, rv, e);
}

int tr_coll_barrier(troupe_coll *c, tr_err *e)
{
    opctx o;
    float *v;
    int rv;

    if ((rv = begin(c, &o, OP_BARRIER, TROUPE_F32, c->size, e)) != TROUPE_OK || c->size == 1) {
        return rv;
    }
    if ((v = calloc(c->size, sizeof(*v))) == NULL) {
        return finish_op(c, tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "out of memory"), e);
    }
    rv = ring_allreduce(&o, (char *)v, c->size, sizeof(*v), e);
    free(v);
    return finish_op(c, rv, e);
}

/* say_goodbye runs close's handshake (see the top of the file); every wait
 * is bounded by the timeout and skipped once the neighbour is gone. */
static void say_goodbye(troupe_coll *c)
{
    opctx o = {c, 0, 0, 0, tr_now_ms() + c->timeout_ms};
    hdr h = {MSG_BYE, 0, 0, 0, c->seq, 0};
    nng_msg *m = NULL;

    if (!gone(c, 0) && nng_msg_alloc(&m, sizeof(h)) == 0) {
        memcpy(nng_msg_body(m), &h, sizeof(h));
        nng_aio_set_msg(c->aio_s, m);
        nng_aio_set_timeout(c->aio_s, (nng_duration)remaining(&o));
        nng_send_aio(c->right, c->aio_s);
        nng_aio_wait(c->aio_s);
        if (nng_aio_result(c->aio_s) != 0) {
            nng_msg_free(nng_aio_get_msg(c->aio_s));
        }
    }
    /* Read the left neighbour's messages up to its BYE, then acknowledge. */
    while (!c->left_bye && !gone(c, 1) && remaining(&o) > 0) {
        post_recv(&o);
        nng_aio_wait(c->aio_r);
        if (nng_aio_result(c->aio_r) != 0) {
            break;
        }
        m = nng_aio_get_msg(c->aio_r);
        c->left_bye = msg_type(m) == MSG_BYE;
        nng_msg_free(m);
    }
    h.type = MSG_ACK;
    if (c->left_bye && !gone(c, 1) && nng_msg_alloc(&m, sizeof(h)) == 0) {
        memcpy(nng_msg_body(m), &h, sizeof(h));
        if (nng_sendmsg(c->left, m, 0) != 0) {
            nng_msg_free(m);
        }
    }
    /* The right neighbour's ACK: it has read everything sent before BYE. */
    while (!gone(c, 0) && remaining(&o) > 0) {
        int ack;
        nng_aio_set_timeout(c->aio_r, (nng_duration)remaining(&o));
        nng_recv_aio(c->right, c->aio_r);
        nng_aio_wait(c->aio_r);
        if (nng_aio_result(c->aio_r) != 0) {
            break;
        }
        m = nng_aio_get_msg(c->aio_r);
        ack = msg_type(m) == MSG_ACK;
        nng_msg_free(m);
        if (ack) {
            break;
        }
    }
}

/* close_pipes closes both connections and waits (briefly) until nng has
 * removed them: nng_close racing a pipe's teardown can hang in nng 1.5.2. */
static void close_pipes(troupe_coll *c)
{
    int64_t deadline = tr_now_ms() + 2000;
    struct timespec ts;
    nng_pipe lp, rp;

    pthread_mutex_lock(&c->mu);
    lp = c->left_up && !c->left_gone ? c->left_pipe : (nng_pipe)NNG_PIPE_INITIALIZER;
    rp = c->right_up && !c->right_gone ? c->right_pipe : (nng_pipe)NNG_PIPE_INITIALIZER;
    pthread_mutex_unlock(&c->mu);
    if (nng_pipe_id(lp) > 0) {
        nng_pipe_close(lp);
    }
    if (nng_pipe_id(rp) > 0) {
        nng_pipe_close(rp);
    }
    pthread_mutex_lock(&c->mu);
    while (((c->left_up && !c->left_gone) || (c->right_up && !c->right_gone)) && tr_now_ms() < deadline) {
        tr_abstime_in(&ts, deadline - tr_now_ms());
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    pthread_mutex_unlock(&c->mu);
}

/* release closes the sockets and frees. Its own thread: see tr_coll_close. */
static void release(troupe_coll *c);

static void release(troupe_coll *c)
{

    /* The sockets before the aios: their pipe callbacks use the aios. */
    if (c->opened_left) {
        nng_close(c->left);
    }
    if (c->opened_right) {
        nng_close(c->right);
    }
    nng_aio_free(c->aio_s);
    nng_aio_free(c->aio_r);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->names);
    free(c);
}

/* release_fn: release, as tr_run_bounded calls it. */
static void release_fn(void *arg)
{
    release(arg);
}

/* release_bounded runs release on its own thread and waits for it up to
 * TR_COLL_RELEASE_WAIT_MS: in the normal case everything is freed before
 * close returns (so nothing is left in flight when the process exits); in
 * nng's rare hang the caller goes on and the thread stays. Returns 0 when
 * the thread was started. */
#define TR_COLL_RELEASE_WAIT_MS 5000

/* Set once a release did not finish in time: nng is wedged in this process
 * (nng 1.5.2, nng#1543) and any later nng_close would hang too — caught in a
 * worker whose troupe_worker_close then hung for good in the metrics RPC
 * socket's close (see tr_coll_nng_wedged). TROUPE_TEST_NNG_WEDGED (tests)
 * sets it after every release, to exercise what depends on it. */
static atomic_int nng_wedged;
static int release_bounded(troupe_coll *c)
{
    int rv = tr_run_bounded(release_fn, c, TR_COLL_RELEASE_WAIT_MS);

    if (rv == 0 || (rv > 0 && getenv("TROUPE_TEST_NNG_WEDGED") != NULL)) {
        atomic_store(&nng_wedged, 1);
    }
    return rv < 0 ? -1 : 0;
}

int tr_coll_nng_wedged(void)
{
    return atomic_load(&nng_wedged);
}

void tr_coll_abort(troupe_coll *c)
{
    if (c != NULL) {
        c->aborting = 1;
        tr_coll_close(c);
    }
}

void tr_coll_close(troupe_coll *c)
{
    if (c == NULL) {
        return;
    }
    /* An abandoned ring says no goodbye: a peer is gone, and waiting for
     * the others' acknowledgements would only spend the deadline. */
    if (c->size > 1 && c->opened_left && c->opened_right && !c->aborting) {
        int up;
        pthread_mutex_lock(&c->mu);
        up = c->left_up && c->right_up;
        pthread_mutex_unlock(&c->mu);
        if (up) {
            say_goodbye(c);
        }
    }
    /* No redial into a closing peer, then the connections themselves. */
    if (c->dialed) {
        nng_dialer_close(c->dialer);
    }
    if (c->listening) {
        nng_listener_close(c->listener);
    }
    close_pipes(c);
    /* nng 1.5.2's nng_close can hang for good once in a few hundred closes
     * of sockets that were connected (seen here with pair0 and pair1; nng
     * issue #1543 upstream, fixed after 1.5.2). Everything our peers need is
     * delivered by now, so the sockets are released on a thread of their
     * own that close waits for, boundedly: close never hangs the caller, at
     * worst that thread and its sockets stay until the process exits. (A
     * detached release that close did not wait for left messages in flight
     * at exit: LeakSanitizer failed unit.coll.* now and then.) */
    if (c->size > 1 && release_bounded(c) == 0) {
        return;
    }
    release(c);
}

void tr_coll_set_owner(troupe_coll *c, troupe_worker_ctx *w)
{
    c->owner = w;
}

troupe_worker_ctx *tr_coll_owner(const troupe_coll *c)
{
    return c->owner;
}

void tr_coll_set_quiet(troupe_coll *c, int quiet)
{
    c->quiet = quiet;
}

int tr_coll_quiet(const troupe_coll *c)
{
    return c->quiet;
}

void tr_coll_set_timeout(troupe_coll *c, uint32_t timeout_ms)
{
    c->timeout_ms = timeout_ms;
}

uint32_t tr_coll_rank_of(const troupe_coll *c)
{
    return c->rank;
}

uint32_t tr_coll_size_of(const troupe_coll *c)
{
    return c->size;
}
