/* metrics.h - the head's metrics service (worker scalars: ReportMetrics,
 * GetMetrics; STATE_DIR/metrics.db). Register with tr_head_add_service. */
#ifndef TR_METRICS_H
#define TR_METRICS_H

#include "head.h"

extern const tr_head_service tr_metrics_service;

/* tr_metrics_check_report validates a report's shape: who it is from, at most
 * 20000 points, names 1-127 printable bytes without spaces or commas, seq
 * strictly increasing. */
int tr_metrics_check_report(const Troupe__V1__ReportMetricsRequest *req, tr_err *err);

/* What the HTTP side (server/http: /metrics, /api) reads. */
typedef struct tr_metrics_ingest {
    uint64_t reports;        /* ReportMetrics calls queued for the writer */
    uint64_t refused;        /* ReportMetrics calls refused (invalid, not the job's, writer behind) */
    uint64_t points_stored;  /* points committed to metrics.db since the head started */
    uint64_t points_dropped; /* points the workers dropped (gaps in their seq), seen since the start */
    uint64_t rounds, rounds_failed; /* writer transactions, and those that could not be written */
    uint64_t queued_points;  /* waiting for the writer now */
} tr_metrics_ingest;

/* tr_metrics_ingest_get fills *out; UNAVAILABLE (zeros) without the service.
 * Any thread. */
int tr_metrics_ingest_get(tr_head *h, tr_metrics_ingest *out);

typedef struct tr_metrics_last {
    const char *name;
    uint64_t step;
    double value; /* NaN and infinities as reported */
    int64_t ts_ms;
} tr_metrics_last;

typedef struct tr_metrics_stream_view {
    uint64_t job;
    uint32_t attempt;
    const char *worker;
    uint64_t stored, dropped; /* all time, as `troupe metrics` says */
    size_t n_last;
    const tr_metrics_last *last; /* the newest value of up to 32 names of the worker */
} tr_metrics_stream_view;

/* tr_metrics_each_stream calls fn for every worker stream of a job that has
 * not ended and has had a point committed. fn runs under the service's snapshot lock (held only
 * briefly by the writer, never across I/O): it must not block or call into
 * the metrics service; the view is borrowed for the call. Do not hold h->mu. */
void tr_metrics_each_stream(tr_head *h, void (*fn)(void *arg, const tr_metrics_stream_view *v), void *arg);

/* tr_metrics_query answers a GetMetrics request (the RPC's and /api's one
 * path): NOT_FOUND for an unknown job or worker. *rep is always initialised;
 * free it with tr_metrics_reply_free, whatever the result. Waits for the
 * writer's current commit (GetMetrics accepts that on an RPC thread); call it
 * without h->mu. */
int tr_metrics_query(tr_head *h, const Troupe__V1__GetMetricsRequest *req, Troupe__V1__GetMetricsReply *rep,
                     tr_err *err);
void tr_metrics_reply_free(Troupe__V1__GetMetricsReply *rep);

/* tr_metrics_report_fn hears the points of every ReportMetrics accepted
 * from a worker of the job it names, as it arrives (before the writer stores
 * it). Runs on the RPC server's thread without h->mu; may take only its own
 * locks. */
typedef void (*tr_metrics_report_fn)(void *arg, const Troupe__V1__ReportMetricsRequest *req);
/* tr_metrics_on_report makes fn (with arg) the one listener of accepted
 * reports, or removes it (fn NULL). Call it from a service's start or stop,
 * while the RPC server does not serve (health.c subscribes this way, so the
 * metrics store never calls up into the judge). Returns 0, or -1 when the
 * metrics service is not running. */
int tr_metrics_on_report(tr_head *h, tr_metrics_report_fn fn, void *arg);

/* tr_metrics_last_steps calls fn(arg, worker, attempt, step) once per
 * stream of job that has a "step_ms" point, with the step of its newest one
 * (health.c seeds its trackers with them after a head restart). Takes the
 * metrics store's lock: call it without h->mu. Returns 0, or -1 when the
 * metrics service is not running. */
int tr_metrics_last_steps(tr_head *h, uint64_t job,
                          void (*fn)(void *arg, const char *worker, uint32_t attempt, uint64_t step), void *arg);

#endif
