#!/usr/bin/env bash
# Profiling control: the spec's range reaches exactly the matching workers at
# the right steps; `troupe profile` at run time (absolute, then relative and
# aligned) is seen by exactly the matching workers at the right steps, with
# cudaProfilerStart/Stop (a stand-in libcudart) at the range edges; bad
# settings and finished/unknown jobs are refused; the setting survives a head
# restart.
source "$(dirname "$0")/../lib.sh"
: "${RT_WORKER:?}" "${FAKE_CUDART:?}"
start_cluster
cat >"$T/job.yaml" <<YAML
name: prof
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [$RT_WORKER, run]}
  - {name: generation, workers: 2, resources: {gpu: 1}, command: [$RT_WORKER, run]}
profile: {steps: "2:4", workers: "*policy-0"}
env: {RT_STEPS: "90", RT_STEP_MS: "100", TROUPE_CUDART: "$FAKE_CUDART"}
YAML
id=$(submit "$T/job.yaml")
at_step() { logs_grep "$id" "\[job$id-$1\] rt: profile step $2 "; }
wait_for 20 "policy-0 to profile step 3 (spec)" at_step policy-0 3
# Steps 30:33: a worker hears of a setting once it is on disk (as the CLI
# does), so under load the change may take a while to arrive; 20:23 left
# the workers 1.5 s, and they were once past step 20 when it came.
out=$(cli profile "$id" --steps 30:33 --workers generation)
grep -q "profile setting version 1" <<<"$out" || fail "troupe profile: $out"
cli -o json job "$id" | jq -e '.profile.version==1 and .profile.steps=="30:33" and .profile.workers=="generation" and .profile.spec.steps=="2:4"' >/dev/null \
    || fail "troupe job -o json: $(cli -o json job "$id" | jq -c .profile)"
cli job "$id" | grep_all "^profile   steps 30:33 on generation (troupe profile, version 1)" || fail "troupe job: $(cli job "$id")"
# Both: the next setting replaces this one, and a worker still inside 30:33
# when it arrives stops there (under load generation-0 ran a step behind
# generation-1, and lost its step 32).
wait_for 20 "generation-0 to profile step 32" at_step generation-0 32
wait_for 20 "generation-1 to profile step 32" at_step generation-1 32
out=$(cli profile "$id" --next 3 --align 10 --workers '*policy-1')
grep -q "version 2" <<<"$out" || fail "troupe profile --next: $out"
wait_for 30 "the job to end" is_job_state "$id" SUCCEEDED
cli logs "$id" >"$T/logs"
got=$(grep -o "\[job$id-[a-z]*-[0-9]\] rt: profile step [0-9]*" "$T/logs" | sed 's/\] rt: profile step / /; s/^\[//' | sort -t' ' -k1,1 -k2n | tr '\n' ';')
p1=$(grep -o "\[job$id-policy-1\] rt: profile step [0-9]*" "$T/logs" | awk '{print $NF}' | tr '\n' ' ')
read -r a b c rest <<<"$p1"
[ -n "$a" ] && [ $((a % 10)) = 0 ] && [ "$b" = $((a + 1)) ] && [ "$c" = $((a + 2)) ] && [ -z "$rest" ] || fail "policy-1 steps: '$p1' (all: $got)"
want="job$id-generation-0 30;job$id-generation-0 31;job$id-generation-0 32;job$id-generation-1 30;job$id-generation-1 31;job$id-generation-1 32;job$id-policy-0 2;job$id-policy-0 3;job$id-policy-1 $a;job$id-policy-1 $b;job$id-policy-1 $c;"
[ "$got" = "$want" ] || fail "profiled steps: got $got want $want"
pass "profiled exactly: $got"
for w in policy-0 generation-0 generation-1 policy-1; do
    n=$(grep -c "\[job$id-$w\] fake_cudart: cudaProfilerStart" "$T/logs" || true)
    m=$(grep -c "\[job$id-$w\] fake_cudart: cudaProfilerStop" "$T/logs" || true)
    [ "$n" = 1 ] && [ "$m" = 1 ] || fail "$w: $n starts, $m stops"
done
[ "$(grep -c "cudaProfilerStart at step" "$T/logs")" = 11 ] || fail "notes: $(grep 'profile step' "$T/logs")"
pass "one cudaProfilerStart/Stop pair per profiled worker, through dlopen'ed libcudart"

# Refused: bad settings, finished and unknown jobs.
refused() { # refused CODE TEXT -- troupe profile args
    local code=$1 text=$2; shift 2
    local out rc
    set +e; out=$(cli profile "$@" 2>&1); rc=$?; set -e
    [ $rc != 0 ] && grep -q "$code" <<<"$out" && grep -qF "$text" <<<"$out" || fail "troupe profile $*: rc=$rc $out"
    pass "profile $* -> $code"
}
refused FAILED_PRECONDITION "job $id already ended" "$id" --steps 2:3 --workers x
refused NOT_FOUND "no job 999" 999 --steps 2:3 --workers x
id2=$(submit "$T/job.yaml")
for bad in 0:3 3:3 3:2 a:b 2 2:3:4; do
    refused INVALID_ARGUMENT "step range" "$id2" --steps "$bad" --workers x
done
refused INVALID_ARGUMENT "unclosed '['" "$id2" --steps 2:3 --workers '[ab'
refused INVALID_ARGUMENT "no worker patterns" "$id2" --steps 2:3 --workers ' , '
cli -o json job "$id2" | jq -e '.profile.version==0' >/dev/null || fail "a refused change had an effect"
cli stop "$id2" >/dev/null 2>&1 || true

# Durable: a restarted head still has job 1's setting.
stop_pid "$HEAD_PID"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50
cli -o json job "$id" | jq -e '.profile.version==2 and .profile.next==3 and .profile.align==10' >/dev/null \
    || fail "after a head restart: $(cli -o json job "$id" | jq -c .profile)"
pass "the run-time setting survives a head restart"
