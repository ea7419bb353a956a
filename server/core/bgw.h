/* bgw.h - the head's background workers (bgw.c), as Redis's bio.c is its
 * own: one named thread that runs a tick under a lock its owner gives,
 * sleeps with the lock released until the tick asks to run again, a poke
 * or at most a bounded wait, and stops on request within a deadline.
 *
 * The services' timers (rendezvous, job store, profile control), the health
 * judge and the head's reaper are workers: each tick answers the long polls
 * whose deadline passed (or moves node liveness along) and says when the
 * next one is due; a handler that parks an earlier deadline pokes the
 * worker. */
#ifndef TR_BGW_H
#define TR_BGW_H

#include <pthread.h>
#include <stdint.h>

#include "err.h"

typedef struct tr_bgw tr_bgw;

typedef struct tr_bgw_opts {
    const char *name;    /* the thread's name (at most 15 characters are shown), and in messages */
    pthread_mutex_t *mu; /* held while tick runs, released while the worker sleeps */
    /* tick does the work (mu held) and returns the tr_now_ms() by which it
     * wants to run again; INT64_MAX: not before a poke (or max_wait_ms). */
    int64_t (*tick)(void *arg, int64_t now);
    void *arg;
    int64_t max_wait_ms; /* the longest sleep between ticks; 0 = 1000 */
} tr_bgw_opts;

/* tr_bgw_start starts a worker running o's tick (o is copied). On success
 * *out owns it: stop it with tr_bgw_stop. RESOURCE_EXHAUSTED ("cannot start
 * the NAME") otherwise, *out NULL. Any thread, mu not held. */
int tr_bgw_start(tr_bgw **out, const tr_bgw_opts *o, tr_err *err);

/* tr_bgw_poke asks for a tick by at (tr_now_ms()): a worker sleeping past
 * it is woken. mu held. */
void tr_bgw_poke(tr_bgw *w, int64_t at);

/* tr_bgw_wake asks for a tick now, for a caller that must not take mu (a
 * connection-closed callback): it only signals the worker. A wake that comes
 * while the worker runs its tick, or is about to sleep, is lost: the next
 * tick then comes at the time the last one asked for (at most max_wait_ms
 * later), so a wake is for what the tick would find anyway, sooner. Any
 * thread, mu held or not; w must not be stopped meanwhile (the caller keeps
 * it from that, e.g. under a lock of its own that stop takes first). */
void tr_bgw_wake(tr_bgw *w);

/* tr_bgw_stop tells the worker to stop, waits for its thread to end (past
 * 10 s it logs what it waits for, and waits on: a tick never runs after
 * stop returns), and frees it. mu not held; NULL is a no-op. */
void tr_bgw_stop(tr_bgw *w);

#endif
