/* trace_json.c - a job's built-in trace as Chrome/Perfetto trace-event JSON
 * (`troupe trace`; cmd_trace.c fetches, this writes; pure, unit-tested). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "trace_json.h"

static int by_track_then_time(const void *a, const void *b)
{
    const troupe_trace_span *x = *(const troupe_trace_span *const *)a, *y = *(const troupe_trace_span *const *)b;
    if (x->rank != y->rank) {
        return x->rank < y->rank ? -1 : 1;
    }
    if (x->tid != y->tid) {
        return x->tid < y->tid ? -1 : 1;
    }
    if (x->ts_us != y->ts_us) {
        return x->ts_us < y->ts_us ? -1 : 1;
    }
    return x->dur_us > y->dur_us ? -1 : x->dur_us < y->dur_us ? 1 : 0; /* the enclosing span first */
}

/* latest_attempt: the worker entry to name pid rank after (its newest attempt). */
static const troupe_trace_worker *latest_attempt(const troupe_trace *t, size_t i)
{
    for (size_t k = 0; k < t->n_workers; k++) {
        if (t->workers[k].rank == t->workers[i].rank && t->workers[k].attempt > t->workers[i].attempt) {
            return NULL;
        }
    }
    return &t->workers[i];
}

static void write_meta(FILE *out, const troupe_trace *t, int *first)
{
    for (size_t i = 0; i < t->n_workers; i++) {
        const troupe_trace_worker *w = latest_attempt(t, i);
        char name[512];
        if (w == NULL) {
            continue;
        }
        snprintf(name, sizeof(name), "%s (rank %u: %s %u on %s)", w->worker, w->rank, w->group, w->group_rank,
                 w->node[0] ? w->node : "?");
        fprintf(out, "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":0,\"args\":{\"name\":",
                *first ? "" : ",", w->rank);
        tr_json_str(out, name);
        fprintf(out, "}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%u,\"tid\":0,"
                     "\"args\":{\"sort_index\":%u}}",
                w->rank, w->rank);
        *first = 0;
    }
}

static void write_other(FILE *out, uint64_t job_id, const troupe_trace *t, int64_t origin)
{
    fprintf(out, "\"otherData\":{\"job\":%" PRIu64 ",\"clock\":\"troupe-head wall clock\",\"origin_unix_us\":%lld,"
                 "\"workers\":[",
            job_id, (long long)origin);
    for (size_t i = 0; i < t->n_workers; i++) {
        const troupe_trace_worker *w = &t->workers[i];
        fprintf(out, "%s{\"worker\":", i ? "," : "");
        tr_json_str(out, w->worker);
        fprintf(out, ",\"rank\":%u,\"attempt\":%u,\"offset_us\":%lld,\"rtt_us\":%lld,\"spans\":%" PRIu64
                     ",\"dropped\":%" PRIu64 "}",
                w->rank, w->attempt, (long long)w->offset_us, (long long)w->rtt_us, w->spans, w->dropped);
    }
    fputs("]}", out);
}

int tr_cli_trace_json(FILE *out, uint64_t job_id, const troupe_trace *t)
{
    const troupe_trace_span **order = calloc(t->n_spans + 1, sizeof(*order));
    int64_t origin = INT64_MAX;
    int first = 1;

    if (order == NULL) {
        return -1;
    }
    for (size_t i = 0; i < t->n_spans; i++) {
        order[i] = &t->spans[i];
        origin = t->spans[i].ts_us < origin ? t->spans[i].ts_us : origin;
    }
    qsort(order, t->n_spans, sizeof(*order), by_track_then_time);
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", out);
    write_meta(out, t, &first);
    for (size_t i = 0; i < t->n_spans; i++) {
        const troupe_trace_span *s = order[i];
        fprintf(out, "%s\n{\"name\":", first ? "" : ",");
        tr_json_str(out, s->name);
        fputs(",\"cat\":", out);
        tr_json_str(out, s->cat);
        fprintf(out, ",\"ph\":\"X\",\"pid\":%u,\"tid\":%u,\"ts\":%lld,\"dur\":%lld,\"args\":{\"step\":%" PRIu64 "}}",
                s->rank, s->tid, (long long)(s->ts_us - origin), (long long)s->dur_us, s->step);
        first = 0;
    }
    fputs("\n],", out);
    write_other(out, job_id, t, origin);
    fputs("}\n", out);
    free(order);
    return 0;
}

