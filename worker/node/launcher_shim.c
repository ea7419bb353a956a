/* launcher_shim.c - the worker shim: `troupe-node --exec-worker DIR -- CMD...`.
 *
 * It runs in the spawned child, in place of troupe-node's main (before any
 * thread, nng or CUDA exists, so fork is safe here), and stays as the leader
 * of the worker's process group:
 *
 *   - PR_SET_PDEATHSIG tells it when the agent dies; it then SIGKILLs the whole
 *     process group. (Armed on the command itself, the death signal would reach
 *     only that one process: a shell worker's children would live on.)
 *   - It is the child subreaper of everything the command starts, so children
 *     that setsid away stay in its tree: on the agent's death, a lease that ran
 *     out, or the command's own exit, it SIGKILLs that whole tree (proctree.h)
 *     and ends only once none is left, so the worker's GPUs are free when the
 *     launcher sees it end.
 *   - It holds the agent's lease (TR_EXEC_LEASE_ENV): past it, the worker is
 *     fenced (killed) even while the agent itself is frozen.
 *   - It ignores the stop signals the agent sends to the group, waits for the
 *     command, and ends the way the command ended (same exit code, or the same
 *     signal), so the launcher sees the command's own status.
 *   - It changes directory with a readable error and reports a command that
 *     cannot be started as "troupe-node: cannot start 'CMD': REASON", exit 127.
 *
 * The command itself starts with default signal dispositions and an empty
 * signal mask, and, given --as=UID:GID, as that user and group only (ids.h):
 * the shim stays the agent's user, so the worker can neither signal it nor
 * read the lease file, and the shim can always kill what the worker started. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launcher.h"
#include "launcher_shim.h"
#include "proctree.h"

/* How long the shim waits for a killed tree to be gone before it ends anyway
 * (a process in uninterruptible sleep cannot be hurried). */
#define TREE_GONE_MS 5000

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* lease_over reads the agent's lease file: 1 once its deadline has passed. */
static int lease_over(const char *path)
{
    char buf[32];
    ssize_t n;
    int fd;

    if (path == NULL || (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        return 0;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    return strtoll(buf, NULL, 10) > 0 && mono_ms() > strtoll(buf, NULL, 10);
}

/* fence kills the command and everything under us, then the group with us. */
static void fence(void)
{
    tr_proctree_signal(getpid(), SIGKILL);
    kill(0, SIGKILL);
    _exit(TR_SHIM_EXIT);
}

/* bury kills what the command left behind and reaps it all, so nothing the
 * worker started outlives it (nor holds its GPU). */
static void bury(void)
{
    int64_t until = mono_ms() + TREE_GONE_MS, next_kill = 0;
    int st;

    for (;;) {
        pid_t got = waitpid(-1, &st, WNOHANG);
        if (got > 0) {
            continue;
        }
        if (got < 0 && errno == ECHILD) {
            return;
        }
        if (mono_ms() >= until) {
            return;
        }
        if (mono_ms() >= next_kill) {
            tr_proctree_signal(getpid(), SIGKILL);
            next_kill = mono_ms() + 200;
        }
        usleep(10000);
    }
}

/* parent_gone says whether the agent died before the death signal was armed;
 * want is the pid the launcher put in TR_EXEC_PARENT_ENV, or -1 without it. */
static int parent_gone(long want)
{
    pid_t pp = getppid();
    return want > 0 ? (long)pp != want : pp == 1;
}

/* drop_ids makes the command's process the worker's own identity for good:
 * no supplementary groups, then the gid, then the uid (real, effective and
 * saved, so nothing can switch back), and checks that root's powers are
 * gone. The worker's files are its job group's too (umask 007): ranks of one
 * job share a workdir through the job's gid. Never returns on failure. */
static void drop_ids(const char *cmd, const char *dir, uid_t uid, gid_t gid)
{
    uid_t r, e, s;
    gid_t rg, eg, sg;

    if (setgroups(0, NULL) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0) {
        fprintf(stderr, TR_SHIM_PREFIX TR_CANNOT_START "'%s': cannot switch to uid %u gid %u: %s\n", cmd,
                (unsigned)uid, (unsigned)gid, strerror(errno));
        _exit(TR_SHIM_EXIT);
    }
    if (getresuid(&r, &e, &s) != 0 || r != uid || e != uid || s != uid || getresgid(&rg, &eg, &sg) != 0 ||
        rg != gid || eg != gid || sg != gid || getgroups(0, NULL) != 0 || (uid != 0 && setuid(0) == 0)) {
        fprintf(stderr, TR_SHIM_PREFIX TR_CANNOT_START "'%s': uid %u gid %u did not take hold\n", cmd,
                (unsigned)uid, (unsigned)gid);
        _exit(TR_SHIM_EXIT);
    }
    umask(007);
    /* Again as the worker: the directory must be usable by its uid, not
     * only by the agent's. */
    if (dir[0] != '\0' && chdir(dir) != 0) {
        fprintf(stderr,
                TR_SHIM_PREFIX TR_CANNOT_START
                "'%s': cannot change to directory '%s' as uid %u gid %u: %s (the "
                "job's workdir must be usable by its workers' ids: README "
                "\"Isolation\")\n",
                cmd, dir, (unsigned)uid, (unsigned)gid, strerror(errno));
        _exit(TR_SHIM_EXIT);
    }
}

/* run_command is the forked child: restore what the command must start
 * with, become the worker's identity (as != NULL), then exec it. Never
 * returns. */
static void run_command(char **argv, const char *cmd, const char *dir, const char *as)
{
    sigset_t none;
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGCHLD};

    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        signal(sigs[i], SIG_DFL);
    }
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (as != NULL) {
        unsigned long uid, gid;
        char tail;
        if (sscanf(as, "%lu:%lu%c", &uid, &gid, &tail) != 2) {
            fprintf(stderr, TR_SHIM_PREFIX TR_CANNOT_START "'%s': bad --as '%s'\n", cmd, as);
            _exit(TR_SHIM_EXIT);
        }
        drop_ids(cmd, dir, (uid_t)uid, (gid_t)gid);
    }
    execvp(cmd, argv);
    /* Say what the errno means for a command line, with what to check. */
    if (errno == ENOENT && strchr(cmd, '/') == NULL) {
        fprintf(stderr, TR_SHIM_PREFIX TR_CANNOT_START "'%s': command not found (is it on the node's PATH?)\n",
                cmd);
    } else if (errno == EACCES) {
        fprintf(stderr, TR_SHIM_PREFIX TR_CANNOT_START "'%s': %s (is it executable?)\n", cmd, strerror(errno));
    } else {
        fprintf(stderr, TR_SHIM_PREFIX TR_CANNOT_START "'%s': %s\n", cmd, strerror(errno));
    }
    _exit(TR_SHIM_EXIT);
}

/* wait_command waits for the command, the agent's death or the end of the
 * lease, whichever comes first, reaping adopted orphans on the way; returns
 * the command's wait status. */
static int wait_command(pid_t child, const sigset_t *waitset, const char *lease)
{
    int64_t next_check = 0;

    for (;;) {
        struct timespec ts = {0, TR_LEASE_CHECK_MS * 1000000L};
        int sig = sigtimedwait(waitset, NULL, &ts);
        int st;
        pid_t got;
        if (sig == SIGUSR1) {
            fence(); /* the agent is gone: take the whole tree down, us too */
        }
        if (mono_ms() >= next_check) {
            if (lease_over(lease)) {
                fprintf(stderr, TR_SHIM_PREFIX TR_SHIM_LEASE_LINE "; worker killed so that it cannot run twice\n");
                fence();
            }
            next_check = mono_ms() + TR_LEASE_CHECK_MS;
        }
        while ((got = waitpid(-1, &st, WNOHANG)) > 0) {
            if (got == child) {
                return st;
            }
        }
    }
}

/* supervise runs the command to its end and returns (or dies) the way it
 * ended, once nothing it started is left. */
static int supervise(pid_t child, const sigset_t *waitset, const char *lease)
{
    int st = wait_command(child, waitset, lease);

    bury();
    if (WIFEXITED(st)) {
        return WEXITSTATUS(st);
    }
    /* Die of the same signal so the launcher reports it as the command's. */
    signal(WTERMSIG(st), SIG_DFL);
    sigprocmask(SIG_UNBLOCK, waitset, NULL);
    raise(WTERMSIG(st));
    return 128 + WTERMSIG(st);
}

int tr_launcher_exec_worker(int argc, char **argv)
{
    const char *dir, *cmd, *env, *as = NULL;
    static char lease_buf[4096];
    const char *lease = NULL;
    sigset_t waitset;
    long want = -1;
    pid_t child;
    int at = 3;

    if (argc > 3 && strncmp(argv[3], "--as=", 5) == 0) {
        as = argv[3] + 5;
        at = 4;
    }
    if (argc < at + 2 || strcmp(argv[1], "--exec-worker") != 0 || strcmp(argv[at], "--") != 0) {
        fprintf(stderr,
                TR_SHIM_PREFIX "usage: troupe-node --exec-worker DIR [--as=UID:GID] -- CMD [ARGS...]\n");
        return TR_SHIM_EXIT;
    }
    dir = argv[2];
    cmd = argv[at + 1];
    env = getenv(TR_EXEC_PARENT_ENV);
    if (env != NULL) {
        want = strtol(env, NULL, 10);
        unsetenv(TR_EXEC_PARENT_ENV); /* the worker must not see it */
    }
    if ((env = getenv(TR_EXEC_LEASE_ENV)) != NULL) {
        snprintf(lease_buf, sizeof(lease_buf), "%s", env);
        lease = lease_buf;
        unsetenv(TR_EXEC_LEASE_ENV);
    }
    /* Block before arming the death signal, so it cannot be lost. */
    sigemptyset(&waitset);
    sigaddset(&waitset, SIGUSR1);
    sigaddset(&waitset, SIGCHLD);
    sigprocmask(SIG_BLOCK, &waitset, NULL);
    signal(SIGTERM, SIG_IGN); /* the command decides how to stop; we report it */
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
        fprintf(stderr, TR_SHIM_PREFIX TR_CANNOT_START "'%s': PR_SET_CHILD_SUBREAPER: %s\n", cmd, strerror(errno));
        return TR_SHIM_EXIT;
    }
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
        run_command(argv + at + 1, cmd, dir, as);
    }
    /* _exit, not return: once the command has ended the shim must end too
     * (the launcher reports the worker over, its GPUs free, only then), and
     * nothing at exit is ours to run. A sanitizer build's leak check at exit
     * would otherwise run here after every worker, with the agent's death
     * signal blocked: an agent killed meanwhile left the shim behind. */
    _exit(supervise(child, &waitset, lease));
}
