/* util.h - small stateless helpers shared by the daemons, libtroupe and the CLI. */
#ifndef TR_UTIL_H
#define TR_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* tr_now_ms returns CLOCK_MONOTONIC in milliseconds (for deadlines). */
int64_t tr_now_ms(void);

/* tr_wall_ms returns CLOCK_REALTIME in unix milliseconds (for records). */
int64_t tr_wall_ms(void);

/* tr_abstime_in fills ts (CLOCK_REALTIME, as pthread_cond_timedwait wants)
 * with the time ms from now. */
struct timespec;
void tr_abstime_in(struct timespec *ts, int64_t ms);

/* tr_sleep_ms sleeps, resuming after signals until the time has passed. */
void tr_sleep_ms(int64_t ms);

/* tr_ct_equal compares two NUL-terminated secrets in time that depends only on
 * the length of `expected`, never on where they first differ. */
int tr_ct_equal(const char *given, const char *expected);

/* tr_strlcpy copies at most size-1 bytes and always terminates; returns strlen(src). */
size_t tr_strlcpy(char *dst, const char *src, size_t size);

/* tr_mkdir_p creates a directory and its parents (mode 0755); 0 on success,
 * -1 with errno set otherwise. */
int tr_mkdir_p(const char *path);

/* tr_run_bounded runs fn(arg) on a thread of its own and waits for it at
 * most ms: for steps that must not hang their caller but may, in a library
 * we cannot fix (nng 1.5.2's nng_close: nng#648, nng#1543). fn owns arg: the
 * caller must not touch it after the call. Returns 1 when fn returned in
 * time (everything it freed is freed), 0 when the caller goes on without it
 * (the thread stays until fn returns, at worst until the process exits), -1
 * when no thread could be started (fn has not run). */
int tr_run_bounded(void (*fn)(void *), void *arg, int64_t ms);

#endif
