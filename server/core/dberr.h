/* dberr.h - SQLite's result codes as troupe statuses, in one place for the
 * head's three stores (head.db, metrics.db, traces.db), so a full disk or a
 * store at its size bound reads the same whichever file it hit. */
#ifndef TR_DBERR_H
#define TR_DBERR_H

#include <sqlite3.h>

#include "err.h"

/* tr_db_status maps an SQLite result code (primary or extended):
 * SQLITE_FULL (the disk, or the file's max_page_count) and SQLITE_NOMEM are
 * RESOURCE_EXHAUSTED; SQLITE_CORRUPT and SQLITE_NOTADB DATA_LOSS;
 * SQLITE_BUSY and SQLITE_LOCKED UNAVAILABLE; anything else INTERNAL. */
int tr_db_status(int rc);

/* tr_db_err sets err from db's last error: tr_db_status of its code, and
 * "NAME store PATH: WHAT: SQLite's message", followed for SQLITE_FULL by
 * what to do (hint: which bound applies, may be NULL). Returns the status.
 * The thread that may use db. */
int tr_db_err(tr_err *err, sqlite3 *db, const char *name, const char *path, const char *what,
              const char *hint);

#endif
