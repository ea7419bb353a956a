#!/usr/bin/env bash
# metrics.db has a size bound and a metrics flood cannot take the state disk:
#  1. with --metrics-max-bytes 2 MiB on an 8 MiB tmpfs state dir, a worker
#     flooding metrics stops at the bound (the file stays within it, its WAL
#     within 1/16 more) and new jobs are still taken;
#  2. with a bound larger than the disk, the flood fills the disk, and then
#     `troupe submit` fails at once (not after its deadline) with
#     RESOURCE_EXHAUSTED naming the disk, metrics.db and what to do.
# Needs root to mount the tmpfs; skips (exit 77) elsewhere. The test runs in
# a mount namespace of its own: the tmpfs goes away with it, even when it is
# killed; lib.sh's cleanup kills its processes and unmounts.
source "$(dirname "$0")/../lib.sh"
: "${MX_WORKER:?}"
private_mounts
mkdir -p "$T/state"
mount -t tmpfs -o size=8m,mode=0700 tmpfs "$T/state" 2>"$T/mount.err" ||
    skip_test "cannot mount a tmpfs here ($(cat "$T/mount.err"))"

free_b() { df --output=avail -B1 "$T/state" | tail -1 | tr -d ' '; }
db_size() { stat -c %s "$T/state/metrics.db" 2>/dev/null || echo 0; }
names=$(for i in $(seq 1 8); do printf 'a_long_metric_name_that_fills_the_disk_faster_%02d,' "$i"; done)
cat >"$T/flood.yaml" <<YAML
name: flood
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [$MX_WORKER]}]
env: {MX_POINTS: "100000000", MX_NAMES: "${names%,}"}
YAML
printf 'name: small\ncluster: {nodes: [1]}\ngroups: [{name: g, workers: 1, resources: {gpu: 1}, command: [true]}]\n' >"$T/small.yaml"

# ---- 1: bounded below the disk --------------------------------------------
BOUND=$((2 * 1024 * 1024))
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50 --metrics-max-bytes $BOUND
start_node na 2xH100:80GB --stop-grace-ms 1000
wait_for 10 "node ALIVE" nodes_alive 1
a=$(submit "$T/flood.yaml")
wait_for 120 "the head to say metrics.db reached its bound" grep -q "metrics.db is bounded by metrics_max_bytes=$BOUND" "$T/head.log"
sleep 3 # the worker keeps sending: the file must stay at its bound
size=$(db_size)
[ "$size" -le "$BOUND" ] || fail "metrics.db is $size bytes, over its bound $BOUND"
wal=$(stat -c %s "$T/state/metrics.db-wal" 2>/dev/null || echo 0)
[ "$wal" -le $((BOUND / 2)) ] || fail "metrics.db-wal is $wal bytes (over half the bound $BOUND)"
b=$(cli --timeout 5000 submit --no-wait "$T/small.yaml") || fail "a submit was refused with metrics.db at its bound and $(free_b) bytes free"
wait_for 30 "job $b SUCCEEDED" is_job_state "$b" SUCCEEDED
pass "metrics.db bounded at $BOUND: $size bytes (WAL $wal), $(free_b) bytes free on the disk, new jobs run"
cli stop "$a" >/dev/null
wait_for 30 "job $a ended" bash -c "[ \"\$('$CLI_BIN' -o json job $a | jq -r .state)\" = STOPPED ]"

# ---- 2: a bound larger than the disk: the flood fills it -------------------
# A new head on an empty 8 MiB disk (a fresh tmpfs: quick to start under ASan).
stop_pid -9 "$HEAD_PID"
umount -l "$T/state"
mount -t tmpfs -o size=8m,mode=0700 tmpfs "$T/state"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50 --metrics-max-bytes $((64 * 1024 * 1024))
wait_for 30 "node ALIVE again" nodes_alive 1
c=$(submit "$T/flood.yaml")
wait_for 120 "the flood to fill the disk (free $(free_b) bytes)" bash -c "[ \$(df --output=avail -B1 '$T/state' | tail -1) -lt 1048576 ]"
# Submitted at once: the submit looks at the disk itself, so it is refused
# even before the head's committer looked again (it looks every 100 ms).
t0=$(date +%s%N)
set +e; out=$("$CLI_BIN" --timeout 10000 submit --no-wait "$T/small.yaml" 2>"$T/sub.err"); rc=$?; set -e
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ $rc != 0 ] || fail "submit on a full disk was accepted (job $out)"
grep -q RESOURCE_EXHAUSTED "$T/sub.err" || fail "submit on a full disk: want RESOURCE_EXHAUSTED, got rc=$rc after $ms ms: $(cat "$T/sub.err")"
grep -q "metrics.db" "$T/sub.err" || fail "the refusal should name metrics.db: $(cat "$T/sub.err")"
[ $ms -lt 3000 ] || fail "the refusal took $ms ms"
pass "disk filled by metrics.db: submit refused in $ms ms (rc=$rc): $(cat "$T/sub.err")"
