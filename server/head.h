/* head.h - troupe-head's state, shared by its modules.
 *
 * What runs where:
 * - RPC handlers run on nng's aio callback threads, which must never block.
 *   They take h->mu, read or change state in memory, and either reply or
 *   defer the call before returning. They do no file or database I/O: a
 *   change that must be durable is marked for the group commit
 *   (tr_head_dirty_*, tr_head_after_commit), job log output is appended to
 *   memory (joblog.h), and long waits are deferred calls, never a held lock.
 * - The committer thread (commit.c) is the only one that touches SQLite; it
 *   holds h->mu only to take a batch and to answer the parked replies.
 * - The log I/O thread (joblog.c) does every open/read/write/unlink of job
 *   log files; it holds h->mu only to take work and publish results.
 * - The reaper thread (head.c) moves node liveness along, expires job waits
 *   and applies job retention (jobs_list.c), under h->mu, without I/O; the
 *   services' timers (rdzv.c, profile.c) likewise expire their own waits.
 * - The RPC server's sweeper answers deferred calls whose deadline passed and
 *   then calls their on_expire hooks, which take h->mu to forget them.
 * One mutex (mu) guards everything below it; once the head serves, nothing
 * holds it across I/O (start-up recovery reads the store and stats log files
 * under it, before the RPC server listens). */
#ifndef TR_HEAD_H
#define TR_HEAD_H

#include <pthread.h>
#include <signal.h>
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
    char *token_file;
    int64_t heartbeat_ms;
    int64_t suspect_after;
    int64_t dead_after;
    int64_t lease_ms;      /* agents' lease (liveness.h); 0 = automatic */
    int64_t disconnect_ms; /* closed connection -> DEAD after this */
    int64_t node_sync_max_ms; /* longest a NodeSync long poll is held (node_sync.h) */
    int64_t max_heartbeats_per_s; /* the period told grows beyond it (liveness.h); 0 = fixed */
    int64_t max_frame_bytes;
    int64_t contexts;
    int64_t max_connections; /* bounds before authentication (rpc.h) */
    int64_t fd_reserve;
    int64_t inflight_budget_bytes;
    int64_t preauth_timeout_ms;
    int64_t idle_timeout_ms;
    char *tls_cert; /* tls+tcp:// (rpc.h: tr_rpc_tls) */
    char *tls_key;
    char *tls_client_ca;
    char *tls_client_auth; /* none | nodes | all */
    int sync_full;
    char *log_level;
    char *advertise; /* URL workers use to reach the head */
    int64_t master_port_base;
    int64_t master_port_count;
    int64_t restart_grace_ms; /* after a start: how long unplaceable PENDING jobs wait for agents */
    int64_t restart_backoff_ms;     /* first crash-loop restart delay; doubles per quick failure */
    int64_t restart_backoff_max_ms; /* its cap; an attempt that ran 2x this long resets it */
    int64_t shutdown_timeout_ms;    /* bound on the stop after SIGTERM (shutdown.c) */
    int64_t max_job_log_bytes; /* per job, at the head (joblog.h) */
    int64_t max_log_memory_bytes;                /* output not yet written, all jobs (joblog.h) */
    int64_t metrics_max_bytes, traces_max_bytes; /* bounds of metrics.db and traces.db */
    char *metrics_dir, *traces_dir;              /* where they are; NULL = state_dir */
    int64_t min_free_bytes;                      /* new work is refused with less free on a store's disk */
    int64_t keep_jobs;         /* finished jobs kept (jobs_list.c) */
    int64_t keep_days;         /* finished jobs kept at most this long; 0 = no limit */
    int64_t metrics_keep;      /* metric points kept per job (metrics.c) */
    int64_t store_max_keys;    /* the job store's bounds, per job (kv.c) */
    int64_t store_max_bytes;
    int64_t ingest_nice;       /* nice added to the report writers' threads (report_queue.h) */
    /* Job health defaults (health.c); a job's `health:` overrides each. */
    int64_t health_stall_min_ms;
    double health_stall_factor;
    char *health_on_stall; /* "warn" | "fail" */
    double health_straggler_factor;
    int64_t health_straggler_window;
    int64_t health_memory_window;
    double health_memory_slope_mb;
    double health_memory_near;
    int64_t health_tick_ms;
    char *http;                /* HTTP address (server/http), "off" = none */
    int64_t http_idle_ms;      /* HTTP connections idle this long are closed */
    int64_t http_max_conn_ms;  /* ... and those open this long */
    int64_t http_max_conns;    /* ... and the most idle past this many */
} tr_head_config;

extern const tr_cfg_desc tr_head_config_table[];

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

/* tr_head_name_hash returns a 64-bit hash of a node name (FNV-1a). */
uint64_t tr_head_name_hash(const char *name);

struct tr_head_job;
struct tr_sched;
struct tr_head;
struct tr_commit_waiter;
struct tr_head_ev;

/* Called under h->mu once the batch holding a change is on disk; must answer
 * the call (commit.c). */
typedef void (*tr_commit_fn)(struct tr_head *h, tr_rpc_call *call, uint64_t arg);

/* A head service built on the core (rendezvous, profile control): the head
 * knows services only through this table, so they depend on the core and
 * never the other way round. Register with tr_head_add_service before
 * tr_head_start. All hooks but start/stop run under h->mu. */
typedef struct tr_head_service {
    const char *name;
    const tr_rpc_method *methods; /* NULL-terminated; joins the head's table */
    /* start: after recovery, before the RPC server listens (h->mu not held). */
    int (*start)(struct tr_head *h, void **state, tr_err *err);
    /* stop: after the RPC server stopped (deferred calls already answered). */
    void (*stop)(struct tr_head *h, void *state);
    /* job_changed: a job's record changed (state, workers, attempts). */
    void (*job_changed)(struct tr_head *h, struct tr_head_job *hj, void *state);
    /* job_saved: every change of the job made so far is on disk (commit.c,
     * through tr_jobs_job_saved): what may only show saved state answers. */
    void (*job_saved)(struct tr_head *h, struct tr_head_job *hj, void *state);
    /* decorate: on = 1 before a job message is packed for a reply, to set
     * transient fields; on = 0 right after, to clear them. */
    void (*decorate)(struct tr_head *h, struct tr_head_job *hj, int on, void *state);
    /* list_fields: like decorate, for a listing's shallow copy of hj's
     * message (ListJobs sets many before one reply is packed, so what it
     * sets must belong to that copy alone); on = 0 clears them after. */
    void (*list_fields)(struct tr_head *h, struct tr_head_job *hj, Troupe__V1__Job *copy, int on, void *state);
    /* job_deleted: the job's record is gone (DeleteJob, retention); the
     * service drops what it keeps of it. Under h->mu: no I/O here. */
    void (*job_deleted)(struct tr_head *h, uint64_t job_id, void *state);
} tr_head_service;

#define TR_HEAD_MAX_SERVICES 8

typedef struct tr_head {
    tr_head_config cfg;
    tr_liveness_cfg live;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tr_store *store;
    tr_rpc_server *srv;
    tr_head_node *nodes;
    size_t n_nodes, cap_nodes;
    struct tr_bound_names *bound_names; /* owned node names per credential (auth.c), made on first use */
    /* Nodes by state (index: Troupe__V1__NodeState, 0..4) and the GPUs of
     * those not gone (DEAD, LEFT), kept as nodes are added and change state
     * (nodes.c: nodes_count): GetCluster answers without a walk over every
     * node under h->mu (1.6 ms at 10,000 nodes, 20 times a second in the
     * bench, while every heartbeat waited for the lock). */
    uint32_t nodes_by_state[5];
    int64_t period_logged_ms; /* the heartbeat period last logged (tr_head_heartbeat_period) */
    uint64_t node_gpus_live;
    int64_t started_ms; /* wall clock; changes on every start (agents notice) */
    struct tr_sched *sched;
    struct tr_head_job **jobs; /* in id order */
    size_t n_jobs, cap_jobs;
    size_t first_unsettled;    /* jobs below this index are settled */
    struct tr_port_map *ports; /* master port band per master address (jobs.c) */
    int stopping;
    pthread_t reaper;
    int lock_fd;         /* holds the flock on state_dir/head.lock (statedir.c) */
    int64_t grace_until; /* tr_now_ms() when the restart grace ends (cfg.restart_grace_ms) */
    int grace_over;      /* the pass at its end has run */
    /* The node grace (jobs.c): a node that was ALIVE or SUSPECT left or died
     * at node_gone_ms; until node_grace_until the queue waits for it (its
     * agent restarting) as after a head start. 0 = none open. */
    int64_t node_grace_until;
    char node_gone_name[64];
    char node_gone_state[8]; /* "LEFT" or "DEAD" */

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

    struct tr_logio *logio; /* job log I/O thread and its queues (joblog.c) */
    uint64_t log_unsaved;   /* output held in memory, not yet in a file (joblog.c) */
    int log_refusing;       /* reports are refused: log_unsaved reached its bound */
    const tr_head_service *svc[TR_HEAD_MAX_SERVICES];
    void *svc_state[TR_HEAD_MAX_SERVICES];
    size_t n_svc;
    tr_rpc_method *methods; /* the core's and the services' (head.c) */
    uint64_t *deleted_jobs; /* deleted since the last batch (commit.c) */
    size_t n_deleted_jobs, cap_deleted_jobs;
    int64_t retained_ms; /* tr_now_ms() of the last retention pass (jobs_list.c) */

    /* Store health (commit.c). Batches are numbered as they are taken: a
     * change made now is carried by batch taken_seq + 1 (tr_head_change_seq)
     * and is on disk once saved_seq reaches it. A batch that cannot be
     * written (disk full, I/O error, out of memory) is kept, not dropped:
     * its records are marked again and retried, its callers stay parked,
     * and until a write succeeds the head refuses new work. */
    uint64_t taken_seq, saved_seq;
    int store_failing, rescan_jobs, rescan_nodes, commit_nudge;
    int64_t store_failing_since_ms; /* wall clock */
    uint64_t store_failed_writes;   /* batches that could not be written, ever */
    char store_error[512];
    int store_code;       /* the status of the last failed write (RESOURCE_EXHAUSTED: full) */
    struct tr_auth *auth; /* credentials (auth.c) */
    /* Connections closed, noted by the RPC server's pipe callback (which
     * must not take mu) and turned into node state by the reaper. */
    pthread_mutex_t pipe_mu;
    uint32_t closed_pipes[64];
    size_t n_closed_pipes;
    int closed_overflow; /* more closed than fit: check every node */
    /* Where HTTP is served ("" = off), written by server/http before it
     * serves and read by GetCluster (troupe status). */
    char http_url[128];
} tr_head;

enum { TR_ID_NODES = 0, TR_ID_JOBS = 1 };

/* tr_commit_calloc_hook (unit tests only; NULL otherwise): when set, the
 * writer makes the allocations of taking a batch (the record array, each
 * packed record) through it, under h->mu, so a test can make them fail. */
extern void *(*tr_commit_calloc_hook)(size_t n, size_t size);
/* tr_commit_write_hook (unit tests only; NULL otherwise): called by the
 * writer with a batch taken, h->mu released, right before it is written. */
extern void (*tr_commit_write_hook)(void);

/* Group commit (commit.c); all under h->mu except start/stop. */
int tr_head_commit_start(tr_head *h, tr_err *err);
void tr_head_commit_stop(tr_head *h); /* writes what is left, then stops */
void tr_head_dirty_job(tr_head *h, uint64_t id);
void tr_head_dirty_node(tr_head *h, uint64_t id);
void tr_head_event(tr_head *h, const char *kind, uint64_t node, uint64_t job, const char *msg);
uint64_t tr_head_new_id(tr_head *h, int table);
/* tr_head_forget_job: the next batch deletes the job's record and events. */
void tr_head_forget_job(tr_head *h, uint64_t id);
void tr_head_after_commit(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg);
/* tr_head_after_commit_owned: arg is a pointer that drop frees once the call
 * is answered, fails or expires (fn must not free it). */
/* tr_head_change_seq: the batch that will carry a change made now. */
uint64_t tr_head_change_seq(const tr_head *h);
/* tr_head_wait_saved waits (h->mu held, released while waiting) until the
 * batch seq is on disk, at most ms, and returns 1 once it is; 0 when the
 * time ran out, the store cannot write, or the head is stopping. For
 * threads of the head's own that answer from memory (HTTP), as
 * tr_head_after_commit is for RPC calls. */
int tr_head_wait_saved(tr_head *h, uint64_t seq, int64_t ms);
/* tr_head_commit_nudge asks for a batch even if nothing is marked (so that
 * what waits for saved_seq to move is answered). */
void tr_head_commit_nudge(tr_head *h);
/* tr_head_store_refuse answers call RESOURCE_EXHAUSTED (with a hint naming
 * the state dir and its free space) and returns 1 while the store cannot
 * write; 0 otherwise. Handlers that would make new changes call it first. */
int tr_head_store_refuse(tr_head *h, tr_rpc_call *call);
/* tr_head_space_refuse is tr_head_store_refuse for new work (submit): it
 * also refuses, RESOURCE_EXHAUSTED, while the disk of the state dir, of
 * metrics.db or of traces.db has less than min_free_bytes free, whichever
 * file filled it, with the sizes of the stores and what to do. Under h->mu. */
int tr_head_space_refuse(tr_head *h, tr_rpc_call *call);
/* tr_head_store_unsaved counts changes waiting for the disk. */
size_t tr_head_store_unsaved(const tr_head *h);
/* tr_head_after_commit_or_resend: for calls whose sender re-sends the same
 * thing until it is acknowledged (an agent's report): if the batch carrying
 * the change cannot be written, the call is answered UNAVAILABLE at once
 * (the change stays in memory and is retried) instead of being held. */
void tr_head_after_commit_or_resend(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg);
/* tr_head_after_batch: for calls that only read (GetCluster, GetJob,
 * ListJobs) and wait for the batch in flight to show saved state: fn runs
 * after the next batch whether it was saved or not; after a failed one
 * store_failing is set and fn answers as the store stands (a reader parked
 * with tr_head_after_commit waited for a write that may never come, to its
 * call's deadline). drop as for tr_head_after_commit_owned; may be NULL. */
void tr_head_after_batch(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg, void (*drop)(void *));
/* tr_head_commit_waiters: calls parked for the next batch (h->mu held). */
size_t tr_head_commit_waiters(const tr_head *h);
void tr_head_after_commit_owned(tr_head *h, tr_rpc_call *call, tr_commit_fn fn, uint64_t arg,
                                void (*drop)(void *));

/* tr_head_add_service registers s (borrowed for the head's life) before
 * tr_head_start; RESOURCE_EXHAUSTED past TR_HEAD_MAX_SERVICES. */
int tr_head_add_service(tr_head *h, const tr_head_service *s, tr_err *err);
/* tr_head_job_changed / tr_head_decorate call the services' hooks (h->mu). */
void tr_head_job_changed(tr_head *h, struct tr_head_job *hj);
void tr_head_job_saved(tr_head *h, struct tr_head_job *hj);
void tr_head_decorate(tr_head *h, struct tr_head_job *hj, int on);
void tr_head_list_fields(tr_head *h, struct tr_head_job *hj, Troupe__V1__Job *copy, int on);
void tr_head_job_deleted(tr_head *h, uint64_t job_id);
/* State dir checks at start (statedir.c): the exclusive lock (FAILED_PRECONDITION
 * naming the holder's pid when another head has it), and ids that never go
 * backwards: tr_head_id_seen raises the counter past an id found on disk. */
int tr_head_lock_state_dir(tr_head *h, tr_err *err);
void tr_head_unlock_state_dir(tr_head *h);
void tr_head_id_seen(tr_head *h, int table, uint64_t id, const char *where);
void tr_head_ids_past_logs(tr_head *h);

/* Stop signals (shutdown.c). tr_head_stop_signals_catch installs handlers
 * for SIGTERM and SIGINT that write the signal number to a self-pipe and
 * blocks them for the threads started afterwards; call it before any thread
 * starts. tr_head_stop_signal_wait unblocks them in its own thread, blocks
 * until one arrives and returns its number. Whichever thread runs the handler
 * (ours, or one we did not start, like a sanitizer runtime's), the signal
 * reaches the pipe: none is swallowed. tr_head_shutdown_deadline then bounds the shutdown: after
 * timeout_ms, or at a second stop signal, the process logs and exits with
 * status 1. */
int tr_head_stop_signals_catch(tr_err *err);
int tr_head_stop_signal_wait(void);
void tr_head_shutdown_deadline(int64_t timeout_ms);

/* tr_head_start opens the store, recovers state, starts the RPC server and
 * the liveness reaper. */
int tr_head_start(tr_head *h, tr_err *err);

/* tr_head_tls_client_auth maps none|nodes|all to TR_TLS_CLIENT_* (-1: unknown). */
int tr_head_tls_client_auth(const char *mode);

/* tr_head_check_tls checks the TLS settings together with listen. */
int tr_head_check_tls(const tr_head_config *cfg, tr_err *err);

/* tr_head_check_liveness checks the liveness settings together. */
int tr_head_check_liveness(const tr_head_config *c, tr_err *err);

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
/* tr_head_heartbeat_period (h->mu held): the period to ask of agents now,
 * from the number of ALIVE and SUSPECT nodes (tr_liveness_period_ms); a
 * change is logged once. tr_head_node_told also records it as told to hn,
 * whose silence is then judged by the longer of its last two periods. */
int64_t tr_head_heartbeat_period(tr_head *h);
int64_t tr_head_node_told(tr_head *h, tr_head_node *hn);
void tr_head_nodes_free(tr_head *h);
tr_head_node *tr_head_node_find(tr_head *h, uint64_t id);
/* tr_head_node_transition moves a node to a state, commits and logs it, and
 * tells jobs; caller holds h->mu. */
void tr_head_node_transition(tr_head *h, tr_head_node *hn, int state, const char *reason);
/* tr_head_node_gone: DEAD or LEFT, final. */
int tr_head_node_gone(const Troupe__V1__Node *n);

/* Node lifecycle (node_life.c). */
void tr_head_deregister_node(tr_rpc_call *call, void *user);
void tr_head_drain_node(tr_rpc_call *call, void *user);
void tr_head_pipe_closed(uint32_t pipe, void *user);  /* RPC server callback */
void tr_head_nodes_check_pipes(tr_head *h);           /* reaper, under h->mu */
void tr_head_node_seen(tr_head *h, tr_head_node *hn, tr_rpc_call *call); /* under h->mu */
/* tr_head_node_fence_until: tr_now_ms() by which every worker of a lost node
 * has been killed by its agent's lease; work from it is placed again only
 * after (0 = nothing to wait for). */
int64_t tr_head_node_fence_until(tr_head *h, const Troupe__V1__Node *n);

#endif
