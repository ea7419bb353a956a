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
    char *token_file;
    char *tls_ca; /* tls+tcp:// heads (rpc.h: tr_rpc_tls) */
    char *tls_cert;
    char *tls_key;
    char *tls_server_name;
    char *address;
    char *state_dir;
    char *log_level;
    int64_t stop_grace_ms;
    int64_t lease_ms; /* 0 = the head's; else at most this (never more than the head's) */
    int64_t cpus;     /* CPU slots for CPU-only workers; -1 = the online CPUs (resolved at start) */
    int shared_uid;   /* workers run as the agent (ids.h) */
    char *worker_user;
    char *worker_uid_range;
    char *worker_id_dir;
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
    volatile sig_atomic_t *restarting; /* the stop is for a restart (SIGUSR2): Deregister says so */

    /* Identity and lease (lease.c). The heartbeat thread (agent.c) writes
     * node_id, head_epoch, heartbeat_ms and the lease; the main loop reads
     * them; id_mu guards them all. Heartbeats have their own thread so that a
     * slow report (waiting on the head's disk) never starves the lease. */
    pthread_mutex_t id_mu;
    pthread_t hb_thread;
    int hb_started;
    size_t running_now;    /* workers running, as the main loop last counted */
    char instance[40];     /* random, kept in STATE_DIR/agent.id */
    int lock_fd;           /* STATE_DIR/agent.lock, flock'ed for the agent's life */
    int64_t lease_ms;      /* as granted by the head (capped by cfg.lease_ms) */
    int64_t lease_until;   /* tr_now_ms() when the lease ends; 0 = none yet */
    int lease_lapsed;      /* logged that it ran out */
    char lease_path[1100]; /* STATE_DIR/lease.NODE_ID: workers of this node id hold it */

    /* Workers (agent.c, sync.c). The main loop owns the launcher; the sync
     * thread only hands over new assignment sets under mu. */
    tr_launcher *launcher;
    struct tr_ids *ids;  /* who workers run as (ids.h); the main loop's */
    char isolation[256]; /* tr_ids_describe, registered with the head */
    pthread_t sync_thread;
    int sync_started;
    pthread_mutex_t mu;
    struct Troupe__V1__NodeSyncReply *incoming; /* newest set not yet applied */
    struct Troupe__V1__NodeSyncReply *applied;  /* the set being run */
    uint64_t applied_version;
    uint64_t sync_node_id; /* node_id as the sync thread sees it */
    int need_report;
    int more_output; /* the last report left output behind (sync.c) */
    int64_t last_report;
    struct tr_pending_log *logs; /* output read but not yet delivered */
    char nsys[1024]; /* nsys found on PATH at start ("" = none; nsys.c) */
    uint8_t gpu_busy[TR_MAX_GPUS]; /* under mu: GPUs of the applied set (by index) */
    struct tr_gpustats *gstats;    /* heartbeat thread: live GPU figures (gpustats.h) */
} tr_node_agent;

/* nsys.c: profile: {nsys: true}. tr_node_find_nsys looks nsys up on the
 * agent's PATH (once, at start; the head refuses nsys jobs when no node has
 * it). tr_node_nsys_wrap decides for one assignment: when the job asks for
 * nsys and the worker matches the profile patterns, c->argv is the nsys
 * command around the worker's and c->report_glob the pattern of the report it
 * writes; c->fail_reason says why the worker cannot start (nsys asked for
 * but missing here). Returns 0, or -1 out of memory. Free with
 * tr_node_nsys_free. */
typedef struct tr_nsys_cmd {
    const char **argv; /* NULL: run the command as it is */
    char *report_glob;
    char *opts_copy, *output; /* owned words of argv */
    char fail_reason[512];
} tr_nsys_cmd;
void tr_node_find_nsys(tr_node_agent *a);
struct Troupe__V1__WorkerAssignment;
int tr_node_nsys_wrap(const tr_node_agent *a, const struct Troupe__V1__WorkerAssignment *wa, tr_nsys_cmd *c);
void tr_node_nsys_free(tr_nsys_cmd *c);

/* tr_node_workers_start/stop run the sync thread (sync.c). */
int tr_node_workers_start(tr_node_agent *a, tr_err *err);
void tr_node_workers_stop(tr_node_agent *a);
/* tr_node_workers_step applies new sets, reaps and reports (main loop). */
void tr_node_workers_step(tr_node_agent *a);

/* tr_node_register (re)registers, keeping node_id when the head allows. */
int tr_node_register(tr_node_agent *a, tr_err *err);

/* lease.c: tr_node_identity takes the state dir (one agent per state dir) and
 * loads or makes the instance id; tr_node_lease_renew extends the lease from
 * the send time of a call the head answered and writes the lease file the
 * worker shims read; tr_node_lease_left is the time left (ms, <= 0 when it
 * ran out; a large number before the first grant); tr_node_deregister tells
 * the head the agent is leaving. */
int tr_node_identity(tr_node_agent *a, tr_err *err);
/* tr_node_id returns the current node id (takes id_mu). */
uint64_t tr_node_id(tr_node_agent *a);
/* tr_node_lease_file copies the lease file path for new workers; 0 = none. */
int tr_node_lease_file(tr_node_agent *a, char *buf, size_t size);
void tr_node_lease_renew(tr_node_agent *a, int64_t sent_ms);
void tr_node_lease_renew_locked(tr_node_agent *a, int64_t sent_ms); /* caller holds id_mu */
int64_t tr_node_lease_left(tr_node_agent *a);
void tr_node_lease_check(tr_node_agent *a);
/* restarting: the agent stops to be started again (DeregisterNodeRequest.restarting). */
void tr_node_deregister(tr_node_agent *a, const char *reason, int restarting);
/* tr_node_running_workers counts workers still RUNNING or STOPPING. */
size_t tr_node_running_workers(tr_node_agent *a);

/* tr_node_run loops: heartbeats, re-registration, until *a->stop. */
int tr_node_run(tr_node_agent *a, tr_err *err);

#endif
