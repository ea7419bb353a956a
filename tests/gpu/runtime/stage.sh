#!/usr/bin/env bash
# stage.sh BUILD_DIR [DEST]: copy what the GPU tests (train_nccl_profile.sh,
# train_dp.sh, ../dp.sh) and bench/mgpu/run_device.sh need from a CUDA
# build into DEST (default .device) for the lent GPU machine: the four
# programs (and troupe-bench-allreduce where built) in the build tree's
# layout under DEST/bin (so TROUPE_BIN=DEST/bin works with
# tests/integration/lib.sh), libtroupe and libtroupe_nccl plus the Debian
# runtime libraries (../shared/device/pack-libs) under DEST/lib, and the
# commit in DEST/commit (the device machine's copy has no .git).
# Binaries only, no object files: the lent machine's runner carries at most 64 MiB.
set -euo pipefail
b=${1:?usage: stage.sh BUILD_DIR [DEST]}
d=${2:-.device}
[ -f "$b/client/nccl/libtroupe_nccl.so" ] || { echo "stage.sh: $b has no libtroupe_nccl.so (a CUDA build with NCCL?)" >&2; exit 1; }
for f in server/troupe-head worker/node/troupe-node client/troupe worker/train/troupe-train; do
    mkdir -p "$d/bin/$(dirname "$f")"
    cp "$b/$f" "$d/bin/$f"
done
# bench/mgpu/run_device.sh's all-reduce benchmark and the CUDA backend's
# test program (bench/mgpu/refit_bench.sh runs its refit_ops case), where
# they were built.
for f in bench/mgpu/troupe-bench-allreduce bench/mgpu/troupe-bench-comm-shrink tests/gpu/train/test_train_gpu; do
    [ -f "$b/$f" ] || continue
    mkdir -p "$d/bin/$(dirname "$f")"
    cp "$b/$f" "$d/bin/$f"
done
mkdir -p "$d/lib"
cp -L "$b/client/libtroupe.so.0" "$b/client/nccl/libtroupe_nccl.so" "$d/lib/"
# pack-libs copies the runtime libraries the GPU machine lacks (nng, protobuf-c, libyaml...);
# it lives beside the checkout in the shared tools, or where TROUPE_PACK_LIBS points.
pack=${TROUPE_PACK_LIBS:-$(dirname "$0")/../../../../shared/device/pack-libs}
[ -x "$pack" ] || { echo "stage.sh: no pack-libs at $pack (set TROUPE_PACK_LIBS)" >&2; exit 1; }
"$pack" "$d/lib" >/dev/null
src=$(cd "$(dirname "$0")" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(cd "$(dirname "$0")" && git status --porcelain --untracked-files=no 2>/dev/null)" ] || src="$src-dirty"
echo "$src" >"$d/commit"
du -sh "$d"
