#!/usr/bin/env bash
# The 2-GPU elastic test's logic without a GPU: tests/gpu/runtime/train_elastic.sh
# in its dry run (TROUPE_GPU_DRYRUN=1) on 2 simulated GPUs, troupe-train on the
# CPU collective - a rank killed, the survivor alone, the replacement back,
# the curve vs one process with the global batch, the timings - so that the
# script the lent GPU machines run cannot rot between their visits.
HERE=$(cd "$(dirname "$0")" && pwd)
TROUPE_GPU_DRYRUN=1 exec bash "$HERE/../../gpu/runtime/train_elastic.sh"
