#!/usr/bin/env bash
# bench/history/run.sh BUILD_DIR OUT.json [JOBS] — head memory per job and list
# latency on a long-lived head (bounded history).
#
# One agent with 1 simulated GPU; a sleep job holds it, so the JOBS jobs
# submitted after it (batch calls of 4096) stay PENDING, and a batch stop makes
# each STOPPED at once: JOBS settled jobs without running JOBS processes.
# Measures the head's RSS before and after (per job), the latency of the CLI's
# list calls (process start included; median of 10), and `troupe jobs --all`.
# Then restarts the head on the same state dir with keep_jobs=1000 and times
# until the listing holds 1000 finished jobs (recovery + one retention pass).
# With OLD=1 only `troupe -o json jobs` (no paging flags) is timed, for a head
# built from a commit before paging existed (COMMIT=sha names it in the JSON).
set -euo pipefail
source "$(dirname "$0")/../../tests/integration/free_port.bash"
# Agents here run workers as themselves, as every figure before isolation was
# measured (the workers write into this script's temp dir).
export TROUPE_SHARED_UID=true
BIN=${1:?usage: run.sh BUILD_DIR OUT.json [JOBS]}; OUT=${2:?}; N=${3:-30000}
T=$(mktemp -d /tmp/troupe-hist.XXXXXX)
PORT=$(free_port); HEAD=tcp://127.0.0.1:$PORT
export TROUPE_HEAD=$HEAD
CLI="$BIN/client/troupe"
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$T"; }
PIDS=(); trap cleanup EXIT
keep=(); [ "${OLD:-0}" = 1 ] || keep=(--keep-jobs 100000000 --keep-days 0)
"$BIN/server/troupe-head" --listen "$HEAD" --state-dir "$T/state" --heartbeat-ms 1000 "${keep[@]}" >"$T/head.log" 2>&1 &
HPID=$!; PIDS+=($HPID)
"$BIN/worker/node/troupe-node" --head "$HEAD" --name n1 --fake-gpus 1 --state-dir "$T/node" >"$T/node.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do "$CLI" status >/dev/null 2>&1 && break; sleep 0.1; done
# rss: the head's resident KiB; a head that is gone ends the run saying so
# (with its log), not with awk's "cannot open /proc/PID/status".
rss() {
    awk '/^VmRSS/ {print $2}' "/proc/$HPID/status" 2>/dev/null && return
    echo "run.sh: the head (pid $HPID) is gone; its log ends:" >&2; tail -n 20 "$T/head.log" >&2; exit 1
}
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
printf 'name: hold\ncluster: {nodes: [1]}\ngroups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sleep, "3600"]}]\n' >"$T/hold.yaml"
printf 'name: q\ncluster: {nodes: [1]}\ngroups: [{name: g, workers: 1, resources: {gpu: 1}, command: ["true"]}]\n' >"$T/q.yaml"
for _ in $(seq 100); do "$CLI" submit --no-wait "$T/hold.yaml" >/dev/null 2>&1 && break; sleep 0.1; done
sleep 1
rss0=$(rss)
files=(); for _ in $(seq 4096); do files+=("$T/q.yaml"); done
t0=$(date +%s%N); left=$N
while [ "$left" -gt 0 ]; do
    k=$((left < 4096 ? left : 4096))
    ids=$("$CLI" submit --no-wait "${files[@]:0:$k}")
    "$CLI" stop --no-wait $ids >/dev/null 2>&1
    left=$((left - k))
done
submit_ms=$(ms "$t0")
sleep 2
rss1=$(rss)
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
time10() { for _ in $(seq 10); do t=$(date +%s%N); "$@" >/dev/null 2>&1 || { echo -1; continue; }; ms "$t"; done | median; }
if [ "${OLD:-0}" = 1 ]; then
    set +e; "$CLI" -o json jobs >/dev/null 2>"$T/err"; rc=$?; set -e
    first=-1; page1000=-1; deep=-1; all_ms=-1; all_n=0; note="troupe jobs rc=$rc: $(head -c 200 "$T/err")"
else
    first=$(time10 "$CLI" -o json jobs --limit 100)
    page1000=$(time10 "$CLI" -o json jobs --limit 1000)
    deep=$(time10 "$CLI" -o json jobs --limit 100 --cursor 200)
    t=$(date +%s%N); all_n=$("$CLI" -o json jobs --all | jq .count); all_ms=$(ms "$t")
    note="pages of up to 1000, each within the 4 MiB frame"
fi
ret_ms=-1; rss2=0
if [ "${OLD:-0}" != 1 ]; then
    # Retention: the same state dir under keep_jobs=1000 (one pass deletes the rest).
    kill -TERM "$HPID"; wait "$HPID" 2>/dev/null || true
    t=$(date +%s%N)
    "$BIN/server/troupe-head" --listen "$HEAD" --state-dir "$T/state" --heartbeat-ms 1000 --keep-jobs 1000 \
        --keep-days 0 >>"$T/head.log" 2>&1 &
    HPID=$!; PIDS+=($HPID)
    # The hold job and the newest 1000 finished ones (all of them when fewer).
    want=$(( (N < 1000 ? N : 1000) + 1 )); deadline=$(( $(date +%s) + 120 ))
    until [ "$("$CLI" -o json jobs --all 2>/dev/null | jq .count)" = "$want" ]; do
        [ "$(date +%s)" -lt "$deadline" ] || { echo "run.sh: the restarted head did not list $want jobs within 120 s" >&2; exit 1; }
        sleep 0.05
    done
    ret_ms=$(ms "$t"); rss2=$(rss)
    note="$note; restart with keep_jobs=1000 (load + retention pass + list) in ${ret_ms} ms"
fi
kb=$(awk -v a="$rss0" -v b="$rss1" -v n="$N" 'BEGIN {printf "%.2f", (b - a) / n}')
cat >"$OUT" <<JSON
{"bench":"history","date":"$(date -u +%FT%TZ)","commit":"${COMMIT:-$(git -C "$(dirname "$0")" rev-parse --short HEAD)}",
 "machine":"$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)","jobs":$N,
 "submit_and_stop_ms":$submit_ms,"head_rss_kb_before":$rss0,"head_rss_kb_after":$rss1,"kb_per_job":$kb,
 "list_first_100_ms":$first,"list_first_1000_ms":$page1000,"list_100_at_cursor_200_ms":$deep,
 "list_all_ms":$all_ms,"list_all_count":$all_n,"restart_keep_1000_ms":$ret_ms,"head_rss_kb_after_retention":$rss2,
 "note":"$note"}
JSON
cat "$OUT"
