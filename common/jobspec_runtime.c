/* jobspec_runtime.c - the spec's worker-runtime parts: named communicators
 * across groups, and NeMo RL's profiling variables in the job's env. Rules
 * without positions, shared by the YAML walk (which adds file:line:col) and
 * tr_jobspec_validate. */
#include <stdint.h>
#include <string.h>

#include "jobspec_int.h"

static int has_group(const Troupe__V1__JobSpec *spec, const char *name)
{
    for (size_t g = 0; g < spec->n_groups; g++) {
        if (spec->groups[g] != NULL && spec->groups[g]->name != NULL && strcmp(spec->groups[g]->name, name) == 0) {
            return 1;
        }
    }
    return 0;
}

static int is_elastic(const Troupe__V1__JobSpec *spec, const char *name)
{
    for (size_t g = 0; g < spec->n_groups; g++) {
        const Troupe__V1__GroupSpec *gs = spec->groups[g];
        if (gs != NULL && gs->name != NULL && strcmp(gs->name, name) == 0) {
            return gs->elastic != NULL;
        }
    }
    return 0;
}

int tr_js_elastic_check(const Troupe__V1__GroupSpec *g, const char **bad_key, tr_err *err)
{
    const Troupe__V1__ElasticSpec *e = g->elastic;

    *bad_key = NULL;
    if (e == NULL) {
        return TROUPE_OK;
    }
    if (e->min_workers < 1 || e->min_workers > g->workers) {
        *bad_key = "min_workers";
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "min_workers must be >= 1 and <= workers (%u), got %u: the group goes on while at least "
                          "min_workers of its ranks run",
                          g->workers, e->min_workers);
    }
    if (e->max_workers < e->min_workers || e->max_workers > g->workers) {
        *bad_key = "max_workers";
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "max_workers must be >= min_workers (%u) and <= workers (%u), got %u: a group grows "
                          "back to the size it was placed at, no further",
                          e->min_workers, g->workers, e->max_workers);
    }
    return TROUPE_OK;
}

static int comm_name_check(const Troupe__V1__JobSpec *spec, size_t i, tr_err *err)
{
    const Troupe__V1__CommunicatorSpec *c = spec->communicators[i];

    if (!tr_js_name_ok(c->name)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "communicator name '%s' is not valid (1 to %d of A-Z a-z 0-9 . _ -)",
                          c->name ? c->name : "", TR_JS_NAME_MAX);
    }
    if (has_group(spec, c->name)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "communicator %s has the name of a group (every group is already a communicator)",
                          c->name);
    }
    for (size_t k = 0; k < i; k++) {
        if (spec->communicators[k] != NULL && spec->communicators[k]->name != NULL &&
            strcmp(spec->communicators[k]->name, c->name) == 0) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "duplicate communicator name '%s'", c->name);
        }
    }
    if (c->n_groups == 0 || c->n_groups > TR_JS_MAX_GROUPS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "communicator %s: expected 1 to %d groups, got %zu",
                          c->name, TR_JS_MAX_GROUPS, c->n_groups);
    }
    return TROUPE_OK;
}

int tr_js_comm_check(const Troupe__V1__JobSpec *spec, size_t i, size_t *bad_group, tr_err *err)
{
    const Troupe__V1__CommunicatorSpec *c = spec->communicators[i];
    int rv;

    *bad_group = SIZE_MAX;
    if (c == NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "communicators[%zu] is empty", i);
    }
    if ((rv = comm_name_check(spec, i, err)) != TROUPE_OK) {
        return rv;
    }
    for (size_t g = 0; g < c->n_groups; g++) {
        const char *name = c->groups[g] ? c->groups[g] : "";
        *bad_group = g;
        if (!has_group(spec, name)) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "communicator %s: no group named '%s'", c->name, name);
        }
        if (is_elastic(spec, name)) {
            /* Its ranks are numbered over every member group: a shrink of one
             * would renumber the others' ranks too, which no one is told. */
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                              "communicator %s: group %s is elastic; an elastic group is its own communicator "
                              "only (leave elastic: out of %s, or %s out of the communicator)",
                              c->name, name, name, name);
        }
        for (size_t k = 0; k < g; k++) {
            if (strcmp(c->groups[k], name) == 0) {
                return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "communicator %s: group %s is listed twice",
                                  c->name, name);
            }
        }
    }
    *bad_group = SIZE_MAX;
    return TROUPE_OK;
}

/* env_get: key's value as a worker of group gs sees it: the group's env:
 * overrides the job's (NULL gs: the job's alone). */
static const char *env_get(const Troupe__V1__JobSpec *spec, const Troupe__V1__GroupSpec *gs, const char *key)
{
    for (size_t i = 0; gs != NULL && i < gs->n_env; i++) {
        if (gs->env[i] != NULL && gs->env[i]->key != NULL && strcmp(gs->env[i]->key, key) == 0) {
            return gs->env[i]->value ? gs->env[i]->value : "";
        }
    }
    for (size_t i = 0; i < spec->n_env; i++) {
        if (spec->env[i] != NULL && spec->env[i]->key != NULL && strcmp(spec->env[i]->key, key) == 0) {
            return spec->env[i]->value ? spec->env[i]->value : "";
        }
    }
    return NULL;
}

int tr_js_wants_nsys(const Troupe__V1__JobSpec *spec)
{
    if (spec->profile != NULL && spec->profile->nsys) {
        return 1;
    }
    for (size_t g = 0; g <= spec->n_groups; g++) {
        const Troupe__V1__GroupSpec *gs = g < spec->n_groups ? spec->groups[g] : NULL;
        const char *v = env_get(spec, gs, TR_JS_NSYS);
        if (v != NULL && strcmp(v, "1") == 0) {
            return 1;
        }
    }
    return 0;
}

/* nsys_env: TROUPE_NSYS is 0 or 1, and 1 needs a range and patterns (the NRL
 * variables or profile:). */
static int nsys_env(const Troupe__V1__JobSpec *spec, const Troupe__V1__GroupSpec *gs, const char *range,
                    const char **bad_key, tr_err *err)
{
    const char *v = env_get(spec, gs, TR_JS_NSYS);
    int has_profile = spec->profile != NULL && spec->profile->steps != NULL && spec->profile->steps[0];

    if (v == NULL) {
        return TROUPE_OK;
    }
    *bad_key = TR_JS_NSYS;
    if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "env: %s is 0 or 1, not '%s'", TR_JS_NSYS, v);
    }
    if (strcmp(v, "1") == 0 && range == NULL && !has_profile) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "env: %s=1 needs %s and %s (or profile: steps and workers): which workers run under "
                          "nsys and the steps it captures",
                          TR_JS_NSYS, TR_JS_NRL_RANGE, TR_JS_NRL_PATTERNS);
    }
    *bad_key = NULL;
    return TROUPE_OK;
}

/* nrl_env checks the variables as the workers of gs (NULL: the job's env
 * alone) see them. */
static int nrl_env(const Troupe__V1__JobSpec *spec, const Troupe__V1__GroupSpec *gs, const char **bad_key,
                   tr_err *err)
{
    const char *range = env_get(spec, gs, TR_JS_NRL_RANGE), *pats = env_get(spec, gs, TR_JS_NRL_PATTERNS);
    int a, b, rv;

    *bad_key = NULL;
    if ((rv = nsys_env(spec, gs, range, bad_key, err)) != TROUPE_OK) {
        return rv;
    }
    if (range == NULL && pats == NULL) {
        return TROUPE_OK;
    }
    if (range == NULL || pats == NULL) {
        *bad_key = range ? TR_JS_NRL_RANGE : TR_JS_NRL_PATTERNS;
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "env: %s is set without %s (set both or neither)",
                          *bad_key, range ? TR_JS_NRL_PATTERNS : TR_JS_NRL_RANGE);
    }
    *bad_key = TR_JS_NRL_RANGE;
    if ((rv = tr_profile_range_parse(range, &a, &b, err)) != TROUPE_OK) {
        tr_err_prefix(err, "env: %s", TR_JS_NRL_RANGE);
        return rv;
    }
    *bad_key = TR_JS_NRL_PATTERNS;
    if ((rv = tr_js_globs_check(pats, err)) != TROUPE_OK) {
        tr_err_prefix(err, "env: %s", TR_JS_NRL_PATTERNS);
        return rv;
    }
    if (spec->profile != NULL && spec->profile->steps != NULL && spec->profile->steps[0] &&
        (strcmp(spec->profile->steps, range) != 0 || strcmp(spec->profile->workers, pats) != 0)) {
        *bad_key = TR_JS_NRL_RANGE;
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "env: %s=%s and %s=%s disagree with profile: {steps: %s, workers: %s}; set one of them",
                          TR_JS_NRL_RANGE, range, TR_JS_NRL_PATTERNS, pats, spec->profile->steps,
                          spec->profile->workers);
    }
    *bad_key = NULL;
    return TROUPE_OK;
}

/* group_sets: gs's own env: names one of NeMo RL's or troupe's profiling
 * variables (otherwise its workers see the job's, checked already). */
static int group_sets(const Troupe__V1__GroupSpec *gs)
{
    static const char *const keys[] = {TR_JS_NRL_RANGE, TR_JS_NRL_PATTERNS, TR_JS_NSYS};

    for (size_t i = 0; gs != NULL && i < gs->n_env; i++) {
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
            if (gs->env[i] != NULL && gs->env[i]->key != NULL && strcmp(gs->env[i]->key, keys[k]) == 0) {
                return 1;
            }
        }
    }
    return 0;
}

int tr_js_nrl_env(const Troupe__V1__JobSpec *spec, const char **bad_key, size_t *bad_group, tr_err *err)
{
    int rv;

    *bad_group = SIZE_MAX;
    if ((rv = nrl_env(spec, NULL, bad_key, err)) != TROUPE_OK) {
        return rv;
    }
    for (size_t g = 0; g < spec->n_groups; g++) {
        const Troupe__V1__GroupSpec *gs = spec->groups[g];
        if (!group_sets(gs)) {
            continue;
        }
        if ((rv = nrl_env(spec, gs, bad_key, err)) != TROUPE_OK) {
            *bad_group = g;
            tr_err_prefix(err, "group %s", gs->name ? gs->name : "");
            return rv;
        }
    }
    return TROUPE_OK;
}
