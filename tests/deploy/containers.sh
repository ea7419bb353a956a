#!/usr/bin/env bash
# deploy.containers: the image run the way deploy/README.md's container section
# says - a head, two agents (simulated GPUs) and the CLI each in its own
# container, on a podman network (each container its own network namespace, so
# they talk over the network's addresses, not loopback), the head's state on a
# named volume, credentials as files (the admin one for the head and CLI, a
# minted node credential for the agents). Then: the demo job SUCCEEDS, the head's
# container restarts with its job history, every process runs as the image's
# non-root user, and the image's HEALTHCHECK answers (and fails with a wrong
# credential); SIGTERM stops the head (exit 0) and the agents.
# shellcheck source=tests/deploy/lib.sh
. "$(dirname "$0")/lib.sh"
podman_setup
build_image

NET=$TAG-net
podman network create --label "$TAG" "$NET" >/dev/null
for v in head jobs; do podman volume create --label "$TAG" "$TAG-$v" >/dev/null; done
# Bind-mounted credentials must be readable by the image's user (uid 10001).
(umask 077; openssl rand -hex 32 >"$T/admin.token")
chown 10001:10001 "$T/admin.token"
ADMIN=(-v "$T/admin.token:/run/secrets/admin_token:ro" -e TROUPE_TOKEN_FILE=/run/secrets/admin_token)

run_c head --network "$NET" --network-alias head --hostname head "${ADMIN[@]}" \
    -v "$TAG-head:/var/lib/troupe/head" "$IMAGE" \
    troupe-head --listen tcp://0.0.0.0:7770 --advertise tcp://head:7770 --state-dir /var/lib/troupe/head
wait_for 60 "the head container's HEALTHCHECK to pass" podman healthcheck run "$TAG-head"
pass "head container up; its HEALTHCHECK ($(podman image inspect --format '{{.Config.Healthcheck.Test}}' "$IMAGE")) passes"

# cli ARGS...: the CLI in a container of its own, as the admin, on the network.
cli() {
    podman run --rm --label "$TAG" --network "$NET" "${ADMIN[@]}" -e TROUPE_HEAD=tcp://head:7770 \
        -v "$TAG-jobs:/jobs" "$IMAGE" "$@"
}

# One credential for both agents: bound to the first two names that register
# (--max-nodes 2); a third agent with it is refused.
(umask 077; cli troupe token create --scope node --max-nodes 2 --ttl 1d >"$T/node.token") || fail "minting the node credential"
grep -q '^tr1\.n\.' "$T/node.token" || fail "node.token is not a node credential: $(head -c 20 "$T/node.token")"
chown 10001:10001 "$T/node.token"
for n in a:8 b:16; do
    # --stop-timeout: more than the agent's 10 s stop grace for its workers.
    run_c "node-${n%:*}" --network "$NET" --network-alias "node-${n%:*}" --hostname "node-${n%:*}" \
        --no-healthcheck --stop-timeout 30 -v "$T/node.token:/run/secrets/node_token:ro" -v "$TAG-jobs:/jobs" \
        "$IMAGE" troupe-node --head tcp://head:7770 --token-file /run/secrets/node_token \
        --name "node-${n%:*}" --fake-gpus "${n#*:}xH200:141GB" --state-dir /var/lib/troupe/node --shared-uid
done
alive2() { [ "$(cli troupe -o json nodes --alive | jq '[.nodes[] | select(.state == "ALIVE")] | length')" = 2 ]; }
wait_for 60 "node-a and node-b to be ALIVE" alive2
cli troupe -o json nodes >"$T/nodes.json"
jq -e '[.nodes[] | .address] | all(test("^127\\.|^localhost$") | not)' "$T/nodes.json" >/dev/null ||
    fail "an agent's address is loopback: $(jq -c '[.nodes[] | {name, address}]' "$T/nodes.json")"
pass "two agents ALIVE with the minted node credential: $(jq -c '[.nodes[] | {name, address, gpus: (.gpus | length)}]' "$T/nodes.json")"

# The demo job from a CLI container: files on the jobs volume, mounted at /jobs
# on both agents (workers start in the job file's folder).
start=$SECONDS
cli sh -c 'cp -r /opt/troupe/examples/demo /jobs/ && troupe-train --make-data /jobs/demo/data.tok >/dev/null &&
    exec troupe submit /jobs/demo/job.yaml' >"$T/demo.log" 2>&1 || fail "the demo job did not succeed (log: demo.log)"
job=$(grep -m1 -xE '[0-9]+' "$T/demo.log" || true)
[ -n "$job" ] || { cp "$T/demo.log" /tmp/deploy-work/demo-debug.log; fail "no job id in the submit output"; }
[ "$(cli troupe -o json job "$job" | jq -r .state)" = SUCCEEDED ] || fail "job $job is not SUCCEEDED"
[ "$(grep -c 'policy-[01]\] step=60/60' "$T/demo.log")" = 2 ] || fail "the policy workers did not reach step 60"
pass "demo job $job SUCCEEDED in $((SECONDS - start)) s (both policy workers at step 60)"

# Non-root: the head, the agents and their workers' supervisor all run as uid 10001.
for c in head node-a node-b; do
    uids=$(podman top "$TAG-$c" huser args | awk 'NR > 1 {print $1}' | sort -u | tr '\n' ' ')
    [ "$uids" = "10001 " ] || [ "$uids" = "troupe " ] || fail "$c runs processes as: $uids"
done
[ "$(podman image inspect --format '{{.Config.User}}' "$IMAGE")" = troupe:troupe ] || fail "image user"
pass "every process of head, node-a and node-b runs as the image's user troupe (uid 10001)"

# A restart keeps the job history: it is in head.db on the volume.
podman restart -t 15 "$TAG-head" >/dev/null
wait_for 60 "the restarted head's HEALTHCHECK to pass" podman healthcheck run "$TAG-head"
[ "$(cli troupe -o json job "$job" | jq -r .state)" = SUCCEEDED ] || fail "job $job lost after the head restart"
wait_for 60 "both agents to re-register with the restarted head" alive2
pass "head container restarted: job $job still SUCCEEDED (state volume), both agents ALIVE again"

# The HEALTHCHECK fails when the head does not answer (or it proves nothing).
podman exec "$TAG-head" troupe --timeout 3000 status >/dev/null || fail "HEALTHCHECK command in the head container"
if podman exec -e TROUPE_TOKEN_FILE=/dev/null -e TROUPE_TOKEN=wrong "$TAG-head" troupe --timeout 3000 status >/dev/null 2>&1; then
    fail "the HEALTHCHECK command passes with a wrong credential"
fi
podman stop -t 15 "$TAG-node-a" "$TAG-node-b" >/dev/null
podman exec "$TAG-head" kill -TERM 1 >/dev/null 2>&1 || podman stop -t 15 "$TAG-head" >/dev/null
wait_for 30 "the head container to stop" sh -c "[ \"\$(podman inspect -f '{{.State.Running}}' $TAG-head)\" = false ]"
[ "$(podman inspect -f '{{.State.ExitCode}}' "$TAG-head")" = 0 ] || fail "the head exited $(podman inspect -f '{{.State.ExitCode}}' "$TAG-head") on SIGTERM"
pass "HEALTHCHECK fails with a wrong credential; head and agents stop on SIGTERM (head exit 0)"
