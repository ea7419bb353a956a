#!/usr/bin/env bash
# deploy.systemd: the units in deploy/systemd pass `systemd-analyze verify` with
# nothing said (a warning such as an unknown key fails the test: verify itself
# exits 0 on those), and the sysusers file, installed where deploy/README.md puts
# it, makes the troupe system user with systemd-sysusers --root - in an empty root
# and in one seeded with this machine's users (it must pick a free system id) -
# and a second run changes nothing. The units' command lines are run with
# --check-config by deploy/check.sh (deploy.static).
# shellcheck source=tests/deploy/lib.sh
. "$(dirname "$0")/lib.sh"
need_binaries
command -v systemd-analyze >/dev/null || skip "systemd-analyze not installed (scripts/setup.sh installs systemd)"
command -v systemd-sysusers >/dev/null || skip "systemd-sysusers not installed (scripts/setup.sh installs systemd)"

# verify insists the executables exist: point the units at this build.
mkdir -p "$T/units"
for u in "$ROOT"/deploy/systemd/*.service; do
    sed -e "s#/usr/local/bin/troupe-head#$HEAD_BIN#g" -e "s#/usr/local/bin/troupe-node#$NODE_BIN#g" "$u" >"$T/units/${u##*/}"
done
grep -q "^ExecStart=$HEAD_BIN " "$T/units/troupe-head.service" || fail "troupe-head.service: ExecStart is not /usr/local/bin/troupe-head"
grep -q "^ExecStart=$NODE_BIN " "$T/units/troupe-node.service" || fail "troupe-node.service: ExecStart is not /usr/local/bin/troupe-node"
# quiet_verify UNIT...: verify exits 0 and prints nothing.
quiet_verify() {
    local out rc=0
    out=$(systemd-analyze verify "$@" 2>&1) || rc=$?
    [ -z "$out" ] || printf '%s\n' "$out" >&2
    [ "$rc" = 0 ] && [ -z "$out" ]
}
quiet_verify "$T"/units/troupe-head.service "$T"/units/troupe-node.service || fail "systemd-analyze verify"
# The check above must be able to fail.
sed 's/^\[Service\]$/[Service]\nNoSuchKey=1/' "$T/units/troupe-head.service" >"$T/units/bad.service"
if quiet_verify "$T/units/bad.service" 2>/dev/null; then fail "an unknown key passes the verify check"; fi
pass "systemd-analyze verify: troupe-head.service and troupe-node.service clean (an unknown key is caught)"

# sysusers_in ROOT: install the file as deploy/README.md says, run systemd-sysusers there.
sysusers_in() {
    mkdir -p "$1/usr/lib/sysusers.d" "$1/etc"
    cp "$ROOT/deploy/systemd/troupe.sysusers.conf" "$1/usr/lib/sysusers.d/troupe.conf"
    systemd-sysusers --root="$1" >"$T/sysusers.log" 2>&1 || { cat "$T/sysusers.log" >&2; fail "systemd-sysusers --root=$1"; }
}
for r in empty seeded; do
    R=$T/root-$r
    mkdir -p "$R/etc"
    [ $r = empty ] || cp /etc/passwd /etc/group "$R/etc/"
    sysusers_in "$R"
    IFS=: read -r name _ uid gid _ home shell < <(grep '^troupe:' "$R/etc/passwd") || fail "$r root: no troupe user"
    [ "$home:$shell" = /var/lib/troupe:/usr/sbin/nologin ] || fail "$r root: troupe's home/shell $home:$shell"
    if [ "$uid" -ge 1000 ] || [ "$uid" -le 0 ]; then fail "$r root: uid $uid is not a system uid"; fi
    grep -q "^troupe:x:$gid:" "$R/etc/group" || fail "$r root: no troupe group with gid $gid"
    if [ $r = seeded ]; then
        clash=$(awk -F: -v u="$uid" '$3 == u && $1 != "troupe"' "$R/etc/passwd")
        [ -z "$clash" ] || fail "seeded root: uid $uid is already taken: $clash"
    fi
    before=$(md5sum "$R/etc/passwd" "$R/etc/group")
    sysusers_in "$R"
    [ "$(md5sum "$R/etc/passwd" "$R/etc/group")" = "$before" ] || fail "$r root: a second systemd-sysusers run changed the files"
    pass "systemd-sysusers ($r root): user $name uid $uid gid $gid, home $home, shell $shell; a second run changes nothing"
done
