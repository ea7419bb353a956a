/* shutdown.h - stopping the head on a signal, within a deadline (shutdown.c). */
#ifndef TR_SHUTDOWN_H
#define TR_SHUTDOWN_H

#include <stdint.h>

#include "err.h"

/* Stop signals (shutdown.c). tr_head_stop_signals_catch installs handlers
 * for SIGTERM and SIGINT that write the signal number to a self-pipe and
 * blocks them for the threads started afterwards; call it before any thread
 * starts. tr_head_stop_signal_wait unblocks them in its own thread, blocks
 * until one arrives and returns its number. Whichever thread runs the handler
 * (ours, or one we did not start, like a sanitizer runtime's), the signal
 * reaches the pipe: none is swallowed. tr_head_shutdown_deadline then bounds the shutdown: after
 * timeout_ms, or at a second stop signal, the process logs and exits with
 * status 1. */
int tr_head_stop_signals_catch(tr_err *err);
int tr_head_stop_signal_wait(void);
void tr_head_shutdown_deadline(int64_t timeout_ms);
/* tr_head_shutdown_step names the step of the stop now running (a string
 * that lives for good); the deadline's message says where it hung. */
void tr_head_shutdown_step(const char *what);

#endif
