/* nccl_wait.h - the deadline loop of the NCCL helper, apart from NCCL so it
 * can be tested without a GPU.
 *
 * A non-blocking NCCL call (ncclCommInitRankConfig with blocking=0, then
 * collectives on such a communicator) returns ncclInProgress and must be
 * polled with ncclCommGetAsyncError until it settles. NCCL offers no wake-up,
 * so polling is the only way; tr_nccl_wait polls with a short back-off (1 ms
 * doubling to 20 ms) and never sleeps past the deadline. */
#ifndef TR_NCCL_WAIT_H
#define TR_NCCL_WAIT_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/client.h"

/* A poll says 1 (ready), 0 (still in progress) or -1 (failed: it writes the
 * reason to why). */
typedef int (*tr_nccl_poll_fn)(void *user, char *why, size_t len);

/* The clock, replaceable by tests; NULL fields use CLOCK_MONOTONIC and
 * nanosleep. */
typedef struct tr_nccl_clock {
    uint64_t (*now_ms)(void *user);
    void (*sleep_ms)(void *user, uint32_t ms);
    void *user;
} tr_nccl_clock;

/* tr_nccl_wait polls until ready (OK), failure (UNAVAILABLE: "<what> failed:
 * <why>") or deadline_ms on clk's clock passes (DEADLINE_EXCEEDED: "<what>
 * still in progress after N ms"). It polls at least once, also when the
 * deadline has already passed. clk may be NULL. */
troupe_status tr_nccl_wait(const tr_nccl_clock *clk, tr_nccl_poll_fn poll, void *user, uint64_t deadline_ms,
                           const char *what, troupe_error *err);

/* tr_nccl_err records code and a printf-style message in err (may be NULL)
 * and returns code. */
troupe_status tr_nccl_err(troupe_error *err, troupe_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* tr_nccl_now_ms is the default clock (CLOCK_MONOTONIC, ms). */
uint64_t tr_nccl_now_ms(void);

#endif
