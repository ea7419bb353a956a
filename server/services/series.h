/* series.h - a series store: the SQLite file of one of the head's report
 * services (metrics.db under metrics.c, traces.db under trace.c) and the
 * durable writer that fills it (report_queue.h), opened, bounded, emptied of
 * deleted jobs and mapped to statuses the one way for both.
 *
 * What a service keeps in its file and how it reads it back is its own; the
 * series store gives it the file (WAL, the head's sync setting, a size bound
 * past which a write is SQLITE_FULL as on a full disk), one error path
 * (dberr.h: a full disk or bound is RESOURCE_EXHAUSTED, and says which bound
 * applies and what to do), transactions, the deletion of a job's rows from
 * every table that holds them, and the writer's queue.
 *
 * A series store's connection is used by one thread at a time, which the
 * service sees to (its writer, or its start before the writer runs). */
#ifndef TR_SERIES_H
#define TR_SERIES_H

#include <sqlite3.h>
#include <stdint.h>

#include "err.h"
#include "report_queue.h"

/* tr_series_def: what a service's store is (a static const table). */
typedef struct tr_series_def {
    const char *name;              /* "metrics": messages, the writer's thread */
    const char *rows;              /* what its rows are, in messages: "traces" */
    const char *file;              /* "metrics.db", in the service's directory */
    const char *bound;             /* "metrics_max_bytes": the setting named when the file is full */
    const char *schema;            /* CREATE ... IF NOT EXISTS */
    const char *const *job_tables; /* tables with a job column, NULL-terminated: a deleted job's rows go */
    int open_flags;                /* 0, or SQLITE_OPEN_NOMUTEX where the service serialises every use */
} tr_series_def;

typedef struct tr_series {
    const tr_series_def *def;
    sqlite3 *db;
    char path[1024];
    int64_t max_bytes;
    const char *full_if; /* TROUPE_TEST_STORE_FULL_IF (store.h), or NULL */
    tr_rq *q;            /* the writer, once started */
} tr_series;

/* tr_series_open opens (creating it) DIR/def->file into s (zeroed by the
 * call): WAL, synchronous FULL when sync_full else NORMAL, a 5 s busy
 * timeout, def->schema, and the bound max_bytes (0 = none; its WAL is
 * checkpointed every 1/16 of it). UNAVAILABLE ("cannot open PATH: ...") or
 * the status of SQLite's error otherwise, s->db NULL. The caller's thread. */
int tr_series_open(tr_series *s, const tr_series_def *def, const char *dir, int sync_full, int64_t max_bytes,
                   tr_err *err);

/* tr_series_start starts the writer (tr_rq_open with ops, arg and the
 * threads' nice) once the service has loaded what it keeps: the writer may
 * run at once. */
int tr_series_start(tr_series *s, const tr_rq_ops *ops, int nice, void *arg, tr_err *err);

/* tr_series_stop lets the writer finish and joins it (tr_rq_close);
 * tr_series_close then closes the file (the service finalizes its own
 * statements first). Both accept a store never opened or started. */
void tr_series_stop(tr_series *s);
void tr_series_close(tr_series *s);

/* tr_series_fail sets err from the connection's last error: tr_db_status of
 * its code, "NAME store PATH: WHAT: SQLite's message", and for a full disk
 * or file what to do ("FILE is bounded by BOUND=N; free space on its disk,
 * delete finished jobs (troupe delete) or raise the bound"). Returns the
 * status. */
int tr_series_fail(tr_series *s, const char *what, tr_err *err);

/* tr_series_exec runs sql: OK, or tr_series_fail's status and message. */
int tr_series_exec(tr_series *s, const char *sql, tr_err *err);

/* tr_series_begin opens a write transaction (BEGIN IMMEDIATE);
 * tr_series_commit commits it, or - rv not OK, or the commit failing -
 * rolls it back and returns the status: nothing of it is kept. */
int tr_series_begin(tr_series *s, tr_err *err);
int tr_series_commit(tr_series *s, int rv, tr_err *err);
/* tr_series_failpoint: RESOURCE_EXHAUSTED, as a full disk, while the file
 * named by TROUPE_TEST_STORE_FULL_IF (store.h) exists; OK otherwise (and
 * always outside tests). A writer asks it before committing a round. */
int tr_series_failpoint(tr_series *s, tr_err *err);

/* tr_series_delete_jobs removes the rows of jobs ids from every job table,
 * in one transaction; a failure leaves them all (err says why). */
int tr_series_delete_jobs(tr_series *s, const tr_ids *ids, tr_err *err);

/* tr_series_job_deleted asks the writer to delete job_id's rows after its
 * next round (tr_rq_delete); out of memory it logs that the next start
 * does. Any thread, h->mu may be held. */
void tr_series_job_deleted(tr_series *s, uint64_t job_id);

/* tr_series_delete_orphans deletes, at start, the rows of the jobs in ids
 * (jobs the head no longer has: deleted just before a stop or crash,
 * before the writer got to them), saying so in the log. */
void tr_series_delete_orphans(tr_series *s, const tr_ids *ids);

#endif
