/* head.h - troupe-head's state, shared by its modules: the head struct, its
 * lock, start and stop. Its parts have headers of their own, included here:
 * the settings (head_config.h), a node's record (head_node.h), the service
 * table (head_service.h), the group commit (commit.h), the events the core
 * publishes (events.h), the state dir's lock (statedir.h) and the stop
 * signals (shutdown.h).
 *
 * What runs where:
 * - RPC handlers run on the RPC server's handler threads (rpc_threads;
 *   common/rpc_server.c): nng's aio callback threads only queue requests,
 *   since they must never block. Handlers take h->mu, read or change state
 *   in memory, and either reply or defer the call before returning; the
 *   reply is written after they return, with no lock held, and a deferred
 *   call's reply (made under h->mu by an event) is written by a handler
 *   thread. One handler thread is kept for Ping, which takes no lock, so it
 *   is answered while the others wait for h->mu. They do no file or database I/O: a
 *   change that must be durable is marked for the group commit
 *   (tr_head_dirty_*, tr_head_after_commit), job log output is appended to
 *   memory (joblog.h), and long waits are deferred calls, never a held lock.
 *   The one exception, a submit's statvfs of the stores' disks
 *   (tr_head_space_look), comes before it takes h->mu.
 * - The committer thread (commit.c) is the only one that touches SQLite; it
 *   holds h->mu only to take a batch and to answer the parked replies.
 * - The log I/O thread (joblog.c) does every open/read/write/unlink of job
 *   log files; it holds h->mu only to take work and publish results.
 * - The reaper (head.c, a background worker: bgw.h) moves node liveness
 *   along, expires job waits and applies job retention (jobs_retain.c),
 *   under h->mu, without I/O; the services' timers (rdzv.c, kv.c, profile.c: background workers, bgw.h)
 *   likewise expire their own waits.
 * - The RPC server's sweeper answers deferred calls whose deadline passed and
 *   then calls their on_expire hooks, which take h->mu to forget them.
 * One mutex (mu) guards everything below it; once the head serves, nothing
 * holds it across I/O (start-up recovery reads the store and stats log files
 * under it, before the RPC server listens). Log lines (TR_LOG) made under it
 * are formatted there and written to stderr by the log writer thread.
 *
 * Lock order, the one place it is written (a lock may be taken while holding
 * those above it, never the other way round):
 *
 *     h->mu
 *       -> a service's own lock (health, metrics follower, report queue;
 *          rendezvous, the job store and profile have none: they use h->mu)
 *       -> h->auth->mu (credentials)
 *       -> h->auth->wmu (the workers' copy that authenticates worker
 *          credentials without h->mu; auth.c): a leaf
 *       -> the RPC server's mu (call state, deferred list)
 *       -> the RPC server's qmu (handler queues), conns_mu (connections):
 *          leaves, never held together nor with mu
 *       -> the log ring's lock (common/log.c): a leaf under everything
 *     h->pipe_mu: a leaf, the only lock of the connection-closed callback.
 *
 * The RPC server holds none of its locks while a handler, an on_expire hook
 * or an nng send runs; a report queue's writer holds no queue lock while a
 * service callback runs. */
#ifndef TR_HEAD_H
#define TR_HEAD_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#include "commit.h"
#include "config.h"
#include "err.h"
#include "events.h"
#include "head_config.h"
#include "head_node.h"
#include "head_service.h"
#include "liveness.h"
#include "rpc.h"
#include "shutdown.h"
#include "statedir.h"
#include "store.h"
#include "troupe/v1/troupe.pb-c.h"

struct tr_head_job;
struct tr_sched;
struct tr_head;
struct tr_commit_waiter;
struct tr_head_ev;

typedef struct tr_head {
    tr_head_config cfg;
    tr_liveness_cfg live;
    pthread_mutex_t mu;
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
    uint64_t node_cpus_live; /* CPU slots (--cpus) of ALIVE and SUSPECT nodes, as node_gpus_live */
    int64_t started_ms; /* wall clock; changes on every start (agents notice) */
    struct tr_sched *sched;
    struct tr_head_job **jobs; /* in id order */
    size_t n_jobs, cap_jobs;
    size_t first_unsettled;    /* jobs below this index are settled */
    struct tr_port_map *ports; /* master port band per master address (jobs.c) */
    struct tr_bgw *reaper; /* liveness, job waits, retention (head.c); set and cleared under pipe_mu */
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
    const tr_commit_source *const *commit_src; /* what it saves, in order (head.c) */
    size_t n_commit_src;
    /* The sources' marks: jobs_save.c's (changed, deleted; a job also
     * carries its own mark) and nodes.c's. A mark that found no memory for
     * its list sets rescan: the next batch walks every record. */
    tr_commit_ids dirty_jobs, deleted_jobs, dirty_nodes;
    int rescan_jobs, rescan_nodes;
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
    tr_events evbus; /* who hears the core's events (events.h) */
    /* The layers above the core, attached before tr_head_start
     * (rpc/handlers.h: tr_rpc_attach): the head's own methods, and a check
     * of a job spec at admission that only they can make (the size of the
     * spec's NodeSync assignments; NULL = none). */
    const tr_rpc_method *core_methods;
    int (*spec_check)(struct tr_head *h, const Troupe__V1__JobSpec *spec, tr_err *err);
    /* The last step a group reported (the health service sets it at its
     * start; NULL: unknown), named in an elastic group's membership changes. */
    uint64_t (*group_step)(struct tr_head *h, const struct tr_head_job *hj, const char *group, void *arg);
    void *group_step_arg;
    tr_rpc_method *methods; /* core_methods and the services' (head.c) */
    int64_t retained_ms; /* tr_now_ms() of the last retention pass (jobs_retain.c) */

    /* Store health (commit.c). Batches are numbered as they are taken: a
     * change made now is carried by batch taken_seq + 1 (tr_head_change_seq)
     * and is on disk once saved_seq reaches it. A batch that cannot be
     * written (disk full, I/O error, out of memory) is kept, not dropped:
     * its records are marked again and retried, its callers stay parked,
     * and until a write succeeds the head refuses new work. */
    uint64_t taken_seq, saved_seq;
    int store_failing, commit_nudge;
    int64_t store_failing_since_ms; /* wall clock */
    uint64_t store_failed_writes;   /* batches that could not be written, ever */
    char store_error[512];
    int store_code;       /* the status of the last failed write (RESOURCE_EXHAUSTED: full) */
    tr_commit_space space; /* the stores' disks, as the committer last looked */
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

/* tr_head_start opens the store, recovers state, starts the RPC server and
 * the liveness reaper. */
int tr_head_start(tr_head *h, tr_err *err);

/* tr_head_stop stops serving and frees everything (config excluded). */
void tr_head_stop(tr_head *h);

#endif
