#!/usr/bin/env bash
# troupe.torch with Debian's PyTorch (gloo on CPU): two workers
# init_process_group through troupe's store (MASTER_ADDR/PORT removed from
# their environment, so no TCPStore), all_reduce and all_gather with the
# values checked on both ranks; a store wait and a get that run out raise
# torch's timeout error naming the key. Exit 77 (skipped) without torch.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/py_lib.bash"
D=$(cd "$(dirname "$0")" && pwd)
need_torch_gloo
start_cluster
cat >"$T/job.yaml" <<YAML
name: torch
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [$PY_CMD, $D/torch_worker.py]}
env: {$PY_JOB_ENV, GLOO_SOCKET_IFNAME: lo}
YAML
timeout 150 "$CLI_BIN" submit "$T/job.yaml" >"$T/out" 2>"$T/err" || fail "job failed: $(cat "$T/err"; cli logs "$(head -1 "$T/out")")"
cli logs "$(head -1 "$T/out")" >"$T/logs"
for r in 0 1; do
    grep -q "pt: rank $r/2 backend gloo store Store" "$T/logs" || fail "rank $r init: $(cat "$T/logs")"
    grep -q "pt: rank $r all_reduce = \[3.0, 3.0, 3.0, 3.0\] ok" "$T/logs" || fail "rank $r all_reduce: $(cat "$T/logs")"
    grep -q "pt: rank $r all_gather = \[\[0.0, 0.0\], \[1.0, 10.0\]\] ok" "$T/logs" || fail "rank $r all_gather: $(cat "$T/logs")"
done
pass "2 ranks: init_process_group(gloo) through troupe's store, all_reduce = 1+2 and all_gather in rank order on both"
grep -q "pt: wait raised RuntimeError: Socket Timeout: store of policy (epoch 0): waited 1[0-9][0-9][0-9] ms for key 'never-set-key'" "$T/logs" ||
    fail "wait timeout: $(grep 'pt: wait' "$T/logs")"
grep -q "pt: get raised RuntimeError: Socket Timeout: store of policy (epoch 0): waited 1[0-9][0-9][0-9] ms for key 'never-set-either'" "$T/logs" ||
    fail "get timeout: $(grep 'pt: get' "$T/logs")"
pass "a Store wait and a get past the store's timeout name the key: $(grep -o 'pt: wait raised.*' "$T/logs")"
