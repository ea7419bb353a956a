/* worker_int.h - the worker runtime's internals (worker.c: identity and
 * rendezvous; worker_steps.c: control thread, steps, profiler). Not API. */
#ifndef TR_WORKER_INT_H
#define TR_WORKER_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "client_int.h"
#include "troupe/worker.h"

#define TR_WK_MAX_COMMS 32
#define TR_WK_MAX_SEQS 128

/* What this handle knows of a communicator: the epoch seen last, and how
 * many barriers/gathers of each name it has done in that epoch. */
typedef struct tr_wk_seq {
    char name[72]; /* "barrier:NAME" / "gather:NAME" */
    uint64_t seq;
} tr_wk_seq;

typedef struct tr_wk_comm {
    char name[64];
    uint32_t epoch;
    int known;
    tr_wk_seq *seqs;
    size_t n_seqs;
} tr_wk_comm;

/* The profile setting in force, as the control thread last received it. */
typedef struct tr_wk_control {
    uint64_t version; /* 0 = the spec's/env's setting */
    int off;
    int start, stop;  /* absolute range; 0:0 = none */
    uint32_t next, align;
    char workers[1024];
} tr_wk_control;

struct troupe_worker_ctx {
    tr_rpc_client *rpc;
    troupe_worker_self self;
    char job_name[128], group[128], worker[128];
    char url[512];
    uint32_t wait_ms;

    pthread_mutex_t mu; /* comms, control */
    tr_wk_comm comms[TR_WK_MAX_COMMS];
    size_t n_comms;

    /* control thread */
    pthread_t thread;
    int thread_started;
    atomic_int quit;
    atomic_int stop_requested;
    atomic_uint_fast64_t control_version; /* bumps when control changes */
    tr_wk_control control;
    /* an elastic group's membership, as the control poll last told it (w->mu) */
    pthread_cond_t member_cv;
    int member_known, member_removed;
    troupe_comm_info member;

    /* step path (the stepping thread only) */
    uint64_t seen_version;
    int resolved, match, start, stop; /* the range in force for this worker */
    int profiling;
    int nvtx_open;
    char note[256];
    void *cudart, *nvtx;
    int (*prof_start)(void);
    int (*prof_stop)(void);
    int (*nvtx_push)(const char *);
    int (*nvtx_pop)(void);
    int libs_tried;
    int caller_profiles; /* opts->caller_profiles: no libcudart or NVTX of our own */
    int64_t step_t0_ns;   /* CLOCK_MONOTONIC at step_begin; 0 = none since the last end */
    int64_t last_end_ns;  /* at the last step_end; 0 = none yet */

    struct tr_wk_metrics *metrics; /* worker_metrics.c */
    atomic_int failure_reported;   /* worker_fail.c: troupe_worker_fail reached the head */
    struct tr_wk_trace *trace;     /* worker_trace.c */
};

/* worker_trace.c: the built-in trace (spans of profiled steps). */
typedef struct tr_wk_trace tr_wk_trace;
int tr_wk_trace_init(troupe_worker_ctx *w);
void tr_wk_trace_close(troupe_worker_ctx *w); /* ships what is left; before the control thread stops */
void tr_wk_trace_step_begin(troupe_worker_ctx *w, uint64_t step, int profiled);
void tr_wk_trace_step_end(troupe_worker_ctx *w, uint64_t step);
/* tr_wk_trace_now: the start of a span when a profiled step is in progress,
 * else 0; tr_wk_trace_span records [t0, now] unless t0 is 0. Any thread. */
int64_t tr_wk_trace_now(const troupe_worker_ctx *w);
void tr_wk_trace_span(troupe_worker_ctx *w, const char *name, const char *cat, int64_t t0);

/* tr_wk_failure_reported: 1 once troupe_worker_fail was recorded (worker_fail.c). */
int tr_wk_failure_reported(const troupe_worker_ctx *w);
/* tr_wk_describe: troupe_worker_comm_info's call; awaiting tells the head the
 * worker waits for a new membership (blocked on its peers, not stalled). */
int tr_wk_describe(troupe_worker_ctx *w, const char *comm, int awaiting, troupe_comm_info *info, tr_err *e);

/* worker_metrics.c: the metrics buffer and its sender thread (own
 * connection, opened with ro); stop flushes for TROUPE_METRICS_FLUSH_MS. */
typedef struct tr_wk_metrics tr_wk_metrics;
int tr_wk_metrics_start(troupe_worker_ctx *w, const tr_rpc_client_opts *ro, tr_err *e);
void tr_wk_metrics_stop(troupe_worker_ctx *w);

/* worker_steps.c */
int tr_wk_control_start(troupe_worker_ctx *w, tr_err *e);
void tr_wk_control_stop(troupe_worker_ctx *w);
/* tr_wk_control_init sets the initial setting from the environment
 * (TROUPE_PROFILE_STEPS/WORKERS from the spec, else NRL_NSYS_*). */
void tr_wk_control_init(troupe_worker_ctx *w);
void tr_wk_profiler_close(troupe_worker_ctx *w);

/* tr_wk_ref fills the WorkerRef of w's calls. */
void tr_wk_ref(const troupe_worker_ctx *w, Troupe__V1__WorkerRef *ref);

#endif
