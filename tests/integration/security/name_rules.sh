#!/usr/bin/env bash
# The head enforces the CLI's name rules itself (common/names.h and the job
# spec's): a raw client that skips every client-side check still cannot store
# or log a forged node name, label, address, GPU model, job or group name. Each
# is refused INVALID_ARGUMENT naming the rule, with one log line (escaped),
# and nothing is stored. The agent refuses the same at start (exit 2).
source "$(dirname "$0")/../lib.sh"
RAW=${RAWCALL:?}
start_head

FORGED='2026-01-01T00:00:00.000Z troupe-head[1] notice: FORGED'
new_log() { tail -c +$(($1 + 1)) "$T/head.log"; }
# expect_refused RULE LOG MODE ARGS...: INVALID_ARGUMENT naming RULE, one
# warning containing LOG, and no line of the head's log starting with FORGED.
expect_refused() {
    local rule=$1 log=$2 out mark n; shift 2
    mark=$(head_log_mark)
    out=$("$RAW" "$HEAD" "$@") || fail "$1: rawcall: $out"
    grep -q "^code=[0-9]* (INVALID_ARGUMENT) " <<<"$out" || fail "$1 $2: expected INVALID_ARGUMENT, got: $out"
    grep -qF -- "$rule" <<<"$out" || fail "$1: the reply does not name the rule '$rule': $out"
    n=$(new_log "$mark" | grep -c " warning: " || true)
    [ "$n" = 1 ] && new_log "$mark" | grep " warning: " | grep_all -F -- "$log" ||
        fail "$1: expected one warning with '$log', got $n: $(new_log "$mark")"
    ! grep -q "^$FORGED" "$T/head.log" || fail "$1: a forged line reached the head's log"
    pass "$1 refused: ${out#*message=}"
}
NODE_RULE="1 to 253 of letters, digits, '.', '_' or '-'"
JOB_RULE="1 to 63 of letters, digits, '.', '_' or '-'"
expect_refused "$NODE_RULE" "refused registration: register: node name 'evil\\n$FORGED' is not valid" \
    register-name $'evil\n'"$FORGED"
expect_refused "$NODE_RULE" "node name '../../etc' is not valid" register-name ../../etc
expect_refused "letters, digits, '.', '_', '-', '/' or ':'" "label gpu: value 'H200\\nx' is not valid" \
    register-label gpu $'H200\nx'
expect_refused "1 to 253 of letters, digits, '.', '_', '-' or '/'" "label key 'bad key' is not valid" \
    register-label 'bad key' v
expect_refused "letters, digits, '.', '_', '-', ':', '[' or ']'" "address '1.2.3.4;touch x' is not valid" \
    register-address '1.2.3.4;touch x'
expect_refused "printable ASCII" "register: GPU model is not valid" register-gpu-model $'H200\e[31m red'
expect_refused "$JOB_RULE" "job name 'job\\n$FORGED' is not valid" submit-name $'job\n'"$FORGED"
expect_refused "$JOB_RULE" "name 'g/../x' is not valid" submit-group g/../x
expect_refused "letters, digits, '.', '_', '-', '/' or ':'" "cluster.labels: label zone: value 'a\\nb' is not valid" \
    submit-label zone $'a\nb'

# Nothing of it was stored; valid strings still are.
[ "$(cli -o json nodes | jq '.nodes | length')" = 0 ] || fail "a refused node was stored: $(cli -o json nodes)"
[ "$(cli -o json jobs --all | jq '.jobs | length')" = 0 ] || fail "a refused job was stored: $(cli -o json jobs --all)"
out=$("$RAW" "$HEAD" register-label nvidia.com/gpu.product NVIDIA-H200)
grep -q "(OK)" <<<"$out" || fail "a valid label refused: $out"
cli -o json nodes | jq -e '.nodes[0].labels["nvidia.com/gpu.product"] == "NVIDIA-H200"' >/dev/null ||
    fail "valid label not stored: $(cli -o json nodes)"
pass "nothing refused was stored; a valid node with a prefixed label registers"

# The agent says the same before it sends anything.
# (--address is checked as a host name when the settings load: "character ';' is not allowed".)
for bad in "--name a/b" "--labels gpu=H 100"; do
    set +e
    out=$(timeout 10 "$NODE_BIN" --head "$HEAD" --fake-gpus 1 --state-dir "$T/agent" ${bad%% *} "${bad#* }" 2>&1); rc=$?
    set -e
    [ $rc = 2 ] && grep -q "is not valid (" <<<"$out" || fail "agent $bad: rc=$rc $out"
done
pass "the agent refuses a bad --name or --labels at start (exit 2, naming the rule)"
