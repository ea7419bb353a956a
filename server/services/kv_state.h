/* kv_state.h - one space of a job's key-value store (server/kv.c): the keys
 * of one communicator at one epoch, and the calls waiting for keys in it.
 *
 * Pure, like rdzv_state.h: no RPC, no head, no clock of its own (callers pass
 * "now" and deadlines), so tests/unit/server/test_kv.c drives it directly.
 *
 * Semantics are torch.distributed's TCPStore's: set overwrites; get and wait
 * block until every key named is set; add treats the value as a decimal
 * int64 (a missing key is 0) and stores the sum back as text; compare_set
 * sets desired when the value equals expected (or the key is missing and
 * expected is empty) and answers the value now, or expected when the key is
 * missing and expected is not empty. Keys are 1..TR_KV_MAX_KEY bytes.
 *
 * Bounds: every space of a job shares one tr_kv_usage, counting its keys and
 * bytes (key + value); a change that would pass max_keys or max_bytes is
 * refused RESOURCE_EXHAUSTED with the numbers, and nothing changes. */
#ifndef TR_KV_STATE_H
#define TR_KV_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define TR_KV_MAX_KEY 1024
#define TR_KV_MAX_WAIT_KEYS 256 /* keys one wait may name */

typedef struct tr_kv_usage {
    uint64_t keys, bytes;         /* in use by every space of the job */
    uint64_t max_keys, max_bytes; /* the head's store_max_keys / store_max_bytes */
} tr_kv_usage;

/* Answers a parked waiter: code OK with the values of the keys it waited for
 * (n of them, in its order; n = 0 for a wait that wants none), or an error
 * code with msg. The state does not touch the token after this. */
typedef void (*tr_kv_answer_fn)(void *token, int code, const char *msg, const uint8_t *const *vals,
                                const size_t *lens, size_t n, void *ctx);

typedef struct tr_kv_space tr_kv_space;

/* tr_kv_space_new makes an empty space for communicator comm (copied) at
 * epoch, counting into usage (borrowed: it must outlive the space). size is
 * the communicator's number of ranks and rank_names (copied; NULL, or NULL
 * entries, for unknown) say who each is ("job7-policy-1 on node-b"): a
 * deadline names the ranks that never called this space (tr_kv_touch). */
int tr_kv_space_new(const char *comm, uint32_t epoch, uint32_t size, const char *const *rank_names,
                    tr_kv_usage *usage, tr_kv_space **out, tr_err *err);

/* tr_kv_touch records that rank called this space (ranks past size are
 * ignored). */
void tr_kv_touch(tr_kv_space *s, uint32_t rank);

/* tr_kv_space_free answers every waiter with code and why, gives its keys
 * and bytes back to the usage and frees; NULL is a no-op. */
void tr_kv_space_free(tr_kv_space *s, int code, const char *why, tr_kv_answer_fn answer, void *ctx);

const char *tr_kv_space_comm(const tr_kv_space *s);
uint32_t tr_kv_space_epoch(const tr_kv_space *s);
size_t tr_kv_num_keys(const tr_kv_space *s);
size_t tr_kv_num_waiters(const tr_kv_space *s);

/* tr_kv_set sets key to len bytes of val and answers the waiters it
 * completes. INVALID_ARGUMENT for a bad key, RESOURCE_EXHAUSTED past a bound. */
int tr_kv_set(tr_kv_space *s, const char *key, const uint8_t *val, size_t len, tr_kv_answer_fn answer,
              void *ctx, tr_err *err);

/* tr_kv_get returns 1 and borrows the value (valid until the space changes)
 * when key is set, 0 when not. */
int tr_kv_get(const tr_kv_space *s, const char *key, const uint8_t **val, size_t *len);

/* tr_kv_add adds amount to key's number (0 when missing) and stores the sum
 * in *out. INVALID_ARGUMENT when the value is not a decimal int64 or the sum
 * overflows. */
int tr_kv_add(tr_kv_space *s, const char *key, int64_t amount, int64_t *out, tr_kv_answer_fn answer,
              void *ctx, tr_err *err);

/* tr_kv_compare_set: see above. cur and cur_len borrow the value the caller
 * answers (from the space, or expected itself), valid until the next change. */
int tr_kv_compare_set(tr_kv_space *s, const char *key, const uint8_t *expected, size_t exp_len,
                      const uint8_t *desired, size_t des_len, const uint8_t **cur, size_t *cur_len,
                      tr_kv_answer_fn answer, void *ctx, tr_err *err);

/* tr_kv_delete removes key; returns 1 when it was set. */
int tr_kv_delete(tr_kv_space *s, const char *key);

/* tr_kv_wait: when every one of the n keys is set, sets *parked = 0 (the
 * caller reads them with tr_kv_get); otherwise parks token until `until`,
 * *parked = 1. since is when the wait began (for the deadline's message);
 * want_values says whether the answer carries the values (a get) or not. */
int tr_kv_wait(tr_kv_space *s, const char *const *keys, size_t n, int want_values, void *token, int64_t since,
               int64_t until, int *parked, tr_err *err);

/* tr_kv_expire answers every waiter whose deadline is <= now with
 * DEADLINE_EXCEEDED naming the keys still not set and the ranks that never
 * called the space (they cannot have set anything); returns the earliest
 * deadline still parked (INT64_MAX when none). */
int64_t tr_kv_expire(tr_kv_space *s, int64_t now, tr_kv_answer_fn answer, void *ctx);

/* tr_kv_forget drops a parked token without answering it; 1 when it was here. */
int tr_kv_forget(tr_kv_space *s, void *token);

#endif
