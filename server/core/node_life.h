/* node_life.h - liveness beyond heartbeats (node_life.c): connections
 * that closed, agents seen. */
#ifndef TR_NODE_LIFE_H
#define TR_NODE_LIFE_H

#include <stdint.h>

#include "rpc.h"

/* Defined in head.h and head_node.h; named here so this header stands
 * alone (C11 allows the typedef twice). */
typedef struct tr_head tr_head;
typedef struct tr_head_node tr_head_node;

/* Node lifecycle (node_life.c). */
void tr_head_pipe_closed(uint32_t pipe, void *user);                     /* RPC server callback */
void tr_head_nodes_check_pipes(tr_head *h);                              /* reaper, under h->mu */
void tr_head_node_seen(tr_head *h, tr_head_node *hn, tr_rpc_call *call); /* under h->mu */

#endif
