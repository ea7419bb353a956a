/* head.h - troupe-head's state, shared by its modules.
 *
 * One mutex (mu) guards everything below it; RPC handlers take it for the
 * length of a call, which is short (no handler waits on I/O other than its
 * SQLite commit). Long waits are deferred RPC calls, never a held lock. */
#ifndef TR_HEAD_H
#define TR_HEAD_H

#include <pthread.h>
#include <stdint.h>

#include "config.h"
#include "err.h"
#include "liveness.h"
#include "rpc.h"
#include "store.h"
#include "troupe/v1/troupe.pb-c.h"

typedef struct tr_head_config {
    char *listen;
    char *state_dir;
    char *token;
    int64_t heartbeat_ms;
    int64_t suspect_after;
    int64_t dead_after;
    int64_t max_frame_bytes;
    int64_t contexts;
    int sync_full;
    char *log_level;
    char *advertise; /* URL workers use to reach the head */
    int64_t master_port_base;
    int64_t master_port_count;
} tr_head_config;

extern const tr_cfg_desc tr_head_config_table[];

typedef struct tr_head_node {
    Troupe__V1__Node *n;      /* owned, an unpacked message (malloc allocator) */
    int64_t seen_mono;        /* tr_now_ms() of the last heartbeat */
    uint64_t version;         /* assignment version: bumps when its worker set changes */
    tr_rpc_call *sync_waiter; /* a deferred NodeSync long poll, or NULL */
    int64_t sync_until;       /* tr_now_ms() when to answer the long poll anyway */
    /* Jobs that have (or had) a worker record on this node and are not yet
     * known settled: a superset, pruned when walked (jobs_sync.c), so a
     * NodeSync looks at this node's jobs instead of every active one. */
    struct tr_head_job **placed;
    size_t n_placed, cap_placed;
} tr_head_node;

struct tr_head_job;
struct tr_sched;
struct tr_head;
struct tr_commit_waiter;
struct tr_head_ev;

/* Called under h->mu once the batch holding a change is on disk; must answer
 * the call (commit.c). */
typedef void (*tr_commit_fn)(struct tr_head *h, tr_rpc_call *call, uint64_t arg);

typedef struct tr_head {
    tr_head_config cfg;
    tr_liveness_cfg live;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tr_store *store;
    tr_rpc_server *srv;
    tr_head_node *nodes;
    size_t n_nodes, cap_nodes;
    int64_t started_ms; /* wall clock; changes on every start (agents notice) */
    struct tr_sched *sched;
    struct tr_head_job **jobs; /* in id order */
    size_t n_jobs, cap_jobs;
    size_t first_unsettled;    /* jobs below this index are settled */
    struct tr_port_map *ports; /* master port band per master address (jobs.c) */
    int stopping;
    pthread_t reaper;

    /* Group commit (commit.c): what changed since the last batch. */
    pthread_t committer;
    pthread_cond_t commit_cv;
    int commit_started, commit_stop;
    uint64_t *dirty_jobs, *dirty_nodes;
    size_t n_dirty_jobs, cap_dirty_jobs, n_dirty_nodes, cap_dirty_nodes;
    struct tr_head_ev *events, **events_tail;
    struct tr_commit_waiter *waiters, **waiters_tail;
    uint64_t next_id[2]; /* TR_ID_NODES, TR_ID_JOBS: never reused */
    int ids_dirty;
    uint64_t batches, batched_records;
} tr_head;

enum { TR_ID_NODES = 0, TR_ID_JOBS = 1 };

/* Group commit (commit.c); all under h->mu except start/stop. */
int tr_head_commit_start(tr_head *h, tr_err *err);
void tr_head_commit_stop(tr_head *h); /* writes what is left, then stops */
void tr_head_dirty_job(tr_head *h, uint64_t id);
void tr_head_dirty_node(tr_head *h, uint64_t id);
void tr_head_event(tr_head *h, const char *kind, uint64_t node, uint64_t job, const char *msg);
uint64_t tr_head_new_id(tr_head *h, int table);
void tr_head_after_commit(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg);
/* tr_head_after_commit_owned: arg is a pointer that drop frees once the call
 * is answered, fails or expires (fn must not free it). */
void tr_head_after_commit_owned(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg,
                                void (*drop)(void *));

/* tr_head_start opens the store, recovers state, starts the RPC server and
 * the liveness reaper. */
int tr_head_start(tr_head *h, tr_err *err);

/* tr_head_stop stops serving and frees everything (config excluded). */
void tr_head_stop(tr_head *h);

/* Node registry (nodes.c). Handlers take h->mu themselves. */
void tr_head_ping(tr_rpc_call *call, void *user);
void tr_head_register_node(tr_rpc_call *call, void *user);
void tr_head_heartbeat(tr_rpc_call *call, void *user);
void tr_head_list_nodes(tr_rpc_call *call, void *user);
void tr_head_get_cluster(tr_rpc_call *call, void *user);
int tr_head_nodes_recover(tr_head *h, tr_err *err);
void tr_head_nodes_reap(tr_head *h); /* caller holds h->mu */
void tr_head_nodes_free(tr_head *h);
tr_head_node *tr_head_node_find(tr_head *h, uint64_t id);

#endif
