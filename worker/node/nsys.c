/* nsys.c - `profile: {nsys: true}` on the node: run each matching worker under
 * Nsight Systems, capturing only what the worker runtime brackets with
 * cudaProfilerStart/Stop (its profiled steps).
 *
 * The command becomes
 *   nsys profile --trace=cuda,nvtx --sample=none --capture-range=cudaProfilerApi
 *        --capture-range-end=stop --cuda-graph-trace=node --force-overwrite=true
 *        [TROUPE_NSYS_OPTIONS, split at spaces] --output=LOGDIR/WORKER_A-B_%p CMD...
 * (options as single --key=value words; nsys expands %p to the profiled
 * process's pid, so the report is WORKER_A-B_PID.nsys-rep, no ':' in it).
 * The worker the agent supervises is nsys itself: the agent reaps it only
 * after nsys has finished writing the report, then finds the report by the
 * pattern (launcher.c) and tells the head, which lists it in `troupe job`.
 *
 * Which workers: the job's TROUPE_NSYS=1 (from profile: {nsys: true} or the
 * job's env), and its profile patterns (TROUPE_PROFILE_WORKERS, else
 * NRL_NSYS_WORKER_PATTERNS) matching the worker's group or name, as the
 * worker runtime matches them. A node without nsys fails such a worker at
 * launch with the reason (the head already refused the job when no node has
 * nsys at all). */
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "node.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

#define MAX_USER_OPTIONS 32

void tr_node_find_nsys(tr_node_agent *a)
{
    const char *path = getenv("PATH");
    char dir[PATH_MAX], cand[PATH_MAX + 8];

    a->nsys[0] = '\0';
    while (path != NULL && *path != '\0') {
        size_t len = strcspn(path, ":");
        if (len > 0 && len < sizeof(dir)) {
            memcpy(dir, path, len);
            dir[len] = '\0';
            snprintf(cand, sizeof(cand), "%s/nsys", dir);
            if (access(cand, X_OK) == 0) {
                tr_strlcpy(a->nsys, cand, sizeof(a->nsys));
                TR_LOG(TR_LOG_INFO, "nsys found: %s (jobs with profile: {nsys: true} may run here)", a->nsys);
                return;
            }
        }
        path += len + (path[len] == ':');
    }
    TR_LOG(TR_LOG_INFO, "nsys not found on PATH: jobs with profile: {nsys: true} fail to start here");
}

static const char *env_of(const Troupe__V1__WorkerAssignment *wa, const char *key)
{
    const char *found = NULL;
    for (size_t i = 0; i < wa->n_env; i++) {
        if (strcmp(wa->env[i]->key, key) == 0) {
            found = wa->env[i]->value; /* the last wins, as in the worker's environment */
        }
    }
    return found;
}

/* matches: any comma-separated glob matches the group or the worker name. */
static int matches(const char *patterns, const char *group, const char *worker)
{
    char pat[1024];

    while (patterns != NULL && *patterns != '\0') {
        size_t len = strcspn(patterns, ","), a = 0, b = len;
        while (a < b && patterns[a] == ' ') {
            a++;
        }
        while (b > a && patterns[b - 1] == ' ') {
            b--;
        }
        if (b > a && b - a < sizeof(pat)) {
            memcpy(pat, patterns + a, b - a);
            pat[b - a] = '\0';
            if (fnmatch(pat, group, 0) == 0 || fnmatch(pat, worker, 0) == 0) {
                return 1;
            }
        }
        patterns += len + (patterns[len] == ',');
    }
    return 0;
}

/* range_part turns "2:4" into "2-4" (file names get no ':'). */
static void range_part(const char *steps, char *buf, size_t size)
{
    int a = 0, b = 0;
    if (steps != NULL && sscanf(steps, "%d:%d", &a, &b) == 2) {
        snprintf(buf, size, "%d-%d", a, b);
    } else {
        snprintf(buf, size, "run");
    }
}

void tr_node_nsys_free(tr_nsys_cmd *c)
{
    free((void *)c->argv);
    free(c->report_glob);
    free(c->opts_copy);
    free(c->output);
    memset(c, 0, sizeof(*c));
}

int tr_node_nsys_wrap(const tr_node_agent *a, const Troupe__V1__WorkerAssignment *wa, tr_nsys_cmd *c)
{
    const char *on = env_of(wa, "TROUPE_NSYS"), *group = env_of(wa, "TROUPE_GROUP");
    const char *pats = env_of(wa, "TROUPE_PROFILE_WORKERS"), *steps = env_of(wa, "TROUPE_PROFILE_STEPS");
    const char *opts = env_of(wa, "TROUPE_NSYS_OPTIONS");
    static const char *const fixed[] = {"profile",
                                        "--trace=cuda,nvtx",
                                        "--sample=none",
                                        "--capture-range=cudaProfilerApi",
                                        "--capture-range-end=stop",
                                        "--cuda-graph-trace=node",
                                        "--force-overwrite=true"};
    char logs[PATH_MAX], dir[PATH_MAX + 8], range[32], *save = NULL;
    size_t n = 0;

    memset(c, 0, sizeof(*c));
    if (pats == NULL || pats[0] == '\0') {
        pats = env_of(wa, "NRL_NSYS_WORKER_PATTERNS");
        steps = env_of(wa, "NRL_NSYS_PROFILE_STEP_RANGE");
    }
    if (on == NULL || strcmp(on, "1") != 0 || !matches(pats, group ? group : "", wa->name)) {
        return 0; /* not profiled with nsys: the command as it is */
    }
    if (a->nsys[0] == '\0') {
        snprintf(c->fail_reason, sizeof(c->fail_reason),
                 "profile: {nsys: true} but nsys is not on the PATH of node %s (install Nsight Systems there and "
                 "restart troupe-node, or use the built-in trace: troupe trace)",
                 a->cfg.name ? a->cfg.name : a->hostname);
        return 0;
    }
    snprintf(dir, sizeof(dir), "%s/logs", a->cfg.state_dir);
    if (realpath(dir, logs) == NULL) {
        tr_strlcpy(logs, dir, sizeof(logs));
    }
    range_part(steps, range, sizeof(range));
    c->argv = calloc(1 + sizeof(fixed) / sizeof(fixed[0]) + MAX_USER_OPTIONS + 1 + wa->n_command + 1, sizeof(*c->argv));
    if (c->argv == NULL || (opts != NULL && opts[0] != '\0' && (c->opts_copy = strdup(opts)) == NULL) ||
        asprintf(&c->output, "--output=%s/%s_%s_%%p", logs, wa->name, range) < 0 ||
        asprintf(&c->report_glob, "%s/%s_%s_*.nsys-rep", logs, wa->name, range) < 0) {
        tr_node_nsys_free(c);
        return -1;
    }
    c->argv[n++] = a->nsys;
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        c->argv[n++] = fixed[i];
    }
    for (char *tok = c->opts_copy ? strtok_r(c->opts_copy, " \t", &save) : NULL; tok != NULL;
         tok = strtok_r(NULL, " \t", &save)) {
        if (n == 1 + sizeof(fixed) / sizeof(fixed[0]) + MAX_USER_OPTIONS) {
            snprintf(c->fail_reason, sizeof(c->fail_reason), "profile.nsys_options: more than %d options",
                     MAX_USER_OPTIONS);
            free((void *)c->argv);
            c->argv = NULL;
            return 0;
        }
        c->argv[n++] = tok;
    }
    c->argv[n++] = c->output;
    for (size_t i = 0; i < wa->n_command; i++) {
        c->argv[n++] = wa->command[i];
    }
    return 0;
}
