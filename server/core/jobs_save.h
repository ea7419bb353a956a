/* jobs_save.h - the job records' part in the group commit (jobs_save.c):
 * which jobs changed or went since the last batch, packed for head.db.
 * Under h->mu. */
#ifndef TR_JOBS_SAVE_H
#define TR_JOBS_SAVE_H

#include <stdint.h>

#include "commit.h"

/* tr_jobs_save_source: registered with the committer by head.c. */
extern const tr_commit_source tr_jobs_save_source;

/* tr_head_dirty_job marks job id for the next batch (O(1): the job carries
 * its mark) and records that batch as the one carrying its latest change. */
void tr_head_dirty_job(tr_head *h, uint64_t id);
/* tr_head_forget_job: the next batch deletes the job's record and events. */
void tr_head_forget_job(tr_head *h, uint64_t id);

#endif
