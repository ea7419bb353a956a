/* worker_coll.c - the CPU collective's public calls (troupe/worker.h): find
 * the peers through the rendezvous all-gather, then hand over to coll.c.
 *
 * Each rank listens first (so its address, with the port the system chose,
 * is known), publishes "URL\0WORKER\0NODE" in the all-gather "troupe.coll",
 * and connects to its ring neighbours with the names of all ranks, which
 * every later error uses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll.h"
#include "worker_int.h"

#define GATHER_NAME "troupe.coll"

static troupe_status finish(troupe_error *err, const tr_err *e, int rv)
{
    return tr_client_finish(err, e, rv);
}

/* report tells the head why this rank's collective failed (troupe_worker_fail),
 * so the job names the first rank that failed: a peer gone (UNAVAILABLE), a
 * deadline passed, calls that do not match. INVALID_ARGUMENT is the caller's
 * own mistake, left to the caller. The report's own failure (head away) is
 * not this operation's error: e keeps the collective's reason. */
static void report(troupe_worker_ctx *w, const char *what, int rv, const tr_err *e) /* what: "open" or "" */
{
    char reason[TR_ERR_MSG_MAX + 64];

    if (w == NULL || rv == TROUPE_OK || rv == TROUPE_INVALID_ARGUMENT) {
        return;
    }
    snprintf(reason, sizeof(reason), "CPU collective%s%s: %s", what[0] ? " " : "", what, e->msg);
    (void)troupe_worker_fail(w, (troupe_status)rv, reason, NULL);
}

/* listen_on picks the URL to listen on and the one the peers dial. */
static int listen_on(const troupe_coll_opts *o, uint32_t rank, uint32_t size, uint32_t timeout_ms,
                     troupe_coll **c, char *adv, size_t adv_size, tr_err *e)
{
    const char *host = o->advertise_host ? o->advertise_host : getenv("TROUPE_NODE_ADDR");
    char hostname[256];
    int port = 0, rv;

    if (o->listen_url != NULL) {
        tr_strlcpy(adv, o->listen_url, adv_size);
        return tr_coll_listen(c, rank, size, o->listen_url, timeout_ms, NULL, e);
    }
    if (host == NULL || host[0] == '\0') {
        if (gethostname(hostname, sizeof(hostname)) != 0) {
            tr_strlcpy(hostname, "127.0.0.1", sizeof(hostname));
        }
        hostname[sizeof(hostname) - 1] = '\0';
        host = hostname;
    }
    if ((rv = tr_coll_listen(c, rank, size, "tcp://0.0.0.0:0", timeout_ms, &port, e)) != TROUPE_OK) {
        return rv;
    }
    /* An IPv6 literal needs brackets in a URL. */
    snprintf(adv, adv_size, strchr(host, ':') ? "tcp://[%s]:%d" : "tcp://%s:%d", host, port);
    return TROUPE_OK;
}

/* meet exchanges addresses and connects. */
static int meet(troupe_worker_ctx *w, const char *comm, troupe_coll *c, const char *adv, uint32_t timeout_ms,
                tr_err *e)
{
    const char *node = getenv("TROUPE_NODE");
    char blob[TROUPE_MAX_BLOB];
    troupe_blobs *b = NULL;
    troupe_error te = {0};
    const char **urls = NULL;
    char **names = NULL;
    size_t n, len;
    int rv;

    node = node && node[0] ? node : "?";
    len = (size_t)snprintf(blob, sizeof(blob), "%s%c%s%c%s", adv, 0, w->worker, 0, node) + 1;
    if (len > sizeof(blob)) {
        return tr_err_set(e, TROUPE_INVALID_ARGUMENT, "collective: address and names exceed %d bytes",
                          TROUPE_MAX_BLOB);
    }
    if ((rv = troupe_worker_allgather(w, comm, GATHER_NAME, blob, len, timeout_ms, &b, &te)) != TROUPE_OK) {
        return tr_err_set(e, rv, "collective: exchanging addresses: %s", te.message);
    }
    n = b->count;
    urls = calloc(n, sizeof(*urls));
    names = calloc(n, sizeof(*names));
    rv = urls && names ? TROUPE_OK : tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    for (size_t i = 0; rv == TROUPE_OK && i < n; i++) {
        const char *d = b->items[i].data;
        size_t dl = b->items[i].len;
        const char *wk, *nd;

        /* Three NUL-terminated strings; anything else is not our peer's. */
        if (d == NULL || dl == 0 || d[dl - 1] != '\0' || (wk = memchr(d, 0, dl)) == NULL ||
            (nd = memchr(wk + 1, 0, dl - (size_t)(wk + 1 - d))) == NULL) {
            rv = tr_err_set(e, TROUPE_INTERNAL, "collective: rank %zu published a malformed address", i);
            break;
        }
        urls[i] = d;
        if (asprintf(&names[i], "rank %zu (%s on %s)", i, wk + 1, nd + 1) < 0) {
            names[i] = NULL;
            rv = tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        }
    }
    if (rv == TROUPE_OK) {
        rv = tr_coll_connect(c, urls, (const char *const *)names, e);
    }
    for (size_t i = 0; names != NULL && i < n; i++) {
        free(names[i]);
    }
    free(names);
    free(urls);
    troupe_blobs_free(b);
    return rv;
}

troupe_status troupe_worker_coll_open(troupe_worker_ctx *w, const char *comm, troupe_coll **out,
                                      const troupe_coll_opts *opts, troupe_error *err)
{
    troupe_coll_opts o = opts ? *opts : (troupe_coll_opts){0};
    troupe_comm_info info;
    troupe_error te = {0};
    troupe_coll *c = NULL;
    char adv[512];
    uint32_t timeout_ms;
    tr_err e = {0};
    int rv;

    if (out == NULL) {
        return finish(err, &e, tr_err_set(&e, TROUPE_INVALID_ARGUMENT, "out is NULL"));
    }
    *out = NULL;
    if (w == NULL) {
        return finish(err, &e, tr_err_set(&e, TROUPE_INVALID_ARGUMENT, "worker handle is NULL"));
    }
    timeout_ms = o.timeout_ms ? o.timeout_ms : w->wait_ms;
    if ((rv = troupe_worker_comm_info(w, comm, &info, &te)) != TROUPE_OK) {
        return finish(err, &e, tr_err_set(&e, rv, "%s", te.message));
    }
    if ((rv = listen_on(&o, info.rank, info.size, timeout_ms, &c, adv, sizeof(adv), &e)) != TROUPE_OK) {
        goto out;
    }
    if (info.size > 1) {
        rv = meet(w, comm, c, adv, timeout_ms, &e);
    }
out:
    if (rv != TROUPE_OK) {
        tr_coll_close(c);
        report(o.no_fail_report ? NULL : w, "open", rv, &e);
        return finish(err, &e, rv);
    }
    tr_coll_set_owner(c, w);
    tr_coll_set_quiet(c, o.no_fail_report);
    *out = c;
    return finish(err, &e, TROUPE_OK);
}

troupe_status troupe_coll_allreduce(troupe_coll *c, void *buf, size_t count, troupe_dtype dtype, troupe_redop op,
                                    troupe_error *err)
{
    tr_err e = {0};
    int64_t t0 = c && tr_coll_owner(c) ? tr_wk_trace_now(tr_coll_owner(c)) : 0;
    int rv = c ? tr_coll_allreduce(c, buf, count, dtype, op, &e) : tr_err_set(&e, TROUPE_INVALID_ARGUMENT, "c is NULL");
    if (c != NULL) {
        if (t0 != 0) {
            tr_wk_trace_span(tr_coll_owner(c), "all-reduce", "coll", t0); /* in a profiled step */
        }
        report(tr_coll_quiet(c) ? NULL : tr_coll_owner(c), "", rv, &e); /* e names the operation */
    }
    return finish(err, &e, rv);
}

troupe_status troupe_coll_reduce_scatter(troupe_coll *c, void *buf, size_t count, troupe_dtype dtype,
                                         troupe_redop op, troupe_error *err)
{
    tr_err e = {0};
    int64_t t0 = c && tr_coll_owner(c) ? tr_wk_trace_now(tr_coll_owner(c)) : 0;
    int rv = c ? tr_coll_reduce_scatter(c, buf, count, dtype, op, &e)
               : tr_err_set(&e, TROUPE_INVALID_ARGUMENT, "c is NULL");
    if (c != NULL) {
        if (t0 != 0) {
            tr_wk_trace_span(tr_coll_owner(c), "reduce-scatter", "coll", t0); /* in a profiled step */
        }
        report(tr_coll_quiet(c) ? NULL : tr_coll_owner(c), "", rv, &e); /* e names the operation */
    }
    return finish(err, &e, rv);
}

troupe_status troupe_coll_allgather(troupe_coll *c, void *buf, size_t count, troupe_dtype dtype,
                                    troupe_error *err)
{
    tr_err e = {0};
    int64_t t0 = c && tr_coll_owner(c) ? tr_wk_trace_now(tr_coll_owner(c)) : 0;
    int rv = c ? tr_coll_allgather(c, buf, count, dtype, &e)
               : tr_err_set(&e, TROUPE_INVALID_ARGUMENT, "c is NULL");
    if (c != NULL) {
        if (t0 != 0) {
            tr_wk_trace_span(tr_coll_owner(c), "all-gather", "coll", t0); /* in a profiled step */
        }
        report(tr_coll_quiet(c) ? NULL : tr_coll_owner(c), "", rv, &e); /* e names the operation */
    }
    return finish(err, &e, rv);
}

troupe_status troupe_coll_broadcast(troupe_coll *c, void *buf, size_t bytes, uint32_t root, troupe_error *err)
{
    tr_err e = {0};
    int64_t t0 = c && tr_coll_owner(c) ? tr_wk_trace_now(tr_coll_owner(c)) : 0;
    int rv = c ? tr_coll_broadcast(c, buf, bytes, root, &e) : tr_err_set(&e, TROUPE_INVALID_ARGUMENT, "c is NULL");
    if (c != NULL) {
        if (t0 != 0) {
            tr_wk_trace_span(tr_coll_owner(c), "broadcast", "coll", t0); /* in a profiled step */
        }
        report(tr_coll_quiet(c) ? NULL : tr_coll_owner(c), "", rv, &e); /* e names the operation */
    }
    return finish(err, &e, rv);
}

troupe_status troupe_coll_barrier(troupe_coll *c, troupe_error *err)
{
    tr_err e = {0};
    int64_t t0 = c && tr_coll_owner(c) ? tr_wk_trace_now(tr_coll_owner(c)) : 0;
    int rv = c ? tr_coll_barrier(c, &e) : tr_err_set(&e, TROUPE_INVALID_ARGUMENT, "c is NULL");
    if (c != NULL) {
        if (t0 != 0) {
            tr_wk_trace_span(tr_coll_owner(c), "collective barrier", "coll", t0); /* in a profiled step */
        }
        report(tr_coll_quiet(c) ? NULL : tr_coll_owner(c), "", rv, &e); /* e names the operation */
    }
    return finish(err, &e, rv);
}

uint32_t troupe_coll_rank(const troupe_coll *c)
{
    return c ? tr_coll_rank_of(c) : 0;
}

uint32_t troupe_coll_size(const troupe_coll *c)
{
    return c ? tr_coll_size_of(c) : 0;
}

void troupe_coll_set_timeout(troupe_coll *c, uint32_t timeout_ms)
{
    if (c != NULL && timeout_ms > 0) {
        tr_coll_set_timeout(c, timeout_ms);
    }
}

void troupe_coll_close(troupe_coll *c)
{
    tr_coll_close(c);
}
