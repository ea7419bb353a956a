/* worker_metrics.c - troupe_worker_metric and its sender thread.
 *
 * A report only takes the buffer's mutex for a copy (never I/O): the
 * training step is never held up by the head. The sender thread, with its
 * own connection (so close can still flush after the control poll is shut),
 * sends the oldest points every REPORT_MS (TROUPE_METRICS_REPORT_MS: the
 * batching delay, traded against report -> head latency; or sooner when many
 * wait) and
 * forgets them once the head confirms they are on disk. While the head is
 * slow or away the buffer (TROUPE_METRICS_BUFFER points) fills and then
 * drops new points, counted; their seqs tell the head exactly what is lost. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "metric_buf.h"
#include "util.h"
#include "worker_int.h"

#define DEFAULT_BUFFER 65536
#define MAX_BUFFER (16u << 20)
#define REPORT_MS 100
#define BATCH 5000
#define CALL_MS 5000
#define DEFAULT_FLUSH_MS 10000

struct tr_wk_metrics {
    tr_rpc_client *rpc;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* new points, acks, quit */
    tr_mbuf *buf;
    tr_mpoint *out; /* BATCH, the sender's */
    pthread_t thread;
    int started, quit;
    uint32_t flush_ms;
    uint32_t report_ms; /* TROUPE_METRICS_REPORT_MS: how long a batch gathers */
    int refused; /* the head refused points for good (their code), else 0 */
    char last_error[512];
};

static uint64_t env_u64(const char *name, uint64_t def, uint64_t lo, uint64_t hi)
{
    const char *v = getenv(name);
    char *end = NULL;
    unsigned long long n;

    if (v == NULL || v[0] == '\0') {
        return def;
    }
    n = strtoull(v, &end, 10);
    if (*end != '\0' || n < lo || n > hi) {
        TR_LOG(TR_LOG_WARNING, "%s=%s is not a number in %llu..%llu; using %llu", name, v, (unsigned long long)lo,
               (unsigned long long)hi, (unsigned long long)def);
        return def;
    }
    return n;
}

/* send_once sends one report; returns the RPC status. Called without m->mu. */
static int send_once(troupe_worker_ctx *w, tr_wk_metrics *m, size_t n, uint64_t reported, uint64_t *acked,
                     tr_err *e)
{
    Troupe__V1__ReportMetricsRequest req = TROUPE__V1__REPORT_METRICS_REQUEST__INIT;
    Troupe__V1__ReportMetricsReply *rep = NULL;
    Troupe__V1__MetricPoint *pts = calloc(n ? n : 1, sizeof(*pts));
    Troupe__V1__MetricPoint **pp = calloc(n ? n : 1, sizeof(*pp));
    Troupe__V1__WorkerRef ref;
    tr_mbuf_stats st;
    int rv;

    if (pts == NULL || pp == NULL) {
        free(pts);
        free(pp);
        return tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        troupe__v1__metric_point__init(&pts[i]);
        pts[i].seq = m->out[i].seq;
        pts[i].step = m->out[i].step;
        pts[i].name = (char *)m->out[i].name;
        pts[i].value = m->out[i].value;
        pts[i].ts_ms = m->out[i].ts_ms;
        pp[i] = &pts[i];
    }
    tr_wk_ref(w, &ref);
    req.from = &ref;
    req.points = pp;
    req.n_points = n;
    req.reported = reported;
    pthread_mutex_lock(&m->mu);
    tr_mbuf_stats_get(m->buf, &st);
    pthread_mutex_unlock(&m->mu);
    req.dropped = st.dropped;
    rv = tr_rpc_client_call(m->rpc, "troupe.v1.Head/ReportMetrics", &req.base,
                            &troupe__v1__report_metrics_reply__descriptor, (ProtobufCMessage **)&rep, CALL_MS, 0, e);
    if (rv == TROUPE_OK) {
        *acked = rep->acked_seq;
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    free(pts);
    free(pp);
    return rv;
}

/* permanent: the head will never take these points (the worker is not
 * part of the job, or the points are malformed). */
static int permanent(int rv)
{
    return rv == TROUPE_INVALID_ARGUMENT || rv == TROUPE_PERMISSION_DENIED || rv == TROUPE_NOT_FOUND ||
           rv == TROUPE_FAILED_PRECONDITION || rv == TROUPE_UNAUTHENTICATED;
}

static void *sender_main(void *arg)
{
    troupe_worker_ctx *w = arg;
    tr_wk_metrics *m = w->metrics;
    int backoff = 0;
    int64_t retry_at = 0; /* tr_now_ms() before which a failed send is not retried; 0 = none */

    pthread_mutex_lock(&m->mu);
    for (;;) {
        uint64_t reported = 0, acked = 0;
        size_t n;
        tr_err e;
        int rv;
        /* The pause after a failure ends at retry_at, however often new
         * points signal the condition meanwhile: a wait restarted by every
         * signal never ended while the worker reported faster than the
         * back-off, and nothing was sent again (seen after a head restart). */
        while (!m->quit && (!tr_mbuf_pending(m->buf) || retry_at != 0)) {
            struct timespec ts;
            int64_t left = retry_at != 0 ? retry_at - tr_now_ms() : 1000;
            if (retry_at != 0 && left <= 0) {
                retry_at = 0; /* the pause is over */
                continue;
            }
            tr_abstime_in(&ts, left);
            pthread_cond_timedwait(&m->cv, &m->mu, &ts);
        }
        if (m->quit && (!tr_mbuf_pending(m->buf) || retry_at != 0)) {
            break; /* close gave up waiting, or nothing is left */
        }
        n = tr_mbuf_take(m->buf, BATCH, m->out, &reported);
        pthread_mutex_unlock(&m->mu);
        if (n < BATCH && !m->quit) {
            struct timespec ts = {m->report_ms / 1000, (long)(m->report_ms % 1000) * 1000000L}; /* let a batch gather */
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&m->mu);
            n = tr_mbuf_take(m->buf, BATCH, m->out, &reported);
            pthread_mutex_unlock(&m->mu);
        }
        rv = send_once(w, m, n, reported, &acked, &e);
        pthread_mutex_lock(&m->mu);
        if (rv == TROUPE_OK) {
            tr_mbuf_ack(m->buf, acked);
            backoff = 0;
            retry_at = 0;
        } else if (permanent(rv)) {
            /* counted here; settled, so they are not offered again */
            tr_mbuf_discard(m->buf, reported);
            tr_mbuf_ack(m->buf, reported);
            m->refused = rv;
            tr_strlcpy(m->last_error, e.msg, sizeof(m->last_error));
            TR_LOG(TR_LOG_WARNING, "metrics refused by the head, %zu points dropped: %s", n, e.msg);
        } else {
            tr_strlcpy(m->last_error, e.msg, sizeof(m->last_error));
            backoff = backoff == 0 ? 100 : backoff * 2 > 2000 ? 2000 : backoff * 2;
            retry_at = tr_now_ms() + backoff;
        }
        pthread_cond_broadcast(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

int tr_wk_metrics_start(troupe_worker_ctx *w, const tr_rpc_client_opts *ro, tr_err *e)
{
    tr_wk_metrics *m = calloc(1, sizeof(*m));
    int rv;

    if (m == NULL) {
        return tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    w->metrics = m;
    m->flush_ms = (uint32_t)env_u64("TROUPE_METRICS_FLUSH_MS", DEFAULT_FLUSH_MS, 0, 3600000);
    m->report_ms = (uint32_t)env_u64("TROUPE_METRICS_REPORT_MS", REPORT_MS, 0, 10000);
    m->buf = tr_mbuf_new((size_t)env_u64("TROUPE_METRICS_BUFFER", DEFAULT_BUFFER, 1, MAX_BUFFER));
    m->out = calloc(BATCH, sizeof(*m->out));
    if (m->buf == NULL || m->out == NULL) {
        return tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "out of memory for the metrics buffer");
    }
    if ((rv = tr_rpc_client_open(ro, &m->rpc, e)) != TROUPE_OK) {
        return rv;
    }
    if (pthread_create(&m->thread, NULL, sender_main, w) != 0) {
        return tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "cannot start the worker's metrics thread");
    }
    m->started = 1;
    return TROUPE_OK;
}

/* flush_locked waits until nothing is pending or the deadline passes. */
static int flush_locked(tr_wk_metrics *m, uint32_t wait_ms)
{
    int64_t until = tr_now_ms() + wait_ms;

    while (tr_mbuf_pending(m->buf) && m->started) {
        int64_t left = until - tr_now_ms();
        struct timespec ts;
        if (left <= 0) {
            return TROUPE_DEADLINE_EXCEEDED;
        }
        pthread_cond_broadcast(&m->cv); /* the sender, if it is waiting */
        tr_abstime_in(&ts, left < 100 ? left : 100);
        pthread_cond_timedwait(&m->cv, &m->mu, &ts);
    }
    return tr_mbuf_pending(m->buf) ? TROUPE_UNAVAILABLE : TROUPE_OK;
}

void tr_wk_metrics_stop(troupe_worker_ctx *w)
{
    tr_wk_metrics *m = w->metrics;
    tr_mbuf_stats st;

    if (m == NULL) {
        return;
    }
    if (m->started) {
        pthread_mutex_lock(&m->mu);
        if (flush_locked(m, m->flush_ms) != TROUPE_OK) {
            tr_mbuf_stats_get(m->buf, &st);
            TR_LOG(TR_LOG_WARNING, "closing with %llu metric points the head has not confirmed: %s",
                   (unsigned long long)st.buffered, m->last_error[0] ? m->last_error : "no answer");
        }
        m->quit = 1;
        pthread_cond_broadcast(&m->cv);
        pthread_mutex_unlock(&m->mu);
        tr_rpc_client_shutdown(m->rpc); /* a call in flight returns at once */
        pthread_join(m->thread, NULL);
    }
    tr_rpc_client_close(m->rpc);
    tr_mbuf_free(m->buf);
    free(m->out);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
    w->metrics = NULL;
}

TROUPE_API troupe_status troupe_worker_metric(troupe_worker_ctx *w, uint64_t step, const char *name, double value)
{
    tr_wk_metrics *m = w != NULL ? w->metrics : NULL;
    int rv;

    if (m == NULL) {
        return TROUPE_FAILED_PRECONDITION;
    }
    pthread_mutex_lock(&m->mu);
    rv = tr_mbuf_add(m->buf, step, name, value, tr_wall_ms());
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    return rv;
}

TROUPE_API troupe_status troupe_worker_metrics_flush(troupe_worker_ctx *w, uint32_t wait_ms, troupe_error *err)
{
    tr_wk_metrics *m = w->metrics;
    tr_mbuf_stats st;
    tr_err e;
    int rv;

    pthread_mutex_lock(&m->mu);
    rv = flush_locked(m, wait_ms);
    tr_mbuf_stats_get(m->buf, &st);
    if (rv == TROUPE_OK && m->refused != TROUPE_OK) {
        rv = tr_err_set(&e, m->refused, "the head refused %llu metric points (dropped): %s",
                        (unsigned long long)st.dropped, m->last_error);
    } else if (rv != TROUPE_OK) {
        tr_err_set(&e, rv, "%llu metric points not confirmed by the head after %u ms: %s",
                   (unsigned long long)(st.reported - st.acked), wait_ms,
                   m->last_error[0] ? m->last_error : "no answer yet");
    }
    pthread_mutex_unlock(&m->mu);
    return rv == TROUPE_OK ? TROUPE_OK : tr_client_finish(err, &e, rv);
}

TROUPE_API void troupe_worker_metrics_stats(troupe_worker_ctx *w, troupe_metrics_stats *out)
{
    tr_wk_metrics *m = w->metrics;
    tr_mbuf_stats st;

    pthread_mutex_lock(&m->mu);
    tr_mbuf_stats_get(m->buf, &st);
    pthread_mutex_unlock(&m->mu);
    out->reported = st.reported;
    out->acked = st.acked;
    out->dropped = st.dropped;
    out->buffered = st.buffered;
}
