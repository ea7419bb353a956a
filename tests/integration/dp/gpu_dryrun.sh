#!/usr/bin/env bash
# The multi-GPU test's logic without a GPU: tests/gpu/dp.sh in its dry run
# (TROUPE_GPU_DRYRUN=1) on 2 simulated GPUs, troupe-train on the CPU
# collective - placement, the curve vs one process with 2x the batch,
# profiling 2:4 on *policy-1 and its trace, a killed rank failing the job
# naming it, and max_restarts 1 resuming from the checkpoint - so that the
# script the lent multi-GPU machines run cannot rot between their visits.
HERE=$(cd "$(dirname "$0")" && pwd)
TROUPE_GPU_DRYRUN=1 TROUPE_GPUS=${TROUPE_GPUS:-2} exec bash "$HERE/../../gpu/dp.sh"
