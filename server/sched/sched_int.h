/* sched_int.h - internals shared by the scheduler's source files. Not API. */
#ifndef TR_SCHED_INT_H
#define TR_SCHED_INT_H

#include <stdbool.h>

#include "sched.h"

#define TR_SCHED_NBUCKETS (TR_SCHED_MAX_NODE_GPUS + 1)

typedef struct tr_sched_node {
    uint64_t id;
    char *name;
    unsigned gpus;
    uint64_t full; /* mask of existing GPUs */
    int64_t cpu_milli; /* CPU slots, in thousandths */
    int state;
    int hold; /* a tr_sched_hold, while state is TR_SCHED_SUSPECT */
    char **lkeys;
    char **lvals;
    size_t nlabels;
} tr_sched_node;

/* A view is a free/used picture of every node: one free mask per node slot
 * plus, for ALIVE nodes only, a bitset per free-GPU count ("bucket") so that
 * "the node with the fewest free GPUs >= N" is a scan of a few words, and ties
 * go to the lowest slot (the node added first). The live state is one view;
 * the queue and the feasibility check work on copies. */
typedef struct tr_sched_view {
    uint32_t n;     /* node slots in use */
    uint32_t words; /* words per bucket bitset */
    uint64_t *free; /* [cap] free mask per slot */
    int64_t *cpu_free; /* [cap] free CPU slots per slot, in thousandths (negative under shadows) */
    uint64_t *bits; /* [TR_SCHED_NBUCKETS * words] */
    uint8_t *alive; /* [cap] 1 if the slot is bucketed */
    uint32_t cap;
} tr_sched_view;

struct tr_sched_placement {
    uint64_t job;
    size_t nworkers;
    size_t nvnodes;
    size_t ngroups;
    tr_sched_worker *workers;
    tr_sched_vnode *vnodes;
    uint32_t *vslot;                 /* node slot of each vnode */
    size_t *group_off;               /* [ngroups + 1] */
    bool cpu;                        /* some worker takes CPU slots */
    tr_sched_placement *prev, *next; /* all placements of s */
    tr_sched_placement *hnext;       /* job-id hash chain */
};

/* One worker choice while a group is being placed. */
typedef struct tr_sched_wtmp {
    uint32_t order; /* when its node was first chosen for the group */
    uint32_t vnode; /* TR_SCHED_NO_VNODE for a CPU-only worker */
    uint32_t slot;  /* node slot (CPU-only workers) */
    uint32_t seq;   /* choice order: ranks a CPU-only worker within its node */
    uint64_t mask;
} tr_sched_wtmp;

struct tr_sched {
    tr_sched_node *nodes;
    uint32_t nnodes, cap;
    uint32_t *idmap; /* open addressing: slot + 1, 0 = empty */
    uint32_t idmap_cap;
    tr_sched_view live;

    tr_sched_placement *plist;
    tr_sched_placement **phash;
    size_t phash_cap, nplace;

    /* Scratch, reused across calls so that a placement allocates only its result. */
    uint32_t epoch;      /* bumps per placement attempt */
    uint32_t *sel_stamp; /* [cap] selector memo: epoch when evaluated */
    uint8_t *sel_ok;     /* [cap] */
    uint32_t *use_stamp; /* [cap] epoch when the job used the slot */
    uint32_t *vc_of;     /* [cap] index of the slot among the job's nodes */
    uint32_t sel_epoch;  /* epoch the selector memo is for */
    void *scratch;       /* grown as needed, see place_scratch */
    size_t scratch_len;
    tr_sched_view tmp[4]; /* queue and feasibility views */
};

/* views (sched_view.c) */
int tr_sched_view_reserve(tr_sched_view *v, uint32_t cap);
void tr_sched_view_fini(tr_sched_view *v);
int tr_sched_view_copy(tr_sched_view *dst, const tr_sched_view *src);
void tr_sched_view_add(tr_sched_view *v, uint32_t slot, uint64_t free_mask, int64_t cpu_milli, bool alive);
void tr_sched_view_take(tr_sched_view *v, uint32_t slot, uint64_t mask);
void tr_sched_view_give(tr_sched_view *v, uint32_t slot, uint64_t mask);
void tr_sched_view_set_alive(tr_sched_view *v, uint32_t slot, bool alive);
/* tr_sched_view_empty_of: every node's GPUs free; ALIVE nodes bucketed (and
 * SUSPECT ones with with_suspect: "could this ever run once they report"). */
int tr_sched_view_empty_of(tr_sched_view *dst, const tr_sched *s, bool with_suspect);

typedef bool (*tr_sched_filter)(void *ctx, uint32_t slot);
/* Scan buckets lo..hi (ascending when lo <= hi, else descending); returns the
 * first slot accepted by filter (NULL accepts all), or -1. */
int64_t tr_sched_view_find(const tr_sched_view *v, unsigned lo, unsigned hi, tr_sched_filter filter,
                           void *ctx);

/* tr_sched_view_take_placement / _give_placement take or give back all that
 * p holds (its vnodes' GPUs, its CPU-only workers' CPU slots) in v. */
void tr_sched_view_take_placement(const tr_sched *s, tr_sched_view *v, const tr_sched_placement *p);
void tr_sched_view_give_placement(const tr_sched *s, tr_sched_view *v, const tr_sched_placement *p);
/* tr_sched_cpu_milli: what one worker of g takes of a node's CPU slots. */
uint32_t tr_sched_cpu_milli(const tr_sched_group_spec *g);

/* tr_sched_mix64: the splitmix64 finaliser, as the id map's hash (node and
 * job ids are often sequential). */
static inline uint64_t tr_sched_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* tr_sched_slot_of: the slot of node id, or -1. Inline here rather than in
 * sched.c: the books and the views look slots up too, and a call from them
 * back into sched.c would close a circle (sched.c calls both). */
static inline int64_t tr_sched_slot_of(const tr_sched *s, uint64_t id)
{
    if (s->idmap_cap == 0) {
        return -1;
    }
    for (uint32_t h = (uint32_t)tr_sched_mix64(id) & (s->idmap_cap - 1);; h = (h + 1) & (s->idmap_cap - 1)) {
        uint32_t e = s->idmap[h];
        if (e == 0) {
            return -1;
        }
        if (s->nodes[e - 1].id == id) {
            return e - 1;
        }
    }
}

/* nodes (sched.c) */
bool tr_sched_node_matches(const tr_sched_node *n, const tr_sched_label *sel, size_t nsel);
int tr_sched_placement_link(tr_sched *s, tr_sched_placement *p);
void tr_sched_placement_free(tr_sched_placement *p);

/* placement (sched_place.c) */
typedef enum tr_sched_viewkind { TR_SCHED_VIEW_LIVE, TR_SCHED_VIEW_EMPTY } tr_sched_viewkind;
/* Place spec on view v: on success *out is a fresh placement (not linked) and
 * its GPUs are taken in v; on failure v is unchanged and err says why, worded
 * for kind. Returns TROUPE_OK, TROUPE_RESOURCE_EXHAUSTED (no room in v) or
 * TROUPE_RESOURCE_EXHAUSTED with *oom set. */
int tr_sched_place_on(tr_sched *s, tr_sched_view *v, tr_sched_viewkind kind, const tr_sched_job_spec *spec,
                      tr_sched_placement **out, bool *oom, tr_err *err);
/* Full feasibility: validate, pre-check (messages name the numbers), then
 * place on an empty view of the ALIVE nodes; tr_sched_feasible_in counts
 * SUSPECT nodes as well when with_suspect is set. */
int tr_sched_feasible(tr_sched *s, const tr_sched_job_spec *spec, tr_err *err);
int tr_sched_feasible_in(tr_sched *s, const tr_sched_job_spec *spec, bool with_suspect, tr_err *err);
void tr_sched_format_selector(const tr_sched_job_spec *spec, char *buf, size_t len);

#endif
