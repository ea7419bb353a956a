#!/usr/bin/env bash
# troupe.Client's run-time profiling and trace: a running job of two Python
# workers is asked (Client.profile) to profile the next 3 steps of *policy-1
# only; exactly 3 consecutive steps of that worker are profiled and in the
# trace (Client.trace), Client.profile_off turns it off (the job's setting
# says so), and Client.chrome_trace is the document `troupe trace` writes.
# Bad requests raise InvalidArgument, a request for an ended job
# FailedPrecondition, an unknown job's trace NotFound.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/py_lib.bash"
D=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH=$TROUPE_PY_SRC
start_cluster
cat >"$T/job.yaml" <<YAML
name: pyprof
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [$PY_CMD, $D/py_profile_worker.py]}
env: {$PY_JOB_ENV, PYP_DONE: $T/done}
YAML
export PYP_DONE=$T/done
id=$(submit "$T/job.yaml")
pyrun "$PY" "$D/py_profile_client.py" "$id" "$T/chrome.json" >"$T/client.json" 2>"$T/client.err" ||
    fail "py_profile_client: $(cat "$T/client.err" "$T/client.json"; cli logs "$id")"
field() { jq -c -s --arg k "$1" 'map(select(has($k))) | .[0]' "$T/client.json"; }
cli logs "$id" >"$T/logs"
[ "$(field job | jq -r .job)" = SUCCEEDED ] || fail "job: $(cat "$T/client.json" "$T/logs")"
jq -e '.set == 1 and .profile.version == 1 and .profile.next == 3 and .profile.workers == "*policy-1" and (.profile.off | not)' <<<"$(field set)" >/dev/null ||
    fail "set: $(field set)"
jq -e '.off == 2 and .profile.version == 2 and .profile.off' <<<"$(field off)" >/dev/null || fail "off: $(field off)"
cli -o json job "$id" | jq -e '.profile.version == 2 and .profile.off' >/dev/null || fail "CLI's profile: $(cli -o json job "$id" | jq -c .profile)"
pass "Client.profile(next=3, workers='*policy-1') -> version 1, profile_off -> version 2, as the CLI shows"
grep -q "job$id-policy-0\] pyp: .* profiled" "$T/logs" && fail "policy-0 profiled: $(grep pyp: "$T/logs")"
mapfile -t prof < <(grep -o "pyp: job$id-policy-1 profiled step [0-9]*" "$T/logs" | awk '{print $NF}')
[ "${#prof[@]}" = 3 ] && [ "${prof[1]}" = $((prof[0] + 1)) ] && [ "${prof[2]}" = $((prof[0] + 2)) ] ||
    fail "profiled steps of policy-1: ${prof[*]}: $(grep pyp: "$T/logs")"
want=$(jq -c -n --argjson a "${prof[0]}" '[[1,$a],[1,$a+1],[1,$a+2]]')
tr=$(field trace)
[ "$(jq -c .trace.steps <<<"$tr")" = "$want" ] || fail "trace steps: $tr, want $want"
jq -e '.trace.names | index("work") and index("step '"${prof[0]}"'")' <<<"$tr" >/dev/null || fail "trace names: $tr"
jq -e '.trace.workers == ["job'"$id"'-policy-1"]' <<<"$tr" >/dev/null || fail "trace workers: $tr"
pass "exactly steps ${prof[*]} of policy-1 profiled, and Client.trace holds them: $(jq -c .trace.names <<<"$tr")"
cli trace "$id" --output "$T/cli.json" >/dev/null || fail "troupe trace failed"
norm() { jq -S -c '.traceEvents |= (map(tojson) | sort) ' "$1"; }
[ "$(norm "$T/chrome.json")" = "$(norm "$T/cli.json")" ] || fail "chrome_trace differs from troupe trace: $(norm "$T/chrome.json") vs $(norm "$T/cli.json")"
pass "Client.chrome_trace equals troupe trace's document ($(jq '.traceEvents | length' "$T/cli.json") events)"
jq -s -e 'map(select(has("invalid"))) | length == 2' "$T/client.json" >/dev/null || fail "invalid: $(cat "$T/client.json")"
jq -e '.message | test("5:3")' <<<"$(field invalid)" >/dev/null || fail "bad range: $(field invalid)"
[ "$(field ended | jq -r .ended)" != null ] && [ "$(field not_found | jq -r .not_found)" != null ] || fail "errors: $(cat "$T/client.json")"
pass "errors: $(jq -r -s 'map(.message // .ended // .not_found // empty) | join(" / ")' "$T/client.json")"
