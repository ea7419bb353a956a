/*
 * troupe/nccl.h - an NCCL communicator from troupe's rendezvous in one call
 * (library troupe_nccl, built only where CUDA and NCCL are found, so that
 * libtroupe itself never depends on NCCL).
 *
 *   troupe_nccl_opts o = {.device = 0};
 *   ncclComm_t comm;
 *   troupe_nccl_info info;
 *   if (troupe_nccl_comm_init(w, &o, &comm, &info, &err) != TROUPE_OK) ... err.message
 *
 * What it does: asks the head for this worker's rank in the communicator
 * (troupe_worker_comm_info); rank 0 creates the unique ID(s) with
 * ncclGetUniqueId and publishes them, every other rank waits for them (a long
 * poll with the deadline); then ncclCommInitRankConfig with blocking=0 (or
 * ncclCommInitRankScalable when several IDs are asked for), polled with
 * ncclCommGetAsyncError until the communicator is ready or the deadline
 * passes; then a warm-up all-reduce of one float, checked to equal the
 * communicator's size, under the same deadline. The deadline covers the
 * whole call, from the rendezvous to the end of the warm-up.
 *
 * On any failure after the communicator exists it is aborted with
 * ncclCommAbort (never ncclCommDestroy, which can hang on a broken
 * communicator) and err names the communicator, the job, the epoch, the rank
 * and what it was waiting for ("NCCL communicator policy of job 7, epoch 0,
 * rank 1 of 2: ncclCommInitRankConfig still in progress after 300000 ms;
 * aborted (ncclCommAbort): a rank did not join, see troupe job 7").
 * DEADLINE_EXCEEDED when the deadline passed, UNAVAILABLE when NCCL or CUDA
 * failed, and the rendezvous' own codes (e.g. DEADLINE_EXCEEDED naming the
 * ranks that never arrived) otherwise. Before returning a failure (other
 * than INVALID_ARGUMENT) it reports it to the head with troupe_worker_fail,
 * so the job's reason names the first rank whose communicator failed.
 *
 * The communicator is non-blocking: the caller's later NCCL calls may return
 * ncclInProgress (see NCCL's documentation); abort it with ncclCommAbort
 * after errors. On success, free it with ncclCommDestroy (or
 * ncclCommFinalize first).
 */
#ifndef TROUPE_NCCL_H
#define TROUPE_NCCL_H

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/worker.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe_nccl_opts {
    const char *comm; /* communicator name; NULL or "" = the worker's group */
    int device;       /* CUDA device to make current first; -1 = keep the current one */
    uint32_t wait_ms; /* deadline of the whole call; 0 = 300000 (5 min) */
    uint32_t n_ids;   /* IDs rank 0 creates: 0/1 = ncclCommInitRankConfig, 2..16 = Scalable */
    int no_warmup;    /* 1: skip the warm-up all-reduce */
} troupe_nccl_opts;

/* What troupe_nccl_comm_init did, for logs. */
typedef struct troupe_nccl_info {
    uint32_t epoch, rank, size; /* the communicator as the head sees it */
    uint32_t n_ids;             /* IDs used (rank 0's count) */
    int published;              /* 1 on rank 0: it created and published the IDs */
    uint64_t rendezvous_ms;     /* comm info + IDs */
    uint64_t init_ms;           /* ncclCommInitRank* until ready */
    uint64_t warmup_ms;         /* warm-up all-reduce; 0 when skipped */
    char name[128];             /* "policy of job 7, epoch 0, rank 0 of 1" */
} troupe_nccl_info;

/* troupe_nccl_comm_init builds *out as described above. opts and info may be
 * NULL; *out is NULL unless OK. */
TROUPE_API troupe_status troupe_nccl_comm_init(troupe_worker_ctx *w, const troupe_nccl_opts *opts,
                                               ncclComm_t *out, troupe_nccl_info *info, troupe_error *err);

#ifdef __cplusplus
}
#endif
#endif
