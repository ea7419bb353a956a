/* metrics.c - troupe_get_metrics (`troupe metrics`): one page of a job's
 * worker metrics, as the head's metrics service stored them. */
#include <stdlib.h>
#include <string.h>

#include "client_int.h"

typedef struct page_int {
    troupe_metrics_page pub; /* first: the public handle */
    Troupe__V1__GetMetricsReply *rep;
    troupe_metric_point *points;
    troupe_metric_stream *streams;
} page_int;

TROUPE_API void troupe_metrics_page_free(troupe_metrics_page *p)
{
    page_int *pi = (page_int *)p;

    if (pi == NULL) {
        return;
    }
    if (pi->rep != NULL) {
        protobuf_c_message_free_unpacked(&pi->rep->base, NULL);
    }
    free(pi->points);
    free(pi->streams);
    free(pi);
}

static page_int *page_of(Troupe__V1__GetMetricsReply *rep)
{
    page_int *pi = calloc(1, sizeof(*pi));

    if (pi == NULL) {
        return NULL;
    }
    pi->rep = rep;
    pi->points = calloc(rep->n_points + 1, sizeof(*pi->points));
    pi->streams = calloc(rep->n_streams + 1, sizeof(*pi->streams));
    if (pi->points == NULL || pi->streams == NULL) {
        troupe_metrics_page_free(&pi->pub);
        return NULL;
    }
    for (size_t i = 0; i < rep->n_points; i++) {
        const Troupe__V1__MetricPoint *m = rep->points[i];
        pi->points[i] = (troupe_metric_point){m->id, m->seq, m->step, m->worker, m->attempt, m->name, m->value,
                                              m->ts_ms};
    }
    for (size_t i = 0; i < rep->n_streams; i++) {
        const Troupe__V1__MetricStream *m = rep->streams[i];
        pi->streams[i] = (troupe_metric_stream){m->worker,   m->attempt,  m->stored,        m->dropped,
                                                m->last_seq, m->reported, m->worker_dropped};
    }
    pi->pub = (troupe_metrics_page){rep->n_points, pi->points, rep->n_streams, pi->streams,
                                    rep->next_id,  rep->more,  rep->kept,      rep->trimmed};
    return pi;
}

TROUPE_API troupe_status troupe_get_metrics(troupe_client *c, uint64_t job_id, const troupe_metrics_query *q,
                                            troupe_metrics_page **out, troupe_error *err)
{
    Troupe__V1__GetMetricsRequest req = TROUPE__V1__GET_METRICS_REQUEST__INIT;
    Troupe__V1__GetMetricsReply *rep = NULL;
    page_int *pi;
    tr_err e;
    int rv;

    *out = NULL;
    req.job_id = job_id;
    if (q != NULL) {
        req.workers = (char **)q->workers;
        req.n_workers = q->n_workers;
        req.names = (char **)q->names;
        req.n_names = q->n_names;
        req.after_id = q->after_id;
        req.last = q->last;
        req.limit = q->limit;
        req.wait_ms = q->wait_ms < 60000 ? q->wait_ms : 60000;
    }
    rv = tr_rpc_client_call(c->rpc, "troupe.v1.Head/GetMetrics", &req.base, &troupe__v1__get_metrics_reply__descriptor,
                            (ProtobufCMessage **)&rep, c->timeout_ms + req.wait_ms, TR_RPC_IDEMPOTENT, &e);
    if (rv != TROUPE_OK) {
        return tr_client_finish(err, &e, rv);
    }
    if ((pi = page_of(rep)) == NULL) {
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        return tr_client_finish(err, &e, tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory"));
    }
    *out = &pi->pub;
    return TROUPE_OK;
}
