/* jobs.c - libtroupe's job calls. A troupe_job points into the decoded
 * troupe.v1.Job it came from; both are freed together by troupe_job_free. */
#include <libgen.h>
#include <stdlib.h>
#include <string.h>

#include "client_int.h"
#include "jobspec.h"
#include "rpc.h"
#include "troupe/client.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

TROUPE_API void troupe_free(void *p)
{
    free(p);
}

TROUPE_API const char *troupe_job_state_name(int s)
{
    static const char *const names[] = {"UNKNOWN", "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"};
    return (s >= 0 && s <= 5) ? names[s] : "UNKNOWN";
}

TROUPE_API const char *troupe_worker_state_name(int s)
{
    static const char *const names[] = {"UNKNOWN", "PENDING", "RUNNING", "EXITED", "FAILED_TO_START", "LOST"};
    return (s >= 0 && s <= 5) ? names[s] : "UNKNOWN";
}

troupe_status tr_client_submit_spec(troupe_client *c, Troupe__V1__JobSpec *spec, uint64_t *job_id, tr_err *e)
{
    Troupe__V1__SubmitJobRequest req = TROUPE__V1__SUBMIT_JOB_REQUEST__INIT;
    Troupe__V1__SubmitJobReply *rep = NULL;
    int rv;

    req.spec = spec;
    rv = tr_rpc_client_call(c->rpc, "troupe.v1.Head/SubmitJob", &req.base,
                            &troupe__v1__submit_job_reply__descriptor, (ProtobufCMessage **)&rep,
                            c->timeout_ms, 0, e);
    if (rv == TROUPE_OK) {
        *job_id = rep->job_id;
        troupe__v1__submit_job_reply__free_unpacked(rep, NULL);
    }
    return (troupe_status)rv;
}

TROUPE_API troupe_status troupe_submit_file(troupe_client *c, const char *path, uint64_t *job_id,
                                            troupe_error *err)
{
    Troupe__V1__JobSpec *spec = NULL;
    tr_err e;
    int rv;

    *job_id = 0;
    if ((rv = tr_jobspec_load(path, &spec, &e)) == TROUPE_OK) {
        rv = tr_client_submit_spec(c, spec, job_id, &e);
    }
    tr_jobspec_free(spec);
    return tr_client_finish(err, &e, rv);
}

TROUPE_API troupe_status troupe_submit_yaml(troupe_client *c, const char *text, size_t len, const char *name,
                                            const char *base_dir, uint64_t *job_id, troupe_error *err)
{
    Troupe__V1__JobSpec *spec = NULL;
    tr_err e;
    int rv;

    *job_id = 0;
    if ((rv = tr_jobspec_parse(text, len, name ? name : "job", base_dir, &spec, &e)) == TROUPE_OK) {
        rv = tr_client_submit_spec(c, spec, job_id, &e);
    }
    tr_jobspec_free(spec);
    return tr_client_finish(err, &e, rv);
}

/* fill_job points a public job at its message; workers/groups arrays are
 * caller-provided (may be NULL when the message has none). */
static void fill_job(troupe_job *d, const Troupe__V1__Job *j, troupe_worker *ws, troupe_group *gs)
{
    d->id = j->id;
    d->name = j->spec ? j->spec->name : "";
    d->state = (troupe_job_state)j->state;
    d->reason = j->reason;
    d->owner = j->owner;
    d->submitted_ms = j->submitted_ms;
    d->started_ms = j->started_ms;
    d->ended_ms = j->ended_ms;
    d->restarts = j->restarts;
    d->max_restarts = j->spec ? j->spec->max_restarts : 0;
    d->next_restart_ms = j->next_restart_ms;
    d->version = j->version;
    for (size_t g = 0; j->spec != NULL && g < j->spec->n_groups; g++) {
        d->workers_total += j->spec->groups[g]->workers;
    }
    d->n_workers = ws ? j->n_workers : 0;
    d->workers = ws;
    for (size_t i = 0; ws != NULL && i < j->n_workers; i++) {
        const Troupe__V1__WorkerInfo *w = j->workers[i];
        ws[i] = (troupe_worker){w->name,
                                w->group,
                                w->rank,
                                w->local_rank,
                                w->local_world_size,
                                w->node_rank,
                                w->node_id,
                                w->node_name,
                                w->n_gpus,
                                w->gpus,
                                (troupe_worker_state)w->state,
                                w->exit_code,
                                w->signal,
                                w->pid,
                                w->attempt,
                                w->message,
                                w->started_ms,
                                w->ended_ms,
                                w->paused,
                                w->nsys_report ? w->nsys_report : "",
                                w->removed,
                                w->member_rank,
                                w->regrown,
                                w->regrow_stopped};
    }
    d->n_groups = gs ? j->n_groups : 0;
    d->groups = gs;
    for (size_t g = 0; gs != NULL && g < j->n_groups; g++) {
        const Troupe__V1__GroupSpec *sp = j->spec != NULL && g < j->spec->n_groups ? j->spec->groups[g] : NULL;
        uint32_t attempt = 0;
        for (size_t i = 0; i < j->n_workers; i++) {
            if (strcmp(j->workers[i]->group, j->groups[g]->name) == 0 && j->workers[i]->attempt > attempt) {
                attempt = j->workers[i]->attempt;
            }
        }
        gs[g] = (troupe_group){j->groups[g]->name,
                               j->groups[g]->master_addr,
                               j->groups[g]->master_port,
                               j->groups[g]->world_size,
                               sp ? sp->workers : j->groups[g]->world_size,
                               sp && sp->elastic ? sp->elastic->min_workers : 0,
                               sp && sp->elastic ? sp->elastic->max_workers : 0,
                               attempt + j->groups[g]->membership_changes};
    }
}

int tr_client_job_view(job_impl *ji, const Troupe__V1__Job *m)
{
    ji->workers = calloc(m->n_workers + 1, sizeof(*ji->workers));
    ji->groups = calloc(m->n_groups + 1, sizeof(*ji->groups));
    ji->events = calloc(m->n_events + 1, sizeof(*ji->events));
    if (ji->workers == NULL || ji->groups == NULL || ji->events == NULL) {
        return -1;
    }
    fill_job(&ji->pub, m, ji->workers, ji->groups);
    for (size_t i = 0; i < m->n_events; i++) {
        const Troupe__V1__JobEvent *e = m->events[i];
        ji->events[i] = (troupe_job_event){e->ts_ms, e->kind, e->message};
    }
    ji->pub.n_events = m->n_events;
    ji->pub.events = ji->events;
    ji->pub.events_dropped = m->events_dropped;
    if ((ji->health = tr_client_health_new(m)) == NULL) {
        return -1;
    }
    ji->pub.health = ji->health;
    return tr_client_job_runtime(ji, m);
}

void tr_client_job_clear(job_impl *ji)
{
    if (ji->msg != NULL) {
        troupe__v1__job__free_unpacked(ji->msg, NULL);
    }
    free(ji->workers);
    free(ji->groups);
    free(ji->events);
    free(ji->waits);
    free(ji->failures);
    free(ji->health);
    free(ji->membership);
}

TROUPE_API void troupe_job_free(troupe_job *job)
{
    job_impl *ji = (job_impl *)job;
    if (ji == NULL) {
        return;
    }
    tr_client_job_clear(ji);
    free(ji);
}

TROUPE_API troupe_status troupe_wait_job(troupe_client *c, uint64_t job_id, uint64_t after_version,
                                         uint32_t wait_ms, troupe_job **out, troupe_error *err)
{
    Troupe__V1__GetJobRequest req = TROUPE__V1__GET_JOB_REQUEST__INIT;
    Troupe__V1__GetJobReply *rep = NULL;
    job_impl *ji;
    tr_err e;
    int rv;

    *out = NULL;
    req.job_id = job_id;
    req.after_version = after_version;
    req.wait_ms = wait_ms;
    rv =
        tr_rpc_client_call(c->rpc, "troupe.v1.Head/GetJob", &req.base, &troupe__v1__get_job_reply__descriptor,
                           (ProtobufCMessage **)&rep, c->timeout_ms + wait_ms, TR_RPC_IDEMPOTENT, &e);
    if (rv != TROUPE_OK) {
        return tr_client_finish(err, &e, rv);
    }
    ji = calloc(1, sizeof(*ji));
    if (ji == NULL || rep->job == NULL) {
        troupe__v1__get_job_reply__free_unpacked(rep, NULL);
        free(ji);
        return tr_client_finish(err, &e,
                                tr_err_set(&e, rep && rep->job ? TROUPE_RESOURCE_EXHAUSTED : TROUPE_DATA_LOSS,
                                           "no job in the reply"));
    }
    ji->msg = rep->job;
    rep->job = NULL;
    troupe__v1__get_job_reply__free_unpacked(rep, NULL);
    if (tr_client_job_view(ji, ji->msg) != 0) {
        troupe_job_free(&ji->pub);
        return tr_client_finish(err, &e, tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory"));
    }
    *out = &ji->pub;
    return tr_client_finish(err, &e, TROUPE_OK);
}

TROUPE_API troupe_status troupe_get_job(troupe_client *c, uint64_t job_id, troupe_job **out,
                                        troupe_error *err)
{
    return troupe_wait_job(c, job_id, 0, 0, out, err);
}

typedef struct job_list_impl {
    troupe_job_list pub;
    Troupe__V1__ListJobsReply **msgs; /* one per page */
    size_t n_msgs;
    troupe_job *jobs;
    troupe_job_health **health; /* one per job, as jobs */
    size_t cap;
} job_list_impl;

TROUPE_API void troupe_job_list_free(troupe_job_list *list)
{
    job_list_impl *l = (job_list_impl *)list;
    if (l == NULL) {
        return;
    }
    for (size_t i = 0; i < l->n_msgs; i++) {
        troupe__v1__list_jobs_reply__free_unpacked(l->msgs[i], NULL);
    }
    for (size_t i = 0; i < l->pub.count; i++) {
        free(l->health[i]);
    }
    free(l->msgs);
    free(l->jobs);
    free(l->health);
    free(l);
}

/* list_call fetches one page into l (appending its jobs); sets *next. */
static int list_call(troupe_client *c, const troupe_list_opts *o, job_list_impl *l, uint64_t *next, tr_err *e)
{
    Troupe__V1__ListJobsRequest req = TROUPE__V1__LIST_JOBS_REQUEST__INIT;
    Troupe__V1__ListJobsReply *rep = NULL, **msgs;
    Troupe__V1__JobState states[8];
    int rv;

    req.active_only = o->active_only != 0;
    req.limit = o->limit;
    req.cursor = o->cursor;
    req.oldest_first = o->oldest_first != 0;
    req.name = (char *)(o->name ? o->name : "");
    for (int s = TROUPE_JOB_PENDING; s <= TROUPE_JOB_STOPPED; s++) {
        if (o->states & (1u << s)) {
            states[req.n_states++] = (Troupe__V1__JobState)s;
        }
    }
    req.states = states;
    rv = tr_rpc_client_call(c->rpc, "troupe.v1.Head/ListJobs", &req.base,
                            &troupe__v1__list_jobs_reply__descriptor, (ProtobufCMessage **)&rep,
                            c->timeout_ms, TR_RPC_IDEMPOTENT, e);
    if (rv != TROUPE_OK) {
        return rv;
    }
    msgs = realloc(l->msgs, (l->n_msgs + 1) * sizeof(*msgs));
    if (msgs == NULL) {
        troupe__v1__list_jobs_reply__free_unpacked(rep, NULL);
        return tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    l->msgs = msgs;
    l->msgs[l->n_msgs++] = rep;
    if (l->pub.count + rep->n_jobs > l->cap) {
        size_t cap = (l->pub.count + rep->n_jobs) * 2 + 1;
        troupe_job *jobs = realloc(l->jobs, cap * sizeof(*jobs));
        troupe_job_health **health = jobs ? realloc(l->health, cap * sizeof(*health)) : NULL;
        if (jobs != NULL) {
            l->jobs = jobs;
        }
        if (health == NULL) {
            return tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        }
        l->health = health;
        l->cap = cap;
    }
    for (size_t i = 0; i < rep->n_jobs; i++) {
        troupe_job_health *h = tr_client_health_new(rep->jobs[i]);
        if (h == NULL) {
            return tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        }
        memset(&l->jobs[l->pub.count], 0, sizeof(*l->jobs));
        fill_job(&l->jobs[l->pub.count], rep->jobs[i], NULL, NULL);
        l->jobs[l->pub.count].health = h;
        l->health[l->pub.count++] = h;
    }
    *next = rep->next_cursor;
    return TROUPE_OK;
}

/* list_jobs lists one page, or every page when all is set. */
static troupe_status list_jobs(troupe_client *c, const troupe_list_opts *opts, int all, troupe_job_list **out,
                               troupe_error *err)
{
    troupe_list_opts o = {0};
    job_list_impl *l = calloc(1, sizeof(*l));
    uint64_t next = 0;
    tr_err e;
    int rv;

    *out = NULL;
    if (l == NULL) {
        return tr_client_finish(err, &e, tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory"));
    }
    if (opts != NULL) {
        o = *opts;
    }
    do {
        rv = list_call(c, &o, l, &next, &e);
        o.cursor = next;
    } while (rv == TROUPE_OK && all && next != 0);
    if (rv != TROUPE_OK) {
        troupe_job_list_free(&l->pub);
        return tr_client_finish(err, &e, rv);
    }
    l->pub.jobs = l->jobs;
    l->pub.next_cursor = next;
    *out = &l->pub;
    return tr_client_finish(err, &e, TROUPE_OK);
}

TROUPE_API troupe_status troupe_list_jobs_page(troupe_client *c, const troupe_list_opts *opts,
                                               troupe_job_list **out, troupe_error *err)
{
    return list_jobs(c, opts, 0, out, err);
}

TROUPE_API troupe_status troupe_list_jobs(troupe_client *c, int active_only, troupe_job_list **out,
                                          troupe_error *err)
{
    troupe_list_opts o = {.limit = 1000, .oldest_first = 1, .active_only = active_only};
    return list_jobs(c, &o, 1, out, err);
}

TROUPE_API troupe_status troupe_delete_job(troupe_client *c, uint64_t job_id, troupe_error *err)
{
    Troupe__V1__DeleteJobRequest req = TROUPE__V1__DELETE_JOB_REQUEST__INIT;
    Troupe__V1__DeleteJobReply *rep = NULL;
    tr_err e;
    int rv;

    req.job_id = job_id;
    rv = tr_rpc_client_call(c->rpc, "troupe.v1.Head/DeleteJob", &req.base,
                            &troupe__v1__delete_job_reply__descriptor, (ProtobufCMessage **)&rep,
                            c->timeout_ms, 0, &e); /* a retry would be NOT_FOUND */
    if (rep != NULL) {
        troupe__v1__delete_job_reply__free_unpacked(rep, NULL);
    }
    return tr_client_finish(err, &e, rv);
}

TROUPE_API troupe_status troupe_stop_job(troupe_client *c, uint64_t job_id, troupe_error *err)
{
    Troupe__V1__StopJobRequest req = TROUPE__V1__STOP_JOB_REQUEST__INIT;
    Troupe__V1__StopJobReply *rep = NULL;
    tr_err e;
    int rv;

    req.job_id = job_id;
    rv = tr_rpc_client_call(c->rpc, "troupe.v1.Head/StopJob", &req.base,
                            &troupe__v1__stop_job_reply__descriptor, (ProtobufCMessage **)&rep, c->timeout_ms,
                            0, &e);
    if (rep != NULL) {
        troupe__v1__stop_job_reply__free_unpacked(rep, NULL);
    }
    return tr_client_finish(err, &e, rv);
}

TROUPE_API troupe_status troupe_read_logs(troupe_client *c, uint64_t job_id, const char *worker,
                                          uint64_t offset, uint32_t wait_ms, char **data, size_t *len,
                                          uint64_t *next_offset, int *done, troupe_error *err)
{
    Troupe__V1__GetLogsRequest req = TROUPE__V1__GET_LOGS_REQUEST__INIT;
    Troupe__V1__GetLogsReply *rep = NULL;
    tr_err e;
    int rv;

    *data = NULL;
    *len = 0;
    *next_offset = offset;
    *done = 0;
    req.job_id = job_id;
    req.worker = (char *)(worker ? worker : "");
    req.offset = offset;
    req.wait_ms = wait_ms;
    rv = tr_rpc_client_call(c->rpc, "troupe.v1.Head/GetLogs", &req.base,
                            &troupe__v1__get_logs_reply__descriptor, (ProtobufCMessage **)&rep,
                            c->timeout_ms + wait_ms, TR_RPC_IDEMPOTENT, &e);
    if (rv != TROUPE_OK) {
        return tr_client_finish(err, &e, rv);
    }
    *data = malloc(rep->data.len + 1);
    if (*data == NULL) {
        troupe__v1__get_logs_reply__free_unpacked(rep, NULL);
        return tr_client_finish(err, &e, tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory"));
    }
    if (rep->data.len > 0) { /* no bytes at all when there is no new output */
        memcpy(*data, rep->data.data, rep->data.len);
    }
    (*data)[rep->data.len] = '\0';
    *len = rep->data.len;
    *next_offset = rep->next_offset;
    *done = rep->done;
    troupe__v1__get_logs_reply__free_unpacked(rep, NULL);
    return tr_client_finish(err, &e, TROUPE_OK);
}
