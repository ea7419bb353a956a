#!/usr/bin/env bash
# Every wait of data-parallel troupe-train has a deadline that names who it
# waited for:
#   1. joining: rank 1 of 2 never starts troupe-train (it sleeps); rank 0
#      fails DEADLINE_EXCEEDED after dp.init_timeout_ms (3000) naming rank 1,
#      and the job FAILS well before the sleeper would have ended;
#   2. a collective: rank 1 of 2 is stopped (SIGSTOP) mid-run; rank 0's next
#      all-reduce fails DEADLINE_EXCEEDED after dp.timeout_ms (3000) naming
#      rank 1, the job FAILS, and no process is left (the agent's SIGKILL
#      reaches the stopped one).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/dp_lib.bash"
start_cluster --dead-after 50 # node liveness is not under test; at load 20+ a 1 s lease SIGKILLed (fenced) the workers
"$TRAIN_BIN" --make-data "$T/data.tok" --tokens 16384 >/dev/null
cat >"$T/train.yaml" <<YAML
seed: 7
device: cpu
model: {layers: 2, width: 32, heads: 2, seq_len: 16}
train: {steps: 1000000, micro_batch: 2, warmup_steps: 3}
data: {path: $T/data.tok, val_fraction: 0}
eval: {every: 0}
dp: {timeout_ms: 3000, init_timeout_ms: 3000, fail_grace_ms: 500}
YAML

# 1. joining
cat >"$T/join.yaml" <<YAML
name: join
cluster: {nodes: [4]}
groups:
  - name: policy
    workers: 2
    resources: {gpu: 1}
    command: [bash, -c, 'if [ "\$RANK" = 1 ]; then exec sleep 120; fi; exec "\$0" --config "\$1"', $TRAIN_BIN, $T/train.yaml]
YAML
t0=$(date +%s%N)
id=$(submit "$T/join.yaml")
wait_for 60 "job $id to fail (rank 1 never joins)" is_job_state "$id" FAILED
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
names_join() { logs_grep "$1" "\[job$1-policy-0\] troupe-train: .*DEADLINE\|\[job$1-policy-0\] troupe-train: joining the group's CPU collective (dp.init_timeout_ms=3000): .*job$1-policy-1"; }
wait_for 10 "rank 0's error naming rank 1" names_join "$id" \
    || fail "rank 0 does not name rank 1: $(cli logs "$id" | grep -v step= | tail -5)"
line=$(cli logs "$id" | grep "\[job$id-policy-0\] troupe-train: ")
[[ "$line" == *"dp.init_timeout_ms=3000"*"job$id-policy-1"* ]] || fail "rank 0's error: $line"
[ "$ms" -lt 30000 ] || fail "the job failed $ms ms after submit"
pass "rank 1 never joined: job FAILED after $ms ms; rank 0: ${line#*troupe-train: }"

# 2. a collective
dp_job stall 2 "$T/train.yaml" "$T/m"
id=$(submit "$T/stall.yaml")
wait_for 60 "rank 1 to finish 20 steps" lines_at_least "$T/m.1" 20
pid=$(train_pid "$id" policy-1) || fail "no troupe-train process for policy-1"
kill -STOP "$pid"
t0=$(date +%s%N)
wait_for 30 "job $id to fail (rank 1 stopped)" is_job_state "$id" FAILED
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
names_stall() { logs_grep "$1" "\[job$1-policy-0\] troupe-train: DEADLINE_EXCEEDED\|\[job$1-policy-0\] troupe-train: CPU collective: .*rank 1 (job$1-policy-1 on [a-z]*)"; }
wait_for 10 "rank 0's error naming rank 1" names_stall "$id" \
    || fail "rank 0 does not name rank 1: $(cli logs "$id" | grep -v step= | tail -5)"
line=$(cli logs "$id" | grep "\[job$id-policy-0\] troupe-train: ")
reason=$(job_reason "$id")
[[ "$reason" == *"DEADLINE_EXCEEDED"*"rank 1 (job$id-policy-1 on "* ]] || fail "the job's reason does not name the stalled rank 1: $reason"
[ "$ms" -ge 2500 ] && [ "$ms" -lt 20000 ] || fail "the job failed $ms ms after the stop, want about the 3000 ms deadline"
wait_for 10 "no worker process left" no_workers
pass "rank 1 stopped: job FAILED after $ms ms (dp.timeout_ms 3000): $reason"
