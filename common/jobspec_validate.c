/* jobspec_validate.c - tr_jobspec_validate: the job spec rules applied to a
 * message that did not come from our YAML parser (a SubmitJob request from
 * any client). It never trusts counts against pointers: a hand-built or
 * hostile message may carry NULL arrays, NULL entries or NULL strings.
 *
 * Unlike the YAML path nothing is defaulted or canonicalized here (the
 * message is const): the strategy must already be one of the upper-case
 * names, and a workdir, when set, must be absolute. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "jobspec_int.h"
#include "names.h"

#define NAME_RULE "1 to 63 of letters, digits, '.', '_' or '-'"

static const char *str(const char *s)
{
    return s ? s : "";
}

static int check_env(const char *who, Troupe__V1__EnvVar *const *env, size_t n, size_t *total, tr_err *err)
{
    *total += n;
    if (*total > TR_JS_MAX_ENV) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: env: the job sets more than %d variables", who,
                          TR_JS_MAX_ENV);
    }
    for (size_t i = 0; i < n; i++) {
        const Troupe__V1__EnvVar *e = env ? env[i] : NULL;
        if (e == NULL) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: env entry %zu is missing", who, i);
        }
        if (!tr_js_env_name_ok(e->key)) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                              "%s: env name '%s' is not valid (letters, digits and '_', not starting "
                              "with a digit)",
                              who, str(e->key));
        }
        if (strlen(str(e->value)) > TR_JS_MAX_STRING) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: env %s: value is longer than %d bytes", who,
                              e->key, TR_JS_MAX_STRING);
        }
    }
    return TROUPE_OK;
}

static bool wants_gpus(const Troupe__V1__JobSpec *spec)
{
    for (size_t i = 0; spec->groups != NULL && i < spec->n_groups; i++) {
        if (spec->groups[i] != NULL && spec->groups[i]->gpus > 0) {
            return true;
        }
    }
    return false;
}

static int check_cluster(const Troupe__V1__JobSpec *spec, tr_err *err)
{
    if (spec->n_cluster_nodes > 0 && spec->cluster_nodes == NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "cluster: %zu nodes but no list",
                          spec->n_cluster_nodes);
    }
    if (spec->n_cluster_nodes == 0 && wants_gpus(spec)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "cluster: no nodes (nodes lists GPUs per node; only a job of CPU-only groups, "
                          "gpu: 0, may leave it out)");
    }
    if (spec->n_cluster_nodes > TR_JS_MAX_NODES) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "cluster: %zu nodes, at most %d allowed",
                          spec->n_cluster_nodes, TR_JS_MAX_NODES);
    }
    for (size_t i = 0; i < spec->n_cluster_nodes; i++) {
        uint32_t g = spec->cluster_nodes[i];
        if (g < 1 || g > TR_JS_MAX_NODE_GPUS) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                              "cluster: node %zu has %u GPUs; each node needs 1 to %d", i, g,
                              TR_JS_MAX_NODE_GPUS);
        }
    }
    if (spec->n_cluster_labels > TR_JS_MAX_LABELS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "cluster: more than %d labels", TR_JS_MAX_LABELS);
    }
    for (size_t i = 0; i < spec->n_cluster_labels; i++) {
        const Troupe__V1__Label *l = spec->cluster_labels ? spec->cluster_labels[i] : NULL;
        int rv;
        if (l == NULL || str(l->key)[0] == '\0') {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "cluster: label %zu has no key", i);
        }
        if ((rv = tr_label_check(l->key, l->value, err)) != TROUPE_OK) {
            tr_err_prefix(err, "cluster.labels");
            return rv;
        }
    }
    return TROUPE_OK;
}

static int check_command(const Troupe__V1__GroupSpec *g, tr_err *err)
{
    if (g->n_command == 0 || g->command == NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "group %s: command is empty", g->name);
    }
    if (g->n_command > TR_JS_MAX_ARGS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "group %s: command has %zu arguments, at most %d",
                          g->name, g->n_command, TR_JS_MAX_ARGS);
    }
    for (size_t i = 0; i < g->n_command; i++) {
        if (g->command[i] == NULL || strlen(g->command[i]) > TR_JS_MAX_STRING) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                              "group %s: command[%zu] is missing or longer than %d bytes", g->name, i,
                              TR_JS_MAX_STRING);
        }
    }
    if (g->command[0][0] == '\0') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "group %s: command[0] (the program) is empty",
                          g->name);
    }
    return TROUPE_OK;
}

/* check_group assumes g->name was checked, so messages can name the group. */
static int check_group(const Troupe__V1__GroupSpec *g, size_t *env_total, tr_err *err)
{
    char who[TR_JS_NAME_MAX + 8];
    const char *bad_key;

    if (g->workers < 1 || g->workers > TR_JS_MAX_WORKERS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "group %s: workers must be >= 1 and <= %d, got %u",
                          g->name, TR_JS_MAX_WORKERS, g->workers);
    }
    if (tr_js_elastic_check(g, &bad_key, err) != TROUPE_OK) {
        tr_err_prefix(err, "group %s: elastic.%s", g->name, bad_key);
        return TROUPE_INVALID_ARGUMENT;
    }
    if (g->gpus > TR_JS_MAX_GPUS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "group %s: gpus must be <= %d (0 = a CPU-only worker), got %u", g->name,
                          TR_JS_MAX_GPUS, g->gpus);
    }
    if (!isfinite(g->cpus) || g->cpus < 0 || g->cpus > TR_JS_MAX_CPUS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "group %s: cpus must be a number >= 0 and <= %d (0 = unset)", g->name,
                          TR_JS_MAX_CPUS);
    }
    if (g->strategy == NULL || tr_js_strategy(g->strategy) == NULL ||
        strcmp(tr_js_strategy(g->strategy), g->strategy) != 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "group %s: unknown strategy '%s' (use %s)", g->name,
                          str(g->strategy), TR_JS_STRATEGIES);
    }
    if (g->env_style != NULL && g->env_style[0] != '\0' && strcmp(g->env_style, TR_JS_ENV_TORCHRUN) != 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "group %s: unknown env_style '%.64s' (use " TR_JS_ENV_TORCHRUN ", or leave it out)",
                          g->name, g->env_style);
    }
    int rv = check_command(g, err);
    if (rv != TROUPE_OK) {
        return rv;
    }
    snprintf(who, sizeof(who), "group %s", g->name);
    return check_env(who, g->env, g->n_env, env_total, err);
}

static int check_groups(const Troupe__V1__JobSpec *spec, size_t *env_total, tr_err *err)
{
    if (spec->n_groups == 0 || spec->groups == NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "job %s: no groups", spec->name);
    }
    if (spec->n_groups > TR_JS_MAX_GROUPS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "job %s: %zu groups, at most %d allowed", spec->name,
                          spec->n_groups, TR_JS_MAX_GROUPS);
    }
    for (size_t i = 0; i < spec->n_groups; i++) {
        const Troupe__V1__GroupSpec *g = spec->groups[i];
        if (g == NULL || !tr_js_name_ok(g->name)) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "groups[%zu]: name '%s' is not valid (%s)", i,
                              g ? str(g->name) : "", NAME_RULE);
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(spec->groups[j]->name, g->name) == 0) {
                return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                                  "duplicate group name '%s' (groups[%zu] and groups[%zu])", g->name, j, i);
            }
        }
        int rv = check_group(g, env_total, err);
        if (rv != TROUPE_OK) {
            return rv;
        }
    }
    return TROUPE_OK;
}

/* check_profile: steps and workers go together, as NeMo RL asserts for
 * NRL_NSYS_PROFILE_STEP_RANGE and NRL_NSYS_WORKER_PATTERNS; both empty (or
 * no profile at all) means no profiling. */
static int check_profile(const Troupe__V1__ProfileSpec *p, tr_err *err)
{
    int start, stop, rv;

    if (p != NULL && !p->nsys && str(p->nsys_options)[0] != '\0') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "profile: nsys_options goes with nsys: true");
    }
    if (p != NULL && p->nsys && (str(p->steps)[0] == '\0' || str(p->workers)[0] == '\0')) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "profile: nsys needs steps and workers (the workers that run under nsys and the steps it "
                          "captures)");
    }
    if (p == NULL || (str(p->steps)[0] == '\0' && str(p->workers)[0] == '\0')) {
        return TROUPE_OK;
    }
    if (str(p->steps)[0] == '\0' || str(p->workers)[0] == '\0') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "profile: steps and workers go together; %s is empty",
                          str(p->steps)[0] == '\0' ? "steps" : "workers");
    }
    rv = tr_profile_range_parse(p->steps, &start, &stop, err);
    if (rv == TROUPE_OK) {
        rv = tr_js_globs_check(p->workers, err);
    }
    if (rv != TROUPE_OK) {
        tr_err_prefix(err, "profile");
    }
    return rv;
}

/* check_runtime: named communicators and NeMo RL's profiling variables. */
static int check_runtime(const Troupe__V1__JobSpec *spec, tr_err *err)
{
    const char *bad_key;
    size_t bad_group;
    int rv;

    for (size_t i = 0; i < spec->n_communicators; i++) {
        if ((rv = tr_js_comm_check(spec, i, &bad_group, err)) != TROUPE_OK) {
            return rv;
        }
    }
    return tr_js_nrl_env(spec, &bad_key, &bad_group, err);
}

int tr_jobspec_validate(const Troupe__V1__JobSpec *spec, tr_err *err)
{
    size_t env_total = 0;
    int rv;

    if (spec == NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "no job spec");
    }
    if (!tr_js_name_ok(spec->name)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "job name '%s' is not valid (%s)", str(spec->name),
                          NAME_RULE);
    }
    rv = check_cluster(spec, err);
    if (rv == TROUPE_OK) {
        rv = check_groups(spec, &env_total, err);
    }
    if (rv == TROUPE_OK) {
        rv = check_env("job", spec->env, spec->n_env, &env_total, err);
    }
    if (rv != TROUPE_OK) {
        return rv;
    }
    if (spec->max_restarts > TR_JS_MAX_RESTARTS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "job %s: max_restarts must be <= %d, got %u",
                          spec->name, TR_JS_MAX_RESTARTS, spec->max_restarts);
    }
    if (str(spec->workdir)[0] != '\0' &&
        (spec->workdir[0] != '/' || strlen(spec->workdir) > TR_JS_MAX_STRING)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "job %s: workdir '%s' must be an absolute path of at most %d bytes", spec->name,
                          spec->workdir, TR_JS_MAX_STRING);
    }
    if ((rv = check_profile(spec->profile, err)) != TROUPE_OK) {
        return rv;
    }
    const char *bad_key = NULL;
    if ((rv = tr_js_health_check(spec->health, &bad_key, err)) != TROUPE_OK) {
        return rv;
    }
    return check_runtime(spec, err);
}
