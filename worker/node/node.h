/* node.h - troupe-node's configuration and agent state. */
#ifndef TR_NODE_H
#define TR_NODE_H

#include <signal.h>
#include <stdint.h>

#include "config.h"
#include "gpus.h"
#include "rpc.h"

typedef struct tr_node_config {
    char *head;
    char *name;
    char *labels;
    char *fake_gpus;
    char *token;
    char *address;
    char *state_dir;
    char *log_level;
    int64_t stop_grace_ms;
} tr_node_config;

extern const tr_cfg_desc tr_node_config_table[];

typedef struct tr_node_agent {
    tr_node_config cfg;
    tr_rpc_client *rpc;
    char hostname[256];
    tr_gpu_info gpus[TR_MAX_GPUS];
    size_t n_gpus;
    uint64_t node_id;
    int64_t head_epoch;   /* head_started_ms last seen */
    int64_t heartbeat_ms;
    int head_reachable;
    volatile sig_atomic_t *stop;
} tr_node_agent;

/* tr_node_register (re)registers, keeping node_id when the head allows. */
int tr_node_register(tr_node_agent *a, tr_err *err);

/* tr_node_run loops: heartbeats, re-registration, until *a->stop. */
int tr_node_run(tr_node_agent *a, tr_err *err);

#endif
