#!/usr/bin/env bash
# profile: {nsys: true}: troupe-node runs each matching worker under
# `nsys profile --capture-range=cudaProfilerApi ...`, waits for nsys to end,
# and the report it wrote is recorded and shown (troupe job, -o json). The
# GPU machines here have no nsys, so a stand-in `nsys` script on node na's
# PATH records its arguments, runs the command and writes the report where
# --output says (expanding %p) — what Nsight Systems does, minus the
# profiling. Node nb has no nsys: a job that lands there fails at launch
# saying so; with no node that has nsys, the job is refused at submit. Bad
# specs are refused with file:line:col.
source "$(dirname "$0")/../lib.sh"
: "${RT_WORKER:?}" "${FAKE_CUDART:?}"
mkdir -p "$T/bin"
cat >"$T/bin/nsys" <<'SH'
#!/usr/bin/env bash
# stand-in for Nsight Systems: nsys profile [--opt=value ...] CMD...
printf '%s\n' "$*" >>"$FAKE_NSYS_LOG"
[ "$1" = profile ] || { echo "fake nsys: only 'profile'" >&2; exit 2; }
shift
out=
while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do
    case $1 in --output=*) out=${1#--output=} ;; esac
    shift
done
"$@"; rc=$?
echo "fake report" >"${out//%p/$$}.nsys-rep"   # written after the app ended, as nsys does
exit $rc
SH
chmod +x "$T/bin/nsys"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50
PATH="$T/bin:$PATH" start_node na 4xH100:80GB --labels gpu=H100 --stop-grace-ms 1000
start_node nb 8xH200:141GB --labels gpu=H200 --stop-grace-ms 1000
wait_for 10 "both nodes" bash -c "[ \"\$('$CLI_BIN' -o json nodes | jq '[.nodes[] | select(.state == \"ALIVE\")] | length')\" = 2 ]"
cli -o json nodes >"$T/nodes.json"
jq -e '[.nodes[] | select(.name == "na")][0].nsys == true and [.nodes[] | select(.name == "nb")][0].nsys == false' \
    "$T/nodes.json" >/dev/null || fail "nodes: $(jq -c '[.nodes[] | {name, nsys}]' "$T/nodes.json")"
pass "troupe nodes: na has nsys, nb has not"

job() { # job NAME GPU-LABEL
    cat <<YAML
name: $1
cluster: {nodes: [4], labels: {gpu: $2}}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [$RT_WORKER, run]}
profile: {steps: "2:4", workers: "*policy-0", nsys: true, nsys_options: "--stats=false --wait=all"}
env: {RT_STEPS: "5", RT_STEP_MS: "20", TROUPE_CUDART: "$FAKE_CUDART", FAKE_NSYS_LOG: "$T/nsys.args"}
YAML
}
job prof H100 >"$T/a.yaml"
a=$(submit "$T/a.yaml")
wait_for 30 "job $a to succeed" is_job_state "$a" SUCCEEDED
[ "$(wc -l <"$T/nsys.args")" = 1 ] || fail "expected nsys around policy-0 only: $(cat "$T/nsys.args")"
logs=$(cd "$T/node-na/logs" && pwd -P)
want="profile --trace=cuda,nvtx --sample=none --capture-range=cudaProfilerApi --capture-range-end=stop --cuda-graph-trace=node --force-overwrite=true --stats=false --wait=all --output=$logs/job$a-policy-0_2-4_%p $RT_WORKER run"
[ "$(cat "$T/nsys.args")" = "$want" ] || fail "nsys arguments: $(cat "$T/nsys.args") want $want"
pass "policy-0 ran as: nsys $(cat "$T/nsys.args")"
logs_grep "$a" "\[job$a-policy-0\] fake_cudart: cudaProfilerStart" || fail "the wrapped worker did not run its steps"
cli -o json job "$a" >"$T/a.json"
report=$(jq -r --arg w "job$a-policy-0" '.workers[] | select(.name == $w) | .nsys_report' "$T/a.json")
[[ "$report" =~ ^$logs/job$a-policy-0_2-4_[0-9]+\.nsys-rep$ ]] || fail "recorded report: '$report'"
[ "$(cat "$report")" = "fake report" ] || fail "report file $report: $(cat "$report" 2>&1)"
[ "$(jq -r --arg w "job$a-policy-1" '.workers[] | select(.name == $w) | .nsys_report' "$T/a.json")" = "" ] ||
    fail "policy-1 has a report: $(jq -c .workers "$T/a.json")"
cli job "$a" | grep_all "^nsys      job$a-policy-0: $report (on node na)$" || fail "troupe job: $(cli job "$a")"
pass "report recorded and shown: $report"

# A node without nsys: the job's matching worker fails at launch, saying why.
job noprof H200 >"$T/b.yaml"
b=$(submit "$T/b.yaml")
wait_for 30 "job $b to fail" is_job_state "$b" FAILED
reason=$(cli -o json job "$b" | jq -r .reason)
grep -q "worker job$b-policy-0 on node nb failed to start: profile: {nsys: true} but nsys is not on the PATH of node nb" \
    <<<"$reason" || fail "job $b reason: $reason"
pass "launch refused on nb: $reason"

# Bad specs, refused at submit with file:line:col.
refused() { # refused YAML-LINE TEXT
    sed "s|^profile: .*|$1|" "$T/a.yaml" >"$T/bad.yaml"
    local out; out=$(cli submit --no-wait "$T/bad.yaml" 2>&1) && fail "accepted: $1"
    grep -qF "$2" <<<"$out" || fail "for '$1': $out"
    pass "refused: $out"
}
refused 'profile: {steps: "2:4", workers: "*", nsys: yes}' "bad.yaml:5:45: profile.nsys: true or false, not 'yes'"
refused 'profile: {nsys: true}' "profile.nsys: needs steps and workers"
refused 'profile: {steps: "2:4", workers: "*", nsys_options: "--stats=true"}' "profile.nsys_options: goes with nsys: true"
sed -e 's|^profile: .*||' -e 's|FAKE_NSYS_LOG:|TROUPE_NSYS: "1", FAKE_NSYS_LOG:|' "$T/a.yaml" >"$T/bad.yaml"
out=$(cli submit --no-wait "$T/bad.yaml" 2>&1) && fail "TROUPE_NSYS=1 alone accepted"
grep -q "TROUPE_NSYS=1 needs NRL_NSYS_PROFILE_STEP_RANGE and NRL_NSYS_WORKER_PATTERNS" <<<"$out" || fail "TROUPE_NSYS=1: $out"
pass "refused: $out"
sed -e 's|FAKE_NSYS_LOG:|TROUPE_NSYS: "2", FAKE_NSYS_LOG:|' "$T/a.yaml" >"$T/bad.yaml"
out=$(cli submit --no-wait "$T/bad.yaml" 2>&1) && fail "TROUPE_NSYS=2 accepted"
grep -q "env: TROUPE_NSYS is 0 or 1, not '2'" <<<"$out" || fail "TROUPE_NSYS=2: $out"
pass "refused: $out"

# No node with nsys left (na's agent stops): refused at submit, not at launch.
kill -TERM "$NODE_PID_na"
wait_for 20 "na to leave" bash -c "'$CLI_BIN' -o json nodes | jq -e '[.nodes[] | select(.name == \"na\")][0].state != \"ALIVE\"'"
job late H200 >"$T/c.yaml"
out=$(cli submit --no-wait "$T/c.yaml" 2>&1) && fail "submitted with no nsys anywhere: $out"
grep -q "FAILED_PRECONDITION: profile: {nsys: true} (or TROUPE_NSYS=1) but no node has nsys on its PATH (nodes: nb)" \
    <<<"$out" || fail "submit refusal: $out"
pass "submit refused: $out"
