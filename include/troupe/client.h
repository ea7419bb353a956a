/*
 * troupe/client.h - libtroupe, the C client of troupe-head.
 *
 * Everything here is the API; nothing else in libtroupe is. Conventions:
 * - Functions return a troupe_status (gRPC numbering, 0 = OK). When `err` is
 *   not NULL it receives the same code and a sentence naming the cause, as the
 *   head or the transport stated it.
 * - Out-params are zeroed on entry. Whoever allocates provides the free:
 *   results from troupe_* calls are released with the matching troupe_*_free.
 * - A troupe_client may be used from several threads at once.
 * - libtroupe never prints, exits or aborts inside your process.
 */
#ifndef TROUPE_CLIENT_H
#define TROUPE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TROUPE_DEFAULT_HEAD "tcp://127.0.0.1:7770"

typedef struct troupe_error {
    int code;          /* troupe_status */
    char message[512]; /* NUL-terminated; empty on OK */
} troupe_error;

typedef struct troupe_client troupe_client;

typedef struct troupe_client_opts {
    const char *head_url;   /* NULL: $TROUPE_HEAD, then TROUPE_DEFAULT_HEAD */
    const char *token;      /* NULL: token_file, then $TROUPE_TOKEN, then the file named by
                             * $TROUPE_TOKEN_FILE, then by $TROUPE_CREDENTIALS (a worker's
                             * own credential), then none */
    uint32_t timeout_ms;    /* per-call deadline; 0 = 10000 */
    const char *token_file; /* NULL: see token; a file holding the credential */
    /* tls+tcp:// heads. NULL: $TROUPE_TLS_CA, $TROUPE_TLS_CERT, $TROUPE_TLS_KEY,
     * $TROUPE_TLS_SERVER_NAME. tls_ca (the CA that signed the head's
     * certificate) is required; a client certificate only where the head asks. */
    const char *tls_ca;
    const char *tls_cert;
    const char *tls_key;
    const char *tls_server_name; /* default: the host in head_url */
} troupe_client_opts;

/* troupe_client_open connects to the head. Returns UNAVAILABLE ("cannot reach
 * URL: ...") when nothing listens there. On OK, *out is freed with
 * troupe_client_close. opts may be NULL for all defaults. */
TROUPE_API troupe_status troupe_client_open(troupe_client **out, const troupe_client_opts *opts,
                                            troupe_error *err);

/* troupe_client_close disconnects and frees; NULL is a no-op. No call may be
 * in flight on c. */
TROUPE_API void troupe_client_close(troupe_client *c);

/* troupe_client_url returns the head URL in use; valid until close. */
TROUPE_API const char *troupe_client_url(const troupe_client *c);

/* troupe_ping round-trips len bytes (idempotent). */
TROUPE_API troupe_status troupe_ping(troupe_client *c, const void *data, size_t len, troupe_error *err);

typedef enum troupe_node_state {
    TROUPE_NODE_UNKNOWN = 0,
    TROUPE_NODE_ALIVE = 1,
    TROUPE_NODE_SUSPECT = 2,
    TROUPE_NODE_DEAD = 3,
    TROUPE_NODE_LEFT = 4, /* its agent stopped and deregistered; final like DEAD */
} troupe_node_state;

/* troupe_node_state_name returns "ALIVE", "SUSPECT", "DEAD", "LEFT" or "UNKNOWN". */
TROUPE_API const char *troupe_node_state_name(int state);

typedef struct troupe_gpu {
    uint32_t index;
    const char *model;
    uint64_t memory_bytes;
    const char *uuid;
    int simulated;
    /* Live figures from the agent's latest heartbeat (NVML where the driver
     * is, made up for --fake-gpus); stats 0 = none (see troupe_node.gpu_source). */
    int stats;
    uint64_t memory_used_bytes;
    uint32_t utilization_pct, temperature_c, power_mw;
} troupe_gpu;

typedef struct troupe_label {
    const char *key;
    const char *value;
} troupe_label;

typedef struct troupe_node {
    uint64_t id;
    const char *name;
    const char *hostname;
    const char *address;
    troupe_node_state state;
    const char *reason;    /* why it is in this state */
    int64_t registered_ms; /* unix ms */
    int64_t last_seen_ms;
    uint32_t pid;
    uint32_t gpus_free;
    size_t n_gpus;
    const troupe_gpu *gpus;
    size_t n_labels;
    const troupe_label *labels;
    uint32_t stop_grace_ms; /* the agent's SIGTERM-to-SIGKILL grace (0: unknown, older agent) */
    int draining;            /* troupe drain: no new placements */
    uint64_t replaces;       /* the earlier node of this name it came back as; 0 = none */
    uint32_t fenced_workers; /* workers of its earlier self still running: takes no new work until 0 */
    int has_nsys;            /* its agent found nsys on its PATH (profile: {nsys: true} can run there) */
    /* Live node figures from the agent's latest heartbeat; stats_ms 0 = none yet. */
    int64_t stats_ms;            /* the agent's clock when measured (unix ms) */
    const char *gpu_source;      /* "nvml", "simulated", "none: WHY"; "" before the first */
    double load1;                /* 1-minute load average */
    uint64_t mem_total_bytes, mem_available_bytes;
    const char *isolation; /* who its agent runs workers as ("per-worker uid A-B", "shared uid N ...",
                              "none: ..." = refuses jobs); "" from older agents */
    /* Why the head cannot send the node its assignments (a worker too large
     * for one frame, an agent that takes no parts); "" when it can. */
    const char *sync_error;
    /* CPU slots for CPU-only workers (resources: {gpu: 0}; troupe-node
     * --cpus) and how many are free now (fractions: workers may take 0.5). */
    uint32_t cpus;
    double cpus_free;
} troupe_node;

typedef struct troupe_node_list {
    size_t count;
    const troupe_node *nodes; /* all strings and arrays live inside the list */
} troupe_node_list;

/* troupe_list_nodes lists registered nodes (DEAD ones only when include_dead)
 * in id order, every one: it asks the head for as many pages as it takes
 * (each page fits in a frame). Free *out with troupe_node_list_free.
 * Idempotent. */
TROUPE_API troupe_status troupe_list_nodes(troupe_client *c, int include_dead, troupe_node_list **out,
                                           troupe_error *err);

/* troupe_node_list_free frees a list; NULL is a no-op. */
TROUPE_API void troupe_node_list_free(troupe_node_list *list);

typedef struct troupe_drain_result {
    uint64_t node_id;
    char name[128];
    troupe_node_state state;
    int draining;
    uint32_t running_jobs; /* jobs that still have a worker on the node */
} troupe_drain_result;

/* troupe_drain_node marks a node (name or id) draining (undrain = 0: no new
 * placements, its jobs run on) or placeable again (undrain = 1), and fills
 * *out. Idempotent: call it again to see running_jobs fall. NOT_FOUND for an
 * unknown node. */
TROUPE_API troupe_status troupe_drain_node(troupe_client *c, const char *node, int undrain,
                                           troupe_drain_result *out, troupe_error *err);

typedef struct troupe_cluster {
    uint32_t nodes_alive, nodes_suspect, nodes_dead, nodes_left; /* left: deregistered on purpose */
    uint32_t gpus_total, gpus_free;
    char head_version[32];
    int64_t head_started_ms;
    uint64_t requests_served;
    uint32_t jobs_pending, jobs_running, jobs_succeeded, jobs_failed, jobs_stopped;
    /* The head's state store. While store_failing it cannot write (e.g. a
     * full disk): it refuses new work with RESOURCE_EXHAUSTED, keeps
     * store_unsaved changes in memory and retries them by itself. */
    int store_failing;
    char store_error[512];          /* why, while failing; "" otherwise */
    int64_t store_failing_since_ms; /* wall clock; 0 while writing */
    uint64_t store_failed_writes;   /* writes that failed since the head started */
    uint64_t store_unsaved;
    char http_url[128]; /* where the head serves /metrics and its dashboard; "" = off */
    /* RPC connections: bounds before authentication (README, Security). */
    uint64_t connections_open, connections_unauthenticated, connections_max;
    uint64_t connections_refused;     /* at the cap, every connection had authenticated */
    uint64_t connections_displaced;   /* never-authenticated ones closed at the cap */
    uint64_t connections_closed_idle; /* preauth_timeout_ms / idle_timeout_ms */
    uint64_t frames_oversized;        /* refused over max_frame_bytes (logged) */
    uint64_t frame_limit_bytes;       /* largest frame accepted now */
    /* Job counts above are of saved states. While the store cannot write, a
     * job whose latest change is not on disk is counted here instead. */
    uint32_t jobs_unsaved;
    /* Liveness: the heartbeat period agents are told now (it grows with the
     * cluster beyond the head's max_heartbeats_per_s) and the DEAD timeout,
     * which does not. */
    uint32_t heartbeat_ms, dead_ms;
    /* CPU slots for CPU-only workers (resources: {gpu: 0}) on ALIVE and
     * SUSPECT nodes, as gpus_total: their agents' --cpus added up, and how
     * many are free now (fractions: a worker may take 0.5). */
    uint32_t cpus_total;
    double cpus_free;
} troupe_cluster;

/* troupe_get_cluster fills *out with the cluster totals. Idempotent. */
TROUPE_API troupe_status troupe_get_cluster(troupe_client *c, troupe_cluster *out, troupe_error *err);

/* ---- jobs ---------------------------------------------------------------- */

typedef enum troupe_job_state {
    TROUPE_JOB_UNKNOWN = 0,
    TROUPE_JOB_PENDING = 1,
    TROUPE_JOB_RUNNING = 2,
    TROUPE_JOB_SUCCEEDED = 3,
    TROUPE_JOB_FAILED = 4,
    TROUPE_JOB_STOPPED = 5,
} troupe_job_state;

typedef enum troupe_worker_state {
    TROUPE_WORKER_UNKNOWN = 0,
    TROUPE_WORKER_PENDING = 1,
    TROUPE_WORKER_RUNNING = 2,
    TROUPE_WORKER_EXITED = 3,
    TROUPE_WORKER_FAILED_TO_START = 4,
    TROUPE_WORKER_LOST = 5,
} troupe_worker_state;

/* troupe_job_state_name / troupe_worker_state_name: static names. */
TROUPE_API const char *troupe_job_state_name(int state);
TROUPE_API const char *troupe_worker_state_name(int state);

typedef struct troupe_worker {
    const char *name; /* "job7-policy-3" */
    const char *group;
    uint32_t rank, local_rank, local_world_size, node_rank;
    uint64_t node_id;
    const char *node_name;
    size_t n_gpus;
    const uint32_t *gpus; /* GPU indices on its node (CUDA_VISIBLE_DEVICES) */
    troupe_worker_state state;
    int exit_code, signal; /* when EXITED */
    uint32_t pid, attempt;
    const char *message;
    int64_t started_ms, ended_ms;
    int paused; /* RUNNING but stopped by a signal (SIGSTOP): shown as PAUSED */
    const char *nsys_report; /* profile: {nsys: true}: the report nsys wrote on its node ("" = none) */
    int removed;             /* no longer a member of its elastic group (it shrank this worker away) */
    uint32_t member_rank;    /* its rank in the group's current membership (= rank until it shrinks) */
    uint32_t regrown;        /* times its slot was grown back since it last ran well */
    int regrow_stopped;      /* its replacements failed more often than restart.max_restarts: not grown back */
} troupe_worker;

typedef struct troupe_group {
    const char *name;
    const char *master_addr;
    uint32_t master_port;
    uint32_t world_size;  /* ranks now: below placed_size after an elastic group shrank */
    uint32_t placed_size; /* the group's workers in the spec */
    uint32_t min_workers, max_workers; /* elastic: {...}; both 0 when the group is not elastic */
    uint32_t epoch;       /* an elastic group's communicator epoch (attempt + membership changes) */
} troupe_group;

/* One change of an elastic group's membership, oldest first in troupe_job. */
typedef struct troupe_membership_change {
    int64_t ts_ms;
    const char *group;
    const char *kind; /* "SHRUNK" or "GREW" */
    uint32_t from_size, to_size, epoch;
    uint64_t step;      /* the last step the group reported then (0 = none yet) */
    const char *worker; /* the worker that left or joined */
    const char *text;   /* "SHRUNK policy 3 -> 2 at step 20: rank 2 (job7-policy-2 on nb) killed by SIGKILL; epoch 1" */
} troupe_membership_change;

typedef struct troupe_job_event {
    int64_t ts_ms; /* unix ms */
    const char *kind;
    const char *message;
} troupe_job_event;

typedef struct troupe_job {
    uint64_t id;
    const char *name;
    troupe_job_state state;
    const char *reason; /* why it is PENDING, or how it ended */
    int64_t submitted_ms, started_ms, ended_ms;
    uint32_t restarts, max_restarts;
    uint32_t workers_total; /* sum of the groups' workers */
    uint64_t version;       /* bumps on every change; see troupe_wait_job */
    size_t n_workers;       /* placed workers (0 until placed; 0 in listings) */
    const troupe_worker *workers;
    size_t n_groups;
    const troupe_group *groups;
    size_t n_events; /* lifecycle history, oldest first (latest 64) */
    const troupe_job_event *events;
    uint32_t events_dropped; /* older history entries not in events */
    size_t n_waits;          /* rendezvous waits in progress (troupe_get_job only) */
    const struct troupe_rdzv_wait *waits;
    const struct troupe_profile *profile; /* never NULL in troupe_get_job results; NULL in listings */
    int64_t next_restart_ms; /* unix ms of a restart waiting out its crash-loop back-off; 0 = none */
    size_t n_failures;       /* failures workers reported (troupe_worker_fail), in arrival order */
    const struct troupe_failure *failures;
    uint32_t failures_dropped; /* older reports no longer kept (the head keeps the latest 32) */
    const struct troupe_job_health *health; /* never NULL in troupe_get_job results and listings */
    const char *owner; /* who submitted it: "user:ID", "admin:ID", "admin"; "" without auth or unknown */
    size_t n_membership; /* elastic groups' membership changes, oldest first (latest 64); 0 in listings */
    const troupe_membership_change *membership;
} troupe_job;

/* ---- built-in trace (worker.h: spans of profiled steps) ------------------- */

/* One span, on the head's clock. */
typedef struct troupe_trace_span {
    const char *name; /* "step 3", "forward", "barrier ready", "all-reduce" */
    const char *cat;  /* "step", "phase", "rdzv", "coll" */
    int64_t ts_us;    /* start, unix us (head clock) */
    int64_t dur_us;
    uint64_t step;
    uint32_t tid;  /* the worker's thread */
    uint32_t rank; /* global rank of its worker (groups in spec order) */
} troupe_trace_span;

/* One worker attempt that sent spans. */
typedef struct troupe_trace_worker {
    const char *worker, *group, *node;
    uint32_t rank, group_rank, attempt;
    int64_t offset_us, rtt_us; /* clock offset applied (head - worker) and its probe's round trip */
    uint64_t spans, dropped;
} troupe_trace_worker;

typedef struct troupe_trace {
    size_t n_spans; /* in the order the head received them */
    const troupe_trace_span *spans;
    size_t n_workers;
    const troupe_trace_worker *workers;
} troupe_trace;

/* troupe_get_trace fetches every span the head holds for a job (page by
 * page). Free with troupe_trace_free. NOT_FOUND for an unknown job; a job
 * whose workers profiled nothing yet gives an empty trace. The head keeps
 * traces in memory: a head restart forgets them. */
TROUPE_API troupe_status troupe_get_trace(troupe_client *c, uint64_t job_id, troupe_trace **out,
                                          troupe_error *err);
TROUPE_API void troupe_trace_free(troupe_trace *t);

/* A failure a worker reported before it exited (worker.h troupe_worker_fail). */
typedef struct troupe_failure {
    const char *worker, *group, *node;
    uint32_t rank, attempt; /* rank in its group; the attempt it reported from */
    const char *code;       /* "DEADLINE_EXCEEDED" */
    const char *reason;
    int64_t ts_ms;          /* head wall clock when received */
} troupe_failure;

/* ---- job health -----------------------------------------------------------------
 * The head judges every RUNNING job from the step figures its workers report
 * (troupe_worker_step_end): STALLED when ranks made no step for stall_after,
 * stragglers (step time above a factor of the group's median), and GPU
 * memory growing per step or near capacity. Thresholds: `health:` in the job
 * spec over the head's health_* settings (README). */
typedef enum troupe_health_state {
    TROUPE_HEALTH_NONE = 0,    /* not judged: not running, or no step reported yet */
    TROUPE_HEALTH_OK = 1,
    TROUPE_HEALTH_STALLED = 2,
} troupe_health_state;

/* troupe_health_state_name: "NONE", "OK", "STALLED" (static). */
TROUPE_API const char *troupe_health_state_name(int state);

/* A rank the head names (strings live as long as the job). */
typedef struct troupe_health_rank {
    const char *worker, *group, *node;
    uint32_t rank;
    size_t n_gpus;
    const uint32_t *gpus;
    uint64_t last_step;       /* its last step; 0 = none */
    int64_t since_ms;         /* stalled: unix ms of its last step (or of its group's first, if it had none) */
    double step_ms;           /* straggler: its median step time over the window */
    double group_step_ms;     /* ... the group's median */
    double ratio;             /* ... step_ms / group_step_ms */
    double memory_bytes;      /* memory: latest allocated GPU memory */
    double memory_slope;      /* ... growth in bytes per step (when growing) */
    double memory_total;      /* ... the GPU's capacity; 0 = unknown */
    int memory_growing, memory_near;
    int by_compute;           /* straggler: step_ms and group_step_ms are compute times (forward +
                                 backward + optimizer, the all-reduce wait left out), not whole steps */
} troupe_health_rank;

typedef struct troupe_job_health {
    troupe_health_state state;
    int64_t stall_after_ms; /* in force (the smallest of the groups') */
    int64_t judged_ms;      /* unix ms */
    int on_stall_fail;      /* health.on_stall: fail (a stall fails the group) */
    size_t n_stalled, n_stragglers, n_memory;
    const troupe_health_rank *stalled, *stragglers, *memory;
    int ended; /* the job ended: its last judgement while it ran, kept; not judged again */
} troupe_job_health;

/* A rendezvous (IDs, barrier or all-gather) that ranks are waiting in. */
typedef struct troupe_rdzv_wait {
    const char *comm;
    uint32_t epoch;
    const char *what; /* "ids", "barrier:NAME", "gather:NAME" */
    uint32_t size, arrived;
    size_t n_missing;             /* the first 32 */
    const char *const *missing;   /* "2 job7-policy-2 on node-b" */
} troupe_rdzv_wait;

/* A job's profiling setting: the spec's (profile: or NRL_NSYS_* env) and the
 * run-time one set by troupe_set_profile, which wins once set (version > 0). */
typedef struct troupe_profile {
    const char *spec_steps, *spec_workers; /* "" when the spec has none */
    uint64_t version;                      /* 0 = never set at run time */
    int off;
    const char *steps;                     /* "A:B", or "" */
    uint32_t next, align;                  /* relative: next N steps, from a multiple of align */
    const char *workers;
    int64_t set_ms;
} troupe_profile;

typedef struct troupe_job_list {
    size_t count;
    const troupe_job *jobs;
    uint64_t next_cursor; /* troupe_list_jobs_page: the next page's cursor; 0 = no more */
} troupe_job_list;

/* What troupe_list_jobs_page lists; zeroed = the newest 100 jobs. */
typedef struct troupe_list_opts {
    uint32_t limit;       /* at most this many (0 = 100; the head caps it at 1000 and
                           * returns fewer when more would not fit in its frame) */
    uint64_t cursor;      /* a previous page's next_cursor; 0 = from the start */
    int oldest_first;     /* default: newest first */
    int active_only;      /* only PENDING and RUNNING */
    uint32_t states;      /* bit (1u << troupe_job_state) per state wanted; 0 = any */
    const char *name;     /* fnmatch glob on the job name; NULL or "" = any */
} troupe_list_opts;

/* troupe_submit_file parses a job YAML file (errors name file:line:col) and
 * submits it. On OK *job_id is the new job's id. An impossible placement is
 * FAILED_PRECONDITION with the numbers in err. Not retried (not idempotent). */
TROUPE_API troupe_status troupe_submit_file(troupe_client *c, const char *path, uint64_t *job_id,
                                            troupe_error *err);

/* troupe_submit_yaml is troupe_submit_file for text in memory; name is used in
 * messages and base_dir resolves a relative workdir (NULL = cwd). */
TROUPE_API troupe_status troupe_submit_yaml(troupe_client *c, const char *text, size_t len, const char *name,
                                            const char *base_dir, uint64_t *job_id, troupe_error *err);

/* troupe_get_job fetches one job with its workers. Free *out with
 * troupe_job_free. NOT_FOUND for an unknown id. Idempotent. */
TROUPE_API troupe_status troupe_get_job(troupe_client *c, uint64_t job_id, troupe_job **out,
                                        troupe_error *err);

/* troupe_wait_job is troupe_get_job that waits (up to wait_ms) until the
 * job's version differs from after_version: a change notification without
 * polling. */
TROUPE_API troupe_status troupe_wait_job(troupe_client *c, uint64_t job_id, uint64_t after_version,
                                         uint32_t wait_ms, troupe_job **out, troupe_error *err);

/* troupe_job_free frees a job; NULL is a no-op. */
TROUPE_API void troupe_job_free(troupe_job *job);

/* troupe_list_jobs lists jobs (all the head keeps, or only PENDING/RUNNING)
 * in id order, without per-worker detail, page by page (see
 * troupe_list_jobs_page). Free with troupe_job_list_free. */
TROUPE_API troupe_status troupe_list_jobs(troupe_client *c, int active_only, troupe_job_list **out,
                                          troupe_error *err);
TROUPE_API void troupe_job_list_free(troupe_job_list *list);

/* troupe_list_jobs_page lists one page of jobs (opts may be NULL), without
 * per-worker detail; pass (*out)->next_cursor as opts->cursor for the next.
 * Free with troupe_job_list_free. Idempotent. */
TROUPE_API troupe_status troupe_list_jobs_page(troupe_client *c, const troupe_list_opts *opts,
                                               troupe_job_list **out, troupe_error *err);

/* troupe_delete_job deletes a finished job (ended, no worker left) with its
 * events and log. FAILED_PRECONDITION while it is active (stop it first),
 * NOT_FOUND for an unknown id. Returns once the deletion is on disk. */
TROUPE_API troupe_status troupe_delete_job(troupe_client *c, uint64_t job_id, troupe_error *err);

/* troupe_stop_job stops a job: SIGTERM to its workers' process groups, then
 * SIGKILL after the node's grace period. FAILED_PRECONDITION if it already
 * ended. Returns at once; watch with troupe_wait_job until no worker runs. */
TROUPE_API troupe_status troupe_stop_job(troupe_client *c, uint64_t job_id, troupe_error *err);

/* ---- specs and batches ---------------------------------------------------
 * A parsed job spec can be submitted many times without parsing again, and
 * many jobs can be submitted or stopped in one call: one round trip, one
 * group commit. This is the shape of Ray's placement-group microbenchmark
 * (create 100, wait, remove 100); the items are the same work as the
 * one-job calls, with the same checks and records. */

typedef struct troupe_spec troupe_spec; /* a parsed, validated job spec */

/* troupe_spec_parse / troupe_spec_load parse YAML as troupe_submit_yaml /
 * troupe_submit_file do (errors name file:line:col). Free with
 * troupe_spec_free. */
TROUPE_API troupe_status troupe_spec_parse(const char *text, size_t len, const char *name,
                                           const char *base_dir, troupe_spec **out, troupe_error *err);
TROUPE_API troupe_status troupe_spec_load(const char *path, troupe_spec **out, troupe_error *err);
TROUPE_API void troupe_spec_free(troupe_spec *spec);

/* troupe_submit_spec submits a parsed spec (not retried). */
TROUPE_API troupe_status troupe_submit_spec(troupe_client *c, const troupe_spec *spec, uint64_t *job_id,
                                            troupe_error *err);

#define TROUPE_BATCH_MAX 4096 /* items per batch call */

typedef struct troupe_batch_item {
    uint64_t job_id;        /* 0 for a refused submit */
    troupe_status code;     /* this item's outcome */
    const char *message;    /* why, when code != OK; "" otherwise */
    troupe_job_state state; /* the job's state when the head acknowledged it */
    const char *reason;
    const troupe_job *job; /* TROUPE_BATCH_JOBS: the job as placed (workers,
                              nodes, GPUs); NULL otherwise. Owned by the batch:
                              never troupe_job_free it. */
} troupe_batch_item;

typedef struct troupe_batch {
    size_t count;  /* one item per input, in order */
    size_t failed; /* items whose code is not OK */
    const troupe_batch_item *items;
} troupe_batch;

#define TROUPE_BATCH_JOBS 1u /* submit: return each placed job with its workers */

/* troupe_submit_batch submits n parsed specs in one call (n <=
 * TROUPE_BATCH_MAX). Jobs are admitted in order and placed as one-by-one
 * submits would place them; the reply comes once every accepted job is on
 * disk. When the head answered, *out holds one item per spec (free with
 * troupe_batch_free) and the return is OK if every item is OK, else the
 * first failed item's code with err naming it; on any other error *out is
 * NULL. Not retried (not idempotent). */
TROUPE_API troupe_status troupe_submit_batch(troupe_client *c, const troupe_spec *const *specs, size_t n,
                                             unsigned flags, troupe_batch **out, troupe_error *err);

/* troupe_stop_batch stops n jobs in one call, each as troupe_stop_job would
 * (NOT_FOUND / FAILED_PRECONDITION per item); results as troupe_submit_batch. */
TROUPE_API troupe_status troupe_stop_batch(troupe_client *c, const uint64_t *job_ids, size_t n,
                                           troupe_batch **out, troupe_error *err);

/* troupe_batch_free frees a batch and the jobs in it; NULL is a no-op. */
TROUPE_API void troupe_batch_free(troupe_batch *batch);

/* troupe_read_logs returns whole log lines ("[worker] text\n") from offset
 * (only `worker`'s lines when it is not NULL/empty). With wait_ms > 0 it waits
 * for new output. *data is malloc'ed: free it with troupe_free. *done is set
 * when the job has ended and everything was read. */
TROUPE_API troupe_status troupe_read_logs(troupe_client *c, uint64_t job_id, const char *worker,
                                          uint64_t offset, uint32_t wait_ms, char **data, size_t *len,
                                          uint64_t *next_offset, int *done, troupe_error *err);

/* troupe_token_create mints a credential of scope "user" or "node" that
 * expires after ttl_s seconds (0 = never); needs the admin credential. On OK
 * *token is the credential text (shown once: the head keeps only its hash;
 * free with troupe_free), *id names it for troupe_token_revoke and
 * *expires_ms is its unix expiry (0 = never). */
TROUPE_API troupe_status troupe_token_create(troupe_client *c, const char *scope, uint64_t ttl_s, char **token,
                                             uint64_t *id, int64_t *expires_ms, troupe_error *err);

/* troupe_token_spec: what troupe_token_create_spec mints. */
typedef struct troupe_token_spec {
    const char *scope;  /* "user", "node" or "admin" (a minted admin: may do everything the admin may) */
    uint64_t ttl_s;     /* 0 = never expires */
    const char *node;   /* node scope: the one node name it may register; NULL/"" = the first it registers */
    uint32_t max_nodes; /* node scope: node names it may register in all; 0 = 1 */
} troupe_token_spec;

/* troupe_token_create_spec is troupe_token_create with every option; the
 * same outputs, the same ownership. */
TROUPE_API troupe_status troupe_token_create_spec(troupe_client *c, const troupe_token_spec *spec,
                                                  char **token, uint64_t *id, int64_t *expires_ms,
                                                  troupe_error *err);

/* troupe_token_revoke makes credential id stop working at once (NOT_FOUND
 * when there is none); needs the admin credential. */
TROUPE_API troupe_status troupe_token_revoke(troupe_client *c, uint64_t id, troupe_error *err);

/* troupe_free frees memory libtroupe handed out as a plain buffer. */
TROUPE_API void troupe_free(void *p);

/* What troupe_set_profile asks for: off, or an absolute range "A:B"
 * (1-based, A inclusive, B exclusive), or the next N steps after each worker
 * sees the change (from the next multiple of align when align > 0); workers
 * are comma-separated fnmatch globs on group and worker names. */
typedef struct troupe_profile_req {
    int off;
    const char *steps;
    uint32_t next, align;
    const char *workers;
} troupe_profile_req;

/* troupe_set_profile changes a running job's profiling setting; durable (a
 * restarted head keeps it), delivered to every worker before its next step
 * boundary. INVALID_ARGUMENT for a bad range or patterns, NOT_FOUND for an
 * unknown job, FAILED_PRECONDITION for one that ended. *version (may be NULL)
 * is the setting's new version. Not retried. */
TROUPE_API troupe_status troupe_set_profile(troupe_client *c, uint64_t job_id, const troupe_profile_req *req,
                                            uint64_t *version, troupe_error *err);

/* ---- metrics (troupe metrics) ---------------------------------------------- */

/* One scalar a worker reported (troupe_worker_metric). value may be NaN or
 * +-inf, as reported. id is the head's order of arrival (a cursor). */
typedef struct troupe_metric_point {
    uint64_t id, seq, step;
    const char *worker;
    uint32_t attempt;
    const char *name;
    double value;
    int64_t ts_ms; /* worker clock, unix ms */
} troupe_metric_point;

/* Per worker attempt: points stored and points known lost (dropped by the
 * worker, from gaps in its sequence numbers); reported - last_seq is what
 * the head has not heard about yet. */
typedef struct troupe_metric_stream {
    const char *worker;
    uint32_t attempt;
    uint64_t stored, dropped, last_seq, reported, worker_dropped;
} troupe_metric_stream;

/* What troupe_get_metrics asks for; zeroed = the first page of everything. */
typedef struct troupe_metrics_query {
    const char *const *workers; /* only these workers (NOT_FOUND for one not in the job) */
    size_t n_workers;           /* at most 64 */
    const char *const *names;   /* only these metric names */
    size_t n_names;             /* at most 64 */
    uint64_t after_id;          /* a previous page's next_id: points after it */
    uint32_t last;              /* with after_id 0: only the newest N matching points */
    uint32_t limit;             /* page size; 0 = 5000, at most 20000 */
    uint32_t wait_ms;           /* > 0: when no point matches yet, the head holds the call until one
                                 * is stored (answered then) or this long has passed (an empty page);
                                 * at most 60000. Following without polling. */
} troupe_metrics_query;

typedef struct troupe_metrics_page {
    size_t n_points;
    const troupe_metric_point *points; /* in order of arrival (per worker: seq order) */
    size_t n_streams;
    const troupe_metric_stream *streams;
    uint64_t next_id; /* pass as after_id for the next page, or to follow */
    int more;         /* another page is ready now */
    uint64_t kept;    /* points of the job on disk */
    uint64_t trimmed; /* points of the job removed by the head's retention (metrics_keep) */
} troupe_metrics_page;

/* troupe_get_metrics reads one page of a job's metrics (q may be NULL).
 * NOT_FOUND for an unknown job or worker. Free with troupe_metrics_page_free.
 * Idempotent. With q->wait_ms the call's deadline is the client's timeout
 * plus wait_ms. */
TROUPE_API troupe_status troupe_get_metrics(troupe_client *c, uint64_t job_id, const troupe_metrics_query *q,
                                            troupe_metrics_page **out, troupe_error *err);
TROUPE_API void troupe_metrics_page_free(troupe_metrics_page *p);

#ifdef __cplusplus
}
#endif
#endif
