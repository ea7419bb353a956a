# hlib.bash - helpers for the HTTP tests (sourced after ../lib.sh).
: "${MX_WORKER:?}"
HPORT=$(free_port)
HTTP=http://127.0.0.1:$HPORT

# http_code PATH [curl args...]: the status code of one request (000: no answer).
http_code() {
    local path=$1; shift
    curl -s -o /dev/null -m 10 -w '%{http_code}' "$@" "$HTTP$path" || true
}
# expect_code WHAT CODE PATH [curl args...]
expect_code() {
    local what=$1 want=$2 path=$3 got; shift 3
    got=$(http_code "$path" "$@")
    [ "$got" = "$want" ] || fail "$what: GET $path answered $got, expected $want"
}
healthy() { [ "$(curl -s -m 2 "$HTTP/healthz")" = ok ]; }

# submit_reporter NAME WORKERS: a job whose workers report the standard step
# figures loss, tokens_per_s, mfu, gpu_mem_in_use_bytes and step_ms every 5 ms
# for a long time; prints its id.
submit_reporter() {
    cat >"$T/$1.yaml" <<YAML
name: $1
cluster: {nodes: [4]}
groups: [{name: policy, workers: $2, resources: {gpu: 1}, command: [$MX_WORKER]}]
env: {MX_POINTS: "2000000", MX_EVERY_US: "5000", MX_NAMES: "loss,tokens_per_s,mfu,gpu_mem_in_use_bytes,step_ms"}
YAML
    submit "$T/$1.yaml"
}
