#!/usr/bin/env bash
# bench/hosts/ab.sh BEFORE AFTER OUT_DIR [PAIRS] [MODE]
#
# Alternated before/after runs of bench/hosts/run.sh at 10,000 agents (NODES=N
# for another count): each
# build (a build tree, or a staged copy with server/, client/, lib/ and
# bench/hosts/) runs with its own head and its own simulator, PAIRS times
# (default 2), before first. MODE: "shared" (default) pins everything to
# CPUs 0,1 (as on a 2-core machine); "sep" puts the head alone on 0,1 and
# the simulator on 2-5 (a lent host with more CPUs). Each build's commit is
# read from its "commit" file where there is one. Writes
# OUT_DIR/hosts-COMMIT-MODE-rN.json and prints each run's table row.
# LIBS=DIR adds DIR to LD_LIBRARY_PATH (the Debian libraries staged for a
# lent machine). The lent-host runs of bench/RESULTS.md ("Many hosts") used it.
set -uo pipefail
before=$(cd "${1:?usage: ab.sh BEFORE AFTER OUT_DIR [PAIRS] [MODE]}" && pwd)
after=$(cd "${2:?usage: ab.sh BEFORE AFTER OUT_DIR [PAIRS] [MODE]}" && pwd)
out=${3:?usage: ab.sh BEFORE AFTER OUT_DIR [PAIRS] [MODE]}
pairs=${4:-2}
mode=${5:-shared}
case $mode in shared | sep) ;; *) echo "ab.sh: MODE is shared or sep, not '$mode'" >&2; exit 2 ;; esac
mkdir -p "$out"
here=$(dirname "$0")
name() { if [ -f "$1/commit" ]; then cat "$1/commit"; else basename "$1"; fi; }
one() { # LABEL DIR
    local lib=$2/lib
    [ -d "$lib" ] || lib=$2/client
    echo "=== $1 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    if [ "$mode" = sep ]; then
        HEAD_CPUS=0,1 LD_LIBRARY_PATH=$lib${LIBS:+:$LIBS} taskset -c 2-5 timeout 150 \
            bash "$here/run.sh" "$2" "$out/hosts-$1.json" "${NODES:-10000}" --warmup-s 8 --measure-s 20 --label "$1"
    else
        LD_LIBRARY_PATH=$lib${LIBS:+:$LIBS} taskset -c 0,1 timeout 150 \
            bash "$here/run.sh" "$2" "$out/hosts-$1.json" "${NODES:-10000}" --warmup-s 8 --measure-s 20 --label "$1"
    fi 2>&1 | grep -A1 "^$1 " || echo "$1: no table (timed out or failed)"
}
echo "host: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$pairs"); do
    one "$(name "$before")-$mode-r$r" "$before"
    one "$(name "$after")-$mode-r$r" "$after"
done
