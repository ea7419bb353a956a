#!/usr/bin/env bash
# A worker exiting 3 fails its job (reason names worker and code); max_restarts
# restarts the whole group first.
source "$(dirname "$0")/../lib.sh"
start_cluster
cat >"$T/fail.yaml" <<YAML
name: failing
cluster: {nodes: [8]}
groups:
  - {name: ok, workers: 2, resources: {gpu: 1}, command: [sleep, "30"]}
  - {name: bad, workers: 2, resources: {gpu: 1}, command: [sh, -c, 'if [ \$RANK = 1 ]; then exit 3; fi; sleep 30']}
YAML
set +e; timeout 60 "$CLI_BIN" submit "$T/fail.yaml" >"$T/out" 2>"$T/err"; rc=$?; set -e
[ $rc = 1 ] || fail "submit should exit 1 on FAILED, got $rc"
id=$(head -1 "$T/out")
j=$(cli -o json job "$id")
[ "$(jqr .state <<<"$j")" = FAILED ] || fail "state $(jqr .state <<<"$j")"
jqr .reason <<<"$j" | grep_all "worker job$id-bad-1 on node .* exited with code 3" || fail "reason: $(jqr .reason <<<"$j")"
pass "worker exit 3 -> FAILED: $(jqr .reason <<<"$j")"
wait_for 10 "all workers of the failed job gone" bash -c "'$CLI_BIN' -o json job $id | jq -e '[.workers[] | select(.state==\"RUNNING\" or .state==\"PENDING\")] | length == 0'"
pass "the other workers were stopped"

sed -e 's/name: failing/name: restarting/' "$T/fail.yaml" >"$T/restart.yaml"
echo "restart: {max_restarts: 2}" >>"$T/restart.yaml"
set +e; timeout 60 "$CLI_BIN" submit "$T/restart.yaml" >"$T/out2" 2>"$T/err2"; rc=$?; set -e
id2=$(head -1 "$T/out2")
j=$(cli -o json job "$id2")
[ $rc = 1 ] && [ "$(jqr .restarts <<<"$j")" = 2 ] || fail "expected 2 restarts then FAILED: rc=$rc $(jqr .restarts <<<"$j")"
grep -q "restarting group bad (restart 1 of 2)" "$T/err2" || fail "restart not shown by troupe submit"
pass "max_restarts 2: group restarted twice, then FAILED"

cat >"$T/nocmd.yaml" <<YAML
name: nocmd
cluster: {nodes: [4]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [no-such-command-xyz]}]
YAML
set +e; timeout 30 "$CLI_BIN" submit "$T/nocmd.yaml" >"$T/out3" 2>&1; rc=$?; set -e
id3=$(head -1 "$T/out3")
[ $rc = 1 ] && cli -o json job "$id3" | jqr .reason | grep_all "failed to start.*no-such-command-xyz" || fail "missing command: $(cat "$T/out3")"
pass "missing command -> FAILED with 'failed to start'"
