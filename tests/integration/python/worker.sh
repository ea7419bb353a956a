#!/usr/bin/env bash
# The Python package against a real head: two Python workers (troupe.Worker)
# meet through the store, a barrier and an all-gather, report steps and
# metrics; store errors arrive as TroupeError subclasses with the head's
# message. troupe.Client then reads the job, jobs, nodes, metrics and logs,
# and its answers equal the CLI's; a dict submits as a job spec.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/py_lib.bash"
D=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH=$TROUPE_PY_SRC
start_cluster
cat >"$T/job.yaml" <<YAML
name: py
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [$PY_CMD, $D/py_worker.py]}
env: {$PY_JOB_ENV}
YAML
id=$(submit "$T/job.yaml")
# field NAME: the value of NAME in py_client's JSON lines (one object a line).
field() { jq -c -s --arg k "$1" 'map(select(has($k))) | .[0][$k]' "$T/client.json"; }
pyrun "$PY" "$D/py_client.py" "$id" >"$T/client.json" 2>"$T/client.err" || fail "py_client: $(cat "$T/client.err"; cli logs "$id")"
cli logs "$id" >"$T/logs"
[ "$(field job | jq -r .state)" = SUCCEEDED ] || fail "job: $(cat "$T/client.json" "$T/logs")"
for r in 0 1; do
    grep -q "py: rank $r get greeting = hi from 0" "$T/logs" || fail "rank $r get: $(cat "$T/logs")"
    grep -q "py: rank $r arrived = b'2'" "$T/logs" || fail "rank $r add/wait: $(cat "$T/logs")"
    grep -q "py: rank $r allgather = job$id-policy-0,job$id-policy-1" "$T/logs" || fail "rank $r allgather: $(cat "$T/logs")"
done
pass "two Python workers: get answered by rank 0's set, add from both, wait, barrier, all-gather in rank order"
grep -q "py: cas = b'v1' b'v1'" "$T/logs" && grep -q "py: check = True False" "$T/logs" &&
    grep -q "py: delete = True False" "$T/logs" || fail "cas/check/delete: $(grep 'py: [a-z]* =' "$T/logs")"
grep -q "py: get raised DeadlineExceeded code 4 isinstance-TroupeError True: store of policy (epoch 0): waited 1[0-9][0-9][0-9] ms for key 'never-set'" "$T/logs" ||
    fail "get timeout: $(grep 'get raised' "$T/logs")"
grep -q "py: add raised InvalidArgument code 3 .*store key 'greeting' holds 9 bytes that are not a decimal integer" "$T/logs" ||
    fail "add error: $(grep 'add raised' "$T/logs")"
grep -q "py: metric raised InvalidArgument code 3" "$T/logs" || fail "metric error: $(grep 'metric raised' "$T/logs")"
pass "errors are TroupeError subclasses with the code and the head's message: $(grep -o 'get raised.*' "$T/logs")"
# The client's answers against the CLI's.
[ "$(field workers)" = "$(cli -o json job "$id" | jq -c '[.workers[].name] | sort')" ] ||
    fail "workers differ: $(cat "$T/client.json")"
[ "$(field nodes)" = "$(cli -o json nodes | jq -c '[.nodes[] | [.name, (.gpus | length), .cpus, .cpus_free]] | sort')" ] ||
    fail "nodes differ: $(cat "$T/client.json")"
want=$(cli -o json metrics "$id" --name py_metric | jq -c '[.points[] | [.worker, .step, .value]] | sort')
[ "$(field py_metric)" = "$want" ] || fail "metrics differ from the CLI's $want: $(cat "$T/client.json")"
[ "$(field py_metric | jq length)" = 6 ] || fail "metrics: $(cat "$T/client.json")"
[ "$(field log_lines_with_done)" = 2 ] || fail "logs: $(cat "$T/client.json")"
field jobs | jq -e --argjson id "$id" 'any(. == $id)' >/dev/null || fail "jobs: $(cat "$T/client.json")"
pass "troupe.Client: job, jobs, nodes, metrics (6 points) and logs agree with the CLI"
field not_found | grep -q "no job 999999" || fail "NotFound: $(cat "$T/client.json")"
[ "$(field dict_job)" = '"SUCCEEDED"' ] || fail "dict submit: $(cat "$T/client.json")"
field invalid | grep -q "groups: expected 1 to 256 groups, got 0" || fail "bad spec: $(cat "$T/client.json")"
pass "NotFound for an unknown job; a dict submits as a spec; a bad one is InvalidArgument: $(field invalid)"
