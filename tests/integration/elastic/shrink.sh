#!/usr/bin/env bash
# An elastic group shrinks and goes on: 3 ranks train on the CPU collective
# (elastic_worker: a fixed global batch of 60 samples a step); rank 2 is
# SIGKILLed at step 20. The head takes it out (SHRUNK dp 3 -> 2, a new epoch),
# the survivors rebuild their ring, redo the step in flight with 30 samples
# each, and the job SUCCEEDS with the two. The final weights equal those of
# a reference run of 3 ranks with nothing killed (same global batch, other
# reduction order: within 1e-9). troupe job shows the membership and its
# history, in -o json too. (max_workers 2: the head does not grow it back.)
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/lib_elastic.bash"
: "${ELASTIC_WORKER:?}"
HPORT=$(free_port)
start_cluster --http "127.0.0.1:$HPORT"
# Steps enough that rank 2 still runs when it is killed after step 20: at load
# 40 a run of 40 had ended before the kill.
steps=$((40 * TROUPE_TEST_SLOWDOWN))
job() { ew_job "$1" 3 "$2" 2 "$3" "$steps"; } # job NAME MIN STEP_MS
final_w() { cli logs "$1" | sed -n "s/^\[job$1-dp-$2\] ew: final rank [0-9]*\/[0-9]* epoch [0-9]* steps $steps w //p"; }

ref=$(job ref 2 0)
wait_for 60 "reference job $ref to succeed" is_job_state "$ref" SUCCEEDED

id=$(job shrink 2 100)
wait_for 60 "rank 2 of job $id at step 20" logs_grep "$id" "^\[job$id-dp-2\] ew: step 20 "
kill -9 "$(ew_pid "$id" 2)"
wait_for 60 "job $id to succeed with 2 ranks" is_job_state "$id" SUCCEEDED
cli job "$id" >"$T/job.txt"
cli -o json job "$id" >"$T/job.json"
grep -q "SHRUNK dp 3 -> 2 at step [0-9]*: rank 2 (job$id-dp-2 on n[abc]) killed by SIGKILL; epoch 1" "$T/job.txt" ||
    fail "troupe job shows no SHRUNK line: $(cat "$T/job.txt")"
grep -q "elastic   dp: members 2/3, epoch 1 (min_workers 2, max_workers 2)" "$T/job.txt" ||
    fail "troupe job shows no membership: $(cat "$T/job.txt")"
[ "$(jqr '.membership | length' "$T/job.json")" = 1 ] || fail "membership in -o json: $(jq .membership "$T/job.json")"
[ "$(jqr '.membership[0] | "\(.kind) \(.from) \(.to) \(.epoch) \(.worker)"' "$T/job.json")" = "SHRUNK 3 2 1 job$id-dp-2" ] ||
    fail "membership change: $(jq .membership "$T/job.json")"
[ "$(jqr '.groups[0] | "\(.world_size) \(.elastic.epoch)"' "$T/job.json")" = "2 1" ] || fail "group: $(jq .groups "$T/job.json")"
[ "$(jqr '[.workers[] | select(.removed)] | map(.name) | join(",")' "$T/job.json")" = "job$id-dp-2" ] ||
    fail "removed workers: $(jq '[.workers[] | {name, removed, member_rank}]' "$T/job.json")"
[ "$(jqr '.restarts' "$T/job.json")" = 0 ] || fail "a restart was used"
# The dashboard's API says the same.
curl -s -m 10 "http://127.0.0.1:$HPORT/api/jobs/$id" >"$T/api.json"
[ "$(jqr '"\(.groups[0].members)/\(.groups[0].workers) \(.groups[0].min_workers) \(.membership[0].kind)"' "$T/api.json")" = "2/3 2 SHRUNK" ] ||
    fail "/api/jobs/$id: $(head -c 2000 "$T/api.json")"
cli logs "$id" >"$T/logs"
for r in 0 1; do
    grep -q "^\[job$id-dp-$r\] ew: rebuilt rank $r/2 epoch 1 (was 3 ranks)" "$T/logs" ||
        fail "rank $r did not rebuild as rank $r of 2: $(grep "dp-$r\] ew: \(rebuilt\|collective\)" "$T/logs")"
done
# Every step from 1 to $steps completed exactly once on each survivor.
for r in 0 1; do
    seq_done=$(grep -o "^\[job$id-dp-$r\] ew: step [0-9]* rank" "$T/logs" | awk '{print $4}' | tr '\n' ' ')
    [ "$seq_done" = "$(seq -s ' ' 1 "$steps") " ] || fail "rank $r's steps: $seq_done"
done
want=$(final_w "$ref" 0)
[ -n "$want" ] || fail "reference has no final weights: $(cli logs "$ref" | tail -5)"
for r in 0 1; do
    got=$(final_w "$id" $r)
    awk -v a="$want" -v b="$got" 'BEGIN { n = split(a, x, " "); m = split(b, y, " "); if (n != m || n == 0) exit 1;
        for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-9 * (1 + (x[i] < 0 ? -x[i] : x[i]))) exit 1 } }' ||
        fail "rank $r's weights differ from the reference: got $got, want $want"
done
pass "3 -> 2 at step 20: job SUCCEEDED with 2 ranks, steps 1..$steps once each, weights equal the reference's within 1e-9; $(grep -o 'SHRUNK.*' "$T/job.txt" | head -1)"
