# common.sh - helpers of the dp tests (sourced after ../lib.sh).

# dp_job NAME WORKERS CONFIG METRICS_PREFIX [MAX_RESTARTS]: writes $T/NAME.yaml,
# a job of one group "policy" running troupe-train with CONFIG, each rank
# appending its metrics to METRICS_PREFIX.<rank>.
dp_job() {
    cat >"$T/$1.yaml" <<YAML
name: $1
cluster: {nodes: [4]}
restart: {max_restarts: ${5:-0}}
groups:
  - name: policy
    workers: $2
    resources: {gpu: 1}
    command: [bash, -c, 'exec "\$0" --config "\$1" --set metrics.json="\$2.\$RANK"', $TRAIN_BIN, $3, $4]
YAML
}
