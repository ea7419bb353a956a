/* joblog.h - each job's output at the head: kept in memory while new, written
 * to state_dir/logs/job-<id>.log by one I/O thread, read back by that thread
 * for followers that ask for older bytes.
 *
 * Handlers and the agents' reports run on nng's callback threads under h->mu,
 * which must never wait on a disk: they only append to a job's memory buffer
 * and answer followers from it. The I/O thread takes bytes out under h->mu,
 * writes them without it, and does every open/read/unlink of a log file.
 *
 * A job's log is a sequence of "[worker] text\n" lines with byte offsets that
 * never change: [0, written) is on disk, [mem_off, size) is in memory
 * (mem_off <= written <= size). Each job keeps at most max_job_log_bytes:
 * the line that would cross the bound less a tail window is replaced by one
 * marker line that says where and why the log was cut; later output goes to
 * the tail window (the last quarter of the bound, at most 1 MiB), which keeps
 * the newest lines only. When the job ends the window is appended after a
 * second marker that counts what was left out between the two, so the last
 * lines a job wrote (a Traceback) are at the head however much came before.
 * Each worker's whole log stays in its node agent's state dir. The tail lives
 * in memory until the job ends: a head restart meanwhile loses what it held
 * (the marker after it says how much was left out, counted from the restart). */
#ifndef TR_JOBLOG_H
#define TR_JOBLOG_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "rpc.h"

struct tr_head;
struct tr_head_job;
struct tr_head_wait;

/* TR_LOG_LINE_MAX is the longest line of output kept whole: a worker's line
 * may reach the head in many reports, and is joined there; past this many
 * bytes of text the rest of the line is left out and the line ends with a
 * marker that says how much ("[troupe: line cut, N more bytes]"). */
#define TR_LOG_LINE_MAX (2u * 1024u * 1024u)

/* tr_log_stream is what the head knows of one worker attempt's output: how
 * far it has it (agents name each report's bytes by their offset in the
 * worker's log file, so a report sent again is kept once) and the line it has
 * begun but not ended. */
typedef struct tr_log_stream {
    uint32_t worker; /* index in the job's workers */
    uint32_t attempt;
    uint64_t next; /* offset of the next byte expected: everything before is kept */
    char *part;    /* the line begun, [0, part_len), at most TR_LOG_LINE_MAX */
    size_t part_len, part_cap;
    uint64_t part_cut; /* bytes of that line left out past TR_LOG_LINE_MAX */
} tr_log_stream;

typedef struct tr_job_log {
    uint64_t size;    /* bytes accepted (written or waiting in memory) */
    uint64_t written; /* bytes in the file */
    uint64_t mem_off; /* offset of mem[0] */
    char *mem;        /* bytes [mem_off, size) */
    size_t mem_cap;
    uint64_t dropped; /* bytes left out since the last marker (cut, not in the tail) */
    int cut;          /* the bound was reached (marker written) */
    int queued;       /* listed for the I/O thread */
    char *tail;       /* past the cut: the newest whole lines, [0, tail_len) */
    size_t tail_len, tail_cap;
    tr_log_stream *streams; /* one per worker attempt that reported output */
    size_t n_streams;
} tr_job_log;

/* tr_joblog_start starts the I/O thread (h->logio). */
int tr_joblog_start(struct tr_head *h, tr_err *err);

/* tr_joblog_quiesce stops taking read requests and waits for the one in
 * progress, so tr_rpc_server_stop can answer and free every deferred call. */
void tr_joblog_quiesce(struct tr_head *h);

/* tr_joblog_stop writes what is left and stops the thread; NULL-safe. */
void tr_joblog_stop(struct tr_head *h);

/* tr_joblog_path writes the job's log file name into buf. */
void tr_joblog_path(const struct tr_head *h, uint64_t job_id, char *buf, size_t cap);

/* tr_joblog_recover sets a recovered job's sizes from its file (at start,
 * before serving). */
void tr_joblog_recover(struct tr_head *h, struct tr_head_job *hj);

/* tr_joblog_report takes the output one agent report carries for worker
 * index `worker` (named name) attempt `attempt`: data[0, len) are the bytes at
 * offset `off` of that attempt's output (has_off 0: an older agent, taken as
 * the next bytes). Bytes the head already has are skipped; the rest is cut
 * into "[name] text" lines, a line's beginning kept until its end arrives.
 * ended: the worker ended and this is its last output (a line without its
 * newline is ended here). Returns 1 when everything is kept, 0 when the
 * bytes are refused because the head already holds max_log_memory_bytes of
 * output it could not write (nothing is taken: the agent sends it again).
 * Under h->mu; no I/O; answers the job's followers. */
int tr_joblog_report(struct tr_head *h, struct tr_head_job *hj, uint32_t worker, const char *name,
                     uint32_t attempt, int has_off, uint64_t off, const char *data, size_t len, int ended);

/* tr_joblog_unsaved returns the bytes of output the head holds that are not
 * in a file yet (all jobs; under h->mu). */
uint64_t tr_joblog_unsaved(const struct tr_head *h);

/* tr_joblog_try answers a GetLogs call for w (offset, max_bytes, worker) if
 * there is something to say or force is set: from memory, or by handing w to
 * the I/O thread when the bytes are only on disk. Returns 0 (nothing to say,
 * w untouched), 1 (answered) or 2 (handed over: w and the call's reference
 * now belong to the I/O thread). Under h->mu. */
int tr_joblog_try(struct tr_head *h, struct tr_head_job *hj, struct tr_head_wait *w, int force);

/* tr_joblog_settled appends a settled job's tail window (if its log was cut)
 * and lets the I/O thread free its memory once everything is written
 * (followers then read the file). Call before answering followers: they are
 * done at the end of the log. Under h->mu. */
void tr_joblog_settled(struct tr_head *h, struct tr_head_job *hj);

/* tr_joblog_forget_call unlinks and releases a call queued for the I/O
 * thread (its deadline passed); returns 1 if it was there. Under h->mu. */
int tr_joblog_forget_call(struct tr_head *h, tr_rpc_call *call);

/* tr_joblog_remove drops a deleted job's memory and queues its file for
 * removal (after any write still in flight). Under h->mu. */
void tr_joblog_remove(struct tr_head *h, struct tr_head_job *hj);

/* tr_joblog_free frees a job's memory buffers (the job is being freed). */
void tr_joblog_free(tr_job_log *l);

#endif
