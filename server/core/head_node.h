/* head_node.h - a node's record in the head's registry (nodes.c) and what
 * the core does with it (nodes.c, node_life.c; lookups in records.c). */
#ifndef TR_HEAD_NODE_H
#define TR_HEAD_NODE_H

#include <stdint.h>

#include "commit.h"
#include "err.h"
#include "rpc.h"
#include "troupe/v1/troupe.pb-c.h"

/* Defined in head.h; named here so this header stands alone (C11 allows
 * the typedef twice). */
typedef struct tr_head tr_head;
struct tr_head_job;

typedef struct tr_head_node {
    Troupe__V1__Node *n;      /* owned, an unpacked message (malloc allocator) */
    /* tr_head_name_hash(n->name), kept with n: RegisterNode's walks over every
     * node for namesakes compare this first, in the array itself, instead of
     * following n to strcmp each name (12% of the head's time while 8,000
     * agents registered, bench/hosts). */
    uint64_t name_hash;
    int64_t seen_mono;        /* tr_now_ms() of the last heartbeat */
    uint64_t version;         /* assignment version: bumps when its worker set changes */
    tr_rpc_call *sync_waiter; /* a deferred NodeSync long poll, or NULL */
    int64_t sync_until;       /* tr_now_ms() when to answer the long poll anyway */
    int awaiting_register;    /* recovered from the store: not placeable until its agent registers */
    /* Jobs that have (or had) a worker record on this node and are not yet
     * known settled: a superset, pruned when walked (jobs_sync.c), so a
     * NodeSync looks at this node's jobs instead of every active one. */
    struct tr_head_job **placed;
    size_t n_placed, cap_placed;
    /* Durability of assignments (commit.c, jobs_sync.c): the batch that
     * carries the latest version bump, the first version not yet on disk,
     * and the version the parked long poll has applied. An agent is only
     * ever told a version whose changes are on disk. */
    uint64_t bump_seq, unsaved_version, sync_version;
    int sync_flat; /* the parked long poll's agent knows no common parts (NodeSyncRequest.common_parts) */
    /* Liveness beyond heartbeats (node_life.c). */
    uint32_t pipe;            /* connection of the agent's last call; 0 = none known */
    int64_t dropped_mono;     /* tr_now_ms() when that connection closed; 0 = open */
    char instance[72];        /* the registered agent's instance id (memory only) */
    /* Heartbeat periods told to the agent (tr_head_node_told): the latest,
     * and the longer of the last two, by which its silence is judged (the
     * agent may not have the latest reply yet). */
    int64_t told_ms, judged_ms;
} tr_head_node;


/* Node registry (nodes.c); the methods are rpc/nodes_rpc.c's. Under h->mu
 * but tr_head_node_validate. tr_head_node_validate checks a registration's
 * fields (INVALID_ARGUMENT naming the field); tr_head_node_register records
 * it (a new node, or the same one again) for the next commit and tells jobs;
 * tr_head_node_beat applies a heartbeat (seen now, GPU figures, SUSPECT ->
 * ALIVE) and returns the period to tell the agent. */
int tr_head_node_validate(const Troupe__V1__RegisterNodeRequest *r, tr_err *err);
int tr_head_node_register(tr_head *h, tr_rpc_call *call, const Troupe__V1__RegisterNodeRequest *r,
                          uint64_t *id_out, tr_err *err);
int64_t tr_head_node_beat(tr_head *h, tr_head_node *hn, tr_rpc_call *call, const Troupe__V1__HeartbeatRequest *r);
/* tr_head_node_state_name: "ALIVE", "DEAD", ... for a Troupe__V1__NodeState. */
const char *tr_head_node_state_name(int s);
int tr_head_nodes_recover(tr_head *h, tr_err *err);
void tr_head_nodes_reap(tr_head *h); /* caller holds h->mu */
/* tr_head_heartbeat_period (h->mu held): the period to ask of agents now,
 * from the number of ALIVE and SUSPECT nodes (tr_liveness_period_ms); a
 * change is logged once. tr_head_node_told also records it as told to hn,
 * whose silence is then judged by the longer of its last two periods. */
int64_t tr_head_heartbeat_period(tr_head *h);
int64_t tr_head_node_told(tr_head *h, tr_head_node *hn);
void tr_head_nodes_free(tr_head *h);
/* tr_head_nodes_source: the node records' part in the group commit
 * (commit.h), registered by head.c; tr_head_dirty_node marks node id for
 * the next batch. */
extern const tr_commit_source tr_head_nodes_source;
void tr_head_dirty_node(tr_head *h, uint64_t id);
/* tr_head_node_transition moves a node to a state, commits and logs it, and
 * tells jobs; caller holds h->mu. */
void tr_head_node_transition(tr_head *h, tr_head_node *hn, int state, const char *reason);

/* Node lifecycle (node_life.c). */
void tr_head_pipe_closed(uint32_t pipe, void *user);  /* RPC server callback */
void tr_head_nodes_check_pipes(tr_head *h);           /* reaper, under h->mu */
void tr_head_node_seen(tr_head *h, tr_head_node *hn, tr_rpc_call *call); /* under h->mu */

#include "records.h" /* the registry's lookups */

#endif
