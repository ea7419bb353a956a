#!/usr/bin/env bash
# deploy.compose: deploy/compose/compose.yaml, unchanged, with podman-compose:
# `up`, the mint service's node credential reaching the agents (and only it),
# `run --rm cli troupe nodes` showing both agents ALIVE, the demo job through
# the cli service SUCCEEDING (read back with `troupe jobs`), then stop (agents exit 0 within the grace the
# file asks for) and `down -v`, leaving no container, volume or network.
# shellcheck source=tests/deploy/lib.sh
. "$(dirname "$0")/lib.sh"
podman_setup
command -v podman-compose >/dev/null || skip "podman-compose not installed (scripts/setup.sh installs it)"
build_image

# The file as a user runs it, from its folder, with the image the tests built
# (the file's `image: ${TROUPE_IMAGE:-troupe:cpu}`) and a free host port.
cd "$ROOT/deploy/compose" || exit 1
export TROUPE_IMAGE=$IMAGE TROUPE_PORT=$((30000 + RANDOM % 20000))
# `run` rebuilds the services' images (layer cache: seconds); docker format keeps
# the image's HEALTHCHECK, which OCI images drop.
export BUILDAH_FORMAT=docker
if [ ! -f admin.token ]; then
    openssl rand -hex 32 >admin.token && chmod 0644 admin.token
    on_exit "rm -f '$ROOT/deploy/compose/admin.token'"
fi
P=$TAG
pc() { podman-compose -p "$P" "$@"; }
compose_cleanup() {
    pc down -v -t 30 >>"$T/down.log" 2>&1
    local ids
    ids=$(podman ps -aq --filter "label=io.podman.compose.project=$P")
    # shellcheck disable=SC2086 # a list of ids
    [ -z "$ids" ] || podman rm -f $ids >/dev/null 2>&1
    ids=$(podman volume ls -q --filter "label=io.podman.compose.project=$P")
    # shellcheck disable=SC2086
    [ -z "$ids" ] || podman volume rm -f $ids >/dev/null 2>&1
    podman network rm -f "${P}_default" >/dev/null 2>&1
}
on_exit compose_cleanup

start=$SECONDS
pc up -d >"$T/up.log" 2>&1 || fail "podman-compose up failed (up.log)"
# nodes_alive: `run --rm cli troupe nodes` lists node-a and node-b ALIVE.
nodes_alive() {
    pc run --rm cli troupe nodes >"$T/nodes.out" 2>&1 &&
        grep -qE '^[0-9]+ +node-a +ALIVE' "$T/nodes.out" && grep -qE '^[0-9]+ +node-b +ALIVE' "$T/nodes.out"
}
wait_for 120 "node-a and node-b ALIVE in \`podman-compose run --rm cli troupe nodes\`" nodes_alive
pass "up: node-a and node-b ALIVE through the cli service after $((SECONDS - start)) s"
grep -E '^(ID +NAME|[0-9]+ +node-)' "$T/nodes.out" | sed 's/^/      /'

# The agents hold the node credential mint wrote, never the admin one; their
# healthcheck (the head answers that credential) passes.
for n in node-a node-b; do
    c=${P}_${n}_1
    podman exec "$c" sh -c 'case $(cat /creds/node.token) in tr1.n.*) ;; *) exit 1 ;; esac' ||
        fail "$n: /creds/node.token is not a node credential"
    podman exec "$c" test ! -e /run/secrets/admin_token || fail "$n can read the admin credential"
    podman healthcheck run "$c" >/dev/null || fail "$n: its healthcheck fails"
done
head_log=$(podman logs "${P}_head_1" 2>&1) # whole: `| grep -q` under pipefail can kill the writer
grep -q 'node registered.*name=node-b' <<<"$head_log" || fail "the head's log does not show node-b registering"
pass "mint's node credential reached both agents (their healthchecks pass); no admin credential in them"

# podman-compose 1.0.3's `run` exits 0 whatever the command's status (docker
# compose passes it on), so the job's state is read back below rather than trusted
# from the exit status.
rc=0
pc run --rm cli sh -c 'exit 3' >/dev/null 2>&1 || rc=$?
echo "      (podman-compose run of a command that exits 3: exit $rc)"
start=$SECONDS
pc run --rm cli demo >"$T/demo.log" 2>&1 || fail "the demo job through the cli service did not succeed (demo.log)"
# `run` gives the CLI a terminal, so `troupe submit` shows its progress view.
if ! grep -q 'job [0-9]* SUCCEEDED' "$T/demo.log" || ! grep -q 'group policy: 60 steps' "$T/demo.log"; then
    fail "the demo job's output does not show it SUCCEEDED with 60 policy steps"
fi
pc run --rm cli troupe jobs >"$T/jobs.out" 2>&1
grep -qE '^[0-9]+ +demo +SUCCEEDED' "$T/jobs.out" || fail "troupe jobs does not list demo SUCCEEDED: $(cat "$T/jobs.out")"
pass "\`run --rm cli demo\`: the demo job SUCCEEDED in $((SECONDS - start)) s"

# stop: the agents get the file's grace (podman-compose takes no stop_grace_period:
# -t gives it) and stop their workers and themselves cleanly.
pc stop -t 30 >"$T/stop.log" 2>&1 || fail "podman-compose stop"
for n in node-a node-b head; do
    rc=$(podman inspect -f '{{.State.ExitCode}}' "${P}_${n}_1")
    [ "$rc" = 0 ] || fail "$n exited $rc on stop"
done
pc down -v -t 30 >"$T/down.log" 2>&1 || fail "podman-compose down -v"
left=$(podman ps -aq --filter "label=io.podman.compose.project=$P"; podman volume ls -q --filter "label=io.podman.compose.project=$P")
[ -z "$left" ] || fail "left after down -v: $left"
pass "stop -t 30: head and agents exit 0; down -v removes the containers and volumes"
