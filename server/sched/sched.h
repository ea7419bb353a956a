/* sched.h - troupe-head's gang scheduler core.
 *
 * A pure module: no sockets, threads, globals or I/O. troupe-head feeds it the
 * node registry (add, state changes) and job specs; it answers with placements
 * (which real node and which GPU indices every worker gets) or with a reason
 * the job cannot start, and it keeps the per-GPU free/used state.
 *
 * ## Model
 * A job asks for a *virtual cluster* (vnodes: a list of GPU counts, each a
 * bundle that must land whole on ONE real node, optionally restricted by a label
 * selector such as gpu=H200) and for one or more *worker groups* (workers x
 * GPUs per worker, with a strategy). The job is placed as a gang: all vnodes
 * are reserved and all groups are placed on them, or nothing is reserved.
 *
 * CPU-only workers (gpus_per_worker 0) take no GPU and no vnode: they go on
 * any node that matches the selector and has free CPU slots (a node has
 * `cpus` of them, the agent's --cpus), each worker taking its group's cpus
 * (1 when unset; counted in thousandths, so 0.5 is allowed). A job of CPU
 * groups only may have no vnodes at all. GPU workers are bounded by their
 * GPUs and take no CPU slots (as a Ray actor holds 0 CPUs by default).
 *
 * ## Rules chosen here (where the design leaves a choice)
 * - GPU indices: a node has 0..64 GPUs (TR_SCHED_MAX_NODE_GPUS; one uint64
 *   bitmask per node; a node with none only takes CPU-only workers). Only
 *   ALIVE nodes receive new work; SUSPECT nodes keep their placements and
 *   get nothing new; DEAD is final (the id is never reused, a DEAD node
 *   cannot become ALIVE again and stays listed).
 * - Vnode sharing: two vnodes of one job (or of different jobs) may share a
 *   real node, always on disjoint GPUs. Sharing is the allocator's freedom, not
 *   something a job may rely on: static validation treats each vnode as its own
 *   node (a STRICT_PACK group must fit one vnode; a STRICT_SPREAD group of k
 *   workers needs k vnodes), and at placement STRICT_SPREAD is enforced on real
 *   nodes.
 * - Where vnodes go: vnodes are reserved largest first (scarce/large first, as
 *   Ray's bundle_scheduling_policy), best fit (the node with the least free
 *   GPUs that still fits), ties to the node added first. The mode comes from the
 *   groups: if any group is SPREAD or STRICT_SPREAD, vnodes prefer real nodes the
 *   job does not use yet ("spread mode"); otherwise ("pack mode") they prefer
 *   nodes the job already uses, then a node that can hold all remaining vnodes,
 *   then the node with the most free GPUs, so a PACK job uses few nodes.
 *   A vnode's GPUs are the lowest free indices of its node.
 * - Where workers go: groups are placed in order of GPUs per worker (largest
 *   first), strict strategies before soft ones, then by index. Each worker's
 *   GPUs are the lowest free GPUs of one vnode. Strategies act on real nodes:
 *   STRICT_PACK = one real node (best fit); PACK = one real node if any can
 *   hold the group, else the fewest nodes (most room first); STRICT_SPREAD =
 *   every worker on a distinct real node; SPREAD = distinct nodes while they
 *   last, then round-robin.
 * - Where CPU-only workers go: after the GPU groups, on real nodes by free
 *   CPU slots: STRICT_PACK = one node that holds the group (a node the job
 *   already uses first, then best fit); PACK = the same, else the roomiest
 *   nodes first; STRICT_SPREAD = k distinct nodes (most room first); SPREAD =
 *   round-robin over the nodes with room, most room first.
 * - Ranks: a group's workers are numbered so that workers on one node are
 *   contiguous (torchrun's convention, rank = node block + LOCAL_RANK); nodes
 *   are ordered by the order the strategy chose them, and within a node by
 *   lowest GPU index, so LOCAL_RANK follows GPU order. NODE_RANK is the node's
 *   index among the group's distinct nodes.
 * - Two kinds of "no": a spec error is INVALID_ARGUMENT; a job that cannot be
 *   placed even on the alive cluster when empty is FAILED_PRECONDITION
 *   (infeasible: reject at submit); a job that fits the empty cluster but not
 *   the free GPUs now is RESOURCE_EXHAUSTED (must wait). Messages name numbers.
 * - Queue (tr_sched_schedule): FIFO with conservative backfill; see there.
 *
 * ## Ownership and threads
 * A tr_sched is not thread-safe: one thread at a time per handle (the head's
 * scheduler loop). Distinct handles are independent. Functions that take no
 * tr_sched (tr_sched_validate, tr_sched_strategy_*) are thread-safe.
 * The scheduler copies everything it keeps (node names, labels); specs passed
 * in are borrowed for the call only. Placements are owned by the tr_sched and
 * live until tr_sched_release() or tr_sched_close().
 */
#ifndef TR_SCHED_H
#define TR_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define TR_SCHED_MAX_NODE_GPUS 64
#define TR_SCHED_MAX_VNODES 4096   /* per job */
#define TR_SCHED_MAX_WORKERS 65536 /* per job, all groups together */
#define TR_SCHED_MAX_GROUPS 256    /* per job */
#define TR_SCHED_MAX_NODE_CPUS 65536
#define TR_SCHED_MAX_WORKER_CPUS 4096
#define TR_SCHED_NO_VNODE UINT32_MAX /* tr_sched_worker.vnode of a CPU-only worker */

typedef struct tr_sched tr_sched;
typedef struct tr_sched_placement tr_sched_placement;

typedef enum tr_sched_strategy {
    TR_SCHED_PACK = 0,
    TR_SCHED_SPREAD = 1,
    TR_SCHED_STRICT_PACK = 2,
    TR_SCHED_STRICT_SPREAD = 3,
} tr_sched_strategy;

typedef enum tr_sched_node_state {
    TR_SCHED_ALIVE = 0,
    TR_SCHED_SUSPECT = 1,
    TR_SCHED_DEAD = 2,
} tr_sched_node_state;

typedef struct tr_sched_label {
    const char *key;
    const char *value;
} tr_sched_label;

/* A node as registered. Strings and the label array are copied. */
typedef struct tr_sched_node_spec {
    uint64_t id;                  /* unique, never reused */
    const char *name;             /* may be NULL ("" then) */
    unsigned gpus;                /* 0..TR_SCHED_MAX_NODE_GPUS */
    unsigned cpus;                /* CPU slots for CPU-only workers, 0..TR_SCHED_MAX_NODE_CPUS */
    const tr_sched_label *labels; /* nlabels entries, keys unique */
    size_t nlabels;
} tr_sched_node_spec;

typedef struct tr_sched_node_info {
    uint64_t id;
    const char *name; /* borrowed: lives until tr_sched_close() */
    unsigned gpus;
    unsigned free_gpus;
    uint64_t free_mask; /* bit i set = GPU i free */
    unsigned cpus;
    uint64_t free_cpu_milli; /* free CPU slots in thousandths */
    tr_sched_node_state state;
} tr_sched_node_info;

/* A worker group: workers x gpus_per_worker. cpus is what each worker of a
 * CPU-only group (gpus_per_worker 0) takes of its node's CPU slots (0 = 1);
 * for GPU groups it and memory_bytes are carried, not scheduled. */
typedef struct tr_sched_group_spec {
    const char *name;    /* non-empty, unique within the job */
    int workers;         /* >= 1 */
    int gpus_per_worker; /* >= 0; 0 = a CPU-only worker */
    int strategy;        /* a tr_sched_strategy; int so that bad values can be reported */
    double cpus;         /* 0 or 0.001..TR_SCHED_MAX_WORKER_CPUS */
    uint64_t memory_bytes;
} tr_sched_group_spec;

/* A job: the virtual cluster (vnodes[i] GPUs each, all on nodes matching every
 * selector label; none when every group is CPU-only) and its groups.
 * Borrowed for the duration of each call. */
typedef struct tr_sched_job_spec {
    const char *name;  /* for messages; may be NULL */
    const int *vnodes; /* nvnodes GPU counts */
    size_t nvnodes;
    const tr_sched_label *selector; /* node labels that must all match */
    size_t nselector;
    const tr_sched_group_spec *groups;
    size_t ngroups;
} tr_sched_job_spec;

/* One worker's placement. */
typedef struct tr_sched_worker {
    uint32_t group; /* index into spec->groups */
    uint32_t rank;  /* worker index within the group (RANK) */
    uint32_t vnode; /* index into spec->vnodes; TR_SCHED_NO_VNODE for a CPU-only worker */
    uint64_t node_id;
    uint32_t node_rank;        /* NODE_RANK: index among the group's nodes */
    uint32_t nnodes;           /* number of distinct nodes of the group */
    uint32_t local_rank;       /* LOCAL_RANK: index among the group's workers on this node */
    uint32_t local_world_size; /* the group's workers on this node */
    uint32_t ngpus;
    uint32_t cpu_milli; /* CPU slots taken on node_id, in thousandths (CPU-only workers) */
    uint64_t gpu_mask;
    uint8_t gpus[TR_SCHED_MAX_NODE_GPUS]; /* ngpus indices, ascending (CUDA_VISIBLE_DEVICES) */
} tr_sched_worker;

/* One vnode's reservation. */
typedef struct tr_sched_vnode {
    uint64_t node_id;
    uint32_t ngpus;
    uint64_t gpu_mask;
    uint8_t gpus[TR_SCHED_MAX_NODE_GPUS]; /* ngpus indices, ascending */
} tr_sched_vnode;

typedef struct tr_sched_stats {
    size_t nodes; /* all known nodes, dead included */
    size_t alive_nodes;
    uint64_t alive_gpus;
    uint64_t free_gpus; /* free GPUs on alive nodes */
    size_t placements;
} tr_sched_stats;

/* ---- lifetime ---------------------------------------------------------- */

/* tr_sched_open allocates an empty scheduler into *out (zeroed on entry).
 * Returns TROUPE_OK, or TROUPE_RESOURCE_EXHAUSTED when out of memory.
 * The caller frees it with tr_sched_close(). */
int tr_sched_open(tr_sched **out, tr_err *err);

/* tr_sched_close frees the scheduler, its nodes and every placement still
 * held (pointers to them become invalid). NULL is a no-op. */
void tr_sched_close(tr_sched *s);

/* ---- nodes ------------------------------------------------------------- */

/* tr_sched_node_add registers a node, ALIVE with all GPUs and CPU slots free;
 * it copies the spec. Returns TROUPE_OK; TROUPE_INVALID_ARGUMENT (> 64 GPUs,
 * too many CPUs, bad label);
 * TROUPE_ALREADY_EXISTS (id known, dead ones included); TROUPE_RESOURCE_EXHAUSTED (OOM). */
int tr_sched_node_add(tr_sched *s, const tr_sched_node_spec *spec, tr_err *err);

/* tr_sched_node_set_state changes a node's liveness. Placements on the node
 * are kept (the head decides what to release, see tr_sched_jobs_on_node).
 * Returns TROUPE_OK; TROUPE_NOT_FOUND; TROUPE_FAILED_PRECONDITION for
 * DEAD -> anything else; TROUPE_INVALID_ARGUMENT for an unknown state. */
int tr_sched_node_set_state(tr_sched *s, uint64_t id, int state, tr_err *err);

/* Why a node that is not DEAD takes no new work (TR_SCHED_SUSPECT): what a
 * waiting job's reason names, so a drained node is not called unreported. */
typedef enum tr_sched_hold {
    TR_SCHED_HOLD_UNREPORTED = 0, /* missed heartbeats, or not re-registered after a head restart */
    TR_SCHED_HOLD_DRAINING = 1,   /* troupe drain: no new work until troupe undrain */
    TR_SCHED_HOLD_FENCED = 2,     /* still running workers of its earlier self */
} tr_sched_hold;

/* tr_sched_node_set_hold records why node id takes no new work while it is
 * SUSPECT (ignored otherwise); unknown ids are ignored. */
void tr_sched_node_set_hold(tr_sched *s, uint64_t id, tr_sched_hold hold);

/* tr_sched_node_get fills *out (zeroed on entry). Returns TROUPE_OK or TROUPE_NOT_FOUND. */
int tr_sched_node_get(const tr_sched *s, uint64_t id, tr_sched_node_info *out, tr_err *err);

/* tr_sched_free_gpus_live returns the free GPUs of every node that is not
 * DEAD: one pass over the slots, without lookups by id. Cannot fail. */
uint64_t tr_sched_free_gpus_live(const tr_sched *s);

/* tr_sched_free_cpu_milli_live returns the free CPU slots, in thousandths,
 * of every node that is not DEAD, as tr_sched_free_gpus_live. */
uint64_t tr_sched_free_cpu_milli_live(const tr_sched *s);

/* tr_sched_stats_get fills *out with totals. Cannot fail. */
void tr_sched_stats_get(const tr_sched *s, tr_sched_stats *out);

/* ---- jobs -------------------------------------------------------------- */

/* tr_sched_strategy_name returns "PACK", "SPREAD", "STRICT_PACK",
 * "STRICT_SPREAD", or "?" for other values; static string. */
const char *tr_sched_strategy_name(int strategy);

/* tr_sched_strategy_parse maps a name (case-insensitive) to *out.
 * Returns TROUPE_OK or TROUPE_INVALID_ARGUMENT naming the valid choices. */
int tr_sched_strategy_parse(const char *name, tr_sched_strategy *out, tr_err *err);

/* tr_sched_validate checks a job spec on its own, without any cluster:
 * counts, strategies, duplicate group names, workers larger than any vnode,
 * GPU groups without vnodes, CPU requests out of range,
 * STRICT_PACK groups larger than any vnode, STRICT_SPREAD groups with more
 * workers than vnodes, groups needing more GPUs than the virtual cluster has.
 * Returns TROUPE_OK or TROUPE_INVALID_ARGUMENT with the first problem. */
int tr_sched_validate(const tr_sched_job_spec *spec, tr_err *err);

/* tr_sched_check tells whether the job could ever run on the current ALIVE
 * or SUSPECT nodes (as if all their GPUs were free): the submit-time verdict.
 * SUSPECT nodes count because a head restart loads every node SUSPECT until
 * its agent registers again, and one missed heartbeat makes a node SUSPECT; a
 * job refused in that window would be refused for a blink, not for its shape.
 * It agrees with the queue (tr_sched_schedule), which lets such a job wait
 * for SUSPECT nodes and fails it only when no ALIVE or SUSPECT node could
 * hold it. Reserves nothing.
 * Returns TROUPE_OK; TROUPE_INVALID_ARGUMENT (spec, see tr_sched_validate);
 * TROUPE_FAILED_PRECONDITION (infeasible, with the numbers); TROUPE_RESOURCE_EXHAUSTED (OOM). */
int tr_sched_check(tr_sched *s, const tr_sched_job_spec *spec, tr_err *err);

/* tr_sched_place places the whole job now, ignoring any queue, and stores
 * the placement under job_id; *out (zeroed on entry) is set on success and
 * belongs to s. Returns TROUPE_OK; TROUPE_INVALID_ARGUMENT (spec);
 * TROUPE_FAILED_PRECONDITION (infeasible); TROUPE_RESOURCE_EXHAUSTED (must wait:
 * the message names what for; also used for OOM); TROUPE_ALREADY_EXISTS (job_id
 * already placed). On any error nothing is reserved. */
int tr_sched_place(tr_sched *s, uint64_t job_id, const tr_sched_job_spec *spec, tr_sched_placement **out,
                   tr_err *err);

/* tr_sched_release returns the placement's GPUs (on dead nodes too, so that
 * the books balance) and frees it. NULL is a no-op. */
void tr_sched_release(tr_sched *s, tr_sched_placement *p);

/* tr_sched_find returns the placement of job_id, or NULL. Borrowed. */
tr_sched_placement *tr_sched_find(const tr_sched *s, uint64_t job_id);

/* tr_sched_jobs_on_node writes up to cap job ids whose placement uses node_id
 * (for node death: release and requeue them) and sets *n to the full count,
 * which may exceed cap. O(placements x vnodes). Returns TROUPE_OK or TROUPE_NOT_FOUND. */
int tr_sched_jobs_on_node(const tr_sched *s, uint64_t node_id, uint64_t *job_ids, size_t cap, size_t *n,
                          tr_err *err);

/* Placement accessors. Pointers are borrowed and live as long as p.
 * Workers are ordered by group index, then rank. */
uint64_t tr_sched_placement_job(const tr_sched_placement *p);
size_t tr_sched_placement_nworkers(const tr_sched_placement *p);
const tr_sched_worker *tr_sched_placement_workers(const tr_sched_placement *p);
/* tr_sched_placement_group returns the workers of group g (count in *n), or NULL with *n = 0. */
const tr_sched_worker *tr_sched_placement_group(const tr_sched_placement *p, size_t g, size_t *n);
size_t tr_sched_placement_nvnodes(const tr_sched_placement *p);
const tr_sched_vnode *tr_sched_placement_vnodes(const tr_sched_placement *p);

/* ---- queue ------------------------------------------------------------- */

typedef struct tr_sched_pending {
    uint64_t job_id;
    const tr_sched_job_spec *spec; /* borrowed for the call */
} tr_sched_pending;

typedef struct tr_sched_decision {
    int status;                    /* TROUPE_OK = started now */
    tr_sched_placement *placement; /* when started; owned by s */
    tr_err why;                    /* when not started: the reason */
} tr_sched_decision;

/* tr_sched_schedule decides which of the pending jobs (oldest first) start now,
 * places those, and says why each other one waits. out has n entries.
 *
 * Rule (FIFO with conservative backfill, no runtime estimates): jobs are taken
 * in order. A job starts if it fits on the free GPUs that no earlier waiting
 * job holds. A job that does not start takes a "shadow" reservation: the
 * placement it would get if every GPU not held by an earlier job started in
 * this pass or by an earlier shadow were free (GPUs of running jobs count as
 * free: they will come back). Should that not fit, the shadow may overlap
 * earlier shadows, and at last started jobs; a shadow is only ever a fence.
 * Later jobs may never use GPUs inside any earlier shadow, so a later job can
 * start before an earlier one only on GPUs that the earlier one's placement
 * would not use: it cannot delay it. Shadows live for the pass only.
 *
 * Per job: status TROUPE_OK (placement set); TROUPE_RESOURCE_EXHAUSTED (waits:
 * why says what for, or which earlier job holds what it could use, or that it
 * needs SUSPECT nodes to report again: a job the ALIVE nodes cannot hold but
 * ALIVE and SUSPECT ones could waits, its shadow taken on both);
 * TROUPE_INVALID_ARGUMENT / TROUPE_FAILED_PRECONDITION (spec bad, or no ALIVE
 * or SUSPECT node could ever hold it: the head may fail the job); TROUPE_ALREADY_EXISTS
 * (job id already placed). Bad or infeasible jobs hold no shadow.
 * Returns TROUPE_OK, or TROUPE_RESOURCE_EXHAUSTED on OOM (then nothing in this
 * pass was placed). */
int tr_sched_schedule(tr_sched *s, const tr_sched_pending *pending, size_t n, tr_sched_decision *out,
                      tr_err *err);

/* ---- testing ----------------------------------------------------------- */

/* tr_sched_check_invariants recomputes every node's free mask from the
 * placements and the bucket index from the masks and compares. Returns
 * TROUPE_OK or TROUPE_INTERNAL naming the first mismatch. O(nodes + GPUs placed). */
int tr_sched_check_invariants(const tr_sched *s, tr_err *err);

#endif
