#!/usr/bin/env bash
# The README's "Using it" commands, run verbatim after an install into a
# temporary prefix, in a copy of the clone's examples/ (as after
# scripts/demo.sh): the example job runs by hand through the installed
# troupe-train, generating its data. The one change: the example trains 6
# steps instead of 60, to keep the test short. Also checks that the refusal
# text the README quotes is the head's.
source "$(dirname "$0")/../lib.sh"
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
cmake --install "$TROUPE_BIN" --prefix "$T/install" >"$T/install.log" 2>&1 || fail "install: $(tail "$T/install.log")"
cp -r "$SRC/examples" "$T/examples"
rm -f "$T"/examples/demo/data.tok*
sed -i -e 's/^  steps: 60/  steps: 6/' -e 's/^  every: 20/  every: 3/' "$T/examples/demo/train.yaml"
grep -q "steps: 6$" "$T/examples/demo/train.yaml" || fail "could not shorten the example's training"

# The first sh block under "## Using it".
awk '/^## Using it/ { s = 1 } s && /^```sh/ { b = 1; next } b && /^```/ { exit } b' "$SRC/README.md" >"$T/using.sh"
[ "$(wc -l <"$T/using.sh")" -ge 10 ] || fail "README 'Using it' block not found: $(cat "$T/using.sh")"

# Run it line by line in one shell, in $T with HOME=$T (its ~/.troupe) and this
# test's port (TROUPE_LISTEN for the head, TROUPE_HEAD for agent and CLI). After
# a line that starts a daemon, wait (with a deadline) as a person would.
{
    echo "set -e; cd '$T'"
    n=0
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        n=$((n + 1))
        printf 'echo %q\n%s\n' "+ $line" "$line"
        case $line in
        troupe-head*)
            echo "echo \$! >>'$T/daemons'"
            echo "for i in \$(seq 100); do troupe status >/dev/null 2>&1 && break; sleep 0.1; done" ;;
        troupe-node*)
            echo "echo \$! >>'$T/daemons'"
            echo "for i in \$(seq 100); do [ \"\$(troupe -o json nodes --alive | jq .count)\" = 1 ] && break; sleep 0.1; done" ;;
        esac
    done <"$T/using.sh"
} >"$T/run.sh"
set +e
env HOME="$T" TROUPE_LISTEN="$HEAD" TROUPE_HEAD="$HEAD" PATH="/usr/bin:/bin" timeout 150 bash "$T/run.sh" >"$T/run.out" 2>&1
rc=$?
set -e
while read -r p; do PIDS+=("$p"); done <"$T/daemons"
[ $rc = 0 ] || fail "README commands failed (rc=$rc): $(tail -30 "$T/run.out")"
grep -q "job 1 SUCCEEDED" "$T/run.out" || fail "the example job did not succeed: $(tail -30 "$T/run.out")"
grep -q "step=6/6 loss=" "$T/run.out" || fail "the example job did not train: $(tail -30 "$T/run.out")"
[ -s "$T/examples/demo/data.tok" ] || fail "the example job did not generate its data"
pass "README 'Using it' ran verbatim: example job SUCCEEDED with the installed troupe-train"

# What the user saw while job 1 ran: placement before any worker output, the
# final state once, then a summary of the run.
# grep -m1, not `grep | head -1`: under pipefail a grep still writing when
# head has quit dies of SIGPIPE and the test failed with rc 141 (under load,
# about 1 run in 3; the worker output has hundreds of matching lines).
started=$(grep -m1 -n "job 1 STARTED" "$T/run.out" | cut -d: -f1)
placed=$(grep -m1 -n "job 1   job1-policy-0 .* rank 0 on .*, GPUs [0-9]" "$T/run.out" | cut -d: -f1)
first_out=$(grep -m1 -n "^\[job1-" "$T/run.out" | cut -d: -f1)
[ -n "$started" ] && [ -n "$placed" ] && [ -n "$first_out" ] && [ "$started" -lt "$first_out" ] &&
    [ "$placed" -lt "$first_out" ] || fail "placement not before the output (lines $started $placed $first_out): $(head -30 "$T/run.out")"
[ "$(grep -c "job 1 SUCCEEDED" "$T/run.out")" = 1 ] || fail "final state not said once: $(grep "job 1 SUCC" "$T/run.out")"
grep -qE "job 1 group policy: 6 steps, final loss [0-9.]+, mean [0-9]+ tokens/s per worker" "$T/run.out" ||
    fail "no run summary: $(tail -8 "$T/run.out")"
grep -qE "job 1 time: queued [0-9.]+ s, ran [0-9.]+ s, 0 restarts" "$T/run.out" || fail "no phase times: $(tail -8 "$T/run.out")"
pass "placement before the output, final state once, run summary: $(grep "job 1 group policy" "$T/run.out")"

# The refusal text the README quotes is the one the head prints.
quote=$(grep -o 'refused at$' "$SRC/README.md" >/dev/null && sed -n '/refused at$/{n;p}' "$SRC/README.md" | grep -o '(`[^`]*`)' | tr -d '()`')
[ -n "$quote" ] || fail "README refusal quote not found"
cat >"$T/big.yaml" <<YAML
name: big
cluster: {nodes: [16]}
groups: [{name: policy, workers: 1, resources: {gpu: 16}, command: [true]}]
YAML
set +e; out=$("$T/install/bin/troupe" submit "$T/big.yaml" 2>&1); rc=$?; set -e
[ $rc = 1 ] || fail "impossible job: rc=$rc $out"
grep -qF "$quote" <<<"$out" || fail "README says '$quote', head says '$out'"
pass "README's refusal text is the head's: $out"
