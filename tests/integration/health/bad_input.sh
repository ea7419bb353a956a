#!/usr/bin/env bash
# Bad health settings are refused with a clear error and a non-zero status:
# in a job spec (file:line:col, nothing submitted) and on the head (exit 2);
# --check-config shows the defaults.
source "$(dirname "$0")/../lib.sh"
: "${HL_WORKER:?}"
out=$("$HEAD_BIN" --state-dir "$T/x" --health-on-stall explode 2>&1) && fail "head accepted on_stall explode: $out"
[[ "$out" == *"health_on_stall 'explode': use warn or fail"* ]] || fail "head: $out"
rc=0; out=$("$HEAD_BIN" --state-dir "$T/x" --health-straggler-factor 1 2>&1) || rc=$?
[ "$rc" = 2 ] && [[ "$out" == *health_straggler_factor* ]] || fail "head straggler factor 1: rc=$rc $out"
"$HEAD_BIN" --state-dir "$T/x" --check-config >"$T/cfg" || fail "--check-config"
for kv in "health_stall_min_ms: 60000" "health_stall_factor: 10" "health_on_stall: \"warn\"" \
    "health_straggler_factor: 1.3" "health_straggler_window: 10" "health_memory_window: 20" \
    "health_memory_slope_mb: 1" "health_memory_near: 0.95" "health_tick_ms: 500"; do
    grep -q "^$kv\( \|\$\)" "$T/cfg" || fail "--check-config has no '$kv': $(grep health "$T/cfg")"
done
pass "the head refuses a bad health_on_stall / straggler factor (exit 2) and shows the defaults"

start_cluster
try() { # try YAML-HEALTH-LINE EXPECTED
    printf 'name: bad\ncluster: {nodes: [4]}\ngroups: [{name: g, workers: 1, resources: {gpu: 1}, command: [%s]}]\n%s\n' \
        "$HL_WORKER" "$1" >"$T/bad.yaml"
    local rc=0 out
    out=$(cli submit --no-wait "$T/bad.yaml" 2>&1) || rc=$?
    [ "$rc" != 0 ] || fail "accepted: $1"
    [[ "$out" == *"$2"* ]] || fail "$1: $out"
}
try "health: {stall_after: 5 minutes}" "bad.yaml:4:23: health.stall_after: '5 minutes': unknown unit ' minutes'"
try "health: {on_stall: panic}" "bad.yaml:4:20: health.on_stall: expected warn or fail, got 'panic'"
try "health: {straggler_factor: 0.9}" "bad.yaml:4:28: health.straggler_factor: 0.9 is out of bounds"
try "health: {memory_near: 2}" "bad.yaml:4:23: health.memory_near: 2 is out of bounds"
try "health: {memory_window: 1000}" "health.memory_window: expected an integer <= 512"
try "health: {stalls: 3s}" "health"
[ "$(cli -o json jobs | jq .count)" = 0 ] || fail "a bad spec was submitted: $(cli jobs)"
pass "bad health: settings refused at submit with file:line:col and the bounds; nothing submitted"
