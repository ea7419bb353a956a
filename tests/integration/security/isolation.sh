#!/usr/bin/env bash
# Workers cannot act as other jobs or as the node, through real processes:
#   - an agent started as root runs each worker under a uid of its own (a gid
#     per job): a worker of job 2 cannot read job 1's credential nor the node
#     credential (EACCES), and the agent tightened a world-readable token file;
#   - a worker credential speaks for its own worker only: job 1's rank 0
#     credential, stolen (copied by root), cannot report a failure as rank 1,
#     and job 2's cannot report into job 1 (PERMISSION_DENIED);
#   - a node credential registers only its node: one minted with --node n1
#     cannot register n2, one without --node only the first name it registered;
#   - a user credential stops and deletes only its own jobs; an admin
#     credential any; troupe job shows the owner;
#   - an agent without root (run as nobody) says so at start and in troupe
#     nodes, and refuses jobs with a reason that names --shared-uid.
# Needs root (exit 77 = skipped otherwise).
source "$(dirname "$0")/../lib.sh"

[ "$(id -u)" = 0 ] || { echo "SKIP: the agent separates workers only when it runs as root"; exit 77; }
unset TROUPE_SHARED_UID # the isolation itself is under test (lib.sh sets it)
umask 077
chmod 711 "$T" # workers reach $T/wd (theirs to write) by path, nothing else here
# ... which needs every directory above $T to let other uids through.
d=$(dirname "$T")
while [ "$d" != / ]; do
    [ "$(( 0$(stat -c %a "$d") & 1 ))" = 1 ] ||
        skip_test "$d (above the test's dir) does not let other uids through (mode $(stat -c %a "$d")): workers under their own uids could not reach their workdir; use a TMPDIR others can traverse"
    d=$(dirname "$d")
done
mkdir -m 1777 "$T/wd"
# A worker runs rawcall under its own uid: a copy here, for the build tree
# may lie where other uids cannot go (a checkout in root's 0700 home).
install -m 755 "$RAWCALL" "$T/rawcall"

printf '%s\n' "adm-$RANDOM$RANDOM" >"$T/admin.tok"
unset TROUPE_TOKEN
"$HEAD_BIN" --listen "$HEAD" --state-dir "$T/state" --token-file "$T/admin.tok" --heartbeat-ms 100 \
    --dead-after 50 >>"$T/head.log" 2>&1 &
PIDS+=($!)
wait_for 10 "head with a token file" "$CLI_BIN" --token-file "$T/admin.tok" status
admin() { "$CLI_BIN" --token-file "$T/admin.tok" "$@"; }
cli() { admin "$@"; } # lib.sh's helpers (is_state, job_state) ask as the admin
# expect_code WHAT CODE TEXT OUTPUT: OUTPUT names CODE and contains TEXT.
expect_code() {
    grep -q "$2" <<<"$4" && grep -qF -- "$3" <<<"$4" || fail "$1: expected $2 '$3', got: $4"
}

# ---- the agent, root, default isolation ------------------------------------
admin token create --scope node --node n1 >"$T/node.tok"
chmod 644 "$T/node.tok" # left readable: the agent must close it
"$NODE_BIN" --head "$HEAD" --name n1 --fake-gpus 4 --state-dir "$T/n1" --token-file "$T/node.tok" \
    --worker-id-dir "$T/ids" --stop-grace-ms 500 >>"$T/node-n1.log" 2>&1 &
PIDS+=($!)
wait_for 10 "n1 ALIVE" bash -c "'$CLI_BIN' --token-file '$T/admin.tok' -o json nodes | jq -e '.count == 1'"
[ "$(stat -c %a "$T/node.tok")" = 600 ] || fail "token file left $(stat -c %a "$T/node.tok")"
iso=$(admin -o json nodes | jqr '.nodes[0].isolation')
[[ "$iso" == "per-worker uid "* ]] || fail "n1 isolation: '$iso'"
[ "$(stat -c %a "$T/n1")" = 711 ] || fail "state dir mode $(stat -c %a "$T/n1")"
pass "root agent: per-worker uids ('$iso'), token file tightened to 0600, state dir traverse-only"

cat >"$T/victim.yaml" <<YAML
name: victim
workdir: $T/wd
cluster: {nodes: [2]}
groups:
  - {name: g, workers: 2, resources: {gpu: 1}, command: [sh, -c, 'id -u > uid1.\$RANK; id -g > gid1.\$RANK; exec sleep 300']}
YAML
admin submit --no-wait "$T/victim.yaml" >/dev/null
cred1=$T/n1/credentials/1-0-job1-g-0/token
wait_for 10 "job 1's workers up" bash -c "[ -s '$T/wd/uid1.0' ] && [ -s '$T/wd/uid1.1' ] && [ -f '$cred1' ]"
cat >"$T/thief.yaml" <<YAML
name: thief
workdir: $T/wd
cluster: {nodes: [1]}
groups:
  - name: g
    workers: 1
    resources: {gpu: 1}
    command: [sh, -c, 'id -u > uid2; cat $cred1 > steal.out 2>&1; echo \$? > steal.rc;
      cat $T/node.tok > node.out 2>&1; echo \$? > node.rc; ls $T/n1 > ls.out 2>&1; echo \$? > ls.rc;
      TROUPE_TOKEN=\$(cat "\$TROUPE_CREDENTIALS") $T/rawcall $HEAD report-failure 1 job1-g-0 0 > into1.out 2>&1;
      echo done > thief.done; exec sleep 300']
YAML
admin submit --no-wait "$T/thief.yaml" >/dev/null
wait_for 10 "job 2's worker done probing" test -f "$T/wd/thief.done"
for f in steal node ls; do
    [ "$(cat "$T/wd/$f.rc")" != 0 ] && grep -q "Permission denied" "$T/wd/$f.out" ||
        fail "$f: rc=$(cat "$T/wd/$f.rc") $(cat "$T/wd/$f.out")"
done
u10=$(cat "$T/wd/uid1.0") u11=$(cat "$T/wd/uid1.1") u2=$(cat "$T/wd/uid2")
[ "$u10" != 0 ] && [ "$u10" != "$u11" ] && [ "$u2" != "$u10" ] && [ "$u2" != "$u11" ] ||
    fail "uids: job1 $u10 $u11, job2 $u2"
[ "$(cat "$T/wd/gid1.0")" = "$(cat "$T/wd/gid1.1")" ] || fail "job 1's ranks in different groups"
[ "$(stat -c '%a %u' "$cred1")" = "400 $u10" ] || fail "credential file: $(stat -c '%a %u' "$cred1")"
expect_code "job 2's credential into job 1" PERMISSION_DENIED "cannot act on job 1" "$(cat "$T/wd/into1.out")"
pass "job 2's worker (uid $u2) cannot read job 1's credential, the node's, or the state dir (EACCES); ranks of job 1 run as $u10 and $u11"

# A stolen credential (copied by root) speaks for its own worker only.
out=$(TROUPE_TOKEN=$(cat "$cred1") "$RAWCALL" "$HEAD" report-failure 1 job1-g-1 0)
expect_code "rank 0's credential as rank 1" "PERMISSION_DENIED" "cannot speak for worker 'job1-g-1'" "$out"
is_job_state 1 RUNNING || fail "job 1 is $(job_state 1) after refused reports"
admin -o json job 1 | jq -e '(.failures | type) == "array" and (.failures | length) == 0' >/dev/null || fail "a forged failure was recorded"
pass "a stolen rank-0 credential cannot report as rank 1 (PERMISSION_DENIED); job 1 untouched"

# ---- users own their jobs --------------------------------------------------
admin token create --scope user >"$T/a.tok"
admin token create --scope user >"$T/b.tok"
admin token create --scope admin >"$T/root.tok"
ua() { "$CLI_BIN" --token-file "$T/a.tok" "$@"; }
ub() { "$CLI_BIN" --token-file "$T/b.tok" "$@"; }
cat >"$T/a.yaml" <<YAML
name: mine
cluster: {nodes: [1]}
groups:
  - {name: g, workers: 1, resources: {gpu: 1}, command: [sleep, '300']}
YAML
ja=$(ua submit --no-wait "$T/a.yaml")
aid=$(cut -d. -f3 "$T/a.tok")
[ "$(ub -o json job "$ja" | jqr .owner)" = "user:$aid" ] || fail "owner: $(ub -o json job "$ja" | jqr .owner)"
ua job "$ja" | grep_all "^owner  *user:$aid\$" || fail "troupe job shows no owner"
set +e; out=$(ub stop "$ja" 2>&1); set -e
expect_code "B stops A's job" PERMISSION_DENIED "belongs to user:$aid" "$out"
wait_for 10 "A's job running" is_job_state "$ja" RUNNING
"$CLI_BIN" --token-file "$T/root.tok" stop "$ja" >/dev/null || fail "minted admin cannot stop A's job"
wait_for 10 "A's job stopped and settled" is_job_state "$ja" STOPPED
set +e; out=$(ub delete "$ja" 2>&1); set -e
expect_code "B deletes A's job" PERMISSION_DENIED "belongs to user:$aid" "$out"
wait_for 10 "A deletes its own job" ua delete "$ja"
pass "users: B cannot stop or delete A's job (PERMISSION_DENIED); a minted admin can; A deletes its own; owner shown"

# ---- node credentials ------------------------------------------------------
out=$(TROUPE_TOKEN=$(cat "$T/node.tok") "$RAWCALL" "$HEAD" register-name n2)
expect_code "n1's credential registers n2" PERMISSION_DENIED "is bound to node 'n1'" "$out"
admin token create --scope node >"$T/free.tok"
out=$(TROUPE_TOKEN=$(cat "$T/free.tok") "$RAWCALL" "$HEAD" register-name a1)
grep -q "code=0 " <<<"$out" || fail "first registration refused: $out"
out=$(TROUPE_TOKEN=$(cat "$T/free.tok") "$RAWCALL" "$HEAD" register-name a2)
expect_code "second node" PERMISSION_DENIED "bound to the node it registered first" "$out"
admin token create --scope node --max-nodes 2 >"$T/two.tok"
for n in b1 b2; do
    out=$(TROUPE_TOKEN=$(cat "$T/two.tok") "$RAWCALL" "$HEAD" register-name $n)
    grep -q "code=0 " <<<"$out" || fail "--max-nodes 2: $n refused: $out"
done
out=$(TROUPE_TOKEN=$(cat "$T/two.tok") "$RAWCALL" "$HEAD" register-name b3)
expect_code "third node of --max-nodes 2" PERMISSION_DENIED "the 2 nodes it registered" "$out"
pass "node credentials: --node n1 cannot register n2; an unbound one only its first node; --max-nodes 2 two"

# ---- an agent without root -------------------------------------------------
mkdir -m 700 "$T/nr"
admin token create --scope node --node nr >"$T/nr/node.tok"
chown -R nobody:nogroup "$T/nr"
setpriv --reuid nobody --regid nogroup --clear-groups -- "$NODE_BIN" --head "$HEAD" --name nr --fake-gpus 8 \
    --state-dir "$T/nr/state" --token-file "$T/nr/node.tok" --stop-grace-ms 500 >>"$T/node-nr.log" 2>&1 &
PIDS+=($!)
wait_for 10 "nr ALIVE" is_state nr ALIVE
grep -q "worker isolation: none: runs as uid 65534 without root" "$T/node-nr.log" || fail "no warning at start"
iso=$(admin -o json nodes | jqr '.nodes[] | select(.name=="nr") | .isolation')
[[ "$iso" == "none: "*"--shared-uid"* ]] || fail "nr isolation: '$iso'"
admin nodes | grep -E "^[0-9]+ +nr +ALIVE,NOROOT " >/dev/null || fail "troupe nodes: $(admin nodes)"
cat >"$T/eight.yaml" <<YAML
name: eight
cluster: {nodes: [8]}
groups:
  - {name: g, workers: 1, resources: {gpu: 8}, command: [sh, -c, 'echo ran > $T/wd/eight.ran']}
YAML
j8=$(admin submit --no-wait "$T/eight.yaml")
wait_for 10 "job on nr failed" is_job_state "$j8" FAILED
admin job "$j8" | grep_all "without root" && admin job "$j8" | grep_all -- "--shared-uid" ||
    fail "reason: $(admin job "$j8")"
[ ! -e "$T/wd/eight.ran" ] || fail "a worker ran on the agent without root"
pass "agent without root: says so at start and in troupe nodes (NOROOT), refuses the job naming --shared-uid"
