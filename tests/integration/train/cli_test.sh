#!/usr/bin/env bash
# cli_test.sh BINARY MODE - drive troupe-train end to end.
#   run        a few steps on a generated dataset: exit 0, one line per step, JSON metrics
#   resume     a second invocation continues from the checkpoint
#   bad_config unknown key: exit 2 with file:line:col
#   bad_data   missing and malformed data files: exit 1 with file: reason
set -u
bin=$(readlink -f "$1")
mode=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/tr-train-cli-XXXXXX")
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1

fail() {
    echo "FAIL: $*" >&2
    for f in out.txt err.txt; do
        [ -f "$f" ] && { echo "--- $f" >&2; cat "$f" >&2; }
    done
    exit 1
}

# run_train EXPECTED_STATUS ARGS...: runs with a deadline, output in out.txt/err.txt.
run_train() {
    local want=$1
    shift
    timeout 60 "$bin" "$@" >out.txt 2>err.txt
    local rc=$?
    [ "$rc" -eq "$want" ] || fail "troupe-train $*: exit $rc, want $want"
}

write_config() {
    cat >train.yaml <<YAML
seed: 7
device: cpu
model:
  layers: 1
  width: 32
  heads: 2
  seq_len: 16
train:
  steps: 100
  micro_batch: 2
  accum_steps: 2
  warmup_steps: 2
data:
  path: $dir/data.tok
  val_fraction: 0.1
eval:
  every: 2
checkpoint:
  dir: $dir/ck
YAML
}

# check_steps FIRST LAST TOTAL: out.txt has exactly the step lines FIRST..LAST.
check_steps() {
    local n=$(($2 - $1 + 1))
    [ "$(grep -c '^step=' out.txt)" -eq "$n" ] || fail "want $n step lines"
    for s in $(seq "$1" "$2"); do
        grep -Eq "^step=$s/$3 loss=[0-9]+\.[0-9]{4} .*grad_norm=[0-9.]+ lr=[0-9.e+-]+ step_ms=[0-9.]+ tok_s=[0-9]+ mfu=n/a mem_mib=[0-9.]+ peak_mib=[0-9.]+ fwd_ms=[0-9.]+ bwd_ms=[0-9.]+ opt_ms=[0-9.]+$" out.txt ||
            fail "no well-formed line for step $s"
    done
}

case $mode in
run)
    run_train 0 --make-data data.tok --vocab 64 --tokens 4096
    write_config
    run_train 0 --config train.yaml --check-config
    grep -q '^model.width: 32' out.txt || fail "--check-config does not print model.width"
    grep -q '^train.steps: 100' out.txt || fail "--check-config does not print train.steps"
    run_train 0 --config train.yaml --steps 5 --metrics-json m.json
    check_steps 1 5 5
    grep -q '^step=2/5 loss=[0-9.]* val_loss=[0-9.]* ' out.txt || fail "no val_loss on step 2"
    [ "$(wc -l <m.json)" -eq 5 ] || fail "m.json: want 5 lines"
    grep -q '^{"step":5,"steps":5,"backend":"cpu","tokens":64,"loss":' m.json || fail "m.json: bad step 5 object"
    [ -f ck/ckpt.bin ] || fail "no checkpoint written"
    ;;
resume)
    # With warmup_steps beyond the run the learning rate of step s does not
    # depend on train.steps, so 8 steps then 2 more must print the same step
    # 9 and 10 figures as 10 steps in one go.
    run_train 0 --make-data data.tok --vocab 64 --tokens 4096
    write_config
    run_train 0 --config train.yaml --steps 10 --set train.warmup_steps=100 --set checkpoint.dir=$dir/ck1
    grep -E '^step=(9|10)/10 ' out.txt | sed 's/ step_ms=.*//' >unbroken.txt
    run_train 0 --config train.yaml --steps 8 --set train.warmup_steps=100 --set checkpoint.every=3
    check_steps 1 8 8
    run_train 0 --config train.yaml --steps 10 --set train.warmup_steps=100
    check_steps 9 10 10
    grep -q 'resumed checkpoint=.*ck/ckpt.bin step=8' err.txt || fail "no resume notice"
    grep -E '^step=(9|10)/10 ' out.txt | sed 's/ step_ms=.*//' >resumed.txt
    [ -s resumed.txt ] && cmp -s unbroken.txt resumed.txt || fail "resumed steps differ: $(cat unbroken.txt resumed.txt)"
    ;;
bad_config)
    printf 'model:\n  layers: 2\n  layerz: 3\n' >bad.yaml
    run_train 2 --config bad.yaml
    grep -q "^troupe-train: bad.yaml:3:3: unknown key 'model.layerz'$" err.txt || fail "no file:line:col error"
    printf 'data: {path: x}\nmodel:\n  width: 30\n  heads: 4\n' >bad.yaml
    run_train 2 --config bad.yaml
    grep -q "model.width 30 is not divisible by model.heads 4" err.txt || fail "no width/heads error"
    run_train 2 --config bad.yaml --steps -1
    grep -q -- "--steps: train.steps: -1 is out of range" err.txt || fail "no --steps range error"
    ;;
bad_data)
    write_config
    run_train 1 --config train.yaml
    grep -q "^troupe-train: $dir/data.tok: cannot open data file: No such file or directory$" err.txt ||
        fail "no missing-file error"
    : >data.tok
    run_train 1 --config train.yaml
    grep -q "data.tok: data file is empty" err.txt || fail "no empty-file error"
    printf 'hello world\n' >data.tok
    run_train 1 --config train.yaml --set data.val_fraction=0
    grep -q "data.tok: too short: 12 training tokens, need at least seq_len+1 = 17" err.txt || fail "no too-short error"
    run_train 1 --config train.yaml --set data.format=tokens
    grep -q "data.tok: bad magic" err.txt || fail "no bad-magic error"
    ;;
*)
    fail "unknown mode $mode"
    ;;
esac
echo "ok: $mode"
