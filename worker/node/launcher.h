/* launcher.h - starting, supervising and stopping worker processes.
 *
 * Workers are started with posix_spawn (never fork: the agent may have loaded
 * the CUDA driver), each in its own process group, stdin from /dev/null and
 * stdout+stderr appended to one log file per worker attempt. The agent's own
 * binary is spawned as a shim (`troupe-node --exec-worker DIR -- CMD...`) that
 * changes to the working directory, runs the command as its child and stays as
 * the group's leader: armed with PR_SET_PDEATHSIG, it SIGKILLs the whole group
 * when the agent dies (so no worker, nor any child of one, lingers), and
 * otherwise ends exactly as the command ended (launcher_shim.c).
 *
 * Stopping sends SIGTERM, then SIGCONT (so a stopped worker can act on it),
 * to the whole process group and to every descendant that left it (the shim
 * is their subreaper, proctree.h), then SIGKILL the same way after the grace
 * period. Exits are collected with waitpid (per pid, never -1) and
 * reported with exit code or signal; when a group's leader has exited, what is
 * left of its group is SIGKILLed (a shell's background children do not
 * outlive the worker).
 *
 * A worker the agent refuses (spec->fail_reason) is recorded FAILED_TO_START
 * with that reason, and nothing runs.
 *
 * A command that cannot be started (not on PATH, not executable, bad workdir)
 * makes the shim print "troupe-node: cannot start 'CMD': REASON" to the log
 * and exit 127; the launcher reports that exit as FAILED_TO_START with message
 * "cannot start 'CMD': REASON", while a command that ran and exited 127 by
 * itself (sh's "not found") stays EXITED with code 127.
 *
 * The worker's environment is the agent's, with spec->env overriding and
 * adding keys (the agent's own environment is not changed), plus
 * NCCL_NVLS_ENABLE=0 when neither sets it.
 *
 * Not thread-safe: the agent's main loop owns the launcher. Call start from a
 * thread that lives as long as the agent: Linux delivers PR_SET_PDEATHSIG when
 * the spawning *thread* exits. */
#ifndef TR_LAUNCHER_H
#define TR_LAUNCHER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

typedef struct tr_launcher tr_launcher;

typedef enum tr_worker_phase {
    TR_WORKER_RUNNING = 0,
    TR_WORKER_STOPPING = 1,        /* SIGTERM sent, waiting for exit or grace */
    TR_WORKER_EXITED = 2,          /* exit_code or signal valid */
    TR_WORKER_FAILED_TO_START = 3, /* message says why (e.g. command not found) */
} tr_worker_phase;

typedef struct tr_worker_spec {
    uint64_t job_id;
    const char *name;        /* "job7-policy-3" */
    uint32_t attempt;
    const char *const *argv; /* NULL-terminated; argv[0] looked up on PATH */
    const char *const *env;  /* NULL-terminated "K=V" added to/overriding the agent's environment */
    const char *workdir;     /* NULL or "" = the agent's cwd */
    const char *fail_reason; /* non-NULL: start nothing, record FAILED_TO_START with this message
                                (the agent could not prepare the worker, e.g. its GPUs) */
    const char *lease_path;  /* NULL = no lease; else the agent's lease file (launcher_shim.h) */
    const char *report_glob; /* NULL, or a glob of a file the command writes (an nsys report): once the
                                worker ended, the newest match written since its start is its report */
    int switch_ids;          /* 1: the command runs as uid:gid with no supplementary groups (ids.h) */
    uid_t uid;
    gid_t gid;
} tr_worker_spec;

typedef struct tr_worker_status {
    uint64_t job_id;
    const char *name;        /* borrowed from the launcher; valid until tr_launcher_forget */
    uint32_t attempt;
    tr_worker_phase phase;
    pid_t pid;
    int exit_code;           /* when EXITED by exit(); 127 for a shim start failure, -1 when no
                                process was spawned (log file or posix_spawn failed; pid 0) */
    int signal;              /* when EXITED by a signal (0 otherwise) */
    const char *message;     /* "exited with code 3", "killed by signal SIGSEGV (Segmentation fault)",
                                "exited with code 127: command not found: X (...)", "stopped (SIGTERM)",
                                "stopped (SIGKILL)" (grace 0), "stopped: SIGKILL after 10000 ms grace",
                                "cannot start 'nosuchcmd': command not found (is it on the node's PATH?)" */
    const char *log_path;    /* message and log_path: borrowed, valid until tr_launcher_forget */
    const char *report;      /* spec->report_glob's file once ended (NULL: none), borrowed likewise */
    int64_t started_ms, ended_ms;
} tr_worker_status;

/* tr_launcher_open: logs go to log_dir/<name>.<attempt>.log (created 0644,
 * appended to; log_dir is created at each start if missing); self_exe is the
 * path of the troupe-node binary used as the shim ("/proc/self/exe" works).
 * INVALID_ARGUMENT for missing paths or grace_ms < 0, FAILED_PRECONDITION when
 * self_exe is not executable. */
int tr_launcher_open(const char *log_dir, const char *self_exe, int64_t grace_ms, tr_launcher **out,
                     tr_err *err);

/* tr_launcher_close SIGKILLs every still-running worker group, reaps them and
 * frees; NULL is a no-op. */
void tr_launcher_close(tr_launcher *l);

/* tr_launcher_start spawns a worker. A spawn failure (missing command or
 * workdir, detected when the shim exits; an unusable log directory or a
 * posix_spawn error, recorded at once) is not an error of this call: the
 * worker is recorded as FAILED_TO_START with a message and OK is returned.
 * ALREADY_EXISTS when the same (name, attempt) is known; INVALID_ARGUMENT for
 * an empty name or one with '/', an empty argv, an env entry without '='. */
int tr_launcher_start(tr_launcher *l, const tr_worker_spec *spec, tr_err *err);

/* tr_launcher_stop begins stopping (name, attempt): SIGTERM now, SIGKILL
 * after the grace period (driven by tr_launcher_poll); grace 0 sends SIGKILL
 * at once. NOT_FOUND if unknown; OK and nothing done if already stopping,
 * exited or failed to start. */
int tr_launcher_stop(tr_launcher *l, const char *name, uint32_t attempt, tr_err *err);

/* tr_launcher_poll reaps exited workers (waitpid WNOHANG), escalates overdue
 * stops to SIGKILL, and returns how many workers changed phase since the last
 * poll (a start, a stop and an exit count one each). Call it every few tens of
 * milliseconds. */
int tr_launcher_poll(tr_launcher *l);

/* tr_launcher_count / tr_launcher_get enumerate known workers (index order is
 * stable until a forget). */
size_t tr_launcher_count(const tr_launcher *l);
int tr_launcher_get(const tr_launcher *l, size_t i, tr_worker_status *out);

/* tr_launcher_paused returns 1 when worker i is RUNNING but its command is
 * stopped by a signal (SIGSTOP: state T), else 0. Reads /proc: call it per
 * report, not per poll. */
int tr_launcher_paused(const tr_launcher *l, size_t i);

/* tr_launcher_find returns the index of (name, attempt) or -1. */
long tr_launcher_find(const tr_launcher *l, const char *name, uint32_t attempt);

/* tr_launcher_read_log returns new complete lines of a worker's log since the
 * last call (at most max bytes; a partial last line waits unless the worker
 * has exited; a single line longer than max comes out in max-byte pieces).
 * Only this attempt's output is returned, not older text of a reused log file.
 * *buf is malloc'ed and NUL-terminated (free it); *buf NULL and *len 0 when
 * nothing new. NOT_FOUND for a bad index. */
int tr_launcher_read_log(tr_launcher *l, size_t i, size_t max, char **buf, size_t *len, tr_err *err);

/* tr_launcher_log_offset returns where the next byte tr_launcher_read_log
 * hands out of worker i sits in its log file (0 for a bad index): the offset
 * a report names its output by, so the head keeps a re-sent byte once. */
uint64_t tr_launcher_log_offset(const tr_launcher *l, size_t i);

/* tr_launcher_forget drops an EXITED/FAILED_TO_START record (the head has it).
 * BUSY records (running/stopping) are FAILED_PRECONDITION. */
int tr_launcher_forget(tr_launcher *l, const char *name, uint32_t attempt, tr_err *err);

/* tr_launcher_exec_worker is the shim's body, called from troupe-node's main
 * when argv[1] is "--exec-worker": argv = {prog, "--exec-worker", WORKDIR,
 * ["--as=UID:GID",] "--", CMD, ARGS...}. Never returns on success; returns 127 on failure after writing
 * the reason to stderr (which is the worker's log). */
int tr_launcher_exec_worker(int argc, char **argv);

#endif
