/* node.h - troupe-node's configuration and agent state. */
#ifndef TR_NODE_H
#define TR_NODE_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#include "config.h"
#include "gpus.h"
#include "launcher.h"
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
    int64_t head_epoch; /* head_started_ms last seen */
    int64_t heartbeat_ms;
    int head_reachable;
    volatile sig_atomic_t *stop;

    /* Workers (agent.c, sync.c). The main loop owns the launcher; the sync
     * thread only hands over new assignment sets under mu. */
    tr_launcher *launcher;
    pthread_t sync_thread;
    int sync_started;
    pthread_mutex_t mu;
    struct Troupe__V1__NodeSyncReply *incoming; /* newest set not yet applied */
    struct Troupe__V1__NodeSyncReply *applied;  /* the set being run */
    uint64_t applied_version;
    uint64_t sync_node_id; /* node_id as the sync thread sees it */
    int need_report;
    int64_t last_report;
    struct tr_pending_log *logs; /* output read but not yet delivered */
} tr_node_agent;

/* tr_node_workers_start/stop run the sync thread (sync.c). */
int tr_node_workers_start(tr_node_agent *a, tr_err *err);
void tr_node_workers_stop(tr_node_agent *a);
/* tr_node_workers_step applies new sets, reaps and reports (main loop). */
void tr_node_workers_step(tr_node_agent *a);

/* tr_node_register (re)registers, keeping node_id when the head allows. */
int tr_node_register(tr_node_agent *a, tr_err *err);

/* tr_node_run loops: heartbeats, re-registration, until *a->stop. */
int tr_node_run(tr_node_agent *a, tr_err *err);

#endif
