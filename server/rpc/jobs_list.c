/* jobs_list.c - bounded history: ListJobs pages and DeleteJob (the removal
 * itself and retention are jobs_retain.c's).
 *
 * A listing is a page: newest first by default, at most `limit` jobs, and
 * never more than fits in the head's frame (each job's packed size is
 * counted as it is added), with a cursor (the last id given) to go on from.
 *
 * Finished jobs do not stay forever. Once a second the reaper applies the
 * head's policy: past keep_jobs settled jobs the oldest (by id) go, and with
 * keep_days so do those that ended longer ago. `troupe delete` removes one
 * settled job at once. A deleted job leaves memory (its record, waiters and
 * node index entries), the store (record and events, in the next group
 * commit) and the disk (its log file, through the log I/O thread) together. */
#include <fnmatch.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "handlers.h"
#include "jobs.h"
#include "log.h"
#include "util.h"

#define LIST_DEFAULT 100u
#define LIST_MAX 1000u
#define FRAME_MARGIN (64u * 1024u) /* envelope, status message, length prefixes */

static int list_match(const tr_head_job *hj, const Troupe__V1__ListJobsRequest *req)
{
    int ok = req->n_states == 0;
    if (req->active_only && tr_jobs_is_terminal(hj)) {
        return 0;
    }
    for (size_t i = 0; i < req->n_states && !ok; i++) {
        ok = req->states[i] == hj->j->state;
    }
    return ok && (req->name[0] == '\0' || fnmatch(req->name, hj->j->spec->name, 0) == 0);
}

/* lower_bound returns the index of the first job with an id >= id. */
static size_t lower_bound(const tr_head *h, uint64_t id)
{
    size_t lo = 0, hi = h->n_jobs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (h->jobs[mid]->j->id < id) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* list_page fills rep with the page asked for; copies holds the shallow job
 * copies it points to (room for limit). Under h->mu. */
static void list_page(tr_head *h, const Troupe__V1__ListJobsRequest *req, size_t limit,
                      Troupe__V1__ListJobsReply *rep, Troupe__V1__Job *copies)
{
    /* Clients take frames up to their own limit, 4 MiB unless configured:
     * a page fits both that and the head's. */
    size_t budget = (size_t)h->cfg.max_frame_bytes < TR_RPC_DEFAULT_MAX_FRAME ? (size_t)h->cfg.max_frame_bytes
                                                                              : TR_RPC_DEFAULT_MAX_FRAME;
    size_t used = 0;
    int up = req->oldest_first;
    size_t k = up ? lower_bound(h, req->cursor + 1) : (req->cursor ? lower_bound(h, req->cursor) : h->n_jobs);
    uint64_t last = 0;

    budget = budget > 2 * FRAME_MARGIN ? budget - FRAME_MARGIN : budget / 2;
    while (up ? k < h->n_jobs : k > 0) {
        tr_head_job *hj = h->jobs[up ? k++ : --k];
        Troupe__V1__Job *c = &copies[rep->n_jobs];
        size_t sz;
        if (!list_match(hj, req)) {
            continue;
        }
        if (rep->n_jobs == limit) {
            rep->next_cursor = last; /* a further match exists */
            return;
        }
        *c = *hj->j; /* shallow: the listing leaves out per-worker detail and history */
        c->n_workers = 0;
        c->workers = NULL;
        c->n_events = 0;
        c->events = NULL;
        tr_head_list_fields(h, hj, c, 1); /* the services' transient fields (health) */
        sz = troupe__v1__job__get_packed_size(c) + 16;
        if (rep->n_jobs > 0 && used + sz > budget) {
            tr_head_list_fields(h, hj, c, 0);
            rep->next_cursor = last; /* the frame is full */
            return;
        }
        used += sz;
        rep->jobs[rep->n_jobs++] = c;
        last = hj->j->id;
    }
}

static void list_req_free(void *req)
{
    protobuf_c_message_free_unpacked(req, NULL);
}

static int answer_list(tr_head *h, tr_rpc_call *call, Troupe__V1__ListJobsRequest *req, int waited);

static void list_after_save(tr_head *h, tr_rpc_call *call, uint64_t arg)
{
    answer_list(h, call, (Troupe__V1__ListJobsRequest *)(uintptr_t)arg, 1);
}

/* answer_list answers a ListJobs call, showing only what is saved, as GetJob
 * does: a page with a job whose latest change is not on disk yet waits for
 * that batch once (then it is answered as it stands), and while the store
 * cannot write it is refused UNAVAILABLE, naming the job. Otherwise a state
 * the head could still lose (a job shown SUCCEEDED, then RUNNING again after
 * a crash) would be shown. Returns 0 when the call was parked: req then
 * belongs to the waiter. Under h->mu. */
static int answer_list(tr_head *h, tr_rpc_call *call, Troupe__V1__ListJobsRequest *req, int waited)
{
    Troupe__V1__ListJobsReply rep = TROUPE__V1__LIST_JOBS_REPLY__INIT;
    Troupe__V1__Job *copies = NULL;
    size_t limit = req->limit == 0 ? LIST_DEFAULT : req->limit > LIST_MAX ? LIST_MAX : req->limit;
    uint64_t unsaved = 0;
    int parked = 0;

    copies = calloc(limit, sizeof(*copies));
    rep.jobs = calloc(limit, sizeof(*rep.jobs));
    if (copies == NULL || rep.jobs == NULL) {
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
        goto out;
    }
    list_page(h, req, limit, &rep, copies);
    for (size_t i = 0; i < rep.n_jobs && unsaved == 0; i++) {
        unsaved = tr_jobs_saved(h, tr_jobs_find(h, rep.jobs[i]->id)) ? 0 : rep.jobs[i]->id;
    }
    if (unsaved != 0 && h->store_failing) {
        tr_rpc_reply_error(call, TROUPE_UNAVAILABLE,
                           "job %llu has changes the head could not save yet (state store in %s: %s); "
                           "troupe job ID shows a saved job, or list again once the store writes",
                           (unsigned long long)unsaved, h->cfg.state_dir, h->store_error);
    } else if (unsaved != 0 && !waited) {
        tr_head_after_batch(h, call, list_after_save, (uint64_t)(uintptr_t)req, list_req_free);
        parked = 1;
    } else {
        tr_rpc_reply(call, &rep.base); /* packed under h->mu: the copies borrow live records */
    }
    for (size_t i = 0; i < rep.n_jobs; i++) {
        tr_head_list_fields(h, tr_jobs_find(h, rep.jobs[i]->id), rep.jobs[i], 0);
    }
out:
    free(copies);
    free(rep.jobs);
    return !parked;
}

void tr_head_list_jobs(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__ListJobsRequest *req =
        (Troupe__V1__ListJobsRequest *)tr_rpc_unpack(call, &troupe__v1__list_jobs_request__descriptor);

    if (req == NULL) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    if (answer_list(h, call, req, 0)) {
        list_req_free(req);
    }
    pthread_mutex_unlock(&h->mu);
}

static int is_id(tr_head *h, const tr_head_job *hj, void *arg)
{
    (void)h;
    return hj->j->id == *(const uint64_t *)arg;
}

static void reply_deleted(tr_head *h, tr_rpc_call *call, uint64_t id)
{
    Troupe__V1__DeleteJobReply rep = TROUPE__V1__DELETE_JOB_REPLY__INIT;
    (void)h;
    (void)id;
    tr_rpc_reply(call, &rep.base);
}

static const char *const state_names[] = {"UNSPECIFIED", "PENDING", "RUNNING",
                                          "SUCCEEDED",   "FAILED",  "STOPPED"};

void tr_head_delete_job(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__DeleteJobRequest *req =
        (Troupe__V1__DeleteJobRequest *)tr_rpc_unpack(call, &troupe__v1__delete_job_request__descriptor);
    tr_head_job *hj;
    uint64_t id;
    tr_err err;

    if (req == NULL) {
        return;
    }
    id = req->job_id;
    pthread_mutex_lock(&h->mu);
    hj = tr_jobs_find(h, id);
    if (tr_head_store_refuse(h, call)) {
        /* answered: a deletion is a change like any other */
    } else if (hj == NULL) {
        tr_rpc_reply_error(call, TROUPE_NOT_FOUND, "no job %llu (see troupe jobs)", (unsigned long long)id);
    } else if (!tr_head_may_manage(call, hj, &err)) {
        tr_rpc_reply_error(call, err.code, "%s", err.msg);
    } else if (!tr_jobs_is_terminal(hj)) {
        tr_rpc_reply_error(call, TROUPE_FAILED_PRECONDITION,
                           "job %llu is %s; stop it first (troupe stop %llu), then delete it",
                           (unsigned long long)id, state_names[hj->j->state % 6], (unsigned long long)id);
    } else if (!tr_jobs_is_settled(hj)) {
        tr_rpc_reply_error(call, TROUPE_FAILED_PRECONDITION,
                           "job %llu is %s but its workers are still stopping; try again once they are gone",
                           (unsigned long long)id, state_names[hj->j->state % 6]);
    } else {
        tr_jobs_remove_if(h, is_id, &id);
        TR_LOG(TR_LOG_INFO, "job=%llu deleted by request", (unsigned long long)id);
        tr_head_after_commit(h, call, reply_deleted, id); /* acknowledged once on disk */
    }
    pthread_mutex_unlock(&h->mu);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}
