/* trace.c - troupe_get_trace: a job's built-in trace (the spans its workers'
 * profiled steps recorded), read page by page from the head's GetTrace. The
 * replies stay unpacked and the public structs point into them. */
#include <stdlib.h>
#include <string.h>

#include "client_int.h"

typedef struct trace_impl {
    troupe_trace pub; /* first: the public pointer is the impl pointer */
    Troupe__V1__GetTraceReply **pages;
    size_t n_pages;
    troupe_trace_span *spans;
    troupe_trace_worker *workers;
} trace_impl;

static const char *str(const char *s)
{
    return s ? s : "";
}

TROUPE_API void troupe_trace_free(troupe_trace *t)
{
    trace_impl *ti = (trace_impl *)t;
    if (ti == NULL) {
        return;
    }
    for (size_t i = 0; i < ti->n_pages; i++) {
        protobuf_c_message_free_unpacked(&ti->pages[i]->base, NULL);
    }
    free(ti->pages);
    free(ti->spans);
    free(ti->workers);
    free(ti);
}

/* fill points the public arrays at the pages; the workers are the last page's. */
static int fill(trace_impl *ti)
{
    const Troupe__V1__GetTraceReply *last = ti->pages[ti->n_pages - 1];
    size_t n = 0, k = 0;

    for (size_t p = 0; p < ti->n_pages; p++) {
        n += ti->pages[p]->n_spans;
    }
    ti->spans = calloc(n + 1, sizeof(*ti->spans));
    ti->workers = calloc(last->n_workers + 1, sizeof(*ti->workers));
    if (ti->spans == NULL || ti->workers == NULL) {
        return -1;
    }
    for (size_t p = 0; p < ti->n_pages; p++) {
        for (size_t i = 0; i < ti->pages[p]->n_spans; i++) {
            const Troupe__V1__TraceSpan *s = ti->pages[p]->spans[i];
            ti->spans[k++] = (troupe_trace_span){str(s->name), str(s->cat), s->ts_us, s->dur_us, s->step, s->tid,
                                                 s->rank};
        }
    }
    for (size_t i = 0; i < last->n_workers; i++) {
        const Troupe__V1__TraceWorker *w = last->workers[i];
        ti->workers[i] = (troupe_trace_worker){str(w->worker), str(w->group), str(w->node), w->rank, w->group_rank,
                                               w->attempt, w->offset_us, w->rtt_us, w->spans, w->dropped};
    }
    ti->pub.n_spans = n;
    ti->pub.spans = ti->spans;
    ti->pub.n_workers = last->n_workers;
    ti->pub.workers = ti->workers;
    return 0;
}

TROUPE_API troupe_status troupe_get_trace(troupe_client *c, uint64_t job_id, troupe_trace **out, troupe_error *err)
{
    trace_impl *ti = calloc(1, sizeof(*ti));
    uint64_t after = 0;
    tr_err e = {0};
    int rv = TROUPE_OK, more = 1;

    *out = NULL;
    if (ti == NULL) {
        return tr_client_finish(err, &e, tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory"));
    }
    while (rv == TROUPE_OK && more) {
        Troupe__V1__GetTraceRequest req = TROUPE__V1__GET_TRACE_REQUEST__INIT;
        Troupe__V1__GetTraceReply *rep = NULL, **grown;
        req.job_id = job_id;
        req.after = after;
        rv = tr_rpc_client_call(c->rpc, "troupe.v1.Head/GetTrace", &req.base, &troupe__v1__get_trace_reply__descriptor,
                                (ProtobufCMessage **)&rep, c->timeout_ms, TR_RPC_IDEMPOTENT, &e);
        if (rv != TROUPE_OK) {
            break;
        }
        if ((grown = realloc(ti->pages, (ti->n_pages + 1) * sizeof(*grown))) == NULL) {
            protobuf_c_message_free_unpacked(&rep->base, NULL);
            rv = tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
            break;
        }
        ti->pages = grown;
        ti->pages[ti->n_pages++] = rep;
        more = rep->more && rep->next > after;
        after = rep->next;
    }
    if (rv == TROUPE_OK && fill(ti) != 0) {
        rv = tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    if (rv != TROUPE_OK) {
        troupe_trace_free(&ti->pub);
        return tr_client_finish(err, &e, rv);
    }
    *out = &ti->pub;
    return tr_client_finish(err, &e, TROUPE_OK);
}
