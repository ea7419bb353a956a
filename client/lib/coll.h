/* coll.h - the CPU collective's transport and ring algorithms (coll.c),
 * without the head: a troupe_coll is made from (rank, size, every rank's
 * address and name), so it is unit-testable with threads on ipc://. The
 * public calls (worker_coll.c) find the addresses through the rendezvous
 * all-gather and wrap these. Not API. */
#ifndef TR_COLL_H
#define TR_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "troupe/worker.h"

/* tr_coll_listen makes rank's endpoint listening on url ("tcp://0.0.0.0:0",
 * "ipc:///path"); *port (may be NULL) receives the TCP port bound (0 for
 * ipc). timeout_ms is each later operation's deadline. On OK free *out with
 * tr_coll_close. size 1 listens on nothing (url may be NULL). */
int tr_coll_listen(troupe_coll **out, uint32_t rank, uint32_t size, const char *url, uint32_t timeout_ms,
                   int *port, tr_err *e);

/* tr_coll_connect dials the next rank and waits (timeout_ms) until the
 * previous rank has dialled this one. urls and names hold size entries by
 * rank; names ("rank 3 (job7-policy-3 on node-b)") are copied and appear in
 * every error that concerns that peer. */
int tr_coll_connect(troupe_coll *c, const char *const *urls, const char *const *names, tr_err *e);

int tr_coll_allreduce(troupe_coll *c, void *buf, size_t count, troupe_dtype dtype, troupe_redop op, tr_err *e);
/* tr_coll_reduce_scatter / tr_coll_allgather: see troupe_coll_reduce_scatter
 * and troupe_coll_allgather (worker.h); tr_coll_segment gives segment i's
 * offset (and *len) of count elements cut in size parts. */
int tr_coll_reduce_scatter(troupe_coll *c, void *buf, size_t count, troupe_dtype dtype, troupe_redop op,
                           tr_err *e);
int tr_coll_allgather(troupe_coll *c, void *buf, size_t count, troupe_dtype dtype, tr_err *e);
size_t tr_coll_segment(size_t count, uint32_t size, uint32_t i, size_t *len);
int tr_coll_broadcast(troupe_coll *c, void *buf, size_t bytes, uint32_t root, tr_err *e);
int tr_coll_barrier(troupe_coll *c, tr_err *e);

/* tr_coll_set_owner / tr_coll_owner: the worker handle the collective was
 * opened from (worker_coll.c reports failures through it); NULL in unit
 * tests that run the transport without a head. */
void tr_coll_set_owner(troupe_coll *c, troupe_worker_ctx *w);
troupe_worker_ctx *tr_coll_owner(const troupe_coll *c);

/* tr_coll_set_quiet / tr_coll_quiet: 1 = failures are not reported to the
 * head (troupe_coll_opts.no_fail_report). */
void tr_coll_set_quiet(troupe_coll *c, int quiet);
int tr_coll_quiet(const troupe_coll *c);

/* tr_coll_nng_wedged: 1 once a collective's socket release did not finish
 * within its bound (nng 1.5.2's nng_close hang, nng#1543). From then on any
 * nng_close in the process hangs as well, so troupe_worker_close closes no
 * socket and frees nothing (the process is about to exit; the threads it
 * would have stopped end with it). */
int tr_coll_nng_wedged(void);

uint32_t tr_coll_rank_of(const troupe_coll *c);
/* tr_coll_set_timeout sets the deadline of each later operation. */
void tr_coll_set_timeout(troupe_coll *c, uint32_t timeout_ms);
uint32_t tr_coll_size_of(const troupe_coll *c);

/* tr_coll_close says goodbye to both neighbours (so that data still queued
 * reaches them), waits at most timeout_ms for theirs, and frees. NULL is a
 * no-op. */
void tr_coll_close(troupe_coll *c);

/* tr_coll_abort closes without the goodbye handshake (a ring already
 * broken: a peer died); peers still inside an operation fail UNAVAILABLE.
 * NULL is a no-op. */
void tr_coll_abort(troupe_coll *c);

#endif
