#!/usr/bin/env bash
# A process where nng is wedged (a CPU collective's socket release did not
# finish: nng 1.5.2's nng_close hang) must still exit: troupe_worker_close
# then closes no socket (any nng_close would hang for good — caught with gdb
# in integration.coll.allreduce: main in the metrics socket's nng_close, the
# release thread in its own). TROUPE_TEST_NNG_WEDGED marks nng wedged after
# every release, so this runs the path on every rank: the job must succeed,
# every worker exiting well within its deadline.
source "$(dirname "$0")/../lib.sh"
: "${COLL_WORKER:?}"
start_cluster
cat >"$T/job.yaml" <<YAML
name: wedged
cluster: {nodes: [4]}
groups:
  - {name: dp, workers: 3, resources: {gpu: 1}, command: [$COLL_WORKER]}
env: {TROUPE_TEST_NNG_WEDGED: "1", CW_TIMEOUT_MS: "20000"}
YAML
t0=$(date +%s)
timeout 60 "$CLI_BIN" submit "$T/job.yaml" >"$T/out" 2>"$T/err" || fail "job failed: $(cat "$T/err"; cli logs "$(head -1 "$T/out")")"
id=$(head -1 "$T/out")
secs=$(( $(date +%s) - t0 ))
cli logs "$id" >"$T/logs"
got=$(grep -c "\[job$id-dp-[0-9]\] cw: rank [0-9] ok" "$T/logs" || true)
[ "$got" = 3 ] || fail "$got of 3 ranks passed: $(cat "$T/logs")"
[ "$secs" -lt 40 ] || fail "the job took $secs s"
pass "with nng marked wedged every rank's troupe_worker_close returned without closing sockets: job $id SUCCEEDED in $secs s"
