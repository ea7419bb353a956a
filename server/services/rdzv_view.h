/* rdzv_view.h - who is who in a communicator (rdzv_view.c): the rendezvous
 * service (rdzv.c) and the job store (kv.c) resolve their callers'
 * communicators and epochs through the same view. Under h->mu. */
#ifndef TR_RDZV_VIEW_H
#define TR_RDZV_VIEW_H

#include <stdint.h>

#include "err.h"
#include "rdzv_state.h"
#include "troupe/v1/troupe.pb-c.h"

/* Defined in head.h and jobs.h; named here so this header stands alone
 * (C11 allows the typedef twice). */
typedef struct tr_head tr_head;
typedef struct tr_head_job tr_head_job;

/* A communicator as a worker sees it: its name, member groups (borrowed from
 * the job's spec), size, epoch, and the worker's rank in it. */
typedef struct tr_rdzv_view {
    char name[TR_RDZV_MAX_NAME];
    char *const *groups; /* borrowed from the spec */
    size_t n_groups;
    const char *single[1]; /* storage when the communicator is one group */
    uint32_t size, epoch, rank;
} tr_rdzv_view;

/* tr_rdzv_view_of describes communicator comm ("" = worker's group when
 * worker is given) of job j; rank is set when worker is a member.
 * NOT_FOUND for a communicator the job does not declare (the message lists
 * what it does), PERMISSION_DENIED when worker is not a member. */
int tr_rdzv_view_of(const Troupe__V1__Job *j, const char *comm, const Troupe__V1__WorkerInfo *worker,
                    tr_rdzv_view *v, tr_err *err);

/* tr_rdzv_worker_find returns job j's worker called name (borrowed from j),
 * or NULL: in one comparison where the workers are laid out group by group
 * in rank order (as placements make them), by a scan otherwise. */
const Troupe__V1__WorkerInfo *tr_rdzv_worker_find(const Troupe__V1__Job *j, const char *name);

/* tr_rdzv_resolve checks a worker call: the job exists and runs, the worker
 * is part of it at its current attempt, and the communicator is one it
 * belongs to. On OK *hj is the job and v its view. */
int tr_rdzv_resolve(tr_head *h, const Troupe__V1__WorkerRef *from, const char *comm, tr_head_job **hj,
                    tr_rdzv_view *v, tr_err *err);

/* tr_rdzv_rank_names builds "job7-policy-2 on node-b" per rank (free with
 * tr_rdzv_rank_names_free); NULL when out of memory. */
char **tr_rdzv_rank_names(const Troupe__V1__Job *j, const tr_rdzv_view *v);
void tr_rdzv_rank_names_free(char **names, uint32_t n);

const char *tr_rdzv_job_state_name(int state);

#endif
