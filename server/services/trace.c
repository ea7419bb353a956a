/* trace.c - the head's built-in trace service: ReportTrace (workers send the
 * spans of their profiled steps) and GetTrace (`troupe trace JOB` reads them
 * back and writes a Chrome/Perfetto trace).
 *
 * It works where nsys does not: each worker records its steps, phases,
 * rendezvous waits and CPU collectives with timestamps (libtroupe,
 * worker_trace.c) and measures its clock's offset against the head's with
 * probes (a ReportTrace without spans; the reply carries head_us). The head
 * applies that offset as spans arrive, so every span it keeps is on the head's
 * clock and the ranks' timelines line up.
 *
 * Spans are bounded per job and in all (the rest are counted as dropped, per
 * worker) and kept twice: in memory, which GetTrace reads, and in their own
 * SQLite file beside metrics.db (STATE_DIR/traces.db), so `troupe trace`
 * still answers after a head restart. The RPC path only checks and queues;
 * the writer thread (report_queue.c, shared with metrics.c) takes the queue
 * in rounds, and for each this service: under h->mu
 * decides how many spans of each report fit the bounds, then writes the
 * round in one transaction without any lock, then under h->mu adds the same
 * spans to memory, and only then are the reports answered (a report is
 * acknowledged once its spans are committed; a failed write answers
 * UNAVAILABLE and the worker counts them as dropped). Memory is thus always
 * what the file holds, in the same order, and a start loads the file back.
 * A job's trace goes when its record goes (job_deleted: DeleteJob,
 * retention): memory at once, the rows at the writer's next round, and rows
 * a crash left behind at the next start. Locks: h->mu for the in-memory
 * traces; the queue's own lock for the queue and the deletions; the
 * connection is the writer's alone (and the start's, before the writer
 * runs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "jobs.h"
#include "log.h"
#include "series.h"
#include "trace.h"
#include "util.h"

#define SPANS_PER_CALL 10000
#define SPANS_PER_JOB 200000
#define SPANS_TOTAL 2000000
#define NAME_MAX_BYTES 128
#define CAT_MAX_BYTES 16
#define PAGE_DEFAULT 20000
#define PAGE_MAX 50000

typedef struct tspan {
    char *name;
    char cat[CAT_MAX_BYTES];
    int64_t ts_us, dur_us; /* head clock */
    uint64_t step;
    uint32_t tid;
    uint32_t wi; /* index into the job's workers */
} tspan;

typedef struct tworker {
    char *worker, *group, *node;
    uint32_t rank, group_rank, attempt;
    int64_t offset_us, rtt_us;
    uint64_t spans;
    uint64_t dropped_worker, dropped_head; /* the worker's own count; over the head's bound */
} tworker;

typedef struct jtrace {
    uint64_t job_id;
    tspan *spans;
    size_t n, cap;
    size_t pending; /* spans of the round being written, counted against the bound */
    tworker *workers;
    size_t n_workers;
    struct jtrace *next;
} jtrace;

/* item: one ReportTrace with spans (or a dropped count), queued for the
 * writer; the queue allocates and frees it (report_queue.h), the fields
 * after base are the writer's. */
typedef struct item {
    tr_rq_item base; /* first: the queue's item; base.req is a ReportTraceRequest */
    tworker who;     /* the sender as the job knows it (strings owned), filled by the writer */
    size_t n_keep;   /* of req's spans, within the bounds */
    int gone;        /* the job or the worker went before the round: refused */
} item;

static item *item_of(tr_rq_item *it)
{
    return (item *)it;
}

static const Troupe__V1__ReportTraceRequest *req_of(const item *it)
{
    return (const Troupe__V1__ReportTraceRequest *)it->base.req;
}

/* job_of: the job the report is about (check_report made sure it names one). */
static uint64_t job_of(const item *it)
{
    return req_of(it)->from->job_id;
}

typedef struct trace_svc {
    tr_head *h;
    jtrace *jobs;    /* under h->mu */
    size_t total;    /* spans kept, all jobs */
    size_t pending;  /* spans of the round being written, all jobs */

    tr_series store; /* traces.db, and the writer of ReportTrace calls and deleted jobs */
} trace_svc;

#define MAX_QUEUED 64 /* reports waiting for the writer; past it UNAVAILABLE (the worker counts them dropped) */

static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static trace_svc *svc_of(tr_head *h)
{
    for (size_t i = 0; i < h->n_svc; i++) {
        if (h->svc[i] == &tr_trace_service) {
            return h->svc_state[i];
        }
    }
    return NULL;
}

static void tworker_clear(tworker *w)
{
    free(w->worker);
    free(w->group);
    free(w->node);
    memset(w, 0, sizeof(*w));
}

static void jtrace_free(trace_svc *s, jtrace *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->spans[i].name);
    }
    for (size_t i = 0; i < t->n_workers; i++) {
        tworker_clear(&t->workers[i]);
    }
    s->total -= t->n;
    free(t->spans);
    free(t->workers);
    free(t);
}

/* forget drops a job's trace from memory (under h->mu). */
static void forget(trace_svc *s, uint64_t job_id)
{
    for (jtrace **pp = &s->jobs; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->job_id == job_id) {
            jtrace *t = *pp;
            *pp = t->next;
            jtrace_free(s, t);
            return;
        }
    }
}

static jtrace *trace_of(trace_svc *s, uint64_t job_id, int create)
{
    jtrace *t;

    for (t = s->jobs; t != NULL; t = t->next) {
        if (t->job_id == job_id) {
            return t;
        }
    }
    if (!create || (t = calloc(1, sizeof(*t))) == NULL) {
        return NULL;
    }
    t->job_id = job_id;
    t->next = s->jobs;
    s->jobs = t;
    return t;
}

/* global_rank: the worker's rank across the job, groups in spec order. */
static uint32_t global_rank(const Troupe__V1__Job *j, const Troupe__V1__WorkerInfo *w)
{
    uint32_t offset = 0;
    for (size_t g = 0; g < j->spec->n_groups; g++) {
        if (strcmp(j->spec->groups[g]->name, w->group) == 0) {
            return offset + w->rank;
        }
        offset += j->spec->groups[g]->workers;
    }
    return offset + w->rank;
}

/* worker_slot finds the (worker, attempt) entry or adds a copy of who's
 * identity; SIZE_MAX when out of memory. */
static size_t worker_slot(jtrace *t, const tworker *who)
{
    tworker *grown, *e;

    for (size_t i = 0; i < t->n_workers; i++) {
        if (strcmp(t->workers[i].worker, who->worker) == 0 && t->workers[i].attempt == who->attempt) {
            return i;
        }
    }
    if ((grown = realloc(t->workers, (t->n_workers + 1) * sizeof(*grown))) == NULL) {
        return SIZE_MAX;
    }
    t->workers = grown;
    e = &t->workers[t->n_workers];
    memset(e, 0, sizeof(*e));
    e->worker = strdup(who->worker);
    e->group = strdup(who->group);
    e->node = strdup(who->node);
    if (e->worker == NULL || e->group == NULL || e->node == NULL) {
        tworker_clear(e);
        return SIZE_MAX;
    }
    e->rank = who->rank;
    e->group_rank = who->group_rank;
    e->attempt = who->attempt;
    return t->n_workers++;
}

static const Troupe__V1__WorkerInfo *worker_find(const Troupe__V1__Job *j, const char *name)
{
    for (size_t i = 0; i < j->n_workers; i++) {
        if (strcmp(j->workers[i]->name, name) == 0) {
            return j->workers[i];
        }
    }
    return NULL;
}

/* identify fills who from the job's record of worker w (strings copied). */
static int identify(const Troupe__V1__Job *j, const Troupe__V1__WorkerInfo *w, uint32_t attempt, tworker *who)
{
    memset(who, 0, sizeof(*who));
    who->worker = strdup(w->name);
    who->group = strdup(w->group);
    who->node = strdup(w->node_name ? w->node_name : "");
    who->rank = global_rank(j, w);
    who->group_rank = w->rank;
    who->attempt = attempt;
    if (who->worker == NULL || who->group == NULL || who->node == NULL) {
        tworker_clear(who);
        return -1;
    }
    return 0;
}

/* check_report: the caller is a worker of the job at its current attempt,
 * and every span is well formed (all or nothing). */
static int check_report(const tr_head_job *hj, const Troupe__V1__ReportTraceRequest *req,
                        const Troupe__V1__WorkerInfo **out, tr_err *err)
{
    const Troupe__V1__WorkerRef *from = req->from;
    const Troupe__V1__WorkerInfo *w;

    if (from == NULL || from->worker == NULL || from->worker[0] == '\0') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "the call does not say which worker it comes from");
    }
    if (hj == NULL) {
        return tr_err_set(err, TROUPE_NOT_FOUND, "no job %llu", (unsigned long long)from->job_id);
    }
    if ((w = worker_find(hj->j, from->worker)) == NULL) {
        return tr_err_set(err, TROUPE_PERMISSION_DENIED,
                          "worker %s is not part of job %llu: a worker sends its own trace only", from->worker,
                          (unsigned long long)from->job_id);
    }
    if (from->attempt != w->attempt) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "worker %s attempt %u is not current (the head has attempt %u: its group restarted)",
                          w->name, from->attempt, w->attempt);
    }
    if (req->n_spans > SPANS_PER_CALL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%zu spans in one call; at most %d", req->n_spans,
                          SPANS_PER_CALL);
    }
    for (size_t i = 0; i < req->n_spans; i++) {
        const Troupe__V1__TraceSpan *sp = req->spans[i];
        size_t nl = sp->name ? strlen(sp->name) : 0, cl = sp->cat ? strlen(sp->cat) : 0;
        if (nl == 0 || nl > NAME_MAX_BYTES || cl >= CAT_MAX_BYTES || sp->ts_us <= 0 || sp->dur_us < 0) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                              "span %zu: a name of 1 to %d bytes, a category under %d, ts_us > 0 and dur_us >= 0 "
                              "(got name of %zu bytes, category of %zu, ts_us %lld, dur_us %lld)",
                              i, NAME_MAX_BYTES, CAT_MAX_BYTES, nl, cl, (long long)sp->ts_us, (long long)sp->dur_us);
        }
    }
    *out = w;
    return TROUPE_OK;
}

/* add_span appends one span (already on the head's clock) to memory; 0 when
 * out of memory. */
static int add_span(trace_svc *s, jtrace *t, size_t wi, const char *name, const char *cat, int64_t ts_us,
                    int64_t dur_us, uint64_t step, uint32_t tid)
{
    tspan *d;

    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        tspan *grown = realloc(t->spans, cap * sizeof(*grown));
        if (grown == NULL) {
            return 0;
        }
        t->spans = grown;
        t->cap = cap;
    }
    d = &t->spans[t->n];
    if ((d->name = strdup(name)) == NULL) {
        return 0;
    }
    tr_strlcpy(d->cat, cat ? cat : "", sizeof(d->cat));
    d->ts_us = ts_us;
    d->dur_us = dur_us;
    d->step = step;
    d->tid = tid;
    d->wi = (uint32_t)wi;
    t->n++;
    s->total++;
    return 1;
}

/* ---- the file ---------------------------------------------------------------- */

/* trace_reports: one row per ReportTrace written (the sender, its clock
 * offset and counts), so a start rebuilds each worker's totals by summing;
 * trace_spans: the spans on the head's clock, rowid = arrival order. */
static const char schema[] =
    "CREATE TABLE IF NOT EXISTS trace_reports(id INTEGER PRIMARY KEY, job INTEGER NOT NULL, worker TEXT NOT NULL,"
    " grp TEXT NOT NULL, node TEXT NOT NULL, rank INTEGER NOT NULL, group_rank INTEGER NOT NULL,"
    " attempt INTEGER NOT NULL, offset_us INTEGER NOT NULL, rtt_us INTEGER NOT NULL, kept INTEGER NOT NULL,"
    " sent INTEGER NOT NULL, dropped_worker INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS trace_reports_job ON trace_reports(job);"
    "CREATE TABLE IF NOT EXISTS trace_spans(job INTEGER NOT NULL, worker TEXT NOT NULL, attempt INTEGER NOT NULL,"
    " name TEXT NOT NULL, cat TEXT NOT NULL, ts_us INTEGER NOT NULL, dur_us INTEGER NOT NULL,"
    " step INTEGER NOT NULL, tid INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS trace_spans_job ON trace_spans(job);";

static const char *const job_tables[] = {"trace_spans", "trace_reports", NULL};

static const tr_series_def traces_db = {
    .name = "trace",
    .rows = "traces",
    .file = "traces.db",
    .bound = "traces_max_bytes",
    .schema = schema,
    .job_tables = job_tables,
};

static int db_fail(trace_svc *s, const char *what, tr_err *err)
{
    return tr_series_fail(&s->store, what, err);
}

/* write_item inserts one report's row and its kept spans. */
static int write_item(trace_svc *s, sqlite3_stmt *rep, sqlite3_stmt *ins, const item *it, tr_err *err)
{
    const Troupe__V1__ReportTraceRequest *req = req_of(it);

    sqlite3_reset(rep);
    sqlite3_bind_int64(rep, 1, (sqlite3_int64)job_of(it));
    sqlite3_bind_text(rep, 2, it->who.worker, -1, SQLITE_STATIC);
    sqlite3_bind_text(rep, 3, it->who.group, -1, SQLITE_STATIC);
    sqlite3_bind_text(rep, 4, it->who.node, -1, SQLITE_STATIC);
    sqlite3_bind_int64(rep, 5, it->who.rank);
    sqlite3_bind_int64(rep, 6, it->who.group_rank);
    sqlite3_bind_int64(rep, 7, it->who.attempt);
    sqlite3_bind_int64(rep, 8, req->offset_us);
    sqlite3_bind_int64(rep, 9, req->rtt_us);
    sqlite3_bind_int64(rep, 10, (sqlite3_int64)it->n_keep);
    sqlite3_bind_int64(rep, 11, (sqlite3_int64)req->n_spans);
    sqlite3_bind_int64(rep, 12, (sqlite3_int64)req->dropped);
    if (sqlite3_step(rep) != SQLITE_DONE) {
        return db_fail(s, "write", err);
    }
    for (size_t i = 0; i < it->n_keep; i++) {
        const Troupe__V1__TraceSpan *sp = req->spans[i];
        sqlite3_reset(ins);
        sqlite3_bind_int64(ins, 1, (sqlite3_int64)job_of(it));
        sqlite3_bind_text(ins, 2, it->who.worker, -1, SQLITE_STATIC);
        sqlite3_bind_int64(ins, 3, it->who.attempt);
        sqlite3_bind_text(ins, 4, sp->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(ins, 5, sp->cat ? sp->cat : "", -1, SQLITE_STATIC);
        sqlite3_bind_int64(ins, 6, sp->ts_us + req->offset_us);
        sqlite3_bind_int64(ins, 7, sp->dur_us);
        sqlite3_bind_int64(ins, 8, (sqlite3_int64)sp->step);
        sqlite3_bind_int64(ins, 9, sp->tid);
        if (sqlite3_step(ins) != SQLITE_DONE) {
            return db_fail(s, "write", err);
        }
    }
    return TROUPE_OK;
}

/* write_round writes a round's reports in one transaction (nothing when it fails). */
static int write_round(trace_svc *s, tr_rq_item *round, tr_err *err)
{
    sqlite3 *db = s->store.db;
    sqlite3_stmt *rep = NULL, *ins = NULL;
    int rv = tr_series_begin(&s->store, err);

    if (rv == TROUPE_OK &&
        (sqlite3_prepare_v2(db,
                            "INSERT INTO trace_reports(job, worker, grp, node, rank, group_rank, attempt, offset_us,"
                            " rtt_us, kept, sent, dropped_worker) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                            -1, &rep, NULL) != SQLITE_OK ||
         sqlite3_prepare_v2(db,
                            "INSERT INTO trace_spans(job, worker, attempt, name, cat, ts_us, dur_us, step, tid)"
                            " VALUES(?,?,?,?,?,?,?,?,?)",
                            -1, &ins, NULL) != SQLITE_OK)) {
        rv = db_fail(s, "prepare", err);
    }
    for (tr_rq_item *r = round; rv == TROUPE_OK && r != NULL; r = r->next) {
        if (!item_of(r)->gone) {
            rv = write_item(s, rep, ins, item_of(r), err);
        }
    }
    sqlite3_finalize(rep);
    sqlite3_finalize(ins);
    return tr_series_commit(&s->store, rv, err);
}

/* delete_jobs (the queue's deleted, after the round taken with them): a
 * failure leaves the rows to the next start. */
static void delete_jobs(void *arg, const tr_ids *ids)
{
    trace_svc *s = arg;
    tr_err err;

    if (tr_series_delete_jobs(&s->store, ids, &err) != TROUPE_OK) {
        TR_LOG(TR_LOG_WARNING,
               "trace store: cannot delete the traces of %zu deleted job%s (the next start does): %s", ids->n,
               ids->n == 1 ? "" : "s", err.msg);
    }
}

/* load_reports rebuilds each worker's entry (identity, latest offset, sums);
 * ids of jobs the head no longer has go to orphans. Under h->mu. */
static int load_reports(trace_svc *s, tr_ids *orphans, tr_err *err)
{
    sqlite3_stmt *q = NULL;
    int rv = TROUPE_OK;

    if (sqlite3_prepare_v2(s->store.db,
                           "SELECT job, worker, grp, node, rank, group_rank, attempt, offset_us, rtt_us, kept, sent,"
                           " dropped_worker FROM trace_reports ORDER BY id",
                           -1, &q, NULL) != SQLITE_OK) {
        return db_fail(s, "load", err);
    }
    while (rv == TROUPE_OK && sqlite3_step(q) == SQLITE_ROW) {
        uint64_t job = (uint64_t)sqlite3_column_int64(q, 0);
        tworker who = {.worker = (char *)sqlite3_column_text(q, 1),
                       .group = (char *)sqlite3_column_text(q, 2),
                       .node = (char *)sqlite3_column_text(q, 3),
                       .rank = (uint32_t)sqlite3_column_int64(q, 4),
                       .group_rank = (uint32_t)sqlite3_column_int64(q, 5),
                       .attempt = (uint32_t)sqlite3_column_int64(q, 6)};
        jtrace *t;
        size_t wi;
        if (tr_jobs_find(s->h, job) == NULL) {
            rv = tr_ids_add(orphans, job) == 0 ? TROUPE_OK : TROUPE_RESOURCE_EXHAUSTED;
            continue;
        }
        if ((t = trace_of(s, job, 1)) == NULL || (wi = worker_slot(t, &who)) == SIZE_MAX) {
            rv = TROUPE_RESOURCE_EXHAUSTED;
            break;
        }
        t->workers[wi].offset_us = sqlite3_column_int64(q, 7);
        t->workers[wi].rtt_us = sqlite3_column_int64(q, 8);
        t->workers[wi].dropped_head += (uint64_t)(sqlite3_column_int64(q, 10) - sqlite3_column_int64(q, 9));
        t->workers[wi].dropped_worker = (uint64_t)sqlite3_column_int64(q, 11);
    }
    sqlite3_finalize(q);
    return rv == TROUPE_RESOURCE_EXHAUSTED ? tr_err_set(err, rv, "out of memory loading %s", s->store.path) : rv;
}

/* load_spans puts the stored spans back in memory, in arrival order. Under h->mu. */
static int load_spans(trace_svc *s, tr_err *err)
{
    sqlite3_stmt *q = NULL;
    size_t n = 0;

    if (sqlite3_prepare_v2(s->store.db,
                           "SELECT job, worker, attempt, name, cat, ts_us, dur_us, step, tid FROM trace_spans"
                           " ORDER BY rowid",
                           -1, &q, NULL) != SQLITE_OK) {
        return db_fail(s, "load", err);
    }
    while (sqlite3_step(q) == SQLITE_ROW) {
        jtrace *t = trace_of(s, (uint64_t)sqlite3_column_int64(q, 0), 0);
        tworker who = {.worker = (char *)sqlite3_column_text(q, 1), .attempt = (uint32_t)sqlite3_column_int64(q, 2)};
        size_t wi = SIZE_MAX;
        for (size_t i = 0; t != NULL && i < t->n_workers; i++) {
            if (strcmp(t->workers[i].worker, who.worker) == 0 && t->workers[i].attempt == who.attempt) {
                wi = i;
            }
        }
        if (wi == SIZE_MAX || t->n >= SPANS_PER_JOB || s->total >= SPANS_TOTAL) {
            continue; /* an orphan's (deleted below) */
        }
        if (!add_span(s, t, wi, (const char *)sqlite3_column_text(q, 3), (const char *)sqlite3_column_text(q, 4),
                      sqlite3_column_int64(q, 5), sqlite3_column_int64(q, 6), (uint64_t)sqlite3_column_int64(q, 7),
                      (uint32_t)sqlite3_column_int64(q, 8))) {
            sqlite3_finalize(q);
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory loading %s", s->store.path);
        }
        t->workers[wi].spans++;
        n++;
    }
    sqlite3_finalize(q);
    if (n > 0) {
        TR_LOG(TR_LOG_NOTICE, "trace store: %zu spans of earlier profiled steps loaded from %s", n, s->store.path);
    }
    return TROUPE_OK;
}

static int db_open(trace_svc *s, tr_err *err)
{
    tr_ids orphans = {0};
    int rv = tr_series_open(&s->store, &traces_db, s->h->cfg.traces_dir ? s->h->cfg.traces_dir : s->h->cfg.state_dir,
                            s->h->cfg.sync_full, s->h->cfg.traces_max_bytes, err);

    if (rv != TROUPE_OK) {
        return rv;
    }
    pthread_mutex_lock(&s->h->mu);
    rv = load_reports(s, &orphans, err);
    if (rv == TROUPE_OK) {
        rv = load_spans(s, err);
    }
    pthread_mutex_unlock(&s->h->mu);
    if (rv == TROUPE_OK) {
        tr_series_delete_orphans(&s->store, &orphans);
    }
    tr_ids_fini(&orphans);
    return rv;
}

/* ---- the writer ---------------------------------------------------------------- */

/* plan (under h->mu): who sent each report, as the job knows it, and how many
 * of its spans fit the bounds (counted as pending until applied). */
static void plan(trace_svc *s, tr_rq_item *round)
{
    for (tr_rq_item *r = round; r != NULL; r = r->next) {
        item *it = item_of(r);
        const Troupe__V1__ReportTraceRequest *req = req_of(it);
        tr_head_job *hj = tr_jobs_find(s->h, job_of(it));
        const Troupe__V1__WorkerInfo *w = hj != NULL ? worker_find(hj->j, req->from->worker) : NULL;
        jtrace *t;
        size_t room_job, room_all;
        if (w == NULL || (t = trace_of(s, job_of(it), 1)) == NULL ||
            identify(hj->j, w, req->from->attempt, &it->who) != 0) {
            it->gone = 1;
            continue;
        }
        room_job = SPANS_PER_JOB - (t->n + t->pending < SPANS_PER_JOB ? t->n + t->pending : SPANS_PER_JOB);
        room_all = SPANS_TOTAL - (s->total + s->pending < SPANS_TOTAL ? s->total + s->pending : SPANS_TOTAL);
        it->n_keep = req->n_spans;
        it->n_keep = it->n_keep < room_job ? it->n_keep : room_job;
        it->n_keep = it->n_keep < room_all ? it->n_keep : room_all;
        t->pending += it->n_keep;
        s->pending += it->n_keep;
    }
}

/* apply_one (under h->mu): what was committed of one report goes into
 * memory, the same spans in the same order; ok = 0 only ends the pending
 * counts. */
static void apply_one(trace_svc *s, item *it, int ok)
{
    const Troupe__V1__ReportTraceRequest *req = req_of(it);
    jtrace *t = trace_of(s, job_of(it), 0);
    size_t wi, kept = 0;

    s->pending -= it->n_keep;
    if (t == NULL) {
        return; /* deleted meanwhile: its rows go with the deletion after this round */
    }
    t->pending -= it->n_keep;
    if (!ok || (wi = worker_slot(t, &it->who)) == SIZE_MAX) {
        return;
    }
    for (size_t i = 0; i < it->n_keep; i++) {
        const Troupe__V1__TraceSpan *sp = req->spans[i];
        if (!add_span(s, t, wi, sp->name, sp->cat, sp->ts_us + req->offset_us, sp->dur_us, sp->step,
                      sp->tid)) {
            break; /* out of memory: the file has them, the next start shows them */
        }
        kept++;
    }
    t->workers[wi].offset_us = req->offset_us;
    t->workers[wi].rtt_us = req->rtt_us;
    t->workers[wi].spans += kept;
    t->workers[wi].dropped_head += req->n_spans - it->n_keep;
    t->workers[wi].dropped_worker = req->dropped; /* the worker's count is cumulative */
    if (it->n_keep < req->n_spans) {
        TR_LOG(TR_LOG_WARNING, "job=%llu trace: %zu spans of %s over the bound (%d per job, %d in all)",
               (unsigned long long)job_of(it), req->n_spans - it->n_keep, it->who.worker, SPANS_PER_JOB,
               SPANS_TOTAL);
    }
}

/* commit_round (the queue's write, on its writer thread): plan under h->mu,
 * write without a lock, then memory under h->mu, so that memory is what the
 * file holds by the time the queue answers the reports. */
static int commit_round(void *arg, tr_rq_item *round, tr_err *err)
{
    trace_svc *s = arg;
    int rv;

    pthread_mutex_lock(&s->h->mu);
    plan(s, round);
    pthread_mutex_unlock(&s->h->mu);
    rv = write_round(s, round, err);
    if (rv != TROUPE_OK) {
        TR_LOG(TR_LOG_WARNING, "trace store cannot write, the workers count these spans as dropped: %s",
               err->msg);
    }
    pthread_mutex_lock(&s->h->mu);
    for (tr_rq_item *r = round; r != NULL; r = r->next) {
        if (!item_of(r)->gone) {
            apply_one(s, item_of(r), rv == TROUPE_OK);
        }
    }
    pthread_mutex_unlock(&s->h->mu);
    return rv;
}

/* answer_item (the queue's answer): kept says how many spans the head took;
 * a failed round is UNAVAILABLE and the worker counts those spans dropped. */
static void answer_item(void *arg, tr_rq_item *r, int rv, const tr_err *err)
{
    item *it = item_of(r);

    (void)arg;
    if (it->gone) {
        tr_rpc_reply_error(r->call, TROUPE_NOT_FOUND,
                           "job %llu or its worker %s is gone, and its trace with it",
                           (unsigned long long)job_of(it), req_of(it)->from->worker);
    } else if (rv == TROUPE_OK) {
        Troupe__V1__ReportTraceReply rep = TROUPE__V1__REPORT_TRACE_REPLY__INIT;
        rep.head_us = wall_us();
        rep.kept = it->n_keep;
        tr_rpc_reply(r->call, &rep.base);
    } else {
        tr_rpc_reply_error(r->call, rv, "the head could not save these spans: %s", err->msg);
    }
    tworker_clear(&it->who);
}

/* The durable writer (report_queue.h). A refused or unanswered report's
 * spans are counted dropped by the worker, so a full queue is UNAVAILABLE
 * and bounded by reports, not spans (SPANS_PER_CALL bounds each). */
static const tr_rq_ops trace_queue = {
    .name = "trace",
    .item_size = sizeof(item),
    .max_weight = MAX_QUEUED,
    .unit = "reports",
    .full_code = TROUPE_UNAVAILABLE,
    .full_hint = "",
    .write = commit_round,
    .answer = answer_item,
    .deleted = delete_jobs,
};

/* ---- ReportTrace --------------------------------------------------------------- */

static void report_trace(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    trace_svc *s = svc_of(h);
    Troupe__V1__ReportTraceRequest *req =
        (Troupe__V1__ReportTraceRequest *)tr_rpc_unpack(call, &troupe__v1__report_trace_request__descriptor);
    Troupe__V1__ReportTraceReply rep = TROUPE__V1__REPORT_TRACE_REPLY__INIT;
    const Troupe__V1__WorkerInfo *w = NULL;
    tr_err err;
    int rv;

    if (req == NULL) {
        return;
    }
    if (!tr_rpc_require_worker(call, req->from != NULL ? req->from->job_id : 0,
                               req->from != NULL ? req->from->worker : NULL)) {
        protobuf_c_message_free_unpacked(&req->base, NULL); /* answered: a worker credential of another job */
        return;
    }
    pthread_mutex_lock(&h->mu);
    rv = check_report(req->from != NULL ? tr_jobs_find(h, req->from->job_id) : NULL, req, &w, &err);
    pthread_mutex_unlock(&h->mu);
    if (rv == TROUPE_OK && req->n_spans == 0 && req->dropped == 0) {
        rep.head_us = wall_us(); /* a clock probe: answered at once, as late as possible */
        tr_rpc_reply(call, &rep.base);
        protobuf_c_message_free_unpacked(&req->base, NULL);
        return;
    }
    if (rv == TROUPE_OK) {
        rv = tr_rq_submit(s->store.q, call, &req->base, 1, &err); /* OK: req is the queue's */
    }
    if (rv != TROUPE_OK) {
        TR_LOG(TR_LOG_INFO, "refused ReportTrace job=%llu: %s",
               (unsigned long long)(req->from ? req->from->job_id : 0), err.msg);
        tr_rpc_reply_error(call, rv, "%s", err.msg);
        protobuf_c_message_free_unpacked(&req->base, NULL);
    }
}

/* ---- GetTrace ----------------------------------------------------------------- */

static void reply_page(tr_rpc_call *call, const jtrace *t, uint64_t after, uint32_t limit)
{
    Troupe__V1__GetTraceReply rep = TROUPE__V1__GET_TRACE_REPLY__INIT;
    size_t from = t != NULL && after < t->n ? (size_t)after : (t ? t->n : 0);
    size_t n = t != NULL ? t->n - from : 0;
    Troupe__V1__TraceSpan *spans, **sp;
    Troupe__V1__TraceWorker *ws, **wp;
    size_t nw = t != NULL ? t->n_workers : 0;

    n = n > limit ? limit : n;
    spans = calloc(n + 1, sizeof(*spans));
    sp = calloc(n + 1, sizeof(*sp));
    ws = calloc(nw + 1, sizeof(*ws));
    wp = calloc(nw + 1, sizeof(*wp));
    if (spans == NULL || sp == NULL || ws == NULL || wp == NULL) {
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const tspan *d = &t->spans[from + i];
        troupe__v1__trace_span__init(&spans[i]);
        spans[i].name = d->name;
        spans[i].cat = (char *)d->cat;
        spans[i].ts_us = d->ts_us;
        spans[i].dur_us = d->dur_us;
        spans[i].step = d->step;
        spans[i].tid = d->tid;
        spans[i].rank = t->workers[d->wi].rank;
        sp[i] = &spans[i];
    }
    for (size_t i = 0; i < nw; i++) {
        const tworker *e = &t->workers[i];
        troupe__v1__trace_worker__init(&ws[i]);
        ws[i].worker = e->worker;
        ws[i].group = e->group;
        ws[i].rank = e->rank;
        ws[i].group_rank = e->group_rank;
        ws[i].node = e->node;
        ws[i].attempt = e->attempt;
        ws[i].offset_us = e->offset_us;
        ws[i].rtt_us = e->rtt_us;
        ws[i].spans = e->spans;
        ws[i].dropped = e->dropped_worker + e->dropped_head;
        wp[i] = &ws[i];
    }
    rep.n_spans = n;
    rep.spans = sp;
    rep.n_workers = nw;
    rep.workers = wp;
    rep.next = from + n;
    rep.more = t != NULL && from + n < t->n;
    tr_rpc_reply(call, &rep.base); /* packed here, under h->mu: the strings are borrowed */
out:
    free(spans);
    free(sp);
    free(ws);
    free(wp);
}

static void get_trace(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    trace_svc *s = svc_of(h);
    Troupe__V1__GetTraceRequest *req =
        (Troupe__V1__GetTraceRequest *)tr_rpc_unpack(call, &troupe__v1__get_trace_request__descriptor);
    uint32_t limit;

    if (req == NULL) {
        return;
    }
    if (!tr_rpc_require_job(call, req->job_id)) {
        goto out;
    }
    limit = req->limit == 0 ? PAGE_DEFAULT : req->limit > PAGE_MAX ? PAGE_MAX : req->limit;
    pthread_mutex_lock(&h->mu);
    if (tr_jobs_find(h, req->job_id) == NULL) {
        tr_rpc_reply_error(call, TROUPE_NOT_FOUND, "no job %llu (see troupe jobs)", (unsigned long long)req->job_id);
    } else {
        reply_page(call, trace_of(s, req->job_id, 0), req->after, limit);
    }
    pthread_mutex_unlock(&h->mu);
out:
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* ---- the service ------------------------------------------------------------- */

/* Scopes (rpc.h): a worker sends its own spans (tr_rpc_require_worker)
 * as itself at its current attempt (check_report); users read traces. */
static const tr_rpc_method trace_methods[] = {
    {"troupe.v1.Head/ReportTrace", report_trace, TR_SCOPES_WORKER_JOB},
    {"troupe.v1.Head/GetTrace", get_trace, TR_SCOPES_WORKER_JOB},
    {NULL, NULL, 0},
};

/* svc_free (the service's stop, and a failed start's undo) stops the
 * writer first: its rounds use the traces and the connection. The RPC
 * server stopped by then: every queued call was answered and expired out of
 * the queue. */
static void svc_free(tr_head *h, void *state)
{
    trace_svc *s = state;

    (void)h;
    tr_series_stop(&s->store);
    while (s->jobs != NULL) {
        jtrace *t = s->jobs;
        s->jobs = t->next;
        jtrace_free(s, t);
    }
    tr_series_close(&s->store);
    free(s);
}

static int svc_start(tr_head *h, void **state, tr_err *err)
{
    trace_svc *s = calloc(1, sizeof(*s));
    int rv;

    if (s == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    s->h = h;
    rv = db_open(s, err);
    if (rv == TROUPE_OK) {
        rv = tr_series_start(&s->store, &trace_queue, (int)h->cfg.ingest_nice, s, err); /* after the load */
    }
    if (rv != TROUPE_OK) {
        svc_free(h, s);
        return rv;
    }
    *state = s;
    return TROUPE_OK;
}

/* job_deleted (under h->mu): the trace leaves memory now, its rows at the
 * writer's next round (or, after a crash, at the next start). */
static void job_deleted(tr_head *h, uint64_t job_id, void *state)
{
    trace_svc *s = state;

    (void)h;
    forget(s, job_id);
    tr_series_job_deleted(&s->store, job_id);
}

const tr_head_service tr_trace_service = {
    .name = "trace",
    .methods = trace_methods,
    .start = svc_start,
    .stop = svc_free,
    .job_deleted = job_deleted,
};
