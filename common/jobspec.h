/* jobspec.h - the job YAML: parse and validate into a troupe.v1.JobSpec.
 *
 * Schema (README "Job spec"):
 *
 *   name: grpo-demo
 *   cluster:                  # optional for a job of CPU-only groups
 *     nodes: [4, 8, 16]       # GPUs per virtual node
 *     labels: {gpu: H200}     # optional node label selector
 *   groups:
 *     - name: policy
 *       workers: 4
 *       resources: {gpu: 2, cpu: 4, memory: 64GB}   # per worker; cpu, memory optional
 *                             # gpu: 0 = a CPU-only worker: no GPU, cpu (default 1)
 *                             # of its node's CPU slots, outside the virtual cluster
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
 * errors. Thread-safe (no globals).
 *
 * Rules beyond the sketch above (enforced in common/jobspec*.c):
 * - name and group names: 1..63 of [A-Za-z0-9._-], not "." or ".."; group
 *   names unique. workers 1..4096, gpu 0..64, cluster.nodes entries 1..64;
 *   cluster.nodes is required when a group has gpu > 0.
 * - cpu: a number > 0 and <= 4096. memory: a plain integer is bytes; else a number and a
 *   unit, B, KB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB (powers of
 *   1024), case-insensitive, fractions allowed ("1.5GiB").
 * - strategy: matched case-insensitively, stored upper-case; default PACK.
 * - command: a list of strings, or one string split on whitespace with no
 *   shell quoting (a string holding a quote or backslash is refused: use the
 *   list form). The first argument may not be empty.
 * - env keys [A-Za-z_][A-Za-z0-9_]*; values are kept as written, null = "".
 * - workdir: stored absolute; relative to base_dir (itself made absolute
 *   against the cwd); "." and ".." removed lexically, symlinks not resolved,
 *   existence not checked. Absent = base_dir.
 * - restart.max_restarts 0..1000; timeout_s 0..2^32-1.
 * - profile: steps and workers both or neither (neither = no profiling).
 * - A null value ("key:" or "~") of an optional key reads as absent.
 * - Caps: 1 MiB of YAML, one document, 256 groups, 4096 nodes, 256 labels,
 *   256 args per command, 1024 env entries per job, 4096 bytes per string,
 *   4 MiB of strings after YAML aliases are expanded. An error found inside
 *   an aliased node is reported at its anchor (libyaml keeps no alias
 *   positions), with the key path of the use. */
#ifndef TR_JOBSPEC_H
#define TR_JOBSPEC_H

#include <stddef.h>

#include "err.h"
#include "troupe/v1/troupe.pb-c.h"

/* tr_jobspec_parse parses YAML text (name is used in messages and kept in
 * spec->source; base_dir resolves a relative workdir, NULL = cwd). On OK *out
 * is a heap message freed with tr_jobspec_free (it is built with malloc in
 * protobuf-c's unpacked layout, so troupe__v1__job_spec__free_unpacked(spec,
 * NULL) frees it too). On error *out is NULL and the code is
 * INVALID_ARGUMENT for bad input, RESOURCE_EXHAUSTED for out of memory. */
int tr_jobspec_parse(const char *text, size_t len, const char *name, const char *base_dir,
                     Troupe__V1__JobSpec **out, tr_err *err);

/* tr_jobspec_load reads and parses a file (base_dir = the file's directory).
 * A missing file is NOT_FOUND ("path: cannot open: No such file or
 * directory"), an unreadable one PERMISSION_DENIED. */
int tr_jobspec_load(const char *path, Troupe__V1__JobSpec **out, tr_err *err);

/* tr_jobspec_validate checks a spec that did not come from YAML (e.g. a
 * SubmitJob request): non-empty name and groups, workers >= 1, gpus <= 64,
 * known strategy, non-empty command, unique group names, cluster nodes >= 1 GPU
 * (and at least one when a group has GPUs),
 * valid profile range/globs. Messages name the group and field ("group
 * policy: workers must be >= 1"). Stricter than the YAML path where that one
 * normalizes: strategy must be upper-case, a non-empty workdir absolute.
 * NULL arrays, entries or strings are reported, never dereferenced. */
int tr_jobspec_validate(const Troupe__V1__JobSpec *spec, tr_err *err);

/* tr_jobspec_free frees a spec from tr_jobspec_parse/load; NULL is a no-op. */
void tr_jobspec_free(Troupe__V1__JobSpec *spec);

/* tr_profile_range_parse parses "A:B" (1 <= A < B) per NeMo RL's semantics:
 * steps 1-based, A inclusive, B exclusive, so "2:3" is step 2 only. Digits
 * only, no spaces or signs. On error *start and *stop are 0. */
int tr_profile_range_parse(const char *s, int *start, int *stop, tr_err *err);

/* tr_js_wants_nsys: the job asks for its profiled workers to run under nsys
 * (profile: {nsys: true}, or TROUPE_NSYS=1 in its env). */
int tr_js_wants_nsys(const Troupe__V1__JobSpec *spec);

#endif
