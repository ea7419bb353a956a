/* profile.c - the head's profile-control service: SetProfile (`troupe
 * profile`) and WorkerControl, the long poll every worker runtime keeps open.
 *
 * The setting lives on the job record (Job.profile_control), so it is durable
 * and shown by `troupe job`; SetProfile answers once it is on disk. Each
 * worker's control thread waits here with the version it has; a change (or
 * the job stopping, or the worker's attempt being superseded) answers every
 * waiter of the job at once, and a waiter whose time is up is answered with
 * the setting as it is, so the worker polls again. Everything under h->mu.
 *
 * A worker is told only what is on disk (tr_jobs_saved), as GetJob is: a
 * setting or a stop the head could still lose in a crash, or cannot write
 * while its disk is full, is not acted on. A waiter of a job with unsaved
 * changes is answered once they are saved (job_saved), or UNAVAILABLE near
 * its call's deadline (the worker asks again). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bgw.h"
#include "elastic.h"
#include "jobs.h"
#include "jobspec.h"
#include "jobspec_int.h"
#include "log.h"
#include "profile.h"
#include "util.h"

typedef struct ctl_wait {
    tr_rpc_call *call;
    uint64_t job_id;
    uint64_t after_version;
    char worker[128];
    uint32_t attempt;
    int knows_epoch; /* an elastic group's member: answer when its epoch moves on */
    uint32_t epoch;
    int64_t until; /* answer with the setting as it is from then */
    int64_t last;  /* the call's deadline less a margin: UNAVAILABLE from then while unsaved */
    struct ctl_wait *next;
} ctl_wait;

typedef struct profile_svc {
    tr_head *h;
    ctl_wait *waiters;
    tr_bgw *timer; /* answers polls at their deadline (under h->mu) */
} profile_svc;

static profile_svc *svc_of(void *head)
{
    tr_head *h = head;
    for (size_t i = 0; i < h->n_svc; i++) {
        if (h->svc[i] == &tr_profile_service) {
            return h->svc_state[i];
        }
    }
    return NULL;
}

static const Troupe__V1__WorkerInfo *worker_find(const Troupe__V1__Job *j, const char *name)
{
    for (size_t i = 0; i < j->n_workers; i++) {
        if (strcmp(j->workers[i]->name, name) == 0) {
            return j->workers[i];
        }
    }
    return NULL;
}

/* must_stop: the job is over for this worker (ended, stopping, being placed
 * again, or its attempt superseded). */
static int must_stop(const tr_head_job *hj, const char *worker, uint32_t attempt)
{
    const Troupe__V1__WorkerInfo *w = worker_find(hj->j, worker);
    return tr_jobs_is_terminal(hj) || hj->j->stop_requested || hj->requeue || w == NULL || w->attempt != attempt ||
           w->removed;
}

/* membership_of fills m with worker's place in its elastic group; 0 when
 * the group is not elastic (or the worker unknown). */
static int membership_of(const tr_head_job *hj, const char *worker, Troupe__V1__Membership *m)
{
    const Troupe__V1__WorkerInfo *w = worker_find(hj->j, worker);
    const Troupe__V1__GroupInfo *gi = w != NULL ? tr_elastic_group(hj->j, w->group) : NULL;

    if (gi == NULL || tr_elastic_spec(hj->j, w->group) == NULL) {
        return 0;
    }
    m->epoch = tr_elastic_epoch(hj->j, w->group);
    m->rank = w->member_rank;
    m->size = gi->world_size;
    m->removed = w->removed;
    return 1;
}

/* epoch_moved: a waiter that knows its elastic group's epoch has news. */
static int epoch_moved(const tr_head_job *hj, const char *worker, int knows, uint32_t epoch)
{
    Troupe__V1__Membership m = TROUPE__V1__MEMBERSHIP__INIT;
    return knows && membership_of(hj, worker, &m) && m.epoch != epoch;
}

static uint64_t version_of(const tr_head_job *hj)
{
    return hj->j->profile_control ? hj->j->profile_control->version : 0;
}

static void reply_control(tr_rpc_call *call, const tr_head_job *hj, const char *worker, int stop)
{
    Troupe__V1__WorkerControlReply rep = TROUPE__V1__WORKER_CONTROL_REPLY__INIT;
    Troupe__V1__Membership m = TROUPE__V1__MEMBERSHIP__INIT;
    if (membership_of(hj, worker, &m)) {
        rep.membership = &m;
    }
    rep.version = version_of(hj);
    rep.control = hj->j->profile_control; /* borrowed; packed under h->mu */
    rep.stop = stop;
    rep.head_ms = tr_wall_ms();
    tr_rpc_reply(call, &rep.base);
}

/* due: whether waiter w of job hj (NULL: gone) is to be answered now. */
static int due(const ctl_wait *w, const tr_head_job *hj, int saved, int64_t now)
{
    if (hj == NULL) {
        return 1;
    }
    if (!saved) {
        return now >= w->last;
    }
    return now >= w->until || must_stop(hj, w->worker, w->attempt) || version_of(hj) != w->after_version ||
           epoch_moved(hj, w->worker, w->knows_epoch, w->epoch);
}

/* answer_job answers the waiters of job job_id that have news or whose time
 * is up; a job gone from the head answers its waiters NOT_FOUND, one with
 * changes not on disk only those at their call's end (UNAVAILABLE). */
static void answer_job(profile_svc *s, uint64_t job_id, int64_t now)
{
    tr_head_job *hj = tr_jobs_find(s->h, job_id);
    int saved = hj != NULL && tr_jobs_saved(s->h, hj);

    for (ctl_wait **pp = &s->waiters; *pp != NULL;) {
        ctl_wait *w = *pp;
        if (w->job_id != job_id || !due(w, hj, saved, now)) {
            if (w->job_id == job_id && hj != NULL && !saved && version_of(hj) != w->after_version) {
                /* What a test waits on: the news was there and held back. */
                TR_LOG(TR_LOG_DEBUG, "profile control held job=%llu worker=%s version=%llu: not saved yet",
                       (unsigned long long)job_id, w->worker, (unsigned long long)version_of(hj));
            }
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        if (hj == NULL) {
            tr_rpc_reply_error(w->call, TROUPE_NOT_FOUND, "no job %llu", (unsigned long long)job_id);
        } else if (!saved) {
            tr_rpc_reply_error(w->call, TROUPE_UNAVAILABLE,
                               "job %llu has changes the head has not saved yet%s%s; ask again",
                               (unsigned long long)job_id, s->h->store_failing ? " (state store: " : "",
                               s->h->store_failing ? s->h->store_error : "");
        } else {
            reply_control(w->call, hj, w->worker, must_stop(hj, w->worker, w->attempt));
        }
        tr_rpc_call_release(w->call);
        free(w);
    }
}

/* job_changed and job_saved: a change is answered once it is on disk. */
static void job_changed(tr_head *h, tr_head_job *hj, void *state)
{
    profile_svc *s = state;
    (void)h;
    if (s->waiters != NULL) {
        answer_job(s, hj->j->id, tr_now_ms());
    }
}

static void on_call_expire(tr_rpc_call *call, void *arg)
{
    profile_svc *s = arg;
    pthread_mutex_lock(&s->h->mu);
    for (ctl_wait **pp = &s->waiters; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->call == call) {
            ctl_wait *w = *pp;
            *pp = w->next;
            tr_rpc_call_release(call);
            free(w);
            break;
        }
    }
    pthread_mutex_unlock(&s->h->mu);
}

/* tick (the timer, under h->mu): answers the polls that are due; returns
 * when the next one is. */
static int64_t tick(void *arg, int64_t now)
{
    profile_svc *s = arg;
    int64_t next = INT64_MAX;

    for (ctl_wait *w = s->waiters; w != NULL;) {
        tr_head_job *hj = tr_jobs_find(s->h, w->job_id);
        int64_t at;
        if (due(w, hj, hj != NULL && tr_jobs_saved(s->h, hj), now)) {
            answer_job(s, w->job_id, now); /* answers w and every other due waiter of its job */
            w = s->waiters;                /* the list changed */
            continue;
        }
        /* Past `until`, a waiter of an unsaved job waits for the save
         * (job_saved answers it) until `last`. */
        at = w->until > now ? w->until : w->last;
        next = at < next ? at : next;
        w = w->next;
    }
    return next;
}

/* ---- WorkerControl ---------------------------------------------------------- */

static void worker_control(tr_rpc_call *call, void *user)
{
    profile_svc *s = svc_of(user);
    Troupe__V1__WorkerControlRequest *req =
        (Troupe__V1__WorkerControlRequest *)tr_rpc_unpack(call, &troupe__v1__worker_control_request__descriptor);
    const Troupe__V1__WorkerRef *from;
    tr_head_job *hj;
    ctl_wait *w;

    if (req == NULL) {
        return;
    }
    from = req->from;
    if (!tr_rpc_require_worker(call, from != NULL ? from->job_id : 0, from != NULL ? from->worker : NULL)) {
        goto out; /* answered: a worker credential of another job */
    }
    pthread_mutex_lock(&s->h->mu);
    hj = from != NULL ? tr_jobs_find(s->h, from->job_id) : NULL;
    if (from == NULL || from->worker == NULL || from->worker[0] == '\0') {
        tr_rpc_reply_error(call, TROUPE_INVALID_ARGUMENT, "the call does not say which worker it comes from");
    } else if (hj == NULL) {
        tr_rpc_reply_error(call, TROUPE_NOT_FOUND, "no job %llu", (unsigned long long)from->job_id);
    } else if (worker_find(hj->j, from->worker) == NULL) {
        tr_rpc_reply_error(call, TROUPE_PERMISSION_DENIED,
                           "worker %s is not part of job %llu: a worker's calls are scoped to its own job",
                           from->worker, (unsigned long long)from->job_id);
    } else if (tr_jobs_saved(s->h, hj) &&
               (must_stop(hj, from->worker, from->attempt) || version_of(hj) != req->after_version ||
                req->wait_ms == 0 || epoch_moved(hj, from->worker, req->knows_membership, req->membership_epoch))) {
        reply_control(call, hj, from->worker, must_stop(hj, from->worker, from->attempt));
    } else if ((w = calloc(1, sizeof(*w))) == NULL) {
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
    } else {
        int64_t rpc = tr_rpc_call_deadline(call) - 20;
        w->call = call;
        w->job_id = from->job_id;
        w->after_version = req->after_version;
        tr_strlcpy(w->worker, from->worker, sizeof(w->worker));
        w->attempt = from->attempt;
        w->knows_epoch = req->knows_membership;
        w->epoch = req->membership_epoch;
        w->until = tr_now_ms() + req->wait_ms;
        w->until = w->until < rpc ? w->until : rpc;
        w->last = rpc > w->until ? rpc : w->until;
        w->next = s->waiters;
        s->waiters = w;
        tr_rpc_defer(call, on_call_expire, s);
        TR_LOG(TR_LOG_DEBUG, "profile control parked job=%llu worker=%s after=%llu", (unsigned long long)w->job_id,
               w->worker, (unsigned long long)w->after_version);
        tr_bgw_poke(s->timer, w->until);
    }
    pthread_mutex_unlock(&s->h->mu);
out:
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* ---- SetProfile ---------------------------------------------------------------- */

int tr_profile_check(const Troupe__V1__ProfileControl *pc, tr_err *err)
{
    int a, b, rv;
    int has_steps = pc->steps != NULL && pc->steps[0] != '\0';

    if (pc->off) {
        if (has_steps || pc->next || pc->align) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "--off takes no --steps, --next or --align");
        }
        return TROUPE_OK;
    }
    if (has_steps == (pc->next > 0)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          has_steps ? "give --steps or --next, not both"
                                    : "nothing to set: give --steps A:B, --next N or --off");
    }
    if (pc->align > 0 && pc->next == 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "--align goes with --next (relative steps)");
    }
    if (pc->next > 1000000 || pc->align > 1000000) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "--next and --align are at most 1000000");
    }
    if (has_steps && (rv = tr_profile_range_parse(pc->steps, &a, &b, err)) != TROUPE_OK) {
        return rv;
    }
    if ((rv = tr_js_globs_check(pc->workers, err)) != TROUPE_OK) {
        tr_err_prefix(err, "--workers");
        return rv;
    }
    return TROUPE_OK;
}

static Troupe__V1__ProfileControl *control_copy(const Troupe__V1__ProfileControl *in, uint64_t version)
{
    Troupe__V1__ProfileControl *pc = calloc(1, sizeof(*pc));

    if (pc == NULL) {
        return NULL;
    }
    troupe__v1__profile_control__init(pc);
    pc->version = version;
    pc->off = in->off;
    pc->steps = strdup(in->off || in->steps == NULL ? "" : in->steps);
    pc->next = in->off ? 0 : in->next;
    pc->align = in->off ? 0 : in->align;
    pc->workers = strdup(in->off || in->workers == NULL ? "" : in->workers);
    pc->set_ms = tr_wall_ms();
    if (pc->steps == NULL || pc->workers == NULL) {
        troupe__v1__profile_control__free_unpacked(pc, NULL);
        return NULL;
    }
    return pc;
}

static void reply_set(tr_head *h, tr_rpc_call *call, uint64_t job_id)
{
    Troupe__V1__SetProfileReply rep = TROUPE__V1__SET_PROFILE_REPLY__INIT;
    tr_head_job *hj = tr_jobs_find(h, job_id);
    rep.control = hj ? hj->j->profile_control : NULL;
    tr_rpc_reply(call, &rep.base);
}

static int set_profile_locked(tr_head *h, tr_rpc_call *call, const Troupe__V1__SetProfileRequest *req, tr_err *err)
{
    tr_head_job *hj = tr_jobs_find(h, req->job_id);
    Troupe__V1__ProfileControl *pc;
    int rv;

    if (hj == NULL) {
        return tr_err_set(err, TROUPE_NOT_FOUND, "no job %llu (see troupe jobs)", (unsigned long long)req->job_id);
    }
    if (tr_jobs_is_terminal(hj)) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "job %llu already ended (%s): nothing to profile",
                          (unsigned long long)req->job_id, hj->j->reason);
    }
    if (req->control == NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "SetProfile: control is missing");
    }
    if ((rv = tr_profile_check(req->control, err)) != TROUPE_OK) {
        return rv;
    }
    if ((pc = control_copy(req->control, version_of(hj) + 1)) == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
    }
    if (hj->j->profile_control != NULL) {
        troupe__v1__profile_control__free_unpacked(hj->j->profile_control, NULL);
    }
    hj->j->profile_control = pc;
    TR_LOG(TR_LOG_INFO, "job=%llu profile version=%llu off=%d steps=%s next=%u align=%u workers=%s",
           (unsigned long long)hj->j->id, (unsigned long long)pc->version, pc->off, pc->steps, pc->next, pc->align,
           pc->workers);
    tr_jobs_touch(h, hj); /* durable, and the job's control waiters hear of it (job_changed) */
    tr_head_after_commit(h, call, reply_set, hj->j->id);
    return TROUPE_OK;
}

static void set_profile(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__SetProfileRequest *req =
        (Troupe__V1__SetProfileRequest *)tr_rpc_unpack(call, &troupe__v1__set_profile_request__descriptor);
    tr_err err;
    int rv;

    if (req == NULL) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    rv = tr_head_store_refuse(h, call) ? TROUPE_OK /* answered */ : set_profile_locked(h, call, req, &err);
    pthread_mutex_unlock(&h->mu);
    if (rv != TROUPE_OK) {
        TR_LOG(TR_LOG_INFO, "refused SetProfile job=%llu: %s", (unsigned long long)req->job_id, err.msg);
        tr_rpc_reply_error(call, rv, "%s", err.msg);
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* ---- the service ------------------------------------------------------------- */

/* Scopes (rpc.h): users set profiling; a worker polls for its own job only
 * (worker_control checks the worker with tr_rpc_require_worker). */
static const tr_rpc_method profile_methods[] = {
    {"troupe.v1.Head/SetProfile", set_profile, TR_SCOPES_USER},
    {"troupe.v1.Head/WorkerControl", worker_control, TR_SCOPES_WORKER_JOB},
    {NULL, NULL, 0},
};

static int svc_start(tr_head *h, void **state, tr_err *err)
{
    profile_svc *s = calloc(1, sizeof(*s));
    tr_bgw_opts to = {.name = "profile-control timer", .mu = &h->mu, .tick = tick, .arg = s};
    int rv;

    if (s == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    s->h = h;
    if ((rv = tr_bgw_start(&s->timer, &to, err)) != TROUPE_OK) {
        free(s);
        return rv;
    }
    *state = s;
    return TROUPE_OK;
}

static void svc_stop(tr_head *h, void *state)
{
    profile_svc *s = state;

    (void)h;
    tr_bgw_stop(s->timer);
    /* The RPC server already answered deferred calls and ran on_call_expire. */
    while (s->waiters != NULL) {
        ctl_wait *w = s->waiters;
        s->waiters = w->next;
        tr_rpc_call_release(w->call);
        free(w);
    }
    free(s);
}

const tr_head_service tr_profile_service = {
    .name = "profile control",
    .methods = profile_methods,
    .start = svc_start,
    .stop = svc_stop,
    .job_changed = job_changed,
    .job_saved = job_changed,
};
