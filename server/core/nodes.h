/* nodes.h - the node registry (nodes.c): registration's rules, heartbeats'
 * effect, node states, and the node records' part in the group commit. */
#ifndef TR_NODES_H
#define TR_NODES_H

#include <stdint.h>

#include "commit.h"
#include "err.h"
#include "rpc.h"
#include "troupe/v1/troupe.pb-c.h"

/* Defined in head.h and head_node.h; named here so this header stands
 * alone (C11 allows the typedef twice). */
typedef struct tr_head tr_head;
typedef struct tr_head_node tr_head_node;

/* Node registry (nodes.c); the methods are rpc/nodes_rpc.c's. Under h->mu
 * but tr_head_node_validate. tr_head_node_validate checks a registration's
 * fields (INVALID_ARGUMENT naming the field); tr_head_node_register records
 * it (a new node, or the same one again) for the next commit and tells jobs;
 * tr_head_node_beat applies a heartbeat (seen now, GPU figures, SUSPECT ->
 * ALIVE) and returns the period to tell the agent. */
int tr_head_node_validate(const Troupe__V1__RegisterNodeRequest *r, tr_err *err);
int tr_head_node_register(tr_head *h, tr_rpc_call *call, const Troupe__V1__RegisterNodeRequest *r,
                          uint64_t *id_out, tr_err *err);
int64_t tr_head_node_beat(tr_head *h, tr_head_node *hn, tr_rpc_call *call,
                          const Troupe__V1__HeartbeatRequest *r);
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

#endif
