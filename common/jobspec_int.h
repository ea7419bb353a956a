/* jobspec_int.h - internals shared by jobspec.c (the YAML walk),
 * jobspec_rules.c (value rules), jobspec_validate.c and jobspec_load.c. Not API.
 *
 * The rules live in one place so that a spec read from YAML and a spec that
 * arrives in a SubmitJob request are held to the same limits. Rule functions
 * write messages without a position; the YAML walk prefixes
 * "file:line:col: key.path: ". */
#ifndef TR_JOBSPEC_INT_H
#define TR_JOBSPEC_INT_H

#include <stddef.h>
#include <stdint.h>

#include "jobspec.h"

#define TR_JS_NAME_MAX 63        /* job and group names */
#define TR_JS_MAX_NODES 4096     /* cluster.nodes entries */
#define TR_JS_MAX_NODE_GPUS 64   /* GPUs of one virtual node */
#define TR_JS_MAX_LABELS 256     /* cluster.labels entries */
#define TR_JS_MAX_GROUPS 256     /* groups of a job */
#define TR_JS_MAX_WORKERS 4096   /* workers of one group */
#define TR_JS_MAX_GPUS 64        /* GPUs of one worker (0 = a CPU-only worker) */
#define TR_JS_MAX_CPUS 4096      /* CPUs of one worker (the scheduler's TR_SCHED_MAX_WORKER_CPUS) */
#define TR_JS_MAX_ARGS 256       /* command arguments of one group */
#define TR_JS_MAX_ENV 1024       /* env entries of a job: top level and every group together */
#define TR_JS_MAX_RESTARTS 1000  /* restart.max_restarts */
#define TR_JS_MAX_HEALTH_WINDOW 512 /* health.*_window (server/health_judge.h: TR_HJ_MAX_WINDOW) */
#define TR_JS_MAX_STRING 4096    /* bytes of any one string (a path, an argument, a value) */
#define TR_JS_MAX_TEXT (1 << 20) /* bytes of YAML text */
/* Bytes of strings copied into one spec. YAML aliases let a small file name
 * the same large list many times; this bounds what the expansion can cost. */
#define TR_JS_MAX_BYTES (4 << 20)

/* tr_js_name_ok: 1 if s is a valid job or group name: 1..63 of [A-Za-z0-9._-],
 * and not "." or ".." (names end up in log and state paths). */
int tr_js_name_ok(const char *s);

/* tr_js_env_name_ok: 1 if s is [A-Za-z_][A-Za-z0-9_]*. */
int tr_js_env_name_ok(const char *s);

/* tr_js_strategy returns the canonical upper-case spelling of a placement
 * strategy matched case-insensitively, or NULL when unknown. Static storage. */
const char *tr_js_strategy(const char *s);

/* TR_JS_ENV_TORCHRUN is the one env_style a group may name (GroupSpec). */
#define TR_JS_ENV_TORCHRUN "torchrun"

/* TR_JS_STRATEGIES is the list that error messages offer. */
#define TR_JS_STRATEGIES "PACK, SPREAD, STRICT_PACK or STRICT_SPREAD"

/* tr_js_memory_parse reads a byte count: a plain integer (bytes) or a number
 * with a unit, see jobspec_rules.c. *out is 0 on error. */
int tr_js_memory_parse(const char *s, uint64_t *out, tr_err *err);

/* tr_js_split_command splits a command string on whitespace into a malloc'd
 * argv of malloc'd strings (*argc entries; free with tr_js_free_argv). */
int tr_js_split_command(const char *s, char ***argv, size_t *argc, tr_err *err);

/* tr_js_free_argv frees what tr_js_split_command made; NULL is a no-op. */
void tr_js_free_argv(char **argv, size_t argc);

/* tr_js_resolve_dir makes dir absolute: a relative dir is joined to base
 * (itself made absolute against the cwd; NULL = the cwd), then "." and ".."
 * are removed lexically. *out is malloc'd. */
int tr_js_resolve_dir(const char *base, const char *dir, char **out, tr_err *err);

/* Worker patterns are at most this many bytes (printable ASCII). */
#define TR_JS_GLOBS_MAX 1024

/* tr_js_globs_check checks profile worker patterns: comma-separated fnmatch
 * globs, at least one non-empty, every '[' closed. */
int tr_js_globs_check(const char *s, tr_err *err);

/* Worker runtime parts of a spec (jobspec_runtime.c). */
#define TR_JS_NRL_RANGE "NRL_NSYS_PROFILE_STEP_RANGE"
#define TR_JS_NRL_PATTERNS "NRL_NSYS_WORKER_PATTERNS"
#define TR_JS_NSYS "TROUPE_NSYS" /* 1: run the profiled workers under nsys (as profile: {nsys: true}) */

/* tr_js_comm_check checks communicators[i]: a valid name unlike any group's
 * or earlier communicator's, 1..TR_JS_MAX_GROUPS existing groups, none twice.
 * *bad_group is the index of the offending group entry (SIZE_MAX when the
 * name or the list itself is at fault). */
int tr_js_comm_check(const Troupe__V1__JobSpec *spec, size_t i, size_t *bad_group, tr_err *err);

/* tr_js_nrl_env checks NeMo RL's profiling variables (and TROUPE_NSYS) as
 * each worker sees them: the job's env:, then every group whose own env: sets
 * one of them, over the job's (a group's entry wins for its workers). Both
 * or neither, a valid range and patterns, and no disagreement with profile:.
 * *bad_key names the variable at fault (NULL when none is); *bad_group is
 * the index of the group at fault (SIZE_MAX: the job's env). */
int tr_js_nrl_env(const Troupe__V1__JobSpec *spec, const char **bad_key, size_t *bad_group, tr_err *err);

/* tr_js_duration_parse reads "30s", "500ms", "2m", "1h" or a plain number of
 * seconds ("2.5") into *ms; at most 7 days (jobspec_health.c). */
int tr_js_duration_parse(const char *s, int64_t *ms, tr_err *err);

/* tr_js_elastic_check checks a group's elastic: (none: OK): 1 <=
 * min_workers <= max_workers <= workers. *bad_key names the key at fault
 * ("min_workers" or "max_workers"). */
int tr_js_elastic_check(const Troupe__V1__GroupSpec *g, const char **bad_key, tr_err *err);

/* tr_js_health_check checks a job's health settings (NULL: none); 0 is "the
 * head's default" for each. *bad_key names the key at fault. */
int tr_js_health_check(const Troupe__V1__HealthSpec *h, const char **bad_key, tr_err *err);

#endif
