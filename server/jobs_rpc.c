/* jobs_rpc.c - SubmitJob, GetJob (long poll), ListJobs, StopJob, GetLogs
 * (long poll for `troupe logs -f`).
 *
 * Long polls are deferred RPC calls kept on the job (job_waiters,
 * log_waiters), answered when the job changes, when new log lines arrive, or
 * when their wait is over (tr_jobs_tick). A waiter is owned by whoever
 * unlinks it from its list under h->mu: that one answers and releases it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs.h"
#include "log.h"
#include "util.h"

#define LOG_CHUNK_MAX (256u * 1024u)

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
    uint64_t id = 0;
    tr_err err;
    int rv;

    if (req == NULL) {
        return;
    }
    if (req->spec == NULL) {
        tr_rpc_reply_error(call, TROUPE_INVALID_ARGUMENT, "SubmitJob: spec is missing");
        goto out;
    }
    pthread_mutex_lock(&h->mu);
    rv = tr_jobs_submit(h, req->spec, &id, &err);
    if (rv == TROUPE_OK) {
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

static tr_head_wait *park(tr_head *h, tr_rpc_call *call, tr_head_wait **list, uint32_t wait_ms)
{
    tr_head_wait *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
        return NULL;
    }
    w->call = call;
    w->until = tr_now_ms() + wait_ms;
    w->next = *list;
    *list = w;
    tr_rpc_defer(call, on_wait_expire, h);
    return w;
}

/* A waiter_try answers w if there is something to say (or force is set) and
 * returns 1 then. */
typedef int (*waiter_try)(tr_head_job *hj, tr_head_wait *w, int force);

/* answer_waiters offers every waiter of a list its answer; answered ones are
 * unlinked and released here (whoever unlinks a waiter releases it). */
static void answer_waiters(tr_head_wait **pp, tr_head_job *hj, waiter_try try, int all)
{
    int64_t now = tr_now_ms();

    while (*pp != NULL) {
        tr_head_wait *w = *pp;
        if (try(hj, w, all || now >= w->until)) {
            *pp = w->next;
            tr_rpc_call_release(w->call);
            free(w);
        } else {
            pp = &w->next;
        }
    }
}

static int try_job(tr_head_job *hj, tr_head_wait *w, int force)
{
    if (!force && hj->j->version == w->after_version) {
        return 0;
    }
    reply_job(w->call, hj);
    return 1;
}

void tr_jobs_answer_job_waiters(tr_head *h, tr_head_job *hj, int all)
{
    (void)h;
    answer_waiters(&hj->job_waiters, hj, try_job, all);
}

/* find_or_refuse returns the job, or answers NOT_FOUND and returns NULL. */
static tr_head_job *find_or_refuse(tr_head *h, tr_rpc_call *call, uint64_t id)
{
    tr_head_job *hj = tr_jobs_find(h, id);
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
        tr_head_wait *w = park(h, call, &hj->job_waiters, req->wait_ms);
        if (w != NULL) {
            w->after_version = req->after_version;
        }
    } else {
        reply_job(call, hj);
    }
    pthread_mutex_unlock(&h->mu);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

void tr_head_list_jobs(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__ListJobsRequest *req =
        (Troupe__V1__ListJobsRequest *)tr_rpc_unpack(call, &troupe__v1__list_jobs_request__descriptor);
    Troupe__V1__ListJobsReply rep = TROUPE__V1__LIST_JOBS_REPLY__INIT;
    Troupe__V1__Job *copies = NULL;

    if (req == NULL) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    copies = calloc(h->n_jobs + 1, sizeof(*copies));
    rep.jobs = calloc(h->n_jobs + 1, sizeof(*rep.jobs));
    if (copies == NULL || rep.jobs == NULL) {
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
        goto unlock;
    }
    for (size_t k = 0; k < h->n_jobs; k++) {
        const Troupe__V1__Job *j = h->jobs[k]->j;
        if (req->active_only && tr_jobs_is_terminal(h->jobs[k])) {
            continue;
        }
        copies[rep.n_jobs] = *j; /* shallow: the listing leaves out per-worker detail */
        copies[rep.n_jobs].n_workers = 0;
        copies[rep.n_jobs].workers = NULL;
        copies[rep.n_jobs].n_events = 0;
        copies[rep.n_jobs].events = NULL;
        rep.jobs[rep.n_jobs] = &copies[rep.n_jobs];
        rep.n_jobs++;
    }
    tr_rpc_reply(call, &rep.base);
unlock:
    pthread_mutex_unlock(&h->mu);
    free(copies);
    free(rep.jobs);
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
    hj = find_or_refuse(h, call, req->job_id);
    if (hj == NULL) {
        /* answered */
    } else if (tr_jobs_stop(h, hj, &err) != TROUPE_OK) {
        tr_rpc_reply_error(call, err.code, "%s", err.msg);
    } else {
        tr_head_after_commit(h, call, reply_stopped, hj->j->id);
    }
    pthread_mutex_unlock(&h->mu);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* read_logs returns whole lines from offset (filtered by worker prefix) and
 * where the next read starts. */
static int read_logs(const tr_head_job *hj, uint64_t offset, uint32_t max, const char *worker, char **out,
                     size_t *len, uint64_t *next)
{
    FILE *f = fopen(hj->log_path, "r");
    char prefix[128];
    char *buf;
    size_t n, keep = 0, plen;

    *out = NULL;
    *len = 0;
    *next = offset;
    if (f == NULL || offset >= hj->log_size) {
        if (f != NULL) {
            fclose(f);
        }
        return TROUPE_OK;
    }
    max = (max == 0 || max > LOG_CHUNK_MAX) ? LOG_CHUNK_MAX : max;
    if ((buf = malloc(max + 1)) == NULL) {
        fclose(f);
        return TROUPE_RESOURCE_EXHAUSTED;
    }
    fseek(f, (long)offset, SEEK_SET);
    n = fread(buf, 1, max, f);
    fclose(f);
    while (n > 0 && buf[n - 1] != '\n') { /* whole lines only */
        n--;
    }
    *next = offset + n;
    plen = (size_t)snprintf(prefix, sizeof(prefix), "[%s] ", worker ? worker : "");
    for (size_t i = 0; i < n;) {
        char *nl = memchr(buf + i, '\n', n - i);
        size_t l = (size_t)(nl - (buf + i)) + 1;
        if (worker == NULL || worker[0] == '\0' || (l >= plen && memcmp(buf + i, prefix, plen) == 0)) {
            memmove(buf + keep, buf + i, l);
            keep += l;
        }
        i += l;
    }
    *out = buf;
    *len = keep;
    return TROUPE_OK;
}

static int logs_done(const tr_head_job *hj, uint64_t next)
{
    return tr_jobs_is_terminal(hj) && hj->pl == NULL && next >= hj->log_size;
}

/* try_logs answers a logs call if there is something to say; returns 1 if it did. */
static int try_logs(tr_rpc_call *call, tr_head_job *hj, uint64_t offset, uint32_t max, const char *worker,
                    int force)
{
    Troupe__V1__GetLogsReply rep = TROUPE__V1__GET_LOGS_REPLY__INIT;
    char *data = NULL;
    size_t len = 0;
    uint64_t next = offset;

    if (read_logs(hj, offset, max, worker, &data, &len, &next) != TROUPE_OK) {
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory reading logs");
        return 1;
    }
    rep.done = logs_done(hj, next);
    if (!force && len == 0 && next == offset && !rep.done) {
        free(data);
        return 0;
    }
    rep.data.data = (uint8_t *)data;
    rep.data.len = len;
    rep.next_offset = next;
    tr_rpc_reply(call, &rep.base);
    free(data);
    return 1;
}

static int try_log(tr_head_job *hj, tr_head_wait *w, int force)
{
    return try_logs(w->call, hj, w->offset, w->max_bytes, w->worker, force);
}

void tr_jobs_answer_log_waiters(tr_head *h, tr_head_job *hj, int all)
{
    (void)h;
    answer_waiters(&hj->log_waiters, hj, try_log, all);
}

void tr_head_get_logs(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__GetLogsRequest *req =
        (Troupe__V1__GetLogsRequest *)tr_rpc_unpack(call, &troupe__v1__get_logs_request__descriptor);
    tr_head_job *hj;

    if (req == NULL) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    hj = find_or_refuse(h, call, req->job_id);
    if (hj == NULL) {
        /* answered */
    } else if (!try_logs(call, hj, req->offset, req->max_bytes, req->worker, req->wait_ms == 0)) {
        tr_head_wait *w = park(h, call, &hj->log_waiters, req->wait_ms);
        if (w != NULL) {
            w->offset = req->offset;
            w->max_bytes = req->max_bytes;
            tr_strlcpy(w->worker, req->worker, sizeof(w->worker));
        }
    }
    pthread_mutex_unlock(&h->mu);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}
