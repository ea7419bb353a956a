/* sched_view.c - free-GPU views: per-node masks plus bucket bitsets.
 *
 * Best fit over 1,000+ nodes must not be a linear scan per bundle: the buckets
 * turn "fewest free GPUs >= N, lowest slot first" into a walk over at most 65
 * bitsets, which mostly stops in the first non-empty word. */
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"

static uint64_t *bucket(const tr_sched_view *v, unsigned b)
{
    return v->bits + (size_t)b * v->words;
}

static void bit_set(tr_sched_view *v, unsigned b, uint32_t slot)
{
    bucket(v, b)[slot / 64] |= UINT64_C(1) << (slot % 64);
}

static void bit_clear(tr_sched_view *v, unsigned b, uint32_t slot)
{
    bucket(v, b)[slot / 64] &= ~(UINT64_C(1) << (slot % 64));
}

int tr_sched_view_reserve(tr_sched_view *v, uint32_t cap)
{
    uint32_t words = (cap + 63) / 64;
    uint64_t *bits = NULL;
    int rv = TROUPE_RESOURCE_EXHAUSTED;

    if (cap <= v->cap) {
        return TROUPE_OK;
    }
    uint64_t *nfree = realloc(v->free, (size_t)cap * sizeof(*nfree));
    if (nfree == NULL) {
        goto out;
    }
    v->free = nfree;
    int64_t *ncpu = realloc(v->cpu_free, (size_t)cap * sizeof(*ncpu));
    if (ncpu == NULL) {
        goto out;
    }
    v->cpu_free = ncpu;
    uint8_t *nalive = realloc(v->alive, cap);
    if (nalive == NULL) {
        goto out;
    }
    v->alive = nalive;
    bits = calloc((size_t)TR_SCHED_NBUCKETS * words, sizeof(*bits));
    if (bits == NULL) {
        goto out;
    }
    /* Re-lay the bitsets: the row width changes with the capacity. */
    for (unsigned b = 0; b < TR_SCHED_NBUCKETS && v->bits != NULL; b++) {
        memcpy(bits + (size_t)b * words, bucket(v, b), v->words * sizeof(*bits));
    }
    free(v->bits);
    v->bits = bits;
    v->words = words;
    v->cap = cap;
    rv = TROUPE_OK;
out:
    return rv;
}

void tr_sched_view_fini(tr_sched_view *v)
{
    free(v->free);
    free(v->cpu_free);
    free(v->bits);
    free(v->alive);
    memset(v, 0, sizeof(*v));
}

int tr_sched_view_copy(tr_sched_view *dst, const tr_sched_view *src)
{
    int rv = tr_sched_view_reserve(dst, src->cap);
    if (rv != TROUPE_OK) {
        return rv;
    }
    /* Same capacity, hence the same row width, so one memcpy per array. */
    if (dst->words != src->words) {
        memset(dst->bits, 0, (size_t)TR_SCHED_NBUCKETS * dst->words * sizeof(uint64_t));
        for (unsigned b = 0; b < TR_SCHED_NBUCKETS; b++) {
            memcpy(bucket(dst, b), bucket(src, b), src->words * sizeof(uint64_t));
        }
    } else {
        memcpy(dst->bits, src->bits, (size_t)TR_SCHED_NBUCKETS * src->words * sizeof(uint64_t));
    }
    memcpy(dst->free, src->free, (size_t)src->n * sizeof(uint64_t));
    memcpy(dst->cpu_free, src->cpu_free, (size_t)src->n * sizeof(int64_t));
    memcpy(dst->alive, src->alive, src->n);
    dst->n = src->n;
    return TROUPE_OK;
}

void tr_sched_view_add(tr_sched_view *v, uint32_t slot, uint64_t free_mask, int64_t cpu_milli, bool alive)
{
    v->free[slot] = free_mask;
    v->cpu_free[slot] = cpu_milli;
    v->alive[slot] = 0;
    if (slot >= v->n) {
        v->n = slot + 1;
    }
    tr_sched_view_set_alive(v, slot, alive);
}

void tr_sched_view_set_alive(tr_sched_view *v, uint32_t slot, bool alive)
{
    unsigned b = (unsigned)__builtin_popcountll(v->free[slot]);
    if (alive && !v->alive[slot]) {
        bit_set(v, b, slot);
    } else if (!alive && v->alive[slot]) {
        bit_clear(v, b, slot);
    }
    v->alive[slot] = alive ? 1 : 0;
}

/* Masks may overlap what is already taken (shadow reservations do), so the
 * bucket moves by the popcount before and after, not by the mask's size. */
static void view_move(tr_sched_view *v, uint32_t slot, uint64_t nfree)
{
    if (v->alive[slot]) {
        bit_clear(v, (unsigned)__builtin_popcountll(v->free[slot]), slot);
        bit_set(v, (unsigned)__builtin_popcountll(nfree), slot);
    }
    v->free[slot] = nfree;
}

void tr_sched_view_take(tr_sched_view *v, uint32_t slot, uint64_t mask)
{
    view_move(v, slot, v->free[slot] & ~mask);
}

void tr_sched_view_give(tr_sched_view *v, uint32_t slot, uint64_t mask)
{
    view_move(v, slot, v->free[slot] | mask);
}

uint32_t tr_sched_cpu_milli(const tr_sched_group_spec *g)
{
    /* Thousandths, rounded up, so that 0.5 + 0.5 fit one CPU and 0.3 never
     * rounds to nothing; unset (0) is one whole CPU, as a Slurm task has. */
    if (!(g->cpus > 0) || g->cpus > TR_SCHED_MAX_WORKER_CPUS) {
        return 1000; /* out of range is refused by tr_sched_validate */
    }
    double m = g->cpus * 1000.0;
    uint32_t r = (uint32_t)m;
    return (double)r < m - 1e-6 ? r + 1 : r;
}

static void cpu_move(const tr_sched *s, tr_sched_view *v, const tr_sched_placement *p, int64_t sign)
{
    for (size_t i = 0; p->cpu && i < p->nworkers; i++) {
        const tr_sched_worker *w = &p->workers[i];
        int64_t slot = w->cpu_milli != 0 ? tr_sched_slot_of(s, w->node_id) : -1;
        if (slot >= 0) {
            v->cpu_free[slot] += sign * (int64_t)w->cpu_milli;
        }
    }
}

void tr_sched_view_take_placement(const tr_sched *s, tr_sched_view *v, const tr_sched_placement *p)
{
    for (size_t i = 0; i < p->nvnodes; i++) {
        tr_sched_view_take(v, p->vslot[i], p->vnodes[i].gpu_mask);
    }
    cpu_move(s, v, p, -1);
}

void tr_sched_view_give_placement(const tr_sched *s, tr_sched_view *v, const tr_sched_placement *p)
{
    for (size_t i = 0; i < p->nvnodes; i++) {
        tr_sched_view_give(v, p->vslot[i], p->vnodes[i].gpu_mask);
    }
    cpu_move(s, v, p, 1);
}

int tr_sched_view_empty_of(tr_sched_view *dst, const tr_sched *s, bool with_suspect)
{
    int rv = tr_sched_view_reserve(dst, s->live.cap);
    if (rv != TROUPE_OK) {
        return rv;
    }
    memset(dst->bits, 0, (size_t)TR_SCHED_NBUCKETS * dst->words * sizeof(uint64_t));
    dst->n = 0;
    for (uint32_t i = 0; i < s->nnodes; i++) {
        int st = s->nodes[i].state;
        tr_sched_view_add(dst, i, s->nodes[i].full, s->nodes[i].cpu_milli,
                          st == TR_SCHED_ALIVE || (with_suspect && st == TR_SCHED_SUSPECT));
    }
    return TROUPE_OK;
}

static int64_t scan_bucket(const tr_sched_view *v, unsigned b, tr_sched_filter filter, void *ctx)
{
    const uint64_t *row = bucket(v, b);
    for (uint32_t w = 0; w < v->words; w++) {
        uint64_t bits = row[w];
        while (bits != 0) {
            uint32_t slot = w * 64 + (uint32_t)__builtin_ctzll(bits);
            if (filter == NULL || filter(ctx, slot)) {
                return slot;
            }
            bits &= bits - 1;
        }
    }
    return -1;
}

int64_t tr_sched_view_find(const tr_sched_view *v, unsigned lo, unsigned hi, tr_sched_filter filter,
                           void *ctx)
{
    int step = lo <= hi ? 1 : -1;
    if (lo > TR_SCHED_MAX_NODE_GPUS || hi > TR_SCHED_MAX_NODE_GPUS) {
        return -1;
    }
    for (int b = (int)lo;; b += step) {
        int64_t slot = scan_bucket(v, (unsigned)b, filter, ctx);
        if (slot >= 0 || b == (int)hi) {
            return slot;
        }
    }
}
