#!/usr/bin/env bash
# bench/elastic/run.sh BUILD_DIR [OUT.json] [ROUNDS]
#
# How long an elastic group takes to shrink and to grow back, on the CPU
# collective. Real head and three agents on loopback; per round one job of 3
# ranks of tests/integration/elastic/elastic_worker (global batch 3000, 64
# weights, a step every ~10 ms; elastic: {min_workers: 2}); rank 2 gets
# kill -9 mid-run. From the kill (this script's wall clock; every process is
# on this machine) to:
#
#   detect     a survivor's collective fails (or it sees the new epoch first)
#   head       the head's SHRUNK change (its timestamp)
#   agreement  the survivor has its new rank and size (from its failure)
#   rebuild    the new epoch's ring is open
#   sync       the survivors agreed on the step and state
#   redone     the step in flight completed again, at the new size
#   total      kill -> the survivors' next completed step (the slowest one)
#
# and for the grow-back: from the head's GREW change to the replacement
# joining (grow_join) and to the first step completed at full size
# (grow_total). The split is the slowest survivor's. Prints a table; writes JSON.
set -euo pipefail
BUILD=${1:?usage: bench/elastic/run.sh BUILD_DIR [OUT.json] [ROUNDS]}
OUT=${2:-}
ROUNDS=${3:-5}
export TROUPE_BIN=$(cd "$BUILD" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../../tests/integration/lib.sh"
WORKER=$TROUPE_BIN/tests/integration/elastic/elastic_worker
[ -x "$WORKER" ] || fail "no $WORKER: build the tree first"
start_cluster --restart-backoff-ms 500

ms_now() { echo $(( $(date +%s%N) / 1000000 )); }
declare -A R=()
add() { R[$1]="${R[$1]:-}${R[$1]:+,}$2"; }

# full_step ID RANK WALL: rank RANK completed a step after a change at or
# after WALL (the replacement's join): the first step at full size. Under load
# the head may grow the group back before a survivor asked for the shrunk
# membership; it then meets the replacement in one change.
full_step() {
    "$CLI_BIN" logs "$1" | grep "^\[job$1-dp-$2\] ew: step [0-9]* completed" | sed -n 's/.* wall \([0-9]*\)$/\1/p' |
        awk -v w="$3" '$1 >= w { found = 1 } END { exit !found }'
}

# wall_of FILE PATTERN: the wall ms of the first line matching PATTERN.
wall_of() { grep -m1 -- "$2" "$1" | sed -n 's/.* wall \([0-9]*\)$/\1/p'; }

for round in $(seq 1 "$ROUNDS"); do
    cat >"$T/r$round.yaml" <<YAML
name: elastic-bench-$round
groups:
  - name: dp
    workers: 3
    resources: {gpu: 0, cpu: 0.1}
    strategy: SPREAD
    command: [$WORKER]
    env: {EW_STEPS: "1000000", EW_STEP_MS: "10", EW_BATCH: "3000", EW_DIM: "64", EW_LOG_EVERY: "100"}
    elastic: {min_workers: 2}
YAML
    id=$(submit "$T/r$round.yaml")
    wait_for 60 "job $id at step 200" logs_grep "$id" "^\[job$id-dp-2\] ew: step 200 "
    shim=$(cli -o json job "$id" | jqr ".workers[] | select(.name==\"job$id-dp-2\") | .pid")
    pid=$(pgrep -P "$shim")
    t0=$(ms_now)
    kill -9 "$pid"
    for r in 0 1; do
        wait_for 30 "rank $r's first step after the loss" logs_grep "$id" "^\[job$id-dp-$r\] ew: step [0-9]* completed"
    done
    wait_for 30 "job $id to grow back" logs_grep "$id" "^\[job$id-dp-2\] ew: joined rank 2/3 epoch [1-9]"
    join_w=$(cli logs "$id" | grep -m1 "^\[job$id-dp-2\] ew: joined rank 2/3 epoch [1-9]" | sed -n 's/.* wall \([0-9]*\)$/\1/p')
    for r in 0 1; do
        wait_for 30 "rank $r's first step at full size" full_step "$id" "$r" "$join_w"
    done
    cli logs "$id" >"$T/r$round.logs"
    cli -o json job "$id" >"$T/r$round.json"
    cli stop "$id" >/dev/null
    head_ms=$(( $(jqr '[.membership[] | select(.kind=="SHRUNK")][0].ts_ms' "$T/r$round.json") - t0 ))
    grew=$(jqr '[.membership[] | select(.kind=="GREW")][0].ts_ms' "$T/r$round.json")
    worst=-1
    for r in 0 1; do
        f="$T/r$round.r$r"
        grep "^\[job$id-dp-$r\] " "$T/r$round.logs" >"$f"
        fail_w=$(wall_of "$f" "ew: rank $r/3 epoch 0: ")
        rebuilt=$(grep -m1 "ew: rebuilt rank [0-9]/[0-9] " "$f") # /3 when the grow-back came first
        rebuilt_w=$(sed -n 's/.* wall \([0-9]*\)$/\1/p' <<<"$rebuilt")
        done_w=$(wall_of "$f" "ew: step [0-9]* completed")
        total=$((done_w - t0))
        if [ "$total" -gt "$worst" ]; then
            worst=$total
            split=("$((fail_w - t0))"
                "$(sed -n 's/.*agreement \([0-9]*\) ms.*/\1/p' <<<"$rebuilt")"
                "$(sed -n 's/.*rebuild \([0-9]*\) ms.*/\1/p' <<<"$rebuilt")"
                "$(sed -n 's/.*sync \([0-9]*\) ms.*/\1/p' <<<"$rebuilt")"
                "$((done_w - rebuilt_w))")
        fi
        full_w=$(grep "ew: step [0-9]* completed" "$f" | sed -n 's/.* wall \([0-9]*\)$/\1/p' |
            awk -v w="$join_w" '$1 >= w { print; exit }')
        gtotal=$((full_w - grew))
        [ "$r" = 0 ] || [ "$gtotal" -gt "${gmax:-0}" ] && gmax=$gtotal
    done
    add detect_ms "${split[0]}"; add head_ms "$head_ms"; add agreement_ms "${split[1]}"
    add rebuild_ms "${split[2]}"; add sync_ms "${split[3]}"; add redone_ms "${split[4]}"; add total_ms "$worst"
    add grow_join_ms "$((join_w - grew))"; add grow_total_ms "$gmax"
    gmax=0
    printf 'round %d: detect %s, head %s, agreement %s, rebuild %s, sync %s, redone %s -> total %s ms; grow: join %s, first full step %s ms\n' \
        "$round" "${split[0]}" "$head_ms" "${split[1]}" "${split[2]}" "${split[3]}" "${split[4]}" "$worst" \
        "$((join_w - grew))" "$gtotal"
done

json=$(
    printf '{"rounds":%d,"results":{' "$ROUNDS"
    first=1
    for k in detect_ms head_ms agreement_ms rebuild_ms sync_ms redone_ms total_ms grow_join_ms grow_total_ms; do
        printf '%s"%s":[%s]' "$([ $first = 1 ] || echo ,)" "$k" "${R[$k]}"
        first=0
    done
    printf '}}\n'
)
printf '\n%-14s %8s %8s %8s\n' "" min median max
for k in detect_ms head_ms agreement_ms rebuild_ms sync_ms redone_ms total_ms grow_join_ms grow_total_ms; do
    jq -r --arg k "$k" '.results[$k] | sort | "\($k) \(.[0]) \(.[length / 2 | floor]) \(.[-1])"' <<<"$json" |
        awk '{printf "%-14s %8s %8s %8s\n", $1, $2, $3, $4}'
done
[ -z "$OUT" ] || echo "$json" >"$OUT"
