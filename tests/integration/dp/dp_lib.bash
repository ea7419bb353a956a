# dp_lib.bash - helpers of the dp tests (sourced after ../lib.sh).

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

# elastic_train TRAIN [LINE]: the data ($T/data.tok) and $T/train.yaml of the
# elastic data-parallel tests: a 2 x 32 model on the CPU collective with
# dp.elastic on; TRAIN is the start of its train: mapping ("steps: 150,
# micro_batch: 2, accum_steps: 2"), LINE one more top-level line (checkpoint:).
elastic_train() {
    "$TRAIN_BIN" --make-data "$T/data.tok" --tokens 16384 >/dev/null
    cat >"$T/train.yaml" <<YAML
seed: 5
device: cpu
model: {layers: 2, width: 32, heads: 2, seq_len: 16}
train: {$1, warmup_steps: 3, lr: 3e-3, grad_clip: 0.5}
data: {path: $T/data.tok, val_fraction: 0}
eval: {every: 0}
${2:-}
dp: {timeout_ms: 20000, init_timeout_ms: 30000, elastic: true}
YAML
}
