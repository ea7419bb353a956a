#!/usr/bin/env bash
# A job's failure reason says what the worker's exit means: 127 (with the
# name the shell could not find), 126, a command the agent could not start,
# 128+N from a shell, and a signal by name.
source "$(dirname "$0")/../lib.sh"
start_head
start_node n1 4xH100:80GB
wait_for 10 "node ALIVE" nodes_alive 1
printf '#!/bin/sh\necho hi\n' >"$T/notexec"
chmod 0644 "$T/notexec"

# reason_of COMMAND_YAML: submit a one-worker job running it, print its reason.
reason_of() {
    printf 'name: x\ncluster: {nodes: [1]}\ngroups: [{name: g, workers: 1, resources: {gpu: 1}, command: %s}]\n' \
        "$1" >"$T/job.yaml"
    set +e; cli submit "$T/job.yaml" >/dev/null 2>"$T/err"; local rc=$?; set -e
    [ $rc = 1 ] || fail "job '$1' exited $rc, want 1: $(cat "$T/err")"
    cli -o json jobs | jq -r '.jobs[0].reason'
}
check() {
    local got
    got=$(reason_of "$1")
    grep -qF -- "$2" <<<"$got" || fail "command $1: reason '$got' lacks '$2'"
    pass "$1 -> $got"
}
check "[sh, -c, 'troupe-train-nosuch --config x']" \
    "exited with code 127: command not found: troupe-train-nosuch (is it on the node's PATH?)"
check "[troupe-train-nosuch, --config, x]" \
    "failed to start: cannot start 'troupe-train-nosuch': command not found (is it on the node's PATH?)"
check "[sh, -c, '$T/notexec']" "exited with code 126: command found but could not run (is it executable?"
check "[sh, -c, 'sleep 100 & kill -KILL \$!; wait \$!']" \
    "exited with code 137 (128+9: a process it ran was killed by SIGKILL)"
check "[sh, -c, 'kill -SEGV \$\$']" "killed by signal SIGSEGV (Segmentation fault)"
check "[sh, -c, 'exit 3']" "exited with code 3"
