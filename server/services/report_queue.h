/* report_queue.h - the durable writer shared by the head's report services
 * (ReportMetrics in metrics.c, ReportTrace in trace.c): a bounded queue of
 * deferred report calls and one writer thread that takes the queue in
 * rounds, has the service write each round in one transaction, and only
 * then has the round's calls answered, by a second thread (the answerer), so
 * that the writer writes the next round while the last one's answers are
 * sent. A call is thus acknowledged only once what it carried is durable,
 * and the RPC threads never wait for the disk.
 *
 * The queue also carries job deletions (DeleteJob, retention) to the writer,
 * which hands them to the service after the round it took them with: a
 * report queued before a deletion is written (or refused) first and its rows
 * go with the deletion, never after it.
 *
 * A queued call whose deadline passes is answered DEADLINE_EXCEEDED by the
 * RPC server and forgotten here (nothing of it is written); one the writer
 * has already taken is waited for, so the server never frees a call the
 * writer still answers (rpc.h, tr_rpc_defer).
 *
 * What the service provides is a table, tr_rq_ops: the size of its own entry
 * (which starts with a tr_rq_item), how much fits the queue and how a full
 * queue is refused, and three callbacks run with no queue lock held: write
 * and deleted on the writer thread, answer on the answerer (possibly while
 * write runs for the next round: answer reads only its own entry). Each
 * service keeps its rows in its own SQLite file, a series store (series.h),
 * which opens the queue with the file. */
#ifndef TR_REPORT_QUEUE_H
#define TR_REPORT_QUEUE_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "rpc.h"

/* tr_ids: a set of job ids in an array, for the queue's deletions and the
 * services' own lists of deleted or orphaned jobs. Zeroed is empty; the
 * owner frees it with tr_ids_fini. Not thread-safe. */
typedef struct tr_ids {
    uint64_t *v;
    size_t n, cap;
} tr_ids;

/* tr_ids_add adds id unless it is there: 0, or -1 when out of memory (the
 * set unchanged). */
int tr_ids_add(tr_ids *s, uint64_t id);
/* tr_ids_has: 1 when id is in s. */
int tr_ids_has(const tr_ids *s, uint64_t id);
/* tr_ids_fini frees the array and empties s. */
void tr_ids_fini(tr_ids *s);

typedef struct tr_rq tr_rq;

/* tr_rq_item: one queued report. The queue allocates the service's entry
 * (tr_rq_ops.item_size bytes, zeroed) with this as its first member, so
 * the callbacks may cast an item to their own entry type. The service reads
 * these fields and does not change them (write may relink a round if it
 * puts it back as it was); its own fields after them are its to fill in
 * write, and what answer reads. */
typedef struct tr_rq_item {
    tr_rpc_call *call;       /* deferred; answered by ops.answer, released by the queue */
    ProtobufCMessage *req;   /* the unpacked request, owned by the item */
    size_t weight;           /* what it counts against ops.max_weight */
    struct tr_rq_item *next; /* the next of its round, in arrival order */
} tr_rq_item;

typedef struct tr_rq_ops {
    const char *name;      /* "metrics": "the head's metrics writer is behind", the thread's errors */
    size_t item_size;      /* sizeof the service's entry, >= sizeof(tr_rq_item) */
    size_t max_weight;     /* a call that would take the queued weight past it is refused */
    const char *unit;      /* what the weight counts, for the refusal: "points" */
    int full_code;         /* the status of that refusal */
    const char *full_hint; /* appended to its message (may be ""): what the worker does now */

    /* write makes the round (never empty) durable, in one transaction: all
     * or nothing. It returns TROUPE_OK, or a status with err filled. It sets
     * its own fields of the items with everything answer needs (answer runs
     * on another thread, maybe during the next write, so it must not read
     * the service's state); it leaves the round's order and links as it
     * found them. */
    int (*write)(void *arg, tr_rq_item *round, tr_err *err);
    /* answer answers it->call (tr_rpc_reply or tr_rpc_reply_error) after
     * write returned rv (err is write's), and frees what write hung on the
     * entry; the queue then releases the call and frees req and the entry.
     * Called once per item, in order, on the answerer thread: from the
     * item's own entry only. */
    void (*answer)(void *arg, tr_rq_item *it, int rv, const tr_err *err);
    /* deleted removes the rows of deleted jobs (ids: distinct, borrowed for
     * the call); it runs after the round taken with them is written and
     * answered. */
    void (*deleted)(void *arg, const tr_ids *ids);
} tr_rq_ops;

/* tr_rq_opts: how the head runs a queue (its config), as opposed to what
 * the service does with it (tr_rq_ops). Zeroed is the default. */
typedef struct tr_rq_opts {
    /* nice: added to the nice of the writer and the answerer (Linux: a
     * thread's own nice, set by each thread on itself; capped at 19), so
     * that throughput work with a ~100 ms budget yields the CPU to the
     * latency-critical RPC threads (Ping, status, submit). 0 = they run at
     * the process's nice; 1-19. A failure to set it is logged (warning)
     * and the thread runs on at the process's nice. The cost: a niced
     * answerer acknowledges only when the CPU is free, and the writer waits
     * for it (one round ahead at most), so on a saturated head acks and
     * followers wait longer (bench/RESULTS.md, "Metrics ingest"). */
    int nice;
} tr_rq_opts;

/* tr_rq_open starts the writer and answerer threads for a service: ops (borrowed, must
 * outlive the queue, usually a static const table), opts (read during the
 * call; NULL = defaults) and arg (passed to every callback). On success *out
 * owns the queue: close it with tr_rq_close.
 * RESOURCE_EXHAUSTED ("cannot start the NAME writer") otherwise; *out is
 * then NULL. Call it once the service's store is open and loaded (write may
 * run as soon as a call is queued), from the service's start. */
int tr_rq_open(tr_rq **out, const tr_rq_ops *ops, const tr_rq_opts *opts, void *arg, tr_err *err);

/* tr_rq_close lets the writer finish what is queued (deletions included)
 * and the answerer answer it, joins both and frees q; NULL is a no-op. Call it after the RPC server
 * stopped (by then every queued call was answered and has expired out of
 * the queue), from the service's stop, never from a callback. */
void tr_rq_close(tr_rq *q);

/* tr_rq_submit defers call and queues it with req for the writer. On
 * TROUPE_OK the queue owns req and the call's answer: the caller must not
 * touch either again (the writer may already have answered). Otherwise the
 * caller still owns req and must answer the call with the returned status
 * and err: ops.full_code when weight does not fit ("the head's NAME writer
 * is behind (N UNIT queued)HINT"), RESOURCE_EXHAUSTED when out of memory.
 * Any thread; never waits for the writer. */
int tr_rq_submit(tr_rq *q, tr_rpc_call *call, ProtobufCMessage *req, size_t weight, tr_err *err);

/* tr_rq_delete asks the writer to pass job_id to ops.deleted after its next
 * round. Returns 0, or -1 when out of memory (nothing queued: the caller
 * says so, and its next start removes the rows). Any thread, h->mu may be
 * held (the writer never takes h->mu while it holds the queue's lock). */
int tr_rq_delete(tr_rq *q, uint64_t job_id);

/* tr_rq_weight: the weight queued now (the /metrics gauge). tr_rq_submitted:
 * the calls queued since the start, counted before the writer can take
 * them (so before their answer). Any thread, no lock taken. */
size_t tr_rq_weight(tr_rq *q);
uint64_t tr_rq_submitted(tr_rq *q);

#endif
