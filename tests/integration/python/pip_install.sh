#!/usr/bin/env bash
# `pip install ./python` works offline (no compiler, no dependency) into a
# virtual environment, and the installed package, run from outside the
# checkout, finds libtroupe through TROUPE_LIBRARY and talks to a head;
# without it (and no installed libtroupe) the import fails saying what it
# tried and what to set.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/py_lib.bash"
"$PY" -m venv --system-site-packages "$T/venv" >"$T/venv.log" 2>&1 || fail "venv: $(cat "$T/venv.log")"
# A copy: pip builds in the source folder, and the checkout stays clean.
cp -r "$TROUPE_PY_SRC" "$T/src"
"$T/venv/bin/pip" install --no-build-isolation --no-index "$T/src" >"$T/pip.log" 2>&1 || fail "pip install: $(cat "$T/pip.log")"
pass "pip install ./python: $(grep -o 'Successfully installed.*' "$T/pip.log")"
start_cluster
cd "$T"
out=$(pyrun env -u PYTHONPATH "$T/venv/bin/python" -c '
import troupe
print(troupe.__file__)
print(sorted(n["name"] for n in troupe.Client().nodes()))') || fail "installed package: $out"
echo "$out" | grep -q "^$T/venv/lib/python3.*/site-packages/troupe/__init__.py" || fail "not the installed copy: $out"
echo "$out" | grep -q "\['na', 'nb', 'nc'\]" || fail "nodes: $out"
pass "the installed package lists the head's nodes: $(echo "$out" | tail -1)"
err=$(pyrun env -u PYTHONPATH -u TROUPE_LIBRARY PKG_CONFIG_PATH=/nonexistent "$T/venv/bin/python" -c 'import troupe' 2>&1) &&
    { ldconfig -p | grep_all libtroupe || fail "imported without a libtroupe: $err"; }
echo "$err" | grep -q "ImportError: libtroupe not found (tried: .*): set TROUPE_LIBRARY to the path of libtroupe.so" ||
    ldconfig -p | grep_all libtroupe || fail "no libtroupe: $err"
pass "without TROUPE_LIBRARY and no installed libtroupe: $(echo "$err" | tail -1 | cut -c1-160)"
