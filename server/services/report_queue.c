/* report_queue.c - the durable writer of the report services (see
 * report_queue.h for the contract).
 *
 * Two threads. The writer takes everything queued at once (a round) and has
 * the service write it; it then hands the written round to the answerer,
 * which answers its calls and frees its items while the writer already
 * writes the next round. Answering a round (a reply frame and a send per
 * call, then the requests freed) cost as much as writing it under
 * bench/metrics, so doing both on one thread doubled a report's wait. At most
 * one written round waits for the answerer: the writer waits for the slot
 * to be free before it hands the next one over, so what is taken and not yet
 * answered is bounded by two rounds.
 *
 * One mutex, q->mu, guards the queue, its weight, the pending deletions, the
 * answerer's slot, the round counters and the flags. Neither thread holds it
 * while a callback runs, so an RPC thread queueing a report waits for a list
 * append, never for a transaction or for the answers. on_expire waits on the
 * counters: an item already taken cannot be forgotten (the RPC server frees
 * an expired call as soon as on_expire returns, at server stop), so it waits
 * until every round taken so far is answered. Lock order: h->mu, then q->mu
 * (job_deleted queues under h->mu). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "log.h"
#include "report_queue.h"

struct tr_rq {
    const tr_rq_ops *ops;
    void *arg;
    int nice; /* tr_rq_opts.nice: each thread raises its own nice by this at its start */
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* for the writer: something queued, or stop */
    pthread_cond_t acv;  /* for the answerer: a round in its slot, or stop */
    pthread_cond_t dcv;  /* a round answered (the slot is free again) */
    tr_rq_item *head, **tail;
    _Atomic size_t weight;      /* changed under mu; read anywhere (tr_rq_weight) */
    _Atomic uint64_t submitted; /* likewise (tr_rq_submitted) */
    tr_ids deleting;            /* jobs to pass to ops.deleted after the next round */
    int stop;
    uint64_t taken;    /* rounds the writer took */
    uint64_t answered; /* rounds the answerer finished; taken - answered <= 2 */
    tr_rq_item *answering; /* the answerer's slot: a written round, or NULL */
    int ans_rv;            /* its write's status */
    tr_err ans_err;        /* and error */
    int ans_stop;          /* the writer ended: the answerer ends once its slot is empty */
    pthread_t writer, answerer;
};

/* ---- job id sets --------------------------------------------------------------- */

int tr_ids_has(const tr_ids *s, uint64_t id)
{
    for (size_t i = 0; i < s->n; i++) {
        if (s->v[i] == id) {
            return 1;
        }
    }
    return 0;
}

int tr_ids_add(tr_ids *s, uint64_t id)
{
    if (tr_ids_has(s, id)) {
        return 0;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        uint64_t *grown = realloc(s->v, cap * sizeof(*grown));
        if (grown == NULL) {
            return -1;
        }
        s->v = grown;
        s->cap = cap;
    }
    s->v[s->n++] = id;
    return 0;
}

void tr_ids_fini(tr_ids *s)
{
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

/* ---- the writer ---------------------------------------------------------------- */

/* item_free ends the queue's part of an item: the reference tr_rpc_defer
 * gave, the request, the entry. */
static void item_free(tr_rq_item *it)
{
    tr_rpc_call_release(it->call);
    protobuf_c_message_free_unpacked(it->req, NULL);
    free(it);
}

/* answer_round answers every call of a written round with its write's
 * status (an OK answer always follows the commit: the round was written
 * before it came here) and frees the items, in order. */
static void answer_round(tr_rq *q, tr_rq_item *round, int rv, const tr_err *err)
{
    while (round != NULL) {
        tr_rq_item *it = round;
        round = it->next;
        q->ops->answer(q->arg, it, rv, err);
        item_free(it);
    }
}

/* lower_priority raises the calling thread's nice by q->nice (capped at 19):
 * the queue's threads do throughput work with a ~100 ms budget, and on a
 * head short of CPU (2 cores, 100,000 points/s) they would otherwise take it
 * from the RPC threads that answer Ping, status and submit. Linux keeps a
 * nice per thread: getpriority(PRIO_PROCESS, 0) reads the caller's,
 * setpriority with its thread id sets its alone (the process and its other
 * threads keep theirs), and an unprivileged process may always raise it.
 * A failure costs a warning, never the queue. */
static void lower_priority(const tr_rq *q, const char *thread)
{
    if (q->nice == 0) {
        return;
    }
#ifdef __linux__
    int cur, want;
    errno = 0;
    cur = getpriority(PRIO_PROCESS, 0);
    if (cur == -1 && errno != 0) {
        TR_LOG(TR_LOG_WARNING, "%s %s: cannot read its nice (%s); it runs at the process's", q->ops->name, thread,
               strerror(errno));
        return;
    }
    want = cur + q->nice > 19 ? 19 : cur + q->nice;
    if (setpriority(PRIO_PROCESS, (id_t)gettid(), want) != 0) {
        TR_LOG(TR_LOG_WARNING, "%s %s: cannot set nice %d (%s); it runs at %d", q->ops->name, thread, want,
               strerror(errno), cur);
    }
#else
    TR_LOG(TR_LOG_WARNING, "%s %s: ingest_nice needs Linux (a nice per thread); it runs at the process's",
           q->ops->name, thread);
#endif
}

/* wait_slot (q->mu held) waits until the answerer's slot is free. */
static void wait_slot(tr_rq *q)
{
    while (q->answering != NULL) {
        pthread_cond_wait(&q->dcv, &q->mu);
    }
}

static void *answerer_main(void *arg)
{
    tr_rq *q = arg;

    lower_priority(q, "answerer");
    tr_rpc_thread_sends_replies(); /* answer_round runs with no lock held */
    pthread_mutex_lock(&q->mu);
    for (;;) {
        tr_rq_item *round;
        tr_err err;
        int rv;
        while (q->answering == NULL && !q->ans_stop) {
            pthread_cond_wait(&q->acv, &q->mu);
        }
        if (q->answering == NULL) {
            break; /* the writer ended and everything is answered */
        }
        round = q->answering;
        rv = q->ans_rv;
        err = q->ans_err;
        pthread_mutex_unlock(&q->mu);

        answer_round(q, round, rv, &err);

        pthread_mutex_lock(&q->mu);
        q->answering = NULL; /* only now: the writer's next round and on_expire wait for it */
        q->answered++;
        pthread_cond_broadcast(&q->dcv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void *writer_main(void *arg)
{
    tr_rq *q = arg;

    lower_priority(q, "writer");
    pthread_mutex_lock(&q->mu);
    for (;;) {
        tr_rq_item *round;
        tr_ids dels;
        tr_err err = {0};
        int rv = TROUPE_OK;
        while (q->head == NULL && q->deleting.n == 0 && !q->stop) {
            pthread_cond_wait(&q->cv, &q->mu);
        }
        if (q->head == NULL && q->deleting.n == 0) {
            break; /* stopping and nothing left */
        }
        round = q->head;
        q->head = NULL;
        q->tail = &q->head;
        atomic_store(&q->weight, 0);
        dels = q->deleting;
        q->deleting = (tr_ids){0};
        q->taken += round != NULL;
        pthread_mutex_unlock(&q->mu);

        if (round != NULL) {
            rv = q->ops->write(q->arg, round, &err);
        }

        pthread_mutex_lock(&q->mu);
        if (round != NULL) {
            wait_slot(q); /* the round before is still being answered: at most one waits */
            q->answering = round;
            q->ans_rv = rv;
            q->ans_err = err;
            pthread_cond_signal(&q->acv);
        }
        if (dels.n > 0) {
            /* After the round and its answers: a report queued before the
             * deletion is written and answered before its rows go. */
            wait_slot(q);
            pthread_mutex_unlock(&q->mu);
            q->ops->deleted(q->arg, &dels);
            pthread_mutex_lock(&q->mu);
        }
        tr_ids_fini(&dels);
    }
    q->ans_stop = 1;
    pthread_cond_signal(&q->acv);
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* on_expire (the RPC server's sweeper, or its stop): a queued report whose
 * caller gave up is forgotten - nothing of it is written, and the worker
 * treats it as not acknowledged. One the writer has taken is waited for:
 * the server frees the call once this returns. */
static void on_expire(tr_rpc_call *call, void *arg)
{
    tr_rq *q = arg;
    tr_rq_item *gone = NULL;
    uint64_t until;

    pthread_mutex_lock(&q->mu);
    for (tr_rq_item **pp = &q->head; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->call == call) {
            gone = *pp;
            *pp = gone->next;
            atomic_store(&q->weight, atomic_load(&q->weight) - gone->weight);
            if (q->tail == &gone->next) {
                q->tail = pp;
            }
            break;
        }
    }
    until = q->taken; /* not queued, so taken: by one of the rounds taken so far */
    while (gone == NULL && q->answered < until) {
        pthread_cond_wait(&q->dcv, &q->mu);
    }
    pthread_mutex_unlock(&q->mu);
    if (gone != NULL) {
        item_free(gone);
    }
}

/* ---- the queue ----------------------------------------------------------------- */

int tr_rq_submit(tr_rq *q, tr_rpc_call *call, ProtobufCMessage *req, size_t weight, tr_err *err)
{
    tr_rq_item *it = calloc(1, q->ops->item_size);
    size_t queued;
    int rv = TROUPE_OK;

    if (it == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
    }
    pthread_mutex_lock(&q->mu);
    queued = atomic_load(&q->weight);
    if (queued + weight > q->ops->max_weight) {
        rv = tr_err_set(err, q->ops->full_code, "the head's %s writer is behind (%zu %s queued)%s",
                        q->ops->name, queued, q->ops->unit, q->ops->full_hint);
        goto out;
    }
    it->call = call;
    it->req = req;
    it->weight = weight;
    tr_rpc_defer(call, on_expire, q); /* under mu: an expiry waits until the item is in the queue */
    *q->tail = it;
    q->tail = &it->next;
    atomic_store(&q->weight, queued + weight);
    atomic_fetch_add(&q->submitted, 1);
    pthread_cond_broadcast(&q->cv);
out:
    pthread_mutex_unlock(&q->mu);
    if (rv != TROUPE_OK) {
        free(it);
    }
    return rv;
}

int tr_rq_delete(tr_rq *q, uint64_t job_id)
{
    int rv;

    pthread_mutex_lock(&q->mu);
    rv = tr_ids_add(&q->deleting, job_id);
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return rv;
}

size_t tr_rq_weight(tr_rq *q)
{
    return atomic_load(&q->weight);
}

uint64_t tr_rq_submitted(tr_rq *q)
{
    return atomic_load(&q->submitted);
}

int tr_rq_open(tr_rq **out, const tr_rq_ops *ops, const tr_rq_opts *opts, void *arg, tr_err *err)
{
    tr_rq *q = calloc(1, sizeof(*q));
    int rv = TROUPE_OK;

    *out = NULL;
    if (q == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    q->ops = ops;
    q->arg = arg;
    q->nice = opts != NULL ? opts->nice : 0;
    q->tail = &q->head;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    pthread_cond_init(&q->acv, NULL);
    pthread_cond_init(&q->dcv, NULL);
    if (pthread_create(&q->answerer, NULL, answerer_main, q) != 0) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot start the %s writer", ops->name);
        goto out;
    }
    if (pthread_create(&q->writer, NULL, writer_main, q) != 0) {
        pthread_mutex_lock(&q->mu);
        q->ans_stop = 1;
        pthread_cond_signal(&q->acv);
        pthread_mutex_unlock(&q->mu);
        pthread_join(q->answerer, NULL);
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot start the %s writer", ops->name);
        goto out;
    }
    *out = q;
out:
    if (rv != TROUPE_OK) {
        pthread_cond_destroy(&q->dcv);
        pthread_cond_destroy(&q->acv);
        pthread_cond_destroy(&q->cv);
        pthread_mutex_destroy(&q->mu);
        free(q);
    }
    return rv;
}

void tr_rq_close(tr_rq *q)
{
    if (q == NULL) {
        return;
    }
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->writer, NULL);
    pthread_join(q->answerer, NULL); /* ends once the writer's last round is answered */
    /* The writer ended with the queue and the deletions empty. */
    tr_ids_fini(&q->deleting);
    pthread_cond_destroy(&q->dcv);
    pthread_cond_destroy(&q->acv);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
}
