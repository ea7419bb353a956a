#!/usr/bin/env bash
# Impossible placements and bad specs are refused at submit, with the numbers.
source "$(dirname "$0")/../lib.sh"
start_cluster
cat >"$T/big.yaml" <<YAML
name: too-big
cluster: {nodes: [32]}
groups: [{name: policy, workers: 2, resources: {gpu: 16}, command: [true]}]
YAML
set +e; out=$(cli submit "$T/big.yaml" 2>&1); rc=$?; set -e
[ $rc = 1 ] && [ "$out" = "troupe: FAILED_PRECONDITION: virtual node 0 needs 32 GPUs; no such node (largest such alive node has 16)" ] ||
    fail "infeasible: rc=$rc $out"
pass "infeasible job refused: $out"
cat >"$T/label.yaml" <<YAML
name: wrong-label
cluster: {nodes: [8], labels: {gpu: B200}}
groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [true]}]
YAML
set +e; out=$(cli submit "$T/label.yaml" 2>&1); rc=$?; set -e
[ $rc = 1 ] && grep -q "B200" <<<"$out" || fail "label mismatch: rc=$rc $out"
pass "label selector with no match refused: $out"
printf 'name: bad\ncluster: {nodes: [4]}\ngroups:\n  - name: g\n    workers: -2\n    resources: {gpu: 1}\n    command: [true]\n' >"$T/neg.yaml"
set +e; out=$(cli submit "$T/neg.yaml" 2>&1); rc=$?; set -e
[ $rc = 1 ] && grep -qE "neg.yaml:5:[0-9]+" <<<"$out" && grep -q workers <<<"$out" || fail "negative workers: $out"
pass "bad spec names file:line:col: $out"
[ "$(cli -o json jobs | jqr .count)" = 0 ] || fail "a refused job was recorded"
pass "nothing recorded for refused jobs"
