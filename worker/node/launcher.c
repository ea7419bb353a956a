/* launcher.c - starting, supervising and stopping worker processes.
 *
 * The life of a worker record:
 *
 *   start ─► RUNNING ──stop──► STOPPING ──(grace over: SIGKILL the group)──┐
 *              │                  │                                         │
 *              └──(exit reaped)───┴──────────(exit reaped)◄─────────────────┘
 *                                     ├─► EXITED
 *                                     └─► FAILED_TO_START (the shim said "cannot start")
 *   start ─(log file or posix_spawn failed)─► FAILED_TO_START
 *
 * Why a shim: PR_SET_PDEATHSIG must be set by the child itself, between fork
 * and exec, and posix_spawn runs no code of ours there. So the launcher spawns
 * troupe-node itself (`troupe-node --exec-worker DIR -- CMD...`); the shim sets
 * the death signal, changes directory and execs the command.
 *
 * Why FAILED_TO_START is decided at reap time: posix_spawn of the shim
 * succeeds even when the command does not exist; the exec of the command
 * happens later, in the shim, and the only ways back are the exit status and
 * the log. Exit status 127 alone is ambiguous (sh says 127 for "command not
 * found" too, which is a worker that ran), so the launcher also requires the
 * shim's own first log line, "troupe-node: cannot start 'CMD': REASON", and
 * takes its message from there. The head can then say "command not found"
 * instead of "exited with code 127".
 *
 * Why the group is killed before the leader is reaped: a worker is a process
 * group (a shell and its children). When the leader exits, leftovers of the
 * group are SIGKILLed. We first look at the exit with waitid(WNOWAIT), which
 * leaves the leader a zombie; the zombie pins its pid and so its process group
 * id, so kill(-pgid) cannot hit a recycled group. Then waitpid reaps it. Only
 * per-pid waits are used (never -1): the agent may have other children.
 *
 * Log reading: each record keeps the log size at spawn (its base: a reused
 * name.attempt.log is appended to, and the old text is not this attempt's) and
 * a read offset; the file is opened by path on every read, which survives log
 * rotation by hand and costs nothing at the rates the head asks. */
#include "launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher_shim.h"
#include "log.h"
#include "safefile.h"
#include "proctree.h"
#include "util.h"

extern char **environ;

#define TR_CLOSE_WAIT_MS 2000

typedef struct tr_worker {
    uint64_t job_id;
    char *name;
    uint32_t attempt;
    tr_worker_phase phase;
    pid_t pid; /* also the process group id; 0 when nothing was spawned */
    int exit_code;
    int signal;
    char *log_path;
    off_t log_base; /* log size at spawn: where this attempt's output begins */
    off_t log_off;  /* next byte tr_launcher_read_log hands out */
    int has_log;    /* the log was opened at start (not so when that failed) */
    int64_t started_ms, ended_ms;
    int stopping;     /* tr_launcher_stop was called while it ran */
    int escalated;    /* the grace ran out and the group got SIGKILL */
    int64_t kill_at;  /* tr_now_ms() deadline for the SIGKILL while STOPPING */
    int64_t grace_ms; /* the grace this stop was given (for the message) */
    char message[TR_ERR_MSG_MAX];
    char *report_glob; /* spec->report_glob */
    char *report;      /* its newest match, found when the worker ended */
} tr_worker;

struct tr_launcher {
    char *log_dir;
    char *self_exe;
    int64_t grace_ms;
    tr_worker **w; /* heap records, so borrowed strings survive growth and forget of others */
    size_t n, cap;
    int changes; /* phase changes since the last tr_launcher_poll */
};

/* ---- small helpers ---- */

/* sig_name writes "SIGKILL" (or "signal 77") into buf and returns it. */
static const char *sig_name(int sig, char *buf, size_t size)
{
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev != NULL) {
        snprintf(buf, size, "SIG%s", abbrev);
    } else {
        snprintf(buf, size, "signal %d", sig);
    }
    return buf;
}

/* signal_worker signals the worker's group and every descendant that left it
 * (the shim ignores SIGTERM and dies of SIGKILL last, so the tree is walked
 * while it is still there to hold the orphans). */
static void signal_worker(const tr_worker *w, int sig)
{
    tr_proctree_signal(w->pid, sig);
    if (kill(-w->pid, sig) != 0) {
        TR_LOG(TR_LOG_DEBUG, "kill(-%d, %d): %s", (int)w->pid, sig, strerror(errno));
    }
}

static int is_live(const tr_worker *w)
{
    return w->phase == TR_WORKER_RUNNING || w->phase == TR_WORKER_STOPPING;
}

static void worker_free(tr_worker *w)
{
    if (w != NULL) {
        free(w->name);
        free(w->log_path);
        free(w->report_glob);
        free(w->report);
        free(w);
    }
}

/* find_report records the newest file matching the worker's report glob that
 * was written since it started (an earlier attempt's report of the same
 * worker and range matches the glob too). The worker has ended: a tool that
 * wrote it (nsys) has finished. */
static void find_report(tr_worker *w)
{
    glob_t g;
    time_t best_t = 0;
    const char *best = NULL;

    if (w->report_glob == NULL || glob(w->report_glob, 0, NULL, &g) != 0) {
        return;
    }
    for (size_t i = 0; i < g.gl_pathc; i++) {
        struct stat st;
        if (stat(g.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode) && st.st_mtime >= w->started_ms / 1000 - 1 &&
            (best == NULL || st.st_mtime >= best_t)) {
            best = g.gl_pathv[i];
            best_t = st.st_mtime;
        }
    }
    if (best != NULL) {
        free(w->report);
        w->report = strdup(best);
        TR_LOG(TR_LOG_INFO, "worker=%s attempt=%u report %s", w->name, w->attempt, best);
    } else {
        TR_LOG(TR_LOG_WARNING, "worker=%s attempt=%u wrote no report matching %s", w->name, w->attempt,
               w->report_glob);
    }
    globfree(&g);
}

/* set_failed records a start that never produced a process. */
static void set_failed(tr_worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_failed(tr_worker *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->message, sizeof(w->message), fmt, ap);
    va_end(ap);
    w->phase = TR_WORKER_FAILED_TO_START;
    w->exit_code = -1;
    w->pid = 0;
    w->ended_ms = tr_wall_ms();
    TR_LOG(TR_LOG_WARNING, "worker failed to start job=%llu worker=%s attempt=%u: %s",
           (unsigned long long)w->job_id, w->name, w->attempt, w->message);
}

/* ---- building argv and envp for the shim ---- */

/* key_is says whether "K=V" entry kv has the key of "K=..." entry other. */
static int key_is(const char *kv, const char *other)
{
    size_t n = strcspn(other, "=");
    return strncmp(kv, other, n) == 0 && kv[n] == '=';
}

static int in_list(const char *kv, const char *const *list)
{
    for (size_t i = 0; list != NULL && list[i] != NULL; i++) {
        if (key_is(kv, list[i])) {
            return 1;
        }
    }
    return 0;
}

/* build_envp returns a malloc'ed array (free only the array; the strings are
 * borrowed from environ, spec->env and parent_kv): the agent's environment,
 * less the keys spec->env sets, then spec->env (the last of repeated keys
 * wins), then NCCL_NVLS_ENABLE=0 when nobody set it (house rule for workers
 * on machines where NVLink multicast must stay off), then parent_kv. */
static char **build_envp(const char *const *env, char *parent_kv, char *lease_kv)
{
    static char nvls_off[] = "NCCL_NVLS_ENABLE=0";
    size_t ne = 0, ns = 0, k = 0;
    char **envp;
    int have_nvls = 0;

    while (environ != NULL && environ[ne] != NULL) {
        ne++;
    }
    while (env != NULL && env[ns] != NULL) {
        ns++;
    }
    envp = calloc(ne + ns + 4, sizeof(*envp));
    if (envp == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < ne; i++) {
        /* The agent's own credentials never reach a worker: it gets its job's
         * worker credential in a file (TROUPE_CREDENTIALS, set in env). */
        if (key_is(environ[i], "TROUPE_TOKEN=") || key_is(environ[i], "TROUPE_TOKEN_FILE=") ||
            key_is(environ[i], "TROUPE_CREDENTIALS=") || key_is(environ[i], "TROUPE_TLS_KEY=") ||
            key_is(environ[i], "TROUPE_TLS_CERT=")) {
            continue;
        }
        if (!in_list(environ[i], env) && !key_is(environ[i], TR_EXEC_PARENT_ENV "=") &&
            !key_is(environ[i], TR_EXEC_LEASE_ENV "=")) {
            have_nvls |= key_is(environ[i], nvls_off);
            envp[k++] = environ[i];
        }
    }
    for (size_t i = 0; i < ns; i++) {
        /* The shim's own keys are the agent's to set, never the job's. */
        if (strncmp(env[i], "TROUPE_EXEC_WORKER_", 19) == 0) {
            continue;
        }
        if (!in_list(env[i], env + i + 1)) {
            have_nvls |= key_is(env[i], nvls_off);
            envp[k++] = (char *)env[i];
        }
    }
    if (!have_nvls) {
        envp[k++] = nvls_off;
    }
    envp[k++] = parent_kv;
    envp[k] = lease_kv; /* NULL ends the array when there is no lease */
    return envp;
}

/* build_argv returns {self_exe, "--exec-worker", workdir, [as,] "--",
 * argv..., NULL} (malloc'ed array of borrowed strings; as is "--as=UID:GID"
 * or NULL) and sets *cmd_at to the index of the command. */
static char **build_argv(const tr_launcher *l, const tr_worker_spec *spec, char *as, size_t *cmd_at)
{
    size_t n = 0, k = 3;
    char **av;

    while (spec->argv[n] != NULL) {
        n++;
    }
    av = calloc(n + 6, sizeof(*av));
    if (av == NULL) {
        return NULL;
    }
    av[0] = l->self_exe;
    av[1] = "--exec-worker";
    av[2] = (char *)(spec->workdir != NULL ? spec->workdir : "");
    if (as != NULL) {
        av[k++] = as;
    }
    av[k++] = "--";
    *cmd_at = k;
    for (size_t i = 0; i < n; i++) {
        av[k + i] = (char *)spec->argv[i];
    }
    return av;
}

/* ---- spawning ---- */

/* spawn_setup prepares a new process group, an empty signal mask, default
 * dispositions for the signals the agent handles or ignores, stdin from
 * /dev/null, stdout and stderr to log_fd (>= 3), and no other inherited fds
 * (the agent's sockets must not leak into workers). Returns an errno value. */
static int spawn_setup(posix_spawn_file_actions_t *fa, posix_spawnattr_t *at, int log_fd)
{
    sigset_t none, dfl;
    int rc;

    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGTERM);
    sigaddset(&dfl, SIGINT);
    sigaddset(&dfl, SIGPIPE);
    sigaddset(&dfl, SIGCHLD);
    rc = posix_spawnattr_setflags(at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    if (rc == 0) {
        rc = posix_spawnattr_setpgroup(at, 0);
    }
    if (rc == 0) {
        rc = posix_spawnattr_setsigmask(at, &none);
    }
    if (rc == 0) {
        rc = posix_spawnattr_setsigdefault(at, &dfl);
    }
    if (rc == 0) {
        rc = posix_spawn_file_actions_addopen(fa, 0, "/dev/null", O_RDONLY, 0);
    }
    if (rc == 0) {
        rc = posix_spawn_file_actions_adddup2(fa, log_fd, 1);
    }
    if (rc == 0) {
        rc = posix_spawn_file_actions_adddup2(fa, log_fd, 2);
    }
    if (rc == 0) {
        rc = posix_spawn_file_actions_addclosefrom_np(fa, 3);
    }
    return rc;
}

/* open_log opens the worker's log for appending, creating the directory, and
 * records where this attempt's output begins. Returns the fd (>= 3) or -1. */
static int open_log(tr_launcher *l, tr_worker *w, const char *cmd)
{
    struct stat st;
    int fd = -1;

    tr_err err;

    if (tr_dir_private(l->log_dir, &err) != TROUPE_OK) {
        set_failed(w, TR_CANNOT_START "'%s': log directory: %s", cmd, err.msg);
        return -1;
    }
    /* O_NOFOLLOW: a symlink planted where a log goes is refused, not followed. */
    fd = open(w->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0 && fd < 3) { /* only when the agent runs with 0-2 closed; dup2 onto 1/2 needs fd >= 3 */
        int hi = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        close(fd);
        fd = hi;
    }
    if (fd < 0 || fstat(fd, &st) != 0) {
        set_failed(w, TR_CANNOT_START "'%s': log file '%s': %s", cmd, w->log_path, strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    w->log_base = st.st_size;
    w->log_off = st.st_size;
    w->has_log = 1;
    return fd;
}

/* spawn_worker starts the shim for w (argv[cmd_at] is the command); on
 * failure w becomes FAILED_TO_START. */
static void spawn_worker(tr_launcher *l, tr_worker *w, char *const *argv, size_t cmd_at, char *const *envp)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int fd, rc, have_fa = 0, have_at = 0;

    w->started_ms = tr_wall_ms();
    fd = open_log(l, w, argv[cmd_at]);
    if (fd < 0) {
        goto out;
    }
    rc = posix_spawn_file_actions_init(&fa);
    have_fa = rc == 0;
    if (rc == 0) {
        rc = posix_spawnattr_init(&at);
        have_at = rc == 0;
    }
    if (rc == 0) {
        rc = spawn_setup(&fa, &at, fd);
    }
    if (rc == 0) {
        rc = posix_spawn(&w->pid, l->self_exe, &fa, &at, argv, envp);
    }
    if (rc != 0) {
        set_failed(w, TR_CANNOT_START "'%s': spawning %s: %s", argv[cmd_at], l->self_exe, strerror(rc));
        goto out;
    }
    w->phase = TR_WORKER_RUNNING;
    TR_LOG(TR_LOG_INFO, "worker started job=%llu worker=%s attempt=%u pid=%d log=%s",
           (unsigned long long)w->job_id, w->name, w->attempt, (int)w->pid, w->log_path);
out:
    if (have_at) {
        posix_spawnattr_destroy(&at);
    }
    if (have_fa) {
        posix_spawn_file_actions_destroy(&fa);
    }
    if (fd >= 0) {
        close(fd);
    }
}

/* ---- exits ---- */

/* shim_failure copies the reason after "troupe-node: " when the first line of
 * this attempt's log is the shim's "cannot start" line; returns 1 if so. */
static int shim_failure(const tr_worker *w, char *msg, size_t size)
{
    char line[TR_ERR_MSG_MAX];
    ssize_t got = -1;
    int fd = open(w->log_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

    if (fd >= 0) {
        got = pread(fd, line, sizeof(line) - 1, w->log_base);
        close(fd);
    }
    if (got <= 0) {
        return 0;
    }
    line[got] = '\0';
    line[strcspn(line, "\n")] = '\0';
    if (strncmp(line, TR_SHIM_PREFIX TR_CANNOT_START, strlen(TR_SHIM_PREFIX TR_CANNOT_START)) != 0) {
        return 0;
    }
    tr_strlcpy(msg, line + strlen(TR_SHIM_PREFIX), size);
    return 1;
}

/* not_found_name finds, in the last lines of this attempt's log, the name a
 * shell could not find ("sh: 1: troupe-train: not found", bash's "...: command
 * not found") and copies it; returns 1 if there is one. */
/* log_tail reads the last size-1 bytes of this attempt's log into buf, ended
 * with a NUL; returns 0 when there is nothing to read. */
static int log_tail(const tr_worker *w, char *buf, size_t size)
{
    ssize_t got = -1;
    struct stat st;
    int fd = open(w->log_path, O_RDONLY | O_CLOEXEC);

    if (fd >= 0 && fstat(fd, &st) == 0) {
        off_t from = st.st_size - (off_t)size + 1;
        got = pread(fd, buf, size - 1, from > w->log_base ? from : w->log_base);
    }
    if (fd >= 0) {
        close(fd);
    }
    if (got <= 0) {
        return 0;
    }
    buf[got] = '\0';
    return 1;
}

static int not_found_name(const tr_worker *w, char *name, size_t size)
{
    static const char *const suffixes[] = {": command not found", ": not found"};
    char buf[4096];

    if (!log_tail(w, buf, sizeof(buf))) {
        return 0;
    }
    name[0] = '\0';
    for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        for (size_t k = 0; k < sizeof(suffixes) / sizeof(suffixes[0]); k++) {
            char *end = strstr(line, suffixes[k]), *start;
            if (end == NULL || end == line) {
                continue;
            }
            *end = '\0';
            start = strrchr(line, ' ');
            tr_strlcpy(name, start != NULL ? start + 1 : line, size); /* the last such line wins */
            break;
        }
    }
    return name[0] != '\0';
}

/* exit_meaning says what a non-zero exit code usually means (126/127 from a
 * shell, 128+N for a child killed by signal N), or "" when it means nothing
 * in particular. */
static const char *exit_meaning(const tr_worker *w, int code, char *buf, size_t size)
{
    char name[128], sn[32];
    if (code == 127 && not_found_name(w, name, sizeof(name))) {
        snprintf(buf, size, ": command not found: %s (is it on the node's PATH?)", name);
    } else if (code == 127) {
        snprintf(buf, size, ": command not found (is it on the node's PATH?)");
    } else if (code == 126) {
        snprintf(buf, size, ": command found but could not run (is it executable? its #! line right?)");
    } else if (code > 128 && code < 128 + 65 && sigabbrev_np(code - 128) != NULL) {
        snprintf(buf, size, " (128+%d: a process it ran was killed by %s)", code - 128,
                 sig_name(code - 128, sn, sizeof(sn)));
    } else {
        buf[0] = '\0';
    }
    return buf;
}

/* fenced_by_lease: the worker's supervisor logged that it killed it because
 * the agent's lease ran out (the agent lost the head for longer than the
 * lease: a cut network, a head down or too slow to answer heartbeats). */
static int fenced_by_lease(const tr_worker *w)
{
    char buf[2048];
    return log_tail(w, buf, sizeof(buf)) && strstr(buf, TR_SHIM_PREFIX TR_SHIM_LEASE_LINE) != NULL;
}

/* signal_meaning adds strsignal's words, and for SIGKILL the reason when
 * troupe's own fencing sent it, else the usual culprits from outside. */
static const char *signal_meaning(const tr_worker *w, int sig, char *buf, size_t size)
{
    if (sig == SIGKILL && fenced_by_lease(w)) {
        snprintf(buf, size, " (fenced by troupe-node: its lease ran out without an answer from the head, so the "
                            "worker was killed before the head could place it again; if the head was only slow, "
                            "raise its heartbeat_ms/dead_after or lease_ms)");
    } else {
        snprintf(buf, size, " (%s%s)", strsignal(sig), sig == SIGKILL ? ": out of memory, or killed by hand?" : "");
    }
    return buf;
}

/* describe_exit turns a wait status into the record's phase and message. */
static void describe_exit(tr_worker *w, int st)
{
    char sn[32];
    const char *by = !w->stopping ? "" : w->grace_ms > 0 ? "stopped (SIGTERM), " : "stopped (SIGKILL), ";

    w->phase = TR_WORKER_EXITED;
    if (WIFEXITED(st)) {
        w->exit_code = WEXITSTATUS(st);
        if (w->exit_code == TR_SHIM_EXIT && !w->stopping && shim_failure(w, w->message, sizeof(w->message))) {
            w->phase = TR_WORKER_FAILED_TO_START;
            return;
        }
        char meaning[256] = "";
        if (!w->stopping && w->exit_code != 0) {
            exit_meaning(w, w->exit_code, meaning, sizeof(meaning));
        }
        snprintf(w->message, sizeof(w->message), "%sexited with code %d%s", by, w->exit_code, meaning);
        return;
    }
    w->signal = WTERMSIG(st);
    sig_name(w->signal, sn, sizeof(sn));
    if (w->stopping && w->signal == SIGTERM) {
        snprintf(w->message, sizeof(w->message), "stopped (SIGTERM)");
    } else if (w->escalated && w->signal == SIGKILL) {
        snprintf(w->message, sizeof(w->message), "stopped: SIGKILL after %lld ms grace",
                 (long long)w->grace_ms);
    } else if (w->stopping && w->signal == SIGKILL) {
        snprintf(w->message, sizeof(w->message), "stopped (SIGKILL)");
    } else {
        char meaning[320] = "";
        if (!w->stopping) {
            signal_meaning(w, w->signal, meaning, sizeof(meaning));
        }
        snprintf(w->message, sizeof(w->message), "%skilled by signal %s%s%s", by, sn, meaning,
                 WCOREDUMP(st) ? " (core dumped)" : "");
    }
}

/* reap_one collects w's exit if it has happened, killing what is left of its
 * process group first (see the top of the file). */
static void reap_one(tr_launcher *l, tr_worker *w)
{
    siginfo_t si;
    pid_t got;
    int st = 0;

    memset(&si, 0, sizeof(si));
    if (waitid(P_PID, (id_t)w->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
        if (errno != ECHILD) {
            return; /* EINTR: the next poll tries again */
        }
        w->phase = TR_WORKER_EXITED;
        w->exit_code = -1;
        snprintf(w->message, sizeof(w->message), "exit status lost (is SIGCHLD ignored?)");
        goto ended;
    }
    if (si.si_pid == 0) {
        return; /* still running */
    }
    kill(-w->pid, SIGKILL);
    do {
        got = waitpid(w->pid, &st, 0); /* a zombie: does not block */
    } while (got < 0 && errno == EINTR);
    describe_exit(w, st);
ended:
    w->ended_ms = tr_wall_ms();
    find_report(w);
    l->changes++;
    TR_LOG(TR_LOG_INFO, "worker ended job=%llu worker=%s attempt=%u pid=%d: %s",
           (unsigned long long)w->job_id, w->name, w->attempt, (int)w->pid, w->message);
}

/* ---- the API ---- */

int tr_launcher_open(const char *log_dir, const char *self_exe, int64_t grace_ms, tr_launcher **out,
                     tr_err *err)
{
    tr_launcher *l = NULL;
    int rv = TROUPE_OK;

    *out = NULL;
    if (log_dir == NULL || log_dir[0] == '\0' || self_exe == NULL || self_exe[0] == '\0' || grace_ms < 0) {
        rv = tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                        "launcher: need a log directory, the troupe-node path "
                        "and a grace period >= 0");
        goto out;
    }
    if (access(self_exe, X_OK) != 0) {
        rv = tr_err_set(err, TROUPE_FAILED_PRECONDITION, "launcher: cannot execute '%s': %s", self_exe,
                        strerror(errno));
        goto out;
    }
    l = calloc(1, sizeof(*l));
    if (l == NULL || (l->log_dir = strdup(log_dir)) == NULL || (l->self_exe = strdup(self_exe)) == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "launcher: out of memory");
        goto out;
    }
    l->grace_ms = grace_ms;
    *out = l;
    l = NULL;
out:
    tr_launcher_close(l);
    return rv;
}

void tr_launcher_close(tr_launcher *l)
{
    int64_t deadline = tr_now_ms() + TR_CLOSE_WAIT_MS;
    size_t live;

    if (l == NULL) {
        return;
    }
    for (size_t i = 0; i < l->n; i++) {
        if (is_live(l->w[i])) {
            signal_worker(l->w[i], SIGKILL);
        }
    }
    for (;;) {
        live = 0;
        for (size_t i = 0; i < l->n; i++) {
            if (is_live(l->w[i])) {
                reap_one(l, l->w[i]);
                live += is_live(l->w[i]);
            }
        }
        if (live == 0 || tr_now_ms() >= deadline) {
            break;
        }
        tr_sleep_ms(5);
    }
    if (live > 0) {
        TR_LOG(TR_LOG_WARNING, "launcher closed with %zu worker(s) not reaped after %d ms", live,
               TR_CLOSE_WAIT_MS);
    }
    for (size_t i = 0; i < l->n; i++) {
        worker_free(l->w[i]);
    }
    free(l->w);
    free(l->log_dir);
    free(l->self_exe);
    free(l);
}

/* check_spec rejects what cannot become a record: a name that would leave the
 * log directory, an empty command, environment entries without '='. */
static int check_spec(const tr_worker_spec *s, tr_err *err)
{
    if (s == NULL || s->name == NULL || s->name[0] == '\0' || strchr(s->name, '/') != NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "worker name '%s': must be non-empty, without '/'",
                          s && s->name ? s->name : "");
    }
    if (s->argv == NULL || s->argv[0] == NULL || s->argv[0][0] == '\0') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "worker %s: empty command", s->name);
    }
    for (size_t i = 0; s->env != NULL && s->env[i] != NULL; i++) {
        if (strchr(s->env[i], '=') == NULL || s->env[i][0] == '=') {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                              "worker %s: environment entry '%s' is not KEY=VALUE", s->name, s->env[i]);
        }
    }
    return TROUPE_OK;
}

/* new_record makes the record of (name, attempt) and appends it. */
static int new_record(tr_launcher *l, const tr_worker_spec *spec, tr_worker **out, tr_err *err)
{
    tr_worker *w = calloc(1, sizeof(*w));

    *out = NULL;
    if (w == NULL || (w->name = strdup(spec->name)) == NULL ||
        asprintf(&w->log_path, "%s/%s.%u.log", l->log_dir, spec->name, spec->attempt) < 0) {
        if (w != NULL) {
            w->log_path = NULL; /* asprintf leaves it undefined on failure */
        }
        worker_free(w);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "worker %s: out of memory", spec->name);
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        tr_worker **nw = realloc(l->w, cap * sizeof(*nw));
        if (nw == NULL) {
            worker_free(w);
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "worker %s: out of memory", spec->name);
        }
        l->w = nw;
        l->cap = cap;
    }
    w->job_id = spec->job_id;
    w->attempt = spec->attempt;
    if (spec->report_glob != NULL && (w->report_glob = strdup(spec->report_glob)) == NULL) {
        worker_free(w);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "worker %s: out of memory", spec->name);
    }
    l->w[l->n++] = w;
    l->changes++;
    *out = w;
    return TROUPE_OK;
}

int tr_launcher_start(tr_launcher *l, const tr_worker_spec *spec, tr_err *err)
{
    char parent_kv[64], as[64], *lease_kv = NULL;
    char **argv = NULL, **envp = NULL;
    tr_worker *w = NULL;
    size_t cmd_at = 0;
    int rv;

    rv = check_spec(spec, err);
    if (rv != TROUPE_OK) {
        goto out;
    }
    if (tr_launcher_find(l, spec->name, spec->attempt) >= 0) {
        rv = tr_err_set(err, TROUPE_ALREADY_EXISTS, "worker %s attempt %u already exists", spec->name,
                        spec->attempt);
        goto out;
    }
    snprintf(parent_kv, sizeof(parent_kv), TR_EXEC_PARENT_ENV "=%ld", (long)getpid());
    snprintf(as, sizeof(as), "--as=%u:%u", (unsigned)spec->uid, (unsigned)spec->gid);
    argv = build_argv(l, spec, spec->switch_ids ? as : NULL, &cmd_at);
    if (spec->lease_path != NULL && asprintf(&lease_kv, TR_EXEC_LEASE_ENV "=%s", spec->lease_path) < 0) {
        lease_kv = NULL;
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "worker %s: out of memory", spec->name);
        goto out;
    }
    envp = build_envp(spec->env, parent_kv, lease_kv);
    if (argv == NULL || envp == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "worker %s: out of memory", spec->name);
        goto out;
    }
    rv = new_record(l, spec, &w, err);
    if (rv != TROUPE_OK) {
        goto out;
    }
    if (spec->fail_reason != NULL) {
        w->started_ms = tr_wall_ms();
        set_failed(w, "%s", spec->fail_reason);
        goto out;
    }
    spawn_worker(l, w, argv, cmd_at, envp);
out:
    free(argv);
    free(envp);
    free(lease_kv);
    return rv;
}

int tr_launcher_stop(tr_launcher *l, const char *name, uint32_t attempt, tr_err *err)
{
    long i = tr_launcher_find(l, name, attempt);
    tr_worker *w;
    int sig;

    if (i < 0) {
        return tr_err_set(err, TROUPE_NOT_FOUND, "no worker %s attempt %u", name ? name : "", attempt);
    }
    w = l->w[i];
    if (w->phase != TR_WORKER_RUNNING) {
        return TROUPE_OK; /* already stopping, exited or never started */
    }
    /* Grace 0 means SIGKILL at once; tr_launcher_poll then has nothing to
     * escalate (it checks grace_ms > 0). */
    sig = l->grace_ms > 0 ? SIGTERM : SIGKILL;
    signal_worker(w, sig);
    if (sig == SIGTERM) {
        signal_worker(w, SIGCONT); /* a SIGSTOPped worker acts on SIGTERM only once continued */
    }
    w->stopping = 1;
    w->escalated = 0;
    w->kill_at = tr_now_ms() + l->grace_ms;
    w->grace_ms = l->grace_ms;
    w->phase = TR_WORKER_STOPPING;
    l->changes++;
    TR_LOG(TR_LOG_INFO, "worker stopping job=%llu worker=%s attempt=%u pid=%d signal=%s grace_ms=%lld",
           (unsigned long long)w->job_id, w->name, w->attempt, (int)w->pid, sig == SIGTERM ? "TERM" : "KILL",
           (long long)l->grace_ms);
    return TROUPE_OK;
}

int tr_launcher_poll(tr_launcher *l)
{
    int changed;

    for (size_t i = 0; i < l->n; i++) {
        if (is_live(l->w[i])) {
            reap_one(l, l->w[i]);
        }
    }
    for (size_t i = 0; i < l->n; i++) {
        tr_worker *w = l->w[i];
        if (w->phase == TR_WORKER_STOPPING && !w->escalated && l->grace_ms > 0 && tr_now_ms() >= w->kill_at) {
            signal_worker(w, SIGKILL);
            w->escalated = 1;
            TR_LOG(TR_LOG_NOTICE, "worker ignored SIGTERM, killing job=%llu worker=%s attempt=%u pid=%d",
                   (unsigned long long)w->job_id, w->name, w->attempt, (int)w->pid);
        }
    }
    changed = l->changes;
    l->changes = 0;
    return changed;
}

int tr_launcher_paused(const tr_launcher *l, size_t i)
{
    const tr_worker *w = l != NULL && i < l->n ? l->w[i] : NULL;
    return w != NULL && w->phase == TR_WORKER_RUNNING && w->pid > 0 && tr_proctree_stopped(w->pid);
}

size_t tr_launcher_count(const tr_launcher *l)
{
    return l != NULL ? l->n : 0;
}

int tr_launcher_get(const tr_launcher *l, size_t i, tr_worker_status *out)
{
    const tr_worker *w;

    memset(out, 0, sizeof(*out));
    if (l == NULL || i >= l->n) {
        return TROUPE_NOT_FOUND;
    }
    w = l->w[i];
    out->job_id = w->job_id;
    out->name = w->name;
    out->attempt = w->attempt;
    out->phase = w->phase;
    out->pid = w->pid;
    out->exit_code = w->exit_code;
    out->signal = w->signal;
    out->message = w->message;
    out->log_path = w->log_path;
    out->report = w->report;
    out->started_ms = w->started_ms;
    out->ended_ms = w->ended_ms;
    return TROUPE_OK;
}

long tr_launcher_find(const tr_launcher *l, const char *name, uint32_t attempt)
{
    for (size_t i = 0; l != NULL && name != NULL && i < l->n; i++) {
        if (l->w[i]->attempt == attempt && strcmp(l->w[i]->name, name) == 0) {
            return (long)i;
        }
    }
    return -1;
}

/* take_len decides how much of the got bytes read may be handed out: all of
 * it once the worker has ended; otherwise whole lines only, except that a
 * line longer than max goes out in max-sized pieces (else it would block the
 * log forever). */
static size_t take_len(const char *p, size_t got, size_t max, int ended)
{
    if (ended) {
        return got;
    }
    for (size_t n = got; n > 0; n--) {
        if (p[n - 1] == '\n') {
            return n;
        }
    }
    return got == max ? got : 0;
}

int tr_launcher_read_log(tr_launcher *l, size_t i, size_t max, char **buf, size_t *len, tr_err *err)
{
    struct stat st;
    tr_worker *w;
    char *p = NULL;
    ssize_t got = 0;
    size_t want, n;
    int fd = -1, rv = TROUPE_OK;

    *buf = NULL;
    *len = 0;
    if (l == NULL || i >= l->n) {
        return tr_err_set(err, TROUPE_NOT_FOUND, "no worker at index %zu", i);
    }
    w = l->w[i];
    if (!w->has_log) {
        goto out; /* the start failed before the log existed: the message says why */
    }
    fd = open(w->log_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT) {
        goto out; /* removed by hand: nothing more to say */
    }
    if (fd < 0 || fstat(fd, &st) != 0) {
        rv = tr_err_set(err, TROUPE_UNAVAILABLE, "worker %s log '%s': %s", w->name, w->log_path,
                        strerror(errno));
        goto out;
    }
    if (max == 0 || st.st_size <= w->log_off) {
        goto out;
    }
    want = (size_t)(st.st_size - w->log_off) < max ? (size_t)(st.st_size - w->log_off) : max;
    p = malloc(want + 1);
    if (p == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "worker %s log: out of memory", w->name);
        goto out;
    }
    do {
        got = pread(fd, p, want, w->log_off);
    } while (got < 0 && errno == EINTR);
    if (got < 0) {
        rv = tr_err_set(err, TROUPE_UNAVAILABLE, "worker %s log '%s': %s", w->name, w->log_path,
                        strerror(errno));
        goto out;
    }
    n = take_len(p, (size_t)got, max, !is_live(w));
    if (n > 0) {
        p[n] = '\0';
        w->log_off += (off_t)n;
        *buf = p;
        *len = n;
        p = NULL;
    }
out:
    free(p);
    if (fd >= 0) {
        close(fd);
    }
    return rv;
}

uint64_t tr_launcher_log_offset(const tr_launcher *l, size_t i)
{
    return (l == NULL || i >= l->n) ? 0 : (uint64_t)l->w[i]->log_off;
}

int tr_launcher_forget(tr_launcher *l, const char *name, uint32_t attempt, tr_err *err)
{
    long i = tr_launcher_find(l, name, attempt);

    if (i < 0) {
        return tr_err_set(err, TROUPE_NOT_FOUND, "no worker %s attempt %u", name ? name : "", attempt);
    }
    if (is_live(l->w[i])) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "worker %s attempt %u is still running; stop it first", name, attempt);
    }
    worker_free(l->w[i]);
    memmove(&l->w[i], &l->w[i + 1], (l->n - (size_t)i - 1) * sizeof(*l->w));
    l->n--;
    return TROUPE_OK;
}
