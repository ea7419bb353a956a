#!/usr/bin/env bash
# A rank that never arrives, seen from PyTorch: a Store wait on the key the
# absent rank would set ends naming that key and the rank (worker and node)
# that never called the store; troupe.torch.init_process_group ends within its
# timeout with troupe.DeadlineExceeded naming the rank that never arrived,
# instead of torch's count of workers. Exit 77 (skipped) without torch.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/py_lib.bash"
D=$(cd "$(dirname "$0")" && pwd)
need_torch_gloo
start_cluster
# Worker names are job<ID>-policy-<rank>; the first job is 1.
cat >"$T/job.yaml" <<YAML
name: absent
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 3, resources: {gpu: 1}, command: [$PY_CMD, $D/torch_missing_worker.py]}
env: {$PY_JOB_ENV, GLOO_SOCKET_IFNAME: lo, PT_ABSENT: job1-policy-2, PT_ABSENT_S: "12"}
YAML
id=$(submit "$T/job.yaml")
[ "$id" = 1 ] || fail "expected job 1, got $id"
wait_for 60 "job $id to end" eval '[[ "$(job_state "$id")" =~ SUCCEEDED|FAILED ]]'
cli logs "$id" >"$T/logs"
node=$(cli -o json job "$id" | jqr '.workers[] | select(.name=="job1-policy-2") | .node')
[ -n "$node" ] && [ "$node" != null ] || fail "no node for job1-policy-2: $(cli -o json job "$id")"
for r in 0 1; do
    grep "policy-$r\] pt: store wait raised" "$T/logs" |
        grep -q "RuntimeError: Socket Timeout: store of policy (epoch 0): waited [0-9]* ms for key 'ready/$(((r + 1) % 3))', never set (1 of 1 keys missing); 1 of 3 ranks never called this store: 2 job1-policy-2 on $node" ||
        fail "rank $r store wait: $(cat "$T/logs")"
done
pass "a Store wait names the key and the rank that never called the store: $(grep -m1 -o 'pt: store wait raised.*' "$T/logs")"
for r in 0 1; do
    line=$(grep "policy-$r\] pt: init_process_group" "$T/logs") || fail "rank $r: no init line: $(cat "$T/logs")"
    grep -q "raised DeadlineExceeded after [3-9]\.[0-9] s: DEADLINE_EXCEEDED: init_process_group of communicator policy: .*1 of 3 ranks never arrived: 2 job1-policy-2 on $node" <<<"$line" ||
        fail "rank $r init_process_group: $line"
done
pass "init_process_group fails at its timeout naming the absent rank: $(grep -m1 -o 'pt: init_process_group.*' "$T/logs")"
