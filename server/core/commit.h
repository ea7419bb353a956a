/* commit.h - the group commit (commit.c): what changed is marked under
 * h->mu, one writer thread saves it in batches to head.db, and calls parked
 * for a batch are answered once it is on disk (decision 0001). */
#ifndef TR_COMMIT_H
#define TR_COMMIT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "rpc.h"

/* Defined in head.h; named here so this header stands alone (C11 allows
 * the typedef twice). */
typedef struct tr_head tr_head;

/* Called under h->mu once the batch holding a change is on disk; must answer
 * the call (commit.c). */
typedef void (*tr_commit_fn)(struct tr_head *h, tr_rpc_call *call, uint64_t arg);

/* tr_commit_calloc_hook (unit tests only; NULL otherwise): when set, the
 * writer makes the allocations of taking a batch (the record array, each
 * packed record) through it, under h->mu, so a test can make them fail. */
extern void *(*tr_commit_calloc_hook)(size_t n, size_t size);
/* tr_commit_write_hook (unit tests only; NULL otherwise): called by the
 * writer with a batch taken, h->mu released, right before it is written. */
extern void (*tr_commit_write_hook)(void);

/* tr_commit_rec: one record of a batch, made by its source's collect. */
typedef struct tr_commit_rec {
    const struct tr_commit_source *src;
    uint64_t id;
    int state;    /* the store's state column */
    int del;      /* delete the record (and what belongs to it) rather than write it */
    uint8_t *buf; /* the packed record (tr_commit_alloc); NULL for a deletion */
    size_t len;
} tr_commit_rec;

/* tr_commit_source: a kind of record the head keeps in head.db, registered
 * by the module that owns it (jobs_save.c, nodes.c) and handed to
 * tr_head_commit_start, so the committer knows no record type. The source
 * keeps its own marks of what changed; every hook runs under h->mu on the
 * committer thread, except marked (any thread holding h->mu). */
typedef struct tr_commit_source {
    const char *name; /* its table in head.db */
    int id_counter;   /* its slot in h->next_id, saved with a batch that took a new id; -1: none */
    /* marked: how many records collect would make now, at most (it sizes the
     * batch; 0 when nothing is marked). Also what `troupe status` counts as
     * unsaved. */
    size_t (*marked)(const tr_head *h);
    /* collect appends a record for everything marked (room for marked()
     * records at out + *n), packing with tr_commit_alloc, and clears its
     * marks. Out of memory: -1, its marks as they were and *n unchanged
     * (what it packed freed). */
    int (*collect)(tr_head *h, tr_commit_rec *out, size_t *n);
    /* requeue marks r's record again: its batch was not written. */
    void (*requeue)(tr_head *h, const tr_commit_rec *r);
    /* saved: r's batch is on disk (may be NULL). */
    void (*saved)(tr_head *h, const tr_commit_rec *r);
    /* stop frees the marks once the last batch is written (may be NULL). */
    void (*stop)(tr_head *h);
} tr_commit_source;

/* tr_commit_ids: a list of record ids marked for the next batch, kept by a
 * source (push; the source clears n once collected). */
typedef struct tr_commit_ids {
    uint64_t *ids;
    size_t n, cap;
} tr_commit_ids;
/* tr_commit_ids_push appends id (with scan, only if not listed yet);
 * -1 when out of memory (nothing changed). */
int tr_commit_ids_push(tr_commit_ids *l, uint64_t id, int scan);
void tr_commit_ids_free(tr_commit_ids *l);
/* tr_commit_alloc: calloc, or tr_commit_calloc_hook in unit tests. */
void *tr_commit_alloc(size_t n, size_t size);
/* tr_commit_wake tells the writer that something was marked (h->mu held). */
void tr_commit_wake(tr_head *h);

/* tr_commit_space: a look at the disks of the head's stores (state dir,
 * metrics dir, traces dir): the committer's last (h->space), or a
 * handler's own (tr_head_space_look), read by the refusals below without
 * I/O under h->mu. */
enum { TR_SPACE_DIRS = 3 };
typedef struct tr_commit_space {
    double free_b[TR_SPACE_DIRS]; /* bytes free to the head; < 0: could not look */
    char stores[200];             /* each store's size and bound, for messages; "" if not measured */
    int64_t at_ms;                /* tr_now_ms() of the look */
} tr_commit_space;

/* Group commit (commit.c); all under h->mu except start/stop. The sources
 * are written in their order, each batch's records first, then its events,
 * then its deletions (a deleted job's events of the same batch go too). */
int tr_head_commit_start(tr_head *h, const tr_commit_source *const *sources, size_t n, tr_err *err);
void tr_head_commit_stop(tr_head *h); /* writes what is left, then stops */
void tr_head_event(tr_head *h, const char *kind, uint64_t node, uint64_t job, const char *msg);
uint64_t tr_head_new_id(tr_head *h, int table);
void tr_head_after_commit(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg);
/* tr_head_after_commit_owned: arg is a pointer that drop frees once the call
 * is answered, fails or expires (fn must not free it). */
/* tr_head_change_seq: the batch that will carry a change made now. */
uint64_t tr_head_change_seq(const tr_head *h);
/* tr_head_wait_saved waits (h->mu held, released while waiting) until the
 * batch seq is on disk, at most ms, and returns 1 once it is; 0 when the
 * time ran out, the store cannot write, or the head is stopping. For
 * threads of the head's own that answer from memory (HTTP), as
 * tr_head_after_commit is for RPC calls. */
int tr_head_wait_saved(tr_head *h, uint64_t seq, int64_t ms);
/* tr_head_commit_nudge asks for a batch even if nothing is marked (so that
 * what waits for saved_seq to move is answered). */
void tr_head_commit_nudge(tr_head *h);
/* tr_head_store_refuse answers call RESOURCE_EXHAUSTED (with a hint naming
 * the state dir and its free space, as the committer last looked) and
 * returns 1 while the store cannot write; 0 otherwise. Handlers that would
 * make new changes call it first. Under h->mu; no I/O. */
int tr_head_store_refuse(tr_head *h, tr_rpc_call *call);
/* New work (submit) is refused on a look at the disks of its own, not the
 * committer's (which may be SPACE_LOOK_MS old: the disk may have filled
 * since, and the job's save could not happen):
 *   tr_head_space_look(h, &look);        - no lock held: statvfs
 *   pthread_mutex_lock(&h->mu);
 *   if (tr_head_space_refuse(h, call, &look)) { unlock; answered }
 * tr_head_space_look looks (statvfs of the three stores' disks, and the
 * stores' sizes when it will refuse) while min_free_bytes is set or the
 * store fails; otherwise it sets look->at_ms = 0 (no look). It must be
 * called without h->mu. tr_head_space_refuse is tr_head_store_refuse that
 * also refuses, RESOURCE_EXHAUSTED, while the look saw less than
 * min_free_bytes free on the disk of the state dir, of metrics.db or of
 * traces.db, whichever file filled it, with the sizes of the stores and what
 * to do. Under h->mu; no I/O. */
void tr_head_space_look(tr_head *h, tr_commit_space *look);
int tr_head_space_refuse(tr_head *h, tr_rpc_call *call, const tr_commit_space *look);
/* tr_head_store_unsaved counts changes waiting for the disk. */
size_t tr_head_store_unsaved(const tr_head *h);
/* tr_head_after_commit_or_resend: for calls whose sender re-sends the same
 * thing until it is acknowledged (an agent's report): if the batch carrying
 * the change cannot be written, the call is answered UNAVAILABLE at once
 * (the change stays in memory and is retried) instead of being held. */
void tr_head_after_commit_or_resend(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg);
/* tr_head_after_batch: for calls that only read (GetCluster, GetJob,
 * ListJobs) and wait for the batch in flight to show saved state: fn runs
 * after the next batch whether it was saved or not; after a failed one
 * store_failing is set and fn answers as the store stands (a reader parked
 * with tr_head_after_commit waited for a write that may never come, to its
 * call's deadline). drop as for tr_head_after_commit_owned; may be NULL. */
void tr_head_after_batch(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg, void (*drop)(void *));
/* tr_head_commit_waiters: calls parked for the next batch (h->mu held). */
size_t tr_head_commit_waiters(const tr_head *h);
void tr_head_after_commit_owned(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg,
                                void (*drop)(void *));

#endif
