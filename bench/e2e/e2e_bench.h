/* e2e_bench.h - internals of troupe-bench-e2e (bench/e2e), shared by its files.
 *
 * The benchmark drives a real troupe-head process end to end:
 *
 *  - cycles: 1,000 simulated nodes (4, 8 and 16 GPUs) registered through
 *    RegisterNode, the bench playing their agents; K client threads each loop
 *    submit (libtroupe) -> job RUNNING -> stop -> the agents of the involved
 *    nodes report their complete worker lists (NodeSync) -> the job's workers
 *    are settled and its GPUs back with the scheduler. One loop is one cycle,
 *    the analogue of one Ray placement group create + remove.
 *  - startup: a head and 4 real troupe-node agents with 16 fake GPUs each; the
 *    time from submit of a 64 x 1-GPU job until all 64 workers are RUNNING.
 *
 * Every process the bench starts is recorded in one place (procs.c) and killed
 * on every exit path, signals included. */
#ifndef E2E_BENCH_H
#define E2E_BENCH_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rpc.h"
#include "troupe/client.h"

/* ---- procs.c: child processes and temp dirs ------------------------------ */

/* eb_procs_init installs the handlers that kill every child on exit and on
 * SIGINT/SIGTERM/SIGHUP. Call once, before starting anything. */
void eb_procs_init(void);

/* eb_spawn starts argv[0] (posix_spawn: no fork after nng is up) with stdout
 * and stderr appended to log_path; the child is recorded for cleanup. 0 and
 * *pid, or -1 with errno. */
int eb_spawn(char *const argv[], const char *log_path, pid_t *pid);

/* eb_stop sends SIGTERM, waits up to grace_ms, then SIGKILLs; always reaps
 * and forgets the child. */
void eb_stop(pid_t pid, int grace_ms);

/* eb_alive reports whether a child is still running (reaps it if not). */
int eb_alive(pid_t pid);

/* eb_free_port asks the kernel for a free loopback TCP port; 0 on failure. */
int eb_free_port(void);

/* eb_tmpdir makes a fresh directory under base (or $TMPDIR, /var/tmp) that is
 * removed at exit; returns 0 and the path in out. */
int eb_tmpdir(const char *base, const char *tag, char *out, size_t size);

/* eb_rmtree removes a directory tree (best effort). */
void eb_rmtree(const char *path);

/* ---- head.c: one troupe-head process -------------------------------------- */

typedef struct eb_head {
    pid_t pid;
    int port;
    char url[64];
    char dir[512]; /* state dir, on disk */
    char log[600];
} eb_head;

typedef struct eb_head_opts {
    const char *bin;
    const char *tmp_base; /* where state dirs go */
    int sync_full;
    const char *log_level;
    int sim; /* 1: heartbeat settings that keep silent simulated nodes ALIVE */
} eb_head_opts;

/* eb_head_start starts a head on a free port and waits (10 s) until it
 * answers Ping. 0, or -1 with why. */
int eb_head_start(const eb_head_opts *o, eb_head *h, char *why, size_t why_size);

/* eb_head_stop stops it (SIGTERM, then SIGKILL) and removes its state dir. */
void eb_head_stop(eb_head *h);

/* eb_head_tail copies the last `lines` lines of the head's log to stderr
 * (before eb_head_stop removes it), so a failed run shows what the head saw. */
void eb_head_tail(const eb_head *h, int lines);

/* ---- agents.c: simulated node agents ------------------------------------- */

typedef struct eb_node {
    uint64_t id;
    unsigned gpus;
    tr_rpc_client *rpc; /* the agent's own connection, open for the whole run */
    pthread_mutex_t mu; /* one agent per node: its syncs never overlap */
} eb_node;

typedef struct eb_cluster {
    eb_node *nodes; /* sorted by id */
    size_t n;
    unsigned gpus_total;
} eb_cluster;

/* eb_cluster_register registers n nodes of 4/8/16 GPUs (a third each,
 * shuffled) through RegisterNode, from `threads` threads, each node over a
 * connection of its own that stays open until eb_cluster_free: the head
 * takes a node whose agent's connection closed for a dead agent (SUSPECT at
 * once, DEAD after disconnect_ms) and places nothing on it. 0, or -1 with
 * why. */
int eb_cluster_register(const char *url, size_t n, int threads, eb_cluster *c, double *seconds, char *why,
                        size_t why_size);

/* eb_cluster_check asks the head (GetCluster) whether every node of c is
 * ALIVE with all its GPUs; 0, or -1 with what the head reports instead. */
int eb_cluster_check(const char *url, const eb_cluster *c, char *why, size_t why_size);

/* eb_cluster_free closes the agents' connections and frees c. */
void eb_cluster_free(eb_cluster *c);

eb_node *eb_cluster_find(eb_cluster *c, uint64_t id);

/* eb_agent_sync plays node's agent once, over the node's own connection, as
 * worker/node/sync.c would after its long poll returned: it reads the node's
 * assignment set and version (NodeSync, wait_ms 0, no reports, version 0,
 * which settles nothing), then
 * reports every assigned worker RUNNING with that version. Workers the head
 * placed there but the set no longer lists (a stopped job) are thereby absent
 * and settle as exited. *n_rpcs counts the calls. 0, or a troupe_status. */
int eb_agent_sync(eb_node *node, uint32_t timeout_ms, unsigned *n_rpcs, tr_err *err);

/* ---- cycles.c: place + release loops -------------------------------------- */

typedef struct eb_cell {
    int sync_full;
    int workers; /* W: one group of W workers x 1 GPU */
    int clients; /* K: concurrent client threads */
    int batch;   /* B: groups per SubmitJobs/StopJobs call; 1 = one-job calls */
    int ran;
    uint64_t cycles; /* groups placed and released in the window */
    uint64_t errors;
    double window_s;
    double per_s, p50_ms, p99_ms, place_p50_ms, release_p50_ms;
    double rpcs_per_cycle;
    uint64_t jobs_before;             /* jobs the head already held when the cell began */
    double head_cpu_ms, bench_cpu_ms; /* CPU time per counted cycle (user + system) */
    double load1;                     /* 1-minute load average when the cell began */
    char note[256];
} eb_cell;

typedef struct eb_cycle_opts {
    const char *url;
    const char *head_log; /* named in errors */
    pid_t head_pid;       /* for its CPU time */
    eb_cluster *cluster;
    int warmup_ms, duration_ms;
    uint32_t cycle_deadline_ms; /* a cycle longer than this is an error */
} eb_cycle_opts;

/* eb_cycles_run measures one cell; fills cell. 0, or -1 (note says why): a
 * cell with an error, or one that completed no cycle in its window. */
int eb_cycles_run(const eb_cycle_opts *o, eb_cell *cell);

/* ---- startup.c: submit -> all workers RUNNING with real agents ------------ */

typedef struct eb_startup {
    int ran;
    int reps, done;
    int nodes, gpus_per_node, workers;
    double ms[16];         /* submit -> all RUNNING, per rep */
    double release_ms[16]; /* stop -> all GPUs free again, per rep */
    double median_ms, min_ms, release_median_ms;
    char note[256];
} eb_startup;

typedef struct eb_startup_opts {
    const char *head_bin, *node_bin, *tmp_base, *log_level;
    int reps;
} eb_startup_opts;

int eb_startup_run(const eb_startup_opts *o, eb_startup *s);

/* ---- report.c ------------------------------------------------------------- */

double eb_ray_ref(int workers, const char **label);
void eb_report_table(const eb_cell *cells, size_t n, const eb_startup *s, size_t nodes, double reg_s[2]);
int eb_report_goals(const eb_cell *cells, size_t n);
int eb_report_json(const char *path, const char *settings, const eb_cell *cells, size_t n,
                   const eb_startup *s);

/* ---- small helpers -------------------------------------------------------- */

/* eb_proc_cpu_s returns a process's user + system CPU seconds (0 = self). */
double eb_proc_cpu_s(pid_t pid);
double eb_load1(void);

double eb_now_s(void);
int eb_cmp_double(const void *a, const void *b);
double eb_pct(const double *sorted, size_t n, double p);

#endif
