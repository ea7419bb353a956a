/* launcher_shim.c - the worker shim: `troupe-node --exec-worker DIR -- CMD...`.
 *
 * It runs in the spawned child, in place of troupe-node's main (before any
 * thread, nng or CUDA exists, so fork is safe here), and stays as the leader
 * of the worker's process group:
 *
 *   - PR_SET_PDEATHSIG tells it when the agent dies; it then SIGKILLs the whole
 *     process group. (Armed on the command itself, the death signal would reach
 *     only that one process: a shell worker's children would live on.)
 *   - It ignores the stop signals the agent sends to the group, waits for the
 *     command, and ends the way the command ended (same exit code, or the same
 *     signal), so the launcher sees the command's own status.
 *   - It changes directory with a readable error and reports a command that
 *     cannot be started as "troupe-node: cannot start 'CMD': REASON", exit 127.
 *
 * The command itself starts with default signal dispositions and an empty
 * signal mask. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher.h"
#include "launcher_shim.h"

/* parent_gone says whether the agent died before the death signal was armed;
 * want is the pid the launcher put in TR_EXEC_PARENT_ENV, or -1 without it. */
static int parent_gone(long want)
{
    pid_t pp = getppid();
    return want > 0 ? (long)pp != want : pp == 1;
}

/* run_command is the forked child: restore what the command must start
 * with, then exec it. Never returns. */
static void run_command(char **argv, const char *cmd)
{
    sigset_t none;
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGCHLD};

    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        signal(sigs[i], SIG_DFL);
    }
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execvp(cmd, argv);
    fprintf(stderr, TR_SHIM_PREFIX TR_CANNOT_START "'%s': %s\n", cmd, strerror(errno));
    _exit(TR_SHIM_EXIT);
}

/* supervise waits for the command or the agent's death, whichever comes
 * first, and returns (or dies) the way the command ended. */
static int supervise(pid_t child, const sigset_t *waitset)
{
    for (;;) {
        int sig = sigwaitinfo(waitset, NULL);
        int st;
        if (sig == SIGUSR1) {
            kill(0, SIGKILL); /* the agent is gone: take the whole group down, us too */
            _exit(TR_SHIM_EXIT);
        }
        if (sig != SIGCHLD || waitpid(child, &st, WNOHANG) != child) {
            continue;
        }
        if (WIFEXITED(st)) {
            return WEXITSTATUS(st);
        }
        /* Die of the same signal so the launcher reports it as the command's. */
        signal(WTERMSIG(st), SIG_DFL);
        sigprocmask(SIG_UNBLOCK, waitset, NULL);
        raise(WTERMSIG(st));
        return 128 + WTERMSIG(st);
    }
}

int tr_launcher_exec_worker(int argc, char **argv)
{
    const char *dir, *cmd, *env;
    sigset_t waitset;
    long want = -1;
    pid_t child;

    if (argc < 5 || strcmp(argv[1], "--exec-worker") != 0 || strcmp(argv[3], "--") != 0) {
        fprintf(stderr, TR_SHIM_PREFIX "usage: troupe-node --exec-worker DIR -- CMD [ARGS...]\n");
        return TR_SHIM_EXIT;
    }
    dir = argv[2];
    cmd = argv[4];
    env = getenv(TR_EXEC_PARENT_ENV);
    if (env != NULL) {
        want = strtol(env, NULL, 10);
        unsetenv(TR_EXEC_PARENT_ENV); /* the worker must not see it */
    }
    /* Block before arming the death signal, so it cannot be lost. */
    sigemptyset(&waitset);
    sigaddset(&waitset, SIGUSR1);
    sigaddset(&waitset, SIGCHLD);
    sigprocmask(SIG_BLOCK, &waitset, NULL);
    signal(SIGTERM, SIG_IGN); /* the command decides how to stop; we report it */
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    if (prctl(PR_SET_PDEATHSIG, SIGUSR1) != 0) {
        fprintf(stderr, TR_SHIM_PREFIX TR_CANNOT_START "'%s': PR_SET_PDEATHSIG: %s\n", cmd, strerror(errno));
        return TR_SHIM_EXIT;
    }
    if (parent_gone(want)) {
        fprintf(stderr, TR_SHIM_PREFIX TR_CANNOT_START "'%s': the agent exited first\n", cmd);
        return TR_SHIM_EXIT;
    }
    if (dir[0] != '\0' && chdir(dir) != 0) {
        fprintf(stderr, TR_SHIM_PREFIX TR_CANNOT_START "'%s': cannot change to directory '%s': %s\n", cmd,
                dir, strerror(errno));
        return TR_SHIM_EXIT;
    }
    child = fork();
    if (child < 0) {
        fprintf(stderr, TR_SHIM_PREFIX TR_CANNOT_START "'%s': fork: %s\n", cmd, strerror(errno));
        return TR_SHIM_EXIT;
    }
    if (child == 0) {
        run_command(argv + 4, cmd);
    }
    return supervise(child, &waitset);
}
