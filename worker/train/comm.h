/* comm.h - the communicator of data-parallel troupe-train.
 *
 * The training loop and the backends talk to the other ranks only through
 * this table, so the same loop runs on the CPU collective of the worker API
 * (comm_coll.c, CI's path) and on NCCL (comm_nccl.c, CUDA builds). Standalone
 * runs have no communicator at all (NULL), and nothing here is called.
 *
 * Every operation is collective: every rank makes the same calls in the same
 * order with the same sizes. Every operation has a deadline (timeout_ms, from
 * dp.timeout_ms); a peer that is gone or too slow fails it with an error that
 * names the peer where the transport can tell ("rank 2 (job7-policy-2 on
 * node-b) went away"). After a failure the communicator only refuses: the
 * caller ends the run and closes it with failed = 1 (NCCL: ncclCommAbort).
 *
 * Host operations (allreduce, broadcast, barrier) take host memory and return
 * when done. The device operations are for GPU backends and are NULL on
 * host-only communicators: allreduce_device queues a reduction of a device
 * buffer on a CUDA stream (cudaStream_t passed as void *) and returns at once;
 * wait_device waits for that stream under the deadline, checking the
 * transport's asynchronous errors (a stream that never finishes because a
 * peer is gone must not hang the rank).
 *
 * Threading: one thread at a time. */
#ifndef TR_TRAIN_COMM_H
#define TR_TRAIN_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef enum tr_comm_op {
    TR_COMM_SUM = 0,
    TR_COMM_MEAN = 1, /* the sum divided by the rank count */
} tr_comm_op;

typedef enum tr_comm_dtype {
    TR_COMM_F32 = 0,
    TR_COMM_BF16 = 1,
} tr_comm_dtype;

typedef struct tr_comm tr_comm;

typedef struct tr_comm_ops {
    const char *name; /* "cpu-coll", "nccl" */
    int (*allreduce)(tr_comm *c, float *buf, size_t count, tr_comm_op op, tr_err *err);
    int (*broadcast)(tr_comm *c, void *buf, size_t bytes, int root, tr_err *err);
    int (*barrier)(tr_comm *c, tr_err *err);
    int (*allreduce_device)(tr_comm *c, void *buf, size_t count, tr_comm_dtype dtype, tr_comm_op op,
                            void *stream, tr_err *err);
    int (*wait_device)(tr_comm *c, void *stream, tr_err *err);
    /* close frees c; failed = 1 after an error (no goodbye, NCCL abort). */
    void (*close)(tr_comm *c, int failed);
    /* set_timeout, when not NULL, tells the transport a new deadline for the
     * operations after it (implementations that read timeout_ms on every
     * operation leave it NULL); use tr_comm_set_timeout. */
    void (*set_timeout)(tr_comm *c, uint32_t ms);
    /* group (optional, NULL: none; last so positional
     * initialisers stay valid) brackets several allreduce_device calls
     * (begin 1, then end 0) so the transport may launch them as one (NCCL:
     * ncclGroupStart/End); end reports what enqueueing them failed with. */
    int (*group)(tr_comm *c, int begin, tr_err *err);
    /* broadcast_device (optional, NULL: host operations only) broadcasts
     * count elements of dtype from root's device buffer buf into every other
     * rank's buf (device memory of the rank's GPU, in place) and returns
     * when done on this rank, under the deadline. The caller has finished
     * every write to buf on the root before the call (the transport runs it
     * on a stream of its own). */
    int (*broadcast_device)(tr_comm *c, void *buf, size_t count, tr_comm_dtype dtype, int root, tr_err *err);
    /* The two halves of an all-reduce, for ZeRO-1 (dp.zero 1; all optional,
     * NULL: not offered). buf holds count elements, count a multiple of the
     * rank count, cut in size equal segments; segment r (elements
     * [r*count/size, (r+1)*count/size)) belongs to rank r. reduce_scatter
     * leaves this rank's segment holding the op over every rank's buffer
     * (the other segments are scratch); allgather copies each rank's own
     * segment into the same segment everywhere. Host memory, returning when
     * done; the _device forms take device memory of dtype and queue on a
     * CUDA stream like allreduce_device (in place; inside group brackets
     * too). */
    int (*reduce_scatter)(tr_comm *c, float *buf, size_t count, tr_comm_op op, tr_err *err);
    int (*allgather)(tr_comm *c, float *buf, size_t count, tr_err *err);
    int (*reduce_scatter_device)(tr_comm *c, void *buf, size_t count, tr_comm_dtype dtype, tr_comm_op op,
                                 void *stream, tr_err *err);
    int (*allgather_device)(tr_comm *c, void *buf, size_t count, tr_comm_dtype dtype, void *stream,
                            tr_err *err);
    /* abort (optional, NULL: close with failed = 1) frees c without waiting
     * on any peer: for a communicator whose peer is gone when this rank goes
     * on without it (an elastic group's new membership). */
    void (*abort)(tr_comm *c);
} tr_comm_ops;

/* Every communicator struct starts with this header. */
struct tr_comm {
    const tr_comm_ops *ops;
    int rank, size;
    uint32_t timeout_ms;  /* deadline of each operation */
    int failed;           /* set by the implementation when an operation failed */
    int reports_failures; /* the implementation told the head about its failures itself */
};

/* tr_comm_set_timeout changes the deadline of c's later operations (the
 * refit waits longer for its next header than for anything else). */
static inline void tr_comm_set_timeout(tr_comm *c, uint32_t ms)
{
    c->timeout_ms = ms;
    if (c->ops->set_timeout != NULL) {
        c->ops->set_timeout(c, ms);
    }
}

/* tr_comm_close closes c (NULL is a no-op). */
static inline void tr_comm_close(tr_comm *c, int failed)
{
    if (c != NULL) {
        c->ops->close(c, failed);
    }
}

/* tr_comm_abort frees c without a goodbye to its peers (NULL is a no-op). */
static inline void tr_comm_abort(tr_comm *c)
{
    if (c != NULL && c->ops->abort != NULL) {
        c->ops->abort(c);
    } else if (c != NULL) {
        c->ops->close(c, 1);
    }
}

#endif
