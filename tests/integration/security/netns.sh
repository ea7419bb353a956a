#!/usr/bin/env bash
# A real multi-host test in network namespaces (label netns): a head host and
# three node hosts, each its own namespace with its own address, joined by veth
# pairs to a bridge in a fourth "switch" namespace (nothing touches the
# machine's own network). troupe-head and one troupe-node per host, over TLS
# with mutual certificates (tls_client_auth: nodes). A two-group job across
# the three hosts runs to SUCCEEDED; then one node host's link is cut: the head
# marks it DEAD within its window, the job on it FAILS, and the cut-off agent
# has killed its own worker first (its lease, the fencing rule); the link
# restored, the agent comes back as a new node. Skipped (exit 77), saying
# why, where network namespaces cannot be made or entered (not root, no
# iproute2, a container without CAP_NET_ADMIN, a chroot without /sys): each
# step is tried once before the test relies on it. Runs in a mount namespace
# of its own, on a /run/netns of its own: the names and bind mounts that
# `ip netns add` makes are seen by no one else and go away with the test.
source "$(dirname "$0")/../lib.sh"
[ "$(id -u)" = 0 ] || skip_test "network namespaces need root (run as root to include this test)"
command -v ip >/dev/null || skip_test "iproute2 (ip) not installed (scripts/setup.sh installs it)"
command -v openssl >/dev/null || skip_test "openssl not installed (scripts/setup.sh installs it)"
private_mounts
SRC=$(cd "$(dirname "$0")/../../.." && pwd)

TAG=$$                                  # unique per run: parallel tests never share names
NET=10.$((100 + TAG % 100)).$((TAG / 100 % 250)) # a /24 only these namespaces use
SW=trsw$TAG HOSTS=(trh$TAG trn1$TAG trn2$TAG trn3$TAG) ADDR=("$NET.1" "$NET.11" "$NET.12" "$NET.13")
netns_cleanup() {
    local ns
    for ns in "${HOSTS[@]}" "$SW"; do ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null; done
    for ns in "${HOSTS[@]}" "$SW"; do ip netns del "$ns" 2>/dev/null; done
    return 0
}
trap 'rc=$?; netns_cleanup; set +e; (exit $rc); cleanup' EXIT
# try WHAT CMD...: run a setup step; where it fails the machine cannot host
# this test: skip, with the step and its error.
try() {
    local what=$1 err; shift
    err=$("$@" 2>&1 >/dev/null) || skip_test "$what failed here: ${err:-no message} (needs CAP_NET_ADMIN and a mounted /sys)"
}
# A /run/netns of the test's own: the names `ip netns add` creates there are
# then seen by no one else either, and vanish with the test.
mkdir -p /run/netns
try "a tmpfs on /run/netns" mount -t tmpfs -o size=1m,mode=0755 troupe-netns /run/netns
try "ip netns add" ip netns add "$SW"
try "ip netns exec (it remounts /sys)" ip netns exec "$SW" true
try "a bridge in a namespace (ip link add type bridge)" ip -n "$SW" link add br0 type bridge
ip -n "$SW" link set br0 up && ip -n "$SW" link set lo up || fail "bridge in $SW"
for i in 0 1 2 3; do
    ns=${HOSTS[$i]}
    ip netns add "$ns" || fail "ip netns add $ns"
    try "a veth pair between namespaces (ip link add type veth)" ip link add "v$i-$TAG" netns "$ns" type veth peer name "p$i" netns "$SW"
    ip -n "$ns" link set "v$i-$TAG" name eth0
    ip -n "$ns" addr add "${ADDR[$i]}/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$SW" link set "p$i" master br0
    ip -n "$SW" link set "p$i" up
done
on() { local i=$1; shift; ip netns exec "${HOSTS[$i]}" "$@"; }
# reaches I: host I gets "connection refused" from the head host's port 9 (an answer, so a path).
reaches() { local out; out=$(on "$1" timeout 2 bash -c "exec 3<>/dev/tcp/${ADDR[0]}/9" 2>&1) || true; grep -q refused <<<"$out"; }
wait_for 10 "node host 3 to reach the head host ($NET.13 -> $NET.1)" reaches 3
pass "4 hosts: head ${ADDR[0]}, nodes ${ADDR[1]} ${ADDR[2]} ${ADDR[3]} (namespaces ${HOSTS[*]}, bridge in $SW)"

"$SRC/scripts/make-test-ca.sh" "$T/ca" "${ADDR[0]}" -- n1 n2 n3 >/dev/null
HEAD=tls+tcp://${ADDR[0]}:7770
export TROUPE_HEAD=$HEAD TROUPE_TLS_CA=$T/ca/ca.pem
on 0 "$HEAD_BIN" --listen "$HEAD" --state-dir "$T/state" --http off --tls-cert "$T/ca/head.pem" \
    --tls-key "$T/ca/head.key" --tls-client-ca "$T/ca/ca.pem" --tls-client-auth nodes \
    --heartbeat-ms 200 --suspect-after 2 --dead-after 10 >>"$T/head.log" 2>&1 &
HEAD_PID=$!
PIDS+=("$HEAD_PID")
cli() { on 0 "$CLI_BIN" "$@"; }
wait_for 10 "troupe-head on $HEAD (head host)" cli status
declare -a NODE_PIDS
for i in 1 2 3; do
    on "$i" "$NODE_BIN" --head "$HEAD" --name "n$i" --address "${ADDR[$i]}" --fake-gpus 2 --labels "host=n$i" \
        --state-dir "$T/node-n$i" --tls-ca "$T/ca/ca.pem" --tls-cert "$T/ca/agent-n$i.pem" \
        --tls-key "$T/ca/agent-n$i.key" >>"$T/node-n$i.log" 2>&1 &
    NODE_PIDS[i]=$!
    PIDS+=("$!")
done
wait_for 15 "n1, n2, n3 ALIVE over TLS from their own hosts" nodes_alive 3
[ "$(cli -o json nodes | jq -r '[.nodes[] | .address] | sort | join(" ")')" = "${ADDR[1]} ${ADDR[2]} ${ADDR[3]}" ] ||
    fail "node addresses: $(cli -o json nodes | jq -c '[.nodes[] | {name, address}]')"
pass "three agents registered from three hosts with client certificates"

# A two-group job across the three hosts.
cat >"$T/two.yaml" <<YAML
name: across-hosts
cluster: {nodes: [2, 2, 2]}
groups:
  - {name: a, workers: 3, resources: {gpu: 1}, strategy: STRICT_SPREAD, command: [sh, -c, 'echo a \$RANK on \$TROUPE_NODE master \$MASTER_ADDR']}
  - {name: b, workers: 3, resources: {gpu: 1}, strategy: STRICT_SPREAD, command: [sh, -c, 'echo b \$RANK on \$TROUPE_NODE']}
YAML
id=$(cli submit --no-wait "$T/two.yaml")
wait_for 30 "the two-group job across the hosts SUCCEEDED" bash -c "[ \"\$(ip netns exec ${HOSTS[0]} '$CLI_BIN' -o json job $id | jq -r .state)\" = SUCCEEDED ]"
hosts=$(cli logs "$id" | sed -n 's/.* on \(n[123]\).*/\1/p' | sort -u | tr '\n' ' ')
[ "$hosts" = "n1 n2 n3 " ] || fail "workers did not run on all three hosts: $hosts; $(cli logs "$id")"
logs_grep "$id" "master ${ADDR[1]}\|master ${ADDR[2]}\|master ${ADDR[3]}" || fail "MASTER_ADDR is not a node host's address"
pass "job $id (groups a and b, 6 workers) SUCCEEDED across n1 n2 n3"

# Cut n3's link: DEAD within the window, its job FAILS, its worker was killed by its own agent first.
cat >"$T/hold.yaml" <<YAML
name: on-n3
cluster: {nodes: [1], labels: {host: n3}}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'echo \$\$ > $T/n3-worker.pid; exec sleep 300']}]
YAML
id2=$(cli submit --no-wait "$T/hold.yaml")
wait_for 15 "the job on n3 RUNNING" bash -c "[ -s '$T/n3-worker.pid' ] && [ \"\$(ip netns exec ${HOSTS[0]} '$CLI_BIN' -o json job $id2 | jq -r .state)\" = RUNNING ]"
wpid=$(cat "$T/n3-worker.pid")
alive "$wpid" || fail "n3's worker $wpid not running"
old_id=$(cli -o json nodes | jq -r '[.nodes[] | select(.name=="n3")] | last | .id')
t0=$(date +%s%N)
ip -n "$SW" link set p3 down    # the cable of node host 3
wait_for 10 "n3 DEAD after its link was cut" is_state n3 DEAD
dead_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$dead_ms" -le 6000 ] || fail "n3 DEAD after $dead_ms ms (window: heartbeat 200 ms x dead_after 10 = 2 s, generous bound 6 s)"
wait_for 10 "job $id2 FAILED" is_job_state "$id2" FAILED
wait_for 10 "n3's worker killed by its own agent (lease) while cut off" bash -c "! kill -0 $wpid 2>/dev/null"
grep -q "lease" "$T/node-n3.log" || fail "n3's agent did not log its lease expiry: $(tail -5 "$T/node-n3.log")"
pass "link cut: n3 DEAD after $dead_ms ms, job $id2 FAILED, the cut-off agent killed its worker (lease)"

# Restore it: the agent comes back as a new node.
ip -n "$SW" link set p3 up
wait_for 20 "n3 back as a new node (ALIVE, another id)" bash -c \
    "[ \"\$(ip netns exec ${HOSTS[0]} '$CLI_BIN' -o json nodes | jq -r '[.nodes[] | select(.name==\"n3\" and .state==\"ALIVE\")] | last | .id')\" -gt $old_id ] 2>/dev/null"
pass "link restored: n3 registered again as node $(cli -o json nodes | jq -r '[.nodes[] | select(.name=="n3")] | last | .id') (was $old_id)"
