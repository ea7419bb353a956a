/* metrics_follow.c - long polls of GetMetrics (see metrics_follow.h).
 *
 * `troupe metrics -f` used to poll every 200 ms, which put a 200 ms floor
 * (100 ms on average) under the report -> printed latency. Now the CLI asks
 * with wait_ms, and a request that finds nothing is parked here. The writer
 * bumps `gen` after every committed round; the follower thread, woken by it
 * or by the nearest waiter's end, takes the whole list, re-runs each query
 * without holding anything of ours (tr_metrics_query takes the store's lock
 * and h->mu briefly), answers those that found points or whose wait is over,
 * and puts the others back. A round that committed only another job's
 * points costs each waiter one indexed query that finds nothing.
 *
 * A parked call can also expire (its RPC deadline, or the server stopping):
 * on_expire unlinks it, and while the follower holds the list it waits for
 * that pass to end first (the follower either answered the call, and then
 * released it, or put it back, and then on_expire finds it), so the call is
 * released exactly once. All under f->mu. */
#include "metrics_follow.h"

#include <stdlib.h>

#include "log.h"
#include "metrics.h"
#include "util.h"

typedef struct waiter {
    tr_rpc_call *call;
    Troupe__V1__GetMetricsRequest *req; /* owned */
    int64_t until;                      /* tr_now_ms() when the wait is over */
    uint64_t gen;                       /* the commits its last query saw */
    struct waiter *next;
} waiter;

struct tr_mfollow {
    tr_head *h;
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* the follower: new gen, new waiter, stop */
    pthread_cond_t done; /* on_expire: a pass ended */
    waiter *list;
    size_t n;
    uint64_t gen; /* committed rounds */
    int checking; /* the follower holds (part of) the list */
    int stop;
    pthread_t thread;
};

static void waiter_free(waiter *w)
{
    protobuf_c_message_free_unpacked(&w->req->base, NULL);
    free(w);
}

/* answer re-runs w's query and answers when there are points, an error, or
 * the wait is over (force); returns 1 when answered (w then released and
 * freed), 0 to keep waiting. */
static int answer(tr_mfollow *f, waiter *w, int force)
{
    Troupe__V1__GetMetricsReply rep;
    tr_err err;
    int rv = tr_metrics_query(f->h, w->req, &rep, &err);

    if (rv == TROUPE_OK && rep.n_points == 0 && !force) {
        tr_metrics_reply_free(&rep);
        return 0;
    }
    if (rv == TROUPE_OK) {
        tr_rpc_reply(w->call, &rep.base); /* fails harmlessly when the deadline answered it first */
    } else {
        tr_rpc_reply_error(w->call, rv, "%s", err.msg);
    }
    tr_metrics_reply_free(&rep);
    tr_rpc_call_release(w->call);
    waiter_free(w);
    return 1;
}

/* next_until: the nearest end of a wait, or 0 with none; *stale: a waiter
 * has not been asked since the last commit. */
static int64_t next_until(const tr_mfollow *f, int *stale)
{
    int64_t t = 0;
    *stale = 0;
    for (const waiter *w = f->list; w != NULL; w = w->next) {
        t = t == 0 || w->until < t ? w->until : t;
        *stale |= w->gen != f->gen;
    }
    return t;
}

static void *follow_main(void *arg)
{
    tr_mfollow *f = arg;

    pthread_mutex_lock(&f->mu);
    for (;;) {
        int stale;
        int64_t until = next_until(f, &stale), now = tr_now_ms();
        waiter *mine, *keep = NULL;
        uint64_t gen;
        if (f->stop) {
            break;
        }
        if (!stale && (until == 0 || until > now)) {
            struct timespec ts;
            if (until == 0) {
                pthread_cond_wait(&f->cv, &f->mu);
            } else {
                tr_abstime_in(&ts, until - now);
                pthread_cond_timedwait(&f->cv, &f->mu, &ts);
            }
            continue;
        }
        gen = f->gen;
        mine = f->list;
        f->list = NULL;
        f->checking = 1;
        pthread_mutex_unlock(&f->mu);

        now = tr_now_ms();
        while (mine != NULL) {
            waiter *w = mine;
            mine = w->next;
            /* Without a commit since its last query only a wait that is
             * over needs a look. */
            if ((w->gen != gen || w->until <= now) && answer(f, w, w->until <= now)) {
                continue;
            }
            w->gen = gen;
            w->next = keep;
            keep = w;
        }

        pthread_mutex_lock(&f->mu);
        f->n = 0;
        for (waiter *w = f->list; w != NULL; w = w->next) {
            f->n++; /* parked during the pass */
        }
        while (keep != NULL) {
            waiter *w = keep;
            keep = w->next;
            w->next = f->list;
            f->list = w;
            f->n++;
        }
        f->checking = 0;
        pthread_cond_broadcast(&f->done);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* on_expire: the RPC layer answered a parked call (its deadline, or the
 * server stopping); forget it here (see the narrative above). */
static void on_expire(tr_rpc_call *call, void *arg)
{
    tr_mfollow *f = arg;
    waiter *gone = NULL;

    pthread_mutex_lock(&f->mu);
    for (;;) {
        for (waiter **pp = &f->list; *pp != NULL; pp = &(*pp)->next) {
            if ((*pp)->call == call) {
                gone = *pp;
                *pp = gone->next;
                f->n--;
                break;
            }
        }
        if (gone != NULL || !f->checking) {
            break;
        }
        pthread_cond_wait(&f->done, &f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    if (gone != NULL) {
        tr_rpc_call_release(gone->call);
        waiter_free(gone);
    }
}

uint64_t tr_mfollow_gen(tr_mfollow *f)
{
    uint64_t g = 0;

    if (f != NULL) {
        pthread_mutex_lock(&f->mu);
        g = f->gen;
        pthread_mutex_unlock(&f->mu);
    }
    return g;
}

int tr_mfollow_park(tr_mfollow *f, tr_rpc_call *call, Troupe__V1__GetMetricsRequest *req, uint64_t gen)
{
    uint32_t wait_ms = req->wait_ms < TR_MFOLLOW_MAX_WAIT_MS ? req->wait_ms : TR_MFOLLOW_MAX_WAIT_MS;
    waiter *w;

    if (f == NULL || (w = calloc(1, sizeof(*w))) == NULL) {
        return -1;
    }
    pthread_mutex_lock(&f->mu);
    if (f->n >= TR_MFOLLOW_MAX_WAITERS) {
        pthread_mutex_unlock(&f->mu);
        free(w);
        return -1;
    }
    w->call = call;
    w->req = req;
    w->until = tr_now_ms() + wait_ms;
    w->gen = gen; /* a commit since the query that found nothing: asked again at once */
    w->next = f->list;
    f->list = w;
    f->n++;
    tr_rpc_defer(call, on_expire, f);
    pthread_cond_signal(&f->cv); /* its end may be the nearest, or it is stale already */
    pthread_mutex_unlock(&f->mu);
    return 0;
}

void tr_mfollow_committed(tr_mfollow *f)
{
    if (f == NULL) {
        return;
    }
    pthread_mutex_lock(&f->mu);
    f->gen++;
    if (f->list != NULL) {
        pthread_cond_signal(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
}

tr_mfollow *tr_mfollow_start(tr_head *h)
{
    tr_mfollow *f = calloc(1, sizeof(*f));

    if (f == NULL) {
        return NULL;
    }
    f->h = h;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    pthread_cond_init(&f->done, NULL);
    if (pthread_create(&f->thread, NULL, follow_main, f) != 0) {
        pthread_cond_destroy(&f->done);
        pthread_cond_destroy(&f->cv);
        pthread_mutex_destroy(&f->mu);
        free(f);
        return NULL;
    }
    return f;
}

void tr_mfollow_stop(tr_mfollow *f)
{
    if (f == NULL) {
        return;
    }
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    while (f->list != NULL) { /* none after the RPC server stopped; kept for safety */
        waiter *w = f->list;
        f->list = w->next;
        tr_rpc_call_release(w->call);
        waiter_free(w);
    }
    pthread_cond_destroy(&f->done);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}
