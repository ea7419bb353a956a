/* worker_elastic.c - a member of an elastic group learns its new place
 * (troupe_worker_await_membership) after the head shrank the group.
 *
 * The control thread (worker_steps.c) carries the membership in every
 * WorkerControl reply and names the epoch it knows in each poll, so the
 * head answers the poll the moment the epoch moves on; it stores what it
 * got under w->mu and signals member_cv. A wait here sleeps on that
 * condition. It also asks the head directly (CommIds describe) every
 * ASK_MS, which is the only source when the control thread is off and a
 * second one when the poll is between calls; that ask says the worker is
 * waiting, so the head's health judge does not take a rank blocked on a
 * stalled peer for the stalled one. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "coll.h"
#include "worker_int.h"

#define SLICE_MS 50
#define ASK_MS 500

static troupe_status finish(troupe_error *err, const tr_err *e, int rv)
{
    return tr_client_finish(err, e, rv);
}

static void until_ts(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_nsec += (long)ms * 1000000L;
    ts->tv_sec += ts->tv_nsec / 1000000000L;
    ts->tv_nsec %= 1000000000L;
}

/* told: what the control poll said, when it is news past after_epoch. */
static int told(troupe_worker_ctx *w, uint32_t after_epoch, troupe_comm_info *info, int *removed)
{
    int news;

    pthread_mutex_lock(&w->mu);
    news = w->member_known && (w->member_removed || w->member.epoch > after_epoch);
    if (news) {
        *info = w->member;
        *removed = w->member_removed;
    }
    pthread_mutex_unlock(&w->mu);
    return news;
}

/* ask asks the head itself; 1 with info when the epoch moved past after_epoch,
 * -1 (e set) when the head refuses this worker (removed, job over). */
static int ask(troupe_worker_ctx *w, uint32_t after_epoch, troupe_comm_info *info, tr_err *e)
{
    tr_err te = {0};
    troupe_comm_info now;
    int rv = tr_wk_describe(w, NULL, 1, &now, &te);

    if (rv == TROUPE_FAILED_PRECONDITION || rv == TROUPE_PERMISSION_DENIED || rv == TROUPE_NOT_FOUND) {
        tr_err_set(e, TROUPE_FAILED_PRECONDITION, "%s", te.msg);
        return -1;
    }
    if (rv == TROUPE_OK && now.epoch > after_epoch) {
        *info = now;
        return 1;
    }
    return 0; /* the head away for now, or no news */
}

TROUPE_API troupe_status troupe_worker_await_membership(troupe_worker_ctx *w, uint32_t after_epoch, uint32_t wait_ms,
                                                        troupe_comm_info *info, troupe_error *err)
{
    int64_t start = tr_now_ms(), deadline, next_ask = 0;
    int removed = 0, got = 0;
    tr_err e = {0};

    if (info == NULL || w == NULL) {
        return finish(err, &e, tr_err_set(&e, TROUPE_INVALID_ARGUMENT, "%s is NULL", w ? "info" : "w"));
    }
    memset(info, 0, sizeof(*info));
    deadline = start + (wait_ms ? wait_ms : w->wait_ms);
    while (!got) {
        int64_t now = tr_now_ms();
        struct timespec ts;

        if ((got = told(w, after_epoch, info, &removed)) != 0) {
            break;
        }
        if (atomic_load(&w->stop_requested)) {
            return finish(err, &e,
                          tr_err_set(&e, TROUPE_FAILED_PRECONDITION,
                                     "worker %s was asked to stop (its job is ending, or it left its group)",
                                     w->worker));
        }
        if (now >= next_ask) {
            int a = ask(w, after_epoch, info, &e);
            if (a < 0) {
                return finish(err, &e, TROUPE_FAILED_PRECONDITION);
            }
            if (a > 0) {
                got = 1;
                break;
            }
            next_ask = tr_now_ms() + ASK_MS;
        }
        if (tr_now_ms() >= deadline) {
            return finish(err, &e,
                          tr_err_set(&e, TROUPE_DEADLINE_EXCEEDED,
                                     "group %s: no membership after epoch %u within %lld ms (the head decides one "
                                     "once it learns a rank is gone: see troupe job %llu)",
                                     w->group, after_epoch, (long long)(tr_now_ms() - start),
                                     (unsigned long long)w->self.job_id));
        }
        pthread_mutex_lock(&w->mu);
        until_ts(&ts, SLICE_MS);
        (void)pthread_cond_timedwait(&w->member_cv, &w->mu, &ts);
        pthread_mutex_unlock(&w->mu);
    }
    if (removed) {
        return finish(err, &e,
                      tr_err_set(&e, TROUPE_FAILED_PRECONDITION,
                                 "worker %s is no longer a member of group %s (epoch %u): it stops", w->worker,
                                 w->group, info->epoch));
    }
    return finish(err, &e, TROUPE_OK);
}

TROUPE_API troupe_status troupe_worker_membership(troupe_worker_ctx *w, troupe_comm_info *info, troupe_error *err)
{
    tr_err e = {0};
    int known, removed;

    if (info == NULL || w == NULL) {
        return finish(err, &e, tr_err_set(&e, TROUPE_INVALID_ARGUMENT, "%s is NULL", w ? "info" : "w"));
    }
    pthread_mutex_lock(&w->mu);
    known = w->member_known;
    removed = w->member_removed;
    *info = w->member;
    pthread_mutex_unlock(&w->mu);
    if (!known) {
        memset(info, 0, sizeof(*info));
        return finish(err, &e,
                      tr_err_set(&e, TROUPE_NOT_FOUND,
                                 "no membership known for group %s (not elastic, or the control poll has not "
                                 "answered yet)",
                                 w->group));
    }
    if (removed) {
        return finish(err, &e,
                      tr_err_set(&e, TROUPE_FAILED_PRECONDITION, "worker %s is no longer a member of group %s",
                                 w->worker, w->group));
    }
    return finish(err, &e, TROUPE_OK);
}

TROUPE_API void troupe_coll_abort(troupe_coll *c)
{
    tr_coll_abort(c);
}
