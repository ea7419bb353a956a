/* rdzv_view.c - who is who in a communicator: its member groups, size,
 * epoch and each worker's rank, computed from the job record (so it is
 * always current: a restart changes attempts, hence the epoch). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_view.h"

#include "elastic.h"
#include "jobs.h"
#include "rdzv_int.h"
#include "util.h"

const char *tr_rdzv_job_state_name(int state)
{
    switch (state) {
    case TROUPE__V1__JOB_STATE__JOB_PENDING: return "PENDING";
    case TROUPE__V1__JOB_STATE__JOB_RUNNING: return "RUNNING";
    case TROUPE__V1__JOB_STATE__JOB_SUCCEEDED: return "SUCCEEDED";
    case TROUPE__V1__JOB_STATE__JOB_FAILED: return "FAILED";
    case TROUPE__V1__JOB_STATE__JOB_STOPPED: return "STOPPED";
    default: return "UNKNOWN";
    }
}

static const Troupe__V1__GroupSpec *group_spec(const Troupe__V1__JobSpec *sp, const char *name)
{
    for (size_t g = 0; g < sp->n_groups; g++) {
        if (strcmp(sp->groups[g]->name, name) == 0) {
            return sp->groups[g];
        }
    }
    return NULL;
}

/* declared lists the job's groups and communicators for a NOT_FOUND message. */
static void declared(const Troupe__V1__JobSpec *sp, char *buf, size_t size)
{
    size_t off = (size_t)snprintf(buf, size, "groups:");
    for (size_t g = 0; g < sp->n_groups && off < size; g++) {
        off += (size_t)snprintf(buf + off, size - off, "%s %s", g ? "," : "", sp->groups[g]->name);
    }
    if (off < size) {
        off += (size_t)snprintf(buf + off, size - off, "; communicators:%s", sp->n_communicators ? "" : " none");
    }
    for (size_t c = 0; c < sp->n_communicators && off < size; c++) {
        off += (size_t)snprintf(buf + off, size - off, "%s %s", c ? "," : "", sp->communicators[c]->name);
    }
}

/* members points v at the groups of communicator comm. */
static int members(const Troupe__V1__JobSpec *sp, const char *comm, tr_rdzv_view *v, tr_err *err)
{
    char what[1024];

    if (group_spec(sp, comm) != NULL) {
        v->single[0] = comm;
        v->groups = (char *const *)v->single;
        v->n_groups = 1;
        return TROUPE_OK;
    }
    for (size_t c = 0; c < sp->n_communicators; c++) {
        if (strcmp(sp->communicators[c]->name, comm) == 0) {
            v->groups = sp->communicators[c]->groups;
            v->n_groups = sp->communicators[c]->n_groups;
            return TROUPE_OK;
        }
    }
    declared(sp, what, sizeof(what));
    return tr_err_set(err, TROUPE_NOT_FOUND, "job %s declares no communicator '%s' (%s)", sp->name, comm, what);
}

/* elastic_view: an elastic group that shrank is its own communicator
 * (the spec keeps it out of any other), of its members only, ranked by
 * member_rank, in an epoch that moved on with each change (elastic.c). */
static int elastic_view(const Troupe__V1__Job *j, const Troupe__V1__WorkerInfo *worker, tr_rdzv_view *v,
                        tr_err *err)
{
    const Troupe__V1__GroupInfo *gi = tr_elastic_group(j, v->name);

    v->size = gi->world_size;
    v->epoch = tr_elastic_epoch(j, v->name);
    if (worker != NULL && worker->removed) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "worker %s is no longer a member of elastic group %s (it shrank to %u ranks, epoch %u): "
                          "this worker stops",
                          worker->name, v->name, v->size, v->epoch);
    }
    if (worker != NULL) {
        v->rank = worker->member_rank;
    }
    return TROUPE_OK;
}

int tr_rdzv_view_of(const Troupe__V1__Job *j, const char *comm, const Troupe__V1__WorkerInfo *worker,
                    tr_rdzv_view *v, tr_err *err)
{
    uint32_t offset = 0;
    int member = 0, rv;

    memset(v, 0, sizeof(*v));
    if ((comm == NULL || comm[0] == '\0') && worker != NULL) {
        comm = worker->group;
    }
    if (comm == NULL || strlen(comm) >= sizeof(v->name)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "communicator name must be 1 to %zu bytes",
                          sizeof(v->name) - 1);
    }
    if ((rv = members(j->spec, comm, v, err)) != TROUPE_OK) {
        return rv;
    }
    tr_strlcpy(v->name, comm, sizeof(v->name));
    for (size_t k = 0; k < v->n_groups; k++) {
        const Troupe__V1__GroupSpec *gs = group_spec(j->spec, v->groups[k]);
        if (worker != NULL && strcmp(worker->group, v->groups[k]) == 0) {
            v->rank = offset + worker->rank;
            member = 1;
        }
        offset += gs ? gs->workers : 0;
    }
    v->size = offset;
    /* Every store and rendezvous call resolves its view, so this loop ran
     * once per call of every rank (quadratic in the ranks). A worker's
     * attempt is only ever set to the job's restart count (jobs.c), so no
     * epoch exceeds it: the loop ends once the epoch reaches it (at once in
     * a job that never restarted), and compares a worker's attempt before
     * its group's name. */
    for (size_t i = 0; i < j->n_workers && v->epoch < j->restarts; i++) {
        if (j->workers[i]->attempt <= v->epoch) {
            continue;
        }
        for (size_t k = 0; k < v->n_groups; k++) {
            if (strcmp(j->workers[i]->group, v->groups[k]) == 0) {
                v->epoch = j->workers[i]->attempt;
            }
        }
    }
    if (worker != NULL && !member) {
        return tr_err_set(err, TROUPE_PERMISSION_DENIED, "worker %s (group %s) is not a member of communicator %s",
                          worker->name, worker->group, v->name);
    }
    if (v->n_groups == 1 && tr_elastic_spec(j, v->name) != NULL && tr_elastic_group(j, v->name) != NULL) {
        return elastic_view(j, worker, v, err);
    }
    return TROUPE_OK;
}

/* worker_guess is where worker `name` ("job7-policy-3": its group and rank)
 * sits when the job's workers are laid out group by group in rank order, as
 * placements make them: the declared workers of the groups before its own
 * plus its rank; SIZE_MAX when the name does not say. Only a guess: the
 * caller checks the name found there. */
static size_t worker_guess(const Troupe__V1__Job *j, const char *name)
{
    const char *dash = strrchr(name, '-'), *group = strchr(name, '-');
    size_t offset = 0, glen;
    char *end;
    unsigned long rank;

    if (dash == NULL || group == NULL || group >= dash || dash[1] == '\0') {
        return SIZE_MAX;
    }
    rank = strtoul(dash + 1, &end, 10);
    group++;
    glen = (size_t)(dash - group);
    for (size_t g = 0; *end == '\0' && g < j->spec->n_groups; g++) {
        const Troupe__V1__GroupSpec *gs = j->spec->groups[g];
        if (strlen(gs->name) == glen && memcmp(gs->name, group, glen) == 0) {
            return rank < gs->workers ? offset + rank : SIZE_MAX;
        }
        offset += gs->workers;
    }
    return SIZE_MAX;
}

/* Every store and rendezvous call looks its caller up, so the layout's guess
 * is tried first (one comparison) before the scan: a scan per call of every
 * rank was quadratic in the ranks. */
const Troupe__V1__WorkerInfo *tr_rdzv_worker_find(const Troupe__V1__Job *j, const char *name)
{
    size_t at = worker_guess(j, name);

    if (at < j->n_workers && strcmp(j->workers[at]->name, name) == 0) {
        return j->workers[at];
    }
    for (size_t i = 0; i < j->n_workers; i++) {
        if (strcmp(j->workers[i]->name, name) == 0) {
            return j->workers[i];
        }
    }
    return NULL;
}

int tr_rdzv_resolve(tr_head *h, const Troupe__V1__WorkerRef *from, const char *comm, tr_head_job **hj,
                    tr_rdzv_view *v, tr_err *err)
{
    const Troupe__V1__WorkerInfo *w;
    tr_head_job *job;

    *hj = NULL;
    if (from == NULL || from->worker == NULL || from->worker[0] == '\0') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "the call does not say which worker it comes from");
    }
    if ((job = tr_jobs_find(h, from->job_id)) == NULL) {
        return tr_err_set(err, TROUPE_NOT_FOUND, "no job %llu", (unsigned long long)from->job_id);
    }
    /* A worker credential was held to this worker by tr_rpc_require_worker;
     * other callers name a worker the job must have. */
    if ((w = tr_rdzv_worker_find(job->j, from->worker)) == NULL) {
        return tr_err_set(err, TROUPE_PERMISSION_DENIED,
                          "worker %s is not part of job %llu: a worker's calls are scoped to its own job",
                          from->worker, (unsigned long long)from->job_id);
    }
    if (job->j->state != TROUPE__V1__JOB_STATE__JOB_RUNNING || job->requeue || job->j->stop_requested) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "job %llu is not running (%s: %s)",
                          (unsigned long long)from->job_id, tr_rdzv_job_state_name(job->j->state), job->j->reason);
    }
    if (from->attempt != w->attempt) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "worker %s attempt %u is not current (the head has attempt %u: its group restarted)",
                          w->name, from->attempt, w->attempt);
    }
    *hj = job;
    return tr_rdzv_view_of(job->j, comm, w, v, err);
}

char **tr_rdzv_rank_names(const Troupe__V1__Job *j, const tr_rdzv_view *v)
{
    char **names = calloc(v->size ? v->size : 1, sizeof(*names));
    uint32_t offset = 0;

    int elastic = v->n_groups == 1 && tr_elastic_spec(j, v->name) != NULL;

    for (size_t k = 0; names != NULL && k < v->n_groups; k++) {
        const Troupe__V1__GroupSpec *gs = group_spec(j->spec, v->groups[k]);
        for (size_t i = 0; i < j->n_workers; i++) {
            const Troupe__V1__WorkerInfo *w = j->workers[i];
            uint32_t r = offset + (elastic ? w->member_rank : w->rank);
            if (elastic && w->removed) {
                continue;
            }
            if (strcmp(w->group, v->groups[k]) == 0 && r < v->size && names[r] == NULL &&
                asprintf(&names[r], "%s on %s", w->name, w->node_name[0] ? w->node_name : "?") < 0) {
                names[r] = NULL;
            }
        }
        offset += gs ? gs->workers : 0;
    }
    return names;
}

void tr_rdzv_rank_names_free(char **names, uint32_t n)
{
    for (uint32_t r = 0; names != NULL && r < n; r++) {
        free(names[r]);
    }
    free(names);
}
