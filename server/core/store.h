/* store.h - the head's durable state: SQLite (WAL) in --state-dir/head.db.
 *
 * Records are stored as packed troupe.v1 messages keyed by id, so the schema
 * evolves with the proto (new fields need no migration). Every write returns
 * only after SQLite has committed it (synchronous=FULL by default): what the
 * head replied OK to survives kill -9 and power loss.
 *
 * Not thread-safe: the head calls it under its state mutex. */
#ifndef TR_STORE_H
#define TR_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct tr_store tr_store;

/* tr_store_open opens (creating if needed) dir/head.db; *out owns it. */
int tr_store_open(const char *dir, int sync_full, tr_store **out, tr_err *err);

/* tr_store_close closes the database; NULL is a no-op. */
void tr_store_close(tr_store *st);

/* tr_store_put writes (insert or replace) one record. */
int tr_store_put(tr_store *st, const char *table, uint64_t id, int state, const uint8_t *data, size_t len,
                 tr_err *err);

/* tr_store_delete removes record id of table and what belongs to it (a
 * job's events); INTERNAL for a table whose records are never deleted. */
int tr_store_delete(tr_store *st, const char *table, uint64_t id, tr_err *err);

/* tr_store_scan calls fn for every record of table in id order; fn's data is
 * valid only during the call. A non-OK return from fn stops the scan. */
typedef int (*tr_store_scan_fn)(void *arg, uint64_t id, int state, const uint8_t *data, size_t len);
int tr_store_scan(tr_store *st, const char *table, tr_store_scan_fn fn, void *arg, tr_err *err);

/* tr_store_event appends a line to the event history (node registered,
 * node dead, job started...). */
int tr_store_event(tr_store *st, const char *kind, uint64_t node_id, uint64_t job_id, const char *message,
                   tr_err *err);

/* tr_store_begin/commit group several writes into one transaction (one fsync).
 *
 * Test failpoint, inert unless set: with TROUPE_TEST_STORE_FULL_IF=PATH in
 * the environment, every commit fails as if the disk were full
 * (RESOURCE_EXHAUSTED) while PATH exists - so a test can fill and free the
 * "disk" with touch and rm where it cannot mount a small filesystem. */
int tr_store_begin(tr_store *st, tr_err *err);
int tr_store_commit(tr_store *st, tr_err *err);

/* tr_store_rollback abandons a transaction (errors ignored). */
void tr_store_rollback(tr_store *st);

/* tr_store_get_next_id / set_next_id: the never-reused id counter of a table
 * (1 when none was stored). */
int tr_store_get_next_id(tr_store *st, const char *table, uint64_t *next, tr_err *err);
int tr_store_set_next_id(tr_store *st, const char *table, uint64_t next, tr_err *err);

/* tr_store_meta_get/set: small key/value settings (e.g. head epoch). */
int tr_store_meta_set(tr_store *st, const char *key, const char *value, tr_err *err);

#endif
