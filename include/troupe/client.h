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
    const char *head_url; /* NULL: $TROUPE_HEAD, then TROUPE_DEFAULT_HEAD */
    const char *token;    /* NULL: $TROUPE_TOKEN, then none */
    uint32_t timeout_ms;  /* per-call deadline; 0 = 10000 */
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
} troupe_node_state;

/* troupe_node_state_name returns "ALIVE", "SUSPECT", "DEAD" or "UNKNOWN". */
TROUPE_API const char *troupe_node_state_name(int state);

typedef struct troupe_gpu {
    uint32_t index;
    const char *model;
    uint64_t memory_bytes;
    const char *uuid;
    int simulated;
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
} troupe_node;

typedef struct troupe_node_list {
    size_t count;
    const troupe_node *nodes; /* all strings and arrays live inside the list */
} troupe_node_list;

/* troupe_list_nodes lists registered nodes (DEAD ones only when include_dead)
 * in id order. Free *out with troupe_node_list_free. Idempotent. */
TROUPE_API troupe_status troupe_list_nodes(troupe_client *c, int include_dead, troupe_node_list **out,
                                           troupe_error *err);

/* troupe_node_list_free frees a list; NULL is a no-op. */
TROUPE_API void troupe_node_list_free(troupe_node_list *list);

typedef struct troupe_cluster {
    uint32_t nodes_alive, nodes_suspect, nodes_dead;
    uint32_t gpus_total, gpus_free;
    char head_version[32];
    int64_t head_started_ms;
    uint64_t requests_served;
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
} troupe_worker;

typedef struct troupe_group {
    const char *name;
    const char *master_addr;
    uint32_t master_port;
    uint32_t world_size;
} troupe_group;

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
} troupe_job;

typedef struct troupe_job_list {
    size_t count;
    const troupe_job *jobs;
} troupe_job_list;

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

/* troupe_list_jobs lists jobs (all, or only PENDING/RUNNING) in id order,
 * without per-worker detail. Free with troupe_job_list_free. */
TROUPE_API troupe_status troupe_list_jobs(troupe_client *c, int active_only, troupe_job_list **out,
                                          troupe_error *err);
TROUPE_API void troupe_job_list_free(troupe_job_list *list);

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

/* troupe_free frees memory libtroupe handed out as a plain buffer. */
TROUPE_API void troupe_free(void *p);

#ifdef __cplusplus
}
#endif
#endif
