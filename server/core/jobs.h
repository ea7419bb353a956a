/* jobs.h - troupe-head's jobs: lifecycle, placement, node assignments.
 *
 * A job's durable record is its troupe.v1.Job message (owned, unpacked; the
 * same bytes go to SQLite). Everything here runs under h->mu. */
#ifndef TR_JOBS_H
#define TR_JOBS_H

#include "head.h"
#include "joblog.h"
#include "jobs_retain.h"
#include "jobs_save.h"
#include "records.h"
#include "sched/sched.h"

typedef struct tr_head_wait {
    tr_rpc_call *call;
    uint64_t after_version; /* GetJob: answer when the version moves past this */
    uint64_t offset;        /* GetLogs */
    uint32_t max_bytes;
    char worker[96];
    uint64_t job_id; /* GetLogs */
    int deferred;    /* tr_rpc_defer was called */
    int64_t until;   /* tr_now_ms() when to answer anyway */
    struct tr_head_wait *next;
} tr_head_wait;

typedef struct tr_head_job {
    Troupe__V1__Job *j;
    tr_sched_placement *pl; /* while GPUs are held; owned by h->sched */
    /* The scheduler's view of j->spec (arrays owned here). */
    tr_sched_job_spec sspec;
    int *vnodes;
    tr_sched_label *sel;
    tr_sched_group_spec *groups;
    uint64_t *issued; /* per worker: its node's version when assigned */
    /* Per worker (n_awaiting of them, made on first use): tr_now_ms() when it
     * last asked for a new membership of its elastic group, blocked on its
     * peers (health.c does not take it for a stalled rank). Memory only. */
    int64_t *awaiting_ms;
    size_t n_awaiting;
    int64_t deadline; /* tr_now_ms() timeout; 0 = none */
    int requeue;      /* back to PENDING once the GPUs are released */
    int64_t not_before; /* tr_now_ms(): a lost node's lease still runs (fencing) */
    int dirty;        /* marked for the next group commit (jobs_save.c) */
    tr_job_log log; /* joblog.c */
    tr_head_wait *job_waiters;
    tr_head_wait *log_waiters;
    uint64_t save_seq; /* the batch carrying its latest change (jobs_save.c) */
    size_t sync_oversize; /* a worker's assignment that fits no NodeSync reply (bytes); 0 = none */
} tr_head_job;

int tr_jobs_init(tr_head *h, tr_err *err); /* scheduler, recovery */
void tr_jobs_fini(tr_head *h);
void tr_jobs_tick(tr_head *h); /* timeouts, waiter expiry; under h->mu */
/* tr_jobs_free_one frees a job already taken out of h->jobs. */
void tr_jobs_free_one(tr_head_job *hj);

/* Registry hooks (nodes.c), under h->mu. */
void tr_jobs_node_added(tr_head *h, const Troupe__V1__Node *n);
void tr_jobs_node_state(tr_head *h, const Troupe__V1__Node *n);
/* tr_jobs_node_gone opens the node grace: a node that was live is now LEFT or
 * DEAD (state); jobs no live node could hold wait restart_grace_ms for it. */
void tr_jobs_node_gone(tr_head *h, const char *name, const char *state);
uint32_t tr_jobs_node_free_gpus(tr_head *h, uint64_t node_id);
/* tr_jobs_node_free_cpu_milli: the node's free CPU slots, in thousandths. */
uint32_t tr_jobs_node_free_cpu_milli(tr_head *h, uint64_t node_id);

/* Internals shared by jobs*.c. */
/* tr_jobs_admit validates and records a job as PENDING without scheduling
 * (a batch admits all, then schedules once); tr_jobs_submit does both. */
int tr_jobs_admit(tr_head *h, const Troupe__V1__JobSpec *spec, uint64_t *id, tr_err *err);
int tr_jobs_submit(tr_head *h, const Troupe__V1__JobSpec *spec, uint64_t *id, tr_err *err);

/* tr_jobs_set_owner records the caller as job id's owner (Job.owner), right
 * after it was admitted. Caller holds h->mu. */
void tr_jobs_set_owner(tr_head *h, tr_rpc_call *call, uint64_t id);
int tr_jobs_stop(tr_head *h, tr_head_job *hj, tr_err *err);
void tr_jobs_touch(tr_head *h, tr_head_job *hj); /* version++, persist, wake waiters */

void tr_jobs_schedule(tr_head *h);
/* tr_jobs_apply_reports merges a node's reports; returns how many workers'
 * output (and with it their state) the head could not take now
 * (max_log_memory_bytes): the report must not be acknowledged. */
int tr_jobs_apply_reports(tr_head *h, tr_head_node *hn, const Troupe__V1__NodeSyncRequest *req);
/* tr_jobs_first_unsettled returns the index below which every job is
 * settled; loops over live jobs start there. */
size_t tr_jobs_first_unsettled(tr_head *h);
void tr_jobs_node_bump(tr_head *h, uint64_t node_id);
/* tr_jobs_index_add lists hj on every node it has a worker record on (once
 * per node); called whenever records are made or recovered. */
void tr_jobs_index_add(tr_head *h, tr_head_job *hj);
/* tr_jobs_index_prune drops settled jobs from a node's list. */
void tr_jobs_index_prune(tr_head_node *hn);
/* tr_jobs_sync_bumped after a node's assignment version moved: the version
 * is told to its agent once the batch carrying it is saved. */
void tr_jobs_sync_bumped(tr_head *h, tr_head_node *hn);
void tr_jobs_set_str(char **field, const char *s);
void tr_jobs_worker_ended(tr_head *h, tr_head_job *hj, size_t idx);
/* tr_jobs_backoff_ms: the crash-loop back-off after `level` quick failures
 * in a row (restart_backoff_ms doubled per failure after the first, at most
 * restart_backoff_max_ms). */
int64_t tr_jobs_backoff_ms(const tr_head *h, uint32_t level);
/* tr_jobs_ran_well: w ran at least twice restart_backoff_max_ms before it
 * ended, so its end does not continue a crash loop. */
int tr_jobs_ran_well(const tr_head *h, const Troupe__V1__WorkerInfo *w);
/* tr_jobs_awaiting notes that worker `name` of hj asks for a new membership
 * of its elastic group now; tr_jobs_awaited_ms says when worker idx last did
 * (0 = never). Under h->mu. */
void tr_jobs_awaiting(tr_head_job *hj, const char *name);
int64_t tr_jobs_awaited_ms(const tr_head_job *hj, size_t idx);
/* tr_jobs_note records a lifecycle step (JobEvent kind + message) in the job's
 * history, the event table and the head's log; touches the job. */
void tr_jobs_note(tr_head *h, tr_head_job *hj, const char *kind, const char *msg);
/* tr_jobs_first_failure: the earliest failure report (Job.failures) of a
 * worker still at the attempt it reported from, or NULL. */
const Troupe__V1__WorkerFailure *tr_jobs_first_failure(const tr_head_job *hj);
/* tr_jobs_failure_text: "rank 2 of group dp (job7-dp-2 on node-b, attempt 0)
 * failed first: UNAVAILABLE: ...". */
void tr_jobs_failure_text(const Troupe__V1__WorkerFailure *f, char *buf, size_t size);
/* tr_jobs_worker_failed: worker idx failed for why (health.c: a stall with
 * on_stall: fail); its group restarts if restarts remain, else the job
 * fails. Nothing for a job that ended. */
void tr_jobs_worker_failed(tr_head *h, tr_head_job *hj, size_t idx, const char *why);

#endif
