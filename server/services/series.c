/* series.c - the file and writer of a report service (series.h). */
#include "series.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dberr.h"
#include "log.h"

int tr_series_fail(tr_series *s, const char *what, tr_err *err)
{
    char hint[256];
    snprintf(
        hint, sizeof(hint),
        "%s is bounded by %s=%lld; free space on its disk, delete finished jobs (troupe delete) or raise "
        "the bound",
        s->def->file, s->def->bound, (long long)s->max_bytes);
    return tr_db_err(err, s->db, s->def->name, s->path, what, hint);
}

int tr_series_exec(tr_series *s, const char *sql, tr_err *err)
{
    if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
        char what[48];
        snprintf(what, sizeof(what), "%.40s", sql); /* "BEGIN IMMEDIATE;", "COMMIT;", a PRAGMA */
        return tr_series_fail(s, what, err);
    }
    return TROUPE_OK;
}

/* bound sets the file's size bound: past it a write is SQLITE_FULL, as on
 * a full disk. Its WAL is checkpointed (and cut back) every 1/16 of it, so
 * the WAL adds at most that much beside the file. */
static int bound(tr_series *s, tr_err *err)
{
    sqlite3_int64 page = 4096, pages;
    sqlite3_stmt *q = NULL;
    char sql[160];

    if (sqlite3_prepare_v2(s->db, "PRAGMA page_size;", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW) {
        page = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    pages = s->max_bytes / (page > 0 ? page : 4096);
    snprintf(sql, sizeof(sql),
             "PRAGMA max_page_count=%lld; PRAGMA wal_autocheckpoint=%lld; PRAGMA journal_size_limit=%lld;",
             (long long)(pages > 1 ? pages : 1),
             (long long)(pages / 16 > 1000 ? 1000
                         : pages / 16 > 8  ? pages / 16
                                           : 8),
             (long long)(s->max_bytes / 16));
    return tr_series_exec(s, sql, err);
}

int tr_series_open(tr_series *s, const tr_series_def *def, const char *dir, int sync_full, int64_t max_bytes,
                   tr_err *err)
{
    int rv = TROUPE_OK;

    memset(s, 0, sizeof(*s));
    s->def = def;
    s->max_bytes = max_bytes;
    snprintf(s->path, sizeof(s->path), "%s/%s", dir, def->file);
    s->full_if = getenv("TROUPE_TEST_STORE_FULL_IF");
    if (s->full_if != NULL && s->full_if[0] == '\0') {
        s->full_if = NULL;
    }
    if (sqlite3_open_v2(s->path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | def->open_flags,
                        NULL) != SQLITE_OK) {
        rv = tr_err_set(err, TROUPE_UNAVAILABLE, "cannot open %s: %s", s->path,
                        s->db ? sqlite3_errmsg(s->db) : "out of memory");
        goto out;
    }
    sqlite3_busy_timeout(s->db, 5000);
    if ((rv = tr_series_exec(s, "PRAGMA journal_mode=WAL;", err)) != TROUPE_OK ||
        (rv = tr_series_exec(s, sync_full ? "PRAGMA synchronous=FULL;" : "PRAGMA synchronous=NORMAL;",
                             err)) != TROUPE_OK ||
        (rv = tr_series_exec(s, def->schema, err)) != TROUPE_OK) {
        goto out;
    }
    if (max_bytes > 0) {
        rv = bound(s, err);
    }
out:
    if (rv != TROUPE_OK) {
        sqlite3_close(s->db); /* NULL is a no-op */
        s->db = NULL;
    }
    return rv;
}

int tr_series_start(tr_series *s, const tr_rq_ops *ops, int nice, void *arg, tr_err *err)
{
    tr_rq_opts qo = {.nice = nice};
    return tr_rq_open(&s->q, ops, &qo, arg, err);
}

void tr_series_stop(tr_series *s)
{
    tr_rq_close(s->q);
    s->q = NULL;
}

void tr_series_close(tr_series *s)
{
    sqlite3_close(s->db);
    s->db = NULL;
}

int tr_series_begin(tr_series *s, tr_err *err)
{
    return tr_series_exec(s, "BEGIN IMMEDIATE;", err);
}

int tr_series_failpoint(tr_series *s, tr_err *err)
{
    if (s->full_if != NULL && access(s->full_if, F_OK) == 0) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED,
                          "%s store %s: database or disk is full (injected by TROUPE_TEST_STORE_FULL_IF)",
                          s->def->name, s->path);
    }
    return TROUPE_OK;
}

int tr_series_commit(tr_series *s, int rv, tr_err *err)
{
    if (rv == TROUPE_OK) {
        rv = tr_series_exec(s, "COMMIT;", err);
    }
    if (rv != TROUPE_OK) {
        sqlite3_exec(s->db, "ROLLBACK;", NULL, NULL, NULL); /* none open (BEGIN failed): an error, ignored */
    }
    return rv;
}

int tr_series_delete_jobs(tr_series *s, const tr_ids *ids, tr_err *err)
{
    int rv = tr_series_begin(s, err);

    for (const char *const *t = s->def->job_tables; rv == TROUPE_OK && *t != NULL; t++) {
        sqlite3_stmt *d = NULL;
        char sql[128];
        snprintf(sql, sizeof(sql), "DELETE FROM %s WHERE job = ?1", *t);
        if (sqlite3_prepare_v2(s->db, sql, -1, &d, NULL) != SQLITE_OK) {
            rv = tr_series_fail(s, "prepare delete", err);
        }
        for (size_t i = 0; rv == TROUPE_OK && i < ids->n; i++) {
            sqlite3_reset(d);
            sqlite3_bind_int64(d, 1, (sqlite3_int64)ids->v[i]);
            if (sqlite3_step(d) != SQLITE_DONE) {
                rv = tr_series_fail(s, "delete", err);
            }
        }
        sqlite3_finalize(d);
    }
    return tr_series_commit(s, rv, err);
}

void tr_series_job_deleted(tr_series *s, uint64_t job_id)
{
    if (tr_rq_delete(s->q, job_id) != 0) {
        TR_LOG(TR_LOG_WARNING, "job=%llu: out of memory; its %s leave %s at the next start",
               (unsigned long long)job_id, s->def->rows, s->path);
    }
}

void tr_series_delete_orphans(tr_series *s, const tr_ids *ids)
{
    tr_err err;

    if (ids->n == 0) {
        return;
    }
    TR_LOG(TR_LOG_NOTICE,
           "%s store: %s of %zu job%s the head no longer has (deleted before a restart): deleting them",
           s->def->name, s->def->rows, ids->n, ids->n == 1 ? "" : "s");
    if (tr_series_delete_jobs(s, ids, &err) != TROUPE_OK) {
        TR_LOG(TR_LOG_WARNING,
               "%s store: cannot delete the %s of %zu deleted job%s (the next start does): %s", s->def->name,
               s->def->rows, ids->n, ids->n == 1 ? "" : "s", err.msg);
    }
}
