# refit_lib.bash - helpers of the refit tests (sourced after ../lib.sh).

# refit_job NAME POLICY GENERATION CONFIG [MAX_RESTARTS] [GEN_EXTRA]: writes
# $T/NAME.yaml, a job of a "policy" group of POLICY troupe-train ranks
# (metrics of rank R appended to $T/NAME.m.R) and a "generation" group of
# GENERATION troupe-train --role generation workers, both with CONFIG, and
# the refit communicator across them. GEN_EXTRA: more flags for the
# generation workers (e.g. "--set refit.every=5").
refit_job() {
    cat >"$T/$1.yaml" <<YAML
name: $1
cluster: {nodes: [4]}
restart: {max_restarts: ${5:-0}}
groups:
  - name: policy
    workers: $2
    resources: {gpu: 1}
    command: [bash, -c, 'exec "\$0" --config "\$1" --set metrics.json="\$2.\$RANK"', $TRAIN_BIN, $4, $T/$1.m]
  - name: generation
    workers: $3
    resources: {gpu: 1}
    command: [bash, -c, 'exec "\$0" --role generation --config "\$1" \$2', $TRAIN_BIN, $4, '${6:-}']
communicators:
  - {name: refit, groups: [policy, generation]}
YAML
}

# refits_at_least ID WORKER N: WORKER (e.g. generation-1) of job ID printed
# at least N refit lines.
refits_at_least() { [ "$(cli logs "$1" --worker "job$1-$2" 2>/dev/null | grep -c 'refit step=')" -ge "$3" ]; }
