/* sched_place.c - gang placement of one job onto a view.
 *
 * How a job is placed (the narrative; the rules are listed in sched.h):
 *
 * 1. Vnodes. The job's virtual nodes are taken largest first, because a
 *    16-GPU bundle has few homes and a 1-GPU bundle has many. Each goes whole
 *    onto one ALIVE node that matches the selector, chosen through the view's
 *    buckets (nodes grouped by free-GPU count). Best fit (fewest free GPUs
 *    that still fit) keeps big nodes free for big bundles. What "fit" prefers
 *    depends on the groups: a job with a SPREAD or STRICT_SPREAD group prefers
 *    nodes it does not use yet; otherwise the job packs (nodes it already uses,
 *    then one node that can take all remaining vnodes, then the emptiest node).
 *    A vnode's GPUs are the lowest free indices on its node.
 *
 * 2. Groups. With the vnodes fixed, each group's workers are cut out of the
 *    vnodes' GPUs (a worker never straddles two vnodes, so never two nodes).
 *    The job's distinct real nodes are what the strategies act on: STRICT_PACK
 *    takes the best-fitting node that holds the whole group, PACK does the same
 *    or else fills the roomiest nodes first, STRICT_SPREAD takes one worker on
 *    each of k distinct nodes (least room first, so roomy nodes stay for the
 *    next group), SPREAD deals workers round-robin over the roomiest nodes.
 *
 * 2b. CPU-only groups. They hold no GPU, so no vnode: their workers go on
 *    any matching node with free CPU slots, after the GPU groups (see
 *    place_cpu_group). A job of CPU groups only has no vnodes at all.
 *
 * 3. Ranks. Workers are sorted by (order their node was chosen, lowest GPU),
 *    then numbered: ranks are contiguous per node, LOCAL_RANK follows GPU
 *    order, NODE_RANK is the node's position among the group's nodes.
 *
 * Any failure gives back every GPU the attempt took from the view, so a job is
 * placed whole or not at all. The caller decides whether a failure means
 * "wait" (live view) or "never" (empty view); the message is worded for it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"

typedef struct pctx {
    tr_sched *s;
    tr_sched_view *v;
    tr_sched_viewkind kind;
    const tr_sched_job_spec *spec;
    tr_sched_placement *p;
    uint32_t epoch;
    uint32_t nvc;       /* distinct real nodes used so far */
    uint32_t *vc_slot;  /* [V] slot of each distinct node */
    uint32_t *vc_first; /* [V + 1] CSR offsets into vc_list */
    uint32_t *vc_list;  /* [V] vnodes grouped by node */
    uint32_t *order;    /* [V] vnodes, largest first */
    uint32_t *capv;     /* [V] workers each node can still take */
    uint32_t *freev;    /* [V] GPUs each node still has in the job's vnodes */
    uint32_t *cand;     /* [V] candidate nodes */
    uint32_t *vc_order; /* [V] when the node was first chosen for the group */
    uint32_t *gorder;   /* [G] groups in placement order */
    uint64_t *rem;      /* [V] GPUs of each vnode not yet given to a worker */
    tr_sched_wtmp *wt;  /* [W] one group's workers */
    uint32_t nwt, norder;
    bool spread;
    bool oom;
} pctx;

static size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

/* One allocation per placement: the struct, then its arrays. */
static tr_sched_placement *placement_alloc(const tr_sched_job_spec *spec, size_t nworkers)
{
    size_t V = spec->nvnodes, G = spec->ngroups;
    size_t sz = align8(sizeof(tr_sched_placement)), ow = sz;
    sz += align8(nworkers * sizeof(tr_sched_worker));
    size_t ov = sz;
    sz += align8(V * sizeof(tr_sched_vnode));
    size_t og = sz;
    sz += align8((G + 1) * sizeof(size_t));
    size_t os = sz;
    sz += V * sizeof(uint32_t);

    char *b = malloc(sz);
    if (b == NULL) {
        return NULL;
    }
    tr_sched_placement *p = (tr_sched_placement *)b;
    memset(p, 0, sizeof(*p));
    p->nworkers = nworkers;
    p->nvnodes = V;
    p->ngroups = G;
    p->workers = (tr_sched_worker *)(b + ow);
    p->vnodes = (tr_sched_vnode *)(b + ov);
    p->group_off = (size_t *)(b + og);
    p->vslot = (uint32_t *)(b + os);
    p->group_off[0] = 0;
    for (size_t g = 0; g < G; g++) {
        const tr_sched_group_spec *gs = &spec->groups[g];
        p->group_off[g + 1] = p->group_off[g] + (size_t)gs->workers;
        p->cpu |= gs->gpus_per_worker == 0;
    }
    return p;
}

/* Carve the per-attempt arrays out of the scheduler's reusable scratch. */
static bool scratch_setup(pctx *c, size_t wmax)
{
    size_t V = c->spec->nvnodes, G = c->spec->ngroups;
    size_t need = V * sizeof(uint64_t) + wmax * sizeof(tr_sched_wtmp) + (9 * V + 1 + G) * sizeof(uint32_t);
    tr_sched *s = c->s;

    if (need > s->scratch_len) {
        void *np = realloc(s->scratch, need);
        if (np == NULL) {
            return false;
        }
        s->scratch = np;
        s->scratch_len = need;
    }
    char *b = s->scratch;
    c->rem = (uint64_t *)b;
    c->wt = (tr_sched_wtmp *)(b + V * sizeof(uint64_t));
    uint32_t *u = (uint32_t *)(b + V * sizeof(uint64_t) + wmax * sizeof(tr_sched_wtmp));
    uint32_t **arrs[] = {&c->vc_slot, &c->vc_list, &c->order, &c->capv, &c->freev, &c->cand, &c->vc_order};
    for (size_t i = 0; i < sizeof(arrs) / sizeof(arrs[0]); i++) {
        *arrs[i] = u;
        u += V;
    }
    c->vc_first = u;
    u += V + 1;
    c->gorder = u;
    return true;
}

static void next_epoch(tr_sched *s)
{
    /* Stamps compare equal to the epoch; on wrap-around clear them so that a
     * stale stamp can never look current. */
    if (++s->epoch == 0) {
        memset(s->sel_stamp, 0, s->cap * sizeof(uint32_t));
        memset(s->use_stamp, 0, s->cap * sizeof(uint32_t));
        s->epoch = 1;
    }
}

static bool sel_ok(pctx *c, uint32_t slot)
{
    tr_sched *s = c->s;
    if (c->spec->nselector == 0) {
        return true;
    }
    if (s->sel_stamp[slot] != c->epoch) {
        s->sel_stamp[slot] = c->epoch;
        s->sel_ok[slot] = tr_sched_node_matches(&s->nodes[slot], c->spec->selector, c->spec->nselector);
    }
    return s->sel_ok[slot];
}

static bool filter_any(void *ctx, uint32_t slot)
{
    return sel_ok(ctx, slot);
}

static bool filter_unused(void *ctx, uint32_t slot)
{
    pctx *c = ctx;
    return c->s->use_stamp[slot] != c->epoch && sel_ok(c, slot);
}

/* Best fit among the nodes the job already uses (pack mode's first choice). */
static int64_t best_used(pctx *c, unsigned need)
{
    int64_t best = -1;
    unsigned best_free = 0;
    for (uint32_t i = 0; i < c->nvc; i++) {
        uint32_t slot = c->vc_slot[i];
        unsigned f = (unsigned)__builtin_popcountll(c->v->free[slot]);
        if (c->v->alive[slot] && f >= need &&
            (best < 0 || f < best_free || (f == best_free && slot < best))) {
            best = slot;
            best_free = f;
        }
    }
    return best;
}

static int64_t pick_node(pctx *c, unsigned need, uint64_t remaining)
{
    const unsigned top = TR_SCHED_MAX_NODE_GPUS;
    int64_t slot;

    if (c->spread) {
        slot = tr_sched_view_find(c->v, need, top, filter_unused, c);
        return slot >= 0 ? slot : tr_sched_view_find(c->v, need, top, filter_any, c);
    }
    slot = best_used(c, need);
    if (slot < 0 && remaining > need && remaining <= top) {
        slot = tr_sched_view_find(c->v, (unsigned)remaining, top, filter_any, c);
    }
    if (slot < 0) {
        slot = remaining > need ? tr_sched_view_find(c->v, top, need, filter_any, c)
                                : tr_sched_view_find(c->v, need, top, filter_any, c);
    }
    return slot;
}

static uint64_t low_bits(uint64_t mask, unsigned n)
{
    uint64_t out = 0;
    for (unsigned i = 0; i < n; i++) {
        uint64_t bit = mask & (~mask + 1);
        out |= bit;
        mask &= mask - 1;
    }
    return out;
}

static void mask_to_list(uint64_t mask, uint8_t *list, uint32_t *n)
{
    *n = 0;
    while (mask != 0) {
        list[(*n)++] = (uint8_t)__builtin_ctzll(mask);
        mask &= mask - 1;
    }
}

static void take_vnode(pctx *c, uint32_t vn, uint32_t slot, unsigned need)
{
    tr_sched *s = c->s;
    uint64_t mask = low_bits(c->v->free[slot], need);
    tr_sched_vnode *out = &c->p->vnodes[vn];

    tr_sched_view_take(c->v, slot, mask);
    c->p->vslot[vn] = slot;
    c->rem[vn] = mask;
    out->node_id = s->nodes[slot].id;
    out->gpu_mask = mask;
    mask_to_list(mask, out->gpus, &out->ngpus);
    if (s->use_stamp[slot] != c->epoch) {
        s->use_stamp[slot] = c->epoch;
        s->vc_of[slot] = c->nvc;
        c->vc_slot[c->nvc++] = slot;
    }
}

/* Sort vnodes largest first, ties by index (insertion sort into c->order:
 * vnode counts are small and the list is usually presorted). */
static void order_vnodes(pctx *c)
{
    const int *sz = c->spec->vnodes;
    for (uint32_t i = 0; i < c->spec->nvnodes; i++) {
        uint32_t j = i;
        while (j > 0 && sz[c->order[j - 1]] < sz[i]) {
            c->order[j] = c->order[j - 1];
            j--;
        }
        c->order[j] = i;
    }
}

static void vnode_fail(pctx *c, uint32_t vn, unsigned need, tr_err *err);

static int place_vnodes(pctx *c, tr_err *err)
{
    uint64_t remaining = 0;
    for (size_t i = 0; i < c->spec->nvnodes; i++) {
        remaining += (uint64_t)c->spec->vnodes[i];
    }
    order_vnodes(c);
    for (uint32_t k = 0; k < c->spec->nvnodes; k++) {
        uint32_t vn = c->order[k];
        unsigned need = (unsigned)c->spec->vnodes[vn];
        int64_t slot = pick_node(c, need, remaining);
        if (slot < 0) {
            for (uint32_t j = 0; j < k; j++) {
                tr_sched_view_give(c->v, c->p->vslot[c->order[j]], c->p->vnodes[c->order[j]].gpu_mask);
            }
            vnode_fail(c, vn, need, err);
            return TROUPE_RESOURCE_EXHAUSTED;
        }
        take_vnode(c, vn, (uint32_t)slot, need);
        remaining -= need;
    }
    return TROUPE_OK;
}

/* Count matching alive nodes with at least `need` GPUs in the view, and the
 * most free on any matching node. Failure path only, so a plain scan. */
static void view_room(pctx *c, unsigned need, unsigned *most, unsigned *count)
{
    *most = 0;
    *count = 0;
    for (uint32_t i = 0; i < c->v->n; i++) {
        unsigned f = (unsigned)__builtin_popcountll(c->v->free[i]);
        if (!c->v->alive[i] || !sel_ok(c, i)) {
            continue;
        }
        *most = f > *most ? f : *most;
        *count += f >= need;
    }
}

static void vnode_fail(pctx *c, uint32_t vn, unsigned need, tr_err *err)
{
    char sel[256];
    unsigned most, count;

    tr_sched_format_selector(c->spec, sel, sizeof(sel));
    view_room(c, need, &most, &count);
    if (c->kind == TR_SCHED_VIEW_EMPTY) {
        tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                   "virtual node %u needs %u GPUs%s on one node; %u alive node(s) have that many and the "
                   "job's larger virtual nodes take them",
                   vn, need, sel, count);
    } else if (count > 0) {
        tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED,
                   "waiting for %u free GPUs%s on one node (virtual node %u); the %u node(s) with that many "
                   "free are needed by the job's larger virtual nodes",
                   need, sel, vn, count);
    } else {
        tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED,
                   "waiting for %u free GPUs%s on one node (virtual node %u); most free on a node is %u",
                   need, sel, vn, most);
    }
}

/* ---- groups ------------------------------------------------------------ */

static void build_vc(pctx *c)
{
    uint32_t V = (uint32_t)c->spec->nvnodes;
    memset(c->vc_first, 0, (c->nvc + 1) * sizeof(uint32_t));
    for (uint32_t v = 0; v < V; v++) {
        c->vc_first[c->s->vc_of[c->p->vslot[v]] + 1]++;
    }
    for (uint32_t i = 0; i < c->nvc; i++) {
        c->vc_first[i + 1] += c->vc_first[i];
    }
    /* Fill using capv as a cursor, keeping vnode index order within a node. */
    memcpy(c->capv, c->vc_first, c->nvc * sizeof(uint32_t));
    for (uint32_t v = 0; v < V; v++) {
        c->vc_list[c->capv[c->s->vc_of[c->p->vslot[v]]]++] = v;
    }
}

static int strictness(int strategy)
{
    return strategy == TR_SCHED_STRICT_PACK || strategy == TR_SCHED_STRICT_SPREAD;
}

/* true if group a should be placed before group b */
static bool group_before(const tr_sched_group_spec *a, const tr_sched_group_spec *b)
{
    if (a->gpus_per_worker != b->gpus_per_worker) {
        return a->gpus_per_worker > b->gpus_per_worker;
    }
    if (strictness(a->strategy) != strictness(b->strategy)) {
        return strictness(a->strategy) > strictness(b->strategy);
    }
    return (int64_t)a->workers > (int64_t)b->workers;
}

static void order_groups(pctx *c)
{
    const tr_sched_group_spec *gs = c->spec->groups;
    for (uint32_t i = 0; i < c->spec->ngroups; i++) {
        uint32_t j = i;
        while (j > 0 && group_before(&gs[i], &gs[c->gorder[j - 1]])) {
            c->gorder[j] = c->gorder[j - 1];
            j--;
        }
        c->gorder[j] = i;
    }
}

/* Room per node for workers of `gw` GPUs; returns the total. */
static uint64_t compute_room(pctx *c, unsigned gw)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < c->nvc; i++) {
        uint32_t cap = 0, fr = 0;
        for (uint32_t k = c->vc_first[i]; k < c->vc_first[i + 1]; k++) {
            unsigned f = (unsigned)__builtin_popcountll(c->rem[c->vc_list[k]]);
            cap += f / gw;
            fr += f;
        }
        c->capv[i] = cap;
        c->freev[i] = fr;
        c->vc_order[i] = UINT32_MAX;
        total += cap;
    }
    return total;
}

/* Give `count` workers of `gw` GPUs from node i's vnodes, lowest vnode first. */
static void take_workers(pctx *c, uint32_t i, uint32_t count, unsigned gw)
{
    if (c->vc_order[i] == UINT32_MAX) {
        c->vc_order[i] = c->norder++;
    }
    for (uint32_t k = c->vc_first[i]; k < c->vc_first[i + 1] && count > 0; k++) {
        uint32_t vn = c->vc_list[k];
        while (count > 0 && (unsigned)__builtin_popcountll(c->rem[vn]) >= gw) {
            uint64_t m = low_bits(c->rem[vn], gw);
            c->rem[vn] &= ~m;
            c->wt[c->nwt] = (tr_sched_wtmp){.order = c->vc_order[i], .vnode = vn, .seq = c->nwt, .mask = m};
            c->nwt++;
            c->capv[i]--;
            c->freev[i] -= gw;
            count--;
        }
    }
}

/* The node that holds all k workers with the least GPUs left over, or -1. */
static int64_t best_whole(pctx *c, uint32_t k)
{
    int64_t best = -1;
    for (uint32_t i = 0; i < c->nvc; i++) {
        if (c->capv[i] >= k && (best < 0 || c->freev[i] < c->freev[best])) {
            best = i;
        }
    }
    return best;
}

/* The node with the most room for workers, ties to the emptiest, then the first. */
static int64_t roomiest(pctx *c)
{
    int64_t best = -1;
    for (uint32_t i = 0; i < c->nvc; i++) {
        if (c->capv[i] > 0 && (best < 0 || c->capv[i] > c->capv[best] ||
                               (c->capv[i] == c->capv[best] && c->freev[i] > c->freev[best]))) {
            best = i;
        }
    }
    return best;
}

static void pack_greedy(pctx *c, uint32_t k, unsigned gw)
{
    while (k > 0) {
        int64_t i = roomiest(c);
        uint32_t n = c->capv[i] < k ? c->capv[i] : k;
        take_workers(c, (uint32_t)i, n, gw);
        k -= n;
    }
}

/* Candidates with room, by (room, GPUs left, index) ascending or descending. */
static uint32_t sort_candidates(pctx *c, bool ascending)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < c->nvc; i++) {
        if (c->capv[i] == 0) {
            continue;
        }
        uint32_t j = n++;
        while (j > 0) {
            uint32_t o = c->cand[j - 1];
            int64_t d = (int64_t)c->capv[i] - c->capv[o];
            if (d == 0) {
                d = (int64_t)c->freev[i] - c->freev[o];
            }
            if (ascending ? d >= 0 : d <= 0) {
                break;
            }
            c->cand[j] = o;
            j--;
        }
        c->cand[j] = i;
    }
    return n;
}

static void spread_rounds(pctx *c, uint32_t k, unsigned gw)
{
    uint32_t n = sort_candidates(c, false);
    while (k > 0) {
        for (uint32_t j = 0; j < n && k > 0; j++) {
            if (c->capv[c->cand[j]] > 0) {
                take_workers(c, c->cand[j], 1, gw);
                k--;
            }
        }
    }
}

static void group_fail(pctx *c, tr_err *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void group_fail(pctx *c, tr_err *err, const char *fmt, ...)
{
    char detail[TR_ERR_MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    if (c->kind == TR_SCHED_VIEW_EMPTY) {
        tr_err_set(err, TROUPE_FAILED_PRECONDITION, "%s", detail);
    } else {
        tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "waiting for free GPUs arranged differently: %s", detail);
    }
}

/* PACK and STRICT_PACK: one node if any holds the group; else PACK fills the
 * roomiest nodes first and STRICT_PACK fails. */
static int pack_workers(pctx *c, const tr_sched_group_spec *g, tr_err *err)
{
    uint32_t k = (uint32_t)g->workers;
    unsigned gw = (unsigned)g->gpus_per_worker;
    int64_t i = best_whole(c, k);

    if (i >= 0) {
        take_workers(c, (uint32_t)i, k, gw);
    } else if (g->strategy == TR_SCHED_PACK) {
        pack_greedy(c, k, gw);
    } else {
        i = roomiest(c);
        group_fail(c, err,
                   "STRICT_PACK group %s needs 1 node with room for %u workers x %u GPUs; its virtual "
                   "nodes give at most %u on one node",
                   g->name, k, gw, i >= 0 ? c->capv[i] : 0);
        return TROUPE_RESOURCE_EXHAUSTED;
    }
    return TROUPE_OK;
}

/* Choose the worker slots of one group into c->wt according to its strategy. */
static int choose_workers(pctx *c, const tr_sched_group_spec *g, tr_err *err)
{
    uint32_t k = (uint32_t)g->workers;
    unsigned gw = (unsigned)g->gpus_per_worker;
    uint64_t total = compute_room(c, gw);

    c->nwt = 0;
    c->norder = 0;
    if (total < k) {
        group_fail(
            c, err,
            "group %s needs %u workers x %u GPUs; the job's virtual nodes have room for %llu such workers",
            g->name, k, gw, (unsigned long long)total);
        return TROUPE_RESOURCE_EXHAUSTED;
    }
    switch (g->strategy) {
    case TR_SCHED_STRICT_PACK:
    case TR_SCHED_PACK: return pack_workers(c, g, err);
    case TR_SCHED_STRICT_SPREAD: {
        uint32_t n = sort_candidates(c, true);
        if (n < k) {
            group_fail(c, err,
                       "STRICT_SPREAD group %s needs %u distinct nodes; its virtual nodes span %u with room "
                       "for a %u-GPU worker",
                       g->name, k, n, gw);
            return TROUPE_RESOURCE_EXHAUSTED;
        }
        for (uint32_t j = 0; j < k; j++) {
            take_workers(c, c->cand[j], 1, gw);
        }
        break;
    }
    default: spread_rounds(c, k, gw); break;
    }
    return TROUPE_OK;
}

static int wt_cmp(const void *a, const void *b)
{
    const tr_sched_wtmp *x = a, *y = b;
    if (x->order != y->order) {
        return x->order < y->order ? -1 : 1;
    }
    if (x->mask == 0 || y->mask == 0) { /* CPU-only workers: in the order chosen */
        return (x->seq > y->seq) - (x->seq < y->seq);
    }
    int fx = __builtin_ctzll(x->mask), fy = __builtin_ctzll(y->mask);
    return (fx > fy) - (fx < fy);
}

/* Number the chosen workers (see step 3 above) into the placement. */
static void assign_ranks(pctx *c, uint32_t gi)
{
    tr_sched_worker *w = c->p->workers + c->p->group_off[gi];
    uint32_t cpu = c->spec->groups[gi].gpus_per_worker == 0 ? tr_sched_cpu_milli(&c->spec->groups[gi]) : 0;
    uint32_t node_rank = 0, local = 0, start = 0;

    if (c->nwt > 1) {
        qsort(c->wt, c->nwt, sizeof(*c->wt), wt_cmp);
    }
    for (uint32_t r = 0; r < c->nwt; r++) {
        const tr_sched_wtmp *t = &c->wt[r];
        if (r > 0 && t->order != c->wt[r - 1].order) {
            for (uint32_t q = start; q < r; q++) {
                w[q].local_world_size = r - start;
            }
            node_rank++;
            local = 0;
            start = r;
        }
        w[r].group = gi;
        w[r].rank = r;
        w[r].vnode = t->vnode;
        w[r].node_id =
            t->vnode == TR_SCHED_NO_VNODE ? c->s->nodes[t->slot].id : c->p->vnodes[t->vnode].node_id;
        w[r].cpu_milli = cpu;
        w[r].node_rank = node_rank;
        w[r].local_rank = local++;
        w[r].gpu_mask = t->mask;
        mask_to_list(t->mask, w[r].gpus, &w[r].ngpus);
    }
    for (uint32_t q = start; q < c->nwt; q++) {
        w[q].local_world_size = c->nwt - start;
    }
    for (uint32_t r = 0; r < c->nwt; r++) {
        w[r].nnodes = node_rank + 1;
    }
}

/* ---- CPU-only groups ----------------------------------------------------
 *
 * A CPU-only worker takes CPU slots (thousandths) of one real node and no
 * GPU. Candidates are the alive nodes matching the selector with room for at
 * least one worker; the whole choice is checked before anything is taken, so
 * a failing group leaves the view as it found it. PACK prefers nodes the job
 * already holds GPUs on (its workers then share a host with the GPU groups),
 * then best fit; the spreading strategies take the roomiest nodes first. */

typedef struct cpu_cand {
    uint32_t slot;
    uint32_t room;  /* workers it can still take */
    uint32_t order; /* UINT32_MAX until chosen for the group */
    bool used;      /* the job holds GPUs there */
    int64_t free;   /* CPU thousandths free */
} cpu_cand;

static int cand_roomiest(const void *a, const void *b)
{
    const cpu_cand *x = a, *y = b;
    if (x->room != y->room) {
        return x->room > y->room ? -1 : 1;
    }
    if (x->free != y->free) {
        return x->free > y->free ? -1 : 1;
    }
    return (x->slot > y->slot) - (x->slot < y->slot);
}

static void cpu_take(pctx *c, cpu_cand *cd, uint32_t count, uint32_t need)
{
    if (cd->order == UINT32_MAX) {
        cd->order = c->norder++;
    }
    for (; count > 0; count--) {
        c->v->cpu_free[cd->slot] -= need;
        cd->room--;
        c->wt[c->nwt] =
            (tr_sched_wtmp){.order = cd->order, .vnode = TR_SCHED_NO_VNODE, .slot = cd->slot, .seq = c->nwt};
        c->nwt++;
    }
}

/* The node that holds all k: one the job uses first, then the least free. */
static int64_t cpu_whole(const cpu_cand *cd, uint32_t n, uint32_t k)
{
    int64_t best = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (cd[i].room < k) {
            continue;
        }
        if (best < 0 || (cd[i].used && !cd[best].used) ||
            (cd[i].used == cd[best].used && cd[i].free < cd[best].free)) {
            best = i;
        }
    }
    return best;
}

static uint32_t cpu_candidates(pctx *c, uint32_t need, uint32_t k, cpu_cand *cd, uint64_t *total,
                               uint32_t *most)
{
    uint32_t n = 0;
    *total = 0;
    *most = 0;
    for (uint32_t slot = 0; slot < c->v->n; slot++) {
        int64_t f = c->v->cpu_free[slot];
        if (!c->v->alive[slot] || f < (int64_t)need || !sel_ok(c, slot)) {
            continue;
        }
        uint64_t room = (uint64_t)f / need;
        cd[n] = (cpu_cand){.slot = slot,
                           .room = room > k ? k : (uint32_t)room,
                           .order = UINT32_MAX,
                           .used = c->s->use_stamp[slot] == c->epoch,
                           .free = f};
        *total += cd[n].room;
        *most = cd[n].room > *most ? cd[n].room : *most;
        n++;
    }
    return n;
}

static void cpu_fail(pctx *c, const tr_sched_group_spec *g, uint32_t need, tr_err *err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void cpu_fail(pctx *c, const tr_sched_group_spec *g, uint32_t need, tr_err *err, const char *fmt, ...)
{
    char detail[TR_ERR_MSG_MAX], sel[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    tr_sched_format_selector(c->spec, sel, sizeof(sel));
    if (c->kind == TR_SCHED_VIEW_EMPTY) {
        tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                   "CPU-only group %s needs %d workers x %g CPU on nodes%s with CPU slots; %s (troupe-node "
                   "--cpus sets a node's slots)",
                   g->name, g->workers, need / 1000.0, sel, detail);
    } else {
        tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED,
                   "waiting for free CPU slots: CPU-only group %s needs %d workers x %g CPU%s; %s", g->name,
                   g->workers, need / 1000.0, sel, detail);
    }
}

static int place_cpu_group(pctx *c, const tr_sched_group_spec *g, tr_err *err)
{
    uint32_t need = tr_sched_cpu_milli(g), k = (uint32_t)g->workers, most, n;
    uint64_t total;
    const char *word = c->kind == TR_SCHED_VIEW_EMPTY ? "alive nodes have" : "free now:";
    cpu_cand *cd = malloc(((size_t)c->v->n + 1) * sizeof(*cd));
    int rv = TROUPE_RESOURCE_EXHAUSTED;

    c->nwt = 0;
    c->norder = 0;
    if (cd == NULL) {
        c->oom = true;
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "scheduler: out of memory");
    }
    n = cpu_candidates(c, need, k, cd, &total, &most);
    int64_t whole =
        g->strategy == TR_SCHED_PACK || g->strategy == TR_SCHED_STRICT_PACK ? cpu_whole(cd, n, k) : -1;
    if (total < k) {
        cpu_fail(c, g, need, err, "%s room for %llu such workers", word, (unsigned long long)total);
    } else if (g->strategy == TR_SCHED_STRICT_PACK && whole < 0) {
        cpu_fail(c, g, need, err, "STRICT_PACK needs them on 1 node; %s room for at most %u on one node",
                 word, most);
    } else if (g->strategy == TR_SCHED_STRICT_SPREAD && n < k) {
        cpu_fail(c, g, need, err, "STRICT_SPREAD needs %u distinct nodes; %s %u with room", k, word, n);
    } else {
        rv = TROUPE_OK;
    }
    if (rv == TROUPE_OK && whole >= 0) {
        cpu_take(c, &cd[whole], k, need);
    } else if (rv == TROUPE_OK) {
        qsort(cd, n, sizeof(*cd), cand_roomiest);
        bool one_each = g->strategy != TR_SCHED_PACK;
        for (uint32_t left = k; left > 0;) {
            for (uint32_t i = 0; i < n && left > 0; i++) {
                uint32_t take = one_each ? 1 : left;
                take = take > cd[i].room ? cd[i].room : take;
                if (take > 0) {
                    cpu_take(c, &cd[i], take, need);
                    left -= take;
                }
            }
        }
    }
    free(cd);
    return rv;
}

/* Give back the CPU slots of the groups placed so far (a later group failed). */
static void cpu_undo(pctx *c, uint32_t placed)
{
    for (uint32_t k = 0; k < placed; k++) {
        size_t n;
        const tr_sched_worker *w = tr_sched_placement_group(c->p, c->gorder[k], &n);
        for (size_t i = 0; i < n; i++) {
            if (w[i].cpu_milli != 0) {
                c->v->cpu_free[tr_sched_slot_of(c->s, w[i].node_id)] += w[i].cpu_milli;
            }
        }
    }
}

static int place_groups(pctx *c, tr_err *err)
{
    build_vc(c);
    for (uint32_t v = 0; v < c->spec->nvnodes; v++) {
        c->rem[v] = c->p->vnodes[v].gpu_mask;
    }
    order_groups(c);
    for (uint32_t k = 0; k < c->spec->ngroups; k++) {
        uint32_t gi = c->gorder[k];
        const tr_sched_group_spec *g = &c->spec->groups[gi];
        int rv = g->gpus_per_worker == 0 ? place_cpu_group(c, g, err) : choose_workers(c, g, err);
        if (rv != TROUPE_OK) {
            cpu_undo(c, k);
            return rv;
        }
        assign_ranks(c, gi);
    }
    return TROUPE_OK;
}

int tr_sched_place_on(tr_sched *s, tr_sched_view *v, tr_sched_viewkind kind, const tr_sched_job_spec *spec,
                      tr_sched_placement **out, bool *oom, tr_err *err)
{
    pctx c = {.s = s, .v = v, .kind = kind, .spec = spec};
    size_t wmax = 0, wall = 0;
    int rv;

    *out = NULL;
    *oom = false;
    for (size_t g = 0; g < spec->ngroups; g++) {
        size_t w = (size_t)spec->groups[g].workers;
        wmax = w > wmax ? w : wmax;
        wall += w;
        /* CPU-only groups do not steer where the vnodes go. */
        c.spread |=
            spec->groups[g].gpus_per_worker > 0 && (spec->groups[g].strategy == TR_SCHED_SPREAD ||
                                                    spec->groups[g].strategy == TR_SCHED_STRICT_SPREAD);
    }
    c.p = placement_alloc(spec, wall);
    if (c.p == NULL || !scratch_setup(&c, wmax)) {
        *oom = true;
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "scheduler: out of memory");
        goto out;
    }
    next_epoch(s);
    c.epoch = s->epoch;
    rv = place_vnodes(&c, err);
    if (rv != TROUPE_OK) {
        goto out;
    }
    rv = place_groups(&c, err);
    if (rv != TROUPE_OK) {
        for (size_t i = 0; i < spec->nvnodes; i++) {
            tr_sched_view_give(v, c.p->vslot[i], c.p->vnodes[i].gpu_mask);
        }
        *oom = c.oom;
    }
out:
    if (rv == TROUPE_OK) {
        *out = c.p;
    } else {
        tr_sched_placement_free(c.p);
    }
    return rv;
}
