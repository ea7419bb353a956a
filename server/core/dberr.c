/* dberr.c - SQLite's result codes as troupe statuses (dberr.h). */
#include "dberr.h"

#include "troupe/status.h"

int tr_db_status(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_FULL:
    case SQLITE_NOMEM: return TROUPE_RESOURCE_EXHAUSTED;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return TROUPE_DATA_LOSS;
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return TROUPE_UNAVAILABLE;
    default: return TROUPE_INTERNAL;
    }
}

int tr_db_err(tr_err *err, sqlite3 *db, const char *name, const char *path, const char *what,
              const char *hint)
{
    int rc = db ? sqlite3_extended_errcode(db) : SQLITE_NOMEM;
    int code = tr_db_status(rc);

    if ((rc & 0xff) == SQLITE_FULL) {
        return tr_err_set(err, code, "%s store %s: %s: %s (%s)", name, path, what, sqlite3_errstr(rc),
                          hint ? hint : "free space on its disk");
    }
    return tr_err_set(err, code, "%s store %s: %s: %s", name, path, what,
                      db ? sqlite3_errmsg(db) : "out of memory");
}
