/* jobs_sync.c - the head side of NodeSync: what each node should run, and
 * what it says it runs.
 *
 * An agent keeps one long poll open (wait_ms > 0) carrying the assignment
 * version it has applied; the head answers when the node's version moves (a
 * job started, stopped or restarted there) or when the poll's time is up.
 * Reports come with every sync and list every worker the agent knows, so a
 * worker the head placed there but the agent does not list (after it applied
 * the version that carried it) is known to be gone.
 *
 * No worker starts for a change that is not on disk: a version bump is
 * carried by a batch of the group commit (hn->bump_seq), and until that
 * batch is saved the agent is told the newest version that is (safe_version), with only the
 * workers issued at or below it. A placement that never reaches the disk
 * (the store cannot write, the head dies) so never starts a worker, and the
 * agent's version never claims a worker it was not sent (apply_reports
 * would call it gone). Polls are answered after each saved batch. Stops
 * are not held back: a worker the head no longer wants may be stopped a
 * batch before that is saved (stopping twice is harmless; running a rank
 * the disk never heard of is not). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "joblog.h"
#include "jobs.h"
#include "log.h"
#include "node_sync.h"
#include "util.h"

/* A bump arena for one reply: every string and array of the assignment
 * message is allocated here and freed at once after the reply is packed. */
typedef struct arena {
    void **blocks;
    size_t n, cap;
    int oom;
} arena;

static void *arena_alloc(arena *a, size_t size)
{
    void *p;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        void **b = realloc(a->blocks, cap * sizeof(*b));
        if (b == NULL) {
            a->oom = 1;
            return NULL;
        }
        a->blocks = b;
        a->cap = cap;
    }
    p = calloc(1, size ? size : 1);
    if (p == NULL) {
        a->oom = 1;
        return NULL;
    }
    a->blocks[a->n++] = p;
    return p;
}

static char *arena_printf(arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *arena_printf(arena *a, const char *fmt, ...)
{
    va_list ap;
    int n;
    char *s;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    s = arena_alloc(a, (size_t)n + 1);
    if (s != NULL) {
        va_start(ap, fmt);
        vsnprintf(s, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    return s;
}

static void arena_free(arena *a)
{
    for (size_t i = 0; i < a->n; i++) {
        free(a->blocks[i]);
    }
    free(a->blocks);
}

static void env_add(arena *a, Troupe__V1__EnvVar **env, size_t *n, const char *k, const char *v)
{
    Troupe__V1__EnvVar *e;
    for (size_t i = 0; i < *n; i++) { /* later layers override earlier ones */
        if (strcmp(env[i]->key, k) == 0) {
            env[i]->value = (char *)v;
            return;
        }
    }
    if ((e = arena_alloc(a, sizeof(*e))) == NULL) {
        return;
    }
    troupe__v1__env_var__init(e);
    e->key = (char *)k;
    e->value = (char *)v;
    env[(*n)++] = e;
}

static const char *gpu_list(arena *a, const Troupe__V1__WorkerInfo *w)
{
    char *s = arena_alloc(a, w->n_gpus * 4 + 1);
    size_t off = 0;
    for (size_t k = 0; s != NULL && k < w->n_gpus; k++) {
        off += (size_t)sprintf(s + off, "%s%u", k ? "," : "", w->gpus[k]);
    }
    return s ? s : "";
}

/* worker_env layers: safe defaults < job env < group env < troupe's own. */
static void worker_env(tr_head *h, arena *a, const tr_head_job *hj, const Troupe__V1__WorkerInfo *w,
                       Troupe__V1__WorkerAssignment *wa)
{
    const Troupe__V1__JobSpec *sp = hj->j->spec;
    const Troupe__V1__GroupSpec *gs = NULL;
    const Troupe__V1__GroupInfo *gi = NULL;
    size_t cap = 32 + sp->n_env;

    for (size_t g = 0; g < sp->n_groups; g++) {
        if (strcmp(sp->groups[g]->name, w->group) == 0) {
            gs = sp->groups[g];
            gi = g < hj->j->n_groups ? hj->j->groups[g] : NULL;
        }
    }
    cap += gs ? gs->n_env : 0;
    if ((wa->env = arena_alloc(a, cap * sizeof(*wa->env))) == NULL) {
        return;
    }
    env_add(a, wa->env, &wa->n_env, "NCCL_NVLS_ENABLE", "0");
    for (size_t i = 0; i < sp->n_env; i++) {
        env_add(a, wa->env, &wa->n_env, sp->env[i]->key, sp->env[i]->value);
    }
    for (size_t i = 0; gs != NULL && i < gs->n_env; i++) {
        env_add(a, wa->env, &wa->n_env, gs->env[i]->key, gs->env[i]->value);
    }
    env_add(a, wa->env, &wa->n_env, "TROUPE_HEAD", h->cfg.advertise ? h->cfg.advertise : h->cfg.listen);
    env_add(a, wa->env, &wa->n_env, "TROUPE_JOB", arena_printf(a, "%llu", (unsigned long long)hj->j->id));
    env_add(a, wa->env, &wa->n_env, "TROUPE_JOB_NAME", sp->name);
    env_add(a, wa->env, &wa->n_env, "TROUPE_GROUP", w->group);
    env_add(a, wa->env, &wa->n_env, "TROUPE_WORKER", w->name);
    env_add(a, wa->env, &wa->n_env, "TROUPE_ATTEMPT", arena_printf(a, "%u", w->attempt));
    env_add(a, wa->env, &wa->n_env, "RANK", arena_printf(a, "%u", w->rank));
    env_add(a, wa->env, &wa->n_env, "WORLD_SIZE", arena_printf(a, "%u", gi ? gi->world_size : 1));
    env_add(a, wa->env, &wa->n_env, "LOCAL_RANK", arena_printf(a, "%u", w->local_rank));
    env_add(a, wa->env, &wa->n_env, "LOCAL_WORLD_SIZE", arena_printf(a, "%u", w->local_world_size));
    env_add(a, wa->env, &wa->n_env, "NODE_RANK", arena_printf(a, "%u", w->node_rank));
    env_add(a, wa->env, &wa->n_env, "MASTER_ADDR", gi ? gi->master_addr : "127.0.0.1");
    env_add(a, wa->env, &wa->n_env, "MASTER_PORT", arena_printf(a, "%u", gi ? gi->master_port : 0));
    env_add(a, wa->env, &wa->n_env, "CUDA_VISIBLE_DEVICES", gpu_list(a, w));
    if (sp->profile != NULL && sp->profile->steps[0]) {
        env_add(a, wa->env, &wa->n_env, "TROUPE_PROFILE_STEPS", sp->profile->steps);
        env_add(a, wa->env, &wa->n_env, "TROUPE_PROFILE_WORKERS", sp->profile->workers);
    }
    if (sp->profile != NULL && sp->profile->nsys) { /* troupe-node wraps the matching workers */
        env_add(a, wa->env, &wa->n_env, "TROUPE_NSYS", "1");
        env_add(a, wa->env, &wa->n_env, "TROUPE_NSYS_OPTIONS", sp->profile->nsys_options);
    }
}

static int wanted(const tr_head_job *hj)
{
    return hj->j->state == TROUPE__V1__JOB_STATE__JOB_RUNNING && !hj->j->stop_requested && !hj->requeue;
}

static int worker_live(const Troupe__V1__WorkerInfo *w)
{
    return w->state == TROUPE__V1__WORKER_STATE__WORKER_PENDING ||
           w->state == TROUPE__V1__WORKER_STATE__WORKER_RUNNING;
}

/* safe_version: hn's newest assignment version whose changes are on disk. */
static uint64_t safe_version(const tr_head *h, const tr_head_node *hn)
{
    return hn->bump_seq <= h->saved_seq ? hn->version : hn->unsaved_version - 1;
}

void tr_jobs_sync_bumped(tr_head *h, tr_head_node *hn)
{
    if (hn->bump_seq <= h->saved_seq) {
        hn->unsaved_version = hn->version; /* the first one not on disk */
    }
    hn->bump_seq = tr_head_change_seq(h);
    tr_head_commit_nudge(h);
}

/* sendable: worker i of hj, on this node, is wanted and saved. */
static int sendable(const tr_head_job *hj, size_t i, uint64_t node_id, uint64_t safe)
{
    const Troupe__V1__WorkerInfo *w = hj->j->workers[i];
    return w->node_id == node_id && worker_live(w) && (hj->issued == NULL || hj->issued[i] <= safe);
}

/* build_set fills rep with every worker this node should be running, as of
 * the newest version on disk. */
static void build_set(tr_head *h, tr_head_node *hn, arena *a, Troupe__V1__NodeSyncReply *rep)
{
    size_t n = 0;
    uint64_t safe = safe_version(h, hn);

    rep->version = safe;
    /* No pruning here: this runs nested inside apply_reports' walk of the
     * same list (a release can start jobs and answer this node's poll). */
    for (size_t k = 0; k < hn->n_placed; k++) {
        const tr_head_job *hj = hn->placed[k];
        for (size_t i = 0; wanted(hj) && i < hj->j->n_workers; i++) {
            n += sendable(hj, i, hn->n->id, safe);
        }
    }
    if (n == 0 || (rep->workers = arena_alloc(a, n * sizeof(*rep->workers))) == NULL) {
        return;
    }
    for (size_t k = 0; k < hn->n_placed; k++) {
        const tr_head_job *hj = hn->placed[k];
        const Troupe__V1__GroupSpec *gs;
        for (size_t i = 0; wanted(hj) && i < hj->j->n_workers; i++) {
            const Troupe__V1__WorkerInfo *w = hj->j->workers[i];
            Troupe__V1__WorkerAssignment *wa;
            if (!sendable(hj, i, hn->n->id, safe) || (wa = arena_alloc(a, sizeof(*wa))) == NULL) {
                continue;
            }
            troupe__v1__worker_assignment__init(wa);
            gs = hj->j->spec->groups[0];
            for (size_t g = 0; g < hj->j->spec->n_groups; g++) {
                if (strcmp(hj->j->spec->groups[g]->name, w->group) == 0) {
                    gs = hj->j->spec->groups[g];
                }
            }
            wa->job_id = hj->j->id;
            wa->name = w->name;
            wa->attempt = w->attempt;
            wa->command = gs->command;
            wa->n_command = gs->n_command;
            wa->workdir = hj->j->spec->workdir;
            wa->gpus = w->gpus;
            wa->n_gpus = w->n_gpus;
            if (h->auth != NULL && (wa->credential = arena_alloc(a, TR_AUTH_TOKEN_MAX)) != NULL) {
                tr_auth_worker_credential(h->auth, hj->j->id, w->attempt, wa->credential, TR_AUTH_TOKEN_MAX);
            }
            worker_env(h, a, hj, w, wa);
            rep->workers[rep->n_workers++] = wa;
        }
    }
}

static void reply_set(tr_head *h, tr_head_node *hn, tr_rpc_call *call)
{
    Troupe__V1__NodeSyncReply rep = TROUPE__V1__NODE_SYNC_REPLY__INIT;
    arena a = {0};

    build_set(h, hn, &a, &rep);
    if (a.oom) {
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory building assignments");
    } else {
        tr_rpc_reply(call, &rep.base);
    }
    arena_free(&a);
}

static void reply_set_later(tr_head *h, tr_rpc_call *call, uint64_t node_id)
{
    tr_head_node *hn = tr_head_node_find(h, node_id);
    if (hn == NULL) {
        tr_rpc_reply_error(call, TROUPE_FAILED_PRECONDITION, "node %llu is unknown; register again",
                           (unsigned long long)node_id);
        return;
    }
    reply_set(h, hn, call);
}

void tr_jobs_answer_sync(tr_head *h, tr_head_node *hn)
{
    tr_rpc_call *call = hn->sync_waiter;
    if (call == NULL) {
        return;
    }
    hn->sync_waiter = NULL;
    reply_set(h, hn, call);
    tr_rpc_call_release(call);
}

void tr_jobs_sync_saved(tr_head *h)
{
    for (size_t i = 0; i < h->n_nodes; i++) {
        tr_head_node *hn = &h->nodes[i];
        if (hn->sync_waiter != NULL && safe_version(h, hn) != hn->sync_version) {
            tr_jobs_answer_sync(h, hn);
        }
    }
}

static void on_sync_expire(tr_rpc_call *call, void *arg)
{
    tr_head *h = arg;
    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i < h->n_nodes; i++) {
        if (h->nodes[i].sync_waiter == call) {
            h->nodes[i].sync_waiter = NULL;
            tr_rpc_call_release(call);
        }
    }
    pthread_mutex_unlock(&h->mu);
}

static const Troupe__V1__WorkerReport *find_report(const Troupe__V1__NodeSyncRequest *req, uint64_t job,
                                                   const char *name)
{
    for (size_t r = 0; r < req->n_reports; r++) {
        if (req->reports[r]->job_id == job && strcmp(req->reports[r]->name, name) == 0) {
            return req->reports[r];
        }
    }
    return NULL;
}

static int report_ended(const Troupe__V1__WorkerReport *r)
{
    return r->state == TROUPE__V1__WORKER_STATE__WORKER_EXITED ||
           r->state == TROUPE__V1__WORKER_STATE__WORKER_FAILED_TO_START;
}

/* apply_one merges what the agent says about worker wi; returns 1 when the
 * worker just ended. Output the head cannot take now (*held set) holds back
 * the state that came with it: a worker's end is taken with its last bytes,
 * so a job never ends (nor `logs -f`) before its output is in. Memory only:
 * the I/O thread writes the output. */
static int apply_one(tr_head *h, tr_head_job *hj, size_t wi, const Troupe__V1__WorkerReport *r, int *held)
{
    Troupe__V1__WorkerInfo *w = hj->j->workers[wi];

    if ((r->log.len > 0 || report_ended(r)) &&
        !tr_joblog_report(h, hj, (uint32_t)wi, w->name, r->attempt, r->log_offset_set, r->log_offset,
                          (const char *)r->log.data, r->log.len, report_ended(r))) {
        *held = 1;
        return 0;
    }
    if (r->attempt != w->attempt || !worker_live(w)) {
        return 0; /* an old attempt still winding down, or already settled */
    }
    switch (r->state) {
    case TROUPE__V1__WORKER_STATE__WORKER_RUNNING:
        if (w->state == TROUPE__V1__WORKER_STATE__WORKER_PENDING) {
            w->state = TROUPE__V1__WORKER_STATE__WORKER_RUNNING;
            w->pid = r->pid;
            w->started_ms = tr_wall_ms();
            w->paused = r->paused;
            tr_jobs_touch(h, hj);
        } else if (w->paused != r->paused) {
            w->paused = r->paused; /* SIGSTOP / SIGCONT: shown as PAUSED */
            tr_jobs_touch(h, hj);
        }
        return 0;
    case TROUPE__V1__WORKER_STATE__WORKER_EXITED:
    case TROUPE__V1__WORKER_STATE__WORKER_FAILED_TO_START:
        w->state = r->state;
        w->paused = 0;
        w->exit_code = r->exit_code;
        w->signal = r->signal;
        w->pid = r->pid;
        w->ended_ms = tr_wall_ms();
        tr_jobs_set_str(&w->message, r->message);
        if (r->nsys_report != NULL && r->nsys_report[0] != '\0') {
            tr_jobs_set_str(&w->nsys_report, r->nsys_report); /* on its node: w->node_name */
        }
        tr_jobs_touch(h, hj);
        return 1;
    default: return 0;
    }
}

/* mark_absent settles a worker its node no longer has. */
static void mark_absent(tr_head *h, tr_head_job *hj, Troupe__V1__WorkerInfo *w)
{
    int gone_as_asked = tr_jobs_is_terminal(hj) || hj->requeue;
    w->state =
        gone_as_asked ? TROUPE__V1__WORKER_STATE__WORKER_EXITED : TROUPE__V1__WORKER_STATE__WORKER_LOST;
    w->ended_ms = tr_wall_ms();
    tr_jobs_set_str(&w->message,
                    gone_as_asked ? "stopped" : "not running on its node (was its agent restarted?)");
    tr_jobs_touch(h, hj);
}

static long worker_index(const tr_head_job *hj, const char *name)
{
    for (size_t i = 0; i < hj->j->n_workers; i++) {
        if (strcmp(hj->j->workers[i]->name, name) == 0) {
            return (long)i;
        }
    }
    return -1;
}

/* set_fenced records how many workers the node runs that are not its own
 * (node_life.c): while any runs, their GPUs are not free for new work. */
static void set_fenced(tr_head *h, tr_head_node *hn, uint32_t fenced)
{
    if (hn->n->fenced_workers == fenced) {
        return;
    }
    TR_LOG(TR_LOG_INFO, "node fenced workers node=%llu name=%s from=%u to=%u", (unsigned long long)hn->n->id,
           hn->n->name, hn->n->fenced_workers, fenced);
    hn->n->fenced_workers = fenced;
    tr_head_dirty_node(h, hn->n->id);
    tr_jobs_node_state(h, hn->n);
}

/* tr_jobs_apply_reports merges a node's complete worker list. Reported
 * workers are looked up by job id (settled jobs too: a last log line may
 * arrive after the release); the search for workers the node no longer has
 * walks only this node's jobs (its index), so its cost grows neither with
 * the head's history nor with the jobs on other nodes. */
int tr_jobs_apply_reports(tr_head *h, tr_head_node *hn, const Troupe__V1__NodeSyncRequest *req)
{
    uint32_t fenced = 0;
    int held = 0;

    for (size_t r = 0; r < req->n_reports; r++) {
        tr_head_job *hj = tr_jobs_find(h, req->reports[r]->job_id);
        long i = hj ? worker_index(hj, req->reports[r]->name) : -1;
        if (req->reports[r]->state == TROUPE__V1__WORKER_STATE__WORKER_RUNNING &&
            (i < 0 || hj->j->workers[i]->node_id != hn->n->id || hj->j->workers[i]->attempt != req->reports[r]->attempt)) {
            fenced++; /* not ours to run: an earlier self's, or an old attempt winding down */
        }
        if (i < 0 || hj->j->workers[i]->node_id != hn->n->id) {
            continue;
        }
        int one_held = 0;
        if (apply_one(h, hj, (size_t)i, req->reports[r], &one_held)) {
            tr_jobs_worker_ended(h, hj, (size_t)i);
        }
        held += one_held;
    }
    set_fenced(h, hn, fenced);
    tr_jobs_index_prune(hn); /* the only place that shrinks the list */
    /* By index, re-reading the array: settling a worker can release a job's
     * GPUs and start others here, which appends to (and may move) the list. */
    for (size_t k = 0; k < hn->n_placed; k++) {
        tr_head_job *hj = hn->placed[k];
        if (hj->issued == NULL || tr_jobs_is_settled(hj)) {
            continue;
        }
        for (size_t i = 0; i < hj->j->n_workers; i++) {
            Troupe__V1__WorkerInfo *w = hj->j->workers[i];
            if (w->node_id == hn->n->id && worker_live(w) && req->version >= hj->issued[i] &&
                find_report(req, hj->j->id, w->name) == NULL) {
                mark_absent(h, hj, w);
                tr_jobs_worker_ended(h, hj, i);
            }
        }
    }
    return held;
}

void tr_head_node_sync(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    /* In the call's scratch memory (tr_rpc_unpack_scratch), gone when this
     * returns: what is applied is copied (worker messages, log lines). */
    const Troupe__V1__NodeSyncRequest *req = (const Troupe__V1__NodeSyncRequest *)tr_rpc_unpack_scratch(
        call, &troupe__v1__node_sync_request__descriptor);
    tr_head_node *hn;
    int held = 0;

    if (req == NULL) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    hn = tr_head_node_find(h, req->node_id);
    if (hn == NULL || tr_head_node_gone(hn->n)) {
        pthread_mutex_unlock(&h->mu);
        tr_rpc_reply_error(call, TROUPE_FAILED_PRECONDITION, "node %llu is %s; register again",
                           (unsigned long long)req->node_id, hn ? "DEAD or LEFT" : "unknown");
        return;
    }
    if (!tr_head_node_allowed(call, hn)) {
        pthread_mutex_unlock(&h->mu);
        return; /* answered */
    }
    tr_head_node_seen(h, hn, call); /* a sync is as good as a heartbeat */
    if (req->wait_ms == 0) {
        /* Only report calls carry the agent's complete worker list; a long
         * poll carries none and must not read as "no workers". */
        held = tr_jobs_apply_reports(h, hn, req);
    }
    if (held > 0) {
        /* The rest is applied; what was held back comes again, and what was
         * taken is skipped then (by its offsets). */
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED,
                           "output of %d workers not taken: the head holds %llu bytes of output it could not "
                           "write yet (max_log_memory_bytes; free space in %s/logs); send it again",
                           held, (unsigned long long)tr_joblog_unsaved(h), h->cfg.state_dir);
    } else if (req->wait_ms > 0 && req->version == safe_version(h, hn)) {
        tr_jobs_answer_sync(h, hn); /* a newer poll supersedes an older one */
        tr_rpc_defer(call, on_sync_expire, h);
        hn->sync_waiter = call;
        hn->sync_version = req->version;
        hn->sync_until = tr_now_ms() + (req->wait_ms < TR_NODE_SYNC_WAIT_MAX_MS ? req->wait_ms : TR_NODE_SYNC_WAIT_MAX_MS);
    } else if (req->wait_ms == 0 && h->store_failing) {
        /* Applied in memory (and retried to disk), but not acknowledged: the
         * agent keeps the report and sends it again. Answered now, not parked:
         * a report parked until the disk has room would hold up the agent's
         * heartbeats for its whole deadline. */
        tr_rpc_reply_error(
            call, h->store_code == TROUPE_RESOURCE_EXHAUSTED ? TROUPE_RESOURCE_EXHAUSTED : TROUPE_UNAVAILABLE,
            "report not saved yet (state store: %s); send it again", h->store_error);
    } else if (req->wait_ms == 0) {
        /* The agent forgets settled workers once this is answered, so answer
         * only when what it reported is on disk. */
        tr_head_after_commit_or_resend(h, call, reply_set_later, hn->n->id);
    } else {
        reply_set(h, hn, call);
    }
    pthread_mutex_unlock(&h->mu);
}
