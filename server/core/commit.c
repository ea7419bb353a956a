/* commit.c - group commit: one writer thread, one fsync per batch.
 *
 * Handlers never touch SQLite. They change state in memory under h->mu and
 * mark what changed (tr_head_dirty_job/_node, tr_head_event, new ids). A reply
 * that acknowledges a durable change is parked with tr_head_after_commit.
 *
 * The committer thread takes everything marked so far in one step under
 * h->mu (packing the records, taking the parked replies), then writes it all
 * in one transaction outside the lock, so handlers keep running and the next
 * batch fills up while the disk syncs. Only when COMMIT returned are the parked
 * replies sent: an acknowledged change is on disk. Under load many changes
 * share one fsync; alone, a change waits for exactly one.
 *
 * Parked calls that reach their deadline first are answered by the RPC layer;
 * on_expire then unlinks them if they are still queued (whoever unlinks a
 * waiter releases its call).
 *
 * A batch that cannot be written - disk full, I/O error, or memory running
 * out while it is taken - is never dropped: its records are marked again,
 * its events and parked replies go back to the front of the queue, and the
 * writer retries with a backoff (100 ms doubling to 2 s), taking whatever
 * changed meanwhile along. Nobody is told that such a change failed: it is
 * in memory and will be saved, so its caller waits for the write (or its own
 * deadline). While writes fail the store is "failing": one log line on
 * entering and one on leaving, `troupe status` shows it, and handlers that
 * would make new changes refuse them (tr_head_store_refuse) until a write
 * succeeds again. What such a change causes does not leave the head before
 * it is on disk either: agents are told assignment versions whose changes
 * are saved (jobs_sync.c), job long polls are answered once the job is. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#include "head.h"
#include "log.h"
#include "util.h"

/* Test hook (commit.h): NULL - always, outside unit tests - is calloc. */
void *(*tr_commit_calloc_hook)(size_t n, size_t size);
void (*tr_commit_write_hook)(void);

void *tr_commit_alloc(size_t n, size_t size)
{
    return tr_commit_calloc_hook != NULL ? tr_commit_calloc_hook(n, size) : calloc(n, size);
}

typedef struct tr_commit_waiter {
    tr_rpc_call *call;
    tr_commit_fn fn;
    uint64_t arg;
    void (*drop)(void *); /* frees arg (a pointer) whatever happens; may be NULL */
    int resend;           /* its caller re-sends: answer at once if not saved */
    int settle;           /* a reader: fn runs after the next batch, saved or not (tr_head_after_batch) */
    struct tr_commit_waiter *next;
} tr_commit_waiter;

static void waiter_free(tr_commit_waiter *w)
{
    if (w->drop != NULL) {
        w->drop((void *)(uintptr_t)w->arg);
    }
    free(w);
}

typedef struct tr_head_ev {
    char *kind, *msg;
    uint64_t node, job;
    struct tr_head_ev *next;
} tr_head_ev;

int tr_commit_ids_push(tr_commit_ids *l, uint64_t id, int scan)
{
    for (size_t i = 0; scan && i < l->n; i++) {
        if (l->ids[i] == id) {
            return 0; /* already marked: written once per batch */
        }
    }
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 64;
        uint64_t *p = realloc(l->ids, c * sizeof(*p));
        if (p == NULL) {
            return -1;
        }
        l->ids = p;
        l->cap = c;
    }
    l->ids[l->n++] = id;
    return 0;
}

void tr_commit_ids_free(tr_commit_ids *l)
{
    free(l->ids);
    memset(l, 0, sizeof(*l));
}

/* Broadcast: the writer waits on commit_cv, and so does a handler that had
 * no memory to park its reply (wait_saved). */
static void wake(tr_head *h)
{
    pthread_cond_broadcast(&h->commit_cv);
}

void tr_commit_wake(tr_head *h)
{
    wake(h);
}

uint64_t tr_head_change_seq(const tr_head *h)
{
    return h->taken_seq + 1;
}

void tr_head_commit_nudge(tr_head *h)
{
    h->commit_nudge = 1;
    wake(h);
}

void tr_head_event(tr_head *h, const char *kind, uint64_t node, uint64_t job, const char *msg)
{
    tr_head_ev *e = calloc(1, sizeof(*e));
    if (e == NULL || (e->kind = strdup(kind)) == NULL || (e->msg = strdup(msg)) == NULL) {
        if (e != NULL) {
            free(e->kind);
        }
        free(e);
        /* History only: the records it describes are marked on their own. */
        TR_LOG(TR_LOG_ERR, "out of memory: event %s node=%llu job=%llu not recorded", kind,
               (unsigned long long)node, (unsigned long long)job);
        return;
    }
    e->node = node;
    e->job = job;
    *h->events_tail = e;
    h->events_tail = &e->next;
    wake(h);
}

uint64_t tr_head_new_id(tr_head *h, int table)
{
    h->ids_dirty = 1;
    return h->next_id[table]++;
}

static void on_waiter_expire(tr_rpc_call *call, void *arg)
{
    tr_head *h = arg;
    pthread_mutex_lock(&h->mu);
    for (tr_commit_waiter **pp = &h->waiters; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->call == call) {
            tr_commit_waiter *w = *pp;
            *pp = w->next;
            if (h->waiters_tail == &w->next) {
                h->waiters_tail = pp;
            }
            tr_rpc_call_release(call);
            waiter_free(w);
            break;
        }
    }
    pthread_mutex_unlock(&h->mu);
}

/* wait_cv waits on commit_cv (h->mu held) for at most ms. */
static void wait_cv(tr_head *h, int64_t ms)
{
    struct timespec ts;
    tr_abstime_in(&ts, ms);
    pthread_cond_timedwait(&h->commit_cv, &h->mu, &ts);
}

/* wait_saved is the fallback when there is no memory to park a reply: hold
 * this handler (h->mu released while waiting) until the change is on disk,
 * then answer; at the call's deadline answer DEADLINE_EXCEEDED like a parked
 * call. The caller must never be told the change failed: it is applied. */
static void wait_saved(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg)
{
    uint64_t seq = tr_head_change_seq(h);
    int64_t deadline = tr_rpc_call_deadline(call);

    tr_head_commit_nudge(h);
    while (h->saved_seq < seq && !h->commit_stop && tr_now_ms() < deadline) {
        int64_t left = deadline - tr_now_ms();
        wait_cv(h, left > 100 ? 100 : left); /* re-check stop and the clock */
    }
    if (h->saved_seq >= seq) {
        fn(h, call, arg);
    } else {
        tr_rpc_reply_error(call, TROUPE_DEADLINE_EXCEEDED,
                           "the change is applied but not yet saved (state store: %s); it is saved when "
                           "the store can write",
                           h->store_failing ? h->store_error : "busy");
    }
}

int tr_head_wait_saved(tr_head *h, uint64_t seq, int64_t ms)
{
    int64_t deadline = tr_now_ms() + ms;

    if (h->saved_seq < seq) {
        tr_head_commit_nudge(h);
    }
    while (h->saved_seq < seq && !h->store_failing && !h->commit_stop && tr_now_ms() < deadline) {
        int64_t left = deadline - tr_now_ms();
        wait_cv(h, left > 100 ? 100 : left); /* re-check the store, stop and the clock */
    }
    return h->saved_seq >= seq;
}

static void park_waiter(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg, void (*drop)(void *),
                        int resend, int settle)
{
    tr_commit_waiter *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        wait_saved(h, call, fn, arg);
        if (drop != NULL) {
            drop((void *)(uintptr_t)arg);
        }
        return;
    }
    w->call = call;
    w->fn = fn;
    w->arg = arg;
    w->drop = drop;
    w->resend = resend;
    w->settle = settle;
    *h->waiters_tail = w;
    h->waiters_tail = &w->next;
    tr_rpc_defer(call, on_waiter_expire, h);
    wake(h);
}

void tr_head_after_commit(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg)
{
    park_waiter(h, call, fn, arg, NULL, 0, 0);
}

void tr_head_after_commit_owned(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg,
                                void (*drop)(void *))
{
    park_waiter(h, call, fn, arg, drop, 0, 0);
}

void tr_head_after_commit_or_resend(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg)
{
    park_waiter(h, call, fn, arg, NULL, 1, 0);
}

void tr_head_after_batch(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg, void (*drop)(void *))
{
    park_waiter(h, call, fn, arg, drop, 0, 1);
}

size_t tr_head_commit_waiters(const tr_head *h)
{
    size_t n = 0;
    for (const tr_commit_waiter *w = h->waiters; w != NULL; w = w->next) {
        n++;
    }
    return n;
}

/* settle_readers runs the readers' fn after a failed batch (store_failing is
 * set by then, so they answer as the store stands). They are taken off the
 * list first: an fn may park its call again. */
static void settle_readers(tr_head *h)
{
    tr_commit_waiter *mine = NULL, **tail = &mine;

    for (tr_commit_waiter **pp = &h->waiters; *pp != NULL;) {
        tr_commit_waiter *w = *pp;
        if (!w->settle) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        if (h->waiters_tail == &w->next) {
            h->waiters_tail = pp;
        }
        w->next = NULL;
        *tail = w;
        tail = &w->next;
    }
    while (mine != NULL) {
        tr_commit_waiter *w = mine;
        mine = w->next;
        if (!tr_rpc_call_answered(w->call)) {
            w->fn(h, w->call, w->arg);
        }
        tr_rpc_call_release(w->call);
        waiter_free(w);
    }
}

typedef struct batch {
    uint64_t seq;
    tr_commit_rec *recs;
    size_t n;
    tr_head_ev *events;
    tr_commit_waiter *waiters;
    uint64_t next_id[2];
    int ids;
} batch;

static void recs_free(batch *b)
{
    for (size_t i = 0; i < b->n; i++) { /* deletions have no buf */
        free(b->recs[i].buf);
    }
    free(b->recs);
    b->recs = NULL;
    b->n = 0;
}

/* take moves everything marked so far into b, or - out of memory - leaves
 * it all marked and returns non-OK. Each source collects all of its marks or
 * none; those collected before one that failed are marked again. Caller
 * holds h->mu. */
static int take(tr_head *h, batch *b, tr_err *err)
{
    size_t cap = 1;
    int rv = 0;

    memset(b, 0, sizeof(*b));
    b->seq = ++h->taken_seq;
    for (size_t i = 0; i < h->n_commit_src; i++) {
        cap += h->commit_src[i]->marked(h);
    }
    b->recs = tr_commit_alloc(cap, sizeof(*b->recs));
    for (size_t i = 0; b->recs != NULL && rv == 0 && i < h->n_commit_src; i++) {
        rv = h->commit_src[i]->collect(h, b->recs, &b->n);
    }
    if (b->recs == NULL || rv != 0) {
        for (size_t i = 0; i < b->n; i++) {
            b->recs[i].src->requeue(h, &b->recs[i]);
        }
        recs_free(b);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory packing the records of a batch");
    }
    h->commit_nudge = 0;
    b->events = h->events;
    h->events = NULL;
    h->events_tail = &h->events;
    b->waiters = h->waiters;
    h->waiters = NULL;
    h->waiters_tail = &h->waiters;
    b->ids = h->ids_dirty;
    h->ids_dirty = 0;
    memcpy(b->next_id, h->next_id, sizeof(b->next_id));
    return TROUPE_OK;
}

/* requeue puts a batch that was not written back in front of what changed
 * since: its records marked again (carried by the next batch), its events
 * and parked replies ahead of newer ones. Replies that reached their
 * deadline meanwhile are already answered: released here. Callers that
 * re-send by themselves (agents' reports) are answered UNAVAILABLE now
 * rather than held up until the disk has room. */
static void requeue(tr_head *h, batch *b, const tr_err *err)
{
    tr_commit_waiter **wp = &b->waiters;
    tr_head_ev **ep = &b->events;

    for (size_t i = 0; i < b->n; i++) {
        b->recs[i].src->requeue(h, &b->recs[i]);
    }
    h->ids_dirty |= b->ids;
    /* Whatever the batch carried, a write must still succeed: what waits for
     * saved_seq to pass it (a node's assignment version, wait_saved) and the
     * failing state itself end only then. A batch of a nudge alone left
     * nothing pending, so the writer slept, the head refused new work and
     * nothing came to retry (found by integration.runtime.profile_unsaved). */
    h->commit_nudge = 1;
    while (*ep != NULL) {
        ep = &(*ep)->next;
    }
    if (b->events != NULL) {
        *ep = h->events;
        if (h->events == NULL) {
            h->events_tail = ep;
        }
        h->events = b->events;
        b->events = NULL;
    }
    while (*wp != NULL) {
        tr_commit_waiter *w = *wp;
        if (w->resend || tr_rpc_call_answered(w->call)) {
            if (w->resend) {
                tr_rpc_reply_error(w->call, TROUPE_UNAVAILABLE,
                                   "not saved yet (state store: %s); send it again", err->msg);
            }
            *wp = w->next;
            tr_rpc_call_release(w->call);
            waiter_free(w);
        } else {
            wp = &w->next;
        }
    }
    if (b->waiters != NULL) {
        *wp = h->waiters;
        if (h->waiters == NULL) {
            h->waiters_tail = wp;
        }
        h->waiters = b->waiters;
        b->waiters = NULL;
    }
}

/* write_batch runs one transaction; returns OK only after COMMIT. */
static int write_batch(tr_head *h, const batch *b, tr_err *err)
{
    int rv = tr_store_begin(h->store, err);
    for (size_t i = 0; rv == TROUPE_OK && i < b->n; i++) {
        const tr_commit_rec *r = &b->recs[i];
        if (!r->del) {
            rv = tr_store_put(h->store, r->src->name, r->id, r->state, r->buf, r->len, err);
        }
    }
    for (const tr_head_ev *e = b->events; rv == TROUPE_OK && e != NULL; e = e->next) {
        rv = tr_store_event(h->store, e->kind, e->node, e->job, e->msg, err);
    }
    for (size_t i = 0; rv == TROUPE_OK && i < b->n; i++) {
        const tr_commit_rec *r = &b->recs[i];
        if (r->del) {
            rv = tr_store_delete(h->store, r->src->name, r->id, err); /* after its events of this batch */
        }
    }
    for (size_t i = 0; rv == TROUPE_OK && b->ids && i < h->n_commit_src; i++) {
        const tr_commit_source *src = h->commit_src[i];
        if (src->id_counter >= 0) {
            rv = tr_store_set_next_id(h->store, src->name, b->next_id[src->id_counter], err);
        }
    }
    if (rv == TROUPE_OK) {
        rv = tr_store_commit(h->store, err);
        if (rv == TROUPE_OK) {
            return rv;
        }
    }
    tr_store_rollback(h->store);
    return rv;
}

static void batch_free(batch *b)
{
    recs_free(b);
    while (b->events != NULL) {
        tr_head_ev *e = b->events;
        b->events = e->next;
        free(e->kind);
        free(e->msg);
        free(e);
    }
}

/* answer sends the parked replies of a saved batch (under h->mu: fn reads
 * live state); with rv non-OK (the head stops and cannot save) it tells
 * them the change was not saved - true, as the head's memory goes with it. */
static void answer(tr_head *h, batch *b, int rv, const tr_err *err)
{
    while (b->waiters != NULL) {
        tr_commit_waiter *w = b->waiters;
        b->waiters = w->next;
        if (rv == TROUPE_OK) {
            w->fn(h, w->call, w->arg);
        } else {
            tr_rpc_reply_error(w->call, TROUPE_UNAVAILABLE,
                               "head stopped before the change was saved (state store: %s)", err->msg);
        }
        tr_rpc_call_release(w->call);
        waiter_free(w);
    }
}

/* store_failed enters (or stays in) the failing state. */
static void store_failed(tr_head *h, const tr_err *err)
{
    h->store_failed_writes++;
    snprintf(h->store_error, sizeof(h->store_error), "%s", err->msg);
    h->store_code = err->code;
    if (!h->store_failing) {
        __atomic_store_n(&h->store_failing, 1, __ATOMIC_RELAXED); /* tr_head_space_look reads it unlocked */
        h->store_failing_since_ms = tr_wall_ms();
        TR_LOG(TR_LOG_ERR,
               "state store cannot write, refusing new work until it can: %s state_dir=%s unsaved=%zu "
               "(changes kept in memory and retried)",
               err->msg, h->cfg.state_dir, tr_head_store_unsaved(h));
    }
}

/* saved records a batch on disk, leaves the failing state, answers. */
static void saved(tr_head *h, batch *b, const tr_err *err)
{
    h->saved_seq = b->seq;
    if (h->store_failing) {
        __atomic_store_n(&h->store_failing, 0, __ATOMIC_RELAXED);
        TR_LOG(TR_LOG_NOTICE,
               "state store writes again after %lld ms (%llu failed writes); saved=%zu, accepting new work",
               (long long)(tr_wall_ms() - h->store_failing_since_ms),
               (unsigned long long)h->store_failed_writes, b->n);
    }
    h->batches++;
    h->batched_records += b->n;
    answer(h, b, TROUPE_OK, err);
    for (size_t i = 0; i < b->n; i++) {
        if (b->recs[i].src->saved != NULL) {
            b->recs[i].src->saved(h, &b->recs[i]);
        }
    }
    tr_events_publish(h, TR_EV_BATCH_SAVED, NULL, NULL);
    wake(h); /* wait_saved */
}

static size_t marked(const tr_head *h)
{
    size_t n = 0;
    for (size_t i = 0; i < h->n_commit_src; i++) {
        n += h->commit_src[i]->marked(h);
    }
    return n;
}

static int pending(const tr_head *h)
{
    return h->events || h->waiters || h->ids_dirty || h->commit_nudge || marked(h) > 0;
}

size_t tr_head_store_unsaved(const tr_head *h)
{
    size_t n = marked(h);
    for (const tr_head_ev *e = h->events; e != NULL; e = e->next) {
        n++;
    }
    return n;
}

/* The committer looks at the disks (space_look) and keeps what it saw
 * (h->space) for the refusals of changes while the store fails: their
 * decision is store_failing, the look only says how much room there is. A
 * submit decides by the look itself (min_free_bytes), so it looks at the
 * disks again, with no lock held, before it takes h->mu (tr_head_space_look):
 * a look the committer made up to SPACE_LOOK_MS ago would take a job in the
 * moments after the disk filled, and its save could not happen. Nothing
 * stats files with h->mu held (a slow disk would stall every handler behind
 * the lock). The committer's look is SPACE_LOOK_MS old at most while it
 * matters - min_free_bytes set, or the store failing - and taken again
 * right after a failed write. */
#define SPACE_LOOK_MS 100

/* file_mib is the size of DIR/NAME with its WAL in MiB (0 when absent). */
static double file_mib(const char *dir, const char *name)
{
    char path[4200];
    struct stat st;
    double b = 0;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    b += stat(path, &st) == 0 ? (double)st.st_size : 0;
    snprintf(path, sizeof(path), "%s/%s-wal", dir, name);
    b += stat(path, &st) == 0 ? (double)st.st_size : 0;
    return b / (1024.0 * 1024.0);
}

static void space_dirs(const tr_head_config *cfg, const char *dirs[TR_SPACE_DIRS])
{
    dirs[0] = cfg->state_dir;
    dirs[1] = cfg->metrics_dir ? cfg->metrics_dir : cfg->state_dir;
    dirs[2] = cfg->traces_dir ? cfg->traces_dir : cfg->state_dir;
}

/* space_free measures the free space of the stores' disks (statvfs). */
static void space_free(const tr_head_config *cfg, tr_commit_space *sp)
{
    const char *dirs[TR_SPACE_DIRS];
    struct statvfs fs;

    space_dirs(cfg, dirs);
    for (int i = 0; i < TR_SPACE_DIRS; i++) {
        sp->free_b[i] = statvfs(dirs[i], &fs) == 0 ? (double)fs.f_bavail * (double)fs.f_frsize : -1;
    }
    sp->stores[0] = '\0';
    sp->at_ms = tr_now_ms();
}

/* space_sizes writes what each store takes, so a refusal says which file
 * filled the disk. */
static void space_sizes(const tr_head_config *cfg, tr_commit_space *sp)
{
    const char *dirs[TR_SPACE_DIRS];

    space_dirs(cfg, dirs);
    snprintf(sp->stores, sizeof(sp->stores),
             "head.db %.2f MiB, metrics.db %.2f MiB (bound %.0f MiB), traces.db %.2f MiB (bound %.0f MiB)",
             file_mib(dirs[0], "head.db"), file_mib(dirs[1], "metrics.db"),
             (double)cfg->metrics_max_bytes / 1048576.0, file_mib(dirs[2], "traces.db"),
             (double)cfg->traces_max_bytes / 1048576.0);
}

/* space_look measures the disks of the stores and what each store takes.
 * No lock held (cfg does not change while the head runs). */
static void space_look(const tr_head_config *cfg, tr_commit_space *sp)
{
    space_free(cfg, sp);
    space_sizes(cfg, sp);
}

/* below_bound: the first store disk of sp with less than min_free_bytes
 * free, or -1 (a disk the head could not look at is not counted: its writes
 * say). */
static int below_bound(const tr_head_config *cfg, const tr_commit_space *sp)
{
    for (int i = 0; cfg->min_free_bytes > 0 && i < TR_SPACE_DIRS; i++) {
        if (sp->free_b[i] >= 0 && sp->free_b[i] < (double)cfg->min_free_bytes) {
            return i;
        }
    }
    return -1;
}

static int space_matters(const tr_head *h)
{
    return h->cfg.min_free_bytes > 0 || h->store_failing;
}

/* space_refresh looks again (h->mu held, released while looking) when the
 * look is due or force is set. */
static void space_refresh(tr_head *h, int force)
{
    tr_commit_space sp;

    if (!force && (!space_matters(h) || tr_now_ms() - h->space.at_ms < SPACE_LOOK_MS)) {
        return;
    }
    pthread_mutex_unlock(&h->mu);
    space_look(&h->cfg, &sp);
    pthread_mutex_lock(&h->mu);
    h->space = sp;
}

/* space_wait_ms: how long the writer may sleep before the next look. */
static int64_t space_wait_ms(const tr_head *h)
{
    int64_t left = h->space.at_ms + SPACE_LOOK_MS - tr_now_ms();
    return !space_matters(h) ? 60000 : left > 1 ? left : 1;
}

void tr_head_space_look(tr_head *h, tr_commit_space *sp)
{
    memset(sp, 0, sizeof(*sp));
    /* store_failing is read without h->mu (an atomic load of a flag the
     * committer stores atomically): a look missed because the store just
     * began failing costs nothing, the refusal under h->mu still sees the
     * flag and then names the committer's look. */
    if (h->cfg.min_free_bytes <= 0 && !__atomic_load_n(&h->store_failing, __ATOMIC_RELAXED)) {
        return;
    }
    space_free(&h->cfg, sp);
    /* The stores' sizes (six stat calls) only for a refusal's message. */
    if (below_bound(&h->cfg, sp) >= 0 || __atomic_load_n(&h->store_failing, __ATOMIC_RELAXED)) {
        space_sizes(&h->cfg, sp);
    }
}

/* store_refuse is tr_head_store_refuse naming the free space of sp. */
static int store_refuse(tr_head *h, tr_rpc_call *call, const tr_commit_space *sp)
{
    char space[64] = "free space unknown";

    if (!h->store_failing) {
        return 0;
    }
    if (sp->free_b[0] >= 0) {
        snprintf(space, sizeof(space), "%.1f MiB free", sp->free_b[0] / (1024.0 * 1024.0));
    }
    tr_rpc_reply_error(
        call, TROUPE_RESOURCE_EXHAUSTED,
        "the head takes no new work: it cannot save changes in %s (%s on its disk): %s; %s. "
        "Free space there (delete finished jobs, lower metrics_max_bytes/traces_max_bytes); it "
        "retries and takes work again once a write succeeds",
        h->cfg.state_dir, space, h->store_error, sp->stores);
    return 1;
}

int tr_head_store_refuse(tr_head *h, tr_rpc_call *call)
{
    return store_refuse(h, call, &h->space);
}

int tr_head_space_refuse(tr_head *h, tr_rpc_call *call, const tr_commit_space *look)
{
    const char *dirs[TR_SPACE_DIRS];
    /* A look with the stores' sizes in it can name them; one without (taken
     * while the store did not fail yet) leaves that to the committer's. */
    const tr_commit_space *sp = look->at_ms != 0 && look->stores[0] != '\0' ? look : &h->space;
    int i;

    if (store_refuse(h, call, sp)) {
        return 1;
    }
    if (look->at_ms == 0 || (i = below_bound(&h->cfg, look)) < 0) {
        return 0; /* no bound, or room on every disk now */
    }
    space_dirs(&h->cfg, dirs);
    tr_rpc_reply_error(
        call, TROUPE_RESOURCE_EXHAUSTED,
        "the head takes no new work: the disk of %s has %.2f MiB free (min_free_bytes %.2f "
        "MiB); %s. Free space there, delete finished jobs (troupe delete) or lower "
        "metrics_max_bytes/traces_max_bytes; new work is taken again once there is room",
        dirs[i], look->free_b[i] / 1048576.0, (double)h->cfg.min_free_bytes / 1048576.0, look->stores);
    return 1;
}

/* give_up: the head stops and still cannot write. Its memory goes with it,
 * so the parked callers learn that their change was not saved - which is
 * then true. (Agents keep their reports until one is acknowledged.) */
static void give_up(tr_head *h, batch *b, const tr_err *err)
{
    store_failed(h, err);
    requeue(h, b, err);
    b->waiters = h->waiters;
    h->waiters = NULL;
    h->waiters_tail = &h->waiters;
    b->events = h->events;
    h->events = NULL;
    h->events_tail = &h->events;
    TR_LOG(TR_LOG_ERR, "head stopping with %zu changes not saved: %s", tr_head_store_unsaved(h), err->msg);
    answer(h, b, TROUPE_UNAVAILABLE, err);
}

/* backoff_wait sleeps until retry_at (tr_now_ms) or a stop, looking at the
 * disks when due. */
static void backoff_wait(tr_head *h, int64_t retry_at)
{
    while (!h->commit_stop && tr_now_ms() < retry_at) {
        int64_t left = retry_at - tr_now_ms(), look = space_wait_ms(h);
        wait_cv(h, left < look ? left : look);
        space_refresh(h, 0);
    }
}

static void *committer_main(void *arg)
{
    tr_head *h = arg;
    int64_t backoff = 0;

    pthread_mutex_lock(&h->mu);
    for (;;) {
        batch b;
        tr_err err;
        int rv;
        while (!pending(h) && !h->commit_stop) {
            wait_cv(h, space_wait_ms(h));
            space_refresh(h, 0);
        }
        if (!pending(h) && h->commit_stop) {
            break;
        }
        rv = take(h, &b, &err);
        if (rv == TROUPE_OK) {
            pthread_mutex_unlock(&h->mu);
            if (tr_commit_write_hook != NULL) {
                tr_commit_write_hook();
            }
            rv = write_batch(h, &b, &err);
            pthread_mutex_lock(&h->mu);
        }
        if (rv == TROUPE_OK) {
            saved(h, &b, &err);
            space_refresh(h, 0);
            backoff = 0;
        } else if (h->commit_stop) {
            give_up(h, &b, &err);
            batch_free(&b);
            break;
        } else {
            requeue(h, &b, &err);
            store_failed(h, &err);
            space_refresh(h, 1); /* what the refusals from now on say */
            settle_readers(h);
            backoff = backoff ? (backoff * 2 > 2000 ? 2000 : backoff * 2) : 100;
            backoff_wait(h, tr_now_ms() + backoff);
        }
        batch_free(&b);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

int tr_head_commit_start(tr_head *h, const tr_commit_source *const *sources, size_t n, tr_err *err)
{
    h->commit_src = sources;
    h->n_commit_src = n;
    pthread_cond_init(&h->commit_cv, NULL);
    h->events_tail = &h->events;
    h->waiters_tail = &h->waiters;
    space_look(&h->cfg, &h->space); /* before any handler reads it */
    if (pthread_create(&h->committer, NULL, committer_main, h) != 0) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot start the state writer thread");
    }
    h->commit_started = 1;
    return TROUPE_OK;
}

void tr_head_commit_stop(tr_head *h)
{
    if (!h->commit_started) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    h->commit_stop = 1;
    wake(h);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->committer, NULL); /* flushes what is left first */
    h->commit_started = 0;
    for (size_t i = 0; i < h->n_commit_src; i++) {
        if (h->commit_src[i]->stop != NULL) {
            h->commit_src[i]->stop(h);
        }
    }
    pthread_cond_destroy(&h->commit_cv);
}
