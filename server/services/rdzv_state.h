/* rdzv_state.h - the rendezvous state of one communicator at one epoch.
 *
 * Pure: no RPC, no head, no clock of its own (callers pass "now" and
 * deadlines), so tests/unit/server/test_rdzv.c drives it directly. The head's
 * service (rdzv.c) keeps one per communicator of a running job, under h->mu.
 *
 * Two kinds of exchange:
 * - IDs: rank 0 publishes 1..TR_RDZV_MAX_IDS NCCL unique IDs (128 bytes
 *   each) once per epoch; every other rank waits for them. One publish
 *   answers every waiter. A second publish with the same bytes is a retry
 *   (OK); with other bytes it is refused: a new initialisation is a new epoch.
 * - Gathers, by name and sequence number: every rank contributes a blob (at
 *   most TR_RDZV_MAX_BLOB bytes, possibly empty: a barrier) and all get every
 *   rank's blob in rank order once the last arrives. The last completed
 *   result is kept, so a rank whose reply was lost can ask again.
 *
 * A waiter is an opaque token (an RPC call in the head) with a deadline; at
 * its deadline it is answered DEADLINE_EXCEEDED with the ranks that never
 * arrived, by name ("2 job7-policy-2 on node-b"). */
#ifndef TR_RDZV_STATE_H
#define TR_RDZV_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define TR_RDZV_ID_BYTES 128
#define TR_RDZV_MAX_IDS 16
#define TR_RDZV_MAX_BLOB 4096
#define TR_RDZV_MAX_GATHERS 64 /* gather names in progress per communicator epoch */
#define TR_RDZV_MAX_NAME 64

/* What a completed exchange hands a rank; borrowed from the state until its
 * next change (the head packs the reply at once, under h->mu). */
typedef struct tr_rdzv_result {
    uint32_t epoch, rank, size;
    const uint8_t *ids; /* n_ids * TR_RDZV_ID_BYTES */
    uint32_t n_ids;
    const uint8_t *const *data; /* gathers: size blobs, by rank */
    const uint32_t *len;
} tr_rdzv_result;

/* Answers a parked waiter: code OK with res, or an error code with msg. The
 * token is not touched again by the state after this call. */
typedef void (*tr_rdzv_answer_fn)(void *token, int code, const char *msg, const tr_rdzv_result *res, void *ctx);

typedef struct tr_rdzv_comm tr_rdzv_comm;

/* tr_rdzv_comm_new makes the state for communicator name at epoch, with size
 * ranks; rank_names[r] (copied) names rank r in messages ("job7-policy-2 on
 * node-b"). Free with tr_rdzv_comm_free. */
int tr_rdzv_comm_new(const char *name, uint32_t epoch, uint32_t size, const char *const *rank_names,
                     tr_rdzv_comm **out, tr_err *err);

/* tr_rdzv_comm_free answers every parked waiter with code and why, then
 * frees; NULL is a no-op. */
void tr_rdzv_comm_free(tr_rdzv_comm *c, int code, const char *why, tr_rdzv_answer_fn answer, void *ctx);

const char *tr_rdzv_comm_name(const tr_rdzv_comm *c);
uint32_t tr_rdzv_comm_epoch(const tr_rdzv_comm *c);
uint32_t tr_rdzv_comm_size(const tr_rdzv_comm *c);

/* tr_rdzv_publish records rank's IDs (n_ids of them, ids holds them back to
 * back, lens[i] their sizes as received) and answers every parked ID waiter.
 * OUT_OF_RANGE for a rank outside the communicator, INVALID_ARGUMENT for a
 * rank other than 0, no IDs, too many or a wrong size, ALREADY_EXISTS when
 * other bytes were published for this epoch. */
int tr_rdzv_publish(tr_rdzv_comm *c, uint32_t rank, const uint8_t *const *ids, const size_t *lens, size_t n_ids,
                    tr_rdzv_answer_fn answer, void *ctx, tr_err *err);

/* tr_rdzv_ids_wait: when the IDs are published, fills *res and sets *parked
 * to 0; otherwise parks token until `until` (*parked = 1). Rank 0 never
 * waits (it publishes): INVALID_ARGUMENT. */
int tr_rdzv_ids_wait(tr_rdzv_comm *c, uint32_t rank, void *token, int64_t until, tr_rdzv_result *res,
                     int *parked, tr_err *err);

/* tr_rdzv_gather adds rank's blob to gather `name` number seq. When that
 * completes the gather, every parked waiter is answered and *res is filled
 * (*parked = 0); when others are still missing, token is parked until
 * `until` (*parked = 1). A seq already completed last time is answered from
 * the kept result; an older one, or one ahead of the gather in progress, is
 * FAILED_PRECONDITION (ranks disagree on the sequence). */
int tr_rdzv_gather(tr_rdzv_comm *c, uint32_t rank, const char *name, uint64_t seq, const uint8_t *data,
                   size_t len, void *token, int64_t until, tr_rdzv_answer_fn answer, void *ctx,
                   tr_rdzv_result *res, int *parked, tr_err *err);

/* tr_rdzv_expire answers every waiter whose deadline is <= now with
 * DEADLINE_EXCEEDED naming the missing ranks; returns the earliest deadline
 * still parked (INT64_MAX when none). */
int64_t tr_rdzv_expire(tr_rdzv_comm *c, int64_t now, tr_rdzv_answer_fn answer, void *ctx);

/* tr_rdzv_forget drops a parked token without answering it (its call was
 * answered elsewhere); returns 1 when it was parked here. */
int tr_rdzv_forget(tr_rdzv_comm *c, void *token);

/* One exchange that has waiters, for `troupe job`. */
typedef struct tr_rdzv_pending {
    char what[TR_RDZV_MAX_NAME + 8]; /* "ids", or the gather's name ("barrier:step") */
    uint32_t arrived;
    uint32_t n_missing;        /* entries in missing[] (at most 32) */
    const char *missing[32];   /* rank names, borrowed from the state */
    uint32_t missing_rank[32];
} tr_rdzv_pending;

/* tr_rdzv_pending_list fills at most max entries and returns how many
 * exchanges have waiters. */
size_t tr_rdzv_pending_list(const tr_rdzv_comm *c, tr_rdzv_pending *out, size_t max);

#endif
