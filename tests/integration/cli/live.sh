#!/usr/bin/env bash
# The follow view of `troupe submit` / `troupe logs -f` for many workers: by
# default on a terminal (and with --live anywhere) one line per group —
# workers running, latest step, loss, tokens/s of the group, slowest rank —
# instead of the interleaved output, which --raw (and a pipe, by default)
# still shows; the final state once, the run summary, and after a failure the
# last lines of output the view had hidden.
source "$(dirname "$0")/../lib.sh"
start_head
start_node na 8xH200:141GB --stop-grace-ms 1000
wait_for 10 "1 node ALIVE" nodes_alive 1

# Rank 2 of policy steps at half the pace and a third of the rate (12 steps
# in the time the others take 24); gen prints no step lines at all.
cat >"$T/job.yaml" <<'YAML'
name: live
cluster: {nodes: [8]}
groups:
  - name: policy
    workers: 3
    resources: {gpu: 1}
    command: [sh, -c, 'n=24; p=0.15; r=900; [ "$RANK" = 2 ] && { n=12; p=0.3; r=300; }; i=1; while [ $i -le $n ]; do echo "step=$i/$n loss=$((40 - i)).5 tok_s=$r"; i=$((i+1)); sleep $p; done']
  - name: gen
    workers: 1
    resources: {gpu: 1}
    command: [sh, -c, 'echo generating; sleep 2']
YAML

# --live on a pipe: status lines, not the workers' lines.
cli submit --live "$T/job.yaml" >"$T/out" 2>"$T/err" || fail "submit --live: $(tail -5 "$T/err")"
grep -q '^\[job' "$T/out" && fail "--live printed the workers' output: $(head -3 "$T/out")"
grep -qE "^troupe: job 1 policy: [0-3]/3 running, step [0-9]+/24, loss [0-9.]+, [0-9.]+k? tokens/s, slowest rank 2 \(step [0-9]+, 300 tokens/s on na\)$" "$T/err" ||
    fail "no policy status line naming rank 2 as the slowest: $(grep 'job 1 policy' "$T/err" | tail -3)"
grep -qE "^troupe: job 1 gen: [01]/1 running, no step reported yet$" "$T/err" || fail "no gen line: $(grep 'job 1 gen' "$T/err")"
[ "$(grep -c "job 1 SUCCEEDED" "$T/err")" = 1 ] || fail "final state not said once"
grep -qE "^troupe: job 1 group policy: 24 steps, final loss 16.5000, mean [0-9]+ tokens/s per worker$" "$T/err" ||
    fail "no run summary: $(tail -5 "$T/err")"
pass "--live on a pipe: $(grep 'job 1 policy:' "$T/err" | tail -1)"

# A pipe without a flag: the raw output, as before (scripts keep working).
cli submit "$T/job.yaml" >"$T/out" 2>"$T/err" || fail "submit: $(tail -5 "$T/err")"
[ "$(grep -c '^\[job2-policy-[0-2]\] step=' "$T/out")" = 60 ] || fail "raw output on a pipe: $(head -3 "$T/out")"
grep -q "job 2 policy:" "$T/err" && fail "status lines on a pipe without --live"
pass "a pipe without a flag gets the raw output (60 step lines)"

# A terminal (script(1) gives one): the block redrawn in place, no raw lines;
# --raw there shows the lines.
script -qec "$CLI_BIN --head $HEAD submit $T/job.yaml" /dev/null >"$T/tty" </dev/null || fail "submit on a tty: $(tail -c 400 "$T/tty")"
grep -qa $'\033\[[0-9]*A\033\[J' "$T/tty" || fail "no in-place redraw on a terminal: $(tail -c 400 "$T/tty" | cat -v)"
grep -qa "  policy: 3/3 running, step" "$T/tty" || fail "no group line on a terminal: $(tail -c 600 "$T/tty" | cat -v)"
grep -qa "step=3/" "$T/tty" && fail "raw worker lines on a terminal without --raw"
grep -qa "job 3 SUCCEEDED" "$T/tty" || fail "no final state on the terminal"
script -qec "$CLI_BIN --head $HEAD submit --raw $T/job.yaml" /dev/null >"$T/tty" </dev/null || fail "submit --raw on a tty"
grep -qa "\[job4-policy-0\] step=3/24" "$T/tty" || fail "--raw on a terminal hid the output: $(tail -c 400 "$T/tty" | cat -v)"
pass "terminal: live block redrawn in place; --raw shows the workers' lines"

# A failure: the last lines the view hid are shown with the final state.
cat >"$T/bad.yaml" <<'YAML'
name: bad
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'echo "step=1/5 loss=2.0 tok_s=10"; echo "boom: the data file is missing" >&2; exit 3']}]
YAML
rc=0; cli submit --live "$T/bad.yaml" >"$T/out" 2>"$T/err" || rc=$?
[ "$rc" = 1 ] || fail "a failed job: exit $rc, want 1"
grep -q "job 5 FAILED" "$T/err" || fail "no FAILED line: $(tail -5 "$T/err")"
grep -q "the last 1 line of output (all: troupe logs 5)" "$T/err" && grep -q "boom: the data file is missing" "$T/err" ||
    fail "the hidden output's tail not shown after the failure: $(tail -8 "$T/err")"
pass "after a failure the live view shows the hidden output's last lines"

# logs -f takes the same flags; --worker shows that worker's output as is.
cli logs 1 -f --live >"$T/out" 2>"$T/err" || fail "logs -f --live"
grep -q "job 1 group policy: 24 steps" "$T/err" || fail "logs -f --live: no summary: $(tail -3 "$T/err")"
cli logs 1 -f --worker job1-policy-2 >"$T/out" 2>"$T/err" || fail "logs -f --worker"
[ "$(grep -c '^\[job1-policy-2\] step=' "$T/out")" = 12 ] || fail "logs -f --worker: $(head -3 "$T/out")"
pass "logs -f --live and --worker"
