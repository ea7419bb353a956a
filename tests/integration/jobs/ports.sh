#!/usr/bin/env bash
# MASTER_PORT is unique per host, not cluster-wide. With a band of one port:
# two groups whose rank 0 run on different hosts both get it; two groups on
# one host cannot, so the second waits PENDING (saying why) and starts when
# the first one's port frees.
source "$(dirname "$0")/../lib.sh"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50 --master-port-count 1
start_node pa 1xH100:80GB --address 127.0.0.1 --labels role=a --stop-grace-ms 500
start_node pb 1xH100:80GB --address 127.0.0.2 --labels role=a --stop-grace-ms 500
start_node pc 2xH100:80GB --address 127.0.0.3 --labels role=c --stop-grace-ms 500
wait_for 10 "3 nodes ALIVE" nodes_alive 3
job_yaml() { # NAME ROLE
    cat >"$T/$1.yaml" <<YAML
name: $1
cluster: {nodes: [1], labels: {role: $2}}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sleep, "60"]}]
YAML
}
endpoint() { cli -o json job "$1" | jqr '.groups[0] | "\(.master_addr):\(.master_port)"'; }

job_yaml j1 a; job_yaml j2 a; job_yaml j3 c; job_yaml j4 c
a=$(submit "$T/j1.yaml"); b=$(submit "$T/j2.yaml")
wait_for 10 "j1 RUNNING" is_job_state "$a" RUNNING
wait_for 10 "j2 RUNNING" is_job_state "$b" RUNNING
ea=$(endpoint "$a"); eb=$(endpoint "$b")
[ "${ea#*:}" = 29500 ] && [ "${eb#*:}" = 29500 ] || fail "both groups should get 29500: $ea $eb"
[ "${ea%:*}" != "${eb%:*}" ] || fail "groups on one host share a port: $ea $eb"
pass "groups on two hosts both use MASTER_PORT 29500 ($ea, $eb)"

c=$(submit "$T/j3.yaml")
wait_for 10 "j3 RUNNING" is_job_state "$c" RUNNING
d=$(submit "$T/j4.yaml")
reason="waiting for a master port: all of 29500..29500 are in use on 127.0.0.3 (head master_port_base/master_port_count)"
wait_for 10 "j4 PENDING with reason '$reason'" has_reason "$d" "$reason"
[ "$(job_state "$d")" = PENDING ] || fail "j4 should wait for a port, is $(job_state "$d")"
pass "second group on one host PENDING: $reason"
cli stop "$c" >/dev/null 2>&1
wait_for 15 "j4 RUNNING once j3's port is free" is_job_state "$d" RUNNING
[ "$(endpoint "$d")" = 127.0.0.3:29500 ] || fail "j4 endpoint $(endpoint "$d")"
pass "it started on 127.0.0.3:29500 when j3 was stopped"
for id in "$a" "$b" "$d"; do cli stop "$id" >/dev/null 2>&1 || true; done
