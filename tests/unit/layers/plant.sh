#!/usr/bin/env bash
# plant.sh CC - unit.layers.plant: scripts/deps_check.py finds a circle of
# calls through three files and fails past --max-cycle 2, names the calls
# that tie it, and lets a two-file pair and a one-way chain pass. The files
# are made here (compiled with CC), so the check is tested on object files
# like the head's, without touching them.
set -euo pipefail
cc=${1:?usage: plant.sh CC}
here=$(cd "$(dirname "$0")" && pwd)
check=$here/../../../scripts/deps_check.py
command -v nm >/dev/null || { echo "SKIP: nm (binutils) not found"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# unit [DIR/]NAME CALLS...: NAME.c (in objs/DIR) defines NAME_fn calling
# each CALLS_fn once (CALLS named without their folder).
unit() {
    local path=$1 name=${1##*/} body="" decl=""
    shift
    for c in "$@"; do
        decl+="void ${c}_fn(void);"
        body+="${c}_fn();"
    done
    mkdir -p "$(dirname "$tmp/objs/$path")"
    printf '%s\nvoid %s_fn(void);\nvoid %s_fn(void) { %s }\n' "$decl" "$name" "$name" "$body" >"$tmp/$name.c"
    "$cc" -c -o "$tmp/objs/$path.o" "$tmp/$name.c"
}
run() { python3 "$check" --objects "$tmp/objs" --max-cycle 2 "$@" >"$tmp/out" 2>&1; }
fail() { echo "FAIL: $*"; cat "$tmp/out"; exit 1; }

# One way down: rpc -> svc -> core. Passes, no circle.
unit core
unit svc core
unit rpc svc core
run || fail "a one-way chain was refused"
grep -q "0 circle(s)" "$tmp/out" || fail "a one-way chain was reported as a circle"

# A back-call from the bottom to the top closes a circle of three: refused,
# with the call that closed it named.
unit core rpc
if run; then fail "a circle of three files passed --max-cycle 2"; fi
grep -q "circle of 3: core rpc svc" "$tmp/out" || fail "the circle of three was not listed"
grep -q "core -> rpc: rpc_fn" "$tmp/out" || fail "the back-call core -> rpc was not named"

# A pair that call each other, with the rest one way: allowed at 2.
unit core
unit svc core rpc
run || fail "a circle of two files was refused at --max-cycle 2"
grep -q "circle of 2: rpc svc" "$tmp/out" || fail "the pair was not listed"

# Layers: a call from core/ up into rpc/ fails with --layers even with no
# circle, and is named; calls down pass.
rm -rf "$tmp/objs"
unit rpc/handler store
unit core/store
run --layers core,rpc || fail "calls down were refused"
unit rpc/handler
unit core/store handler
run || fail "a one-way call failed without --layers"
grep -q "0 circle(s)" "$tmp/out" || fail "a one-way call was reported as a circle"
if run --layers core,rpc; then fail "a call from core up into rpc passed --layers core,rpc"; fi
grep -q "call up: core/store -> rpc/handler: handler_fn" "$tmp/out" || fail "the call up was not named"

# A build tree keeps the objects of files since moved or deleted: they are
# not read. Here core/store.o (calling rpc/handler) has no source any more,
# so the circle it would close is not there.
rm -rf "$tmp/src" "$tmp/build"
mkdir -p "$tmp/src/server/core" "$tmp/src/server/rpc" "$tmp/build/server/CMakeFiles/h.dir"
echo "CMAKE_HOME_DIRECTORY:INTERNAL=$tmp/src" >"$tmp/build/CMakeCache.txt"
unit rpc/handler store
unit core/store handler
mkdir -p "$tmp/build/server/CMakeFiles/h.dir/core" "$tmp/build/server/CMakeFiles/h.dir/rpc"
for f in core/store rpc/handler; do mv "$tmp/objs/$f.o" "$tmp/build/server/CMakeFiles/h.dir/$f.c.o"; done
touch "$tmp/src/server/core/store.c" "$tmp/src/server/rpc/handler.c"
python3 "$check" "$tmp/build" server --layers server/core,server/rpc >"$tmp/out" 2>&1 &&
    fail "a call up between two built files passed"
rm "$tmp/src/server/core/store.c"
python3 "$check" "$tmp/build" server --layers server/core,server/rpc >"$tmp/out" 2>&1 ||
    fail "an object whose source is gone was read"
grep -q "1 files" "$tmp/out" || fail "the object of a gone source was counted"

# Nothing to read: a clear error, not a pass.
rm -rf "$tmp"/objs/*
if run; then fail "an empty object folder passed"; fi
grep -q "no object files" "$tmp/out" || fail "no message for an empty object folder"
echo "ok: deps_check refuses a circle of 3 and a call up a layer, names the calls, allows a pair"
