#!/usr/bin/env bash
# A rank killed mid-run fails a data-parallel job within the collective
# deadline, and the job names that rank: 3 troupe-train ranks on the CPU
# collective (dp.timeout_ms 20000), rank 1 SIGKILLed after 20 steps. The two
# others see the collective fail naming rank 1 at once and wait
# dp.fail_grace_ms before exiting, so that rank 1's own end reaches the head
# first; the job FAILS with the reason naming job<ID>-policy-1, well inside the
# deadline (the agents then stop the two), and no worker process is left.
# (The job's reason is the first failure the head hears of: rank 1's exit
# from its agent, or a survivor's own report naming rank 1.)
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/dp_lib.bash"
names_rank1() { logs_grep "$1" "\[job$1-policy-$2\] troupe-train: .*rank 1 (job$1-policy-1 on [a-z]*)"; }
start_cluster --dead-after 50 # node liveness is not under test; at load 20+ a 1 s lease SIGKILLed (fenced) the workers
"$TRAIN_BIN" --make-data "$T/data.tok" --tokens 16384 >/dev/null
cat >"$T/train.yaml" <<YAML
seed: 7
device: cpu
model: {layers: 2, width: 32, heads: 2, seq_len: 16}
train: {steps: 1000000, micro_batch: 2, warmup_steps: 3}
data: {path: $T/data.tok, val_fraction: 0}
eval: {every: 0}
dp: {timeout_ms: 20000}
YAML
dp_job kill 3 "$T/train.yaml" "$T/m"
id=$(submit "$T/kill.yaml")
wait_for 60 "rank 1 to finish 20 steps" lines_at_least "$T/m.1" 20
pid=$(train_pid "$id" policy-1) || fail "no troupe-train process for policy-1"
[ -n "$pid" ] && [ "$pid" != null ] || fail "no pid for policy-1"
t0=$(date +%s%N)
kill -9 "$pid"
wait_for 20 "job $id to fail" is_job_state "$id" FAILED
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
reason=$(job_reason "$id")
# Either the agent's word on rank 1 came first, or a survivor's failure report
# (the CPU collective reports its own failures) naming rank 1 as the one gone.
[[ "$reason" == "worker job$id-policy-1 on node "*"killed by signal"* ]] ||
    [[ "$reason" =~ ^rank\ [02]\ of\ group\ policy\ .*failed\ first:\ UNAVAILABLE:\ CPU\ collective:\ [a-z-]*:\ rank\ 1\ \(job$id-policy-1\ on\ [a-z]*\)\ went\ away ]] ||
    fail "the reason does not name policy-1: $reason"
[ "$ms" -lt 20000 ] || fail "the job failed $ms ms after the kill, past the 20000 ms collective deadline"
# The survivors' last words reach the log a moment after the job's end.
for r in 0 2; do
    wait_for 10 "policy-$r's error naming rank 1" names_rank1 "$id" "$r" \
        || fail "policy-$r does not name rank 1: $(cli logs "$id" | grep "policy-$r" | tail -4)"
done
wait_for 10 "no worker process left" no_workers
pass "rank 1 killed: job FAILED after $ms ms naming it ($reason); ranks 0 and 2 named rank 1; no process left"

# A failure of troupe-train's own (not the collective's) is reported to the
# head too, so the reason names the rank and says why: checkpoint.dir is a file.
: >"$T/not-a-dir"
sed "s#^dp:.*#dp: {timeout_ms: 20000}\ncheckpoint: {dir: $T/not-a-dir}#" "$T/train.yaml" >"$T/bad-train.yaml"
dp_job bad 2 "$T/bad-train.yaml" "$T/b"
id=$(submit "$T/bad.yaml")
wait_for 60 "job $id to fail" is_job_state "$id" FAILED
reason=$(job_reason "$id")
[[ "$reason" =~ ^rank\ [01]\ of\ group\ policy\ \(job$id-policy-[01]\ on\ [a-z]*,\ attempt\ 0\)\ failed\ first:\ PERMISSION_DENIED:\ checkpoint.dir\ $T/not-a-dir:\ cannot\ create:\ exists\ and\ is\ not\ a\ directory ]] ||
    fail "the reason does not carry troupe-train's report: $reason; $(cli logs "$id" | tail -3)"
pass "troupe-train's own failure reported: $reason"
