/*
 * troupe/worker.h - the worker runtime: what a process started by troupe
 * calls to meet the other ranks of its job and to be profiled on demand.
 *
 * A worker opens one troupe_worker_ctx from the environment troupe-node gives
 * it (TROUPE_HEAD, TROUPE_JOB, TROUPE_GROUP, TROUPE_WORKER, TROUPE_ATTEMPT,
 * RANK, WORLD_SIZE, ...), then:
 * - rendezvous: rank 0 of a communicator publishes its NCCL unique ID(s), the
 *   others wait for them (a long poll with a deadline, never a retry loop);
 * - barriers and small all-gathers (e.g. every rank's listen address);
 * - steps: troupe_worker_step_begin/_end around each training step. They are
 *   local (no network); a background thread keeps a long poll to the head
 *   for control changes (`troupe profile`, stop requests), and step_end's
 *   figures (loss, tokens/s, step time, GPU memory) go out with the metrics.
 *
 * Communicators. By default a communicator is a worker group, named after it
 * (pass NULL or "" for the worker's own group); its ranks are the group's
 * RANKs. A job may declare communicators across groups in its YAML
 * (`communicators: [{name: refit, groups: [policy, generation]}]`): ranks are
 * the first group's ranks, then the next group's, and so on.
 *
 * Epochs. Every (re)initialisation of a communicator has an epoch: the
 * highest attempt (TROUPE_ATTEMPT) among its workers, so a restarted group
 * meets in a new epoch and can never receive the IDs of the old one. Once a
 * call of this handle has seen a communicator's epoch, later barriers and
 * gathers on it name that epoch; when the communicator moved on (a group
 * restarted) they fail FAILED_PRECONDITION naming the current epoch, and the
 * caller initialises again (troupe_worker_comm_info, then IDs).
 *
 * Deadlines. A wait that runs out fails DEADLINE_EXCEEDED and err names the
 * ranks that never arrived, with their workers and nodes ("1 of 4 ranks never
 * arrived: 3 job7-policy-3 on node-b"). `troupe job` shows the same while
 * ranks wait.
 *
 * Profiling (NeMo RL's semantics): a step range "A:B" (1-based, A inclusive,
 * B exclusive) and worker patterns (comma-separated fnmatch globs, matched
 * against the group name and the worker name). From the job's `profile:`, or
 * NRL_NSYS_PROFILE_STEP_RANGE / NRL_NSYS_WORKER_PATTERNS in its env, or at run
 * time with `troupe profile JOB --steps A:B --workers PATTERNS` (also --next N,
 * --align K, --off). On a profiled step the runtime calls cudaProfilerStart
 * at step_begin, cudaProfilerStop at the first step_begin past the range (or
 * at close), loading libcudart at run time (no link dependency); every step
 * is an NVTX range "step N" where libnvToolsExt is present. With
 * opts.caller_profiles the caller does both itself (troupe.torch through
 * torch) and step_begin's *profile says when.
 *
 * Conventions as in client.h: troupe_status results, err (may be NULL) gets
 * the code and a sentence; out-params zeroed on entry; the library never
 * prints or aborts. A troupe_worker_ctx may be used from several threads,
 * except step_begin/_end, which belong to the thread that runs the steps.
 */
#ifndef TROUPE_WORKER_H
#define TROUPE_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/client.h"
#include "troupe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TROUPE_NCCL_ID_BYTES 128 /* sizeof(ncclUniqueId) */
#define TROUPE_MAX_NCCL_IDS 16   /* IDs per publish (ncclCommInitRankScalable) */
#define TROUPE_MAX_BLOB 4096     /* bytes per rank in troupe_worker_allgather */

typedef struct troupe_worker_ctx troupe_worker_ctx;

typedef struct troupe_worker_opts {
    const char *head_url;     /* NULL: $TROUPE_HEAD */
    uint32_t wait_ms;         /* default deadline of waits given 0; 0 = 300000 (5 min) */
    int no_control;           /* 1: no background control poll (profile only from the spec/env) */
    int caller_profiles;      /* 1: the caller starts and stops the CUDA profiler and pushes NVTX
                               * ranges itself (troupe.torch does, through torch's own CUDA
                               * runtime); the runtime still decides which steps are profiled,
                               * answers it from step_begin and records their spans */
} troupe_worker_opts;

/* What the environment says about this worker; strings live until close. */
typedef struct troupe_worker_self {
    uint64_t job_id;
    const char *job_name;
    const char *group;
    const char *worker; /* "job7-policy-3" */
    uint32_t rank, world_size, local_rank, attempt;
} troupe_worker_self;

/* A communicator as this worker sees it. */
typedef struct troupe_comm_info {
    uint32_t epoch, rank, size;
} troupe_comm_info;

/* troupe_worker_open reads the environment troupe-node sets and connects to
 * the head. Outside troupe it returns FAILED_PRECONDITION naming the first
 * missing variable ("TROUPE_JOB is not set: this program runs under troupe
 * (troupe submit)"). The credential is the content of the file named by
 * TROUPE_CREDENTIALS (a trailing newline dropped), else $TROUPE_TOKEN. Starts
 * the control thread unless opts->no_control. opts may be NULL. On OK free
 * *out with troupe_worker_close. */
TROUPE_API troupe_status troupe_worker_open(troupe_worker_ctx **out, const troupe_worker_opts *opts,
                                            troupe_error *err);

/* troupe_worker_close stops profiling if it is on, stops the control thread
 * and frees; NULL is a no-op. No other call may be in flight on w. */
TROUPE_API void troupe_worker_close(troupe_worker_ctx *w);

/* troupe_worker_self_info returns the worker's identity (borrowed, valid until
 * close). */
TROUPE_API const troupe_worker_self *troupe_worker_self_info(const troupe_worker_ctx *w);

/* troupe_worker_comm_info asks the head for this worker's rank in
 * communicator comm (NULL/"" = its group), its size and current epoch. For a
 * communicator across groups this is how a worker learns whether it is rank
 * 0. NOT_FOUND when the job declares no such communicator, PERMISSION_DENIED
 * when the worker is not a member. */
TROUPE_API troupe_status troupe_worker_comm_info(troupe_worker_ctx *w, const char *comm, troupe_comm_info *info,
                                                 troupe_error *err);

/* troupe_worker_publish_ids: rank 0 of comm publishes n_ids (1..16) IDs of
 * TROUPE_NCCL_ID_BYTES bytes, back to back in ids (e.g. an ncclUniqueId
 * array). Returns once the head has them on disk; every waiting rank is
 * answered at once. Publishing the same bytes again is harmless; other
 * bytes in the same epoch are ALREADY_EXISTS. A rank other than 0 gets
 * INVALID_ARGUMENT. info (may be NULL) receives the communicator. */
TROUPE_API troupe_status troupe_worker_publish_ids(troupe_worker_ctx *w, const char *comm, const void *ids,
                                                   size_t n_ids, troupe_comm_info *info, troupe_error *err);

/* troupe_worker_wait_ids: a rank other than 0 waits up to wait_ms (0 = the
 * handle's default) for comm's IDs of the current epoch; on OK ids holds
 * *n_ids of them (at most max_ids; more published is OUT_OF_RANGE with the
 * count in err). DEADLINE_EXCEEDED names the missing ranks. */
TROUPE_API troupe_status troupe_worker_wait_ids(troupe_worker_ctx *w, const char *comm, void *ids, size_t max_ids,
                                                size_t *n_ids, uint32_t wait_ms, troupe_comm_info *info,
                                                troupe_error *err);

/* troupe_worker_barrier returns once every rank of comm called it with the
 * same name (the k-th call with a name meets the others' k-th call), or fails
 * at wait_ms naming the ranks that never arrived. */
TROUPE_API troupe_status troupe_worker_barrier(troupe_worker_ctx *w, const char *comm, const char *name,
                                               uint32_t wait_ms, troupe_error *err);

/* One rank's blob in an all-gather result. */
typedef struct troupe_blob {
    const void *data; /* NULL when len is 0 */
    size_t len;
} troupe_blob;

typedef struct troupe_blobs {
    size_t count;             /* the communicator's size */
    const troupe_blob *items; /* by rank */
} troupe_blobs;

/* troupe_worker_allgather: every rank of comm contributes len bytes (at most
 * TROUPE_MAX_BLOB, may be 0) under name; once all have, each gets every
 * rank's bytes in rank order in *out (free with troupe_blobs_free). The k-th
 * call with a name meets the others' k-th call. This is how peers exchange
 * listen addresses before talking directly (the CPU collective does). */
TROUPE_API troupe_status troupe_worker_allgather(troupe_worker_ctx *w, const char *comm, const char *name,
                                                 const void *data, size_t len, uint32_t wait_ms,
                                                 troupe_blobs **out, troupe_error *err);

/* troupe_blobs_free frees an all-gather result; NULL is a no-op. */
TROUPE_API void troupe_blobs_free(troupe_blobs *b);

/* troupe_worker_step_begin marks the start of step (1-based, increasing).
 * *profile (may be NULL) is 1 when this step is profiled for this worker.
 * Local: takes the latest control the background thread received, starts or
 * stops the CUDA profiler at range boundaries and pushes an NVTX range. */
TROUPE_API troupe_status troupe_worker_step_begin(troupe_worker_ctx *w, uint64_t step, int *profile);

/* The standard figures of one step, for troupe_worker_step_end. Call
 * troupe_step_figures_init first: it sets every field to NaN, and a field
 * left NaN is not reported. Each figure set becomes a metric point of the
 * step under the name in the comment (`troupe metrics JOB --name step_ms`),
 * the same names troupe-train uses in its JSON lines. The head judges a
 * job's health from some of them (see troupe_worker_step_end). */
typedef struct troupe_step_figures {
    double loss;                   /* "loss" */
    double tokens_per_s;           /* "tokens_per_s" */
    double mfu;                    /* "mfu": fraction of the device's peak (0.42 = 42 %) */
    double step_ms;                /* "step_ms"; NaN: measured by the runtime (see step_end) */
    double forward_ms;             /* "forward_ms" */
    double backward_ms;            /* "backward_ms" */
    double optimizer_ms;           /* "optimizer_ms" */
    double gpu_mem_in_use_bytes;   /* "gpu_mem_in_use_bytes": allocated by this process now */
    double gpu_mem_reserved_bytes; /* "gpu_mem_reserved_bytes": held by its allocator */
    double gpu_mem_peak_bytes;     /* "gpu_mem_peak_bytes": the most allocated so far */
    double gpu_mem_total_bytes;    /* "gpu_mem_total_bytes": the GPU's capacity */
} troupe_step_figures;

/* troupe_step_figures_init sets every field of f to NaN (nothing to report). */
TROUPE_API void troupe_step_figures_init(troupe_step_figures *f);

/* troupe_worker_step_end marks the end of step `step` (pops its NVTX range)
 * and reports its figures (f may be NULL: none but the step time) through
 * the metrics path of troupe_worker_metric: never blocking on the network.
 * "step_ms" is always reported: f->step_ms when set, else the time since
 * troupe_worker_step_begin of this step (or since the previous step_end when
 * step_begin was not called; nothing the first time). The head reads "step_ms"
 * as this rank's sign of progress and its pace, and "gpu_mem_in_use_bytes"
 * and "gpu_mem_total_bytes" for the memory trend: `troupe job` shows a job
 * STALLED, its stragglers and memory warnings from them. Returns OK, or
 * RESOURCE_EXHAUSTED when the metrics buffer was full and a figure was
 * dropped (counted; the step itself is over either way). Call it from the
 * thread that runs the steps. */
TROUPE_API troupe_status troupe_worker_step_end(troupe_worker_ctx *w, uint64_t step, const troupe_step_figures *f);

/* troupe_worker_should_stop returns 1 once the head asked this worker to stop
 * (the job is stopping, or this attempt was superseded). Local. */
TROUPE_API int troupe_worker_should_stop(const troupe_worker_ctx *w);

/* troupe_worker_profile_note returns a static-lifetime-until-close sentence
 * about the last profiler action ("cudaProfilerStart at step 2", or why none
 * happened: "libcudart not found"); "" when none. For logs. */
TROUPE_API const char *troupe_worker_profile_note(const troupe_worker_ctx *w);

/* ---- built-in trace ---------------------------------------------------------
 * For the steps this worker profiles (the same setting as the CUDA profiler:
 * the spec's `profile:`, NRL_NSYS_* or `troupe profile`), the runtime records
 * spans: the step itself ("step N", from step_begin to step_end), the phases
 * the program names with troupe_worker_span_begin/_end (forward, backward,
 * optimizer, ...; nested as called), and, on any thread, this handle's
 * rendezvous waits (IDs, barriers, all-gathers) and CPU collectives. Outside a
 * profiled step nothing is recorded and these calls cost a branch.
 *
 * Spans go to the head when the profiled range ends, every 10000 spans, and
 * at close, with this worker's clock offset against the head's (measured then,
 * by probes with the smallest round trip), so `troupe trace JOB -o t.json`
 * writes one Chrome/Perfetto trace with every rank on the head's clock: one
 * process per worker (pid = its global rank: groups in spec order), nested
 * complete ("X") events. A worker keeps at most TROUPE_TRACE_MAX_SPANS
 * (100000) unsent spans; the rest are counted as dropped and shown.
 *
 * troupe_worker_span_begin opens a span named name (1-63 bytes kept) on the
 * stepping thread; troupe_worker_span_end closes the latest open one. Up to 32
 * open at once (RESOURCE_EXHAUSTED beyond); end without begin is
 * FAILED_PRECONDITION. Both belong to the thread that runs the steps, like
 * step_begin/_end. Local: no network. */
TROUPE_API troupe_status troupe_worker_span_begin(troupe_worker_ctx *w, const char *name);
TROUPE_API troupe_status troupe_worker_span_end(troupe_worker_ctx *w);

/* troupe_worker_span_record records a span that has already ended, timed by
 * the caller: start_us and end_us are CLOCK_MONOTONIC readings in
 * microseconds (a phase whose true start is known only afterwards: GPU work
 * timed with CUDA events and placed on the host clock, as troupe-train does).
 * Recorded, as a phase of the current step, only while a profiled step is in
 * progress (OK and nothing kept otherwise). INVALID_ARGUMENT for an empty
 * name or end_us < start_us. The stepping thread, like span_begin. Local. */
TROUPE_API troupe_status troupe_worker_span_record(troupe_worker_ctx *w, const char *name, int64_t start_us,
                                                   int64_t end_us);

/* troupe_worker_trace_note: what happened to the last shipment ("trace: 120
 * spans sent (clock offset -35 us, probe round trip 210 us)", or why not);
 * "" before any. For logs; valid until the next step_begin or close. */
TROUPE_API const char *troupe_worker_trace_note(const troupe_worker_ctx *w);

/* ---- failure reports --------------------------------------------------------
 * troupe_worker_fail tells the head why this worker is failing, before it
 * exits: code is the troupe_status of the failure (not OK), reason a sentence
 * ("all-reduce: rank 2 (job7-dp-2 on node-b) went away"). The head records
 * the worker, its rank, group, node and attempt with it (shown by
 * `troupe job`, in -o json "failures", and as a WORKER_FAILED event), and a
 * job that fails or restarts names in its reason the FIRST rank that reported
 * ("rank 2 of group dp (job7-dp-2 on node-b, attempt 0) failed first:
 * DEADLINE_EXCEEDED: ...; then worker job7-dp-0 ... exited with code 1").
 *
 * It only reports: the caller still exits (non-zero) or carries on. A worker
 * reports for itself only (its own job and current attempt). The first
 * report of a handle is the one the head keeps; later calls return OK
 * without a call (the first failure is the cause, later ones follow from
 * it). Bounded: the call gives up after TROUPE_FAIL_REPORT_MS (default 5000)
 * when the head is away, returning that error (the failure is then still
 * visible as the worker's exit). Thread-safe.
 *
 * The CPU collective (troupe_coll_*) and the NCCL helper (troupe/nccl.h)
 * call it themselves when a peer is gone or an operation passes its
 * deadline; code that detects its own failures (e.g. a data-parallel loop
 * that sees a NaN loss) calls it directly:
 *     if (troupe_coll_allreduce(c, g, n, TROUPE_F32, TROUPE_SUM, &err) != TROUPE_OK) {
 *         // already reported by the collective; just exit
 *         fprintf(stderr, "%s\n", err.message); exit(1);
 *     }
 *     if (isnan(loss)) { troupe_worker_fail(w, TROUPE_INTERNAL, "loss is NaN at step 7", NULL); exit(1); } */
TROUPE_API troupe_status troupe_worker_fail(troupe_worker_ctx *w, troupe_status code, const char *reason,
                                            troupe_error *err);

/* ---- metrics ------------------------------------------------------------------
 * troupe_worker_metric reports one named scalar of a step (name: 1-127
 * printable characters, no spaces or commas; value: any double, NaN and
 * +-inf included). It never blocks on the network: the point goes into a
 * bounded buffer (TROUPE_METRICS_BUFFER points, default 65536) that a
 * background thread sends to the head in batches; `troupe metrics JOB` shows
 * them. When the head is slow or away and the buffer is full, the point is
 * dropped and counted (the head learns of it from its sequence number and
 * shows it per worker). Returns OK, INVALID_ARGUMENT for a bad name (nothing
 * counted), or RESOURCE_EXHAUSTED when this point was dropped. Thread-safe. */
TROUPE_API troupe_status troupe_worker_metric(troupe_worker_ctx *w, uint64_t step, const char *name, double value);

/* troupe_worker_metrics_flush waits up to wait_ms until the head confirmed
 * every point reported so far (stored, or known dropped); DEADLINE_EXCEEDED
 * otherwise. troupe_worker_close flushes for TROUPE_METRICS_FLUSH_MS (default
 * 10000) by itself. */
TROUPE_API troupe_status troupe_worker_metrics_flush(troupe_worker_ctx *w, uint32_t wait_ms, troupe_error *err);

typedef struct troupe_metrics_stats {
    uint64_t reported; /* points given to troupe_worker_metric (valid names) */
    uint64_t acked;    /* highest sequence number the head confirmed */
    uint64_t dropped;  /* points this worker dropped (buffer full, or refused for good) */
    uint64_t buffered; /* points waiting to be sent or confirmed */
} troupe_metrics_stats;

/* troupe_worker_metrics_stats: this worker's counts, as of now. */
TROUPE_API void troupe_worker_metrics_stats(troupe_worker_ctx *w, troupe_metrics_stats *out);

/* ---- the job's key-value store ------------------------------------------------
 * A store of keys and byte values on the head, with the semantics of
 * torch.distributed's TCPStore (troupe.torch's Store is built on it): a
 * process group exchanges its NCCL unique ID and runs its start-up barrier
 * here, over the worker's one connection to the head, with no MASTER_PORT
 * and no TCPStore listener.
 *
 * Scope: one space per communicator (comm NULL/"" = the worker's group) and
 * epoch. A group restart moves the epoch: the restarted ranks see an empty
 * space and never the old attempt's keys (a call of the old attempt is
 * refused FAILED_PRECONDITION). Only workers of the job reach its keys;
 * another job's worker is refused PERMISSION_DENIED. The keys are gone when
 * the job stops running.
 *
 * Bounds: the head keeps at most store_max_keys keys and store_max_bytes
 * bytes (keys plus values) per job over all its communicators (troupe-head's
 * config); a set past them is RESOURCE_EXHAUSTED and err says the numbers.
 * Keys are 1 to 1024 bytes of text; values any bytes.
 *
 * Memory only, as TCPStore is: a restarted head has no keys. A waiting call
 * is answered UNAVAILABLE when the head stops and retried against the
 * restarted head within its deadline (set, get, wait, check, delete and
 * num_keys are retried; add and compare_set are not, as a retry could apply
 * twice: they return UNAVAILABLE).
 *
 * Waits (get, wait) are long polls answered the moment the keys are set;
 * at wait_ms (0 = the handle's default) they fail DEADLINE_EXCEEDED and err
 * names the keys never set, then the communicator's ranks that never called
 * its store ("1 of 3 ranks never called this store: 2 job7-policy-2 on
 * node-b"). Every function here is thread-safe. */

/* troupe_worker_store_set sets key to len bytes of value (value may be NULL
 * when len is 0), replacing what was there, and answers every rank waiting
 * for it. */
TROUPE_API troupe_status troupe_worker_store_set(troupe_worker_ctx *w, const char *comm, const char *key,
                                                 const void *value, size_t len, troupe_error *err);

/* troupe_worker_store_get waits up to wait_ms for key and returns its value:
 * *value is malloc'ed (free it with troupe_free; never NULL on OK, even for
 * 0 bytes) and *len its size. */
TROUPE_API troupe_status troupe_worker_store_get(troupe_worker_ctx *w, const char *comm, const char *key,
                                                 uint32_t wait_ms, void **value, size_t *len, troupe_error *err);

/* troupe_worker_store_add adds amount to key's value read as a decimal
 * int64 (a missing key counts 0), stores the sum as decimal text and returns
 * it in *value (may be NULL). INVALID_ARGUMENT when the value is not a
 * number or the sum overflows. Atomic: N ranks adding 1 end at N. */
TROUPE_API troupe_status troupe_worker_store_add(troupe_worker_ctx *w, const char *comm, const char *key,
                                                 int64_t amount, int64_t *value, troupe_error *err);

/* troupe_worker_store_compare_set sets key to desired when its value equals
 * expected, or when key is missing and exp_len is 0; *value (malloc'ed,
 * troupe_free) is then the value now: desired when it was set, the current
 * value when it differed, expected itself when key is missing and expected
 * is not empty (TCPStore's answers). value may be NULL. */
TROUPE_API troupe_status troupe_worker_store_compare_set(troupe_worker_ctx *w, const char *comm, const char *key,
                                                         const void *expected, size_t exp_len, const void *desired,
                                                         size_t des_len, void **value, size_t *len,
                                                         troupe_error *err);

/* troupe_worker_store_wait waits up to wait_ms until every one of the n keys
 * (1..256) is set. */
TROUPE_API troupe_status troupe_worker_store_wait(troupe_worker_ctx *w, const char *comm, const char *const *keys,
                                                  size_t n, uint32_t wait_ms, troupe_error *err);

/* troupe_worker_store_check sets *present to 1 when every one of the n keys
 * is set, 0 otherwise; it does not wait. */
TROUPE_API troupe_status troupe_worker_store_check(troupe_worker_ctx *w, const char *comm, const char *const *keys,
                                                   size_t n, int *present, troupe_error *err);

/* troupe_worker_store_delete removes key; *deleted (may be NULL) is 1 when it
 * was set. */
TROUPE_API troupe_status troupe_worker_store_delete(troupe_worker_ctx *w, const char *comm, const char *key,
                                                    int *deleted, troupe_error *err);

/* troupe_worker_store_num_keys returns in *n how many keys comm's space holds. */
TROUPE_API troupe_status troupe_worker_store_num_keys(troupe_worker_ctx *w, const char *comm, uint64_t *n,
                                                      troupe_error *err);

/* ---- CPU collective -------------------------------------------------------------
 * All-reduce (sum of float32 or float64), broadcast and
 * barrier between the ranks of a communicator, directly between the worker
 * processes over nng (the head only introduces them): the ranks form a ring,
 * rank r sending to r+1. All-reduce is a reduce-scatter then an all-gather,
 * each of size-1 steps moving 1/size of the buffer in 1 MiB messages, so
 * every link carries about 2x the buffer whatever the rank count; broadcast
 * is pipelined along the ring from the root. This is the CPU path that lets
 * data-parallel code run and be tested without GPUs.
 *
 * Every rank of the communicator must make the same calls in the same order
 * with the same counts (a mismatch seen on the wire is FAILED_PRECONDITION
 * naming the peer). Every operation has a deadline (opts->timeout_ms): a peer
 * that exits or closes fails the others UNAVAILABLE, one that does not keep up
 * DEADLINE_EXCEEDED, and err names it ("rank 2 (job7-policy-2 on node-b)");
 * a rank that fails tells the next one, so every rank names the same peer.
 * After a failure the handle only refuses (FAILED_PRECONDITION repeating the
 * cause): close it and open a new one. A troupe_coll belongs to one thread at
 * a time (calls on it are not concurrent); different handles are independent. */
typedef struct troupe_coll troupe_coll;

typedef enum troupe_dtype {
    TROUPE_F32 = 1, /* float */
    TROUPE_F64 = 2, /* double */
} troupe_dtype;

typedef enum troupe_redop {
    TROUPE_SUM = 1,
} troupe_redop;

typedef struct troupe_coll_opts {
    uint32_t timeout_ms;        /* deadline of each operation, open and close; 0 = the worker's wait_ms */
    const char *listen_url;     /* NULL: tcp on every interface, port chosen by the system; or a full
                                   nng URL (e.g. ipc:///tmp/x.sock, for one host) used as is */
    const char *advertise_host; /* host the peers dial; NULL: $TROUPE_NODE_ADDR (set by troupe-node),
                                   else the host name */
    int no_fail_report;         /* 1: failures are not reported to the head (troupe_worker_fail): the
                                   caller reports them, or recovers (a worker that rejoins the
                                   communicator's next epoch after its peers' group restarted) */
} troupe_coll_opts;

/* troupe_worker_coll_open joins the CPU collective of communicator comm
 * (NULL/"" = the worker's group): every rank of comm must call it. It listens,
 * exchanges addresses through the rendezvous all-gather (named "troupe.coll")
 * and connects to its ring neighbours, all within the deadline. opts may be
 * NULL. On OK free *out with troupe_coll_close; w must outlive it. */
TROUPE_API troupe_status troupe_worker_coll_open(troupe_worker_ctx *w, const char *comm, troupe_coll **out,
                                                 const troupe_coll_opts *opts, troupe_error *err);

/* troupe_coll_allreduce replaces buf (count elements of dtype) on every rank
 * with the element-wise op over all ranks' buffers. Sums are added in ring
 * order, the same on every rank, so every rank ends with identical bits.
 * count may be 0. */
TROUPE_API troupe_status troupe_coll_allreduce(troupe_coll *c, void *buf, size_t count, troupe_dtype dtype,
                                               troupe_redop op, troupe_error *err);

/* troupe_coll_reduce_scatter is the first half of troupe_coll_allreduce:
 * buf (count elements of dtype, the same count on every rank) is cut in
 * size segments, segment i being elements [count*i/size, count*(i+1)/size),
 * and on return this rank's segment (i = its rank) holds the element-wise
 * op over all ranks' buffers; the rest of buf is scratch (unspecified).
 * Each segment's sum is added in one ring order, so each is reproducible
 * (not necessarily the bits troupe_coll_allreduce gives). count may be 0. */
TROUPE_API troupe_status troupe_coll_reduce_scatter(troupe_coll *c, void *buf, size_t count,
                                                    troupe_dtype dtype, troupe_redop op, troupe_error *err);

/* troupe_coll_allgather is the second half: each rank's segment of buf (cut
 * as above) is copied into the same segment of buf on every other rank. */
TROUPE_API troupe_status troupe_coll_allgather(troupe_coll *c, void *buf, size_t count, troupe_dtype dtype,
                                               troupe_error *err);

/* troupe_coll_broadcast copies root's bytes of buf into buf on every other
 * rank. */
TROUPE_API troupe_status troupe_coll_broadcast(troupe_coll *c, void *buf, size_t bytes, uint32_t root,
                                               troupe_error *err);

/* troupe_coll_barrier returns once every rank of the collective called it. */
TROUPE_API troupe_status troupe_coll_barrier(troupe_coll *c, troupe_error *err);

/* troupe_coll_rank / _size: this rank and the rank count. */
TROUPE_API uint32_t troupe_coll_rank(const troupe_coll *c);
TROUPE_API uint32_t troupe_coll_size(const troupe_coll *c);

/* troupe_coll_set_timeout changes the deadline of every later operation
 * (close included) to timeout_ms; 0 leaves it as it is. Joining may need a
 * longer deadline (ranks start minutes apart) than each collective. */
TROUPE_API void troupe_coll_set_timeout(troupe_coll *c, uint32_t timeout_ms);

/* troupe_coll_close tells both neighbours this rank is done, waits up to the
 * timeout for them to be done too (so data in flight is delivered, not cut
 * off), and frees. A peer still inside an operation fails UNAVAILABLE naming
 * this rank. NULL is a no-op. */
TROUPE_API void troupe_coll_close(troupe_coll *c);

/* troupe_coll_abort closes a collective without the goodbye handshake of
 * troupe_coll_close: for a ring that is already broken (an operation failed
 * because a peer died), so closing never waits on a peer that is gone. Peers
 * still inside an operation fail UNAVAILABLE naming this rank. NULL is a
 * no-op. */
TROUPE_API void troupe_coll_abort(troupe_coll *c);

/* ---- elastic groups -------------------------------------------------------------
 * A group with `elastic: {min_workers: K}` in its job spec goes on when a rank
 * dies, is fenced or is killed, as long as K ranks remain: the head takes the
 * rank out, renumbers the survivors densely (in the order of their placed
 * RANKs) and moves the group's communicator to a new epoch. The survivors are
 * told through the control long poll (their new rank, the group's size and
 * the epoch); the environment (RANK, WORLD_SIZE) keeps the values the worker
 * started with. Below K the group fails or restarts as any other.
 *
 * What a member does when a collective fails (or when it polls between steps):
 *     troupe_coll_abort(c);                          // the old ring is broken
 *     troupe_worker_await_membership(w, epoch, 0, &m, &err);
 *     troupe_worker_coll_open(w, NULL, &c, &o, &err); // the new epoch's ring
 * then it agrees with the others where training stands (the CPU example
 * exchanges the last completed step and broadcasts the state of a rank that
 * completed it) and redoes the step in flight with the shards of the new
 * world size. Open the collective with no_fail_report = 1: a peer's death is
 * then not this worker's failure. Like a restart, a change moves the group's job
 * store (troupe_worker_store_*) to the new epoch's space, which starts empty.
 *
 * troupe_worker_await_membership waits up to wait_ms (0 = the handle's
 * default) until the worker's own group has an epoch above after_epoch and
 * returns its rank, size and epoch in *info. FAILED_PRECONDITION when this
 * worker is no longer a member (it was taken out: it should exit) or the job
 * is stopping; DEADLINE_EXCEEDED naming the epoch it waited past. For a group
 * that is not elastic the epoch moves only with a restart, which supersedes
 * this worker (FAILED_PRECONDITION). Thread-safe. */
TROUPE_API troupe_status troupe_worker_await_membership(troupe_worker_ctx *w, uint32_t after_epoch, uint32_t wait_ms,
                                                        troupe_comm_info *info, troupe_error *err);

/* troupe_worker_membership: the membership the control poll last told
 * (local, no network): for a check at each step boundary, where a group that
 * grew back shows a newer epoch while the old ring still works (the members
 * then abort it and meet the replacement in the new epoch). NOT_FOUND when
 * none is known (the group is not elastic, or the first poll has not been
 * answered; not with opts.no_control), FAILED_PRECONDITION when this worker
 * was taken out. Thread-safe. */
TROUPE_API troupe_status troupe_worker_membership(troupe_worker_ctx *w, troupe_comm_info *info, troupe_error *err);

#ifdef __cplusplus
}
#endif
#endif
