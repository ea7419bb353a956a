/* comm_troupe.h - communicators of troupe-train under troupe (see comm.h):
 * the worker API's CPU collective, and NCCL on CUDA builds. */
#ifndef TR_TRAIN_COMM_TROUPE_H
#define TR_TRAIN_COMM_TROUPE_H

#include <stdint.h>

#include "comm.h"
#include "troupe/worker.h"

/* tr_comm_coll_open joins the CPU collective of the worker's group: joining
 * (every rank's address through the head) under init_ms, each later
 * operation under op_ms. */
int tr_comm_coll_open(troupe_worker_ctx *w, uint32_t init_ms, uint32_t op_ms, tr_comm **out, tr_err *err);

/* tr_comm_coll_open_named joins the CPU collective of communicator comm
 * (NULL = the worker's group; else one of the job's `communicators:`, e.g.
 * the refit's across the policy and generation groups). quiet: its failures
 * are not reported to the head (the caller reports, or rejoins). */
int tr_comm_coll_open_named(troupe_worker_ctx *w, const char *comm, uint32_t init_ms, uint32_t op_ms, int quiet,
                            tr_comm **out, tr_err *err);

#ifdef TR_HAVE_NCCL
/* tr_comm_nccl_open builds the group's NCCL communicator on CUDA device gpu
 * through troupe_nccl_comm_init (rendezvous, init and warm-up under init_ms)
 * and logs it; each later operation has op_ms. */
int tr_comm_nccl_open(troupe_worker_ctx *w, int gpu, uint32_t init_ms, uint32_t op_ms, tr_comm **out,
                      tr_err *err);

/* tr_comm_nccl_handle returns c's ncclComm_t (as void *), or NULL when c is
 * not an NCCL communicator: for bench/mgpu, which times plain NCCL calls on
 * the very communicator troupe-train's gradient buckets use. */
void *tr_comm_nccl_handle(tr_comm *c);

/* tr_comm_nccl_open_named builds the NCCL communicator of comm (NULL = the
 * worker's group; else one of the job's `communicators:`). */
int tr_comm_nccl_open_named(troupe_worker_ctx *w, const char *comm, int gpu, uint32_t init_ms, uint32_t op_ms,
                            tr_comm **out, tr_err *err);

/* tr_comm_nccl_open_quiet is tr_comm_nccl_open_named whose failures are not
 * reported to the head when quiet (an elastic group goes on without the
 * peer that is gone; the caller rejoins). */
int tr_comm_nccl_open_quiet(troupe_worker_ctx *w, const char *comm, int gpu, uint32_t init_ms, uint32_t op_ms,
                            int quiet, tr_comm **out, tr_err *err);
#endif

#endif
