#!/usr/bin/env bash
# The job YAML's worker-runtime parts are checked at submit, each error with
# file:line:col: NeMo RL's NRL_NSYS_* variables in env, and communicators.
source "$(dirname "$0")/../lib.sh"
start_head
start_node na 4xH100:80GB
wait_for 10 "node ALIVE" nodes_alive 1
job() { # job FILE ENV-LINE [EXTRA-YAML]
    cat >"$1" <<YAML
name: spec
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [sleep, "1"]}
  - {name: generation, workers: 1, resources: {gpu: 1}, command: [sleep, "1"]}
env: {$2}
$3
YAML
}
refused() { # refused WHERE TEXT ENV-LINE [EXTRA-YAML]
    local where=$1 text=$2 out rc
    job "$T/j.yaml" "$3" "${4:-}"
    set +e; out=$(cli submit --no-wait "$T/j.yaml" 2>&1); rc=$?; set -e
    [ $rc = 2 ] || [ $rc = 1 ] || fail "rc $rc for $3 $4: $out"
    grep -qF "j.yaml:$where: $text" <<<"$out" || fail "expected 'j.yaml:$where: $text', got: $out"
    pass "${3:-$4} -> $(grep -o 'j.yaml:.*' <<<"$out")"
}
R=NRL_NSYS_PROFILE_STEP_RANGE; P=NRL_NSYS_WORKER_PATTERNS
for bad in 0:3 3:3 3:2 a:b 2 2:3:4; do
    refused 6:36 "env: $R: step range '$bad'" "$R: \"$bad\", $P: \"*policy*\""
done
refused 6:7 "env: $R is set without $P (set both or neither)" "$R: \"2:3\""
refused 6:7 "env: $P is set without $R (set both or neither)" "$P: \"*policy*\""
refused 6:69 "env: $P: worker pattern '[x' has an unclosed '['" "$R: \"2:3\", $P: \"[x\""
refused 6:36 "env: $R=2:3 and $P=*policy* disagree with profile: {steps: 2:4" "$R: \"2:3\", $P: \"*policy*\"" 'profile: {steps: "2:4", workers: "*policy*"}'
refused 7:48 "communicators[0]: communicator refit: no group named 'trainer'" "" \
    'communicators: [{name: refit, groups: [policy, trainer]}]'
refused 7:24 "communicators[0]: communicator policy has the name of a group" "" \
    'communicators: [{name: policy, groups: [policy, generation]}]'
refused 7:56 "communicators[0]: communicator x: group policy is listed twice" "" \
    'communicators: [{name: x, groups: [policy, generation, policy]}]'
job "$T/ok.yaml" "$R: \"2:3\", $P: \"*policy*\"" 'communicators: [{name: refit, groups: [policy, generation]}]'
cli submit --no-wait "$T/ok.yaml" >/dev/null || fail "a valid spec was refused"
pass "the same variables and communicator, valid, are accepted"

# The same variables in a group's env: (profile only the generation group):
# checked as that group's workers see them, its entries over the job's.
gjob() { # gjob FILE GROUP-ENV [JOB-ENV]
    cat >"$1" <<YAML
name: spec
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [sleep, "1"]}
  - {name: generation, workers: 1, resources: {gpu: 1}, command: [sleep, "1"], env: {$2}}
env: {${3:-}}
YAML
}
grefused() { # grefused WHERE TEXT GROUP-ENV [JOB-ENV]
    local where=$1 text=$2 out rc
    gjob "$T/g.yaml" "$3" "${4:-}"
    set +e; out=$(cli submit --no-wait "$T/g.yaml" 2>&1); rc=$?; set -e
    [ $rc = 2 ] || [ $rc = 1 ] || fail "rc $rc for group env $3 (job env ${4:-}): $out"
    grep -qF "g.yaml:$where: group generation: $text" <<<"$out" ||
        fail "expected 'g.yaml:$where: group generation: $text', got: $out"
    pass "group env $3 ${4:+(job env $4) }-> $(grep -o 'g.yaml:.*' <<<"$out")"
}
grefused 5:86 "env: $R is set without $P (set both or neither)" "$R: \"2:3\""
grefused 5:86 "env: $P is set without $R (set both or neither)" "$P: \"*generation*\""
for bad in 3:3 0:3 3:2 a:b 2 2:3:4; do
    grefused 5:115 "env: $R: step range '$bad'" "$R: \"$bad\", $P: \"*generation*\""
done
grefused 5:115 "env: $R: step range '4:4'" "$R: \"4:4\"" "$R: \"2:3\", $P: \"*\""
grefused 5:99 "env: TROUPE_NSYS is 0 or 1, not 'yes'" "TROUPE_NSYS: \"yes\""
gjob "$T/gok.yaml" "$R: \"5:7\"" "$R: \"2:3\", $P: \"*\""
cli submit --no-wait "$T/gok.yaml" >/dev/null || fail "a group range completed by the job's patterns was refused"
pass "a group's own range over the job's patterns is accepted"
