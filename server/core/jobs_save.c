/* jobs_save.c - the job records' source for the group commit (commit.h).
 *
 * A job carries its own mark, so marking it again is O(1) however many jobs
 * a batch touches (a list scan made big batches quadratic). A mark that
 * finds no memory for the list is not lost: the job stays marked and the
 * next batch walks every job for marks. Deleted jobs are listed apart; the
 * store deletes their records and events after the batch's own events. */
#include "jobs_save.h"

#include <stdlib.h>

#include "jobs.h"
#include "log.h"

void tr_head_dirty_job(tr_head *h, uint64_t id)
{
    tr_head_job *hj = tr_jobs_find(h, id);
    if (hj == NULL) {
        return;
    }
    hj->save_seq = tr_head_change_seq(h);
    if (hj->dirty) {
        return;
    }
    hj->dirty = 1;
    if (tr_commit_ids_push(&h->dirty_jobs, id, 0) != 0) {
        h->rescan_jobs = 1;
        TR_LOG(TR_LOG_ERR, "out of memory listing job=%llu for the store; the writer walks all jobs",
               (unsigned long long)id);
    }
    tr_commit_wake(h);
}

void tr_head_forget_job(tr_head *h, uint64_t id)
{
    if (tr_commit_ids_push(&h->deleted_jobs, id, 0) != 0) {
        TR_LOG(TR_LOG_ERR, "out of memory deleting job=%llu from the store; it returns after a restart",
               (unsigned long long)id);
    }
    tr_commit_wake(h);
}

static size_t jobs_marked(const tr_head *h)
{
    size_t n = h->dirty_jobs.n + h->deleted_jobs.n;
    for (size_t i = 0; h->rescan_jobs && i < h->n_jobs; i++) {
        n += h->jobs[i]->dirty;
    }
    return n;
}

/* pack returns 0 when packed, 1 when the job is gone (nothing to write),
 * -1 when out of memory. */
static int pack(tr_head *h, tr_head_job *hj, tr_commit_rec *r)
{
    if (hj == NULL) {
        return 1;
    }
    r->src = &tr_jobs_save_source;
    r->id = hj->j->id;
    r->state = (int)hj->j->state;
    r->len = troupe__v1__job__get_packed_size(hj->j);
    if ((r->buf = tr_commit_alloc(1, r->len ? r->len : 1)) == NULL) {
        return -1;
    }
    troupe__v1__job__pack(hj->j, r->buf);
    hj->dirty = 0;
    return 0;
}

/* unpack undoes a collect that ran out of memory: the jobs it packed are
 * marked again (still listed, or found by the walk). */
static void unpack(tr_head *h, tr_commit_rec *out, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        tr_head_job *hj = tr_jobs_find(h, out[i].id);
        if (hj != NULL) {
            hj->dirty = 1;
        }
        free(out[i].buf);
        out[i].buf = NULL;
    }
}

static int jobs_collect(tr_head *h, tr_commit_rec *out, size_t *n)
{
    size_t k = *n;
    int rv = 0;

    for (size_t i = 0; rv >= 0 && i < h->dirty_jobs.n; i++) {
        rv = pack(h, tr_jobs_find(h, h->dirty_jobs.ids[i]), &out[k]);
        k += rv == 0;
    }
    /* Jobs marked while their list had no memory: listed ones were just
     * packed (mark cleared), so only those are still marked. */
    for (size_t i = 0; rv >= 0 && h->rescan_jobs && i < h->n_jobs; i++) {
        if (h->jobs[i]->dirty) {
            rv = pack(h, h->jobs[i], &out[k]);
            k += rv == 0;
        }
    }
    if (rv < 0) {
        unpack(h, out, *n, k);
        return -1;
    }
    for (size_t i = 0; i < h->deleted_jobs.n; i++) {
        out[k].src = &tr_jobs_save_source;
        out[k].id = h->deleted_jobs.ids[i];
        out[k].del = 1;
        k++;
    }
    h->dirty_jobs.n = h->deleted_jobs.n = 0;
    h->rescan_jobs = 0;
    *n = k;
    return 0;
}

static void jobs_requeue(tr_head *h, const tr_commit_rec *r)
{
    if (r->del) {
        tr_head_forget_job(h, r->id);
    } else {
        tr_head_dirty_job(h, r->id);
    }
}

static void jobs_saved(tr_head *h, const tr_commit_rec *r)
{
    tr_head_job *hj = r->del ? NULL : tr_jobs_find(h, r->id);
    if (hj != NULL) {
        tr_events_publish(h, TR_EV_JOB_SAVED, hj, NULL);
    }
}

static void jobs_stop(tr_head *h)
{
    tr_commit_ids_free(&h->dirty_jobs);
    tr_commit_ids_free(&h->deleted_jobs);
}

const tr_commit_source tr_jobs_save_source = {
    .name = "jobs",
    .id_counter = TR_ID_JOBS,
    .marked = jobs_marked,
    .collect = jobs_collect,
    .requeue = jobs_requeue,
    .saved = jobs_saved,
    .stop = jobs_stop,
};
