/* head_node.h - a node's record in the head's registry, and the headers of
 * what the core does with it (nodes.h, node_life.h; lookups in records.h). */
#ifndef TR_HEAD_NODE_H
#define TR_HEAD_NODE_H

#include <stdint.h>

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

#include "node_life.h" /* liveness beyond heartbeats */
#include "nodes.h"     /* the registry */
#include "records.h"   /* the registry's lookups */

#endif
