/* rdzv_int.h - internals shared by rdzv.c (calls, state keeping) and
 * rdzv_view.c (who is who in a communicator); the job store (kv.c) resolves
 * its callers' communicators and epochs through the same view. */
#ifndef TR_RDZV_INT_H
#define TR_RDZV_INT_H

#include <pthread.h>
#include <stdint.h>

#include "head.h"
#include "jobs.h"
#include "rdzv_state.h"

typedef struct tr_rdzv_job {
    uint64_t id;
    tr_rdzv_comm **comms; /* communicators called about, at their current epoch */
    size_t n_comms;
} tr_rdzv_job;

typedef struct tr_rdzv_svc {
    tr_head *h;
    tr_rdzv_job **jobs; /* by id */
    size_t n_jobs, cap_jobs;
    pthread_t timer;
    pthread_cond_t cv; /* with h->mu: a new earliest deadline, or stop */
    int stop, timer_started;
    int64_t next_until;
    /* decorate: the RdzvStatus messages lent to a reply (freed at on = 0) */
    Troupe__V1__RdzvStatus **status;
    size_t n_status;
    char **status_strings;
    size_t n_strings;
} tr_rdzv_svc;

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

/* tr_rdzv_svc_of finds the service's state from the head (handlers' user). */
tr_rdzv_svc *tr_rdzv_svc_of(void *head);

#endif
