/* jobs_retain.c - deleting settled jobs: one at a time (DeleteJob) and by
 * the head's retention policy.
 *
 * Finished jobs do not stay forever. Once a second the reaper applies the
 * head's policy: past keep_jobs settled jobs the oldest (by id) go, and with
 * keep_days so do those that ended longer ago. `troupe delete` removes one
 * settled job at once. A deleted job leaves memory (its record, waiters and
 * node index entries), the store (record and events, in the next group
 * commit) and the disk (its log file, through the log I/O thread) together. */
#include "jobs_retain.h"

#include <stdint.h>
#include <stdlib.h>

#include "events.h"
#include "head.h"
#include "joblog.h"
#include "jobs.h"
#include "log.h"
#include "util.h"

#define RETAIN_EVERY_MS 1000

size_t tr_jobs_remove_if(tr_head *h, tr_jobs_pred pred, void *arg)
{
    size_t keep = 0, gone = 0, below = 0;

    for (size_t i = 0; i < h->n_nodes; i++) {
        tr_jobs_index_prune(&h->nodes[i]); /* no node may point at a job about to go */
    }
    for (size_t k = 0; k < h->n_jobs; k++) {
        tr_head_job *hj = h->jobs[k];
        if (!tr_jobs_is_settled(hj) || !pred(h, hj, arg)) {
            h->jobs[keep++] = hj;
            continue;
        }
        below += k < h->first_unsettled;
        /* Parked calls get the final record, then the services drop their
         * share (metrics, traces, the job store). */
        tr_events_publish(h, TR_EV_JOB_DELETED, hj, NULL);
        tr_joblog_remove(h, hj);
        tr_head_forget_job(h, hj->j->id);
        tr_jobs_free_one(hj);
        gone++;
    }
    h->n_jobs = keep;
    h->first_unsettled -= below;
    return gone;
}

typedef struct retain_arg {
    size_t excess;     /* settled jobs over keep_jobs, oldest first */
    int64_t before_ms; /* wall clock: ended before this goes; 0 = no age limit */
} retain_arg;

static int retain_pick(tr_head *h, const tr_head_job *hj, void *arg)
{
    retain_arg *r = arg;
    (void)h;
    if (r->excess > 0) {
        r->excess--;
        return 1;
    }
    return r->before_ms > 0 && hj->j->ended_ms > 0 && hj->j->ended_ms < r->before_ms;
}

void tr_jobs_retain(tr_head *h)
{
    int64_t now = tr_now_ms();
    retain_arg r = {0, 0};
    size_t settled = 0, gone;

    if (now - h->retained_ms < RETAIN_EVERY_MS) {
        return;
    }
    h->retained_ms = now;
    for (size_t k = 0; k < h->n_jobs; k++) {
        settled += tr_jobs_is_settled(h->jobs[k]);
    }
    r.excess = settled > (size_t)h->cfg.keep_jobs ? settled - (size_t)h->cfg.keep_jobs : 0;
    r.before_ms = h->cfg.keep_days > 0 ? tr_wall_ms() - h->cfg.keep_days * 86400000LL : 0;
    if (r.excess == 0 && r.before_ms == 0) {
        return;
    }
    if ((gone = tr_jobs_remove_if(h, retain_pick, &r)) > 0) {
        TR_LOG(TR_LOG_INFO, "retention: deleted jobs=%zu (keep_jobs=%lld keep_days=%lld) left=%zu", gone,
               (long long)h->cfg.keep_jobs, (long long)h->cfg.keep_days, h->n_jobs);
    }
}
