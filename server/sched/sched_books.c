/* sched_books.c - the placements a scheduler holds: lookup, release, node
 * queries, accessors and the invariant check used by the tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"

static size_t phash_slot(const tr_sched *s, uint64_t job)
{
    uint64_t x = job * UINT64_C(0x9e3779b97f4a7c15);
    return (size_t)(x >> 32) & (s->phash_cap - 1);
}

static int phash_grow(tr_sched *s)
{
    size_t cap = s->phash_cap == 0 ? 64 : s->phash_cap * 2;
    tr_sched_placement **h = calloc(cap, sizeof(*h));
    if (h == NULL) {
        return TROUPE_RESOURCE_EXHAUSTED;
    }
    free(s->phash);
    s->phash = h;
    s->phash_cap = cap;
    for (tr_sched_placement *p = s->plist; p != NULL; p = p->next) {
        size_t i = phash_slot(s, p->job);
        p->hnext = h[i];
        h[i] = p;
    }
    return TROUPE_OK;
}

int tr_sched_placement_link(tr_sched *s, tr_sched_placement *p)
{
    if (s->nplace + 1 > s->phash_cap && phash_grow(s) != TROUPE_OK) {
        return TROUPE_RESOURCE_EXHAUSTED;
    }
    size_t i = phash_slot(s, p->job);
    p->hnext = s->phash[i];
    s->phash[i] = p;
    p->prev = NULL;
    p->next = s->plist;
    if (s->plist != NULL) {
        s->plist->prev = p;
    }
    s->plist = p;
    s->nplace++;
    return TROUPE_OK;
}

void tr_sched_placement_free(tr_sched_placement *p)
{
    free(p); /* one block: see placement_alloc in sched_place.c */
}

tr_sched_placement *tr_sched_find(const tr_sched *s, uint64_t job_id)
{
    if (s->phash_cap == 0) {
        return NULL;
    }
    tr_sched_placement *p = s->phash[phash_slot(s, job_id)];
    while (p != NULL && p->job != job_id) {
        p = p->hnext;
    }
    return p;
}

void tr_sched_release(tr_sched *s, tr_sched_placement *p)
{
    if (p == NULL) {
        return;
    }
    tr_sched_view_give_placement(s, &s->live, p);
    tr_sched_placement **pp = &s->phash[phash_slot(s, p->job)];
    while (*pp != p) {
        pp = &(*pp)->hnext;
    }
    *pp = p->hnext;
    if (p->prev != NULL) {
        p->prev->next = p->next;
    } else {
        s->plist = p->next;
    }
    if (p->next != NULL) {
        p->next->prev = p->prev;
    }
    s->nplace--;
    tr_sched_placement_free(p);
}

int tr_sched_jobs_on_node(const tr_sched *s, uint64_t node_id, uint64_t *job_ids, size_t cap, size_t *n,
                          tr_err *err)
{
    *n = 0;
    int64_t slot = tr_sched_slot_of(s, node_id);
    if (slot < 0) {
        return tr_err_set(err, TROUPE_NOT_FOUND, "node %llu is not registered", (unsigned long long)node_id);
    }
    for (const tr_sched_placement *p = s->plist; p != NULL; p = p->next) {
        bool uses = false;
        for (size_t v = 0; v < p->nvnodes && !uses; v++) {
            uses = p->vslot[v] == (uint32_t)slot;
        }
        for (size_t w = 0; p->cpu && w < p->nworkers && !uses; w++) {
            uses = p->workers[w].cpu_milli != 0 && p->workers[w].node_id == node_id;
        }
        if (uses) {
            if (*n < cap) {
                job_ids[*n] = p->job;
            }
            (*n)++;
        }
    }
    return TROUPE_OK;
}

uint64_t tr_sched_placement_job(const tr_sched_placement *p)
{
    return p->job;
}

size_t tr_sched_placement_nworkers(const tr_sched_placement *p)
{
    return p->nworkers;
}

const tr_sched_worker *tr_sched_placement_workers(const tr_sched_placement *p)
{
    return p->workers;
}

const tr_sched_worker *tr_sched_placement_group(const tr_sched_placement *p, size_t g, size_t *n)
{
    if (g >= p->ngroups) {
        *n = 0;
        return NULL;
    }
    *n = p->group_off[g + 1] - p->group_off[g];
    return p->workers + p->group_off[g];
}

size_t tr_sched_placement_nvnodes(const tr_sched_placement *p)
{
    return p->nvnodes;
}

const tr_sched_vnode *tr_sched_placement_vnodes(const tr_sched_placement *p)
{
    return p->vnodes;
}

/* A placement is consistent with itself: workers sit inside their vnode's
 * GPUs, on its node, without overlapping each other. */
static int check_placement(const tr_sched *s, const tr_sched_placement *p, tr_err *err)
{
    uint64_t *used = calloc(p->nvnodes, sizeof(uint64_t));
    int rv = TROUPE_OK;

    if (used == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    for (size_t i = 0; i < p->nworkers && rv == TROUPE_OK; i++) {
        const tr_sched_worker *w = &p->workers[i];
        if (w->vnode == TR_SCHED_NO_VNODE) {
            if (w->ngpus != 0 || w->gpu_mask != 0 || w->cpu_milli == 0 ||
                tr_sched_slot_of(s, w->node_id) < 0) {
                rv = tr_err_set(err, TROUPE_INTERNAL,
                                "job %llu worker %zu: a CPU-only worker with GPUs, "
                                "no CPU or no node",
                                (unsigned long long)p->job, i);
            }
            continue;
        }
        const tr_sched_vnode *vn = &p->vnodes[w->vnode];
        if ((w->gpu_mask & ~vn->gpu_mask) != 0 || (w->gpu_mask & used[w->vnode]) != 0 ||
            w->node_id != vn->node_id || (unsigned)__builtin_popcountll(w->gpu_mask) != w->ngpus) {
            rv = tr_err_set(err, TROUPE_INTERNAL, "job %llu worker %zu: GPUs outside its vnode or shared",
                            (unsigned long long)p->job, i);
        }
        used[w->vnode] |= w->gpu_mask;
    }
    for (size_t v = 0; v < p->nvnodes && rv == TROUPE_OK; v++) {
        if (s->nodes[p->vslot[v]].id != p->vnodes[v].node_id) {
            rv = tr_err_set(err, TROUPE_INTERNAL, "job %llu vnode %zu: slot and node id disagree",
                            (unsigned long long)p->job, v);
        }
    }
    free(used);
    return rv;
}

/* Recompute the CPU slots used from the placements; compare with the live view. */
static int check_cpus(const tr_sched *s, int64_t *cpu, tr_err *err)
{
    for (const tr_sched_placement *p = s->plist; p != NULL; p = p->next) {
        for (size_t w = 0; p->cpu && w < p->nworkers; w++) {
            int64_t slot = tr_sched_slot_of(s, p->workers[w].node_id);
            if (slot >= 0) {
                cpu[slot] += p->workers[w].cpu_milli;
            }
        }
    }
    for (uint32_t i = 0; i < s->nnodes; i++) {
        if (s->live.cpu_free[i] + cpu[i] != s->nodes[i].cpu_milli) {
            return tr_err_set(err, TROUPE_INTERNAL,
                              "node %llu: %lld CPU milli free, placements use %lld of %lld",
                              (unsigned long long)s->nodes[i].id, (long long)s->live.cpu_free[i],
                              (long long)cpu[i], (long long)s->nodes[i].cpu_milli);
        }
    }
    return TROUPE_OK;
}

/* Recompute used masks from the placements; compare with the live view. */
static int check_masks(const tr_sched *s, uint64_t *used, tr_err *err)
{
    for (const tr_sched_placement *p = s->plist; p != NULL; p = p->next) {
        int rv = check_placement(s, p, err);
        if (rv != TROUPE_OK) {
            return rv;
        }
        for (size_t v = 0; v < p->nvnodes; v++) {
            uint32_t slot = p->vslot[v];
            if ((used[slot] & p->vnodes[v].gpu_mask) != 0) {
                return tr_err_set(err, TROUPE_INTERNAL, "node %llu: a GPU is booked twice (job %llu)",
                                  (unsigned long long)s->nodes[slot].id, (unsigned long long)p->job);
            }
            used[slot] |= p->vnodes[v].gpu_mask;
        }
    }
    for (uint32_t i = 0; i < s->nnodes; i++) {
        if ((s->live.free[i] | used[i]) != s->nodes[i].full || (s->live.free[i] & used[i]) != 0) {
            return tr_err_set(err, TROUPE_INTERNAL, "node %llu: free mask %#llx, placements use %#llx",
                              (unsigned long long)s->nodes[i].id, (unsigned long long)s->live.free[i],
                              (unsigned long long)used[i]);
        }
    }
    return TROUPE_OK;
}

static int check_buckets(const tr_sched *s, tr_err *err)
{
    const tr_sched_view *v = &s->live;
    for (uint32_t i = 0; i < s->nnodes; i++) {
        unsigned cnt = (unsigned)__builtin_popcountll(v->free[i]);
        bool alive = s->nodes[i].state == TR_SCHED_ALIVE;
        for (unsigned b = 0; b < TR_SCHED_NBUCKETS; b++) {
            bool set = (v->bits[(size_t)b * v->words + i / 64] >> (i % 64)) & 1;
            if (set != (alive && b == cnt) || v->alive[i] != alive) {
                return tr_err_set(err, TROUPE_INTERNAL, "node %llu: bucket %u is %s (free %u, alive %d)",
                                  (unsigned long long)s->nodes[i].id, b, set ? "set" : "clear", cnt, alive);
            }
        }
    }
    return TROUPE_OK;
}

int tr_sched_check_invariants(const tr_sched *s, tr_err *err)
{
    uint64_t *used = calloc(s->nnodes + 1, sizeof(uint64_t));
    int rv;

    if (used == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    rv = check_masks(s, used, err);
    if (rv == TROUPE_OK) {
        rv = check_buckets(s, err);
    }
    if (rv == TROUPE_OK) {
        memset(used, 0, (s->nnodes + 1) * sizeof(uint64_t));
        rv = check_cpus(s, (int64_t *)used, err);
    }
    free(used);
    return rv;
}
