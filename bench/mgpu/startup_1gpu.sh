#!/usr/bin/env bash
# bench/mgpu/startup_1gpu.sh - troupe-train's start-up figures on one GPU, before/after in one
# device call (bench/RESULTS.md "troupe-train start-up on one GPU"). Expects, in the checkout
# copied to the GPU machine: .device staged by tests/gpu/runtime/stage.sh from the new build,
# .device/before/troupe-train (the old binary), .device/test_train_gpu, .device/tstamp.py
# (bench/mgpu/tstamp.py: times each output line from exec), and this tree's bench/mgpu and
# tests/integration/lib.sh under .device/src. Results: $OUT/p1.tgz.
# (Staged as startup_device.sh: start-up figures on one GPU, before/after, plus the GPU tests.)
set -u
R=$PWD; D=$R/.device; O=/tmp/o; mkdir -p $O
export LD_LIBRARY_PATH=$D/lib:/usr/local/cuda/lib64 NCCL_NVLS_ENABLE=0
A=$D/bin/worker/train/troupe-train; BB=$D/binb/worker/train/troupe-train
cp -r $D/bin $D/binb 2>/dev/null; cp $D/before/troupe-train $BB
nvidia-smi -L > $O/gpu.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $O/gpu.txt
$A --make-data /tmp/data.tok --vocab 50257 --tokens 8000000 > /dev/null
cat > /tmp/s.yaml <<Y
seed: 1
device: cuda
model: {layers: 12, width: 768, heads: 12, seq_len: 1024, vocab: 50257}
train: {steps: 4, micro_batch: 16, warmup_steps: 5, precision: bf16}
data: {path: /tmp/data.tok, val_fraction: 0}
eval: {every: 0}
Y
ts() { python3 $D/tstamp.py "$@"; }
one() { local name=$1; shift; echo "== $name" >> $O/standalone.txt; env "$@" > $O/$name.txt 2>&1; tail -n 25 $O/$name.txt >> $O/standalone.txt; }
rm -rf /tmp/gc
one before-1 python3 $D/tstamp.py $BB --config /tmp/s.yaml --log-level info
one after-cold TR_CUDA_GEMM_CACHE=/tmp/gc python3 $D/tstamp.py $A --config /tmp/s.yaml --log-level info
one after-warm1 TR_CUDA_GEMM_CACHE=/tmp/gc python3 $D/tstamp.py $A --config /tmp/s.yaml --log-level info
one before-2 python3 $D/tstamp.py $BB --config /tmp/s.yaml --log-level info
one after-warm2 TR_CUDA_GEMM_CACHE=/tmp/gc python3 $D/tstamp.py $A --config /tmp/s.yaml --log-level info
cp /tmp/gc/* $O/ 2>/dev/null
tar czf $OUT/p1.tgz -C $O . ; echo phase1 done
# under troupe, one worker: before (old troupe-train), after with a fresh cache dir, after warm
rm -rf /tmp/gct
i=0; for v in before after after before; do i=$((i+1))
  bin=$D/bin; [ $v = before ] && bin=$D/binb
  mkdir -p $O/troupe-$v; TR_CUDA_GEMM_CACHE=/tmp/gct STARTUP_SIZES=1 STARTUP_REPS=1 TROUPE_BIN=$bin timeout 120 bash $D/src/bench/mgpu/troupe_bench.sh /tmp/w-$v/raw startup > $O/troupe-$v-$i.txt 2>&1
  echo "rc=$?" >> $O/troupe-$v-$i.txt; cp -r /tmp/w-$v/. $O/troupe-$v/ 2>/dev/null; rm -rf /tmp/w-$v
  python3 $D/src/bench/mgpu/summarize.py $O/troupe-$v >> $O/troupe-$v-$i.txt 2>&1; mv $O/troupe-$v $O/troupe-$v-$(date +%s%N)
done
tar czf $OUT/p1.tgz -C $O . ; echo phase2 done
# GPU tests, twice over one cache dir (the second run takes every plan from it)
export TR_CUDA_GEMM_CACHE=/tmp/gctest
for pass in 1; do for c in parity_fp32 parity_bf16 attention learns smoke; do
  timeout 120 $D/test_train_gpu $c > $O/test-$pass-$c.txt 2>&1; echo "gpu.train.$c pass$pass rc=$?" | tee -a $O/tests.txt
done; done
tar czf $OUT/p1.tgz -C $O . ; echo phase3 done
unset TR_CUDA_GEMM_CACHE
mkdir -p /tmp/o/train_dp; TROUPE_REQUIRE_GPU=1 TROUPE_BIN=$D/bin GPU_OUT=/tmp/o/train_dp timeout 330 bash tests/gpu/runtime/train_dp.sh > $O/train_dp.txt 2>&1; echo "train_dp rc=$?" | tee -a $O/tests.txt
tar czf $OUT/p1.tgz -C $O . ; echo phase4 done
