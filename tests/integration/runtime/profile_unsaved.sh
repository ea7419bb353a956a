#!/usr/bin/env bash
# A profile change the head has not saved is not acted on (the head's promise,
# "a client is only ever told saved state", for the workers' WorkerControl
# long poll): `troupe profile` is accepted, then its write fails (an injected
# full disk, TROUPE_TEST_STORE_FULL_IF). While the store cannot write, no
# worker profiles; once it writes again the change is saved, acknowledged,
# and the workers profile the steps asked for. Before, the waiting workers
# were answered from memory at once and profiled a change the head could
# still lose.
source "$(dirname "$0")/../lib.sh"
: "${RT_WORKER:?}"
export TROUPE_TEST_STORE_FULL_IF=$T/full
start_cluster --log-level debug # the head logs control polls parked and held (debug)
cat >"$T/job.yaml" <<YAML
name: unsaved
cluster: {nodes: [4]}
groups:
  - {name: g, workers: 2, resources: {gpu: 1}, command: [$RT_WORKER, run]}
env: {RT_STEPS: "600", RT_STEP_MS: "50"}
YAML
id=$(submit "$T/job.yaml")
wait_for 20 "job $id RUNNING" is_job_state "$id" RUNNING
# polls_open NAME...: each worker's control poll is open at the head.
polls_open() {
    local n
    for n in "$@"; do grep -q "profile control parked job=$id worker=job$id-$n " "$T/head.log" || return 1; done
}
wait_for 20 "both workers' control polls open at the head" polls_open g-0 g-1
profiled() { logs_grep "$id" "rt: profile step"; }
! profiled || fail "a worker profiled before any setting: $(cli logs "$id" | grep 'profile step')"

# The change must be accepted and then fail to save: its own write has to be
# the first to fail. Another write (the job's own changes) can come first and
# make the head refuse the change up front; then the store is let recover
# and the test tries again.
accepted=0
for try in 1 2 3 4 5 6 7 8 9 10; do
    touch "$T/full"
    mark=$(head_log_mark)
    cli profile "$id" --next 3 --workers '*' >"$T/profile.out" 2>&1 &
    prof_pid=$!
    wait_for 10 "the head to find its store failing" bash -c "[ \"\$('$CLI_BIN' -o json status | jq -r .store.ok)\" = false ]"
    # Refused up front, or taken in memory (logged) and waiting for its save.
    decided() { grep -q RESOURCE_EXHAUSTED "$T/profile.out" || tail -c +$((mark + 1)) "$T/head.log" | grep -c "job=$id profile version=" >/dev/null; }
    wait_for 10 "troupe profile refused, or taken by the head" decided
    if ! grep -q RESOURCE_EXHAUSTED "$T/profile.out"; then
        accepted=1
        break
    fi
    await_end 10 "troupe profile to exit after RESOURCE_EXHAUSTED" "$prof_pid"
    rm -f "$T/full"
    wait_for 15 "the store to write again" bash -c "[ \"\$('$CLI_BIN' -o json status | jq -r .store.ok)\" = true ]"
done
[ $accepted = 1 ] || fail "in 10 tries troupe profile was always refused before its own write failed: $(cat "$T/profile.out")"
echo "accepted at try $try"
# The head had the news for both workers' open polls and held it back (the
# old head answered them at this point, and they profiled a few steps on).
held() {
    local n
    for n in g-0 g-1; do
        # grep -c reads it all: no SIGPIPE for tail under pipefail
        tail -c +$((mark + 1)) "$T/head.log" | grep -c "profile control held job=$id worker=job$id-$n version=" >/dev/null || return 1
    done
}
wait_for 10 "the head to hold the unsaved change back from both workers' control polls" held
if profiled; then
    fail "a worker profiled a change the head has not saved: $(cli logs "$id" | grep 'profile step')"
fi
kill -0 "$prof_pid" 2>/dev/null || fail "troupe profile returned before the change was saved: $(cat "$T/profile.out")"
pass "while the store cannot write: troupe profile waits, no worker profiles"

rm -f "$T/full"
wait_for 15 "the store to write again" bash -c "[ \"\$('$CLI_BIN' -o json status | jq -r .store.ok)\" = true ]"
await_end 15 "troupe profile to return once the store writes again" "$prof_pid"
rc=$END_RC
[ "$rc" = 0 ] && grep -q "profile setting version 1" "$T/profile.out" || fail "troupe profile after the store recovered: rc=$rc $(cat "$T/profile.out")"
n_prof() { [ "$(cli logs "$id" | grep -c "rt: profile step")" -ge 6 ]; }
wait_for 15 "both workers to profile 3 steps once saved" n_prof
pass "once saved: acknowledged (version 1), and both workers profiled 3 steps"
cli stop "$id" >/dev/null
