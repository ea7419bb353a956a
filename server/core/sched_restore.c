/* sched_restore.c - put a stored placement back into the scheduler.
 *
 * After a head restart the placements of RUNNING jobs come from SQLite, not
 * from a fresh placement decision: their workers are running on those exact
 * GPUs. This reserves exactly what was stored, refusing (ABORTED) if any of it
 * is already taken, so two jobs can never be booked onto one GPU. It lives
 * beside the head because it is the only caller; it uses the scheduler's
 * internal layout (sched_int.h). */
#include <stdlib.h>
#include <string.h>

#include "sched/sched_int.h"
#include "sched_restore.h"

static size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

static tr_sched_placement *restore_alloc(size_t nworkers, size_t nvnodes, size_t ngroups)
{
    size_t sz = align8(sizeof(tr_sched_placement)), ow = sz;
    sz += align8(nworkers * sizeof(tr_sched_worker));
    size_t ov = sz;
    sz += align8(nvnodes * sizeof(tr_sched_vnode));
    size_t og = sz;
    sz += align8((ngroups + 1) * sizeof(size_t));
    size_t os = sz;
    sz += nvnodes * sizeof(uint32_t);
    char *b = calloc(1, sz);
    tr_sched_placement *p = (tr_sched_placement *)b;

    if (b == NULL) {
        return NULL;
    }
    p->nworkers = nworkers;
    p->nvnodes = nvnodes;
    p->ngroups = ngroups;
    p->workers = (tr_sched_worker *)(b + ow);
    p->vnodes = (tr_sched_vnode *)(b + ov);
    p->group_off = (size_t *)(b + og);
    p->vslot = (uint32_t *)(b + os);
    return p;
}

int tr_sched_restore(tr_sched *s, uint64_t job_id, const tr_sched_job_spec *spec,
                     const tr_sched_worker *workers, size_t nworkers, const tr_sched_vnode *vnodes,
                     size_t nvnodes, tr_err *err)
{
    tr_sched_placement *p;
    size_t v;

    if (tr_sched_find(s, job_id) != NULL) {
        return tr_err_set(err, TROUPE_ALREADY_EXISTS, "job %llu is already placed",
                          (unsigned long long)job_id);
    }
    p = restore_alloc(nworkers, nvnodes, spec->ngroups);
    if (p == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    p->job = job_id;
    for (size_t g = 0; g < spec->ngroups; g++) {
        p->group_off[g + 1] = p->group_off[g] + (size_t)spec->groups[g].workers;
    }
    if (p->group_off[spec->ngroups] != nworkers) {
        size_t want = p->group_off[spec->ngroups];
        free(p);
        return tr_err_set(err, TROUPE_DATA_LOSS, "job %llu: stored placement has %zu workers, spec wants %zu",
                          (unsigned long long)job_id, nworkers, want);
    }
    memcpy(p->workers, workers, nworkers * sizeof(*workers));
    memcpy(p->vnodes, vnodes, nvnodes * sizeof(*vnodes));
    for (size_t i = 0; i < nworkers; i++) { /* CPU-only workers: slots, no vnode */
        const tr_sched_group_spec *g =
            &spec->groups[p->workers[i].group < spec->ngroups ? p->workers[i].group : 0];
        p->workers[i].cpu_milli = g->gpus_per_worker == 0 ? tr_sched_cpu_milli(g) : 0;
        p->workers[i].vnode = g->gpus_per_worker == 0 ? TR_SCHED_NO_VNODE : p->workers[i].vnode;
        p->cpu |= g->gpus_per_worker == 0;
    }
    for (v = 0; v < nvnodes; v++) {
        int64_t slot = tr_sched_slot_of(s, vnodes[v].node_id);
        if (slot < 0 || (s->live.free[slot] & vnodes[v].gpu_mask) != vnodes[v].gpu_mask) {
            tr_err_set(err, TROUPE_ABORTED, "job %llu: GPUs of node %llu are %s", (unsigned long long)job_id,
                       (unsigned long long)vnodes[v].node_id, slot < 0 ? "unknown" : "already taken");
            goto undo;
        }
        p->vslot[v] = (uint32_t)slot;
        tr_sched_view_take(&s->live, (uint32_t)slot, vnodes[v].gpu_mask);
    }
    /* CPU slots are taken as stored, even past the node's count: the workers
     * run there already; new work waits until the slots come back. */
    for (size_t i = 0; i < nworkers; i++) {
        int64_t slot = p->workers[i].cpu_milli != 0 ? tr_sched_slot_of(s, p->workers[i].node_id) : 0;
        if (slot < 0) {
            tr_err_set(err, TROUPE_ABORTED, "job %llu: node %llu of CPU-only worker %zu is unknown",
                       (unsigned long long)job_id, (unsigned long long)p->workers[i].node_id, i);
            goto undo;
        }
    }
    if (tr_sched_placement_link(s, p) != TROUPE_OK) {
        tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        goto undo;
    }
    for (size_t i = 0; i < nworkers; i++) {
        if (p->workers[i].cpu_milli != 0) {
            s->live.cpu_free[tr_sched_slot_of(s, p->workers[i].node_id)] -= p->workers[i].cpu_milli;
        }
    }
    return TROUPE_OK;
undo:
    while (v-- > 0) {
        tr_sched_view_give(&s->live, p->vslot[v], vnodes[v].gpu_mask);
    }
    free(p);
    return err ? err->code : TROUPE_ABORTED;
}

/* Relocation (an elastic group's lost rank grown back on another node): the
 * node is chosen by the scheduler's normal placement of that one worker
 * under a scratch job id, which is released at once and its CPU share moved
 * into the job's own placement, so the books stay one placement per job. */
#define RELOCATE_SCRATCH_JOB UINT64_MAX

int tr_sched_relocate(tr_sched *s, uint64_t job_id, const tr_sched_job_spec *spec, size_t idx,
                      uint64_t *node_id, tr_err *err)
{
    tr_sched_placement *p = tr_sched_find(s, job_id), *one = NULL;
    tr_sched_group_spec g;
    tr_sched_job_spec js;
    tr_sched_worker *w;
    int64_t from, to;
    int rv;

    *node_id = 0;
    if (p == NULL || idx >= p->nworkers) {
        return tr_err_set(err, TROUPE_NOT_FOUND, "job %llu has no placed worker %zu", (unsigned long long)job_id,
                          idx);
    }
    w = &p->workers[idx];
    if (w->group >= spec->ngroups || spec->groups[w->group].gpus_per_worker != 0) {
        return tr_err_set(err, TROUPE_UNIMPLEMENTED,
                          "only a CPU-only worker is placed on another node (its GPUs belong to the job's "
                          "virtual nodes)");
    }
    g = spec->groups[w->group];
    g.workers = 1;
    js = (tr_sched_job_spec){spec->name, NULL, 0, spec->selector, spec->nselector, &g, 1};
    if ((rv = tr_sched_place(s, RELOCATE_SCRATCH_JOB, &js, &one, err)) != TROUPE_OK) {
        return rv;
    }
    *node_id = one->workers[0].node_id;
    tr_sched_release(s, one);
    from = tr_sched_slot_of(s, w->node_id);
    to = tr_sched_slot_of(s, *node_id);
    if (to < 0) {
        return tr_err_set(err, TROUPE_INTERNAL, "node %llu vanished", (unsigned long long)*node_id);
    }
    if (from >= 0) {
        s->live.cpu_free[from] += w->cpu_milli;
    }
    s->live.cpu_free[to] -= w->cpu_milli;
    w->node_id = *node_id;
    return TROUPE_OK;
}
