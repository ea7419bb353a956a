/* store.c - SQLite behind store.h. All SQLite errors are mapped here, once. */
#include "store.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dberr.h"
#include "log.h"
#include "util.h"

/* Statements of the write path, prepared once: the committer writes every
 * record of every batch through them, and preparing each time (parsing the
 * SQL) was most of SQLite's share of the head's CPU. */
enum { ST_PUT_JOBS, ST_PUT_NODES, ST_EVENT, ST_SET_ID, ST_DEL_JOB, ST_DEL_JOB_EVENTS, ST_COUNT };

static const char *const cached_sql[ST_COUNT] = {
    "INSERT OR REPLACE INTO jobs(id, state, data) VALUES(?1, ?2, ?3);",
    "INSERT OR REPLACE INTO nodes(id, state, data) VALUES(?1, ?2, ?3);",
    "INSERT INTO events(ts_ms, kind, node_id, job_id, message) VALUES(?1,?2,?3,?4,?5);",
    "INSERT OR REPLACE INTO ids(tbl, next) VALUES(?1, ?2);",
    "DELETE FROM jobs WHERE id = ?1;",
    "DELETE FROM events WHERE job_id = ?1;",
};

struct tr_store {
    sqlite3 *db;
    sqlite3_stmt *cached[ST_COUNT];
    char path[4096];
    const char *full_if; /* test failpoint (store.h), or NULL */
};

static const char *const schema =
    "CREATE TABLE IF NOT EXISTS ids(tbl TEXT PRIMARY KEY, next INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS nodes(id INTEGER PRIMARY KEY, state INTEGER NOT NULL, data BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY, state INTEGER NOT NULL, data BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS events(seq INTEGER PRIMARY KEY AUTOINCREMENT, ts_ms INTEGER NOT NULL,"
    " kind TEXT NOT NULL, node_id INTEGER, job_id INTEGER, message TEXT);"
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);"
    "CREATE INDEX IF NOT EXISTS events_job ON events(job_id);"; /* deleting a job's events */

static int from_sqlite(tr_store *st, int rc, const char *what, tr_err *err)
{
    int code = tr_db_status(rc);
    /* DEBUG: the head's writer logs once when the store starts and stops
     * failing, not once per retry; open errors reach the operator as err. */
    TR_LOG(TR_LOG_DEBUG, "store: %s failed: %s db=%s", what, sqlite3_errmsg(st->db), st->path);
    return tr_err_set(err, code, "state store: %s: %s", what, sqlite3_errmsg(st->db));
}

/* cached returns statement `which`, prepared on first use, reset and with
 * no bindings; NULL with err set on failure. */
static sqlite3_stmt *cached(tr_store *st, int which, const char *what, tr_err *err)
{
    sqlite3_stmt *s = st->cached[which];
    if (s == NULL) {
        int rc = sqlite3_prepare_v3(st->db, cached_sql[which], -1, SQLITE_PREPARE_PERSISTENT, &s, NULL);
        if (rc != SQLITE_OK) {
            from_sqlite(st, rc, what, err);
            return NULL;
        }
        st->cached[which] = s;
    }
    return s;
}

/* step_done runs a cached statement once and readies it for the next use. */
static int step_done(tr_store *st, sqlite3_stmt *s, const char *what, tr_err *err)
{
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc == SQLITE_DONE ? TROUPE_OK : from_sqlite(st, rc, what, err);
}

static int exec(tr_store *st, const char *sql, const char *what, tr_err *err)
{
    int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? TROUPE_OK : from_sqlite(st, rc, what, err);
}

int tr_store_open(const char *dir, int sync_full, tr_store **out, tr_err *err)
{
    tr_store *st;
    int rv;

    *out = NULL;
    if (tr_mkdir_p(dir) != 0) {
        return tr_err_set(err, TROUPE_PERMISSION_DENIED, "cannot create state dir %s", dir);
    }
    st = calloc(1, sizeof(*st));
    if (st == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    snprintf(st->path, sizeof(st->path), "%s/head.db", dir);
    st->full_if = getenv("TROUPE_TEST_STORE_FULL_IF");
    if (st->full_if != NULL && st->full_if[0] == '\0') {
        st->full_if = NULL;
    }
    if (sqlite3_open(st->path, &st->db) != SQLITE_OK) {
        rv = tr_err_set(err, TROUPE_UNAVAILABLE, "cannot open %s: %s", st->path,
                        st->db ? sqlite3_errmsg(st->db) : "out of memory");
        goto fail;
    }
    sqlite3_busy_timeout(st->db, 5000);
    if ((rv = exec(st, "PRAGMA journal_mode=WAL;", "enable WAL", err)) != TROUPE_OK ||
        (rv = exec(st, sync_full ? "PRAGMA synchronous=FULL;" : "PRAGMA synchronous=NORMAL;", "set sync",
                   err)) != TROUPE_OK ||
        (rv = exec(st, schema, "create schema", err)) != TROUPE_OK) {
        goto fail;
    }
    *out = st;
    return TROUPE_OK;
fail:
    sqlite3_close(st->db);
    free(st);
    return rv;
}

void tr_store_close(tr_store *st)
{
    if (st == NULL) {
        return;
    }
    for (int i = 0; i < ST_COUNT; i++) {
        sqlite3_finalize(st->cached[i]);
    }
    sqlite3_close(st->db);
    free(st);
}

int tr_store_begin(tr_store *st, tr_err *err)
{
    return exec(st, "BEGIN IMMEDIATE;", "begin", err);
}

int tr_store_commit(tr_store *st, tr_err *err)
{
    if (st->full_if != NULL && access(st->full_if, F_OK) == 0) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED,
                          "state store: commit: database or disk is full (injected: %s exists)", st->full_if);
    }
    return exec(st, "COMMIT;", "commit", err);
}

void tr_store_rollback(tr_store *st)
{
    sqlite3_exec(st->db, "ROLLBACK;", NULL, NULL, NULL);
}

int tr_store_get_next_id(tr_store *st, const char *table, uint64_t *next, tr_err *err)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db, "SELECT next FROM ids WHERE tbl = ?1;", -1, &s, NULL);

    if (rc != SQLITE_OK) {
        return from_sqlite(st, rc, "prepare next id", err);
    }
    sqlite3_bind_text(s, 1, table, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    *next = (rc == SQLITE_ROW) ? (uint64_t)sqlite3_column_int64(s, 0) : 1;
    sqlite3_finalize(s);
    return (rc == SQLITE_ROW || rc == SQLITE_DONE) ? TROUPE_OK : from_sqlite(st, rc, "next id", err);
}

int tr_store_set_next_id(tr_store *st, const char *table, uint64_t next, tr_err *err)
{
    sqlite3_stmt *s = cached(st, ST_SET_ID, "prepare set id", err);

    if (s == NULL) {
        return err->code;
    }
    sqlite3_bind_text(s, 1, table, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (sqlite3_int64)next);
    return step_done(st, s, "set id", err);
}

int tr_store_put(tr_store *st, const char *table, uint64_t id, int state, const uint8_t *data, size_t len,
                 tr_err *err)
{
    int which = strcmp(table, "jobs") == 0 ? ST_PUT_JOBS : strcmp(table, "nodes") == 0 ? ST_PUT_NODES : -1;
    sqlite3_stmt *s;

    if (which < 0) {
        return tr_err_set(err, TROUPE_INTERNAL, "state store: no table %s", table);
    }
    if ((s = cached(st, which, "prepare put", err)) == NULL) {
        return err->code;
    }
    sqlite3_bind_int64(s, 1, (sqlite3_int64)id);
    sqlite3_bind_int(s, 2, state);
    sqlite3_bind_blob(s, 3, data, (int)len, SQLITE_STATIC);
    return step_done(st, s, "put", err);
}

int tr_store_delete(tr_store *st, const char *table, uint64_t id, tr_err *err)
{
    int rv = TROUPE_OK;

    if (strcmp(table, "jobs") != 0) {
        return tr_err_set(err, TROUPE_INTERNAL, "state store: no deletions from table %s", table);
    }
    for (int which = ST_DEL_JOB; rv == TROUPE_OK && which <= ST_DEL_JOB_EVENTS; which++) {
        sqlite3_stmt *s = cached(st, which, "prepare delete job", err);
        if (s == NULL) {
            return err->code;
        }
        sqlite3_bind_int64(s, 1, (sqlite3_int64)id);
        rv = step_done(st, s, "delete job", err);
    }
    return rv;
}

int tr_store_scan(tr_store *st, const char *table, tr_store_scan_fn fn, void *arg, tr_err *err)
{
    char sql[128];
    sqlite3_stmt *s = NULL;
    int rc, rv = TROUPE_OK;

    snprintf(sql, sizeof(sql), "SELECT id, state, data FROM %s ORDER BY id;", table);
    rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (rc != SQLITE_OK) {
        return from_sqlite(st, rc, "prepare scan", err);
    }
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        rv = fn(arg, (uint64_t)sqlite3_column_int64(s, 0), sqlite3_column_int(s, 1),
                sqlite3_column_blob(s, 2), (size_t)sqlite3_column_bytes(s, 2));
        if (rv != TROUPE_OK) {
            tr_err_set(err, rv, "state store: cannot load a %s record", table);
            goto out;
        }
    }
    if (rc != SQLITE_DONE) {
        rv = from_sqlite(st, rc, "scan", err);
    }
out:
    sqlite3_finalize(s);
    return rv;
}

int tr_store_event(tr_store *st, const char *kind, uint64_t node_id, uint64_t job_id, const char *message,
                   tr_err *err)
{
    sqlite3_stmt *s = cached(st, ST_EVENT, "prepare event", err);

    if (s == NULL) {
        return err->code;
    }
    sqlite3_bind_int64(s, 1, tr_wall_ms());
    sqlite3_bind_text(s, 2, kind, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, (sqlite3_int64)node_id);
    sqlite3_bind_int64(s, 4, (sqlite3_int64)job_id);
    sqlite3_bind_text(s, 5, message, -1, SQLITE_STATIC);
    return step_done(st, s, "event", err);
}

int tr_store_meta_set(tr_store *st, const char *key, const char *value, tr_err *err)
{
    sqlite3_stmt *s = NULL;
    int rc, rv = TROUPE_OK;

    rc = sqlite3_prepare_v2(st->db, "INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2);", -1, &s, NULL);
    if (rc != SQLITE_OK) {
        return from_sqlite(st, rc, "prepare meta", err);
    }
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, value, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) {
        rv = from_sqlite(st, rc, "meta", err);
    }
    sqlite3_finalize(s);
    return rv;
}
