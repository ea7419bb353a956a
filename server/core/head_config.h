/* head_config.h - troupe-head's settings: the struct, its descriptor table
 * (head.c; defaults < file < environment < flags, common/config.h) and the
 * checks that read several settings together. */
#ifndef TR_HEAD_CONFIG_H
#define TR_HEAD_CONFIG_H

#include <stdint.h>

#include "config.h"
#include "err.h"

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
    int64_t rpc_threads; /* handler threads (rpc.h) */
    int64_t rpc_queue;   /* requests waiting for them at most */
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
    int64_t keep_jobs;         /* finished jobs kept (jobs_retain.c) */
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

/* tr_head_tls_client_auth maps none|nodes|all to TR_TLS_CLIENT_* (-1: unknown). */
int tr_head_tls_client_auth(const char *mode);

/* tr_head_check_tls checks the TLS settings together with listen. */
int tr_head_check_tls(const tr_head_config *cfg, tr_err *err);

/* tr_head_check_liveness checks the liveness settings together. */
int tr_head_check_liveness(const tr_head_config *c, tr_err *err);


#endif
