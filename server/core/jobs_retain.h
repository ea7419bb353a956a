/* jobs_retain.h - deleting settled jobs: DeleteJob's and retention's
 * (jobs_retain.c). Under h->mu. */
#ifndef TR_JOBS_RETAIN_H
#define TR_JOBS_RETAIN_H

#include <stddef.h>

/* Defined in head.h and jobs.h; named here so this header stands alone
 * (C11 allows the typedef twice). */
typedef struct tr_head tr_head;
typedef struct tr_head_job tr_head_job;

/* tr_jobs_retain deletes settled jobs past keep_jobs / keep_days (at most
 * once a second). */
void tr_jobs_retain(tr_head *h);
/* tr_jobs_remove_if deletes every settled job pred picks, in one pass over
 * the job array, from memory now and from the store in the next batch
 * (TR_EV_JOB_DELETED first); returns how many went. */
typedef int (*tr_jobs_pred)(tr_head *h, const tr_head_job *hj, void *arg);
size_t tr_jobs_remove_if(tr_head *h, tr_jobs_pred pred, void *arg);

#endif
