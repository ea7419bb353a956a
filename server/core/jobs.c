/* jobs.c - the job lifecycle.
 *
 *   submit --> PENDING --(placed as a gang)--> RUNNING --> SUCCEEDED
 *                 ^                               |    --> FAILED  (a worker failed, a node died,
 *                 |                               |                 timeout, without restarts left)
 *                 +--- restart after node death --+    --> STOPPED (troupe stop)
 *
 * Nodes learn what to run from their assignment set (jobs_sync.c): the
 * workers of RUNNING jobs placed on them. Whenever that set changes the node's
 * version bumps and its long poll is answered. Nodes report the complete list
 * of workers they know with every sync, so the head can tell a worker that
 * exited from one that never started or has vanished.
 *
 * GPUs are returned to the scheduler only when no worker of the job is still
 * running anywhere (jobs_release_if_idle): a stopped job's processes must be
 * gone before another job is given their GPUs. */
#include "jobs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auth.h"
#include "elastic.h"
#include "jobspec.h"
#include "log.h"
#include "sched_restore.h"
#include "util.h"

#define JOB_EVENTS_MAX 64

static void clear_restart(tr_head_job *hj);

void tr_jobs_set_str(char **field, const char *s)
{
    char *copy = strdup(s ? s : "");
    if (copy == NULL) {
        return;
    }
    if (*field != NULL && *field != protobuf_c_empty_string) {
        free(*field);
    }
    *field = copy;
}

static const char *job_state_name(int s)
{
    static const char *const names[] = {"UNSPECIFIED", "PENDING", "RUNNING",
                                        "SUCCEEDED",   "FAILED",  "STOPPED"};
    return (s >= 0 && s <= 5) ? names[s] : "UNKNOWN";
}

size_t tr_jobs_first_unsettled(tr_head *h)
{
    /* Jobs mostly settle in submission order, so a cursor that only moves
     * forward keeps the loops over live jobs short on a long-lived head. */
    while (h->first_unsettled < h->n_jobs && tr_jobs_is_settled(h->jobs[h->first_unsettled])) {
        h->first_unsettled++;
    }
    return h->first_unsettled;
}

/* build_sspec gives the scheduler its view of the spec. */
static int build_sspec(tr_head_job *hj, tr_err *err)
{
    const Troupe__V1__JobSpec *sp = hj->j->spec;

    hj->vnodes = calloc(sp->n_cluster_nodes + 1, sizeof(int));
    hj->sel = calloc(sp->n_cluster_labels + 1, sizeof(tr_sched_label));
    hj->groups = calloc(sp->n_groups + 1, sizeof(tr_sched_group_spec));
    if (hj->vnodes == NULL || hj->sel == NULL || hj->groups == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    for (size_t i = 0; i < sp->n_cluster_nodes; i++) {
        hj->vnodes[i] = (int)sp->cluster_nodes[i];
    }
    for (size_t i = 0; i < sp->n_cluster_labels; i++) {
        hj->sel[i].key = sp->cluster_labels[i]->key;
        hj->sel[i].value = sp->cluster_labels[i]->value;
    }
    for (size_t g = 0; g < sp->n_groups; g++) {
        tr_sched_strategy st = TR_SCHED_PACK;
        const Troupe__V1__GroupSpec *gs = sp->groups[g];
        int rv = gs->strategy[0] ? tr_sched_strategy_parse(gs->strategy, &st, err) : TROUPE_OK;
        if (rv != TROUPE_OK) {
            return rv;
        }
        hj->groups[g].name = gs->name;
        hj->groups[g].workers = (int)gs->workers;
        hj->groups[g].gpus_per_worker = (int)gs->gpus;
        hj->groups[g].strategy = (int)st;
        hj->groups[g].cpus = gs->cpus;
        hj->groups[g].memory_bytes = gs->memory_bytes;
    }
    hj->sspec.name = sp->name;
    hj->sspec.vnodes = hj->vnodes;
    hj->sspec.nvnodes = sp->n_cluster_nodes;
    hj->sspec.selector = hj->sel;
    hj->sspec.nselector = sp->n_cluster_labels;
    hj->sspec.groups = hj->groups;
    hj->sspec.ngroups = sp->n_groups;
    return TROUPE_OK;
}

static void job_free(tr_head_job *hj)
{
    if (hj == NULL) {
        return;
    }
    if (hj->j != NULL) {
        troupe__v1__job__free_unpacked(hj->j, NULL);
    }
    free(hj->vnodes);
    free(hj->sel);
    free(hj->groups);
    free(hj->issued);
    free(hj->awaiting_ms);
    tr_joblog_free(&hj->log);
    free(hj);
}

void tr_jobs_free_one(tr_head_job *hj)
{
    job_free(hj);
}

static int jobs_append(tr_head *h, tr_head_job *hj)
{
    if (h->n_jobs == h->cap_jobs) {
        size_t cap = h->cap_jobs ? h->cap_jobs * 2 : 64;
        tr_head_job **p = realloc(h->jobs, cap * sizeof(*p));
        if (p == NULL) {
            return -1;
        }
        h->jobs = p;
        h->cap_jobs = cap;
    }
    h->jobs[h->n_jobs++] = hj;
    return 0;
}

/* job_wrap takes ownership of an unpacked Job and prepares its side state. */
static int job_wrap(tr_head *h, Troupe__V1__Job *j, tr_head_job **out, tr_err *err)
{
    tr_head_job *hj = calloc(1, sizeof(*hj));
    int rv;

    if (hj == NULL) {
        troupe__v1__job__free_unpacked(j, NULL);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    hj->j = j;
    if ((rv = build_sspec(hj, err)) != TROUPE_OK) {
        job_free(hj);
        return rv;
    }
    if (j->spec->timeout_s > 0 && j->state == TROUPE__V1__JOB_STATE__JOB_RUNNING) {
        int64_t left = (int64_t)j->spec->timeout_s * 1000 - (tr_wall_ms() - j->started_ms);
        hj->deadline = tr_now_ms() + (left > 0 ? left : 0);
    }
    *out = hj;
    return TROUPE_OK;
}

void tr_jobs_touch(tr_head *h, tr_head_job *hj)
{
    hj->j->version++;
    tr_head_dirty_job(h, hj->j->id);
    tr_events_publish(h, TR_EV_JOB_CHANGED, hj, NULL);
}

/* job_note records a lifecycle step in the event history and the head's log.
 * It does not go to the job's log file: creating one file per job only for
 * these lines cost ~40% of the head's CPU in the control-plane benchmark, and
 * `troupe submit` shows state changes and placement from the job record. */
static void job_note(tr_head *h, tr_head_job *hj, const char *kind, const char *msg)
{
    Troupe__V1__Job *j = hj->j;
    Troupe__V1__JobEvent *e = malloc(sizeof(*e));
    Troupe__V1__JobEvent **grown = realloc(j->events, (j->n_events + 1) * sizeof(*grown));

    /* The record keeps the latest JOB_EVENTS_MAX steps for `troupe job`; the
     * event table keeps them all. */
    if (e != NULL && grown != NULL) {
        j->events = grown;
        troupe__v1__job_event__init(e);
        e->ts_ms = tr_wall_ms();
        tr_jobs_set_str(&e->kind, kind);
        tr_jobs_set_str(&e->message, msg);
        if (j->n_events == JOB_EVENTS_MAX) {
            troupe__v1__job_event__free_unpacked(j->events[0], NULL);
            memmove(j->events, j->events + 1, (j->n_events - 1) * sizeof(*j->events));
            j->n_events--;
            j->events_dropped++;
        }
        j->events[j->n_events++] = e;
        e = NULL;
    } else if (grown != NULL) {
        j->events = grown;
    }
    free(e);
    j->version++;
    tr_head_dirty_job(h, j->id);
    tr_events_publish(h, TR_EV_JOB_CHANGED, hj, NULL);
    tr_head_event(h, kind, 0, hj->j->id, msg);
    TR_LOG(TR_LOG_INFO, "job=%llu name=%s %s: %s", (unsigned long long)hj->j->id, hj->j->spec->name, kind,
           msg);
}

void tr_jobs_note(tr_head *h, tr_head_job *hj, const char *kind, const char *msg)
{
    job_note(h, hj, kind, msg);
}

/* worker_of finds the job's worker named name, or NULL. */
static const Troupe__V1__WorkerInfo *worker_of(const Troupe__V1__Job *j, const char *name)
{
    for (size_t i = 0; i < j->n_workers; i++) {
        if (strcmp(j->workers[i]->name, name) == 0) {
            return j->workers[i];
        }
    }
    return NULL;
}

const Troupe__V1__WorkerFailure *tr_jobs_first_failure(const tr_head_job *hj)
{
    for (size_t i = 0; i < hj->j->n_failures; i++) {
        const Troupe__V1__WorkerFailure *f = hj->j->failures[i];
        const Troupe__V1__WorkerInfo *w = worker_of(hj->j, f->worker);
        if (w != NULL && w->attempt == f->attempt) {
            return f;
        }
    }
    return NULL;
}

void tr_jobs_failure_text(const Troupe__V1__WorkerFailure *f, char *buf, size_t size)
{
    snprintf(buf, size, "rank %u of group %s (%s on %s, attempt %u) failed first: %s: %s", f->rank, f->group,
             f->worker, f->node[0] ? f->node : "?", f->attempt, f->code, f->reason);
}

/* tr_jobs_sync_bumped notes that hn's assignment version moved: the agent
 * is told of it only once the batch carrying the change is on disk
 * (rpc/jobs_sync.c: safe_version). */
void tr_jobs_sync_bumped(tr_head *h, tr_head_node *hn)
{
    if (hn->bump_seq <= h->saved_seq) {
        hn->unsaved_version = hn->version; /* the first one not on disk */
    }
    hn->bump_seq = tr_head_change_seq(h);
    tr_head_commit_nudge(h);
}

void tr_jobs_node_bump(tr_head *h, uint64_t node_id)
{
    tr_head_node *hn = tr_head_node_find(h, node_id);
    if (hn != NULL) {
        hn->version++;
        tr_jobs_sync_bumped(h, hn); /* told to the agent once saved (jobs_sync.c) */
    }
}

static int index_has(const tr_head_node *hn, const tr_head_job *hj)
{
    for (size_t i = hn->n_placed; i-- > 0;) { /* newest first: a job's workers come together */
        if (hn->placed[i] == hj) {
            return 1;
        }
    }
    return 0;
}

void tr_jobs_index_add(tr_head *h, tr_head_job *hj)
{
    tr_head_node *last = NULL;
    for (size_t i = 0; i < hj->j->n_workers; i++) {
        tr_head_node *hn = tr_head_node_find(h, hj->j->workers[i]->node_id);
        if (hn == NULL || hn == last || index_has(hn, hj)) {
            continue;
        }
        last = hn;
        if (hn->n_placed == hn->cap_placed) {
            size_t cap = hn->cap_placed ? hn->cap_placed * 2 : 16;
            tr_head_job **p = realloc(hn->placed, cap * sizeof(*p));
            if (p == NULL) {
                /* Without the entry this node's syncs would not see the job. */
                TR_LOG(TR_LOG_ERR, "out of memory indexing job=%llu on node=%llu",
                       (unsigned long long)hj->j->id, (unsigned long long)hn->n->id);
                continue;
            }
            hn->placed = p;
            hn->cap_placed = cap;
        }
        hn->placed[hn->n_placed++] = hj;
    }
}

void tr_jobs_index_prune(tr_head_node *hn)
{
    size_t keep = 0;
    for (size_t i = 0; i < hn->n_placed; i++) {
        if (!tr_jobs_is_settled(hn->placed[i])) {
            hn->placed[keep++] = hn->placed[i];
        }
    }
    hn->n_placed = keep;
}

static void bump_job_nodes(tr_head *h, tr_head_job *hj)
{
    for (size_t v = 0; v < hj->j->n_vnodes; v++) {
        int seen = 0;
        for (size_t u = 0; u < v; u++) {
            seen |= hj->j->vnodes[u]->node_id == hj->j->vnodes[v]->node_id;
        }
        if (!seen) {
            tr_jobs_node_bump(h, hj->j->vnodes[v]->node_id);
        }
    }
    /* CPU-only workers hold no vnode: their nodes are woken too (a node
     * bumped twice only syncs once more). */
    for (size_t i = 0; i < hj->j->n_workers; i++) {
        const Troupe__V1__WorkerInfo *w = hj->j->workers[i];
        if (w->n_gpus == 0 && (i == 0 || hj->j->workers[i - 1]->node_id != w->node_id)) {
            tr_jobs_node_bump(h, w->node_id);
        }
    }
}

/* Master ports are unique per master address (the host of a group's rank
 * 0), not cluster-wide: that is all a rendezvous needs, and the band then
 * never limits how many groups run at once (a host masters at most one group
 * per GPU). Agents sharing a host share its table. Tables live in a small
 * hash map keyed by the address, created on first use. */
typedef struct tr_port_tab {
    char *addr;
    uint8_t *used; /* one byte per port of the band */
} tr_port_tab;

struct tr_port_map {
    tr_port_tab *slots;
    size_t cap, n;
};

static uint64_t addr_hash(const char *s)
{
    uint64_t x = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) {
        x = (x ^ (uint8_t)*s) * 1099511628211ull;
    }
    return x;
}

static tr_port_tab *port_slot(tr_port_tab *slots, size_t cap, const char *addr)
{
    size_t i = (size_t)addr_hash(addr) & (cap - 1);
    while (slots[i].addr != NULL && strcmp(slots[i].addr, addr) != 0) {
        i = (i + 1) & (cap - 1);
    }
    return &slots[i];
}

static int port_map_grow(struct tr_port_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    tr_port_tab *slots = calloc(cap, sizeof(*slots));
    if (slots == NULL) {
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].addr != NULL) {
            *port_slot(slots, cap, m->slots[i].addr) = m->slots[i];
        }
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

static uint8_t *port_table(tr_head *h, const char *addr)
{
    struct tr_port_map *m = h->ports;
    tr_port_tab *t;

    if (m == NULL && (m = h->ports = calloc(1, sizeof(*m))) == NULL) {
        return NULL;
    }
    if ((m->n + 1) * 2 > m->cap && port_map_grow(m) != 0) {
        return NULL;
    }
    t = port_slot(m->slots, m->cap, addr);
    if (t->addr == NULL) {
        char *a = strdup(addr);
        uint8_t *u = calloc((size_t)h->cfg.master_port_count + 1, 1);
        if (a == NULL || u == NULL) {
            free(a);
            free(u);
            return NULL;
        }
        t->addr = a;
        t->used = u;
        m->n++;
    }
    return t->used;
}

static void port_map_free(tr_head *h)
{
    struct tr_port_map *m = h->ports;
    for (size_t i = 0; m != NULL && i < m->cap; i++) {
        free(m->slots[i].addr);
        free(m->slots[i].used);
    }
    if (m != NULL) {
        free(m->slots);
    }
    free(m);
    h->ports = NULL;
}

static int port_alloc(tr_head *h, const char *addr)
{
    uint8_t *used = port_table(h, addr);
    for (int64_t i = 0; used != NULL && i < h->cfg.master_port_count; i++) {
        if (!used[i]) {
            used[i] = 1;
            return (int)(h->cfg.master_port_base + i);
        }
    }
    return -1;
}

static void port_mark(tr_head *h, const char *addr, uint32_t port, int used)
{
    uint8_t *tab = port_table(h, addr);
    int64_t i = (int64_t)port - h->cfg.master_port_base;
    if (tab != NULL && i >= 0 && i < h->cfg.master_port_count) {
        tab[i] = (uint8_t)used;
    }
}

/* clear_records drops the per-placement parts of a job record (workers,
 * groups, vnodes), before a new placement. */
static void clear_records(tr_head_job *hj)
{
    Troupe__V1__Job *j = hj->j;
    for (size_t i = 0; i < j->n_workers; i++) {
        troupe__v1__worker_info__free_unpacked(j->workers[i], NULL);
    }
    for (size_t i = 0; i < j->n_groups; i++) {
        troupe__v1__group_info__free_unpacked(j->groups[i], NULL);
    }
    for (size_t i = 0; i < j->n_vnodes; i++) {
        troupe__v1__vnode_info__free_unpacked(j->vnodes[i], NULL);
    }
    free(j->workers);
    free(j->groups);
    free(j->vnodes);
    j->workers = NULL;
    j->groups = NULL;
    j->vnodes = NULL;
    j->n_workers = j->n_groups = j->n_vnodes = 0;
    free(hj->issued);
    hj->issued = NULL;
    free(hj->awaiting_ms);
    hj->awaiting_ms = NULL;
    hj->n_awaiting = 0;
}

static uint32_t *copy_gpus(const uint8_t *gpus, uint32_t n)
{
    uint32_t *out = malloc((n ? n : 1) * sizeof(uint32_t));
    for (uint32_t k = 0; out != NULL && k < n; k++) {
        out[k] = gpus[k];
    }
    return out;
}

static Troupe__V1__WorkerInfo *worker_record(tr_head *h, tr_head_job *hj, const tr_sched_worker *w)
{
    Troupe__V1__WorkerInfo *wi = malloc(sizeof(*wi));
    const char *group = hj->j->spec->groups[w->group]->name;
    tr_head_node *hn = tr_head_node_find(h, w->node_id);
    char name[256];

    if (wi == NULL) {
        return NULL;
    }
    troupe__v1__worker_info__init(wi);
    snprintf(name, sizeof(name), "job%llu-%s-%u", (unsigned long long)hj->j->id, group, w->rank);
    tr_jobs_set_str(&wi->name, name);
    tr_jobs_set_str(&wi->group, group);
    tr_jobs_set_str(&wi->node_name, hn ? hn->n->name : "?");
    wi->rank = w->rank;
    wi->node_id = w->node_id;
    wi->gpus = copy_gpus(w->gpus, w->ngpus);
    wi->n_gpus = wi->gpus ? w->ngpus : 0;
    wi->local_rank = w->local_rank;
    wi->local_world_size = w->local_world_size;
    wi->node_rank = w->node_rank;
    wi->nnodes = w->nnodes;
    wi->state = TROUPE__V1__WORKER_STATE__WORKER_PENDING;
    wi->attempt = tr_elastic_next_attempt(hj);
    wi->member_rank = w->rank;
    return wi;
}

/* make_records turns a placement into the job's worker/group/vnode records,
 * with a master address and port per group. */
static int make_records(tr_head *h, tr_head_job *hj, const tr_sched_placement *pl, tr_err *err)
{
    Troupe__V1__Job *j = hj->j;
    size_t nw = tr_sched_placement_nworkers(pl), nv = tr_sched_placement_nvnodes(pl);
    const tr_sched_worker *w = tr_sched_placement_workers(pl);
    const tr_sched_vnode *v = tr_sched_placement_vnodes(pl);

    j->workers = calloc(nw + 1, sizeof(*j->workers));
    j->vnodes = calloc(nv + 1, sizeof(*j->vnodes));
    j->groups = calloc(j->spec->n_groups + 1, sizeof(*j->groups));
    hj->issued = calloc(nw + 1, sizeof(*hj->issued));
    if (!j->workers || !j->vnodes || !j->groups || !hj->issued) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    for (size_t i = 0; i < nw; i++) {
        if ((j->workers[i] = worker_record(h, hj, &w[i])) == NULL) {
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        }
        j->n_workers++;
    }
    for (size_t i = 0; i < nv; i++) {
        Troupe__V1__VnodeInfo *vi = malloc(sizeof(*vi));
        if (vi == NULL) {
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        }
        troupe__v1__vnode_info__init(vi);
        vi->node_id = v[i].node_id;
        vi->gpus = copy_gpus(v[i].gpus, v[i].ngpus);
        vi->n_gpus = vi->gpus ? v[i].ngpus : 0;
        j->vnodes[j->n_vnodes++] = vi;
    }
    for (size_t g = 0; g < j->spec->n_groups; g++) {
        size_t n = 0;
        const tr_sched_worker *gw = tr_sched_placement_group(pl, g, &n);
        tr_head_node *hn = (n > 0) ? tr_head_node_find(h, gw[0].node_id) : NULL;
        const char *addr = hn ? hn->n->address : "127.0.0.1";
        Troupe__V1__GroupInfo *gi = malloc(sizeof(*gi));
        int port = gi != NULL ? port_alloc(h, addr) : -1;
        if (gi == NULL || port < 0) {
            free(gi);
            if (gi == NULL) {
                return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
            }
            return tr_err_set(err, TROUPE_UNAVAILABLE,
                              "waiting for a master port: all of %lld..%lld are in use on %s (head "
                              "master_port_base/master_port_count)",
                              (long long)h->cfg.master_port_base,
                              (long long)(h->cfg.master_port_base + h->cfg.master_port_count - 1), addr);
        }
        troupe__v1__group_info__init(gi);
        tr_jobs_set_str(&gi->name, j->spec->groups[g]->name);
        tr_jobs_set_str(&gi->master_addr, addr);
        gi->master_port = (uint32_t)port;
        gi->world_size = (uint32_t)n;
        j->groups[j->n_groups++] = gi;
    }
    return TROUPE_OK;
}

static void release_ports(tr_head *h, tr_head_job *hj)
{
    for (size_t g = 0; g < hj->j->n_groups; g++) {
        port_mark(h, hj->j->groups[g]->master_addr, hj->j->groups[g]->master_port, 0);
    }
}

/* issue_all stamps each worker with its node's version after the bump that
 * made the node see it. */
static void issue_workers(tr_head *h, tr_head_job *hj, const char *group)
{
    bump_job_nodes(h, hj);
    for (size_t i = 0; i < hj->j->n_workers; i++) {
        tr_head_node *hn = tr_head_node_find(h, hj->j->workers[i]->node_id);
        if (group == NULL || strcmp(hj->j->workers[i]->group, group) == 0) {
            hj->issued[i] = hn ? hn->version : 0;
        }
    }
}

#define JOB_GROUPS_MAX 256 /* groups of a job (the spec's bound) */

/* keep_changes carries elastic groups' membership counts from the records
 * of the last placement to the new ones (groups are in spec order in
 * both), so a communicator epoch never repeats. */
static void keep_changes(Troupe__V1__Job *j, uint32_t *changes, int save)
{
    for (size_t g = 0; g < j->n_groups && g < JOB_GROUPS_MAX; g++) {
        if (save) {
            changes[g] = j->groups[g]->membership_changes;
        } else {
            j->groups[g]->membership_changes = changes[g];
        }
    }
}

static void job_start(tr_head *h, tr_head_job *hj, tr_sched_placement *pl)
{
    uint32_t changes[JOB_GROUPS_MAX] = {0};
    char msg[512];
    size_t off = 0;
    tr_err err;

    keep_changes(hj->j, changes, 1);
    clear_records(hj);
    hj->pl = pl;
    if (make_records(h, hj, pl, &err) == TROUPE_OK) {
        keep_changes(hj->j, changes, 0);
    } else {
        /* Could not describe the placement: give it back. A host out of
         * master ports is a shortage like busy GPUs (wait, PENDING, retried
         * when something is released); anything else fails loudly. */
        release_ports(h, hj);
        tr_sched_release(h->sched, pl);
        hj->pl = NULL;
        clear_records(hj);
        if (err.code == TROUPE_UNAVAILABLE) {
            if (strcmp(hj->j->reason, err.msg) != 0) {
                tr_jobs_set_str(&hj->j->reason, err.msg);
                tr_jobs_touch(h, hj);
            }
            return;
        }
        hj->j->state = TROUPE__V1__JOB_STATE__JOB_FAILED;
        hj->j->ended_ms = tr_wall_ms();
        tr_jobs_set_str(&hj->j->reason, err.msg);
        tr_jobs_touch(h, hj);
        return;
    }
    hj->j->state = TROUPE__V1__JOB_STATE__JOB_RUNNING;
    hj->j->started_ms = tr_wall_ms();
    hj->deadline = hj->j->spec->timeout_s ? tr_now_ms() + (int64_t)hj->j->spec->timeout_s * 1000 : 0;
    off += (size_t)snprintf(msg, sizeof(msg), "placed %zu workers:", hj->j->n_workers);
    for (size_t v = 0; v < hj->j->n_vnodes && off < sizeof(msg) - 64; v++) {
        tr_head_node *hn = tr_head_node_find(h, hj->j->vnodes[v]->node_id);
        off += (size_t)snprintf(msg + off, sizeof(msg) - off, " %s[%zu GPUs]", hn ? hn->n->name : "?",
                                hj->j->vnodes[v]->n_gpus);
    }
    for (size_t i = 0; i < hj->j->n_workers && off < sizeof(msg) - 64; i++) {
        const Troupe__V1__WorkerInfo *w = hj->j->workers[i];
        if (w->n_gpus == 0 && (i == 0 || hj->j->workers[i - 1]->node_id != w->node_id)) {
            off += (size_t)snprintf(msg + off, sizeof(msg) - off, " %s[CPU-only]", w->node_name);
        }
    }
    tr_jobs_set_str(&hj->j->reason, "running");
    tr_jobs_index_add(h, hj);
    issue_workers(h, hj, NULL);
    tr_jobs_touch(h, hj);
    job_note(h, hj, "STARTED", msg);
}

/* release_if_idle returns the GPUs once no worker can still be running. */
static void release_if_idle(tr_head *h, tr_head_job *hj)
{
    if (hj->pl == NULL || (!tr_jobs_is_terminal(hj) && !hj->requeue)) {
        return;
    }
    for (size_t i = 0; i < hj->j->n_workers; i++) {
        int s = hj->j->workers[i]->state;
        if (s == TROUPE__V1__WORKER_STATE__WORKER_RUNNING || s == TROUPE__V1__WORKER_STATE__WORKER_PENDING) {
            return;
        }
    }
    release_ports(h, hj);
    tr_sched_release(h->sched, hj->pl);
    hj->pl = NULL;
    if (hj->requeue) {
        hj->requeue = 0;
        hj->j->state = TROUPE__V1__JOB_STATE__JOB_PENDING;
        tr_jobs_touch(h, hj);
    }
    tr_events_publish(h, TR_EV_LOG_GREW, hj, NULL); /* its log may be complete now */
    tr_jobs_schedule(h);
}

static void job_finish(tr_head *h, tr_head_job *hj, int state, const char *reason)
{
    if (tr_jobs_is_terminal(hj)) {
        return;
    }
    hj->j->state = (Troupe__V1__JobState)state;
    hj->j->ended_ms = tr_wall_ms();
    hj->requeue = 0;
    clear_restart(hj);
    tr_jobs_set_str(&hj->j->reason, reason);
    /* Terminal jobs leave every node's assignment set: agents stop what runs. */
    bump_job_nodes(h, hj);
    tr_jobs_touch(h, hj);
    job_note(h, hj, job_state_name(state), reason);
    release_if_idle(h, hj);
    tr_events_publish(h, TR_EV_LOG_GREW, hj, NULL); /* its log may be complete now */
}

/* job_wait keeps a job PENDING with its reason (persisted only when it changed). */
static void job_wait(tr_head *h, tr_head_job *hj, const char *why)
{
    if (strcmp(hj->j->reason, why) != 0) {
        tr_jobs_set_str(&hj->j->reason, why);
        tr_jobs_touch(h, hj);
    }
}

/* A job is refused at submit when the alive cluster could never hold it;
 * once queued it is failed only when no ALIVE or SUSPECT node could hold it
 * (the scheduler's FAILED_PRECONDITION), and not before restart_grace_ms
 * after the head started: agents register again after a head restart, and
 * an agent whose node went DEAD registers as a new node, so the nodes a job
 * needs may yet come. tr_jobs_tick runs one more pass when the grace ends. */
static int in_restart_grace(const tr_head *h)
{
    return !h->grace_over && tr_now_ms() < h->grace_until;
}

/* The node grace: an agent restarted for an upgrade (SIGTERM or SIGUSR2:
 * its node LEFT), crashed and restarted by systemd (kill -9: its next self
 * replaces the node, DEAD) or frozen past the DEAD timeout comes back within
 * seconds, usually as a new node. A job only that node could hold waits for
 * it, as after a head start, and fails only when the grace is over with no
 * live node able to hold it (tr_jobs_tick runs that pass). The grace is one
 * window for the whole head, renewed by each node that goes: it does not
 * check that the node which went could have held the job (a job refused
 * nothing alive could hold before it went waits too, at most the grace). */
void tr_jobs_node_gone(tr_head *h, const char *name, const char *state)
{
    h->node_grace_until = tr_now_ms() + h->cfg.restart_grace_ms;
    tr_strlcpy(h->node_gone_name, name, sizeof(h->node_gone_name));
    tr_strlcpy(h->node_gone_state, state, sizeof(h->node_gone_state));
}

static int in_node_grace(const tr_head *h)
{
    return h->node_grace_until != 0 && tr_now_ms() < h->node_grace_until;
}

static void node_grace_reason(const tr_head *h, const char *why, char *buf, size_t size)
{
    time_t until = (time_t)((tr_wall_ms() + (h->node_grace_until - tr_now_ms())) / 1000);
    struct tm tm;
    char when[32];

    gmtime_r(&until, &tm);
    strftime(when, sizeof(when), "%H:%M:%S UTC", &tm);
    snprintf(buf, size, "%s; waiting until %s for node %s (%s) to come back (restart_grace_ms=%lld)", why,
             when, h->node_gone_name, h->node_gone_state, (long long)h->cfg.restart_grace_ms);
}

static void restart_grace_reason(const tr_head *h, const char *why, char *buf, size_t size)
{
    time_t until = (time_t)((h->started_ms + h->cfg.restart_grace_ms) / 1000);
    struct tm tm;
    char when[32];

    gmtime_r(&until, &tm);
    strftime(when, sizeof(when), "%H:%M:%S UTC", &tm);
    snprintf(buf, size, "%s; waiting until %s for agents to register after the head start (restart_grace_ms=%lld)",
             why, when, (long long)h->cfg.restart_grace_ms);
}

/* fence_wait: the job lost workers on a node whose agent may still run them
 * until its lease ends (node_life.c); it is placed again only after. */
static int fence_wait(const tr_head_job *hj)
{
    return hj->not_before != 0 && tr_now_ms() < hj->not_before;
}

void tr_jobs_schedule(tr_head *h)
{
    tr_sched_pending *pend = NULL;
    tr_sched_decision *dec = NULL;
    tr_head_job **who = NULL;
    size_t n = 0;
    tr_err err;

    for (size_t i = tr_jobs_first_unsettled(h); i < h->n_jobs; i++) {
        n += h->jobs[i]->j->state == TROUPE__V1__JOB_STATE__JOB_PENDING && h->jobs[i]->pl == NULL &&
             !fence_wait(h->jobs[i]);
    }
    if (n == 0) {
        return;
    }
    pend = calloc(n, sizeof(*pend));
    dec = calloc(n, sizeof(*dec));
    who = calloc(n, sizeof(*who));
    if (pend == NULL || dec == NULL || who == NULL) {
        TR_LOG(TR_LOG_ERR, "schedule: out of memory");
        goto out;
    }
    n = 0;
    for (size_t i = tr_jobs_first_unsettled(h); i < h->n_jobs; i++) {
        tr_head_job *hj = h->jobs[i];
        if (hj->j->state == TROUPE__V1__JOB_STATE__JOB_PENDING && hj->pl == NULL && !fence_wait(hj)) {
            pend[n].job_id = hj->j->id;
            pend[n].spec = &hj->sspec;
            who[n++] = hj;
        }
    }
    if (tr_sched_schedule(h->sched, pend, n, dec, &err) != TROUPE_OK) {
        TR_LOG(TR_LOG_ERR, "schedule: %s", err.msg);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        tr_head_job *hj = who[i];
        if (dec[i].status == TROUPE_OK) {
            job_start(h, hj, dec[i].placement);
        } else if (dec[i].status == TROUPE_RESOURCE_EXHAUSTED) {
            job_wait(h, hj, dec[i].why.msg);
        } else if (dec[i].status == TROUPE_FAILED_PRECONDITION && in_restart_grace(h)) {
            char why[sizeof(dec[i].why.msg) + 200];
            restart_grace_reason(h, dec[i].why.msg, why, sizeof(why));
            job_wait(h, hj, why);
        } else if (dec[i].status == TROUPE_FAILED_PRECONDITION && in_node_grace(h)) {
            char why[sizeof(dec[i].why.msg) + 200];
            node_grace_reason(h, dec[i].why.msg, why, sizeof(why));
            job_wait(h, hj, why);
        } else {
            job_finish(h, hj, TROUPE__V1__JOB_STATE__JOB_FAILED, dec[i].why.msg);
        }
    }
out:
    free(pend);
    free(dec);
    free(who);
}

static void describe_end(const Troupe__V1__WorkerInfo *w, char *buf, size_t size)
{
    if (w->state == TROUPE__V1__WORKER_STATE__WORKER_FAILED_TO_START) {
        snprintf(buf, size, "worker %s on node %s failed to start: %s", w->name, w->node_name, w->message);
    } else if (w->state == TROUPE__V1__WORKER_STATE__WORKER_LOST) {
        snprintf(buf, size, "worker %s was lost: %s", w->name, w->message);
    } else if (w->message[0] != '\0') { /* the agent's words: "exited with code 127: command not found: ..." */
        snprintf(buf, size, "worker %s on node %s %s", w->name, w->node_name, w->message);
    } else if (w->signal != 0) {
        snprintf(buf, size, "worker %s on node %s was killed by signal %d", w->name, w->node_name, w->signal);
    } else {
        snprintf(buf, size, "worker %s on node %s exited with code %d", w->name, w->node_name, w->exit_code);
    }
}

/* with_first_failure puts the first failure a worker of the current attempts
 * reported (troupe_worker_fail) before the exit that ended the job: the exit
 * is often a consequence ("rank 1 exited with code 1" because rank 2 went
 * away), the report says where it started. */
static void with_first_failure(const tr_head_job *hj, char *why, size_t size)
{
    const Troupe__V1__WorkerFailure *f = tr_jobs_first_failure(hj);
    char first[1400], exit_text[600];

    if (f == NULL) {
        return;
    }
    tr_jobs_failure_text(f, first, sizeof(first));
    tr_strlcpy(exit_text, why, sizeof(exit_text));
    snprintf(why, size, "%s; then %s", first, exit_text);
}

/* worker_ok: exited cleanly, or no longer a member of its elastic group
 * (whatever became of it does not decide the job). */
static int worker_ok(const Troupe__V1__WorkerInfo *w)
{
    return w->removed || (w->state == TROUPE__V1__WORKER_STATE__WORKER_EXITED && w->exit_code == 0 && w->signal == 0);
}

/* restart_group gives every worker of a group a new attempt; agents stop the
 * old attempt's processes and start the new ones. */
static void restart_group(tr_head *h, tr_head_job *hj, const char *group, const char *why)
{
    char msg[2400];

    uint32_t attempt;

    hj->j->restarts++;
    attempt = tr_elastic_next_attempt(hj);
    for (size_t i = 0; i < hj->j->n_workers; i++) {
        Troupe__V1__WorkerInfo *w = hj->j->workers[i];
        if (strcmp(w->group, group) != 0) {
            continue;
        }
        w->attempt = attempt;
        w->state = TROUPE__V1__WORKER_STATE__WORKER_PENDING;
        w->removed = 0;
        w->member_rank = w->rank;
        w->exit_code = w->signal = 0;
        w->pid = 0;
        w->ended_ms = 0;
        tr_jobs_set_str(&w->message, "");
    }
    tr_elastic_reset(hj, group); /* whole again */
    snprintf(msg, sizeof(msg), "%s; restarting group %s (restart %u of %u)", why, group, hj->j->restarts,
             hj->j->spec->max_restarts);
    tr_jobs_set_str(&hj->j->reason, msg);
    issue_workers(h, hj, group);
    tr_jobs_touch(h, hj);
    job_note(h, hj, "RESTARTING", msg);
}

/* ---- crash-loop back-off ----------------------------------------------
 *
 * Like Kubernetes' CrashLoopBackOff: a group whose worker failed restarts
 * after restart_backoff_ms, doubled for every failure in a row (backoff_level),
 * up to restart_backoff_max_ms; an attempt that ran at least twice the cap
 * starts the count over. The pending restart (time, groups, level) is part of
 * the job record, so a head restart neither forgets it nor resets the delay:
 * tr_jobs_tick fires it when the wall clock passes next_restart_ms. */

static int pending_restart(const tr_head_job *hj, const char *group)
{
    for (size_t i = 0; i < hj->j->n_restart_groups; i++) {
        if (group == NULL || strcmp(hj->j->restart_groups[i], group) == 0) {
            return 1;
        }
    }
    return 0;
}

static void clear_restart(tr_head_job *hj)
{
    Troupe__V1__Job *j = hj->j;
    for (size_t i = 0; i < j->n_restart_groups; i++) {
        free(j->restart_groups[i]);
    }
    free(j->restart_groups);
    j->restart_groups = NULL;
    j->n_restart_groups = 0;
    j->next_restart_ms = 0;
}

static int add_restart_group(tr_head_job *hj, const char *group)
{
    Troupe__V1__Job *j = hj->j;
    char **grown = realloc(j->restart_groups, (j->n_restart_groups + 1) * sizeof(*grown));
    char *copy = strdup(group);

    if (grown != NULL) {
        j->restart_groups = grown;
    }
    if (grown == NULL || copy == NULL) {
        free(copy);
        return -1;
    }
    j->restart_groups[j->n_restart_groups++] = copy;
    return 0;
}

void tr_jobs_awaiting(tr_head_job *hj, const char *name)
{
    Troupe__V1__Job *j = hj->j;

    if (hj->awaiting_ms == NULL && j->n_workers > 0) {
        hj->awaiting_ms = calloc(j->n_workers, sizeof(*hj->awaiting_ms));
        hj->n_awaiting = hj->awaiting_ms != NULL ? j->n_workers : 0;
    }
    for (size_t i = 0; i < hj->n_awaiting && i < j->n_workers; i++) {
        if (strcmp(j->workers[i]->name, name) == 0) {
            hj->awaiting_ms[i] = tr_now_ms();
            return;
        }
    }
}

int64_t tr_jobs_awaited_ms(const tr_head_job *hj, size_t idx)
{
    return idx < hj->n_awaiting ? hj->awaiting_ms[idx] : 0;
}

int64_t tr_jobs_backoff_ms(const tr_head *h, uint32_t level)
{
    int64_t cap = h->cfg.restart_backoff_max_ms, delay = h->cfg.restart_backoff_ms;

    for (uint32_t i = 1; i < level && delay < cap; i++) {
        delay *= 2;
    }
    return delay < cap ? delay : cap;
}

int tr_jobs_ran_well(const tr_head *h, const Troupe__V1__WorkerInfo *w)
{
    int64_t ran = (w->started_ms > 0 && w->ended_ms >= w->started_ms) ? w->ended_ms - w->started_ms : 0;
    return ran >= 2 * h->cfg.restart_backoff_max_ms;
}

static int64_t backoff_delay(tr_head *h, tr_head_job *hj, const Troupe__V1__WorkerInfo *w)
{
    if (tr_jobs_ran_well(h, w)) {
        hj->j->backoff_level = 0;
    }
    if (hj->j->backoff_level < 64) {
        hj->j->backoff_level++;
    }
    return tr_jobs_backoff_ms(h, hj->j->backoff_level);
}

static void format_utc(int64_t ms, char *buf, size_t size)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, size, "%H:%M:%S UTC", &tm);
}

/* schedule_restart restarts the group now when no back-off applies, else
 * records the restart for tr_jobs_tick (joining one already pending). */
static void schedule_restart(tr_head *h, tr_head_job *hj, const Troupe__V1__WorkerInfo *w, const char *why)
{
    char msg[2600], when[32];
    int64_t delay;

    if (pending_restart(hj, w->group)) {
        return; /* this group restarts at the pending time anyway */
    }
    if (hj->j->n_restart_groups > 0) {
        if (add_restart_group(hj, w->group) != 0) {
            TR_LOG(TR_LOG_ERR, "job=%llu: out of memory; restarting group %s now",
                   (unsigned long long)hj->j->id, w->group);
            restart_group(h, hj, w->group, why);
        }
        tr_jobs_touch(h, hj);
        return;
    }
    delay = backoff_delay(h, hj, w);
    if (delay <= 0 || add_restart_group(hj, w->group) != 0) {
        restart_group(h, hj, w->group, why);
        return;
    }
    hj->j->next_restart_ms = tr_wall_ms() + delay;
    format_utc(hj->j->next_restart_ms, when, sizeof(when));
    snprintf(msg, sizeof(msg),
             "%s; restarting group %s at %s (in %.1f s: back-off after %u failure%s in a row; restart %u of %u)",
             why, w->group, when, (double)delay / 1000.0, hj->j->backoff_level,
             hj->j->backoff_level == 1 ? "" : "s", hj->j->restarts + 1, hj->j->spec->max_restarts);
    tr_jobs_set_str(&hj->j->reason, msg);
    tr_jobs_touch(h, hj);
    job_note(h, hj, "BACKOFF", msg);
}

/* fire_restart runs a pending restart whose time has come. */
static void fire_restart(tr_head *h, tr_head_job *hj)
{
    size_t n = hj->j->n_restart_groups;
    char **groups = hj->j->restart_groups;
    int placed = hj->pl != NULL && hj->issued != NULL;

    hj->j->restart_groups = NULL;
    hj->j->n_restart_groups = 0;
    hj->j->next_restart_ms = 0;
    if (!placed) {
        /* Its GPUs could not be reserved again after a head restart. */
        job_finish(h, hj, TROUPE__V1__JOB_STATE__JOB_FAILED,
                   "restart after the back-off impossible: the job's placement was not restored");
    }
    for (size_t i = 0; i < n; i++) {
        if (placed) {
            restart_group(h, hj, groups[i], "back-off elapsed");
        }
        free(groups[i]);
    }
    free(groups);
}

/* tr_jobs_worker_ended decides what a worker's end means for its job. */
void tr_jobs_worker_ended(tr_head *h, tr_head_job *hj, size_t idx)
{
    const Troupe__V1__WorkerInfo *w = hj->j->workers[idx];
    char why[2048];

    if (tr_jobs_is_terminal(hj) || hj->requeue) {
        release_if_idle(h, hj);
        return;
    }
    if (worker_ok(w)) {
        size_t removed = 0;
        for (size_t i = 0; i < hj->j->n_workers; i++) {
            if (!worker_ok(hj->j->workers[i])) {
                return;
            }
            removed += hj->j->workers[i]->removed;
        }
        if (removed > 0) {
            snprintf(why, sizeof(why), "all %zu members exited with code 0 (%zu left elastic groups)",
                     hj->j->n_workers - removed, removed);
        } else {
            snprintf(why, sizeof(why), "all %zu workers exited with code 0", hj->j->n_workers);
        }
        job_finish(h, hj, TROUPE__V1__JOB_STATE__JOB_SUCCEEDED, why);
        return;
    }
    describe_end(w, why, sizeof(why));
    with_first_failure(hj, why, sizeof(why));
    tr_jobs_worker_failed(h, hj, idx, why);
}

/* tr_jobs_worker_failed applies the restart rules to a failure of worker idx
 * (ended, or judged by health.c): its group restarts while restarts remain,
 * else the job fails with why. */
void tr_jobs_worker_failed(tr_head *h, tr_head_job *hj, size_t idx, const char *why)
{
    const Troupe__V1__WorkerInfo *w = hj->j->workers[idx];

    if (tr_jobs_is_terminal(hj) || hj->requeue) {
        return;
    }
    if (!pending_restart(hj, w->group) && tr_elastic_shrink(h, hj, idx, why)) {
        return; /* an elastic group goes on without it */
    }
    if (pending_restart(hj, w->group) ||
        hj->j->restarts + hj->j->n_restart_groups < hj->j->spec->max_restarts) {
        schedule_restart(h, hj, w, why);
        return;
    }
    job_finish(h, hj, TROUPE__V1__JOB_STATE__JOB_FAILED, why);
}

/* node_died marks the node's workers LOST and fails or requeues their jobs. */
static void node_died(tr_head *h, const Troupe__V1__Node *n)
{
    int left = n->state == TROUPE__V1__NODE_STATE__NODE_LEFT;

    for (size_t k = tr_jobs_first_unsettled(h); k < h->n_jobs; k++) {
        tr_head_job *hj = h->jobs[k];
        int hit = 0;
        char why[600];
        if (hj->pl == NULL) {
            continue;
        }
        for (size_t i = 0; i < hj->j->n_workers; i++) {
            Troupe__V1__WorkerInfo *w = hj->j->workers[i];
            int live = w->state == TROUPE__V1__WORKER_STATE__WORKER_RUNNING ||
                       w->state == TROUPE__V1__WORKER_STATE__WORKER_PENDING;
            if (w->node_id == n->id && live) {
                w->state = TROUPE__V1__WORKER_STATE__WORKER_LOST;
                w->ended_ms = tr_wall_ms();
                tr_jobs_set_str(&w->message, left ? "its node left (agent stopped)" : "its node died");
                hit = 1;
            }
        }
        if (!hit) {
            continue;
        }
        snprintf(why, sizeof(why), "node %s (id %llu) %s: %s", n->name, (unsigned long long)n->id,
                 left ? "left" : "died",
                 n->reason);
        if (!hj->requeue && !tr_jobs_is_terminal(hj) && tr_elastic_shrink_lost(h, hj, n->id)) {
            continue; /* elastic groups go on without them */
        }
        if (hj->requeue) {
            /* Already being placed again: this node's workers are just gone too. */
            int64_t fence = tr_head_node_fence_until(h, n);
            hj->not_before = fence > hj->not_before ? fence : hj->not_before;
            tr_jobs_touch(h, hj);
            release_if_idle(h, hj);
        } else if (!tr_jobs_is_terminal(hj) && hj->j->restarts < hj->j->spec->max_restarts) {
            char msg[800]; /* why (600) and the rest */
            int64_t fence = tr_head_node_fence_until(h, n), wait = fence - tr_now_ms();
            hj->j->restarts++;
            hj->requeue = 1;
            clear_restart(hj); /* the whole job is placed again */
            hj->j->state = TROUPE__V1__JOB_STATE__JOB_PENDING;
            if (fence > hj->not_before) {
                hj->not_before = fence;
            }
            snprintf(msg, sizeof(msg), "%s; placing the job again (restart %u of %u)%s", why, hj->j->restarts,
                     hj->j->spec->max_restarts,
                     wait > 0 ? " once the lost node's lease has ended (its workers are killed by then)" : "");
            tr_jobs_set_str(&hj->j->reason, msg);
            bump_job_nodes(h, hj);
            tr_jobs_touch(h, hj);
            job_note(h, hj, "RESTARTING", msg);
            release_if_idle(h, hj);
        } else if (!tr_jobs_is_terminal(hj)) {
            job_finish(h, hj, TROUPE__V1__JOB_STATE__JOB_FAILED, why);
        } else {
            tr_jobs_touch(h, hj);
            release_if_idle(h, hj);
        }
    }
}

/* sched_state: only an ALIVE node that is neither draining nor still running
 * workers of an earlier self (fenced_workers) gets new work. */
static int sched_state(const Troupe__V1__Node *n)
{
    if (tr_head_node_gone(n)) {
        return TR_SCHED_DEAD;
    }
    return n->state == TROUPE__V1__NODE_STATE__NODE_ALIVE && !n->draining && n->fenced_workers == 0
               ? TR_SCHED_ALIVE
               : TR_SCHED_SUSPECT;
}

void tr_jobs_node_added(tr_head *h, const Troupe__V1__Node *n)
{
    tr_sched_node_spec ns = {0};
    tr_sched_label *lab = calloc(n->n_labels + 1, sizeof(*lab));
    tr_err err;

    if (lab == NULL) {
        return;
    }
    for (size_t i = 0; i < n->n_labels; i++) {
        lab[i].key = n->labels[i]->key;
        lab[i].value = n->labels[i]->value;
    }
    ns.id = n->id;
    ns.name = n->name;
    ns.gpus = (unsigned)n->n_gpus;
    ns.cpus = n->cpus;
    ns.labels = lab;
    ns.nlabels = n->n_labels;
    /* A node without GPUs is scheduled too: it takes CPU-only workers. */
    if (tr_sched_node_add(h->sched, &ns, &err) != TROUPE_OK && err.code != TROUPE_ALREADY_EXISTS) {
        TR_LOG(TR_LOG_WARNING, "scheduler refused node=%llu: %s", (unsigned long long)n->id, err.msg);
    }
    free(lab);
    tr_jobs_node_state(h, n);
}

void tr_jobs_node_state(tr_head *h, const Troupe__V1__Node *n)
{
    tr_err err;

    if (tr_sched_node_set_state(h->sched, n->id, sched_state(n), &err) != TROUPE_OK &&
        err.code != TROUPE_NOT_FOUND) {
        TR_LOG(TR_LOG_DEBUG, "scheduler node state node=%llu: %s", (unsigned long long)n->id, err.msg);
    }
    { /* why it takes no new work, for a waiting job's reason */
        tr_sched_node_set_hold(h->sched, n->id,
                               n->state != TROUPE__V1__NODE_STATE__NODE_ALIVE ? TR_SCHED_HOLD_UNREPORTED
                               : n->draining                                  ? TR_SCHED_HOLD_DRAINING
                               : n->fenced_workers                            ? TR_SCHED_HOLD_FENCED
                                                                              : TR_SCHED_HOLD_UNREPORTED);
    }
    if (tr_head_node_gone(n)) {
        node_died(h, n);
    }
    tr_jobs_schedule(h);
}

uint32_t tr_jobs_node_free_gpus(tr_head *h, uint64_t node_id)
{
    tr_sched_node_info info;
    return tr_sched_node_get(h->sched, node_id, &info, NULL) == TROUPE_OK ? info.free_gpus : 0;
}

uint32_t tr_jobs_node_free_cpu_milli(tr_head *h, uint64_t node_id)
{
    tr_sched_node_info info;
    if (tr_sched_node_get(h->sched, node_id, &info, NULL) != TROUPE_OK) {
        return 0;
    }
    return info.free_cpu_milli > UINT32_MAX ? UINT32_MAX : (uint32_t)info.free_cpu_milli;
}

/* check_nsys refuses a job that wants nsys when no live node has it: the
 * workers would otherwise only fail at launch, one by one. A node without it
 * that the job lands on anyway fails that worker at launch, saying so. */
static int check_nsys(const tr_head *h, const Troupe__V1__JobSpec *spec, tr_err *err)
{
    char names[512] = "";
    size_t off = 0;

    if (!tr_js_wants_nsys(spec)) {
        return TROUPE_OK;
    }
    for (size_t i = 0; i < h->n_nodes; i++) {
        const Troupe__V1__Node *n = h->nodes[i].n;
        if (tr_head_node_gone(n)) {
            continue;
        }
        for (size_t t = 0; t < n->n_tools; t++) {
            if (strcmp(n->tools[t], "nsys") == 0) {
                return TROUPE_OK;
            }
        }
        if (off < sizeof(names)) {
            off += (size_t)snprintf(names + off, sizeof(names) - off, "%s%s", off ? ", " : "", n->name);
        }
    }
    return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                      "profile: {nsys: true} (or TROUPE_NSYS=1) but no node has nsys on its PATH (%s%s): install "
                      "Nsight Systems on the nodes and restart their agents (troupe-node looks for it at start), or "
                      "drop nsys and use the built-in trace (troupe trace JOB)",
                      off ? "nodes: " : "no node is registered", names);
}

int tr_jobs_admit(tr_head *h, const Troupe__V1__JobSpec *spec, uint64_t *id, tr_err *err)
{
    Troupe__V1__Job tmpl = TROUPE__V1__JOB__INIT;
    Troupe__V1__Job *j;
    tr_head_job *hj = NULL;
    size_t len;
    uint8_t *buf;
    int rv;

    if ((rv = tr_jobspec_validate(spec, err)) != TROUPE_OK || (rv = check_nsys(h, spec, err)) != TROUPE_OK ||
        (h->spec_check != NULL && (rv = h->spec_check(h, spec, err)) != TROUPE_OK)) {
        return rv;
    }
    /* Deep-copy the spec into a fresh record through its wire form. */
    tmpl.spec = (Troupe__V1__JobSpec *)spec;
    tmpl.state = TROUPE__V1__JOB_STATE__JOB_PENDING;
    tmpl.submitted_ms = tr_wall_ms();
    tmpl.reason = "waiting to be placed";
    len = troupe__v1__job__get_packed_size(&tmpl);
    if ((buf = malloc(len ? len : 1)) == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    troupe__v1__job__pack(&tmpl, buf);
    j = troupe__v1__job__unpack(NULL, len, buf);
    free(buf);
    if (j == NULL) {
        /* protobuf-c keeps unknown fields it cannot write back readably
         * (e.g. field number 0); such a spec cannot be stored either. */
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "job spec carries malformed unknown fields");
    }
    if ((rv = job_wrap(h, j, &hj, err)) != TROUPE_OK) {
        return rv;
    }
    /* Infeasible on the alive cluster: refuse now, with the numbers. */
    if ((rv = tr_sched_check(h->sched, &hj->sspec, err)) != TROUPE_OK) {
        job_free(hj);
        return rv;
    }
    hj->j->id = tr_head_new_id(h, TR_ID_JOBS);
    if (jobs_append(h, hj) != 0) {
        job_free(hj);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    tr_head_dirty_job(h, hj->j->id);
    *id = hj->j->id;
    job_note(h, hj, "SUBMITTED", "submitted");
    return TROUPE_OK;
}

void tr_jobs_set_owner(tr_head *h, tr_rpc_call *call, uint64_t id)
{
    tr_head_job *hj = tr_jobs_find(h, id);
    char who[48];

    if (hj != NULL) {
        tr_head_caller_name(call, h, who, sizeof(who));
        tr_jobs_set_str(&hj->j->owner, who);
        tr_head_dirty_job(h, id); /* saved with the submission, in the same batch */
    }
}

int tr_jobs_submit(tr_head *h, const Troupe__V1__JobSpec *spec, uint64_t *id, tr_err *err)
{
    int rv = tr_jobs_admit(h, spec, id, err);
    if (rv == TROUPE_OK) {
        tr_jobs_schedule(h);
    }
    return rv;
}

int tr_jobs_stop(tr_head *h, tr_head_job *hj, tr_err *err)
{
    if (tr_jobs_is_terminal(hj)) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "job %llu already ended: %s",
                          (unsigned long long)hj->j->id, job_state_name((int)hj->j->state));
    }
    hj->j->stop_requested = 1;
    job_finish(h, hj, TROUPE__V1__JOB_STATE__JOB_STOPPED,
               hj->pl ? "stopped by user" : "stopped by user before it started");
    return TROUPE_OK;
}

void tr_jobs_tick(tr_head *h)
{
    int64_t now = tr_now_ms(), wall = tr_wall_ms();
    int fence_over = 0;

    if (!h->grace_over && now >= h->grace_until) {
        h->grace_over = 1;
        tr_jobs_schedule(h); /* jobs kept only by the restart grace fail now */
    }
    if (h->node_grace_until != 0 && now >= h->node_grace_until) {
        h->node_grace_until = 0;
        tr_jobs_schedule(h); /* jobs kept only by the node grace fail now */
    }

    for (size_t k = 0; k < h->n_jobs; k++) {
        tr_head_job *hj = h->jobs[k];
        if (hj->j->next_restart_ms != 0 && wall >= hj->j->next_restart_ms &&
            hj->j->state == TROUPE__V1__JOB_STATE__JOB_RUNNING && !hj->requeue) {
            fire_restart(h, hj);
        }
        if (hj->j->state == TROUPE__V1__JOB_STATE__JOB_RUNNING && hj->deadline && now >= hj->deadline) {
            char why[128];
            snprintf(why, sizeof(why), "timed out after %u s (timeout_s); workers stopped",
                     hj->j->spec->timeout_s);
            job_finish(h, hj, TROUPE__V1__JOB_STATE__JOB_FAILED, why);
        }
        if (hj->job_waiters || hj->log_waiters) {
            tr_events_publish(h, TR_EV_JOB_DUE, hj, NULL);
        }
        if (hj->not_before != 0 && now >= hj->not_before) {
            hj->not_before = 0;
            fence_over = 1;
        }
        tr_elastic_grow(h, hj); /* replacements for ranks an elastic group lost */
    }
    if (fence_over) {
        tr_jobs_schedule(h);
    }
    for (size_t i = 0; i < h->n_nodes; i++) {
        if (h->nodes[i].sync_waiter != NULL && now >= h->nodes[i].sync_until) {
            tr_events_publish(h, TR_EV_NODE_SYNC_DUE, NULL, &h->nodes[i]);
        }
    }
}

/* ---- recovery ----------------------------------------------------------- */

static uint64_t mask_of(const uint32_t *gpus, size_t n)
{
    uint64_t m = 0;
    for (size_t i = 0; i < n; i++) {
        m |= (gpus[i] < 64) ? 1ull << gpus[i] : 0;
    }
    return m;
}

static size_t group_index(const Troupe__V1__JobSpec *sp, const char *name)
{
    for (size_t g = 0; g < sp->n_groups; g++) {
        if (strcmp(sp->groups[g]->name, name) == 0) {
            return g;
        }
    }
    return 0;
}

/* restore_placement re-reserves the GPUs a stored job was running on. */
static int restore_placement(tr_head *h, tr_head_job *hj, tr_err *err)
{
    Troupe__V1__Job *j = hj->j;
    tr_sched_worker *w = calloc(j->n_workers + 1, sizeof(*w));
    tr_sched_vnode *v = calloc(j->n_vnodes + 1, sizeof(*v));
    int rv = TROUPE_RESOURCE_EXHAUSTED;

    hj->issued = calloc(j->n_workers + 1, sizeof(*hj->issued));
    if (w == NULL || v == NULL || hj->issued == NULL) {
        tr_err_set(err, rv, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < j->n_vnodes; i++) {
        v[i].node_id = j->vnodes[i]->node_id;
        v[i].ngpus = (uint32_t)j->vnodes[i]->n_gpus;
        v[i].gpu_mask = mask_of(j->vnodes[i]->gpus, j->vnodes[i]->n_gpus);
        for (size_t k = 0; k < j->vnodes[i]->n_gpus && k < TR_SCHED_MAX_NODE_GPUS; k++) {
            v[i].gpus[k] = (uint8_t)j->vnodes[i]->gpus[k];
        }
    }
    for (size_t i = 0; i < j->n_workers; i++) {
        const Troupe__V1__WorkerInfo *r = j->workers[i];
        w[i].group = (uint32_t)group_index(j->spec, r->group);
        w[i].rank = r->rank;
        w[i].node_id = r->node_id;
        w[i].node_rank = r->node_rank;
        w[i].nnodes = r->nnodes;
        w[i].local_rank = r->local_rank;
        w[i].local_world_size = r->local_world_size;
        w[i].ngpus = (uint32_t)r->n_gpus;
        w[i].gpu_mask = mask_of(r->gpus, r->n_gpus);
        for (size_t k = 0; k < r->n_gpus && k < TR_SCHED_MAX_NODE_GPUS; k++) {
            w[i].gpus[k] = (uint8_t)r->gpus[k];
        }
        for (size_t k = 0; k < j->n_vnodes; k++) {
            if (v[k].node_id == r->node_id && (v[k].gpu_mask & w[i].gpu_mask) == w[i].gpu_mask) {
                w[i].vnode = (uint32_t)k;
                break;
            }
        }
    }
    /* A worker counts as issued from the first assignment set of this head:
     * until its agent has applied that set, not being reported proves nothing. */
    for (size_t i = 0; i < j->n_workers; i++) {
        hj->issued[i] = (uint64_t)h->started_ms * 1000u;
    }
    rv = tr_sched_restore(h->sched, j->id, &hj->sspec, w, j->n_workers, v, j->n_vnodes, err);
    if (rv == TROUPE_OK) {
        hj->pl = tr_sched_find(h->sched, j->id);
        for (size_t g = 0; g < j->n_groups; g++) {
            port_mark(h, j->groups[g]->master_addr, j->groups[g]->master_port, 1);
        }
    }
out:
    free(w);
    free(v);
    return rv;
}

static int holds_gpus(const Troupe__V1__Job *j)
{
    if (j->state == TROUPE__V1__JOB_STATE__JOB_RUNNING && j->n_restart_groups > 0) {
        return 1; /* waiting out a back-off: its GPUs stay reserved for the restart */
    }
    for (size_t i = 0; i < j->n_workers; i++) {
        int s = j->workers[i]->state;
        if (s == TROUPE__V1__WORKER_STATE__WORKER_RUNNING || s == TROUPE__V1__WORKER_STATE__WORKER_PENDING) {
            return 1;
        }
    }
    return 0;
}

static int recover_job(void *arg, uint64_t id, int state, const uint8_t *data, size_t len)
{
    tr_head *h = arg;
    Troupe__V1__Job *j = troupe__v1__job__unpack(NULL, len, data);
    tr_head_job *hj = NULL;
    tr_err err;

    (void)state;
    tr_head_id_seen(h, TR_ID_JOBS, id, "the jobs table");
    if (j == NULL || j->spec == NULL) {
        TR_LOG(TR_LOG_ERR, "store: job record %llu is unreadable; skipped", (unsigned long long)id);
        if (j != NULL) {
            troupe__v1__job__free_unpacked(j, NULL);
        }
        return TROUPE_OK;
    }
    if (job_wrap(h, j, &hj, &err) != TROUPE_OK) {
        TR_LOG(TR_LOG_ERR, "job %llu not recovered: %s", (unsigned long long)id, err.msg);
        return TROUPE_OK;
    }
    tr_joblog_recover(h, hj);
    if (holds_gpus(j)) {
        hj->requeue = j->state == TROUPE__V1__JOB_STATE__JOB_PENDING;
        if (restore_placement(h, hj, &err) != TROUPE_OK) {
            TR_LOG(TR_LOG_ERR, "job %llu: placement not restored: %s", (unsigned long long)id, err.msg);
        }
    }
    if (jobs_append(h, hj) != 0) {
        job_free(hj);
        return TROUPE_RESOURCE_EXHAUSTED;
    }
    if (!tr_jobs_is_settled(hj)) {
        tr_jobs_index_add(h, hj);
    }
    return TROUPE_OK;
}

int tr_jobs_init(tr_head *h, tr_err *err)
{
    char dir[4200];
    size_t running = 0;
    int rv;

    if ((rv = tr_sched_open(&h->sched, err)) != TROUPE_OK) {
        return rv;
    }
    snprintf(dir, sizeof(dir), "%s/logs", h->cfg.state_dir);
    if (tr_mkdir_p(dir) != 0) {
        return tr_err_set(err, TROUPE_INTERNAL, "cannot prepare %s: %s", dir, strerror(errno));
    }
    for (size_t i = 0; i < h->n_nodes; i++) {
        tr_jobs_node_added(h, h->nodes[i].n);
    }
    if ((rv = tr_store_scan(h->store, "jobs", recover_job, h, err)) != TROUPE_OK) {
        return rv;
    }
    for (size_t k = 0; k < h->n_jobs; k++) {
        running += h->jobs[k]->pl != NULL;
    }
    if (h->n_jobs > 0) {
        TR_LOG(TR_LOG_NOTICE, "recovered jobs=%zu holding_gpus=%zu", h->n_jobs, running);
    }
    tr_jobs_schedule(h);
    return TROUPE_OK;
}

void tr_jobs_fini(tr_head *h)
{
    for (size_t k = 0; k < h->n_jobs; k++) {
        job_free(h->jobs[k]);
    }
    free(h->jobs);
    h->jobs = NULL;
    h->n_jobs = h->cap_jobs = 0;
    tr_sched_close(h->sched);
    h->sched = NULL;
    port_map_free(h);
}
