/* bgw.c - background workers (bgw.h).
 *
 * The worker's state (stop, the planned next tick) is guarded by the
 * owner's lock (o.mu), the one its tick runs under, so a poke from a
 * handler that holds that lock needs no lock of its own and no lock order
 * beyond the owner's. */
#include "bgw.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "util.h"

#define STOP_SAY_MS 10000 /* a stop that takes longer is logged */

struct tr_bgw {
    tr_bgw_opts o;
    char name[64];
    pthread_t thread;
    pthread_cond_t cv;
    int stop;        /* under o.mu */
    int64_t next_at; /* under o.mu: the tick's own next time */
};

static void *bgw_main(void *arg)
{
    tr_bgw *w = arg;

    pthread_setname_np(pthread_self(), w->name); /* longer than 15: refused, the thread keeps its name */
    pthread_mutex_lock(w->o.mu);
    while (!w->stop) {
        int64_t now = tr_now_ms(), wait_ms;
        struct timespec ts;
        w->next_at = w->o.tick(w->o.arg, now);
        wait_ms = w->next_at == INT64_MAX ? w->o.max_wait_ms : w->next_at - now;
        wait_ms = wait_ms < 1 ? 1 : wait_ms > w->o.max_wait_ms ? w->o.max_wait_ms : wait_ms;
        tr_abstime_in(&ts, wait_ms);
        if (!w->stop) {
            pthread_cond_timedwait(&w->cv, w->o.mu, &ts);
        }
    }
    pthread_mutex_unlock(w->o.mu);
    return NULL;
}

int tr_bgw_start(tr_bgw **out, const tr_bgw_opts *o, tr_err *err)
{
    tr_bgw *w = calloc(1, sizeof(*w));

    *out = NULL;
    if (w == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory starting the %s", o->name);
    }
    w->o = *o;
    w->o.max_wait_ms = o->max_wait_ms > 0 ? o->max_wait_ms : 1000;
    snprintf(w->name, sizeof(w->name), "%.15s", o->name);
    w->next_at = INT64_MAX;
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, bgw_main, w) != 0) {
        pthread_cond_destroy(&w->cv);
        free(w);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot start the %s", o->name);
    }
    *out = w;
    return TROUPE_OK;
}

void tr_bgw_poke(tr_bgw *w, int64_t at)
{
    if (at < w->next_at) {
        w->next_at = at;
        pthread_cond_signal(&w->cv);
    }
}

void tr_bgw_wake(tr_bgw *w)
{
    pthread_cond_signal(&w->cv); /* allowed without the mutex; see bgw.h for what may be lost */
}

void tr_bgw_stop(tr_bgw *w)
{
    struct timespec ts;

    if (w == NULL) {
        return;
    }
    pthread_mutex_lock(w->o.mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(w->o.mu);
    tr_abstime_in(&ts, STOP_SAY_MS);
    if (pthread_timedjoin_np(w->thread, NULL, &ts) == ETIMEDOUT) {
        TR_LOG(TR_LOG_ERR,
               "the %s has not stopped %d ms after it was asked (a tick still runs); waiting for it",
               w->o.name, STOP_SAY_MS);
        pthread_join(w->thread, NULL);
    }
    pthread_cond_destroy(&w->cv);
    free(w);
}
