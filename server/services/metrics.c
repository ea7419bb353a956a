/* metrics.c - the head's metrics service: ReportMetrics (worker-scoped,
 * batches of sequence-numbered scalars) and GetMetrics (`troupe metrics`).
 *
 * Points live in their own SQLite file, STATE_DIR/metrics.db, written by this
 * service's own writer thread (report_queue.c, shared with trace.c): the
 * head's group commit (head.db) never waits for a metrics transaction (WAL
 * allows one writer per file), and the RPC path only queues. A report is
 * acknowledged (acked_seq) only once its points are
 * committed; when the write fails the whole round is answered UNAVAILABLE
 * and the worker keeps the points and sends them again - nothing
 * acknowledged is lost, nothing is counted twice (seq <= last_seq is a
 * resend and skipped: tr_mseq_take). A gap in a worker's seq is a point the worker dropped
 * (its buffer was full): the head adds it to that stream's `dropped`, in the
 * same transaction as the points, so the count is exact across restarts.
 *
 * Retention: past metrics_keep points per job the oldest are deleted after
 * each round. Locks: the queue's own lock guards the queue; s->dbmu the
 * connection and the streams; h->mu is taken only to check a caller's job
 * and worker. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "jobs.h"
#include "log.h"
#include "metric_buf.h"
#include "metrics.h"
#include "metrics_follow.h"
#include "series.h"
#include "util.h"

#define MAX_POINTS_PER_REPORT 20000
#define MAX_QUEUED_POINTS 400000 /* past it reports are refused (the worker keeps them) */
#define MAX_NAME 128
/* No worker numbers 2^53 points (a million a second for 285 years): a seq,
 * `reported` or `dropped` past it is a forged report, and it also keeps the
 * counters exact in JSON and in SQLite's signed integers. */
#define MAX_SEQ (((uint64_t)1 << 53) - 1)
#define MAX_FILTER 64
#define DEFAULT_PAGE 5000
#define MAX_PAGE 20000

#define ROWS_PER_INSERT 64 /* points per INSERT statement (8 parameters each; SQLite allows 999 at least) */

#define SNAP_NAMES 32 /* newest value kept per worker for this many names (/metrics gauges) */

/* snap: what the HTTP side reads about a stream, copied after each commit
 * under s->lmu (never held across I/O), so a scrape never waits for the
 * writer's fsync. */
typedef struct snap {
    uint64_t job;
    uint32_t attempt;
    char worker[MAX_NAME];
    uint64_t stored, dropped;
    size_t n_last;
    tr_metrics_last last[SNAP_NAMES];
    char names[SNAP_NAMES][MAX_NAME];
    int dead; /* its job ended: no longer shown, freed by the writer's next round */
    struct snap *next;
} snap;

typedef struct stream {
    uint64_t job;
    char worker[MAX_NAME];
    uint32_t attempt;
    tr_mseq seq; /* last_seq, stored, dropped (metric_buf.h) */
    uint64_t reported, worker_dropped;
    uint64_t round; /* the last round that wrote its row (s->round), so a round writes it once */
    snap *snap; /* made after its first commit; owned by s->snaps */
    struct stream *next;
    struct stream *hnext; /* in s->sbuckets */
} stream;

/* batch: one ReportMetrics in the queue; the queue allocates and frees it
 * (report_queue.h), the fields after base are the writer's. */
typedef struct batch {
    tr_rq_item base; /* first: the queue's item; base.req is a ReportMetricsRequest */
    stream *st;      /* set by the writer */
    stream before;   /* st as it was, restored when the round fails */
    int gone;        /* its job was deleted: refused, nothing written */
    int refused;     /* a status: the report does not fit what the head has seen (why) */
    char why[256];
    uint64_t acked;  /* st->last_seq once the round committed: what the answer says
                      * (the answerer never reads st, which the writer changes or frees meanwhile) */
} batch;

static batch *batch_of(tr_rq_item *it)
{
    return (batch *)it;
}

static const Troupe__V1__ReportMetricsRequest *req_of(const batch *b)
{
    return (const Troupe__V1__ReportMetricsRequest *)b->base.req;
}

typedef struct job_count {
    uint64_t job, kept;
    struct job_count *next;
} job_count;

typedef struct metrics_svc {
    tr_head *h;
    /* metrics.db (under dbmu), and its writer: ReportMetrics calls waiting
     * to be written, and deleted jobs. */
    tr_series store;

    pthread_mutex_t dbmu;
    stream *streams;
    stream **sbuckets; /* the streams by (job, worker, attempt): every report looks its stream up */
    size_t sbucket_cap, n_streams;
    job_count *counts;
    int failing;
    uint64_t round; /* rounds written (the writer's, under dbmu) */
    /* ins[n]: INSERT of n points in one statement, prepared on first use
     * and kept (under dbmu; finalized before the connection is closed). */
    sqlite3_stmt *ins[ROWS_PER_INSERT + 1];

    /* For /metrics (server/http): under lmu, or atomics. */
    pthread_mutex_t lmu;
    snap *snaps;
    size_t n_dead;
    _Atomic uint64_t refused, stored, dropped, rounds, rounds_failed; /* reports: tr_rq_submitted */

    /* Deleted jobs (DeleteJob, retention): their ids wait in the queue for
     * the writer, which deletes their points and streams; `gone` (under
     * dbmu) remembers them for this head's life, so that a report checked
     * just before the deletion and queued after it is refused, not stored.
     * What a crash leaves behind is removed at the next start
     * (forget_orphans). */
    tr_ids gone;

    tr_mfollow *follow; /* GetMetrics long polls, told of every committed round */
    tr_metrics_report_fn on_report; /* the listener of accepted reports (health.c), or NULL */
    void *on_report_arg;
} metrics_svc;

static metrics_svc *svc_of(void *head)
{
    tr_head *h = head;
    for (size_t i = 0; i < h->n_svc; i++) {
        if (h->svc[i] == &tr_metrics_service) {
            return h->svc_state[i];
        }
    }
    return NULL;
}

/* stream_hash: FNV-1a over the worker name, the job and the attempt. */
static size_t stream_hash(uint64_t job, const char *worker, uint32_t attempt)
{
    uint64_t h = 0xcbf29ce484222325ull ^ job;
    for (const unsigned char *p = (const unsigned char *)worker; *p != '\0'; p++) {
        h = (h ^ *p) * 0x100000001b3ull;
    }
    h = (h ^ attempt) * 0x100000001b3ull;
    return (size_t)(h ^ (h >> 29));
}

/* sbuckets_grow doubles the buckets (kept at least the stream count) and
 * re-files every stream; on out of memory the old table stays (longer chains). */
static void sbuckets_grow(metrics_svc *s)
{
    size_t cap = s->sbucket_cap ? s->sbucket_cap * 2 : 256;
    stream **b = calloc(cap, sizeof(*b));

    if (b == NULL) {
        return;
    }
    for (stream *st = s->streams; st != NULL; st = st->next) {
        size_t k = stream_hash(st->job, st->worker, st->attempt) & (cap - 1);
        st->hnext = b[k];
        b[k] = st;
    }
    free(s->sbuckets);
    s->sbuckets = b;
    s->sbucket_cap = cap;
}

/* stream_find looks a stream up by hash: it runs for every report of every
 * worker (bench/metrics: 10,000 reports/s over 1,000 streams, which the list
 * walk this replaces spent 2-4 % of the head's time on strcmp). */
static stream *stream_find(metrics_svc *s, uint64_t job, const char *worker, uint32_t attempt, int create)
{
    stream *st;

    st = s->sbucket_cap > 0 ? s->sbuckets[stream_hash(job, worker, attempt) & (s->sbucket_cap - 1)] : s->streams;
    for (; st != NULL; st = s->sbucket_cap > 0 ? st->hnext : st->next) { /* no table yet (out of memory): the list */
        if (st->job == job && st->attempt == attempt && strcmp(st->worker, worker) == 0) {
            return st;
        }
    }
    if (!create || (st = calloc(1, sizeof(*st))) == NULL) {
        return NULL;
    }
    st->job = job;
    st->attempt = attempt;
    tr_strlcpy(st->worker, worker, sizeof(st->worker));
    st->next = s->streams;
    s->streams = st;
    s->n_streams++;
    if (s->n_streams > s->sbucket_cap) {
        size_t before = s->sbucket_cap;
        sbuckets_grow(s);
        if (s->sbucket_cap != before) {
            return st; /* filed with the others */
        }
    }
    if (s->sbucket_cap > 0) {
        size_t k = stream_hash(job, worker, attempt) & (s->sbucket_cap - 1);
        st->hnext = s->sbuckets[k];
        s->sbuckets[k] = st;
    }
    return st;
}

/* stream_unfile takes st out of its bucket (before it is freed). */
static void stream_unfile(metrics_svc *s, stream *st)
{
    if (s->sbucket_cap == 0) {
        return;
    }
    for (stream **pp = &s->sbuckets[stream_hash(st->job, st->worker, st->attempt) & (s->sbucket_cap - 1)];
         *pp != NULL; pp = &(*pp)->hnext) {
        if (*pp == st) {
            *pp = st->hnext;
            break;
        }
    }
    s->n_streams--;
}

static job_count *count_of(metrics_svc *s, uint64_t job, int create)
{
    job_count *c;
    for (c = s->counts; c != NULL; c = c->next) {
        if (c->job == job) {
            return c;
        }
    }
    if (!create || (c = calloc(1, sizeof(*c))) == NULL) {
        return NULL;
    }
    c->job = job;
    c->next = s->counts;
    s->counts = c;
    return c;
}

/* ---- the database ------------------------------------------------------------ */

static int metrics_err(metrics_svc *s, const char *what, tr_err *err)
{
    return tr_series_fail(&s->store, what, err);
}

/* metric_points.id is a plain rowid key (no AUTOINCREMENT, which read and
 * rewrote sqlite_sequence on every point's INSERT): ids still grow, because a
 * new id is the largest one + 1; only the ids of the newest job's points can
 * come back after that job is deleted, and no reader of a deleted job is
 * left (GetMetrics is NOT_FOUND for it). State dirs made before keep their
 * AUTOINCREMENT table (CREATE TABLE IF NOT EXISTS). */
static const char schema[] =
    "CREATE TABLE IF NOT EXISTS metric_points(id INTEGER PRIMARY KEY, job INTEGER NOT NULL,"
    " worker TEXT NOT NULL, attempt INTEGER NOT NULL, seq INTEGER NOT NULL, step INTEGER NOT NULL,"
    " name TEXT NOT NULL, value REAL, ts_ms INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS metric_points_job ON metric_points(job, id);"
    "CREATE TABLE IF NOT EXISTS metric_streams(job INTEGER NOT NULL, worker TEXT NOT NULL,"
    " attempt INTEGER NOT NULL, last_seq INTEGER NOT NULL, stored INTEGER NOT NULL, dropped INTEGER NOT NULL,"
    " reported INTEGER NOT NULL, worker_dropped INTEGER NOT NULL, PRIMARY KEY(job, worker, attempt));";

static int load(metrics_svc *s, tr_err *err)
{
    sqlite3_stmt *q = NULL;
    int rv = TROUPE_OK;

    if (sqlite3_prepare_v2(s->store.db,
                           "SELECT job, worker, attempt, last_seq, stored, dropped, reported, worker_dropped "
                           "FROM metric_streams",
                           -1, &q, NULL) != SQLITE_OK) {
        return metrics_err(s, "load", err);
    }
    while (rv == TROUPE_OK && sqlite3_step(q) == SQLITE_ROW) {
        stream *st = stream_find(s, (uint64_t)sqlite3_column_int64(q, 0), (const char *)sqlite3_column_text(q, 1),
                                 (uint32_t)sqlite3_column_int64(q, 2), 1);
        if (st == NULL) {
            rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
            break;
        }
        st->seq.last_seq = (uint64_t)sqlite3_column_int64(q, 3);
        st->seq.stored = (uint64_t)sqlite3_column_int64(q, 4);
        st->seq.dropped = (uint64_t)sqlite3_column_int64(q, 5);
        st->reported = (uint64_t)sqlite3_column_int64(q, 6);
        st->worker_dropped = (uint64_t)sqlite3_column_int64(q, 7);
    }
    sqlite3_finalize(q);
    if (rv != TROUPE_OK ||
        sqlite3_prepare_v2(s->store.db, "SELECT job, count(*) FROM metric_points GROUP BY job", -1, &q, NULL) != SQLITE_OK) {
        return rv != TROUPE_OK ? rv : metrics_err(s, "load", err);
    }
    while (rv == TROUPE_OK && sqlite3_step(q) == SQLITE_ROW) {
        job_count *c = count_of(s, (uint64_t)sqlite3_column_int64(q, 0), 1);
        if (c == NULL) {
            rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
            break;
        }
        c->kept = (uint64_t)sqlite3_column_int64(q, 1);
    }
    sqlite3_finalize(q);
    return rv;
}

static const char *const job_tables[] = {"metric_points", "metric_streams", NULL};

/* NOMUTEX: every use of this connection is under s->dbmu (or at start,
 * before the writer runs), so SQLite's own per-call connection mutex only
 * cost time: with 8 binds, a step and a reset per point it was ~10
 * lock/unlock pairs per point, ~10 % of the head's samples under
 * bench/metrics (perf). */
static const tr_series_def metrics_db = {
    .name = "metrics",
    .rows = "metrics",
    .file = "metrics.db",
    .bound = "metrics_max_bytes",
    .schema = schema,
    .job_tables = job_tables,
    .open_flags = SQLITE_OPEN_NOMUTEX,
};

static int db_open(metrics_svc *s, tr_err *err)
{
    int rv = tr_series_open(&s->store, &metrics_db, s->h->cfg.metrics_dir ? s->h->cfg.metrics_dir : s->h->cfg.state_dir,
                            s->h->cfg.sync_full, s->h->cfg.metrics_max_bytes, err);
    return rv != TROUPE_OK ? rv : load(s, err);
}

/* ---- the writer ---------------------------------------------------------------- */

/* row: a point to insert and its stream. */
typedef struct row {
    const stream *st;
    const Troupe__V1__MetricPoint *p;
} row;

/* insert_rows inserts n (1..ROWS_PER_INSERT) points with one statement,
 * rows in order, so their ids grow in that order. One statement for many
 * rows: under bench/metrics a step per point spent a good part of SQLite's
 * time opening and closing the table's and the index's cursors and
 * starting the statement, once per point. */
static int insert_rows(metrics_svc *s, const row *rows, size_t n, tr_err *err)
{
    sqlite3_stmt *q = s->ins[n];

    if (q == NULL) {
        char sql[96 + ROWS_PER_INSERT * 20];
        size_t off = (size_t)snprintf(sql, sizeof(sql),
                                      "INSERT INTO metric_points(job, worker, attempt, seq, step, name, value, ts_ms) "
                                      "VALUES");
        for (size_t i = 0; i < n; i++) {
            off += (size_t)snprintf(sql + off, sizeof(sql) - off, "%s(?,?,?,?,?,?,?,?)", i ? "," : "");
        }
        if (sqlite3_prepare_v3(s->store.db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->ins[n], NULL) != SQLITE_OK) {
            return metrics_err(s, "insert", err);
        }
        q = s->ins[n];
    }
    sqlite3_reset(q);
    for (size_t i = 0; i < n; i++) {
        const stream *st = rows[i].st;
        const Troupe__V1__MetricPoint *p = rows[i].p;
        int k = (int)i * 8;
        sqlite3_bind_int64(q, k + 1, (sqlite3_int64)st->job);
        sqlite3_bind_text(q, k + 2, st->worker, -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, k + 3, st->attempt);
        sqlite3_bind_int64(q, k + 4, (sqlite3_int64)p->seq);
        sqlite3_bind_int64(q, k + 5, (sqlite3_int64)p->step);
        sqlite3_bind_text(q, k + 6, p->name, -1, SQLITE_STATIC);
        if (isnan(p->value)) {
            sqlite3_bind_null(q, k + 7); /* SQLite has no NaN: NULL is NaN here */
        } else {
            sqlite3_bind_double(q, k + 7, p->value);
        }
        sqlite3_bind_int64(q, k + 8, p->ts_ms);
    }
    if (sqlite3_step(q) != SQLITE_DONE) {
        int rv = metrics_err(s, "insert", err);
        sqlite3_reset(q);
        return rv;
    }
    sqlite3_reset(q); /* done with the bound strings, which the round frees later */
    return TROUPE_OK;
}

/* insert_points adds b's new points (a resend's seq <= last_seq is skipped)
 * to rows, inserting whenever ROWS_PER_INSERT are there (the caller inserts
 * the rest at the end of the round), and counts them in b's stream. */
static int insert_points(metrics_svc *s, batch *b, row *rows, size_t *n, tr_err *err)
{
    const Troupe__V1__ReportMetricsRequest *req = req_of(b);
    stream *st = b->st;

    for (size_t i = 0; i < req->n_points; i++) {
        const Troupe__V1__MetricPoint *p = req->points[i];
        if (!tr_mseq_take(&st->seq, p->seq)) {
            continue; /* a resend of what is already on disk */
        }
        rows[*n].st = st;
        rows[*n].p = p;
        if (++*n == ROWS_PER_INSERT) {
            int rv = insert_rows(s, rows, *n, err);
            *n = 0;
            if (rv != TROUPE_OK) {
                return rv;
            }
        }
    }
    tr_mseq_settle(&st->seq, req->reported); /* dropped after the last point */
    if (req->reported > st->reported) {
        st->reported = req->reported;
    }
    if (req->dropped > st->worker_dropped) {
        st->worker_dropped = req->dropped;
    }
    return TROUPE_OK;
}

/* save_stream writes st's row: an UPDATE in place (one seek; the INSERT OR
 * REPLACE it replaces deleted and re-inserted the row and its key, four
 * b-tree changes per report), and an INSERT only for a stream without one
 * (up and ins bind the same eight values). */
static int save_stream(metrics_svc *s, sqlite3_stmt *up, sqlite3_stmt *add, const stream *st, tr_err *err)
{
    sqlite3_stmt *q = up;

    for (int pass = 0; pass < 2; pass++, q = add) {
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, (sqlite3_int64)st->job);
        sqlite3_bind_text(q, 2, st->worker, -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, 3, st->attempt);
        sqlite3_bind_int64(q, 4, (sqlite3_int64)st->seq.last_seq);
        sqlite3_bind_int64(q, 5, (sqlite3_int64)st->seq.stored);
        sqlite3_bind_int64(q, 6, (sqlite3_int64)st->seq.dropped);
        sqlite3_bind_int64(q, 7, (sqlite3_int64)st->reported);
        sqlite3_bind_int64(q, 8, (sqlite3_int64)st->worker_dropped);
        if (sqlite3_step(q) != SQLITE_DONE) {
            return metrics_err(s, "streams", err);
        }
        if (pass == 0 && sqlite3_changes(s->store.db) > 0) {
            break; /* updated */
        }
    }
    return TROUPE_OK;
}

/* write_round writes every batch of the round in one transaction: the
 * points of each, then the row of each stream the round touched, once (a
 * stream has one row; with rounds of several reports per worker, as when the
 * writer is behind, one per report was work thrown away). On error the
 * streams are as they were and nothing was written. */
/* stored_between counts the stream's points on disk with seq in [a, b];
 * -1 when the store cannot say. Only for a report older than the stream
 * (rare: a scan of the job's points). */
static int64_t stored_between(metrics_svc *s, const stream *st, uint64_t a, uint64_t b)
{
    sqlite3_stmt *q = NULL;
    int64_t n = -1;

    if (sqlite3_prepare_v2(s->store.db,
                           "SELECT COUNT(*) FROM metric_points WHERE job = ?1 AND worker = ?2 AND attempt = ?3 "
                           "AND seq BETWEEN ?4 AND ?5",
                           -1, &q, NULL) != SQLITE_OK) {
        return -1;
    }
    sqlite3_bind_int64(q, 1, (sqlite3_int64)st->job);
    sqlite3_bind_text(q, 2, st->worker, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 3, (sqlite3_int64)st->attempt);
    sqlite3_bind_int64(q, 4, (sqlite3_int64)a);
    sqlite3_bind_int64(q, 5, (sqlite3_int64)b);
    if (sqlite3_step(q) == SQLITE_ROW) {
        n = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    return n;
}

/* report_fits checks a report against what the head has seen of its
 * stream; TROUPE_OK, or a status with the reason in why. Two reports do not:
 *  - one older than a report already settled (its `reported` below the
 *    stream's) whose points are not all on disk: they were counted as
 *    dropped when the later report settled their seqs, and answering OK
 *    would tell the worker they are stored. (A resend of points that are
 *    stored is answered OK, as any resend.)
 *  - one that would count more points as dropped (seq gaps, and seqs up to
 *    `reported` never sent) than the worker says it dropped in all: a worker
 *    numbers every point, kept or dropped, and counts each one it drops
 *    before it reports past it (common/metric_buf.h), so more gaps than drops
 *    is a forged count, which would stay in the head-wide
 *    troupe_metric_points_dropped_total for good. */
static int report_fits(metrics_svc *s, const stream *st, const Troupe__V1__ReportMetricsRequest *req, char *why,
                       size_t size)
{
    uint64_t last = st->seq.last_seq, gaps = 0;

    if (req->reported < st->reported && req->n_points > 0) {
        uint64_t a = req->points[0]->seq, b = req->points[req->n_points - 1]->seq;
        int64_t on_disk = b <= st->seq.last_seq ? stored_between(s, st, a, b) : -1;
        if (on_disk != (int64_t)req->n_points) {
            snprintf(why, size,
                     "this report settles seqs up to %llu, but a later one already settled up to %llu: of its "
                     "%zu points %lld are stored and the rest were counted dropped then; nothing stored now",
                     (unsigned long long)req->reported, (unsigned long long)st->reported, req->n_points,
                     (long long)(on_disk < 0 ? 0 : on_disk));
            return TROUPE_FAILED_PRECONDITION;
        }
    }
    for (size_t i = 0; i < req->n_points; i++) {
        uint64_t seq = req->points[i]->seq;
        if (seq > last) {
            gaps += seq - last - 1;
            last = seq;
        }
    }
    gaps += req->reported > last ? req->reported - last : 0;
    if (gaps > 0 && st->seq.dropped + gaps > req->dropped) {
        snprintf(why, size,
                 "this report would count %llu more points as dropped (%llu in all) but the worker says it dropped "
                 "%llu: nothing stored (seqs up to `reported` must be sent, or counted in `dropped`)",
                 (unsigned long long)gaps, (unsigned long long)(st->seq.dropped + gaps),
                 (unsigned long long)req->dropped);
        return TROUPE_INVALID_ARGUMENT;
    }
    return TROUPE_OK;
}

static int write_round(metrics_svc *s, tr_rq_item *round, tr_err *err)
{
    sqlite3_stmt *up = NULL, *add = NULL;
    row rows[ROWS_PER_INSERT];
    size_t n_rows = 0;
    int rv = tr_series_begin(&s->store, err);

    if (rv == TROUPE_OK &&
        (sqlite3_prepare_v2(s->store.db,
                            "UPDATE metric_streams SET last_seq = ?4, stored = ?5, dropped = ?6, reported = ?7, "
                            "worker_dropped = ?8 WHERE job = ?1 AND worker = ?2 AND attempt = ?3",
                            -1, &up, NULL) != SQLITE_OK ||
         sqlite3_prepare_v2(s->store.db, "INSERT INTO metric_streams VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)", -1, &add,
                            NULL) != SQLITE_OK)) {
        rv = metrics_err(s, "prepare", err);
    }
    for (tr_rq_item *it = round; rv == TROUPE_OK && it != NULL; it = it->next) {
        batch *b = batch_of(it);
        const Troupe__V1__WorkerRef *from = req_of(b)->from;
        if (tr_ids_has(&s->gone, from->job_id)) {
            b->gone = 1; /* deleted meanwhile: answered NOT_FOUND */
            continue;
        }
        if ((b->st = stream_find(s, from->job_id, from->worker, from->attempt, 1)) == NULL) {
            rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
            break;
        }
        if ((b->refused = report_fits(s, b->st, req_of(b), b->why, sizeof(b->why))) != TROUPE_OK) {
            b->st = NULL; /* nothing of it is applied */
            continue;
        }
        b->before = *b->st;
        rv = insert_points(s, b, rows, &n_rows, err);
    }
    if (rv == TROUPE_OK && n_rows > 0) {
        rv = insert_rows(s, rows, n_rows, err);
    }
    s->round++;
    for (tr_rq_item *it = round; rv == TROUPE_OK && it != NULL; it = it->next) {
        stream *st = batch_of(it)->st;
        if (st != NULL && st->round != s->round) { /* undone with the rest when the round fails */
            st->round = s->round;
            rv = save_stream(s, up, add, st, err);
        }
    }
    sqlite3_finalize(up);
    sqlite3_finalize(add);
    if (rv == TROUPE_OK) {
        rv = tr_series_failpoint(&s->store, err);
    }
    rv = tr_series_commit(&s->store, rv, err);
    if (rv != TROUPE_OK) {
        /* undo newest first: a stream may appear in several batches */
        tr_rq_item *rev = NULL;
        while (round != NULL) { /* reverse the round, undo, reverse back (the queue's order again) */
            tr_rq_item *it = round;
            round = it->next;
            it->next = rev;
            rev = it;
        }
        while (rev != NULL) {
            tr_rq_item *it = rev;
            batch *b = batch_of(it);
            rev = it->next;
            if (b->st != NULL) {
                stream *next = b->st->next, *hnext = b->st->hnext;
                *b->st = b->before;
                b->st->next = next;
                b->st->hnext = hnext;
            }
            it->next = round;
            round = it;
        }
    }
    return rv;
}

/* retain deletes the oldest points of jobs past metrics_keep. */
static void retain(metrics_svc *s, tr_rq_item *round)
{
    uint64_t keep = (uint64_t)s->h->cfg.metrics_keep;

    for (tr_rq_item *it = round; it != NULL; it = it->next) {
        const batch *b = batch_of(it);
        job_count *c = b->st != NULL ? count_of(s, b->st->job, 1) : NULL;
        if (c != NULL) {
            c->kept += b->st->seq.stored - b->before.seq.stored;
        }
    }
    for (job_count *c = s->counts; c != NULL; c = c->next) {
        sqlite3_stmt *q = NULL;
        if (c->kept <= keep) {
            continue;
        }
        if (sqlite3_prepare_v2(s->store.db,
                               "DELETE FROM metric_points WHERE job = ?1 AND id <= (SELECT id FROM metric_points "
                               "WHERE job = ?1 ORDER BY id LIMIT 1 OFFSET ?2)",
                               -1, &q, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(q, 1, (sqlite3_int64)c->job);
            sqlite3_bind_int64(q, 2, (sqlite3_int64)(c->kept - keep - 1));
            if (sqlite3_step(q) == SQLITE_DONE) {
                c->kept -= (uint64_t)sqlite3_changes(s->store.db);
            }
        }
        sqlite3_finalize(q); /* a failed trim is retried after the next round */
    }
}

/* answer_batch (the queue's answer, on its answerer thread): acked_seq is
 * the stream's last seq, committed (b->acked). A failed round is answered with its status
 * (RESOURCE_EXHAUSTED for a full disk or metrics_max_bytes, dberr.h): the
 * worker keeps the points and sends them again. */
static void answer_batch(void *arg, tr_rq_item *it, int rv, const tr_err *err)
{
    const batch *b = batch_of(it);

    (void)arg;
    if (rv == TROUPE_OK && b->gone) {
        tr_rpc_reply_error(it->call, TROUPE_NOT_FOUND, "job %llu was deleted, and its metrics with it",
                           (unsigned long long)req_of(b)->from->job_id);
    } else if (rv == TROUPE_OK && b->refused != TROUPE_OK) {
        TR_LOG(TR_LOG_INFO, "refused ReportMetrics job=%llu worker=%s attempt=%u: %s",
               (unsigned long long)req_of(b)->from->job_id, req_of(b)->from->worker, req_of(b)->from->attempt,
               b->why);
        tr_rpc_reply_error(it->call, b->refused, "%s", b->why);
    } else if (rv == TROUPE_OK) {
        Troupe__V1__ReportMetricsReply rep = TROUPE__V1__REPORT_METRICS_REPLY__INIT;
        rep.acked_seq = b->acked;
        tr_rpc_reply(it->call, &rep.base);
    } else {
        tr_rpc_reply_error(it->call, rv,
                           "the head could not save these metrics (kept by the worker, sent again): %s",
                           err->msg);
    }
}

/* snap_round copies what a committed round changed into the streams'
 * snapshots (s->lmu): counts, and the newest value per name. */
/* snap_reap frees the snapshots of ended jobs (under dbmu and lmu: the
 * streams point at them). */
static void snap_reap(metrics_svc *s)
{
    if (s->n_dead == 0) {
        return;
    }
    for (stream *st = s->streams; st != NULL; st = st->next) {
        if (st->snap != NULL && st->snap->dead) {
            st->snap = NULL;
        }
    }
    for (snap **pp = &s->snaps; *pp != NULL;) {
        snap *sn = *pp;
        if (sn->dead) {
            *pp = sn->next;
            free(sn);
        } else {
            pp = &sn->next;
        }
    }
    s->n_dead = 0;
}

static void snap_round(metrics_svc *s, tr_rq_item *round)
{
    uint64_t stored = 0, dropped = 0;

    pthread_mutex_lock(&s->lmu);
    snap_reap(s);
    for (tr_rq_item *it = round; it != NULL; it = it->next) {
        const batch *b = batch_of(it);
        const Troupe__V1__ReportMetricsRequest *req = req_of(b);
        stream *st = b->st;
        snap *sn;
        if (st == NULL) {
            continue; /* its job was deleted */
        }
        sn = st->snap;
        if (sn == NULL && (sn = calloc(1, sizeof(*sn))) != NULL) {
            sn->job = st->job;
            sn->attempt = st->attempt;
            tr_strlcpy(sn->worker, st->worker, sizeof(sn->worker));
            sn->next = s->snaps;
            s->snaps = sn;
            st->snap = sn;
        }
        stored += st->seq.stored - b->before.seq.stored;
        dropped += st->seq.dropped - b->before.seq.dropped;
        if (sn == NULL) {
            continue; /* out of memory: the gauges miss this worker, the store has it */
        }
        sn->stored = st->seq.stored;
        sn->dropped = st->seq.dropped;
        for (size_t i = 0; i < req->n_points; i++) {
            const Troupe__V1__MetricPoint *p = req->points[i];
            size_t k = 0;
            if (tr_mseq_resend(p->seq, b->before.seq.last_seq)) {
                continue; /* a resend, not stored this round */
            }
            while (k < sn->n_last && strcmp(sn->names[k], p->name) != 0) {
                k++;
            }
            if (k == sn->n_last) {
                if (k == SNAP_NAMES) {
                    continue;
                }
                tr_strlcpy(sn->names[k], p->name, sizeof(sn->names[k]));
                sn->last[k].name = sn->names[k];
                sn->n_last++;
            }
            sn->last[k].step = p->step;
            sn->last[k].value = p->value;
            sn->last[k].ts_ms = p->ts_ms;
        }
    }
    pthread_mutex_unlock(&s->lmu);
    atomic_fetch_add(&s->stored, stored);
    atomic_fetch_add(&s->dropped, dropped);
}

/* delete_rows deletes the points and streams of jobs in one transaction. */
/* forget_memory drops the streams, counts and /metrics snapshots of jobs. */
static void forget_memory(metrics_svc *s, const tr_ids *ids)
{
    for (stream **pp = &s->streams; *pp != NULL;) {
        stream *st = *pp;
        if (tr_ids_has(ids, st->job)) {
            *pp = st->next;
            stream_unfile(s, st);
            free(st);
        } else {
            pp = &st->next;
        }
    }
    for (job_count **pp = &s->counts; *pp != NULL;) {
        job_count *c = *pp;
        if (tr_ids_has(ids, c->job)) {
            *pp = c->next;
            free(c);
        } else {
            pp = &c->next;
        }
    }
    pthread_mutex_lock(&s->lmu);
    for (snap **pp = &s->snaps; *pp != NULL;) {
        snap *sn = *pp;
        if (tr_ids_has(ids, sn->job)) {
            *pp = sn->next;
            s->n_dead -= sn->dead != 0; /* its streams are gone: nothing points at it */
            free(sn);
        } else {
            pp = &sn->next;
        }
    }
    pthread_mutex_unlock(&s->lmu);
}

/* forget_jobs (s->dbmu held) deletes the metrics of deleted jobs, on disk
 * and in memory. When the disk delete fails the rows stay until the next
 * start removes them (forget_orphans); nobody can read them meanwhile (the
 * job is gone, so GetMetrics is NOT_FOUND). */
static void forget_jobs(metrics_svc *s, const tr_ids *ids)
{
    tr_err err;

    for (size_t i = 0; i < ids->n; i++) {
        tr_ids_add(&s->gone, ids->v[i]); /* out of memory: not remembered */
    }
    if (tr_series_delete_jobs(&s->store, ids, &err) != TROUPE_OK) {
        TR_LOG(TR_LOG_WARNING, "metrics of %zu deleted job%s stay in the store until the next start: %s",
               ids->n, ids->n == 1 ? "" : "s", err.msg);
    } else {
        TR_LOG(TR_LOG_INFO, "metrics deleted jobs=%zu first=%llu", ids->n, (unsigned long long)ids->v[0]);
    }
    forget_memory(s, ids);
}

/* commit_round (the queue's write, on its writer thread): the round in one
 * transaction under dbmu, then what readers see of it (snapshots, retention,
 * the followers) before the queue answers the batches. The failing state is
 * logged once on entering and once on leaving, not per round. */
static int commit_round(void *arg, tr_rq_item *round, tr_err *err)
{
    metrics_svc *s = arg;
    int rv;

    pthread_mutex_lock(&s->dbmu);
    rv = write_round(s, round, err);
    atomic_fetch_add(&s->rounds, 1);
    if (rv == TROUPE_OK) {
        for (tr_rq_item *it = round; it != NULL; it = it->next) {
            batch *b = batch_of(it);
            b->acked = b->st != NULL ? b->st->seq.last_seq : 0;
        }
        snap_round(s, round);
        retain(s, round);
        if (s->failing) {
            TR_LOG(TR_LOG_NOTICE, "metrics store writes again: %s", s->store.path);
        }
    } else {
        atomic_fetch_add(&s->rounds_failed, 1);
    }
    if (rv != TROUPE_OK && !s->failing) {
        TR_LOG(TR_LOG_WARNING, "metrics store cannot write, workers keep their points: %s", err->msg);
    }
    s->failing = rv != TROUPE_OK;
    pthread_mutex_unlock(&s->dbmu);
    if (rv == TROUPE_OK) {
        tr_mfollow_committed(s->follow); /* before the acks: a follower sees the points sooner */
    }
    return rv;
}

/* forget_deleted (the queue's deleted): after the round, so a report queued
 * before the deletion goes too. */
static void forget_deleted(void *arg, const tr_ids *ids)
{
    metrics_svc *s = arg;

    pthread_mutex_lock(&s->dbmu);
    forget_jobs(s, ids);
    pthread_mutex_unlock(&s->dbmu);
}

/* The durable writer (report_queue.h). A worker keeps what is refused or not
 * answered and sends it again, so a full queue is RESOURCE_EXHAUSTED. */
static const tr_rq_ops metrics_queue = {
    .name = "metrics",
    .item_size = sizeof(batch),
    .max_weight = MAX_QUEUED_POINTS,
    .unit = "points",
    .full_code = TROUPE_RESOURCE_EXHAUSTED,
    .full_hint = ": the worker keeps its points and sends them again",
    .write = commit_round,
    .answer = answer_batch,
    .deleted = forget_deleted,
};

/* ---- ReportMetrics ------------------------------------------------------------- */

int tr_metrics_check_report(const Troupe__V1__ReportMetricsRequest *req, tr_err *err)
{
    uint64_t prev = 0;

    if (req->from == NULL || req->from->worker == NULL || req->from->worker[0] == '\0') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "the call does not say which worker it comes from");
    }
    if (req->n_points > MAX_POINTS_PER_REPORT) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%zu points in one report: at most %d", req->n_points,
                          MAX_POINTS_PER_REPORT);
    }
    for (size_t i = 0; i < req->n_points; i++) {
        const Troupe__V1__MetricPoint *p = req->points[i];
        if (!tr_mbuf_name_ok(p->name)) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                              "point %zu: metric name '%.64s' must be 1-127 printable characters, no spaces or commas",
                              i, p->name ? p->name : "");
        }
        if (p->seq <= prev) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "point %zu: seq %llu does not follow %llu", i,
                              (unsigned long long)p->seq, (unsigned long long)prev);
        }
        prev = p->seq;
    }
    if (req->reported < prev) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "reported %llu is below the last point's seq %llu",
                          (unsigned long long)req->reported, (unsigned long long)prev);
    }
    if (req->reported > MAX_SEQ || req->dropped > MAX_SEQ) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "reported %llu, dropped %llu: no worker numbers more than %llu points (a forged report?)",
                          (unsigned long long)req->reported, (unsigned long long)req->dropped,
                          (unsigned long long)MAX_SEQ);
    }
    return TROUPE_OK;
}

/* check_worker: the worker exists in the job at this attempt or an earlier
 * one (a superseded attempt may still flush what it measured). A worker
 * credential is held to its own worker by tr_rpc_require_worker; the name check
 * also holds a shared-token caller to a worker the job has. */
/* worker_guess: where the worker named "jobID-GROUP-RANK" usually sits in
 * the job's records (groups in spec order, ranks in order), so that a report
 * costs one strcmp instead of a walk over the job's workers under h->mu (1,000
 * of them per report in bench/metrics). The caller checks the name there and
 * walks when the guess is wrong; SIZE_MAX when the name does not parse. */
static size_t worker_guess(const Troupe__V1__Job *j, const char *name)
{
    const char *dash = strrchr(name, '-'), *g;
    char *end = NULL;
    unsigned long rank;
    size_t off = 0, glen;
    char prefix[32];
    int plen = snprintf(prefix, sizeof(prefix), "job%llu-", (unsigned long long)j->id);

    if (dash == NULL || strncmp(name, prefix, (size_t)plen) != 0 || dash < name + plen) {
        return SIZE_MAX;
    }
    rank = strtoul(dash + 1, &end, 10);
    g = name + plen;
    glen = (size_t)(dash - g);
    for (size_t k = 0; end != NULL && *end == '\0' && k < j->spec->n_groups; k++) {
        if (strlen(j->spec->groups[k]->name) == glen && strncmp(j->spec->groups[k]->name, g, glen) == 0) {
            return off + rank;
        }
        off += j->spec->groups[k]->workers;
    }
    return SIZE_MAX;
}

static int check_worker(tr_head *h, const Troupe__V1__WorkerRef *from, tr_err *err)
{
    tr_head_job *hj = tr_jobs_find(h, from->job_id);
    size_t guess;
    if (hj == NULL) {
        return tr_err_set(err, TROUPE_NOT_FOUND, "no job %llu", (unsigned long long)from->job_id);
    }
    guess = worker_guess(hj->j, from->worker);
    for (size_t k = 0; k <= hj->j->n_workers; k++) {
        /* k = 0 tries the guess, then every record in turn */
        size_t i = k == 0 ? guess : k - 1;
        const Troupe__V1__WorkerInfo *w = i < hj->j->n_workers ? hj->j->workers[i] : NULL;
        if (w != NULL && strcmp(w->name, from->worker) == 0) {
            return from->attempt <= w->attempt
                       ? TROUPE_OK
                       : tr_err_set(err, TROUPE_FAILED_PRECONDITION, "worker %s has no attempt %u (the head has %u)",
                                    w->name, from->attempt, w->attempt);
        }
    }
    return tr_err_set(err, TROUPE_PERMISSION_DENIED,
                      "worker %s is not part of job %llu: a worker's calls are scoped to its own job", from->worker,
                      (unsigned long long)from->job_id);
}

static void report_metrics(tr_rpc_call *call, void *user)
{
    metrics_svc *s = svc_of(user);
    Troupe__V1__ReportMetricsRequest *req = (Troupe__V1__ReportMetricsRequest *)tr_rpc_unpack(
        call, &troupe__v1__report_metrics_request__descriptor);
    tr_err err;
    int rv;

    if (req == NULL) {
        return;
    }
    if (!tr_rpc_require_worker(call, req->from != NULL ? req->from->job_id : 0,
                               req->from != NULL ? req->from->worker : NULL)) {
        protobuf_c_message_free_unpacked(&req->base, NULL); /* answered: a worker of another job */
        return;
    }
    if ((rv = tr_metrics_check_report(req, &err)) == TROUPE_OK) {
        pthread_mutex_lock(&s->h->mu);
        rv = check_worker(s->h, req->from, &err);
        pthread_mutex_unlock(&s->h->mu);
    }
    if (rv == TROUPE_OK) {
        /* Health hears of steps as they arrive, not once stored: a report the
         * writer cannot take yet is still progress (resends are ignored by
         * step number). */
        if (s->on_report != NULL) {
            s->on_report(s->on_report_arg, req);
        }
    }
    if (rv == TROUPE_OK) {
        rv = tr_rq_submit(s->store.q, call, &req->base, req->n_points, &err); /* OK: req is the queue's */
    }
    if (rv != TROUPE_OK) {
        atomic_fetch_add(&s->refused, 1);
        TR_LOG(TR_LOG_DEBUG, "refused ReportMetrics job=%llu: %s",
               (unsigned long long)(req->from ? req->from->job_id : 0), err.msg);
        tr_rpc_reply_error(call, rv, "%s", err.msg);
        protobuf_c_message_free_unpacked(&req->base, NULL);
    }
}

/* ---- GetMetrics ---------------------------------------------------------------- */

static int in_list(char *const *list, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(list[i], s) == 0) {
            return 1;
        }
    }
    return n == 0;
}

/* check_job (under h->mu): the job exists; in_job[k] says whether the k-th
 * worker asked for is one of its workers. */
static int check_job(tr_head *h, const Troupe__V1__GetMetricsRequest *req, int *in_job, tr_err *err)
{
    tr_head_job *hj = tr_jobs_find(h, req->job_id);

    if (hj == NULL) {
        return tr_err_set(err, TROUPE_NOT_FOUND, "no job %llu (see troupe jobs)", (unsigned long long)req->job_id);
    }
    if (req->n_workers > MAX_FILTER || req->n_names > MAX_FILTER) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "at most %d workers and %d names in one query", MAX_FILTER,
                          MAX_FILTER);
    }
    for (size_t k = 0; k < req->n_workers; k++) {
        in_job[k] = 0;
        for (size_t i = 0; i < hj->j->n_workers && !in_job[k]; i++) {
            in_job[k] = strcmp(hj->j->workers[i]->name, req->workers[k]) == 0;
        }
    }
    return TROUPE_OK;
}

/* check_workers (under s->dbmu): a worker asked for is the job's, or has
 * metrics of it (a worker the job no longer lists). */
static int check_workers(metrics_svc *s, const Troupe__V1__GetMetricsRequest *req, const int *in_job, tr_err *err)
{
    for (size_t k = 0; k < req->n_workers; k++) {
        int found = in_job[k];
        for (stream *st = s->streams; st != NULL && !found; st = st->next) {
            found = st->job == req->job_id && strcmp(st->worker, req->workers[k]) == 0;
        }
        if (!found) {
            return tr_err_set(err, TROUPE_NOT_FOUND, "job %llu has no worker %s (see troupe job %llu)",
                              (unsigned long long)req->job_id, req->workers[k], (unsigned long long)req->job_id);
        }
    }
    return TROUPE_OK;
}

/* build_sql: the page query; workers and names bound from ?4 on. */
static void build_sql(char *sql, size_t size, const Troupe__V1__GetMetricsRequest *req, int tail)
{
    size_t off = (size_t)snprintf(sql, size,
                                  "SELECT id, worker, attempt, seq, step, name, value, ts_ms FROM metric_points "
                                  "WHERE job = ?1 AND id > ?2");
    int arg = 4;
    for (int f = 0; f < 2; f++) {
        size_t n = f == 0 ? req->n_workers : req->n_names;
        if (n == 0) {
            continue;
        }
        off += (size_t)snprintf(sql + off, size - off, " AND %s IN (", f == 0 ? "worker" : "name");
        for (size_t i = 0; i < n; i++) {
            off += (size_t)snprintf(sql + off, size - off, "%s?%d", i ? "," : "", arg++);
        }
        off += (size_t)snprintf(sql + off, size - off, ")");
    }
    snprintf(sql + off, size - off, " ORDER BY id %s LIMIT ?3", tail ? "DESC" : "ASC");
}

static Troupe__V1__MetricPoint *point_of(sqlite3_stmt *q)
{
    Troupe__V1__MetricPoint *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return NULL;
    }
    troupe__v1__metric_point__init(p);
    p->id = (uint64_t)sqlite3_column_int64(q, 0);
    p->worker = strdup((const char *)sqlite3_column_text(q, 1));
    p->attempt = (uint32_t)sqlite3_column_int64(q, 2);
    p->seq = (uint64_t)sqlite3_column_int64(q, 3);
    p->step = (uint64_t)sqlite3_column_int64(q, 4);
    p->name = strdup((const char *)sqlite3_column_text(q, 5));
    p->value = sqlite3_column_type(q, 6) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 6);
    p->ts_ms = sqlite3_column_int64(q, 7);
    if (p->worker == NULL || p->name == NULL) {
        troupe__v1__metric_point__free_unpacked(p, NULL);
        return NULL;
    }
    return p;
}

/* query_points fills rep->points (in id order) and next_id/more. */
static int query_points(metrics_svc *s, const Troupe__V1__GetMetricsRequest *req, Troupe__V1__GetMetricsReply *rep,
                        tr_err *err)
{
    uint32_t limit = req->limit == 0 ? DEFAULT_PAGE : req->limit > MAX_PAGE ? MAX_PAGE : req->limit;
    int tail = req->after_id == 0 && req->last > 0;
    char sql[4096];
    sqlite3_stmt *q = NULL;
    int rv = TROUPE_OK, arg = 4, step;

    if (tail && req->last < limit) {
        limit = req->last;
    }
    build_sql(sql, sizeof(sql), req, tail);
    if ((rep->points = calloc(limit + 1, sizeof(*rep->points))) == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
    }
    if (sqlite3_prepare_v2(s->store.db, sql, -1, &q, NULL) != SQLITE_OK) {
        return tr_err_set(err, TROUPE_INTERNAL, "metrics query: %s", sqlite3_errmsg(s->store.db));
    }
    sqlite3_bind_int64(q, 1, (sqlite3_int64)req->job_id);
    sqlite3_bind_int64(q, 2, (sqlite3_int64)req->after_id);
    sqlite3_bind_int64(q, 3, (sqlite3_int64)limit + 1); /* one more says whether there is more */
    for (size_t i = 0; i < req->n_workers; i++) {
        sqlite3_bind_text(q, arg++, req->workers[i], -1, SQLITE_STATIC);
    }
    for (size_t i = 0; i < req->n_names; i++) {
        sqlite3_bind_text(q, arg++, req->names[i], -1, SQLITE_STATIC);
    }
    rep->next_id = req->after_id;
    while ((step = sqlite3_step(q)) == SQLITE_ROW) {
        if (rep->n_points == limit) {
            rep->more = !tail;
            break;
        }
        if ((rep->points[rep->n_points] = point_of(q)) == NULL) {
            rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
            break;
        }
        rep->n_points++;
    }
    if (rv == TROUPE_OK && step != SQLITE_ROW && step != SQLITE_DONE) {
        rv = tr_err_set(err, TROUPE_INTERNAL, "metrics query: %s", sqlite3_errmsg(s->store.db));
    }
    sqlite3_finalize(q);
    for (size_t i = 0; tail && i < rep->n_points / 2; i++) { /* newest first -> in order */
        Troupe__V1__MetricPoint *t = rep->points[i];
        rep->points[i] = rep->points[rep->n_points - 1 - i];
        rep->points[rep->n_points - 1 - i] = t;
    }
    if (tail) {
        /* following on from a tail starts after the newest point of the job */
        sqlite3_stmt *mx = NULL;
        if (sqlite3_prepare_v2(s->store.db, "SELECT coalesce(max(id), 0) FROM metric_points WHERE job = ?1", -1, &mx,
                               NULL) == SQLITE_OK) {
            sqlite3_bind_int64(mx, 1, (sqlite3_int64)req->job_id);
            if (sqlite3_step(mx) == SQLITE_ROW) {
                rep->next_id = (uint64_t)sqlite3_column_int64(mx, 0);
            }
        }
        sqlite3_finalize(mx);
    } else if (rep->n_points > 0) {
        rep->next_id = rep->points[rep->n_points - 1]->id;
    }
    return rv;
}

static int add_streams(metrics_svc *s, const Troupe__V1__GetMetricsRequest *req, Troupe__V1__GetMetricsReply *rep)
{
    size_t n = 0;
    uint64_t stored = 0;
    job_count *c = count_of(s, req->job_id, 0);

    for (stream *st = s->streams; st != NULL; st = st->next) {
        n += st->job == req->job_id;
    }
    if ((rep->streams = calloc(n + 1, sizeof(*rep->streams))) == NULL) {
        return -1;
    }
    for (stream *st = s->streams; st != NULL; st = st->next) {
        Troupe__V1__MetricStream *m;
        if (st->job != req->job_id) {
            continue;
        }
        stored += st->seq.stored;
        if (!in_list(req->workers, req->n_workers, st->worker)) {
            continue;
        }
        if ((m = calloc(1, sizeof(*m))) == NULL) {
            return -1;
        }
        troupe__v1__metric_stream__init(m);
        rep->streams[rep->n_streams++] = m;
        if ((m->worker = strdup(st->worker)) == NULL) {
            return -1;
        }
        m->attempt = st->attempt;
        m->stored = st->seq.stored;
        m->dropped = st->seq.dropped;
        m->last_seq = st->seq.last_seq;
        m->reported = st->reported;
        m->worker_dropped = st->worker_dropped;
    }
    rep->kept = c ? c->kept : 0;
    rep->trimmed = stored - rep->kept;
    return 0;
}

int tr_metrics_query(tr_head *h, const Troupe__V1__GetMetricsRequest *req, Troupe__V1__GetMetricsReply *rep,
                     tr_err *err)
{
    metrics_svc *s = svc_of(h);
    int in_job[MAX_FILTER];
    int rv;

    troupe__v1__get_metrics_reply__init(rep);
    if (s == NULL) {
        return tr_err_set(err, TROUPE_UNAVAILABLE, "the metrics service is not running");
    }
    /* h->mu and s->dbmu are never held together: the writer holds dbmu
     * across a commit, and the head must not wait for that. */
    pthread_mutex_lock(&h->mu);
    rv = check_job(h, req, in_job, err);
    pthread_mutex_unlock(&h->mu);
    pthread_mutex_lock(&s->dbmu);
    if (rv == TROUPE_OK) {
        rv = check_workers(s, req, in_job, err);
    }
    if (rv == TROUPE_OK) {
        rv = query_points(s, req, rep, err);
    }
    if (rv == TROUPE_OK && add_streams(s, req, rep) != 0) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
    }
    pthread_mutex_unlock(&s->dbmu);
    return rv;
}

void tr_metrics_reply_free(Troupe__V1__GetMetricsReply *rep)
{
    for (size_t i = 0; i < rep->n_points; i++) {
        troupe__v1__metric_point__free_unpacked(rep->points[i], NULL);
    }
    for (size_t i = 0; i < rep->n_streams; i++) {
        troupe__v1__metric_stream__free_unpacked(rep->streams[i], NULL);
    }
    free(rep->points);
    free(rep->streams);
    rep->points = NULL;
    rep->streams = NULL;
    rep->n_points = rep->n_streams = 0;
}

static void get_metrics(tr_rpc_call *call, void *user)
{
    Troupe__V1__GetMetricsRequest *req =
        (Troupe__V1__GetMetricsRequest *)tr_rpc_unpack(call, &troupe__v1__get_metrics_request__descriptor);
    Troupe__V1__GetMetricsReply rep;
    metrics_svc *s = svc_of(user);
    uint64_t gen;
    tr_err err;
    int rv;

    if (req == NULL) {
        return;
    }
    if (!tr_rpc_require_job(call, req->job_id)) {
        protobuf_c_message_free_unpacked(&req->base, NULL); /* answered */
        return;
    }
    gen = tr_mfollow_gen(s->follow);
    rv = tr_metrics_query(user, req, &rep, &err);
    /* Nothing new and the caller will wait (troupe metrics -f): parked until
     * a commit brings a point or the wait ends (metrics_follow.c). When the
     * follower is full the caller gets the empty page now and asks again. */
    if (rv == TROUPE_OK && rep.n_points == 0 && req->wait_ms > 0 && tr_mfollow_park(s->follow, call, req, gen) == 0) {
        tr_metrics_reply_free(&rep);
        return;
    }
    if (rv == TROUPE_OK) {
        tr_rpc_reply(call, &rep.base);
    } else {
        tr_rpc_reply_error(call, rv, "%s", err.msg);
    }
    tr_metrics_reply_free(&rep);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

int tr_metrics_ingest_get(tr_head *h, tr_metrics_ingest *out)
{
    metrics_svc *s = svc_of(h);

    memset(out, 0, sizeof(*out));
    if (s == NULL) {
        return TROUPE_UNAVAILABLE;
    }
    out->reports = tr_rq_submitted(s->store.q);
    out->refused = atomic_load(&s->refused);
    out->points_stored = atomic_load(&s->stored);
    out->points_dropped = atomic_load(&s->dropped);
    out->rounds = atomic_load(&s->rounds);
    out->rounds_failed = atomic_load(&s->rounds_failed);
    out->queued_points = tr_rq_weight(s->store.q);
    return TROUPE_OK;
}

void tr_metrics_each_stream(tr_head *h, void (*fn)(void *arg, const tr_metrics_stream_view *v), void *arg)
{
    metrics_svc *s = svc_of(h);

    if (s == NULL) {
        return;
    }
    pthread_mutex_lock(&s->lmu);
    for (const snap *sn = s->snaps; sn != NULL; sn = sn->next) {
        if (sn->dead) {
            continue;
        }
        tr_metrics_stream_view v = {sn->job, sn->attempt, sn->worker, sn->stored, sn->dropped, sn->n_last, sn->last};
        fn(arg, &v);
    }
    pthread_mutex_unlock(&s->lmu);
}

int tr_metrics_on_report(tr_head *h, tr_metrics_report_fn fn, void *arg)
{
    metrics_svc *s = svc_of(h);
    if (s == NULL) {
        return -1;
    }
    s->on_report = fn;
    s->on_report_arg = fn != NULL ? arg : NULL;
    return 0;
}

int tr_metrics_last_steps(tr_head *h, uint64_t job,
                          void (*fn)(void *arg, const char *worker, uint32_t attempt, uint64_t step), void *arg)
{
    metrics_svc *s = svc_of(h);
    sqlite3_stmt *q = NULL;

    if (s == NULL) {
        return -1;
    }
    pthread_mutex_lock(&s->dbmu);
    /* The job's index (job, id) read backwards: every step has a step_ms
     * point, so the newest is among the last few rows of the stream. */
    if (sqlite3_prepare_v2(s->store.db,
                           "SELECT step FROM metric_points WHERE job = ?1 AND worker = ?2 AND attempt = ?3 "
                           "AND name = 'step_ms' ORDER BY id DESC LIMIT 1",
                           -1, &q, NULL) == SQLITE_OK) {
        for (stream *st = s->streams; st != NULL; st = st->next) {
            if (st->job != job) {
                continue;
            }
            sqlite3_reset(q);
            sqlite3_bind_int64(q, 1, (sqlite3_int64)job);
            sqlite3_bind_text(q, 2, st->worker, -1, SQLITE_STATIC);
            sqlite3_bind_int64(q, 3, st->attempt);
            if (sqlite3_step(q) == SQLITE_ROW) {
                fn(arg, st->worker, st->attempt, (uint64_t)sqlite3_column_int64(q, 0));
            }
        }
    }
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->dbmu);
    return 0;
}

/* ---- the service ------------------------------------------------------------- */

static const tr_rpc_method metrics_methods[] = {
    {"troupe.v1.Head/ReportMetrics", report_metrics, TR_SCOPES_WORKER_JOB},
    {"troupe.v1.Head/GetMetrics", get_metrics, TR_SCOPES_WORKER_JOB},
    {NULL, NULL, 0},
};

/* job_deleted (under h->mu): the writer deletes the job's metrics. */
static void job_deleted(tr_head *h, uint64_t job_id, void *state)
{
    metrics_svc *s = state;

    (void)h;
    tr_series_job_deleted(&s->store, job_id);
}

/* forget_orphans, at start: metrics of jobs the head no longer has (deleted
 * just before a stop or crash, before the writer got to them) are deleted. */
static void forget_orphans(metrics_svc *s)
{
    tr_ids ids = {0};
    size_t keep = 0;

    for (stream *st = s->streams; st != NULL; st = st->next) {
        tr_ids_add(&ids, st->job); /* out of memory: left for a later start */
    }
    for (job_count *c = s->counts; c != NULL; c = c->next) {
        tr_ids_add(&ids, c->job);
    }
    pthread_mutex_lock(&s->h->mu);
    for (size_t i = 0; i < ids.n; i++) {
        if (tr_jobs_find(s->h, ids.v[i]) == NULL) {
            ids.v[keep++] = ids.v[i];
        }
    }
    pthread_mutex_unlock(&s->h->mu);
    ids.n = keep;
    if (keep > 0) {
        TR_LOG(TR_LOG_NOTICE, "metrics of %zu job%s the head no longer has (deleted before a restart): deleting them",
               keep, keep == 1 ? "" : "s");
        pthread_mutex_lock(&s->dbmu);
        forget_jobs(s, &ids);
        pthread_mutex_unlock(&s->dbmu);
    }
    tr_ids_fini(&ids);
}

/* svc_free (the service's stop, and a failed start's undo) stops the
 * writer first (its rounds use everything below), then the follower (its
 * queries use the connection). The RPC server stopped by then:
 * every queued call was answered and expired out of the queue, so the
 * writer has at most deletions left. */
static void svc_free(tr_head *h, void *state)
{
    metrics_svc *s = state;

    (void)h;
    tr_series_stop(&s->store);
    tr_mfollow_stop(s->follow);
    while (s->snaps != NULL) {
        snap *sn = s->snaps;
        s->snaps = sn->next;
        free(sn);
    }
    pthread_mutex_destroy(&s->lmu);
    while (s->streams != NULL) {
        stream *st = s->streams;
        s->streams = st->next;
        free(st);
    }
    free(s->sbuckets);
    while (s->counts != NULL) {
        job_count *c = s->counts;
        s->counts = c->next;
        free(c);
    }
    for (size_t i = 0; i <= ROWS_PER_INSERT; i++) {
        sqlite3_finalize(s->ins[i]); /* NULL is a no-op; before the close, which would fail with them */
    }
    tr_series_close(&s->store);
    tr_ids_fini(&s->gone);
    pthread_mutex_destroy(&s->dbmu);
    free(s);
}

static int svc_start(tr_head *h, void **state, tr_err *err)
{
    metrics_svc *s = calloc(1, sizeof(*s));
    int rv;

    if (s == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    s->h = h;
    pthread_mutex_init(&s->dbmu, NULL);
    pthread_mutex_init(&s->lmu, NULL);
    if ((rv = db_open(s, err)) != TROUPE_OK) {
        goto out;
    }
    forget_orphans(s);
    if ((s->follow = tr_mfollow_start(h)) == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot start the metrics follower");
        goto out;
    }
    rv = tr_series_start(&s->store, &metrics_queue, (int)h->cfg.ingest_nice, s, err); /* last: it may run at once */
out:
    if (rv != TROUPE_OK) {
        svc_free(h, s);
        return rv;
    }
    *state = s;
    return TROUPE_OK;
}

/* job_changed (under h->mu): an ended job's snapshots are no longer shown
 * and go at the writer's next round, so /metrics carries running work only
 * and the snapshots stay bounded by it. */
static void job_changed(tr_head *h, tr_head_job *hj, void *state)
{
    metrics_svc *s = state;

    (void)h;
    if (!tr_jobs_is_terminal(hj)) {
        return;
    }
    pthread_mutex_lock(&s->lmu);
    for (snap *sn = s->snaps; sn != NULL; sn = sn->next) {
        if (sn->job == hj->j->id && !sn->dead) {
            sn->dead = 1;
            s->n_dead++;
        }
    }
    pthread_mutex_unlock(&s->lmu);
}

const tr_head_service tr_metrics_service = {
    .name = "metrics",
    .methods = metrics_methods,
    .start = svc_start,
    .stop = svc_free,
    .job_changed = job_changed,
    .job_deleted = job_deleted,
};
