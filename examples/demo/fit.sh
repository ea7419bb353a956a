#!/usr/bin/env bash
# fit.sh GPUS JOB.yaml - shrink the example job in place to a machine with
# GPUS real GPUs (the job as written wants one 8-GPU node): one virtual node of
# all of them, one GPU per worker, and no generation group on a single GPU.
set -eu
gpus=${1:?usage: fit.sh GPUS JOB.yaml}
job=${2:?usage: fit.sh GPUS JOB.yaml}
[ "$gpus" -ge 8 ] && exit 0
sed -i -e "s/nodes: \[8\]/nodes: [$gpus]/" -e 's/resources: {gpu: 2}/resources: {gpu: 1}/' \
    -e 's/workers: 2/workers: 1/' "$job"
if [ "$gpus" -lt 2 ]; then
    sed -i '/- name: generation/,/^restart:/{/^restart:/!d}' "$job"
fi
