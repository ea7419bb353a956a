/* test_launcher.c - unit.node.launcher.*: troupe-node's worker launcher
 * against real processes.
 *
 * Usage: test_launcher CASE|all TROUPE-NODE-PATH. The launcher's shim is
 * troupe-node itself (`--exec-worker`), hence the second argument.
 *
 * The test process makes itself a child subreaper. Orphans of a worker (a
 * shell's background child, the worker of a killed helper) are then
 * re-parented to it instead of to pid 1, which in some containers never reaps;
 * the test reaps them by process group, so that kill(-pgid, 0) reports ESRCH
 * once a group is really gone rather than seeing zombies. It also lets the
 * PDEATHSIG case collect the orphaned worker and read how it died. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "err.h"
#include "launcher.h"
#include "log.h"
#include "troupe/status.h"
#include "util.h"

static const char *node_exe;
static tr_err terr;

/* The helpers print the status name and the launcher's message on failure,
 * not cmocka's bare "0x3 != 0x0". */
#define OK(expr)                                                                                             \
    do {                                                                                                     \
        int rv_ = (expr);                                                                                    \
        if (rv_ != TROUPE_OK) {                                                                              \
            fail_msg("%s failed: %s: %s", #expr, troupe_strerror(rv_), terr.msg);                            \
        }                                                                                                    \
    } while (0)

#define STATUS(expr, code)                                                                                   \
    do {                                                                                                     \
        int rv_ = (expr);                                                                                    \
        if (rv_ != (code)) {                                                                                 \
            fail_msg("%s: expected %s, got %s (\"%s\")", #expr, troupe_strerror(code), troupe_strerror(rv_), \
                     terr.msg);                                                                              \
        }                                                                                                    \
    } while (0)

#define CONTAINS(hay, needle)                                                                                \
    do {                                                                                                     \
        const char *h_ = (hay);                                                                              \
        if (h_ == NULL || strstr(h_, (needle)) == NULL) {                                                    \
            fail_msg("\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", (needle));                        \
        }                                                                                                    \
    } while (0)

#define LACKS(hay, needle)                                                                                   \
    do {                                                                                                     \
        const char *h_ = (hay);                                                                              \
        if (h_ != NULL && strstr(h_, (needle)) != NULL) {                                                    \
            fail_msg("\"%s\" should not contain \"%s\"", h_, (needle));                                      \
        }                                                                                                    \
    } while (0)

/* ---- fixture: a temp dir, logs below it (not yet created), a launcher ---- */

typedef struct fx {
    char dir[PATH_MAX];
    char logs[PATH_MAX + 16];
    tr_launcher *l;
} fx;

static void fx_open(fx *f, int64_t grace_ms)
{
    const char *base = getenv("TMPDIR");
    snprintf(f->dir, sizeof(f->dir), "%s/troupe-launcher-XXXXXX", (base && base[0]) ? base : "/tmp");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->logs, sizeof(f->logs), "%s/state/logs", f->dir);
    OK(tr_launcher_open(f->logs, node_exe, grace_ms, &f->l, &terr));
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void fx_close(fx *f)
{
    tr_launcher_close(f->l);
    f->l = NULL;
    nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static long start(fx *f, const char *name, uint32_t attempt, const char *const *argv, const char *const *env,
                  const char *workdir)
{
    tr_worker_spec s = {7, name, attempt, argv, env, workdir, NULL, NULL, NULL, 0, 0, 0};
    long i;

    OK(tr_launcher_start(f->l, &s, &terr));
    i = tr_launcher_find(f->l, name, attempt);
    assert_true(i >= 0);
    return i;
}

static tr_worker_status get(fx *f, const char *name, uint32_t attempt)
{
    tr_worker_status st;
    long i = tr_launcher_find(f->l, name, attempt);
    assert_true(i >= 0);
    OK(tr_launcher_get(f->l, (size_t)i, &st));
    return st;
}

static int ended(tr_worker_phase p)
{
    return p == TR_WORKER_EXITED || p == TR_WORKER_FAILED_TO_START;
}

/* How long a worker that ends by itself (or on SIGTERM) may take: a bound on
 * the wait, not the behaviour under test. 2 s was too short for a fork + exec
 * of the shim and a shell on the shared 2-core machine at load 20 (forget
 * failed there: "worker b still in phase 1 after 2000 ms"). */
#define WAIT_END_MS 10000

/* wait_end polls until (name, attempt) has ended; fails after timeout_ms. */
static tr_worker_status wait_end(fx *f, const char *name, uint32_t attempt, int64_t timeout_ms)
{
    int64_t deadline = tr_now_ms() + timeout_ms;
    for (;;) {
        tr_launcher_poll(f->l);
        tr_worker_status st = get(f, name, attempt);
        if (ended(st.phase)) {
            return st;
        }
        if (tr_now_ms() > deadline) {
            fail_msg("worker %s still in phase %d after %lld ms", name, (int)st.phase, (long long)timeout_ms);
        }
        tr_sleep_ms(5);
    }
}

/* read_all appends everything tr_launcher_read_log hands out now to a
 * malloc'ed string (free it). */
static char *read_all(fx *f, const char *name, uint32_t attempt)
{
    char *acc = calloc(1, 1), *buf;
    size_t n = 0, len;
    long i = tr_launcher_find(f->l, name, attempt);

    assert_true(i >= 0);
    for (;;) {
        OK(tr_launcher_read_log(f->l, (size_t)i, 1 << 16, &buf, &len, &terr));
        if (len == 0) {
            assert_null(buf);
            return acc;
        }
        assert_int_equal(strlen(buf), len); /* NUL-terminated, no NULs inside */
        acc = realloc(acc, n + len + 1);
        memcpy(acc + n, buf, len + 1);
        n += len;
        free(buf);
    }
}

/* wait_log reads the log (polling the launcher) until it contains needle. */
static char *wait_log(fx *f, const char *name, uint32_t attempt, const char *needle, int64_t timeout_ms)
{
    int64_t deadline = tr_now_ms() + timeout_ms;
    char *acc = calloc(1, 1);

    for (;;) {
        char *more = read_all(f, name, attempt);
        acc = realloc(acc, strlen(acc) + strlen(more) + 1);
        strcat(acc, more);
        free(more);
        if (strstr(acc, needle) != NULL) {
            return acc;
        }
        if (tr_now_ms() > deadline) {
            fail_msg("log of %s lacks \"%s\" after %lld ms: \"%s\"", name, needle, (long long)timeout_ms,
                     acc);
        }
        tr_launcher_poll(f->l);
        tr_sleep_ms(5);
    }
}

/* wait_size waits until the file at path has size bytes. */
static void wait_size(const char *path, off_t size)
{
    int64_t deadline = tr_now_ms() + 2000;
    struct stat st;
    while (stat(path, &st) != 0 || st.st_size < size) {
        if (tr_now_ms() > deadline) {
            fail_msg("%s did not reach %lld bytes", path, (long long)size);
        }
        tr_sleep_ms(5);
    }
    assert_int_equal(st.st_size, size);
}

/* group_gone reaps our orphans of group pgid and says whether nothing of the
 * group is left, waiting at most timeout_ms (after which it kills the rest,
 * so that a failing case leaves no sleepers behind). */
static int group_gone(pid_t pgid, int64_t timeout_ms)
{
    int64_t deadline = tr_now_ms() + timeout_ms;
    for (;;) {
        while (waitpid(-pgid, NULL, WNOHANG) > 0) {
        }
        if (kill(-pgid, 0) == -1 && errno == ESRCH) {
            return 1;
        }
        if (tr_now_ms() > deadline) {
            kill(-pgid, SIGKILL); /* failing: leave nothing behind */
            tr_sleep_ms(50);
            while (waitpid(-pgid, NULL, WNOHANG) > 0) {
            }
            return 0;
        }
        tr_sleep_ms(5);
    }
}

static int pid_gone(pid_t pid)
{
    return kill(pid, 0) == -1 && errno == ESRCH;
}

/* ---- exits ---- */

static void exit_zero(void **state)
{
    const char *argv[] = {"true", NULL};
    int64_t deadline = tr_now_ms() + 2000;
    tr_worker_status st;
    struct stat sb;
    mode_t um = umask(0);
    int changes = 0;
    fx f;

    umask(um);
    fx_open(&f, 1000);
    start(&f, "t", 0, argv, NULL, NULL);
    st = get(&f, "t", 0);
    assert_int_equal(st.phase, TR_WORKER_RUNNING);
    assert_true(st.pid > 0);
    assert_true(st.started_ms > 0);
    assert_int_equal(st.job_id, 7);
    assert_string_equal(st.name, "t");
    CONTAINS(st.log_path, "/state/logs/t.0.log");
    /* start and exit are the two phase changes poll reports, then none. */
    while (!ended(get(&f, "t", 0).phase) && tr_now_ms() < deadline) {
        changes += tr_launcher_poll(f.l);
        tr_sleep_ms(5);
    }
    changes += tr_launcher_poll(f.l);
    assert_int_equal(changes, 2);
    assert_int_equal(tr_launcher_poll(f.l), 0);
    st = get(&f, "t", 0);
    assert_int_equal(st.phase, TR_WORKER_EXITED);
    assert_int_equal(st.exit_code, 0);
    assert_int_equal(st.signal, 0);
    assert_string_equal(st.message, "exited with code 0");
    assert_true(st.ended_ms >= st.started_ms);
    assert_int_equal(stat(st.log_path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600 & ~um); /* job output is the job owner's */
    assert_int_equal(sb.st_size, 0);
    fx_close(&f);
}

static void exit_code(void **state)
{
    const char *argv[] = {"sh", "-c", "echo bye; exit 3", NULL};
    tr_worker_status st;
    char *log;
    fx f;

    fx_open(&f, 1000);
    start(&f, "e", 2, argv, NULL, NULL);
    st = wait_end(&f, "e", 2, WAIT_END_MS);
    assert_int_equal(st.phase, TR_WORKER_EXITED);
    assert_int_equal(st.exit_code, 3);
    assert_int_equal(st.signal, 0);
    assert_string_equal(st.message, "exited with code 3");
    log = read_all(&f, "e", 2);
    assert_string_equal(log, "bye\n");
    free(log);
    fx_close(&f);
}

static void killed_by_signal(void **state)
{
    const char *argv[] = {"sh", "-c", "kill -KILL $$", NULL};
    tr_worker_status st;
    fx f;

    fx_open(&f, 1000);
    start(&f, "k", 0, argv, NULL, NULL);
    st = wait_end(&f, "k", 0, WAIT_END_MS);
    assert_int_equal(st.phase, TR_WORKER_EXITED);
    assert_int_equal(st.signal, SIGKILL);
    assert_string_equal(st.message, "killed by signal SIGKILL (Killed: out of memory, or killed by hand?)");
    fx_close(&f);
}

/* ---- start failures ---- */

static void command_not_found(void **state)
{
    const char *argv[] = {"troupe-no-such-command", "x", NULL};
    const char *sh127[] = {"sh", "-c", "exit 127", NULL};
    const char *shnf[] = {"sh", "-c", "echo before; troupe-no-such-cmd --flag", NULL};
    tr_worker_status st;
    char *log;
    fx f;

    fx_open(&f, 1000);
    start(&f, "nf", 0, argv, NULL, NULL);
    st = wait_end(&f, "nf", 0, WAIT_END_MS);
    assert_int_equal(st.phase, TR_WORKER_FAILED_TO_START);
    assert_int_equal(st.exit_code, 127);
    assert_string_equal(st.message,
                        "cannot start 'troupe-no-such-command': command not found (is it on the node's PATH?)");
    log = read_all(&f, "nf", 0);
    assert_string_equal(
        log, "troupe-node: cannot start 'troupe-no-such-command': command not found (is it on the node's PATH?)\n");
    free(log);
    /* A worker that ran and exited 127 by itself is not a start failure; the
     * message still says what 127 means, naming what the shell did not find. */
    start(&f, "sh127", 0, sh127, NULL, NULL);
    st = wait_end(&f, "sh127", 0, WAIT_END_MS);
    assert_int_equal(st.phase, TR_WORKER_EXITED);
    assert_string_equal(st.message, "exited with code 127: command not found (is it on the node's PATH?)");
    start(&f, "shnf", 0, shnf, NULL, NULL);
    st = wait_end(&f, "shnf", 0, WAIT_END_MS);
    assert_int_equal(st.phase, TR_WORKER_EXITED);
    assert_string_equal(st.message,
                        "exited with code 127: command not found: troupe-no-such-cmd (is it on the node's PATH?)");
    fx_close(&f);
}

/* A worker the agent refuses (its GPUs could not be translated) ends
 * FAILED_TO_START with the agent's reason, and nothing runs: no pid, no log. */
static void refused_start(void **state)
{
    char mark[PATH_MAX + 16], cmd[PATH_MAX + 32];
    const char *argv[] = {"sh", "-c", cmd, NULL};
    const char *why = "GPU index '9' is not in this agent's CUDA_VISIBLE_DEVICES='4,5'";
    tr_worker_spec s = {7, "refused", 0, argv, NULL, NULL, why, NULL, NULL, 0, 0, 0};
    tr_worker_status st;
    char *log;
    fx f;

    (void)state;
    fx_open(&f, 1000);
    snprintf(mark, sizeof(mark), "%s/ran", f.dir);
    snprintf(cmd, sizeof(cmd), "touch %s", mark);
    OK(tr_launcher_start(f.l, &s, &terr));
    st = wait_end(&f, "refused", 0, WAIT_END_MS);
    assert_int_equal(st.phase, TR_WORKER_FAILED_TO_START);
    assert_int_equal(st.pid, 0);
    assert_string_equal(st.message, why);
    log = read_all(&f, "refused", 0);
    assert_string_equal(log, "");
    free(log);
    assert_int_equal(access(mark, F_OK), -1);
    fx_close(&f);
}

/* A worker with a report glob (an nsys report): once it ended, its status
 * names the newest match written since it started; an older file that
 * matches (an earlier attempt's) is not taken, and no match leaves it NULL. */
static void report_found(void **state)
{
    char old[PATH_MAX + 32], glob_pat[PATH_MAX + 32], want[PATH_MAX + 32], cmd[2 * PATH_MAX + 64];
    const char *argv[] = {"sh", "-c", cmd, NULL}, *none[] = {"true", NULL};
    tr_worker_spec s = {7, "rep", 0, argv, NULL, NULL, NULL, NULL, glob_pat, 0, 0, 0};
    tr_worker_spec s2 = {7, "norep", 0, none, NULL, NULL, NULL, NULL, NULL, 0, 0, 0};
    struct timespec past[2] = {{1000000000, 0}, {1000000000, 0}}; /* 2001 */
    tr_worker_status st;
    int fd;
    fx f;

    (void)state;
    fx_open(&f, 1000);
    snprintf(old, sizeof(old), "%s/rep_2-4_111.nsys-rep", f.dir);
    snprintf(want, sizeof(want), "%s/rep_2-4_222.nsys-rep", f.dir);
    snprintf(glob_pat, sizeof(glob_pat), "%s/rep_2-4_*.nsys-rep", f.dir);
    snprintf(cmd, sizeof(cmd), "echo report > %s", want);
    fd = open(old, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(utimensat(AT_FDCWD, old, past, 0), 0);
    OK(tr_launcher_start(f.l, &s, &terr));
    st = wait_end(&f, "rep", 0, WAIT_END_MS);
    assert_int_equal(st.phase, TR_WORKER_EXITED);
    assert_non_null(st.report);
    assert_string_equal(st.report, want);
    OK(tr_launcher_start(f.l, &s2, &terr));
    st = wait_end(&f, "norep", 0, WAIT_END_MS);
    assert_null(st.report);
    fx_close(&f);
}

static void bad_workdir(void **state)
{
    const char *argv[] = {"true", NULL};
    char dir[PATH_MAX + 16];
    tr_worker_status st;
    fx f;

    fx_open(&f, 1000);
    snprintf(dir, sizeof(dir), "%s/missing", f.dir);
    start(&f, "wd", 0, argv, NULL, dir);
    st = wait_end(&f, "wd", 0, WAIT_END_MS);
    assert_int_equal(st.phase, TR_WORKER_FAILED_TO_START);
    CONTAINS(st.message, "cannot start 'true'");
    CONTAINS(st.message, dir);
    CONTAINS(st.message, "No such file or directory");
    fx_close(&f);
}

/* switch_ids: a worker given its own ids runs as exactly them, with no
 * supplementary group and no capability left; and it must be able to enter
 * its workdir as itself (the fixture's 0700 directory is root's). */
static void switch_ids(void **state)
{
    const char *argv[] = {"sh", "-c", "echo $(id -u) $(id -g) $(id -G); grep ^CapEff: /proc/self/status",
                          NULL};
    tr_worker_spec s = {7, "ids", 0, argv, NULL, "/", NULL, NULL, NULL, 1, 65534, 65534};
    tr_worker_status st;
    char *log;
    fx f;

    (void)state;
    if (geteuid() != 0) {
        skip(); /* only root can hand out another uid */
    }
    fx_open(&f, 1000);
    OK(tr_launcher_start(f.l, &s, &terr));
    assert_int_equal(wait_end(&f, "ids", 0, WAIT_END_MS).exit_code, 0);
    log = read_all(&f, "ids", 0);
    assert_string_equal(log, "65534 65534 65534\nCapEff:\t0000000000000000\n");
    free(log);
    s.name = "ids-wd";
    s.workdir = f.dir;
    OK(tr_launcher_start(f.l, &s, &terr));
    st = wait_end(&f, "ids-wd", 0, WAIT_END_MS);
    assert_int_equal(st.phase, TR_WORKER_FAILED_TO_START);
    assert_non_null(strstr(st.message, "as uid 65534 gid 65534: Permission denied"));
    fx_close(&f);
}

static void workdir(void **state)
{
    const char *argv[] = {"pwd", NULL};
    char dir[PATH_MAX + 16], real[PATH_MAX], want[PATH_MAX + 2], cwd[PATH_MAX];
    char *log;
    fx f;

    fx_open(&f, 1000);
    snprintf(dir, sizeof(dir), "%s/wd", f.dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_non_null(realpath(dir, real));
    start(&f, "wd", 0, argv, NULL, dir);
    assert_int_equal(wait_end(&f, "wd", 0, WAIT_END_MS).exit_code, 0);
    log = read_all(&f, "wd", 0);
    snprintf(want, sizeof(want), "%s\n", real);
    assert_string_equal(log, want);
    free(log);
    /* "" means the agent's own directory. */
    start(&f, "here", 0, argv, NULL, "");
    assert_int_equal(wait_end(&f, "here", 0, WAIT_END_MS).exit_code, 0);
    log = read_all(&f, "here", 0);
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    snprintf(want, sizeof(want), "%s\n", cwd);
    assert_string_equal(log, want);
    free(log);
    fx_close(&f);
}

/* planted_symlink: a symlink where a worker's log goes (another local user's
 * trap) is refused, not followed; a log dir writable by others is refused. */
static void planted_symlink(void **state)
{
    const char *argv[] = {"true", NULL};
    char link[PATH_MAX + 64], victim[PATH_MAX + 16];
    tr_worker_status st;
    struct stat sb;
    fx f;

    (void)state;
    fx_open(&f, 1000);
    snprintf(victim, sizeof(victim), "%s/state", f.dir);
    assert_int_equal(mkdir(victim, 0700), 0);
    assert_int_equal(mkdir(f.logs, 0700), 0);
    snprintf(victim, sizeof(victim), "%s/victim", f.dir);
    snprintf(link, sizeof(link), "%s/sym.0.log", f.logs);
    assert_int_equal(symlink(victim, link), 0);
    start(&f, "sym", 0, argv, NULL, NULL);
    st = wait_end(&f, "sym", 0, WAIT_END_MS);
    assert_int_equal(st.phase, TR_WORKER_FAILED_TO_START);
    CONTAINS(st.message, "log file");
    assert_int_equal(stat(victim, &sb), -1); /* nothing written through the link */
    assert_int_equal(chmod(f.logs, 0777), 0);
    start(&f, "open", 0, argv, NULL, NULL);
    st = wait_end(&f, "open", 0, WAIT_END_MS);
    assert_int_equal(st.phase, TR_WORKER_FAILED_TO_START);
    CONTAINS(st.message, "writable by group or others");
    fx_close(&f);
}

static void environment(void **state)
{
    const char *argv[] = {"env", NULL};
    const char *env[] = {"TROUPE_TEST_OVERRIDE=worker", "TROUPE_TEST_ADDED=yes", "TROUPE_TEST_TWICE=first",
                         "TROUPE_TEST_TWICE=second", NULL};
    char *log, *nl;
    fx f;

    setenv("TROUPE_TEST_OVERRIDE", "agent", 1);
    setenv("TROUPE_TOKEN", "agent-secret", 1); /* the agent's credential stays the agent's */
    setenv("TROUPE_TOKEN_FILE", "/agent/secret", 1);
    fx_open(&f, 1000);
    start(&f, "env", 0, argv, env, NULL);
    assert_int_equal(wait_end(&f, "env", 0, WAIT_END_MS).exit_code, 0);
    log = read_all(&f, "env", 0);
    nl = malloc(strlen(log) + 2);
    sprintf(nl, "\n%s", log); /* every entry is then "\nKEY=VALUE\n" */
    CONTAINS(nl, "\nTROUPE_TEST_OVERRIDE=worker\n");
    LACKS(nl, "TROUPE_TEST_OVERRIDE=agent");
    CONTAINS(nl, "\nTROUPE_TEST_ADDED=yes\n");
    CONTAINS(nl, "\nTROUPE_TEST_TWICE=second\n");
    LACKS(nl, "TROUPE_TEST_TWICE=first");
    CONTAINS(nl, "\nPATH=");                /* inherited */
    CONTAINS(nl, "\nNCCL_NVLS_ENABLE=0\n"); /* house default when unset */
    LACKS(nl, "TROUPE_EXEC_WORKER_PARENT"); /* the shim's own, removed */
    LACKS(nl, "agent-secret");
    LACKS(nl, "TROUPE_TOKEN");
    unsetenv("TROUPE_TOKEN");
    unsetenv("TROUPE_TOKEN_FILE");
    /* The agent's environment is untouched. */
    assert_string_equal(getenv("TROUPE_TEST_OVERRIDE"), "agent");
    assert_null(getenv("TROUPE_TEST_ADDED"));
    unsetenv("TROUPE_TEST_OVERRIDE");
    free(nl);
    free(log);
    fx_close(&f);
}

/* ---- stopping ---- */

static void stop_sigterm(void **state)
{
    const char *argv[] = {"sleep", "100", NULL};
    tr_worker_status st;
    int64_t t0;
    fx f;

    fx_open(&f, 5000);
    start(&f, "s", 0, argv, NULL, NULL);
    tr_sleep_ms(50);
    t0 = tr_now_ms();
    OK(tr_launcher_stop(f.l, "s", 0, &terr));
    assert_int_equal(get(&f, "s", 0).phase, TR_WORKER_STOPPING);
    st = wait_end(&f, "s", 0, WAIT_END_MS);
    assert_true(tr_now_ms() - t0 < 1000);
    assert_int_equal(st.phase, TR_WORKER_EXITED);
    assert_int_equal(st.signal, SIGTERM);
    assert_string_equal(st.message, "stopped (SIGTERM)");
    assert_true(group_gone(st.pid, 1000));
    fx_close(&f);
}

static void stop_grace_sigkill(void **state)
{
    const char *argv[] = {"sh", "-c", "trap '' TERM; echo ready; exec sleep 100", NULL};
    tr_worker_status st;
    int64_t t0, took;
    char *log;
    fx f;

    fx_open(&f, 300);
    start(&f, "g", 0, argv, NULL, NULL);
    log = wait_log(&f, "g", 0, "ready\n", 2000); /* the trap is set */
    free(log);
    t0 = tr_now_ms();
    OK(tr_launcher_stop(f.l, "g", 0, &terr));
    tr_sleep_ms(100);
    tr_launcher_poll(f.l);
    assert_int_equal(get(&f, "g", 0).phase, TR_WORKER_STOPPING); /* SIGTERM was ignored */
    st = wait_end(&f, "g", 0, 3000);
    took = tr_now_ms() - t0;
    assert_true(took >= 300);
    assert_true(took < 1500);
    assert_int_equal(st.phase, TR_WORKER_EXITED);
    assert_int_equal(st.signal, SIGKILL);
    assert_string_equal(st.message, "stopped: SIGKILL after 300 ms grace");
    assert_true(group_gone(st.pid, 1000));
    fx_close(&f);
}

static void stop_no_grace(void **state)
{
    const char *argv[] = {"sh", "-c", "trap '' TERM; echo ready; exec sleep 100", NULL};
    tr_worker_status st;
    int64_t t0;
    fx f;

    fx_open(&f, 0);
    start(&f, "n", 0, argv, NULL, NULL);
    free(wait_log(&f, "n", 0, "ready\n", 2000));
    t0 = tr_now_ms();
    OK(tr_launcher_stop(f.l, "n", 0, &terr));
    st = wait_end(&f, "n", 0, WAIT_END_MS);
    assert_true(tr_now_ms() - t0 < 1000);
    assert_int_equal(st.signal, SIGKILL);
    assert_string_equal(st.message, "stopped (SIGKILL)");
    fx_close(&f);
}

static void stop_unknown_and_ended(void **state)
{
    const char *argv[] = {"true", NULL};
    const char *missing[] = {"troupe-no-such-command", NULL};
    tr_worker_status st;
    fx f;

    fx_open(&f, 1000);
    STATUS(tr_launcher_stop(f.l, "nobody", 0, &terr), TROUPE_NOT_FOUND);
    CONTAINS(terr.msg, "nobody");
    start(&f, "t", 0, argv, NULL, NULL);
    start(&f, "m", 0, missing, NULL, NULL);
    wait_end(&f, "t", 0, WAIT_END_MS);
    wait_end(&f, "m", 0, WAIT_END_MS);
    tr_launcher_poll(f.l);
    OK(tr_launcher_stop(f.l, "t", 0, &terr));
    OK(tr_launcher_stop(f.l, "m", 0, &terr));
    assert_int_equal(tr_launcher_poll(f.l), 0);
    st = get(&f, "t", 0);
    assert_int_equal(st.phase, TR_WORKER_EXITED);
    assert_string_equal(st.message, "exited with code 0");
    assert_int_equal(get(&f, "m", 0).phase, TR_WORKER_FAILED_TO_START);
    fx_close(&f);
}

/* ---- process groups ---- */

static void group_cleanup_after_exit(void **state)
{
    const char *argv[] = {"sh", "-c", "sleep 100 & echo $!", NULL};
    tr_worker_status st;
    pid_t bg;
    char *log;
    fx f;

    fx_open(&f, 1000);
    start(&f, "grp", 0, argv, NULL, NULL);
    st = wait_end(&f, "grp", 0, WAIT_END_MS);
    assert_int_equal(st.exit_code, 0);
    log = read_all(&f, "grp", 0);
    bg = (pid_t)atoi(log);
    free(log);
    assert_true(bg > 0);
    assert_true(group_gone(st.pid, 1000)); /* the background sleep did not survive its leader */
    assert_true(pid_gone(bg));
    fx_close(&f);
}

static void group_cleanup_after_stop(void **state)
{
    /* The leader dies of SIGTERM; its child ignores SIGTERM and must still go. */
    const char *argv[] = {"sh", "-c", "sh -c 'trap \"\" TERM; echo $$; exec sleep 100' & wait", NULL};
    tr_worker_status st;
    pid_t inner;
    char *log;
    fx f;

    fx_open(&f, 5000);
    start(&f, "grp", 0, argv, NULL, NULL);
    log = wait_log(&f, "grp", 0, "\n", 2000);
    inner = (pid_t)atoi(log);
    free(log);
    assert_true(inner > 0);
    OK(tr_launcher_stop(f.l, "grp", 0, &terr));
    st = wait_end(&f, "grp", 0, WAIT_END_MS);
    assert_string_equal(st.message, "stopped (SIGTERM)");
    assert_true(group_gone(st.pid, 1000));
    assert_true(pid_gone(inner));
    fx_close(&f);
}

/* pdeath_helper is this binary in another role (--pdeath-helper NODE LOGDIR):
 * an agent that starts one worker, prints its pid once the worker runs, and
 * waits to be SIGKILLed. */
static int pdeath_helper(char **argv)
{
    const char *wargv[] = {"sh", "-c", "echo ready; exec sleep 100", NULL};
    tr_worker_spec s = {1, "pd", 0, wargv, NULL, NULL, NULL, NULL, NULL, 0, 0, 0};
    int64_t deadline = tr_now_ms() + 2000;
    tr_launcher *l = NULL;
    char *buf = NULL;
    size_t len = 0;
    tr_err err;

    if (tr_launcher_open(argv[3], argv[2], 1000, &l, &err) != TROUPE_OK ||
        tr_launcher_start(l, &s, &err) != TROUPE_OK) {
        fprintf(stderr, "pdeath helper: %s\n", err.msg);
        return 1;
    }
    /* Wait until the command runs: the shim has armed PR_SET_PDEATHSIG by then. */
    while (len == 0 && tr_now_ms() < deadline) {
        tr_sleep_ms(5);
        tr_launcher_read_log(l, 0, 64, &buf, &len, &err);
    }
    if (len == 0) {
        return 1;
    }
    free(buf);
    {
        tr_worker_status st;
        tr_launcher_get(l, 0, &st);
        printf("%d\n", (int)st.pid);
        fflush(stdout);
    }
    for (;;) {
        pause();
    }
}

static pid_t read_pid(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    char buf[32] = "";
    ssize_t n;

    assert_int_equal(poll(&p, 1, 3000), 1);
    n = read(fd, buf, sizeof(buf) - 1);
    assert_true(n > 0);
    return (pid_t)atoi(buf);
}

static void pdeathsig(void **state)
{
    char *hargv[] = {"/proc/self/exe", "--pdeath-helper", (char *)node_exe, NULL, NULL};
    posix_spawn_file_actions_t fa;
    int64_t deadline;
    pid_t helper, worker, got = 0;
    int fds[2], st = 0;
    fx f;

    fx_open(&f, 1000); /* for the temp dir; this launcher stays idle */
    hargv[3] = f.logs;
    assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    assert_int_equal(posix_spawn(&helper, "/proc/self/exe", &fa, NULL, hargv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    worker = read_pid(fds[0]);
    close(fds[0]);
    assert_true(worker > 0);
    kill(helper, SIGKILL);
    assert_int_equal(waitpid(helper, NULL, 0), helper);
    /* The orphaned worker comes to us (the subreaper) once it has died. */
    deadline = tr_now_ms() + 1000;
    while ((got = waitpid(worker, &st, WNOHANG)) == 0 && tr_now_ms() < deadline) {
        tr_sleep_ms(5);
    }
    if (got != worker) {
        kill(-worker, SIGKILL); /* do not leave it behind when failing */
        waitpid(worker, NULL, 0);
        fail_msg("worker %d outlived its killed agent by 1 s", (int)worker);
    }
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGKILL);
    assert_true(group_gone(worker, 1000));
    fx_close(&f);
}

/* ---- logs ---- */

static void read_log_lines(void **state)
{
    const char *argv[] = {"sh", "-c", "printf 'one\\ntwo\\npart'; exec sleep 100", NULL};
    char *buf = (char *)1;
    size_t len = 1;
    long i;
    fx f;

    fx_open(&f, 2000);
    i = start(&f, "r", 0, argv, NULL, NULL);
    wait_size(get(&f, "r", 0).log_path, 12);
    OK(tr_launcher_read_log(f.l, (size_t)i, 1024, &buf, &len, &terr));
    assert_int_equal(len, 8);
    assert_string_equal(buf, "one\ntwo\n");
    free(buf);
    /* The partial line waits while the worker runs... */
    OK(tr_launcher_read_log(f.l, (size_t)i, 1024, &buf, &len, &terr));
    assert_int_equal(len, 0);
    assert_null(buf);
    OK(tr_launcher_stop(f.l, "r", 0, &terr));
    /* ...and comes out once it has exited. */
    wait_end(&f, "r", 0, WAIT_END_MS);
    OK(tr_launcher_read_log(f.l, (size_t)i, 1024, &buf, &len, &terr));
    assert_int_equal(len, 4);
    assert_string_equal(buf, "part");
    free(buf);
    OK(tr_launcher_read_log(f.l, (size_t)i, 1024, &buf, &len, &terr));
    assert_int_equal(len, 0);
    STATUS(tr_launcher_read_log(f.l, 99, 1024, &buf, &len, &terr), TROUPE_NOT_FOUND);
    fx_close(&f);
}

/* read_next reads at most max bytes and checks them against want ("" = none). */
static void read_next(fx *f, long i, size_t max, const char *want)
{
    char *buf;
    size_t len;

    OK(tr_launcher_read_log(f->l, (size_t)i, max, &buf, &len, &terr));
    assert_int_equal(len, strlen(want));
    if (len > 0) {
        assert_string_equal(buf, want);
    }
    free(buf);
}

static void read_log_max(void **state)
{
    const char *argv[] = {"sh", "-c", "printf 'ab\\ncdefghijk\\nxy'; exec sleep 100", NULL};
    long i;
    fx f;

    fx_open(&f, 2000);
    i = start(&f, "m", 0, argv, NULL, NULL);
    wait_size(get(&f, "m", 0).log_path, 15);
    read_next(&f, i, 5, "ab\n");  /* whole lines within max */
    read_next(&f, i, 5, "cdefg"); /* a line longer than max goes out in pieces */
    read_next(&f, i, 5, "hijk\n");
    read_next(&f, i, 5, ""); /* "xy" is partial and the worker runs */
    read_next(&f, i, 0, "");
    OK(tr_launcher_stop(f.l, "m", 0, &terr));
    wait_end(&f, "m", 0, WAIT_END_MS);
    read_next(&f, i, 1, "x"); /* ended: whatever is there, still at most max */
    read_next(&f, i, 5, "y");
    read_next(&f, i, 5, "");
    fx_close(&f);
}

/* ---- records ---- */

static void forget(void **state)
{
    const char *sleeper[] = {"sleep", "100", NULL};
    const char *first[] = {"sh", "-c", "echo first", NULL};
    const char *second[] = {"sh", "-c", "echo second", NULL};
    tr_worker_status a;
    char *log, *path;
    FILE *fp;
    char whole[64] = "";
    fx f;

    fx_open(&f, 2000);
    start(&f, "a", 0, sleeper, NULL, NULL);
    start(&f, "b", 0, first, NULL, NULL);
    wait_end(&f, "b", 0, WAIT_END_MS);
    a = get(&f, "a", 0);
    STATUS(tr_launcher_forget(f.l, "a", 0, &terr), TROUPE_FAILED_PRECONDITION);
    CONTAINS(terr.msg, "still running");
    STATUS(tr_launcher_forget(f.l, "b", 1, &terr), TROUPE_NOT_FOUND);
    OK(tr_launcher_forget(f.l, "b", 0, &terr));
    assert_int_equal(tr_launcher_count(f.l), 1);
    assert_int_equal(tr_launcher_find(f.l, "b", 0), -1);
    assert_int_equal(tr_launcher_find(f.l, "a", 0), 0);
    assert_string_equal(a.name, "a"); /* borrowed strings of others survive a forget */
    /* The same (name, attempt) may start again; its log is appended to, and
     * reading begins where this run's output begins. */
    start(&f, "b", 0, second, NULL, NULL);
    wait_end(&f, "b", 0, WAIT_END_MS);
    log = read_all(&f, "b", 0);
    assert_string_equal(log, "second\n");
    free(log);
    path = strdup(get(&f, "b", 0).log_path);
    fp = fopen(path, "r");
    assert_non_null(fp);
    assert_int_equal(fread(whole, 1, sizeof(whole) - 1, fp), 13);
    fclose(fp);
    free(path);
    assert_string_equal(whole, "first\nsecond\n");
    OK(tr_launcher_stop(f.l, "a", 0, &terr));
    wait_end(&f, "a", 0, WAIT_END_MS);
    OK(tr_launcher_forget(f.l, "a", 0, &terr));
    assert_int_equal(tr_launcher_count(f.l), 1);
    fx_close(&f);
}

static void duplicate(void **state)
{
    const char *sleeper[] = {"sleep", "100", NULL};
    const char *missing[] = {"troupe-no-such-command", NULL};
    tr_worker_spec s = {7, "x", 0, sleeper, NULL, NULL, NULL, NULL, NULL, 0, 0, 0};
    fx f;

    fx_open(&f, 1000);
    start(&f, "x", 0, sleeper, NULL, NULL);
    STATUS(tr_launcher_start(f.l, &s, &terr), TROUPE_ALREADY_EXISTS);
    CONTAINS(terr.msg, "x attempt 0");
    start(&f, "x", 1, sleeper, NULL, NULL);
    assert_int_equal(tr_launcher_count(f.l), 2);
    start(&f, "y", 0, missing, NULL, NULL);
    wait_end(&f, "y", 0, WAIT_END_MS);
    s.name = "y";
    STATUS(tr_launcher_start(f.l, &s, &terr), TROUPE_ALREADY_EXISTS);
    assert_int_equal(tr_launcher_count(f.l), 3);
    fx_close(&f); /* kills both sleepers */
}

static void close_kills(void **state)
{
    const char *sleeper[] = {"sleep", "100", NULL};
    const char *shell[] = {"sh", "-c", "sleep 100 & echo up; exec sleep 100", NULL};
    pid_t p1, p2;
    int64_t t0;
    fx f;

    fx_open(&f, 10000);
    start(&f, "one", 0, sleeper, NULL, NULL);
    start(&f, "two", 0, shell, NULL, NULL);
    free(wait_log(&f, "two", 0, "up\n", 2000));
    p1 = get(&f, "one", 0).pid;
    p2 = get(&f, "two", 0).pid;
    t0 = tr_now_ms();
    tr_launcher_close(f.l); /* no grace: SIGKILL, reaped */
    f.l = NULL;
    assert_true(tr_now_ms() - t0 < 1000);
    assert_true(pid_gone(p1));
    assert_true(pid_gone(p2));
    assert_true(group_gone(p1, 1000));
    assert_true(group_gone(p2, 1000));
    tr_launcher_close(NULL);
    fx_close(&f);
}

static void bad_arguments(void **state)
{
    const char *ok[] = {"true", NULL};
    const char *empty[] = {NULL};
    const char *badenv[] = {"NOEQUALS", NULL};
    tr_worker_spec s = {1, "a/b", 0, ok, NULL, NULL, NULL, NULL, NULL, 0, 0, 0};
    tr_launcher *l = (tr_launcher *)1;
    tr_worker_status st;
    fx f;

    STATUS(tr_launcher_open(NULL, node_exe, 0, &l, &terr), TROUPE_INVALID_ARGUMENT);
    assert_null(l);
    STATUS(tr_launcher_open("/tmp/x", node_exe, -1, &l, &terr), TROUPE_INVALID_ARGUMENT);
    STATUS(tr_launcher_open("/tmp/x", "/nonexistent/troupe-node", 0, &l, &terr), TROUPE_FAILED_PRECONDITION);
    CONTAINS(terr.msg, "/nonexistent/troupe-node");
    fx_open(&f, 1000);
    STATUS(tr_launcher_start(f.l, &s, &terr), TROUPE_INVALID_ARGUMENT);
    CONTAINS(terr.msg, "a/b");
    s.name = "";
    STATUS(tr_launcher_start(f.l, &s, &terr), TROUPE_INVALID_ARGUMENT);
    s.name = "ok";
    s.argv = empty;
    STATUS(tr_launcher_start(f.l, &s, &terr), TROUPE_INVALID_ARGUMENT);
    CONTAINS(terr.msg, "empty command");
    s.argv = ok;
    s.env = badenv;
    STATUS(tr_launcher_start(f.l, &s, &terr), TROUPE_INVALID_ARGUMENT);
    CONTAINS(terr.msg, "NOEQUALS");
    assert_int_equal(tr_launcher_count(f.l), 0);
    assert_int_equal(tr_launcher_poll(f.l), 0);
    assert_int_equal(tr_launcher_get(f.l, 0, &st), TROUPE_NOT_FOUND);
    assert_int_equal(tr_launcher_find(f.l, "ok", 0), -1);
    fx_close(&f);
}

/* A log directory that cannot be made is a start failure of the worker, not
 * an error of tr_launcher_start: the head hears about it like any other. */
static void log_dir_unusable(void **state)
{
    const char *ok[] = {"true", NULL};
    tr_worker_spec s = {1, "w", 0, ok, NULL, NULL, NULL, NULL, NULL, 0, 0, 0};
    char file[PATH_MAX + 16], logs[PATH_MAX + 32];
    tr_launcher *l;
    tr_worker_status st;
    char *buf;
    size_t len;
    int fd;
    fx f;

    fx_open(&f, 1000);
    snprintf(file, sizeof(file), "%s/plainfile", f.dir);
    fd = open(file, O_CREAT | O_WRONLY, 0644);
    assert_true(fd >= 0);
    close(fd);
    snprintf(logs, sizeof(logs), "%s/logs", file);
    OK(tr_launcher_open(logs, node_exe, 1000, &l, &terr));
    OK(tr_launcher_start(l, &s, &terr));
    OK(tr_launcher_get(l, 0, &st));
    assert_int_equal(st.phase, TR_WORKER_FAILED_TO_START);
    assert_int_equal(st.pid, 0);
    CONTAINS(st.message, "cannot start 'true': log directory");
    CONTAINS(st.message, "Not a directory");
    assert_int_equal(tr_launcher_poll(l), 1);
    OK(tr_launcher_read_log(l, 0, 100, &buf, &len, &terr));
    assert_int_equal(len, 0);
    tr_launcher_close(l);
    fx_close(&f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(exit_zero),
    cmocka_unit_test(exit_code),
    cmocka_unit_test(killed_by_signal),
    cmocka_unit_test(command_not_found),
    cmocka_unit_test(planted_symlink),
    cmocka_unit_test(bad_workdir),
    cmocka_unit_test(workdir),
    cmocka_unit_test(switch_ids),
    cmocka_unit_test(environment),
    cmocka_unit_test(stop_sigterm),
    cmocka_unit_test(stop_grace_sigkill),
    cmocka_unit_test(stop_no_grace),
    cmocka_unit_test(stop_unknown_and_ended),
    cmocka_unit_test(group_cleanup_after_exit),
    cmocka_unit_test(group_cleanup_after_stop),
    cmocka_unit_test(pdeathsig),
    cmocka_unit_test(read_log_lines),
    cmocka_unit_test(read_log_max),
    cmocka_unit_test(forget),
    cmocka_unit_test(duplicate),
    cmocka_unit_test(close_kills),
    cmocka_unit_test(bad_arguments),
    cmocka_unit_test(log_dir_unusable),
    cmocka_unit_test(refused_start),
    cmocka_unit_test(report_found),
};

int main(int argc, char **argv)
{
    const size_t n = sizeof(tests) / sizeof(tests[0]);

    if (argc == 4 && strcmp(argv[1], "--pdeath-helper") == 0) {
        return pdeath_helper(argv);
    }
    if (argc != 3) {
        fprintf(stderr, "usage: test_launcher CASE|all TROUPE-NODE-PATH\n");
        return 2;
    }
    node_exe = argv[2];
    tr_log_level = TR_LOG_WARNING; /* the launcher's info lines would drown cmocka's */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
        perror("PR_SET_CHILD_SUBREAPER");
        return 2;
    }
    if (strcmp(argv[1], "all") == 0) {
        return _cmocka_run_group_tests("unit.node.launcher", tests, n, NULL, NULL);
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(tests[i].name, argv[1]) == 0) {
            return _cmocka_run_group_tests("unit.node.launcher", &tests[i], 1, NULL, NULL);
        }
    }
    fprintf(stderr, "test_launcher: no case named '%s'; known cases:\n", argv[1]);
    for (size_t i = 0; i < n; i++) {
        fprintf(stderr, "  %s\n", tests[i].name);
    }
    return 2;
}
