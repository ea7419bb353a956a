/* worker_trace.c - the built-in trace on the worker's side: spans of the
 * profiled steps, shipped to the head, which `troupe trace JOB` reads back
 * as a Chrome/Perfetto trace (server/trace.c).
 *
 * What is recorded, only while a profiled step is in progress (between
 * step_begin with *profile = 1 and step_end): the step itself, the phases
 * the program names (troupe_worker_span_begin/_end: forward, backward, ...),
 * and, on any thread, the rendezvous waits (IDs, barriers, all-gathers) and
 * CPU collectives of this handle. Recording is a few stores into a bounded
 * buffer (TROUPE_TRACE_MAX_SPANS, default 100000; the rest are counted as
 * dropped); nothing touches the network on a step inside the range.
 *
 * Shipping: when the profiled range ends (the first step_begin outside it),
 * when the buffer holds SHIP_AT spans, and at close, the spans go to the head
 * in calls of at most 10000 (ReportTrace), after three clock probes: the probe
 * with the smallest round trip gives the offset head - worker (its error is
 * at most half that round trip), which the head adds to every span. Times
 * come from one wall-clock reading at open plus CLOCK_MONOTONIC since, so
 * spans of a thread are monotone and nest even if the wall clock steps.
 * TROUPE_TRACE_SKEW_US (tests only) pretends this worker's clock is off by
 * that much, to show that the offset puts it right. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "worker_int.h"

#define MAX_SPANS_DEFAULT 100000
#define SHIP_AT 10000   /* spans buffered before step_begin ships them (bounded call size) */
#define PER_CALL 10000
#define SHIP_MS 5000    /* deadline of each call: a head that is away must not stall the steps long */
#define PROBES 3
#define MAX_DEPTH 32

typedef struct tr_wk_span {
    char name[64];
    char cat[8];
    int64_t ts_us, dur_us;
    uint64_t step;
    uint32_t tid;
} tr_wk_span;

struct tr_wk_trace {
    pthread_mutex_t mu; /* buf, n, dropped */
    tr_wk_span *buf;
    size_t n, cap, max;
    uint64_t dropped;
    int64_t base_real_us, base_mono_us, skew_us;
    atomic_int active;           /* a profiled step is in progress */
    atomic_uint_fast64_t step;   /* its number */
    /* The stepping thread only. */
    int64_t step_t0;
    int was_active;
    struct {
        char name[64];
        int64_t t0;
        int recorded;
    } stack[MAX_DEPTH];
    int depth;
    char note[TR_ERR_MSG_MAX + 96];
};

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static long env_long(const char *name, long dflt)
{
    const char *s = getenv(name);
    char *end = NULL;
    long v = s ? strtol(s, &end, 10) : 0;
    return (s && *s && *end == '\0') ? v : dflt;
}

int tr_wk_trace_init(troupe_worker_ctx *w)
{
    tr_wk_trace *t = calloc(1, sizeof(*t));
    struct timespec ts;
    long max = env_long("TROUPE_TRACE_MAX_SPANS", MAX_SPANS_DEFAULT);

    if (t == NULL) {
        return -1;
    }
    pthread_mutex_init(&t->mu, NULL);
    t->max = max > 0 && max <= 10000000 ? (size_t)max : MAX_SPANS_DEFAULT;
    clock_gettime(CLOCK_REALTIME, &ts);
    t->base_mono_us = mono_us();
    t->base_real_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    t->skew_us = env_long("TROUPE_TRACE_SKEW_US", 0);
    w->trace = t;
    return 0;
}

/* now_us: this worker's wall clock (unix us), monotone. */
static int64_t now_us(const tr_wk_trace *t)
{
    return t->base_real_us + (mono_us() - t->base_mono_us) + t->skew_us;
}

int64_t tr_wk_trace_now(const troupe_worker_ctx *w)
{
    return w->trace != NULL && atomic_load(&w->trace->active) ? now_us(w->trace) : 0;
}

static void add(tr_wk_trace *t, const char *name, const char *cat, int64_t t0, int64_t t1)
{
    tr_wk_span *s;

    pthread_mutex_lock(&t->mu);
    if (t->n == t->cap && t->cap < t->max) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        tr_wk_span *grown = realloc(t->buf, (cap < t->max ? cap : t->max) * sizeof(*grown));
        if (grown != NULL) {
            t->buf = grown;
            t->cap = cap < t->max ? cap : t->max;
        }
    }
    if (t->n >= t->cap) {
        t->dropped++; /* over TROUPE_TRACE_MAX_SPANS (or out of memory) */
        pthread_mutex_unlock(&t->mu);
        return;
    }
    s = &t->buf[t->n++];
    tr_strlcpy(s->name, name, sizeof(s->name));
    tr_strlcpy(s->cat, cat, sizeof(s->cat));
    s->ts_us = t0;
    s->dur_us = t1 > t0 ? t1 - t0 : 0;
    s->step = atomic_load(&t->step);
    s->tid = (uint32_t)syscall(SYS_gettid);
    pthread_mutex_unlock(&t->mu);
}

void tr_wk_trace_span(troupe_worker_ctx *w, const char *name, const char *cat, int64_t t0)
{
    if (t0 != 0 && w->trace != NULL) {
        add(w->trace, name, cat, t0, now_us(w->trace));
    }
}

/* ---- shipping ------------------------------------------------------------------ */

/* probe measures the clock offset head - worker; -1 when the head cannot be reached. */
static int probe(troupe_worker_ctx *w, int64_t *offset, int64_t *rtt, tr_err *e)
{
    int best = -1;

    for (int i = 0; i < PROBES; i++) {
        Troupe__V1__ReportTraceRequest req = TROUPE__V1__REPORT_TRACE_REQUEST__INIT;
        Troupe__V1__ReportTraceReply *rep = NULL;
        Troupe__V1__WorkerRef ref;
        int64_t t0, t1;
        tr_wk_ref(w, &ref);
        req.from = &ref;
        t0 = now_us(w->trace);
        if (tr_rpc_client_call(w->rpc, "troupe.v1.Head/ReportTrace", &req.base,
                               &troupe__v1__report_trace_reply__descriptor, (ProtobufCMessage **)&rep, SHIP_MS, 0,
                               e) != TROUPE_OK) {
            return best;
        }
        t1 = now_us(w->trace);
        if (best < 0 || t1 - t0 < *rtt) {
            *rtt = t1 - t0;
            *offset = rep->head_us - (t0 + t1) / 2;
            best = 0;
        }
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    return best;
}

static int send_chunk(troupe_worker_ctx *w, const tr_wk_span *s, size_t n, int64_t offset, int64_t rtt,
                      uint64_t dropped, tr_err *e)
{
    Troupe__V1__ReportTraceRequest req = TROUPE__V1__REPORT_TRACE_REQUEST__INIT;
    Troupe__V1__ReportTraceReply *rep = NULL;
    Troupe__V1__TraceSpan *spans = calloc(n + 1, sizeof(*spans));
    Troupe__V1__TraceSpan **ptrs = calloc(n + 1, sizeof(*ptrs));
    Troupe__V1__WorkerRef ref;
    int rv;

    if (spans == NULL || ptrs == NULL) {
        free(spans);
        free(ptrs);
        return tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        troupe__v1__trace_span__init(&spans[i]);
        spans[i].name = (char *)s[i].name;
        spans[i].cat = (char *)s[i].cat;
        spans[i].ts_us = s[i].ts_us;
        spans[i].dur_us = s[i].dur_us;
        spans[i].step = s[i].step;
        spans[i].tid = s[i].tid;
        ptrs[i] = &spans[i];
    }
    tr_wk_ref(w, &ref);
    req.from = &ref;
    req.n_spans = n;
    req.spans = ptrs;
    req.offset_us = offset;
    req.rtt_us = rtt;
    req.dropped = dropped;
    rv = tr_rpc_client_call(w->rpc, "troupe.v1.Head/ReportTrace", &req.base,
                            &troupe__v1__report_trace_reply__descriptor, (ProtobufCMessage **)&rep, SHIP_MS, 0, e);
    if (rv == TROUPE_OK) {
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    free(spans);
    free(ptrs);
    return rv;
}

/* ship sends what is buffered. On failure the spans are counted as dropped
 * and the note says why (the steps go on: a trace is not worth a stall). */
static void ship(troupe_worker_ctx *w)
{
    tr_wk_trace *t = w->trace;
    tr_wk_span *spans;
    size_t n;
    uint64_t dropped;
    int64_t offset = 0, rtt = 0;
    tr_err e = {0};
    int rv = TROUPE_OK;

    pthread_mutex_lock(&t->mu);
    spans = t->buf;
    n = t->n;
    dropped = t->dropped;
    t->buf = NULL; /* a fresh buffer for spans recorded meanwhile */
    t->n = t->cap = 0;
    pthread_mutex_unlock(&t->mu);
    if (n == 0 && dropped == 0) {
        free(spans);
        return;
    }
    if (probe(w, &offset, &rtt, &e) != 0) {
        rv = e.code ? e.code : TROUPE_UNAVAILABLE;
    }
    for (size_t i = 0; rv == TROUPE_OK && (i < n || i == 0); i += PER_CALL) {
        size_t k = n - i < PER_CALL ? n - i : PER_CALL;
        /* n == 0: only the dropped count goes, and spans is NULL (no
         * offset may be applied to it). */
        rv = send_chunk(w, n > 0 ? spans + i : NULL, k, offset, rtt, dropped, &e);
        if (rv != TROUPE_OK) {
            pthread_mutex_lock(&t->mu);
            t->dropped += n - i;
            pthread_mutex_unlock(&t->mu);
        }
        if (n == 0) {
            break;
        }
    }
    if (rv != TROUPE_OK) {
        snprintf(t->note, sizeof(t->note), "trace: %zu spans not sent: %s: %s", n, troupe_strerror(rv), e.msg);
    } else {
        snprintf(t->note, sizeof(t->note), "trace: %zu spans sent (clock offset %lld us, probe round trip %lld us)",
                 n, (long long)offset, (long long)rtt);
    }
    free(spans);
}

/* ---- the step path ------------------------------------------------------------ */

void tr_wk_trace_step_begin(troupe_worker_ctx *w, uint64_t step, int profiled)
{
    tr_wk_trace *t = w->trace;
    size_t n;

    if (t == NULL) {
        return;
    }
    pthread_mutex_lock(&t->mu);
    n = t->n;
    pthread_mutex_unlock(&t->mu);
    if ((t->was_active && !profiled && n > 0) || n >= SHIP_AT) {
        ship(w); /* the range ended (or the buffer is large): once per range, not per step */
    }
    t->was_active = profiled;
    atomic_store(&t->step, step);
    t->step_t0 = profiled ? now_us(t) : 0;
    atomic_store(&t->active, profiled);
}

void tr_wk_trace_step_end(troupe_worker_ctx *w, uint64_t step)
{
    tr_wk_trace *t = w->trace;
    char name[48];

    if (t == NULL || !atomic_load(&t->active)) {
        return;
    }
    snprintf(name, sizeof(name), "step %llu", (unsigned long long)step);
    add(t, name, "step", t->step_t0, now_us(t));
    atomic_store(&t->active, 0);
}

void tr_wk_trace_close(troupe_worker_ctx *w)
{
    if (w->trace == NULL) {
        return;
    }
    atomic_store(&w->trace->active, 0);
    ship(w);
    pthread_mutex_destroy(&w->trace->mu);
    free(w->trace->buf);
    free(w->trace);
    w->trace = NULL;
}

/* ---- API -------------------------------------------------------------------- */

TROUPE_API troupe_status troupe_worker_span_begin(troupe_worker_ctx *w, const char *name)
{
    tr_wk_trace *t = w != NULL ? w->trace : NULL;

    if (t == NULL || name == NULL || name[0] == '\0') {
        return TROUPE_INVALID_ARGUMENT;
    }
    if (t->depth == MAX_DEPTH) {
        return TROUPE_RESOURCE_EXHAUSTED;
    }
    tr_strlcpy(t->stack[t->depth].name, name, sizeof(t->stack[t->depth].name));
    t->stack[t->depth].recorded = atomic_load(&t->active);
    t->stack[t->depth].t0 = t->stack[t->depth].recorded ? now_us(t) : 0;
    t->depth++;
    return TROUPE_OK;
}

TROUPE_API troupe_status troupe_worker_span_end(troupe_worker_ctx *w)
{
    tr_wk_trace *t = w != NULL ? w->trace : NULL;

    if (t == NULL || t->depth == 0) {
        return TROUPE_FAILED_PRECONDITION;
    }
    t->depth--;
    if (t->stack[t->depth].recorded) {
        add(t, t->stack[t->depth].name, "phase", t->stack[t->depth].t0, now_us(t));
    }
    return TROUPE_OK;
}

TROUPE_API troupe_status troupe_worker_span_record(troupe_worker_ctx *w, const char *name, int64_t start_us,
                                                   int64_t end_us)
{
    tr_wk_trace *t = w != NULL ? w->trace : NULL;

    if (t == NULL || name == NULL || name[0] == '\0' || end_us < start_us) {
        return TROUPE_INVALID_ARGUMENT;
    }
    if (atomic_load(&t->active)) {
        /* the same mapping as now_us: wall clock at open + monotonic since */
        int64_t base = t->base_real_us - t->base_mono_us + t->skew_us;
        add(t, name, "phase", base + start_us, base + end_us);
    }
    return TROUPE_OK;
}

TROUPE_API const char *troupe_worker_trace_note(const troupe_worker_ctx *w)
{
    return w != NULL && w->trace != NULL ? w->trace->note : "";
}
