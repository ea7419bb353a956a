#!/usr/bin/env bash
# An agent's --cpus outside what the machine has. More CPU slots than online
# CPUs is allowed (Ray lets num_cpus exceed the cores: workers share them),
# but the agent says so at start and in --check-config, and registers what
# it was given. --cpus 0 on a node without GPUs would register a node that
# never takes a worker: the agent refuses to start, saying what to give it,
# and never registers. With GPUs, --cpus 0 is a GPU-only node (as before).
# Above the bound (65536) the option is refused like any out-of-range one.
source "$(dirname "$0")/../lib.sh"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50
online=$(getconf _NPROCESSORS_ONLN)
many=$((online * 4 + 8))

# --cpus 0 without a GPU: refused at once, exit 2, nothing registered.
set +e
out=$(CUDA_VISIBLE_DEVICES= timeout 20 "$NODE_BIN" --head "$HEAD" --name none --cpus 0 --state-dir "$T/node-none" 2>&1)
rc=$?
set -e
[ $rc = 2 ] && grep -qF "troupe-node: no GPU found and --cpus 0: no worker could ever run on this node; give it CPU slots (--cpus N; the default, -1, is this machine's online CPUs) or GPUs (--fake-gpus 8xH200:141GB simulates them)" <<<"$out" ||
    fail "--cpus 0 without a GPU: rc=$rc $out"
set +e; cc=$(CUDA_VISIBLE_DEVICES= "$NODE_BIN" --check-config --cpus 0 --state-dir "$T/node-none" 2>&1); crc=$?; set -e
[ $crc = 2 ] && grep -qF "no GPU found and --cpus 0" <<<"$cc" || fail "--check-config --cpus 0 without a GPU: rc=$crc $cc"
[ "$(cli -o json nodes | jqr .count)" = 0 ] || fail "a node registered: $(cli nodes)"
pass "--cpus 0 without a GPU: the agent refused to start (rc 2), --check-config too: $out"

# --cpus 0 with GPUs: a GPU-only node, started as ever.
start_node g0 2xH200:141GB --cpus 0 --stop-grace-ms 1000
wait_for 10 "g0 ALIVE" nodes_alive 1
[ "$(cli -o json nodes | jq -c '.nodes[0] | [.cpus, .cpus_free, (.gpus | length)]')" = '[0,0,2]' ] ||
    fail "g0: $(cli -o json nodes | jq -c .nodes[0])"
pass "--cpus 0 with GPUs: a GPU-only node registered"

# More slots than online CPUs: started, warned, registered as given.
"$NODE_BIN" --check-config --cpus "$many" --fake-gpus 1xH200:141GB --state-dir "$T/node-big" |
    grep_all -x "# cpus: $many slots, $online online CPUs (oversubscribed: CPU-only workers here share the CPUs)" ||
    fail "--check-config --cpus $many: $("$NODE_BIN" --check-config --cpus "$many" --state-dir "$T/node-big" | grep '^# cpus')"
"$NODE_BIN" --check-config --cpus "$online" --fake-gpus 1xH200:141GB --state-dir "$T/node-big" |
    grep_all -x "# cpus: $online slots, $online online CPUs" || fail "--check-config --cpus $online: not as expected"
CUDA_VISIBLE_DEVICES= "$NODE_BIN" --head "$HEAD" --name big --cpus "$many" --stop-grace-ms 1000 \
    --state-dir "$T/node-big" >>"$T/node-big.log" 2>&1 &
PIDS+=($!)
wait_for 10 "big ALIVE" nodes_alive 2
grep -qF "warning: --cpus $many is more than this machine's $online online CPUs: the CPU-only workers placed here will share them (oversubscribed); the default, -1, counts the online CPUs" \
    "$T/node-big.log" || fail "agent log: $(cat "$T/node-big.log")"
[ "$(cli -o json nodes | jq -c '.nodes[] | select(.name == "big") | [.cpus, .cpus_free]')" = "[$many,$many]" ] ||
    fail "big: $(cli nodes)"
[ "$(cli -o json status | jq -c .cpus)" = "{\"total\":$many,\"free\":$many}" ] || fail "troupe status: $(cli -o json status | jq -c .cpus)"
pass "--cpus $many on $online online CPUs: warned at start, registered $many slots"

# Above the bound: refused as out of range.
set +e; out=$("$NODE_BIN" --check-config --cpus 65537 --state-dir "$T/node-big" 2>&1); rc=$?; set -e
[ $rc = 2 ] && grep -q "cpus" <<<"$out" || fail "--cpus 65537: rc=$rc $out"
pass "--cpus 65537 refused: $out"
