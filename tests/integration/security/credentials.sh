#!/usr/bin/env bash
# Scoped credentials through real processes: the admin credential from a file,
# minted user and node credentials, a worker credential that reaches only its
# own job and stops working when the job ends, refusals that name the missing
# scope, and no admin or node credential in any worker's environment or
# command line.
source "$(dirname "$0")/../lib.sh"

umask 077
ADMIN=adm-$RANDOM$RANDOM
printf '%s\n' "$ADMIN" >"$T/admin.tok"
unset TROUPE_TOKEN
# --dead-after 50 (lease 3.75 s): liveness is not under test. With the
# default window (lease 400 ms) a starved agent lost its lease again and
# again under ctest -j6, fenced the probe worker and came back as a new node.
"$HEAD_BIN" --listen "$HEAD" --state-dir "$T/state" --token-file "$T/admin.tok" --heartbeat-ms 100 \
    --dead-after 50 >>"$T/head.log" 2>&1 &
PIDS+=($!)
wait_for 10 "head with a token file" "$CLI_BIN" --token-file "$T/admin.tok" status
admin() { "$CLI_BIN" --token-file "$T/admin.tok" "$@"; }
# expect_denied WHAT CODE TEXT CMD...: CMD fails with CODE and TEXT on stderr.
expect_denied() {
    local what=$1 code=$2 text=$3 out rc; shift 3
    set +e; out=$("$@" 2>&1); rc=$?; set -e
    [ $rc -ne 0 ] || fail "$what: accepted"
    grep -q "$code" <<<"$out" && grep -qF "$text" <<<"$out" || fail "$what: expected $code '$text', got: $out"
}

# Minted credentials: printed once on stdout, only hashes on the head's disk.
admin token create --scope user >"$T/user.tok"
admin token create --scope node >"$T/node.tok"
admin -o json token create --scope node --ttl 1s >"$T/short.json"
for f in user node; do grep -q '^tr1\.' "$T/$f.tok" || fail "$f token: $(cat "$T/$f.tok")"; done
! grep -qF "$(cut -d. -f4 "$T/user.tok")" "$T/state/credentials" || fail "secret stored in clear"
[ "$(stat -c %a "$T/state/credentials")" = 600 ] && [ "$(stat -c %a "$T/state/worker.key")" = 600 ] ||
    fail "credential files not 0600"
pass "token create: user and node credentials minted; head keeps only hashes (0600)"

user() { "$CLI_BIN" --token-file "$T/user.tok" "$@"; }
user status >/dev/null || fail "user credential refused"
expect_denied "user mints" PERMISSION_DENIED "needs scope admin; this credential has scope user" \
    user token create --scope user
expect_denied "node lists jobs" PERMISSION_DENIED "ListJobs needs scope user or admin; this credential has scope node" \
    "$CLI_BIN" --token-file "$T/node.tok" jobs
jq -r .token "$T/short.json" >"$T/short.tok"
past() { [ "$(date +%s%3N)" -gt "$1" ]; }
wait_for 10 "the 1 s credential's expiry ($(jq .expires_ms "$T/short.json"))" past "$(jq .expires_ms "$T/short.json")"
expect_denied "expired node credential" UNAUTHENTICATED "credential" "$CLI_BIN" --token-file "$T/short.tok" status
pass "scopes: user cannot mint, node cannot list jobs, an expired credential is refused"

# Agents with node credentials from files; another node credential cannot take
# over a registered node's name.
"$NODE_BIN" --head "$HEAD" --name n1 --fake-gpus 4 --state-dir "$T/n1" --token-file "$T/node.tok" \
    --stop-grace-ms 500 >>"$T/node-n1.log" 2>&1 &
PIDS+=($!)
wait_for 10 "n1 ALIVE" bash -c "'$CLI_BIN' --token-file '$T/user.tok' -o json nodes | jq -e '.count == 1'"
admin token create --scope node >"$T/node2.tok"
set +e
out=$(timeout 10 "$NODE_BIN" --head "$HEAD" --name n1 --fake-gpus 2 --state-dir "$T/n1b" \
    --token-file "$T/node2.tok" 2>&1); rc=$?
set -e
[ $rc -eq 1 ] && grep -q PERMISSION_DENIED <<<"$out" && grep -q "registered by another credential" <<<"$out" ||
    fail "node name takeover: rc=$rc out=$out"
pass "node credentials: agent registers from --token-file; another node credential cannot take over n1"

# Two jobs; the first one's worker tries its credential on both.
mkdir -p "$T/w"
cat >"$T/other.yaml" <<YAML
name: other
cluster: {nodes: [1]}
groups:
  - {name: g, workers: 1, resources: {gpu: 1}, command: [sleep, '300']}
YAML
other=$(user submit --no-wait "$T/other.yaml")
cat >"$T/probe.yaml" <<YAML
name: probe
cluster: {nodes: [1]}
groups:
  - name: g
    workers: 1
    resources: {gpu: 1}
    command: [sh, -c, 'env > $T/w/env; cp "\$TROUPE_CREDENTIALS" $T/w/cred; stat -c %a "\$TROUPE_CREDENTIALS" > $T/w/mode;
      $CLI_BIN job \$TROUPE_JOB > $T/w/own.out 2>&1; echo \$? > $T/w/own.rc;
      $CLI_BIN job $other > $T/w/other.out 2>&1; echo \$? > $T/w/other.rc;
      $CLI_BIN stop $other > $T/w/stop.out 2>&1; echo \$? > $T/w/stop.rc;
      touch $T/w/done; sleep 300']
YAML
probe=$(user submit --no-wait "$T/probe.yaml")
wait_for 15 "the probe worker's checks" test -e "$T/w/done"
[ "$(cat "$T/w/own.rc")" = 0 ] || fail "worker could not read its own job: $(cat "$T/w/own.out")"
[ "$(cat "$T/w/other.rc")" != 0 ] && grep -q "PERMISSION_DENIED.*worker credential of job $probe cannot act on job $other" \
    "$T/w/other.out" || fail "worker read another job: $(cat "$T/w/other.out")"
[ "$(cat "$T/w/stop.rc")" != 0 ] && grep -q "StopJob needs scope user or admin; this credential has scope worker" \
    "$T/w/stop.out" || fail "worker stop of another job: $(cat "$T/w/stop.out")"
[ "$(user -o json job "$other" | jq -r .state)" = RUNNING ] || fail "the other job did not survive"
[ "$(cat "$T/w/mode")" = 600 ] || fail "credential file mode $(cat "$T/w/mode")"
pass "worker credential: reads its own job; reading or stopping job $other is PERMISSION_DENIED naming the scope"

# No worker holds the admin or a node credential: not in env, not on a command line.
! grep -q '^TROUPE_TOKEN=' "$T/w/env" || fail "TROUPE_TOKEN in the worker environment"
grep -q '^TROUPE_CREDENTIALS=' "$T/w/env" || fail "no TROUPE_CREDENTIALS in the worker environment"
node_secret=$(cut -d. -f4 "$T/node.tok")
checked=0
for f in $(grep -lzx "TROUPE_JOB=[0-9]*" /proc/[0-9]*/environ 2>/dev/null || true); do
    d=${f%/environ}
    grep -qzxF "TROUPE_HEAD=$HEAD" "$f" 2>/dev/null || continue
    for s in "$ADMIN" "$node_secret"; do
        ! grep -qaF "$s" "$d/environ" "$d/cmdline" 2>/dev/null || fail "a credential in $d environ/cmdline"
    done
    checked=$((checked + 1))
done
[ $checked -ge 2 ] || fail "found only $checked worker processes to check"
! grep -qF "$ADMIN" "$T/w/env" && ! grep -qF "$node_secret" "$T/w/env" || fail "credential in worker env"
pass "no admin or node credential in the environment or command line of $checked worker processes"

# The job ends: its worker credential stops working.
user stop "$probe" >"$T/stop.log" 2>&1 || fail "stop $probe: $(cat "$T/stop.log")"
wait_for 15 "job $probe STOPPED" bash -c "[ \"\$('$CLI_BIN' --token-file '$T/user.tok' -o json job $probe | jq -r .state)\" = STOPPED ]"
expect_denied "worker credential after the job ended" UNAUTHENTICATED "credential" \
    "$CLI_BIN" --token-file "$T/w/cred" job "$probe"
pass "worker credential refused once job $probe ended"

# Revocation takes effect at once; secrets never reach a log.
uid=$(admin -o json token create --scope user | tee "$T/u2.json" | jq -r .id)
jq -r .token "$T/u2.json" >"$T/u2.tok"
"$CLI_BIN" --token-file "$T/u2.tok" status >/dev/null || fail "fresh user token refused"
admin token revoke "$uid" >/dev/null
expect_denied "revoked credential" UNAUTHENTICATED "credential" "$CLI_BIN" --token-file "$T/u2.tok" status
for s in "$ADMIN" "$node_secret" "$(cut -d. -f4 "$T/user.tok")"; do
    ! grep -qF "$s" "$T"/*.log || fail "a credential reached a log"
done
pass "revoke: refused at once; no credential in any log"
