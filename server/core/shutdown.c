/* shutdown.c - a bounded final deadline for troupe-head's shutdown.
 *
 * After SIGTERM/SIGINT the head stops serving, writes what is left and exits.
 * One step is not ours to bound: nng_close() on the RPC socket. nng 1.5.2 (the
 * Debian 12 package) has close races in which it never returns, fixed upstream
 * in 1.8 ("fix deadlock on socket close": an aio begun but not yet scheduled
 * is not aborted by nni_aio_stop; pipes closed during negotiation are reaped
 * late); a head was seen hanging there in 2 of 7 SIGTERMs after oversized
 * replies. So the stop runs under a deadline: when shutdown_timeout_ms passes,
 * or a second stop signal arrives, the head logs what happened and exits at
 * once with status 1. That is safe by design: a change is acknowledged only
 * once it is on disk, so this exit loses nothing a client was told, exactly
 * like kill -9, which the head survives.
 *
 * Stop signals arrive through handlers writing to a self-pipe rather than
 * sigwait on a blocked set: every thread must then block them, and a thread
 * we do not start (a sanitizer runtime's) may not, taking the second signal
 * before the watchdog sees it (integration.jobs.shutdown under ASan). */
#include "shutdown.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "head.h"
#include "log.h"

/* The step of the stop now running (tr_head_shutdown_step), named by the
 * watchdog when the deadline passes: "did not finish" alone says nothing of
 * where it hung. */
static const char *_Atomic stop_step = "the stop before its first step";

/* The self-pipe the handlers write to: [0] read by main and the watchdog. */
static int stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    /* Async-signal-safe. If the pipe is full, signals are already waiting. */
    (void)!write(stop_pipe[1], &b, 1);
    errno = saved;
}

int tr_head_stop_signals_catch(tr_err *err)
{
    struct sigaction sa;
    sigset_t sigs;

    if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        return tr_err_set(err, TROUPE_INTERNAL, "stop signals: pipe: %s", strerror(errno));
    }
    /* Reads block (poll does the waiting); the handler's write must not. */
    fcntl(stop_pipe[0], F_SETFL, fcntl(stop_pipe[0], F_GETFL) & ~O_NONBLOCK);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) {
        return tr_err_set(err, TROUPE_INTERNAL, "stop signals: sigaction: %s", strerror(errno));
    }
    /* Blocked in the threads started from here on (nng's, ours), which then
     * never see EINTR for them; tr_head_stop_signal_wait unblocks them in the
     * waiting thread. A thread we did not start may still run the handler:
     * harmless, it only writes to the pipe. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    return TROUPE_OK;
}

/* next_stop_signal waits up to timeout_ms (-1: forever) for one; 0 on timeout. */
static int next_stop_signal(int timeout_ms)
{
    struct pollfd p = {.fd = stop_pipe[0], .events = POLLIN};
    unsigned char b;
    int n;

    for (;;) {
        n = poll(&p, 1, timeout_ms);
        if (n < 0 && errno == EINTR) {
            continue; /* the remaining time is not tracked: a bound, not a timer */
        }
        if (n <= 0) {
            return 0;
        }
        if (read(stop_pipe[0], &b, 1) == 1) {
            return b;
        }
        if (errno != EINTR && errno != EAGAIN) {
            return 0;
        }
    }
}

int tr_head_stop_signal_wait(void)
{
    sigset_t sigs;
    int sig;

    /* This thread takes them from now on (a parent may also have started us
     * with them blocked: a shell's background job, an init that masks). */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_UNBLOCK, &sigs, NULL);
    while ((sig = next_stop_signal(-1)) == 0) {
        /* poll failing outright would spin; it cannot on a valid pipe */
    }
    return sig;
}

static void *watchdog_main(void *arg)
{
    int64_t timeout_ms = *(int64_t *)arg;
    int sig = next_stop_signal(timeout_ms > INT32_MAX ? INT32_MAX : (int)timeout_ms);

    if (sig > 0) {
        TR_LOG(TR_LOG_WARNING, "second stop signal during shutdown (%s); exiting now without finishing it",
               sig == SIGTERM ? "SIGTERM" : "SIGINT");
    } else {
        TR_LOG(TR_LOG_ERR,
               "shutdown did not finish within %lld ms (shutdown_timeout_ms), still in: %s; exiting now: every "
               "acknowledged change is already on disk, as after kill -9",
               (long long)timeout_ms, atomic_load(&stop_step));
    }
    tr_log_flush(1000); /* the line above, and what led to it */
    _exit(1);
    return NULL;
}

void tr_head_shutdown_step(const char *what)
{
    atomic_store(&stop_step, what);
}

void tr_head_shutdown_deadline(int64_t timeout_ms)
{
    static int64_t t;
    pthread_t th;

    t = timeout_ms;
    if (pthread_create(&th, NULL, watchdog_main, &t) != 0) {
        TR_LOG(TR_LOG_WARNING, "cannot start the shutdown deadline thread; shutting down without one");
        return;
    }
    pthread_detach(th);
}
