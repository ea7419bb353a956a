#!/usr/bin/env bash
# Bad input to the rendezvous, each refused with a code and a message that
# says why, and no effect: calls made as a running job's workers (their
# environment set by hand, as troupe-node would).
source "$(dirname "$0")/../lib.sh"
: "${RT_WORKER:?}"
start_cluster
cat >"$T/a.yaml" <<YAML
name: a
cluster: {nodes: [4]}
groups:
  - {name: policy, workers: 2, resources: {gpu: 1}, command: [sleep, "120"]}
  - {name: generation, workers: 1, resources: {gpu: 1}, command: [sleep, "120"]}
communicators: [{name: refit, groups: [policy, generation]}]
YAML
sed -e 's/name: a$/name: b/' "$T/a.yaml" >"$T/b.yaml"
a=$(submit "$T/a.yaml"); b=$(submit "$T/b.yaml")
wait_for 10 "jobs running" bash -c "'$CLI_BIN' -o json job $a | jq -e '.state==\"RUNNING\"' && '$CLI_BIN' -o json job $b | jq -e '.state==\"RUNNING\"'"

# as JOB GROUP RANK [ATTEMPT] -- rt_worker call ...
as() {
    local job=$1 group=$2 rank=$3 attempt=$4; shift 4
    env TROUPE_JOB="$job" TROUPE_GROUP="$group" TROUPE_WORKER="job$job-$group-$rank" TROUPE_ATTEMPT="$attempt" \
        RANK="$rank" WORLD_SIZE=2 "$RT_WORKER" call "$@" || true
}
expect() { # expect OUTPUT CODE TEXT
    grep -q "^ERR $2 .*$3" <<<"$1" || fail "expected $2 '$3', got: $1"
    pass "$2: ${1#ERR $2 }"
}

expect "$(as "$a" policy 1 0 publish policy 7 - 1)" INVALID_ARGUMENT "rank 1 (job$a-policy-1 on na) cannot publish IDs for communicator policy: only rank 0 publishes"
expect "$(as "$a" policy 0 0 publish-size policy 100)" INVALID_ARGUMENT "ID 0 for communicator policy is 100 bytes; an NCCL unique ID is 128"
expect "$(as "$a" policy 0 0 publish policy 7 - 17)" INVALID_ARGUMENT "publish 1 to 16 IDs, not 17"
out=$(as "$a" policy 0 0 publish policy 7 - 1); [ "${out%% *}" = OK ] || fail "first publish: $out"
out=$(as "$a" policy 0 0 publish policy 7 - 1); [ "${out%% *}" = OK ] || fail "same bytes again: $out"
expect "$(as "$a" policy 0 0 publish policy 8 - 1)" ALREADY_EXISTS "communicator policy epoch 0 already has other IDs"
out=$(as "$a" policy 1 0 wait policy 1000); [ "$out" = "OK ids 1 first 7" ] || fail "rank 1 should get the first bytes: $out"
pass "a publish retried with the same bytes is OK; rank 1 gets the IDs published first"
expect "$(as "$a" policy 1 0 info nosuch)" NOT_FOUND "job a declares no communicator 'nosuch' (groups: policy, generation; communicators: refit)"
expect "$(as "$a" generation 0 0 info policy)" PERMISSION_DENIED "worker job$a-generation-0 (group generation) is not a member of communicator policy"
# A worker of job a presenting job b's id: its calls are scoped to its own job.
out=$(env TROUPE_JOB="$b" TROUPE_GROUP=policy TROUPE_WORKER="job$a-policy-1" TROUPE_ATTEMPT=0 RANK=1 WORLD_SIZE=2 \
      "$RT_WORKER" call wait policy 1000 || true)
expect "$out" PERMISSION_DENIED "worker job$a-policy-1 is not part of job $b: a worker's calls are scoped to its own job"
expect "$(as "$a" policy 1 3 wait policy 1000)" FAILED_PRECONDITION "worker job$a-policy-1 attempt 3 is not current (the head has attempt 0"
expect "$(as 999 policy 1 0 wait policy 1000)" NOT_FOUND "no job 999"
out=$(as "$a" generation 0 0 info refit); [ "$out" = "OK epoch 0 rank 2 size 3" ] || fail "refit info: $out"
pass "generation-0 is rank 2 of refit (3 ranks)"
out=$(env -u TROUPE_JOB "$RT_WORKER" call info policy || true)
grep -q "rt: open: FAILED_PRECONDITION: TROUPE_JOB is not set" <<<"$out" || fail "outside troupe: $out"
pass "outside troupe: $out"

# The job's end forgets its rendezvous: a later call is refused, not served stale.
cli stop "$a" >/dev/null 2>&1
expect "$(as "$a" policy 1 0 wait policy 1000)" FAILED_PRECONDITION "job $a is not running (STOPPED"
