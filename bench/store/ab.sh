#!/bin/sh
# ab.sh - bench/store's run.sh for two builds of troupe (before / after a
# change) and PyTorch's TCPStore in the same run, alternated.
#
#   bench/store/ab.sh BEFORE_BUILD AFTER_BUILD OUT_DIR [RANKS] [ROUNDS] [MODES]
#
# For each round and each connect mode (MODES, default seq,burst): run.sh
# with one round over RANKS (default 1024,4096) for the after build with
# TCPStore beside it, and for the before build alone (TCPSTORE=0); which
# build goes first alternates between rounds. BUDGET_S (default 0: none)
# stops starting new runs once that many seconds have passed, so a lent
# machine's time limit ends the run between runs, not inside one. Results:
# OUT_DIR/rROUND-MODE-{before,after}/ as run.sh writes them, and
# OUT_DIR/ab-summary.txt, every run's summary in order.
set -eu
if [ $# -lt 3 ]; then
    echo "usage: $0 BEFORE_BUILD AFTER_BUILD OUT_DIR [RANKS] [ROUNDS] [MODES]" >&2
    exit 2
fi
before=$1 after=$2 out=$3 ranks=${4:-1024,4096} rounds=${5:-2} modes=${6:-seq,burst}
here=$(cd "$(dirname "$0")" && pwd)
budget=${BUDGET_S:-0}
start=$(date +%s)
mkdir -p "$out"
summary=$out/ab-summary.txt
: >"$summary"

over_budget() { [ "$budget" -gt 0 ] && [ $(($(date +%s) - start)) -ge "$budget" ]; }

one() { # LABEL BUILD MODE ROUND TCPSTORE
    if over_budget; then
        echo "budget of $budget s spent: $1 $3 round $4 not run" | tee -a "$summary"
        return 0
    fi
    echo "== round $4, connect=$3, $1 ($(cat "$2/../commit" 2>/dev/null || echo "$2"))" | tee -a "$summary"
    TCPSTORE=$5 CONNECT=$3 sh "$here/run.sh" "$2" "$out/r$4-$3-$1" "$ranks" 1 2>&1 | tee -a "$summary" ||
        echo "run failed: $1 $3 round $4" | tee -a "$summary"
}

r=1
while [ "$r" -le "$rounds" ]; do
    for m in $(echo "$modes" | tr ',' ' '); do
        if [ $((r % 2)) -eq 1 ]; then
            one after "$after" "$m" "$r" 1
            one before "$before" "$m" "$r" 0
        else
            one before "$before" "$m" "$r" 0
            one after "$after" "$m" "$r" 1
        fi
    done
    r=$((r + 1))
done
echo "ab.sh: $(($(date +%s) - start)) s" | tee -a "$summary"
