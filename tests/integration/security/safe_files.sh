#!/usr/bin/env bash
# Safe files: the head's state (head.db, job logs) is its user's only, the
# agent's default state dir is private (XDG_STATE_HOME, not /tmp), and a state
# dir that is a planted symlink, another user's, or writable by others is
# refused with a reason.
source "$(dirname "$0")/../lib.sh"

umask 022 # as a careless shell would have it: the daemons must not rely on it
start_head --heartbeat-ms 100 --dead-after 50 # liveness is not under test: a 3.75 s lease, not 400 ms
export XDG_STATE_HOME=$T/xdg
NAME=sf-$$-$RANDOM
if [ "$(id -u)" = 0 ]; then sd=/var/lib/troupe-node/$NAME; else sd=$XDG_STATE_HOME/troupe-node/$NAME; fi
# Removed by cleanup once the agent is gone: removed before (by a trap of
# its own), the agent still wrote there, rm failed, and the test ended
# without its cleanup.
at_cleanup 'rm -rf "$sd"'
"$NODE_BIN" --head "$HEAD" --name "$NAME" --fake-gpus 1 --stop-grace-ms 500 >>"$T/node-sf.log" 2>&1 &
PIDS+=($!)
wait_for 10 "sf ALIVE" nodes_alive 1
cat >"$T/j.yaml" <<YAML
name: files
cluster: {nodes: [1]}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'echo hello']}]
YAML
id=$(submit "$T/j.yaml")
wait_for 10 "job $id SUCCEEDED" is_job_state "$id" SUCCEEDED
wait_for 10 "job $id's log on the head" bash -c "'$CLI_BIN' logs $id | grep -q hello"
[ -d "$sd" ] || fail "agent default state dir $sd missing"
[ "$(stat -c %a "$sd")" = 700 ] || fail "agent state dir mode $(stat -c %a "$sd")"
[ "$(stat -c %a "$sd/logs")" = 700 ] || fail "agent log dir mode $(stat -c %a "$sd/logs")"
for f in "$sd"/logs/*; do [ "$(stat -c %a "$f")" = 600 ] || fail "worker log $f mode $(stat -c %a "$f")"; done
[ "$(stat -c %a "$T/state")" = 700 ] || fail "head state dir mode $(stat -c %a "$T/state")"
n=0
while read -r f; do
    m=$(stat -c %a "$f"); n=$((n + 1))
    [ "$m" = 600 ] || [ "$m" = 700 ] || fail "head state $f has mode $m"
done < <(find "$T/state" -mindepth 1 ! -name '*.sock')
[ $n -ge 2 ] || fail "only $n files in the head's state dir"
pass "modes: agent default state dir $sd 0700, worker logs 0600, head's $n state files 0600/0700 (umask 022)"

# A symlink planted where the agent keeps state: refused, never followed.
mkdir -p "$T/victim"; chmod 700 "$T/victim"
ln -s "$T/victim" "$T/planted"
set +e
out=$(timeout 10 "$NODE_BIN" --head "$HEAD" --name p1 --fake-gpus 1 --state-dir "$T/planted" 2>&1); rc=$?
set -e
[ $rc = 2 ] && grep -q "is a symbolic link; refusing" <<<"$out" || fail "planted symlink: rc=$rc out=$out"
[ -z "$(ls -A "$T/victim")" ] || fail "something was written through the symlink: $(ls -A "$T/victim")"
mkdir -p "$T/open"; chmod 777 "$T/open"
set +e
out=$(timeout 10 "$NODE_BIN" --head "$HEAD" --name p2 --fake-gpus 1 --state-dir "$T/open" 2>&1); rc=$?
set -e
[ $rc = 2 ] && grep -q "writable by group or others (mode 777); run chmod 700" <<<"$out" ||
    fail "world-writable state dir: rc=$rc out=$out"
set +e
out=$(timeout 10 "$HEAD_BIN" --listen "ipc://$T/h2.sock" --state-dir "$T/planted" 2>&1); rc=$?
set -e
[ $rc != 0 ] && grep -q "is a symbolic link" <<<"$out" || fail "head on a planted symlink: rc=$rc out=$out"
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
    mkdir -p "$T/theirs"; chmod 700 "$T/theirs"; chown nobody "$T/theirs"
    set +e
    out=$(timeout 10 "$NODE_BIN" --head "$HEAD" --name p3 --fake-gpus 1 --state-dir "$T/theirs" 2>&1); rc=$?
    set -e
    [ $rc = 2 ] && grep -q "is owned by uid" <<<"$out" || fail "another user's state dir: rc=$rc out=$out"
fi
pass "state dirs refused: planted symlink (agent and head; nothing written through it), world-writable, another user's"
