/* metrics_follow.h - long polls of GetMetrics (`troupe metrics -f`): a
 * request with wait_ms > 0 that finds no point is parked here and answered
 * as soon as a writer round commits one, or with what there is (none) when
 * its wait ends. Internal to the metrics service (metrics.c). */
#ifndef TR_METRICS_FOLLOW_H
#define TR_METRICS_FOLLOW_H

#include "head.h"

#define TR_MFOLLOW_MAX_WAIT_MS 60000 /* longer waits are cut to this */
#define TR_MFOLLOW_MAX_WAITERS 1024  /* past it a request is answered at once (the client asks again) */

typedef struct tr_mfollow tr_mfollow;

/* tr_mfollow_start starts the follower thread, which re-runs the parked
 * queries (tr_metrics_query: the metrics store's lock and h->mu briefly,
 * never on an RPC thread). NULL on failure. */
tr_mfollow *tr_mfollow_start(tr_head *h);

/* tr_mfollow_stop ends the thread and frees f (NULL: nothing). Call after
 * the RPC server stopped: by then every parked call expired (and left). */
void tr_mfollow_stop(tr_mfollow *f);

/* tr_mfollow_gen: the count of committed rounds; read it before the query
 * whose empty answer leads to tr_mfollow_park, so that a commit in between
 * is not missed. */
uint64_t tr_mfollow_gen(tr_mfollow *f);

/* tr_mfollow_park defers call and keeps req (owned on success) until new
 * points match it or req->wait_ms (at most TR_MFOLLOW_MAX_WAIT_MS) has
 * passed; gen is tr_mfollow_gen's value from before the query that found
 * nothing. Returns 0, or -1 when full or out of memory (nothing taken:
 * answer the call at once). Any thread; never blocks on I/O. */
int tr_mfollow_park(tr_mfollow *f, tr_rpc_call *call, Troupe__V1__GetMetricsRequest *req, uint64_t gen);

/* tr_mfollow_committed: a writer round committed points (any job); the
 * follower re-checks its waiters. Cheap: a counter and a signal. */
void tr_mfollow_committed(tr_mfollow *f);

#endif
