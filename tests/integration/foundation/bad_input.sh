#!/usr/bin/env bash
# Bad input on every door of the head: the RPC port, config files, the CLI.
# Each gets a clear error and a non-zero status; the head keeps serving.
source "$(dirname "$0")/../lib.sh"
RAW=${RAWCALL:?}

start_head --max-frame-bytes 1048576
start_node n1 4

# new_log MARK: what the head logged since head_log_mark said MARK.
new_log() { tail -c +$(($1 + 1)) "$T/head.log"; }
# expect_code MODE CODE_NAME LOG: the reply has exactly that status code, and
# the head logged exactly one warning for it, containing LOG; LOG "-" means
# an ordinary answer (an unknown id) that logs nothing.
expect_code() {
    local out mark n
    mark=$(head_log_mark)
    out=$("$RAW" "$HEAD" "$1") || true
    grep -q "^code=[0-9]* ($2) " <<<"$out" || fail "$1: expected $2, got: $out"
    # The head logs before it replies, so the line is there already.
    n=$(new_log "$mark" | grep -c " warning: " || true)
    if [ "$3" = - ]; then
        [ "$n" = 0 ] || fail "$1: expected no log line, got: $(new_log "$mark")"
    else
        [ "$n" = 1 ] && new_log "$mark" | grep " warning: " | grep_all -F -- "$3" ||
            fail "$1: expected one log line with '$3', got $n: $(new_log "$mark")"
    fi
    pass "$1 -> $2: ${out#*message=}"
}
expect_code garbage INVALID_ARGUMENT "rpc: refused frame: malformed request envelope (64 bytes)"
expect_code truncated INVALID_ARGUMENT "rpc: refused frame: malformed request envelope (13 bytes)"
expect_code unknown-method UNIMPLEMENTED "rpc: unknown method=troupe.v1.Head/NoSuchMethod"
expect_code bad-payload INVALID_ARGUMENT "rpc: malformed payload method=troupe.v1.Head/RegisterNode bytes=6"
expect_code no-name INVALID_ARGUMENT "refused registration: register: name and hostname are both empty"
expect_code too-many-gpus INVALID_ARGUMENT "refused registration: register: 65 GPUs advertised; at most 64 per node"
expect_code dup-gpu INVALID_ARGUMENT "refused registration: register: GPU index 0 is out of range or repeated"
# Job calls a well-behaved client never makes: the head checks them itself.
expect_code submit-nospec INVALID_ARGUMENT "refused job: SubmitJob without a spec"
expect_code submit-zero-workers INVALID_ARGUMENT "refused job name=raw: group g: workers must be >= 1 and <= 4096, got 0"
expect_code submit-no-command INVALID_ARGUMENT "refused job name=raw: group g: command is empty"
expect_code submit-bad-strategy INVALID_ARGUMENT "refused job name=raw: group g: unknown strategy 'PAKC'"
expect_code get-unknown NOT_FOUND -
expect_code stop-unknown NOT_FOUND -
expect_code logs-unknown NOT_FOUND -
expect_code sync-unknown-node FAILED_PRECONDITION -
expect_code submit-batch-too-many INVALID_ARGUMENT "refused batch: 4097 job specs in one call; at most 4096"
expect_code stop-batch-too-many INVALID_ARGUMENT "refused batch: 4097 job ids in one call; at most 4096"

# Oversized frames (max_frame_bytes 1 MiB here): up to twice the limit the
# head reads the frame, answers RESOURCE_EXHAUSTED and logs one line naming
# the peer and the size; beyond that nng drops it and closes the connection,
# so rawcall gets no reply (exit 3, "no reply", within its 2 s; a hang that
# `timeout` ends is a failure).
expect_code oversized-near RESOURCE_EXHAUSTED "rpc: oversized frame from 127.0.0.1:"
grep -qE "rpc: oversized frame from 127\.0\.0\.1:[0-9]+: frame of 15[0-9]{5} bytes exceeds max_frame_bytes 1048576$" \
    "$T/head.log" || fail "oversized log line: $(grep oversized "$T/head.log")"
set +e
out=$(timeout 10 "$RAW" "$HEAD" oversized 2>&1); rc=$?
set -e
[ $rc = 3 ] && [ "$out" = "no reply" ] || fail "frame beyond the slack: expected 'no reply' (rc 3), got rc=$rc: $out"
pass "oversized frames: 1.5 MiB refused RESOURCE_EXHAUSTED and logged; 8 MiB dropped by the transport"

# Raw garbage below the SP protocol: the handshake fails, nothing else happens.
for i in 1 2 3; do
    (exec 3<>/dev/tcp/127.0.0.1/$PORT; head -c 4096 /dev/urandom >&3; exec 3>&-) 2>/dev/null || true
done
pass "random bytes on the TCP port"

# The head still serves everyone, and nothing was half-registered.
"$RAW" "$HEAD" ping | grep_all "(OK)" || fail "head stopped serving"
[ "$(cli -o json nodes | jqr .count)" = 1 ] || fail "a bad registration left a node behind"
[ "$(cli -o json jobs | jqr .count)" = 0 ] || fail "a bad submission left a job behind"
kill -0 "$HEAD_PID" || fail "head died"
pass "head alive and serving after bad input; no half-applied change"

# A batch with one bad item: the call is OK, that item is refused, the good one admitted.
out=$("$RAW" "$HEAD" submit-batch-mixed) || true
grep -q "^code=0 " <<<"$out" && grep -qE "^items=OK:\|INVALID_ARGUMENT:.*workers" <<<"$out" ||
    fail "submit-batch-mixed: $out"
pass "SubmitJobs with a bad second item: ${out##*items=}"
[ "$(cli -o json jobs | jqr .count)" = 1 ] || fail "the batch's good item should be the only job"

# Config files: malformed YAML and unknown keys name file:line:col.
printf 'listen: "tcp://127.0.0.1:1"\nheartbeat_ms: [1, 2\n' >"$T/bad.yaml"
set +e
out=$("$HEAD_BIN" --state-dir "$T/s2" --config "$T/bad.yaml" --check-config 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -qE "bad.yaml:[0-9]+:[0-9]+:" <<<"$out" || fail "malformed YAML: rc=$rc $out"
pass "malformed YAML: $out"
printf 'listen: "tcp://127.0.0.1:1"\nheartbeat_msec: 5\n' >"$T/unknown.yaml"
set +e
out=$("$HEAD_BIN" --state-dir "$T/s2" --config "$T/unknown.yaml" 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -q "unknown.yaml:2:1: unknown key 'heartbeat_msec'" <<<"$out" || fail "unknown key: $out"
pass "unknown key: $out"
set +e
out=$("$HEAD_BIN" --state-dir "$T/s2" --heartbeat-ms 0 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -q "out of range" <<<"$out" || fail "out of range flag: $out"
out=$("$HEAD_BIN" --check-config 2>&1) && fail "missing state dir accepted" || true
grep -q "state_dir" <<<"$out" || fail "missing state_dir message: $out"
set +e
out=$("$NODE_BIN" --fake-gpus 3xH200:lots 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -q "should look like" <<<"$out" || fail "bad --fake-gpus: $out"
set +e
out=$(timeout 10 "$NODE_BIN" --head "$HEAD" --name badlabel --fake-gpus 2 --labels "=H200" 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -q "label key '' is not valid" <<<"$out" || fail "label without key: rc=$rc $out"
printf 'head: "%s"\nfake_gpu: 4\n' "$HEAD" >"$T/node.yaml"
set +e
out2=$("$NODE_BIN" --config "$T/node.yaml" --check-config 2>&1); rc2=$?
set -e
[ $rc2 -eq 2 ] && grep -q "node.yaml:2:1: unknown key 'fake_gpu'" <<<"$out2" || fail "node config: rc=$rc2 $out2"
pass "bad flags: out of range, missing state dir, bad --fake-gpus, label without key, node config typo"

# The CLI: unknown command, bad option, unreachable head.
set +e
cli frobnicate 2>/dev/null; rc1=$?
cli -o yaml nodes 2>/dev/null; rc2=$?
out=$("$CLI_BIN" --head tcp://127.0.0.1:1 nodes 2>&1); rc3=$?
set -e
[ $rc1 -eq 2 ] && [ $rc2 -eq 2 ] && [ $rc3 -eq 1 ] || fail "cli exit codes $rc1 $rc2 $rc3"
grep -q "UNAVAILABLE: cannot reach tcp://127.0.0.1:1" <<<"$out" || fail "unreachable message: $out"
pass "CLI: usage errors exit 2, unreachable head exits 1: $out"

# Job commands: bad ids are usage errors; unknown ids say NOT_FOUND; a spec
# file that does not exist is named.
set +e
cli logs abc 2>/dev/null; rc1=$?
cli stop 2>/dev/null; rc2=$?
out=$(cli job 424242 2>&1); rc3=$?
out2=$(cli submit "$T/missing.yaml" 2>&1); rc4=$?
cli submit 2>/dev/null; rc5=$?
set -e
[ $rc1 -eq 2 ] && [ $rc2 -eq 2 ] && [ $rc5 -eq 2 ] || fail "job usage errors should exit 2: $rc1 $rc2 $rc5"
[ $rc3 -eq 1 ] && grep -q "NOT_FOUND: no job 424242" <<<"$out" || fail "unknown job: rc=$rc3 $out"
[ $rc4 -eq 1 ] && grep -q "missing.yaml" <<<"$out2" || fail "missing spec file: rc=$rc4 $out2"
pass "job commands: bad ids exit 2, unknown job NOT_FOUND, missing file named: $out2"
