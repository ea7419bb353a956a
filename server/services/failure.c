/* failure.c - the head's failure-report service: ReportFailure, through which
 * a worker says why it is failing before it exits (troupe_worker_fail).
 *
 * A job of many ranks usually fails as a cascade: one rank hangs or dies, the
 * others time out in a collective and exit 1. The exit codes alone name
 * whichever worker's exit the head heard of first; the reports say where it
 * started. Reports are kept on the job record (Job.failures, bounded, one per
 * worker attempt), recorded as WORKER_FAILED events, and the core (jobs.c)
 * puts the first one of the current attempts into the reason of a job that
 * fails or restarts. The reply comes once the report is on disk, so a worker
 * that exits right after it cannot race its own report. Under h->mu. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "failure.h"
#include "jobs.h"
#include "log.h"
#include "names.h"
#include "util.h"

#define FAILURES_MAX 32     /* kept per job; older ones are dropped and counted */
#define REASON_MAX 1024     /* bytes of a reason kept */

static const Troupe__V1__WorkerInfo *worker_find(const Troupe__V1__Job *j, const char *name)
{
    for (size_t i = 0; i < j->n_workers; i++) {
        if (strcmp(j->workers[i]->name, name) == 0) {
            return j->workers[i];
        }
    }
    return NULL;
}

static int reported_already(const Troupe__V1__Job *j, const char *worker, uint32_t attempt)
{
    for (size_t i = 0; i < j->n_failures; i++) {
        if (strcmp(j->failures[i]->worker, worker) == 0 && j->failures[i]->attempt == attempt) {
            return 1;
        }
    }
    return 0;
}

/* check_from: the worker exists in the job and calls from its current
 * attempt. A worker credential is bound to (job, attempt, worker), so a
 * worker reports only for itself (tr_rpc_require_worker), at its current
 * attempt, never an attempt newer than the credential's. */
static int check_from(tr_rpc_call *call, const tr_head_job *hj, const Troupe__V1__ReportFailureRequest *req,
                      const Troupe__V1__WorkerInfo **out, tr_err *err)
{
    const Troupe__V1__WorkerRef *from = req->from;
    const tr_rpc_principal *who = tr_rpc_call_principal(call);
    const Troupe__V1__WorkerInfo *w;

    if (from == NULL || from->worker == NULL || from->worker[0] == '\0') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "the call does not say which worker it comes from");
    }
    if (hj == NULL) {
        return tr_err_set(err, TROUPE_NOT_FOUND, "no job %llu", (unsigned long long)from->job_id);
    }
    if (tr_jobs_is_terminal(hj)) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "job %llu already ended (%s)",
                          (unsigned long long)from->job_id, hj->j->reason);
    }
    if ((w = worker_find(hj->j, from->worker)) == NULL) {
        return tr_err_set(err, TROUPE_PERMISSION_DENIED,
                          "worker %s is not part of job %llu: a worker reports failures for itself only",
                          from->worker, (unsigned long long)from->job_id);
    }
    if (from->attempt != w->attempt || (who->scope == TR_SCOPE_WORKER && from->attempt > who->attempt)) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "worker %s attempt %u is not current (the head has attempt %u: its group restarted)",
                          w->name, from->attempt, w->attempt);
    }
    if (req->code <= 0 || req->code > TROUPE_UNAUTHENTICATED) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "failure code %d is not a troupe_status other than OK",
                          req->code);
    }
    if (req->reason == NULL || req->reason[0] == '\0') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "a failure report needs a reason");
    }
    /* Stored and shown by `troupe job`: a newline would print a line the
     * head never wrote (troupe_worker_fail escapes and cuts for its callers). */
    if (tr_text_check("failure reason", req->reason, REASON_MAX, err) != TROUPE_OK) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "failure reason of %zu bytes refused: it must be %s, at most %d bytes (escape newlines "
                          "and other control bytes, as troupe_worker_fail does)",
                          strlen(req->reason), TR_TEXT_RULE, REASON_MAX);
    }
    *out = w;
    return TROUPE_OK;
}

static Troupe__V1__WorkerFailure *failure_new(const Troupe__V1__WorkerInfo *w, int code, const char *reason)
{
    Troupe__V1__WorkerFailure *f = calloc(1, sizeof(*f));
    char cut[REASON_MAX + 1];

    if (f == NULL) {
        return NULL;
    }
    troupe__v1__worker_failure__init(f);
    tr_strlcpy(cut, reason, sizeof(cut));
    f->worker = strdup(w->name);
    f->group = strdup(w->group);
    f->rank = w->rank;
    f->node = strdup(w->node_name ? w->node_name : "");
    f->attempt = w->attempt;
    f->code = strdup(troupe_strerror(code));
    f->reason = strdup(cut);
    f->ts_ms = tr_wall_ms();
    if (f->worker == NULL || f->group == NULL || f->node == NULL || f->code == NULL || f->reason == NULL) {
        troupe__v1__worker_failure__free_unpacked(f, NULL);
        return NULL;
    }
    return f;
}

/* keep appends f to the job's reports, dropping the oldest beyond the bound. */
static int keep(Troupe__V1__Job *j, Troupe__V1__WorkerFailure *f)
{
    if (j->n_failures == FAILURES_MAX) {
        troupe__v1__worker_failure__free_unpacked(j->failures[0], NULL);
        memmove(j->failures, j->failures + 1, (j->n_failures - 1) * sizeof(*j->failures));
        j->n_failures--;
        j->failures_dropped++;
    } else {
        Troupe__V1__WorkerFailure **grown = realloc(j->failures, (j->n_failures + 1) * sizeof(*grown));
        if (grown == NULL) {
            return -1;
        }
        j->failures = grown;
    }
    j->failures[j->n_failures++] = f;
    return 0;
}

/* The reply says whether the report was kept and whether it is the first. */
static void reply_report(tr_head *h, tr_rpc_call *call, uint64_t arg)
{
    Troupe__V1__ReportFailureReply rep = TROUPE__V1__REPORT_FAILURE_REPLY__INIT;
    (void)h;
    rep.recorded = (arg & 1) != 0;
    rep.first = (arg & 2) != 0;
    tr_rpc_reply(call, &rep.base);
}

static int report_locked(tr_head *h, tr_rpc_call *call, const Troupe__V1__ReportFailureRequest *req, tr_err *err)
{
    tr_head_job *hj = req->from != NULL ? tr_jobs_find(h, req->from->job_id) : NULL;
    const Troupe__V1__WorkerInfo *w = NULL;
    Troupe__V1__WorkerFailure *f;
    char text[1600];
    int rv, first;

    if ((rv = check_from(call, hj, req, &w, err)) != TROUPE_OK) {
        return rv;
    }
    if (reported_already(hj->j, w->name, w->attempt)) {
        reply_report(h, call, 0); /* a retried call, or a second reason: the first one stands */
        return TROUPE_OK;
    }
    if ((f = failure_new(w, req->code, req->reason)) == NULL || keep(hj->j, f) != 0) {
        if (f != NULL) {
            troupe__v1__worker_failure__free_unpacked(f, NULL);
        }
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
    }
    first = tr_jobs_first_failure(hj) == f;
    snprintf(text, sizeof(text), "rank %u of group %s (%s on %s, attempt %u)%s: %s: %s", f->rank, f->group, f->worker,
             f->node[0] ? f->node : "?", f->attempt, first ? " failed first" : " failed", f->code, f->reason);
    tr_jobs_note(h, hj, "WORKER_FAILED", text); /* durable with the record */
    tr_head_after_commit(h, call, reply_report, 1u | (first ? 2u : 0u));
    return TROUPE_OK;
}

static void report_failure(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__ReportFailureRequest *req =
        (Troupe__V1__ReportFailureRequest *)tr_rpc_unpack(call, &troupe__v1__report_failure_request__descriptor);
    tr_err err;
    int rv;

    if (req == NULL) {
        return;
    }
    if (!tr_rpc_require_worker(call, req->from != NULL ? req->from->job_id : 0,
                               req->from != NULL ? req->from->worker : NULL)) {
        goto out; /* answered: a worker credential of another job */
    }
    pthread_mutex_lock(&h->mu);
    rv = tr_head_store_refuse(h, call) ? TROUPE_OK /* answered */ : report_locked(h, call, req, &err);
    pthread_mutex_unlock(&h->mu);
    if (rv != TROUPE_OK) {
        TR_LOG(TR_LOG_INFO, "refused ReportFailure job=%llu worker=%s: %s",
               (unsigned long long)(req->from ? req->from->job_id : 0),
               req->from && req->from->worker ? req->from->worker : "?", err.msg);
        tr_rpc_reply_error(call, rv, "%s", err.msg);
    }
out:
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* Scopes (rpc.h): workers report for themselves (tr_rpc_require_worker) and
 * own attempt (check_from); users and admins may report too (tools, tests). */
static const tr_rpc_method failure_methods[] = {
    {"troupe.v1.Head/ReportFailure", report_failure, TR_SCOPES_WORKER_JOB},
    {NULL, NULL, 0},
};

const tr_head_service tr_failure_service = {
    .name = "failure reports",
    .methods = failure_methods,
};
