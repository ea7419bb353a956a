/* jobs_rpc.c - SubmitJob, GetJob (long poll), StopJob, GetLogs
 * (long poll for `troupe logs -f`).
 *
 * Long polls are deferred RPC calls kept on the job (job_waiters,
 * log_waiters), answered when the job changes, when new log lines arrive, or
 * when their wait is over (tr_jobs_tick). A waiter is owned by whoever
 * unlinks it from its list under h->mu: that one answers and releases it.
 *
 * A job is shown only as it is on disk: GetJob on a job with changes not yet
 * saved waits for the batch that carries them (commit.c), and long polls are
 * answered once the job is saved, so no client sees a state that a restart
 * could take back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "handlers.h"
#include "jobs.h"
#include "log.h"
#include "util.h"

static void reply_submitted(tr_head *h, tr_rpc_call *call, uint64_t id)
{
    Troupe__V1__SubmitJobReply rep = TROUPE__V1__SUBMIT_JOB_REPLY__INIT;
    tr_head_job *hj = tr_jobs_find(h, id);
    rep.job_id = id;
    rep.state = hj ? hj->j->state : TROUPE__V1__JOB_STATE__JOB_STATE_UNSPECIFIED;
    rep.reason = hj ? hj->j->reason : "";
    tr_rpc_reply(call, &rep.base);
}

static void reply_stopped(tr_head *h, tr_rpc_call *call, uint64_t id)
{
    Troupe__V1__StopJobReply rep = TROUPE__V1__STOP_JOB_REPLY__INIT;
    tr_head_job *hj = tr_jobs_find(h, id);
    rep.state = hj ? hj->j->state : TROUPE__V1__JOB_STATE__JOB_STATE_UNSPECIFIED;
    rep.reason = hj ? hj->j->reason : "";
    tr_rpc_reply(call, &rep.base);
}

void tr_head_submit_job(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__SubmitJobRequest *req =
        (Troupe__V1__SubmitJobRequest *)tr_rpc_unpack(call, &troupe__v1__submit_job_request__descriptor);
    tr_commit_space look;
    uint64_t id = 0;
    tr_err err;
    int rv;

    if (req == NULL) {
        return;
    }
    if (req->spec == NULL) {
        TR_LOG(TR_LOG_WARNING, "refused job: SubmitJob without a spec");
        tr_rpc_reply_error(call, TROUPE_INVALID_ARGUMENT, "SubmitJob: spec is missing");
        goto out;
    }
    tr_head_space_look(h, &look); /* before h->mu: it stats the disks */
    pthread_mutex_lock(&h->mu);
    if (tr_head_space_refuse(h, call, &look)) {
        pthread_mutex_unlock(&h->mu);
        goto out;
    }
    rv = tr_jobs_submit(h, req->spec, &id, &err);
    if (rv == TROUPE_OK) {
        tr_jobs_set_owner(h, call, id);
        tr_head_after_commit(h, call, reply_submitted, id); /* acknowledged once on disk */
    }
    pthread_mutex_unlock(&h->mu);
    if (rv != TROUPE_OK) {
        TR_LOG(TR_LOG_WARNING, "refused job name=%s: %s", req->spec->name, err.msg);
        tr_rpc_reply_error(call, rv, "%s", err.msg);
    }
out:
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* reply_job: callers wrap it in tr_head_decorate, so the services' transient
 * fields (rendezvous waits) travel with the job. */
static void reply_job(tr_rpc_call *call, tr_head_job *hj)
{
    Troupe__V1__GetJobReply rep = TROUPE__V1__GET_JOB_REPLY__INIT;
    rep.job = hj->j; /* borrowed; packed under h->mu */
    tr_rpc_reply(call, &rep.base);
}

static void waiter_unlink(tr_head_wait **list, tr_head_wait *w)
{
    for (tr_head_wait **pp = list; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            return;
        }
    }
}

/* on_wait_expire: the RPC layer answered a waiter at its deadline; forget it
 * if it is still listed (whoever unlinks it releases it). */
static void on_wait_expire(tr_rpc_call *call, void *arg)
{
    tr_head *h = arg;
    pthread_mutex_lock(&h->mu);
    if (tr_joblog_forget_call(h, call)) {
        goto done; /* moved to the log reader's queue */
    }
    for (size_t k = 0; k < h->n_jobs; k++) {
        tr_head_wait **lists[2] = {&h->jobs[k]->job_waiters, &h->jobs[k]->log_waiters};
        for (int l = 0; l < 2; l++) {
            for (tr_head_wait *w = *lists[l]; w != NULL; w = w->next) {
                if (w->call == call) {
                    waiter_unlink(lists[l], w);
                    tr_rpc_call_release(call);
                    free(w);
                    goto done;
                }
            }
        }
    }
done:
    pthread_mutex_unlock(&h->mu);
}

/* park lists w (its call filled in) until its wait is over. */
static void park(tr_head *h, tr_head_wait *w, tr_head_wait **list, uint32_t wait_ms)
{
    w->until = tr_now_ms() + wait_ms;
    w->next = *list;
    *list = w;
    tr_rpc_defer(w->call, on_wait_expire, h);
    w->deferred = 1;
}

/* A waiter_try answers w if there is something to say (or force is set) and
 * returns 1 then, or 2 when it handed w (and the call) to the log reader. */
typedef int (*waiter_try)(tr_head *h, tr_head_job *hj, tr_head_wait *w, int force);

/* answer_waiters offers every waiter of a list its answer; answered ones are
 * unlinked and released here (whoever unlinks a waiter releases it). */
static void answer_waiters(tr_head *h, tr_head_wait **pp, tr_head_job *hj, waiter_try try, int all)
{
    int64_t now = tr_now_ms();

    while (*pp != NULL) {
        tr_head_wait *w = *pp;
        int r = try(h, hj, w, all || now >= w->until);
        if (r != 0) {
            *pp = w->next;
            if (r == 1) {
                tr_rpc_call_release(w->call);
                free(w);
            }
        } else {
            pp = &w->next;
        }
    }
}

static int try_job(tr_head *h, tr_head_job *hj, tr_head_wait *w, int force)
{
    (void)h;
    if (!force && hj->j->version == w->after_version) {
        return 0;
    }
    reply_job(w->call, hj);
    return 1;
}

/* Until the job is saved nobody is answered, not even a poll whose time is
 * up: it is answered right after the save (TR_EV_JOB_SAVED), or at its
 * call's deadline by the RPC layer. */
void tr_jobs_answer_job_waiters(tr_head *h, tr_head_job *hj, int all)
{
    if (hj->job_waiters != NULL && (all || tr_jobs_saved(h, hj))) {
        tr_head_decorate(h, hj, 1);
        answer_waiters(h, &hj->job_waiters, hj, try_job, all);
        tr_head_decorate(h, hj, 0);
    }
}

/* reply_job_saved answers a GetJob once the job's changes are on disk;
 * changed again meanwhile, it waits for the next batch; while the store
 * cannot write, it says so (UNAVAILABLE: the CLI retries within its
 * deadline). */
static void reply_job_saved(tr_head *h, tr_rpc_call *call, uint64_t id)
{
    tr_head_job *hj = tr_jobs_find(h, id);
    if (hj == NULL) {
        tr_rpc_reply_error(call, TROUPE_NOT_FOUND, "no job %llu (see troupe jobs)", (unsigned long long)id);
    } else if (tr_jobs_saved(h, hj)) {
        tr_head_decorate(h, hj, 1);
        reply_job(call, hj);
        tr_head_decorate(h, hj, 0);
    } else if (h->store_failing) {
        tr_rpc_reply_error(call, TROUPE_UNAVAILABLE,
                           "job %llu has changes the head could not save yet (state store in %s: %s)",
                           (unsigned long long)id, h->cfg.state_dir, h->store_error);
    } else {
        tr_head_after_batch(h, call, reply_job_saved, id, NULL);
    }
}

/* find_or_refuse returns the job, or answers NOT_FOUND and returns NULL. */
/* find_or_refuse also keeps a worker credential to its own job (rpc.h). */
static tr_head_job *find_or_refuse(tr_head *h, tr_rpc_call *call, uint64_t id)
{
    tr_head_job *hj;
    if (!tr_rpc_require_job(call, id)) {
        return NULL;
    }
    hj = tr_jobs_find(h, id);
    if (hj == NULL) {
        tr_rpc_reply_error(call, TROUPE_NOT_FOUND, "no job %llu (see troupe jobs)", (unsigned long long)id);
    }
    return hj;
}

void tr_head_get_job(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__GetJobRequest *req =
        (Troupe__V1__GetJobRequest *)tr_rpc_unpack(call, &troupe__v1__get_job_request__descriptor);
    tr_head_job *hj;

    if (req == NULL) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    hj = find_or_refuse(h, call, req->job_id);
    if (hj == NULL) {
        /* answered */
    } else if (req->wait_ms > 0 && hj->j->version == req->after_version) {
        tr_head_wait *w = calloc(1, sizeof(*w));
        if (w == NULL) {
            tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
        } else {
            w->call = call;
            w->after_version = req->after_version;
            park(h, w, &hj->job_waiters, req->wait_ms);
        }
    } else {
        reply_job_saved(h, call, hj->j->id);
    }
    pthread_mutex_unlock(&h->mu);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

void tr_head_stop_job(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__StopJobRequest *req =
        (Troupe__V1__StopJobRequest *)tr_rpc_unpack(call, &troupe__v1__stop_job_request__descriptor);
    tr_head_job *hj;
    tr_err err;

    if (req == NULL) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    hj = tr_head_store_refuse(h, call) ? NULL : find_or_refuse(h, call, req->job_id);
    if (hj == NULL) {
        /* answered */
    } else if (!tr_head_may_manage(call, hj, &err) || tr_jobs_stop(h, hj, &err) != TROUPE_OK) {
        tr_rpc_reply_error(call, err.code, "%s", err.msg);
    } else {
        tr_head_after_commit(h, call, reply_stopped, hj->j->id);
    }
    pthread_mutex_unlock(&h->mu);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

static int try_log(tr_head *h, tr_head_job *hj, tr_head_wait *w, int force)
{
    return tr_joblog_try(h, hj, w, force);
}

void tr_jobs_answer_log_waiters(tr_head *h, tr_head_job *hj, int all)
{
    tr_joblog_settled(h, hj); /* a cut log's tail first: followers are done at the end */
    answer_waiters(h, &hj->log_waiters, hj, try_log, all);
}

/* has_worker: is name one of the job's workers (job<ID>-<group>-<rank>)? A
 * filter that names none would wait forever for lines that never come. */
static int has_worker(const tr_head_job *hj, const char *name)
{
    const Troupe__V1__JobSpec *s = hj->j->spec;
    char want[160];
    for (size_t g = 0; s != NULL && g < s->n_groups; g++) {
        for (uint32_t r = 0; r < s->groups[g]->workers; r++) {
            snprintf(want, sizeof(want), "job%llu-%s-%u", (unsigned long long)hj->j->id, s->groups[g]->name, r);
            if (strcmp(want, name) == 0) {
                return 1;
            }
        }
    }
    return 0;
}

/* refuse_worker answers NOT_FOUND naming the job's workers (the first few). */
static void refuse_worker(tr_rpc_call *call, const tr_head_job *hj, const char *name)
{
    const Troupe__V1__JobSpec *s = hj->j->spec;
    char list[512] = "";
    size_t off = 0, shown = 0, total = 0;
    for (size_t g = 0; s != NULL && g < s->n_groups; g++) {
        for (uint32_t r = 0; r < s->groups[g]->workers; r++, total++) {
            if (shown < 8 && off < sizeof(list) - 1) {
                off += (size_t)snprintf(list + off, sizeof(list) - off, "%sjob%llu-%s-%u", shown ? ", " : "",
                                        (unsigned long long)hj->j->id, s->groups[g]->name, r);
                shown++;
            }
        }
    }
    if (off >= sizeof(list)) {
        off = sizeof(list) - 1;
    }
    if (total > shown) {
        snprintf(list + off, sizeof(list) - off, ", ... (%zu in all)", total);
    }
    tr_rpc_reply_error(call, TROUPE_NOT_FOUND, "job %llu has no worker '%s'; its workers: %s",
                       (unsigned long long)hj->j->id, name, list);
}

void tr_head_get_logs(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__GetLogsRequest *req =
        (Troupe__V1__GetLogsRequest *)tr_rpc_unpack(call, &troupe__v1__get_logs_request__descriptor);
    tr_head_wait *w = NULL;
    tr_head_job *hj;

    if (req == NULL) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    hj = find_or_refuse(h, call, req->job_id);
    if (hj == NULL) {
        goto unlock; /* answered */
    }
    if (req->worker[0] != '\0' && !has_worker(hj, req->worker)) {
        refuse_worker(call, hj, req->worker);
        goto unlock;
    }
    if ((w = calloc(1, sizeof(*w))) == NULL) {
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
        goto unlock;
    }
    w->call = call;
    w->job_id = req->job_id;
    w->offset = req->offset;
    w->max_bytes = req->max_bytes;
    tr_strlcpy(w->worker, req->worker, sizeof(w->worker));
    switch (tr_joblog_try(h, hj, w, req->wait_ms == 0)) {
    case 0: park(h, w, &hj->log_waiters, req->wait_ms); break;
    case 1: free(w); break;
    default: break; /* handed to the log reader */
    }
unlock:
    pthread_mutex_unlock(&h->mu);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}
