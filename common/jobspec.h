/* jobspec.h - the job YAML: parse and validate into a troupe.v1.JobSpec.
 *
 * Schema (README "Job spec"):
 *
 *   name: grpo-demo
 *   cluster:
 *     nodes: [4, 8, 16]       # GPUs per virtual node
 *     labels: {gpu: H200}     # optional node label selector
 *   groups:
 *     - name: policy
 *       workers: 4
 *       resources: {gpu: 2, cpu: 4, memory: 64GB}   # per worker; cpu, memory optional
 *       strategy: PACK        # PACK | SPREAD | STRICT_PACK | STRICT_SPREAD (default PACK)
 *       command: [troupe-train, --config, train.yaml]
 *       env: {KEY: value}
 *   env: {KEY: value}         # optional, every worker
 *   workdir: .                # optional; relative to the file's directory
 *   restart: {max_restarts: 0}
 *   timeout_s: 3600           # optional, 0 = none
 *   profile: {steps: "2:3", workers: "*policy*"}    # optional
 *
 * Errors read "file:line:col: message" and name the key; unknown keys are
 * errors. Thread-safe (no globals). */
#ifndef TR_JOBSPEC_H
#define TR_JOBSPEC_H

#include <stddef.h>

#include "err.h"
#include "troupe/v1/troupe.pb-c.h"

/* tr_jobspec_parse parses YAML text (name is used in messages and kept in
 * spec->source; base_dir resolves a relative workdir, NULL = cwd). On OK *out
 * is a heap message freed with tr_jobspec_free. On error *out is NULL. */
int tr_jobspec_parse(const char *text, size_t len, const char *name, const char *base_dir,
                     Troupe__V1__JobSpec **out, tr_err *err);

/* tr_jobspec_load reads and parses a file (base_dir = the file's directory). */
int tr_jobspec_load(const char *path, Troupe__V1__JobSpec **out, tr_err *err);

/* tr_jobspec_validate checks a spec that did not come from YAML (e.g. a
 * SubmitJob request): non-empty name and groups, workers >= 1, gpus >= 1,
 * known strategy, non-empty command, unique group names, cluster nodes >= 1 GPU,
 * valid profile range/globs. Messages name the group and field. */
int tr_jobspec_validate(const Troupe__V1__JobSpec *spec, tr_err *err);

/* tr_jobspec_free frees a spec from tr_jobspec_parse/load; NULL is a no-op. */
void tr_jobspec_free(Troupe__V1__JobSpec *spec);

/* tr_profile_range_parse parses "A:B" (1 <= A < B) per NeMo RL's semantics. */
int tr_profile_range_parse(const char *s, int *start, int *stop, tr_err *err);

#endif
