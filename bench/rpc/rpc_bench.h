/* rpc_bench.h - internals of troupe-bench-rpc (bench/rpc), shared by its files.
 *
 * A cell is one (system, concurrency, payload) measurement: N client threads
 * call an echo server in another process as fast as each one's round trips
 * allow, first for a warm-up, then for a fixed window whose per-call latencies
 * are kept. A cell is measured in several rounds, interleaved with the other
 * cells, and its rounds' latencies are pooled: percentiles come from all kept
 * latencies, calls/s from their count over the summed windows. The gRPC client
 * runs in the C++ peer and hands its latencies back in a file, so every
 * system's figures go through the same rb_cell_stats. */
#ifndef RB_RPC_BENCH_H
#define RB_RPC_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* The systems, in table order. */
typedef enum rb_system {
    RB_TROUPE,        /* troupe-head, Head/Ping via tr_rpc_client_call_raw, a handle per thread */
    RB_TROUPE_SHARED, /* the same with one handle shared by all threads */
    RB_NNG,           /* raw nng rep0 echo server, one req0 socket per thread */
    RB_GRPC,          /* gRPC C++ sync server, one channel + stub per thread */
    RB_NSYSTEMS
} rb_system;

const char *rb_system_name(rb_system s);

typedef struct rb_cell {
    rb_system sys;
    int clients;
    size_t data_len;  /* bytes in the echoed data field */
    size_t frame_len; /* the packed PingRequest/EchoMsg those bytes make */
    int ran;          /* 0: skipped or failed (reason in note) */
    uint64_t calls;   /* answered calls that started in the window */
    uint64_t errors;  /* failed or wrong answers in the window */
    double window_s;
    double p50_us, p99_us, calls_per_s;
    char note[160];
} rb_cell;

/* What one load run needs; the payload is borrowed for the run. */
typedef struct rb_load {
    rb_system sys;
    const char *url; /* tcp://127.0.0.1:PORT */
    int clients;
    const uint8_t *payload;
    size_t len;
    int warmup_ms, duration_ms;
} rb_load;

/* The kept latencies of a cell's rounds so far. */
typedef struct rb_samples {
    uint64_t *lat; /* ns, in no order */
    size_t n, cap;
    uint64_t window_ns; /* summed over rounds */
    uint64_t errors;
} rb_samples;

/* ---- load.c ---- */

/* rb_load_run measures one round of an in-process client (troupe or nng) and
 * adds it to s; returns 0, or -1 with note saying why. */
int rb_load_run(const rb_load *ld, rb_samples *s, char *note, size_t note_size);

/* rb_samples_add appends n latencies; 0 or -1 when out of memory. */
int rb_samples_add(rb_samples *s, const uint64_t *lat, size_t n);

/* rb_cell_stats sorts s->lat and fills the percentiles and calls/s of cell. */
void rb_cell_stats(rb_cell *cell, rb_samples *s);

uint64_t rb_now_ns(void);

/* ---- servers.c ---- */

/* rb_free_port asks the kernel for a free loopback TCP port; 0 on failure. */
int rb_free_port(void);

/* rb_spawn starts argv[0] with posix_spawn (no fork after nng is initialised);
 * 0 and *pid on success, -1 with errno otherwise. */
int rb_spawn(char *const argv[], pid_t *pid);

/* rb_wait_port waits until something accepts on 127.0.0.1:port or pid exits;
 * 0 when ready, -1 on timeout or exit. */
int rb_wait_port(int port, pid_t pid, int timeout_ms);

/* rb_stop sends SIGTERM, waits up to 5 s, then SIGKILLs; always reaps. */
void rb_stop(pid_t pid);

/* rb_run_child runs argv to completion; returns its exit status or -1. */
int rb_run_child(char *const argv[]);

/* rb_grpc_run has the C++ peer measure one gRPC round against port, reads its
 * latencies back from a file in tmpdir and adds them to s; 0 or -1 with note. */
int rb_grpc_run(const char *peer, int port, const rb_load *ld, size_t data_len, const char *tmpdir,
                rb_samples *s, char *note, size_t note_size);

/* ---- report.c ---- */

/* rb_report_table prints the table with ratios against raw nng and gRPC. */
void rb_report_table(const rb_cell *cells, size_t n, FILE *out);

/* rb_report_goals prints whether troupe met the benchmark's goals; returns 1 when
 * all were met, 0 when one was missed, -1 when a needed cell is missing. */
int rb_report_goals(const rb_cell *cells, size_t n, FILE *out);

/* rb_report_json writes the run (settings and cells) as JSON; 0 or -1. */
int rb_report_json(const char *path, const char *settings_json, const rb_cell *cells, size_t n);

#endif
