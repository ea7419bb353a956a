#!/usr/bin/env bash
# With credentials on, a worker's credential (derived for its own job) cannot
# reach another job's store even when the call names a real worker of that
# job: PERMISSION_DENIED from the credential, not only from the name.
source "$(dirname "$0")/../lib.sh"
: "${ST_WORKER:?}"
umask 077
printf '%s\n' "adm-$RANDOM$RANDOM" >"$T/admin.tok"
unset TROUPE_TOKEN
"$HEAD_BIN" --listen "$HEAD" --state-dir "$T/state" --token-file "$T/admin.tok" --heartbeat-ms 100 \
    --dead-after 50 >>"$T/head.log" 2>&1 & # liveness is not under test: a 3.75 s lease, not 400 ms
PIDS+=($!)
wait_for 10 "head with a token file" "$CLI_BIN" --token-file "$T/admin.tok" status
admin() { "$CLI_BIN" --token-file "$T/admin.tok" "$@"; }
admin token create --scope node >"$T/node.tok"
"$NODE_BIN" --head "$HEAD" --name n1 --fake-gpus 8 --state-dir "$T/n1" --token-file "$T/node.tok" \
    --stop-grace-ms 500 >>"$T/node-n1.log" 2>&1 &
PIDS+=($!)
wait_for 10 "n1 ALIVE" bash -c "'$CLI_BIN' --token-file '$T/admin.tok' -o json nodes | jq -e '.count == 1'"
cat >"$T/hold.yaml" <<YAML
name: hold
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 1, resources: {gpu: 1}, command: [sleep, "60"]}
YAML
other=$(admin submit --no-wait "$T/hold.yaml")
wait_for 15 "job $other running" bash -c "[ \"\$('$CLI_BIN' --token-file '$T/admin.tok' -o json job $other | jq -r .state)\" = RUNNING ]"
cat >"$T/foreign.yaml" <<YAML
name: foreign
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 1, resources: {gpu: 1}, command: [$ST_WORKER, foreign]}
env: {ST_OTHER_JOB: "$other", ST_OTHER_WORKER: "job$other-policy-0"}
YAML
timeout 60 "$CLI_BIN" --token-file "$T/admin.tok" submit "$T/foreign.yaml" >"$T/out" 2>"$T/err" || fail "job failed: $(cat "$T/err")"
line=$(admin logs "$(head -1 "$T/out")" | grep "st: foreign")
echo "$line" | grep -q "ERR PERMISSION_DENIED .*job $other" || fail "another job's store with a worker credential: $line"
echo "$line" | grep -q "not part of job" && fail "refused by the name, not the credential: $line"
pass "a worker credential naming a real worker of another job is refused: $line"
admin stop "$other" >/dev/null
