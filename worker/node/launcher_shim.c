/* launcher_shim.c - the worker shim: `troupe-node --exec-worker DIR -- CMD...`.
 *
 * It runs in the spawned child, in place of troupe-node's main, and does what
 * posix_spawn cannot do for us between fork and exec: arm PR_SET_PDEATHSIG
 * (so the worker dies with a killed agent) and change directory with a
 * readable error. It touches nothing global before exec (no logging setup,
 * no allocation), so the exec'd command starts from a clean image. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
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

int tr_launcher_exec_worker(int argc, char **argv)
{
    const char *dir, *cmd, *env;
    long want = -1;

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
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
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
    execvp(cmd, argv + 4);
    fprintf(stderr, TR_SHIM_PREFIX TR_CANNOT_START "'%s': %s\n", cmd, strerror(errno));
    return TR_SHIM_EXIT;
}
