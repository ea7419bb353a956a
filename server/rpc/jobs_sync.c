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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "handlers.h"
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
    if (s != NULL) {
        s[0] = '\0'; /* a CPU-only worker: CUDA_VISIBLE_DEVICES="" hides every GPU */
    }
    for (size_t k = 0; s != NULL && k < w->n_gpus; k++) {
        off += (size_t)sprintf(s + off, "%s%u", k ? "," : "", w->gpus[k]);
    }
    return s ? s : "";
}

/* job_env: the job's common layer, safe defaults < the job's env: entries. */
static void job_env(arena *a, const Troupe__V1__JobSpec *sp, Troupe__V1__JobCommon *jc)
{
    if ((jc->env = arena_alloc(a, (1 + sp->n_env) * sizeof(*jc->env))) == NULL) {
        return;
    }
    env_add(a, jc->env, &jc->n_env, "NCCL_NVLS_ENABLE", "0");
    for (size_t i = 0; i < sp->n_env; i++) {
        env_add(a, jc->env, &jc->n_env, sp->env[i]->key, sp->env[i]->value);
    }
}

/* user_sets: the job's or the group's env: names key. */
static int user_sets(const Troupe__V1__JobSpec *sp, const Troupe__V1__GroupSpec *gs, const char *key)
{
    for (size_t i = 0; i < sp->n_env; i++) {
        if (strcmp(sp->env[i]->key, key) == 0) {
            return 1;
        }
    }
    for (size_t i = 0; gs != NULL && i < gs->n_env; i++) {
        if (strcmp(gs->env[i]->key, key) == 0) {
            return 1;
        }
    }
    return 0;
}

/* torchrun_env adds what torchrun gives its workers beyond troupe's own
 * variables (env_style: torchrun), so a program written for torchrun finds
 * everything it reads: a node of the group is torchrun's agent (GROUP_RANK is
 * NODE_RANK), the group its one role, the worker's attempt its restart count.
 * TORCHELASTIC_USE_AGENT_STORE is False: no agent hosts a TCPStore, rank 0 does
 * on MASTER_PORT. OMP_NUM_THREADS=1 with several workers on a node unless the
 * job sets it, as torchrun does. */
static void torchrun_env(arena *a, const tr_head_job *hj, const Troupe__V1__GroupSpec *gs,
                         const Troupe__V1__WorkerInfo *w, uint32_t world, Troupe__V1__WorkerAssignment *wa)
{
    const Troupe__V1__JobSpec *sp = hj->j->spec;
    uint32_t nodes = 1;

    for (size_t i = 0; i < hj->j->n_workers; i++) {
        const Troupe__V1__WorkerInfo *o = hj->j->workers[i];
        if (strcmp(o->group, w->group) == 0 && o->node_rank + 1 > nodes) {
            nodes = o->node_rank + 1;
        }
    }
    env_add(a, wa->env, &wa->n_env, "GROUP_RANK", arena_printf(a, "%u", w->node_rank));
    env_add(a, wa->env, &wa->n_env, "GROUP_WORLD_SIZE", arena_printf(a, "%u", nodes));
    env_add(a, wa->env, &wa->n_env, "ROLE_NAME", w->group);
    env_add(a, wa->env, &wa->n_env, "ROLE_RANK", arena_printf(a, "%u", w->rank));
    env_add(a, wa->env, &wa->n_env, "ROLE_WORLD_SIZE", arena_printf(a, "%u", world));
    env_add(a, wa->env, &wa->n_env, "TORCHELASTIC_RUN_ID",
            arena_printf(a, "troupe-job%llu-%s", (unsigned long long)hj->j->id, w->group));
    env_add(a, wa->env, &wa->n_env, "TORCHELASTIC_RESTART_COUNT", arena_printf(a, "%u", w->attempt));
    env_add(a, wa->env, &wa->n_env, "TORCHELASTIC_MAX_RESTARTS", arena_printf(a, "%u", sp->max_restarts));
    env_add(a, wa->env, &wa->n_env, "TORCHELASTIC_USE_AGENT_STORE", "False");
    if (w->local_world_size > 1 && !user_sets(sp, gs, "OMP_NUM_THREADS")) {
        env_add(a, wa->env, &wa->n_env, "OMP_NUM_THREADS", "1");
    }
}

/* worker_env: the worker's own layer, troupe's variables, over the job's and
 * its group's env: entries (which travel once per reply, JobCommon). */
static void worker_env(tr_head *h, arena *a, const tr_head_job *hj, const Troupe__V1__WorkerInfo *w,
                       const Troupe__V1__GroupSpec *flat, Troupe__V1__WorkerAssignment *wa)
{
    const Troupe__V1__JobSpec *sp = hj->j->spec;
    const Troupe__V1__GroupInfo *gi = NULL;
    const Troupe__V1__GroupSpec *gs = NULL;
    size_t cap = 36 + (flat ? 1 + sp->n_env + flat->n_env : 0);

    for (size_t g = 0; g < sp->n_groups; g++) {
        if (strcmp(sp->groups[g]->name, w->group) == 0) {
            gi = g < hj->j->n_groups ? hj->j->groups[g] : NULL;
            gs = sp->groups[g];
        }
    }
    if ((wa->env = arena_alloc(a, cap * sizeof(*wa->env))) == NULL) {
        return;
    }
    if (flat != NULL) { /* an agent that knows no common parts: every layer here */
        env_add(a, wa->env, &wa->n_env, "NCCL_NVLS_ENABLE", "0");
        for (size_t i = 0; i < sp->n_env; i++) {
            env_add(a, wa->env, &wa->n_env, sp->env[i]->key, sp->env[i]->value);
        }
        for (size_t i = 0; i < flat->n_env; i++) {
            env_add(a, wa->env, &wa->n_env, flat->env[i]->key, flat->env[i]->value);
        }
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
    if (gs != NULL && strcmp(gs->env_style, "torchrun") == 0) {
        torchrun_env(a, hj, gs, w, gi ? gi->world_size : 1, wa);
    }
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

/* sendable: worker i of hj, on this node, is wanted and saved. A worker
 * its elastic group shrank away is not: its agent stops it if it runs. */
static int sendable(const tr_head_job *hj, size_t i, uint64_t node_id, uint64_t safe)
{
    const Troupe__V1__WorkerInfo *w = hj->j->workers[i];
    return w->node_id == node_id && worker_live(w) && !w->removed && (hj->issued == NULL || hj->issued[i] <= safe);
}

/* Paging. A node's set is answered in parts that each stay under
 * tr_jobs_sync_budget: a job's common part (its env: entries, workdir, each
 * group's command and env:) goes once per part, before its first worker
 * there, and a part ends before the worker that would not fit. A worker
 * whose own part and common part do not fit one frame alone is refused at
 * submit (tr_jobs_sync_check); one that gets here all the same (the frame
 * limit lowered across a restart) is left out, logged, and named on the node
 * (sync_error) and on the worker when it is taken for lost. */
#define SYNC_MARGIN (16u * 1024u) /* the reply envelope, and length prefixes grown while a part fills */

size_t tr_jobs_sync_budget(const tr_head *h)
{
    size_t frame = (size_t)h->cfg.max_frame_bytes < TR_RPC_DEFAULT_MAX_FRAME ? (size_t)h->cfg.max_frame_bytes
                                                                             : TR_RPC_DEFAULT_MAX_FRAME;
    return frame > 2 * SYNC_MARGIN ? frame - SYNC_MARGIN : frame / 2;
}

/* field_size: what a message costs as one repeated field of its parent. */
static size_t field_size(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    return 1 + (n < 128 ? 1 : n < 16384 ? 2 : n < 2097152 ? 3 : 5) + n;
}

static const Troupe__V1__GroupSpec *group_spec(const Troupe__V1__JobSpec *sp, const char *name)
{
    for (size_t g = 0; g < sp->n_groups; g++) {
        if (strcmp(sp->groups[g]->name, name) == 0) {
            return sp->groups[g];
        }
    }
    return sp->n_groups ? sp->groups[0] : NULL;
}

/* part: the reply being filled, and its cost so far. */
typedef struct part {
    Troupe__V1__NodeSyncReply *rep;
    size_t used;
    size_t cap_jobs;
} part;

/* common_for returns the reply's JobCommon of hj (made, with its cost added
 * to *cost, when this is the job's first worker in the part) and adds the
 * group's GroupCommon likewise. NULL when out of memory. */
static Troupe__V1__JobCommon *common_for(arena *a, part *pt, const tr_head_job *hj,
                                         const Troupe__V1__GroupSpec *gs, size_t *cost)
{
    Troupe__V1__JobCommon *jc = NULL;
    Troupe__V1__GroupCommon *gc;
    const Troupe__V1__JobSpec *sp = hj->j->spec;

    for (size_t k = 0; k < pt->rep->n_jobs && jc == NULL; k++) {
        jc = pt->rep->jobs[k]->job_id == hj->j->id ? pt->rep->jobs[k] : NULL;
    }
    if (jc == NULL) {
        if (pt->rep->n_jobs == pt->cap_jobs || (jc = arena_alloc(a, sizeof(*jc))) == NULL) {
            return NULL;
        }
        troupe__v1__job_common__init(jc);
        jc->job_id = hj->j->id;
        jc->workdir = sp->workdir;
        job_env(a, sp, jc);
        if ((jc->groups = arena_alloc(a, (sp->n_groups ? sp->n_groups : 1) * sizeof(*jc->groups))) == NULL) {
            return NULL;
        }
        *cost += field_size(&jc->base);
        pt->rep->jobs[pt->rep->n_jobs++] = jc;
    }
    for (size_t g = 0; g < jc->n_groups; g++) {
        if (strcmp(jc->groups[g]->name, gs->name) == 0) {
            return jc;
        }
    }
    if (jc->n_groups == sp->n_groups || (gc = arena_alloc(a, sizeof(*gc))) == NULL) {
        return NULL;
    }
    troupe__v1__group_common__init(gc);
    gc->name = gs->name;
    gc->command = gs->command;
    gc->n_command = gs->n_command;
    gc->env = gs->env;
    gc->n_env = gs->n_env;
    jc->groups[jc->n_groups++] = gc;
    *cost += field_size(&gc->base) + 5; /* and the job's length prefix may grow */
    return jc;
}

/* drop_common takes back what common_for added for a worker that did not
 * fit (the part ends before it). */
static void drop_common(part *pt, size_t jobs_before, Troupe__V1__JobCommon *jc, size_t groups_before)
{
    if (jc == NULL) {
        return; /* flat: none was added */
    }
    if (pt->rep->n_jobs > jobs_before) {
        pt->rep->n_jobs = jobs_before;
    } else if (jc != NULL) {
        jc->n_groups = groups_before;
    }
}

/* worker_part fills wa with worker i's own part; flat (its group) for an
 * agent that knows no common parts: the whole assignment. */
static void worker_part(tr_head *h, arena *a, const tr_head_job *hj, size_t i, const Troupe__V1__GroupSpec *flat,
                        Troupe__V1__WorkerAssignment *wa)
{
    const Troupe__V1__WorkerInfo *w = hj->j->workers[i];

    troupe__v1__worker_assignment__init(wa);
    wa->job_id = hj->j->id;
    wa->name = w->name;
    wa->group = w->group;
    wa->attempt = w->attempt;
    wa->gpus = w->gpus;
    wa->n_gpus = w->n_gpus;
    if (h->auth != NULL && (wa->credential = arena_alloc(a, TR_AUTH_TOKEN_MAX)) != NULL) {
        tr_auth_worker_credential(h->auth, hj->j->id, w->attempt, (uint32_t)i, wa->credential, TR_AUTH_TOKEN_MAX);
    }
    if (flat != NULL) {
        wa->command = flat->command;
        wa->n_command = flat->n_command;
        wa->workdir = hj->j->spec->workdir;
    }
    worker_env(h, a, hj, w, flat, wa);
}

/* oversize notes a worker that cannot be sent in any part. */
static void oversize(tr_head_node *hn, tr_head_job *hj, const Troupe__V1__WorkerInfo *w, size_t cost,
                     size_t budget)
{
    char why[256];

    snprintf(why, sizeof(why),
             "worker %s of job %llu needs %zu bytes of assignment; one NodeSync reply carries at most %zu "
             "(max_frame_bytes)",
             w->name, (unsigned long long)hj->j->id, cost, budget);
    hj->sync_oversize = cost;
    if (strcmp(hn->n->sync_error, why) != 0) {
        TR_LOG(TR_LOG_ERR, "node sync: node=%llu name=%s %s", (unsigned long long)hn->n->id, hn->n->name,
               why);
        tr_jobs_set_str(&hn->n->sync_error, why);
    }
}

/* build_set fills rep with the part of the set starting at worker `from`
 * (the set: every worker this node should be running, as of the newest
 * version on disk, in the order of the node's job index). */
static int build_set(tr_head *h, tr_head_node *hn, arena *a, Troupe__V1__NodeSyncReply *rep, uint32_t from,
                     int flat)
{
    /* An agent that takes no parts gets its set whole (reply_set refuses
     * it when it is over a frame). */
    size_t n = 0, k = 0, budget = flat ? SIZE_MAX : tr_jobs_sync_budget(h);
    uint64_t safe = safe_version(h, hn);
    part pt = {.rep = rep, .used = 16, .cap_jobs = hn->n_placed};
    int full = 0, fit_all = 1;

    rep->version = safe;
    rep->page = from;
    /* No pruning here: this runs nested inside apply_reports' walk of the
     * same list (a release can start jobs and answer this node's poll). */
    for (size_t p = 0; p < hn->n_placed; p++) {
        const tr_head_job *hj = hn->placed[p];
        for (size_t i = 0; wanted(hj) && i < hj->j->n_workers; i++) {
            n += sendable(hj, i, hn->n->id, safe);
        }
    }
    rep->total = (uint32_t)n;
    if (n <= from || (rep->workers = arena_alloc(a, (n - from) * sizeof(*rep->workers))) == NULL ||
        (rep->jobs = arena_alloc(a, (hn->n_placed ? hn->n_placed : 1) * sizeof(*rep->jobs))) == NULL) {
        return 1;
    }
    for (size_t p = 0; p < hn->n_placed && !full; p++) {
        tr_head_job *hj = hn->placed[p];
        for (size_t i = 0; wanted(hj) && i < hj->j->n_workers && !full; i++) {
            const Troupe__V1__WorkerInfo *w = hj->j->workers[i];
            const Troupe__V1__GroupSpec *gs = group_spec(hj->j->spec, w->group);
            Troupe__V1__WorkerAssignment *wa;
            Troupe__V1__JobCommon *jc;
            size_t cost = 0, jobs_before = rep->n_jobs, groups_before = 0;

            if (!sendable(hj, i, hn->n->id, safe) || k++ < from) {
                continue;
            }
            if (gs == NULL || (wa = arena_alloc(a, sizeof(*wa))) == NULL) {
                continue;
            }
            worker_part(h, a, hj, i, flat ? gs : NULL, wa);
            for (size_t j = 0; j < rep->n_jobs; j++) {
                groups_before = rep->jobs[j]->job_id == hj->j->id ? rep->jobs[j]->n_groups : groups_before;
            }
            if (flat) {
                jc = NULL;
            } else if ((jc = common_for(a, &pt, hj, gs, &cost)) == NULL) {
                continue; /* out of memory: a.oom answers the call */
            }
            cost += field_size(&wa->base);
            if (pt.used + cost <= budget) {
                pt.used += cost;
                rep->workers[rep->n_workers++] = wa;
                continue;
            }
            drop_common(&pt, jobs_before, jc, groups_before);
            if (rep->n_workers > 0) {
                rep->next = (uint32_t)(k - 1); /* this worker starts the next part */
                full = 1;
            } else {
                oversize(hn, hj, w, cost, budget); /* alone it does not fit: left out */
                fit_all = 0;
            }
        }
    }
    return fit_all;
}

static void reply_set(tr_head *h, tr_head_node *hn, tr_rpc_call *call, uint32_t page, int flat)
{
    Troupe__V1__NodeSyncReply rep = TROUPE__V1__NODE_SYNC_REPLY__INIT;
    arena a = {0};
    int fit_all = build_set(h, hn, &a, &rep, page, flat);

    if (a.oom) {
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory building assignments");
    } else if (flat && troupe__v1__node_sync_reply__get_packed_size(&rep) > tr_jobs_sync_budget(h)) {
        char why[256];
        snprintf(
            why, sizeof(why),
            "its assignments are %zu bytes, over one NodeSync reply (%zu), and its agent does not take them "
            "in parts: upgrade troupe-node",
            troupe__v1__node_sync_reply__get_packed_size(&rep), tr_jobs_sync_budget(h));
        if (strcmp(hn->n->sync_error, why) != 0) {
            TR_LOG(TR_LOG_ERR, "node sync: node=%llu name=%s %s", (unsigned long long)hn->n->id, hn->n->name,
                   why);
            tr_jobs_set_str(&hn->n->sync_error, why);
        }
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "node %s: %s", hn->n->name, why);
    } else {
        if (fit_all && rep.page == 0 && rep.next == 0 && hn->n->sync_error[0] != '\0') {
            tr_jobs_set_str(&hn->n->sync_error, ""); /* a whole set goes out */
        }
        TR_LOG(
            TR_LOG_DEBUG,
            "node sync reply node=%llu version=%llu page=%u next=%u total=%u workers=%zu jobs=%zu bytes=%zu",
            (unsigned long long)hn->n->id, (unsigned long long)rep.version, rep.page, rep.next, rep.total,
            rep.n_workers, rep.n_jobs, troupe__v1__node_sync_reply__get_packed_size(&rep));
        tr_rpc_reply(call, &rep.base);
    }
    arena_free(&a);
}

/* reply_ack_later acknowledges a report with the node's version only
 * (NodeSyncRequest.ack_only). */
static void reply_ack_later(tr_head *h, tr_rpc_call *call, uint64_t node_id)
{
    Troupe__V1__NodeSyncReply rep = TROUPE__V1__NODE_SYNC_REPLY__INIT;
    tr_head_node *hn = tr_head_node_find(h, node_id);

    if (hn == NULL) {
        tr_rpc_reply_error(call, TROUPE_FAILED_PRECONDITION, "node %llu is unknown; register again",
                           (unsigned long long)node_id);
        return;
    }
    rep.version = safe_version(h, hn);
    tr_rpc_reply(call, &rep.base);
}

static void reply_set_later(tr_head *h, tr_rpc_call *call, uint64_t node_id)
{
    tr_head_node *hn = tr_head_node_find(h, node_id);
    if (hn == NULL) {
        tr_rpc_reply_error(call, TROUPE_FAILED_PRECONDITION, "node %llu is unknown; register again",
                           (unsigned long long)node_id);
        return;
    }
    reply_set(h, hn, call, 0, 0);
}

/* log_answer: with "node report" and "node sync parked", what a test waits
 * on to know that an agent was asked and what it did (debug: a line per
 * poll and report). */
static void log_answer(const tr_head *h, const tr_head_node *hn)
{
    TR_LOG(TR_LOG_DEBUG, "node sync answered node=%llu version=%llu", (unsigned long long)hn->n->id,
           (unsigned long long)safe_version(h, hn));
}

void tr_jobs_answer_sync(tr_head *h, tr_head_node *hn)
{
    tr_rpc_call *call = hn->sync_waiter;
    if (call == NULL) {
        return;
    }
    hn->sync_waiter = NULL;
    log_answer(h, hn);
    reply_set(h, hn, call, 0, hn->sync_flat);
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
    if (!gone_as_asked && hj->sync_oversize > 0) {
        char why[200];
        snprintf(why, sizeof(why),
                 "never sent to its node: its assignment is %zu bytes, over what one NodeSync reply carries",
                 hj->sync_oversize);
        tr_jobs_set_str(&w->message, why);
    } else {
        tr_jobs_set_str(&w->message,
                        gone_as_asked ? "stopped" : "not running on its node (was its agent restarted?)");
    }
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
    if (req->wait_ms == 0 && req->page == 0) {
        /* Only report calls carry the agent's complete worker list; a long
         * poll carries none and must not read as "no workers". */
        TR_LOG(TR_LOG_DEBUG, "node report node=%llu applied=%llu workers=%zu", (unsigned long long)hn->n->id,
               (unsigned long long)req->version, req->n_reports);
        held = tr_jobs_apply_reports(h, hn, req);
    }
    if (held > 0) {
        /* The rest is applied; what was held back comes again, and what was
         * taken is skipped then (by its offsets). */
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED,
                           "output of %d workers not taken: the head holds %llu bytes of output it could not "
                           "write yet (max_log_memory_bytes; free space in %s/logs); send it again",
                           held, (unsigned long long)tr_joblog_unsaved(h), h->cfg.state_dir);
    } else if (req->page > 0) {
        /* The rest of a set: answered at once, from the newest saved
         * version; a part of another version tells the agent to start over. */
        reply_set(h, hn, call, req->version == safe_version(h, hn) ? req->page : 0, !req->common_parts);
    } else if (req->wait_ms > 0 && req->version == safe_version(h, hn)) {
        tr_jobs_answer_sync(h, hn); /* a newer poll supersedes an older one */
        tr_rpc_defer(call, on_sync_expire, h);
        hn->sync_waiter = call;
        hn->sync_version = req->version;
        TR_LOG(TR_LOG_DEBUG, "node sync parked node=%llu version=%llu", (unsigned long long)hn->n->id,
               (unsigned long long)req->version);
        hn->sync_flat = !req->common_parts;
        hn->sync_until = tr_now_ms() + ((int64_t)req->wait_ms < h->cfg.node_sync_max_ms ? (int64_t)req->wait_ms
                                                                                         : h->cfg.node_sync_max_ms);
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
        tr_head_after_commit_or_resend(h, call, req->ack_only ? reply_ack_later : reply_set_later, hn->n->id);
    } else {
        log_answer(h, hn); /* a poll behind the current version */
        reply_set(h, hn, call, 0, !req->common_parts);
    }
    pthread_mutex_unlock(&h->mu);
}

/* own_bound: at most what a worker's own part of spec costs (troupe's
 * variables, its name, GPUs and credential), without building one. */
static size_t own_bound(const Troupe__V1__JobSpec *sp, const Troupe__V1__GroupSpec *gs)
{
    size_t n = 4096 + TR_AUTH_TOKEN_MAX + 4 * strlen(gs->name) + strlen(sp->name);

    if (sp->profile != NULL) {
        n += strlen(sp->profile->steps) + strlen(sp->profile->workers) + strlen(sp->profile->nsys_options);
    }
    return n;
}

int tr_jobs_sync_check(tr_head *h, const Troupe__V1__JobSpec *sp, tr_err *err)
{
    size_t budget = tr_jobs_sync_budget(h);
    arena a = {0};
    Troupe__V1__JobCommon jc = TROUPE__V1__JOB_COMMON__INIT;
    Troupe__V1__GroupCommon gc = TROUPE__V1__GROUP_COMMON__INIT, *gcp = &gc;
    int rv = TROUPE_OK;

    jc.workdir = sp->workdir;
    job_env(&a, sp, &jc);
    jc.groups = &gcp;
    jc.n_groups = 1;
    for (size_t g = 0; g < sp->n_groups && rv == TROUPE_OK && !a.oom; g++) {
        const Troupe__V1__GroupSpec *gs = sp->groups[g];
        size_t need;
        gc.name = gs->name;
        gc.command = gs->command;
        gc.n_command = gs->n_command;
        gc.env = gs->env;
        gc.n_env = gs->n_env;
        need = 16 + field_size(&jc.base) + own_bound(sp, gs);
        if (need > budget) {
            rv = tr_err_set(
                err, TROUPE_INVALID_ARGUMENT,
                "group %s: a worker's assignment would be %zu bytes (env: and command of the job and "
                "the group, and the worker's own part); a node receives at most %zu in one NodeSync "
                "reply (max_frame_bytes %lld less the envelope): move large values to a file in "
                "workdir",
                gs->name, need, budget, (long long)h->cfg.max_frame_bytes);
        }
    }
    if (rv == TROUPE_OK && a.oom) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory checking the job's size");
    }
    arena_free(&a);
    return rv;
}
