/* jobs_batch.c - SubmitJobs and StopJobs: many jobs in one call.
 *
 * A batch is the same work as its items sent one by one (same validation,
 * same records, same events), with three costs paid once instead of per
 * item: the round trip, the head's lock, and the wait for the group commit.
 * Submitted jobs are admitted in order and then scheduled once, which gives
 * the placement FIFO order would give one by one. Each item has its own
 * outcome; the call itself fails only when the request is unusable (too many
 * items, out of memory). The reply is sent once every accepted change is on
 * disk, like the single-job calls. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "handlers.h"
#include "jobs.h"
#include "log.h"

#define BATCH_MAX 4096u

typedef struct item {
    uint64_t id;
    int code;
    char *msg; /* owned; NULL when OK */
} item;

/* outcome: what the committer needs to answer; owned by the commit waiter. */
typedef struct outcome {
    size_t n;
    int return_jobs;
    int stop; /* answers StopJobs, else SubmitJobs */
    item items[];
} outcome;

static void outcome_free(void *p)
{
    outcome *o = p;
    for (size_t i = 0; o != NULL && i < o->n; i++) {
        free(o->items[i].msg);
    }
    free(o);
}

static outcome *outcome_new(tr_rpc_call *call, size_t n)
{
    outcome *o = calloc(1, sizeof(*o) + (n + 1) * sizeof(item));
    if (o == NULL) {
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory for a batch of %zu", n);
        return NULL;
    }
    o->n = n;
    return o;
}

static void item_fail(item *it, const tr_err *err)
{
    it->code = err->code;
    it->msg = strdup(err->msg);
}

static int too_many(tr_rpc_call *call, const char *what, size_t n)
{
    if (n <= BATCH_MAX) {
        return 0;
    }
    TR_LOG(TR_LOG_WARNING, "refused batch: %zu %s in one call; at most %u", n, what, BATCH_MAX);
    tr_rpc_reply_error(call, TROUPE_INVALID_ARGUMENT, "%zu %s in one call; at most %u (split the batch)", n,
                       what, BATCH_MAX);
    return 1;
}

/* reply_outcome runs under h->mu once the batch's changes are on disk; the
 * reply borrows the live records (packed before the lock is let go). */
static void reply_outcome(tr_head *h, tr_rpc_call *call, uint64_t arg)
{
    const outcome *o = (const outcome *)(uintptr_t)arg;
    Troupe__V1__SubmitJobsReply sub = TROUPE__V1__SUBMIT_JOBS_REPLY__INIT;
    Troupe__V1__StopJobsReply stop = TROUPE__V1__STOP_JOBS_REPLY__INIT;
    Troupe__V1__JobResult *res = calloc(o->n + 1, sizeof(*res));
    Troupe__V1__JobResult **ptrs = calloc(o->n + 1, sizeof(*ptrs));

    if (res == NULL || ptrs == NULL) {
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory answering a batch");
        goto out;
    }
    for (size_t i = 0; i < o->n; i++) {
        const tr_head_job *hj = o->items[i].code == TROUPE_OK ? tr_jobs_find(h, o->items[i].id) : NULL;
        troupe__v1__job_result__init(&res[i]);
        res[i].job_id = o->items[i].id;
        res[i].code = o->items[i].code;
        res[i].message = o->items[i].msg ? o->items[i].msg : "";
        if (hj != NULL) {
            res[i].state = hj->j->state;
            res[i].reason = hj->j->reason;
            res[i].job = o->return_jobs ? hj->j : NULL;
        }
        ptrs[i] = &res[i];
    }
    if (o->stop) {
        stop.n_results = o->n;
        stop.results = ptrs;
        tr_rpc_reply(call, &stop.base);
    } else {
        sub.n_results = o->n;
        sub.results = ptrs;
        tr_rpc_reply(call, &sub.base);
    }
out:
    free(res);
    free(ptrs);
}

void tr_head_submit_jobs(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__SubmitJobsRequest *req =
        (Troupe__V1__SubmitJobsRequest *)tr_rpc_unpack(call, &troupe__v1__submit_jobs_request__descriptor);
    outcome *o = NULL;
    tr_commit_space look;
    size_t ok = 0;

    if (req == NULL) {
        return;
    }
    if (too_many(call, "job specs", req->n_specs) || (o = outcome_new(call, req->n_specs)) == NULL) {
        goto out;
    }
    o->return_jobs = req->return_jobs;
    tr_head_space_look(h, &look); /* before h->mu: it stats the disks */
    pthread_mutex_lock(&h->mu);
    if (tr_head_space_refuse(h, call, &look)) {
        pthread_mutex_unlock(&h->mu);
        outcome_free(o);
        goto out;
    }
    for (size_t i = 0; i < req->n_specs; i++) {
        tr_err err;
        if (tr_jobs_admit(h, req->specs[i], &o->items[i].id, &err) == TROUPE_OK) {
            tr_jobs_set_owner(h, call, o->items[i].id);
            ok++;
        } else {
            item_fail(&o->items[i], &err);
        }
    }
    if (ok > 0) {
        tr_jobs_schedule(h);
    }
    if (ok < req->n_specs) {
        TR_LOG(TR_LOG_WARNING, "SubmitJobs: refused %zu of %zu jobs", req->n_specs - ok, req->n_specs);
    }
    tr_head_after_commit_owned(h, call, reply_outcome, (uint64_t)(uintptr_t)o, outcome_free);
    pthread_mutex_unlock(&h->mu);
out:
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

void tr_head_stop_jobs(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__StopJobsRequest *req =
        (Troupe__V1__StopJobsRequest *)tr_rpc_unpack(call, &troupe__v1__stop_jobs_request__descriptor);
    outcome *o = NULL;

    if (req == NULL) {
        return;
    }
    if (too_many(call, "job ids", req->n_job_ids) || (o = outcome_new(call, req->n_job_ids)) == NULL) {
        goto out;
    }
    o->stop = 1;
    pthread_mutex_lock(&h->mu);
    if (tr_head_store_refuse(h, call)) {
        pthread_mutex_unlock(&h->mu);
        outcome_free(o);
        goto out;
    }
    for (size_t i = 0; i < req->n_job_ids; i++) {
        tr_head_job *hj = tr_jobs_find(h, req->job_ids[i]);
        tr_err err;
        o->items[i].id = req->job_ids[i];
        if (hj == NULL) {
            tr_err_set(&err, TROUPE_NOT_FOUND, "no job %llu (see troupe jobs)",
                       (unsigned long long)req->job_ids[i]);
            item_fail(&o->items[i], &err);
        } else if (!tr_head_may_manage(call, hj, &err) || tr_jobs_stop(h, hj, &err) != TROUPE_OK) {
            item_fail(&o->items[i], &err);
        }
    }
    tr_head_after_commit_owned(h, call, reply_outcome, (uint64_t)(uintptr_t)o, outcome_free);
    pthread_mutex_unlock(&h->mu);
out:
    protobuf_c_message_free_unpacked(&req->base, NULL);
}
