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
 * waiter releases its call). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jobs.h"
#include "log.h"
#include "util.h"

typedef struct tr_commit_waiter {
    tr_rpc_call *call;
    tr_commit_fn fn;
    uint64_t arg;
    void (*drop)(void *); /* frees arg (a pointer) whatever happens; may be NULL */
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

typedef struct rec {
    const char *table;
    uint64_t id;
    int state;
    uint8_t *buf;
    size_t len;
} rec;

static int push_id(uint64_t **arr, size_t *n, size_t *cap, uint64_t id, int scan)
{
    for (size_t i = 0; scan && i < *n; i++) {
        if ((*arr)[i] == id) {
            return 0; /* already marked: written once per batch */
        }
    }
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        uint64_t *p = realloc(*arr, c * sizeof(*p));
        if (p == NULL) {
            return -1;
        }
        *arr = p;
        *cap = c;
    }
    (*arr)[(*n)++] = id;
    return 0;
}

static void wake(tr_head *h)
{
    pthread_cond_signal(&h->commit_cv);
}

/* A job carries its own mark, so marking it again is O(1) however many jobs
 * a batch touches (a list scan made big batches quadratic); nodes change
 * rarely and keep the scan. */
void tr_head_dirty_job(tr_head *h, uint64_t id)
{
    tr_head_job *hj = tr_jobs_find(h, id);
    if (hj == NULL || hj->dirty) {
        return;
    }
    hj->dirty = 1;
    if (push_id(&h->dirty_jobs, &h->n_dirty_jobs, &h->cap_dirty_jobs, id, 0) != 0) {
        hj->dirty = 0;
        TR_LOG(TR_LOG_ERR, "out of memory marking job=%llu for the store", (unsigned long long)id);
    }
    wake(h);
}

void tr_head_dirty_node(tr_head *h, uint64_t id)
{
    if (push_id(&h->dirty_nodes, &h->n_dirty_nodes, &h->cap_dirty_nodes, id, 1) != 0) {
        TR_LOG(TR_LOG_ERR, "out of memory marking node=%llu for the store", (unsigned long long)id);
    }
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

void tr_head_after_commit(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg)
{
    tr_head_after_commit_owned(h, call, fn, arg, NULL);
}

void tr_head_after_commit_owned(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg,
                                void (*drop)(void *))
{
    tr_commit_waiter *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
        if (drop != NULL) {
            drop((void *)(uintptr_t)arg);
        }
        return;
    }
    w->call = call;
    w->fn = fn;
    w->arg = arg;
    w->drop = drop;
    *h->waiters_tail = w;
    h->waiters_tail = &w->next;
    tr_rpc_defer(call, on_waiter_expire, h);
    wake(h);
}

static int pack_job(tr_head *h, uint64_t id, rec *r)
{
    tr_head_job *hj = tr_jobs_find(h, id);
    if (hj == NULL) {
        return -1;
    }
    hj->dirty = 0;
    r->table = "jobs";
    r->id = id;
    r->state = (int)hj->j->state;
    r->len = troupe__v1__job__get_packed_size(hj->j);
    r->buf = malloc(r->len ? r->len : 1);
    if (r->buf != NULL) {
        troupe__v1__job__pack(hj->j, r->buf);
    }
    return r->buf ? 0 : -1;
}

static int pack_node(tr_head *h, uint64_t id, rec *r)
{
    tr_head_node *hn = tr_head_node_find(h, id);
    if (hn == NULL) {
        return -1;
    }
    r->table = "nodes";
    r->id = id;
    r->state = (int)hn->n->state;
    r->len = troupe__v1__node__get_packed_size(hn->n);
    r->buf = malloc(r->len ? r->len : 1);
    if (r->buf != NULL) {
        troupe__v1__node__pack(hn->n, r->buf);
    }
    return r->buf ? 0 : -1;
}

typedef struct batch {
    rec *recs;
    size_t n;
    tr_head_ev *events;
    tr_commit_waiter *waiters;
    uint64_t next_id[2];
    int ids;
} batch;

/* take moves everything marked so far into b. Caller holds h->mu. */
static void take(tr_head *h, batch *b)
{
    memset(b, 0, sizeof(*b));
    b->recs = calloc(h->n_dirty_jobs + h->n_dirty_nodes + 1, sizeof(*b->recs));
    for (size_t i = 0; b->recs != NULL && i < h->n_dirty_jobs; i++) {
        b->n += pack_job(h, h->dirty_jobs[i], &b->recs[b->n]) == 0;
    }
    for (size_t i = 0; b->recs != NULL && i < h->n_dirty_nodes; i++) {
        b->n += pack_node(h, h->dirty_nodes[i], &b->recs[b->n]) == 0;
    }
    h->n_dirty_jobs = h->n_dirty_nodes = 0;
    b->events = h->events;
    h->events = NULL;
    h->events_tail = &h->events;
    b->waiters = h->waiters;
    h->waiters = NULL;
    h->waiters_tail = &h->waiters;
    b->ids = h->ids_dirty;
    h->ids_dirty = 0;
    memcpy(b->next_id, h->next_id, sizeof(b->next_id));
}

/* write_batch runs one transaction; returns OK only after COMMIT. */
static int write_batch(tr_head *h, const batch *b, tr_err *err)
{
    int rv = tr_store_begin(h->store, err);
    for (size_t i = 0; rv == TROUPE_OK && i < b->n; i++) {
        rv = tr_store_put(h->store, b->recs[i].table, b->recs[i].id, b->recs[i].state, b->recs[i].buf,
                          b->recs[i].len, err);
    }
    for (const tr_head_ev *e = b->events; rv == TROUPE_OK && e != NULL; e = e->next) {
        rv = tr_store_event(h->store, e->kind, e->node, e->job, e->msg, err);
    }
    if (rv == TROUPE_OK && b->ids) {
        rv = tr_store_set_next_id(h->store, "nodes", b->next_id[0], err);
        if (rv == TROUPE_OK) {
            rv = tr_store_set_next_id(h->store, "jobs", b->next_id[1], err);
        }
    }
    if (rv == TROUPE_OK) {
        return tr_store_commit(h->store, err);
    }
    tr_store_rollback(h->store);
    return rv;
}

static void batch_free(batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        free(b->recs[i].buf);
    }
    free(b->recs);
    while (b->events != NULL) {
        tr_head_ev *e = b->events;
        b->events = e->next;
        free(e->kind);
        free(e->msg);
        free(e);
    }
}

/* answer sends the parked replies (under h->mu: fn reads live state). */
static void answer(tr_head *h, batch *b, int rv, const tr_err *err)
{
    while (b->waiters != NULL) {
        tr_commit_waiter *w = b->waiters;
        b->waiters = w->next;
        if (rv == TROUPE_OK) {
            w->fn(h, w->call, w->arg);
        } else {
            tr_rpc_reply_error(w->call, TROUPE_UNAVAILABLE, "state store failed, change not saved: %s",
                               err->msg);
        }
        tr_rpc_call_release(w->call);
        waiter_free(w);
    }
}

static int pending(const tr_head *h)
{
    return h->n_dirty_jobs || h->n_dirty_nodes || h->events || h->waiters || h->ids_dirty;
}

static void *committer_main(void *arg)
{
    tr_head *h = arg;

    pthread_mutex_lock(&h->mu);
    for (;;) {
        batch b;
        tr_err err;
        int rv;
        while (!pending(h) && !h->commit_stop) {
            pthread_cond_wait(&h->commit_cv, &h->mu);
        }
        if (!pending(h) && h->commit_stop) {
            break;
        }
        take(h, &b);
        pthread_mutex_unlock(&h->mu);
        rv = write_batch(h, &b, &err);
        if (rv != TROUPE_OK) {
            TR_LOG(TR_LOG_ERR, "state store: batch of %zu records not written: %s", b.n, err.msg);
        }
        pthread_mutex_lock(&h->mu);
        h->batches++;
        h->batched_records += b.n;
        answer(h, &b, rv, &err);
        batch_free(&b);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

int tr_head_commit_start(tr_head *h, tr_err *err)
{
    pthread_cond_init(&h->commit_cv, NULL);
    h->events_tail = &h->events;
    h->waiters_tail = &h->waiters;
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
    free(h->dirty_jobs);
    free(h->dirty_nodes);
    h->dirty_jobs = h->dirty_nodes = NULL;
    pthread_cond_destroy(&h->commit_cv);
}
