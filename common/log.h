/* log.h - one line per event, syslog levels, key=value ids.
 *
 * TR_LOG checks the level before formatting (Redis serverLog), so a debug line
 * in a hot path costs one comparison when debug is off. Lines go to stderr:
 *   2026-11-22T10:55:01.123Z troupe-head[412] info: node registered node=3 gpus=8
 * Thread-safe: each line is written with one write(2), or, once
 * tr_log_async_start was called (the head), copied to a ring that one writer
 * thread writes out, so no caller blocks on stderr while it holds a lock. */
#ifndef TR_LOG_H
#define TR_LOG_H

enum {
    TR_LOG_ERR = 3,
    TR_LOG_WARNING = 4,
    TR_LOG_NOTICE = 5,
    TR_LOG_INFO = 6,
    TR_LOG_DEBUG = 7,
};

extern int tr_log_level;

#define TR_LOG(lvl, ...)                                                                                     \
    do {                                                                                                     \
        if ((lvl) <= tr_log_level) {                                                                         \
            tr_log_write((lvl), __VA_ARGS__);                                                                \
        }                                                                                                    \
    } while (0)

/* tr_log_init sets the program name shown on each line and the level. */
void tr_log_init(const char *prog, int level);

/* tr_log_write formats and writes one line; use TR_LOG instead. */
void tr_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* tr_log_async_start starts the writer thread: from then on TR_LOG only
 * formats and copies its line (a full ring waits up to 1 s for room, then
 * drops the line and the writer counts it). Returns -1 when the thread cannot
 * start (lines are then written directly, as before). Call before other
 * threads log. */
int tr_log_async_start(void);

/* tr_log_flush waits up to timeout_ms until every line so far is written
 * (before _exit). Any thread. */
void tr_log_flush(int timeout_ms);

/* tr_log_flush_mine waits up to timeout_ms until the lines this thread
 * logged are written (and so every line before them); returns at once when
 * it logged none since its last call. A server calls it before it answers
 * a call whose handler logged, so that the line a refusal logged is in the
 * log by the time the client reads the refusal. Call with no lock held. */
void tr_log_flush_mine(int timeout_ms);

/* tr_log_async_stop writes what is left and stops the writer; later lines
 * are written directly. No-op when it was not started. */
void tr_log_async_stop(void);

/* tr_log_level_parse maps "err|warning|notice|info|debug" (or a digit) to a
 * level; returns -1 for anything else. */
int tr_log_level_parse(const char *s);

#endif
