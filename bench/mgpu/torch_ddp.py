#!/usr/bin/env python3
"""torch_ddp.py - PyTorch DistributedDataParallel peer of troupe-train's data
parallelism (bench/mgpu; run_device.sh launches it with torchrun).

The model is bench/train/torch_gpt2.py's GPT (the same GPT-2 shapes as
troupe-train: pre-norm blocks, tanh GELU, tied head, vocab 50304, T 1024),
trained the usual fast way: bf16 autocast over fp32 weights, SDPA causal
attention, fused AdamW, clipping at 1.0, DDP with 25 MiB buckets
(bucket_cap_mb, troupe-train's dp.bucket_mb default) and gradients as bucket
views. Every rank gets --batch sequences per step, so the global batch is
GPUs x batch, as in troupe's weak-scaling jobs. The median step time over
--steps timed steps (after --warmup) is reported by rank 0 with the global
tokens/s.

    torchrun --standalone --nproc_per_node 8 bench/mgpu/torch_ddp.py --models 124M,350M --batch 16 --json ddp-8.json

--device cpu --shrink (gloo, fp32, no autocast, the models shrunk as in
troupe_bench.sh's dry run) only checks the script's logic on a machine
without GPUs (run_device.sh's dry run)."""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
if not hasattr(F, "scaled_dot_product_attention"):  # torch < 2.0 (the CPU dry run's Debian torch)
    def _sdpa(q, k, v, is_causal=False):
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        if is_causal:
            T = q.size(-2)
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        return F.softmax(att, dim=-1) @ v
    F.scaled_dot_product_attention = _sdpa
from torch_gpt2 import GPT, MODELS  # noqa: E402  (the single-GPU reference's model)

# --shrink (dry runs): the shapes troupe_bench.sh's dry run gives troupe-train
SHRUNK = {"124M": (2, 64, 4), "350M": (4, 64, 4)}


def bench(name, B, steps, warmup, dev, rank, world, mode, shrink):
    L, C, NH = SHRUNK[name] if shrink else MODELS[name]
    T, Vp, V = (64, 128, 64) if shrink else (1024, 50304, 50257)
    torch.manual_seed(0)
    model = GPT(L, C, NH, T=T, Vp=Vp).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    cuda = dev.type == "cuda"
    ddp = DDP(model, device_ids=[dev.index] if cuda else None, bucket_cap_mb=25, gradient_as_bucket_view=True)
    fwd = torch.compile(ddp) if mode == "compile" else ddp
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if cuda else {}))
    g = torch.Generator(device=dev).manual_seed(1 + rank)  # each rank its own data
    idx = torch.randint(0, V, (B, T), device=dev, generator=g)
    tgt = torch.randint(0, V, (B, T), device=dev, generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        if cuda:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = fwd(idx, tgt)
        else:
            loss = fwd(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize()

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t_warm = time.time()
    for _ in range(warmup):
        step()
    sync()
    t_warm = time.time() - t_warm
    times = []
    for _ in range(steps):
        dist.barrier()
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    # the slowest rank's median is the group's step
    ms = torch.tensor([statistics.median(times)], dtype=torch.float64, device=dev if cuda else "cpu")
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)
    ms = float(ms.item())
    r = {"impl": "pytorch-ddp-" + mode, "model": name, "params": n_params, "gpus": world, "B": B, "T": T,
         "global_batch": B * world, "step_ms": ms, "tok_s": world * B * T / (ms / 1e3),
         "tok_s_per_gpu": B * T / (ms / 1e3), "loss": float(loss), "warmup_s": t_warm,
         "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}
    del ddp, fwd, model, opt
    if cuda:
        torch.cuda.empty_cache()
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="124M,350M")
    ap.add_argument("--batch", type=int, default=16, help="sequences per rank per step")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--modes", default="eager", help="eager[,compile]")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--shrink", action="store_true", help="dry run: models of a few layers of width 64, T 64")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast on the lent machines
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if a.device == "cuda":
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        try:  # device_id (torch >= 2.3) binds the communicator to this GPU at once
            dist.init_process_group("nccl", device_id=dev)
        except TypeError:
            dist.init_process_group("nccl")
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
    name = torch.cuda.get_device_name(local) if a.device == "cuda" else "cpu"
    if rank == 0:
        print(f"torch {torch.__version__} DDP on {world} x {name}, NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}",
              flush=True)
    out = []
    for mode in a.modes.split(","):
        for m in a.models.split(","):
            try:
                r = bench(m, a.batch, a.steps, a.warmup, dev, rank, world, mode, a.shrink)
            except RuntimeError as e:  # torch.cuda.OutOfMemoryError is one
                if "out of memory" not in str(e):
                    raise
                print(f"rank {rank}: {m} B={a.batch}: out of memory", flush=True)
                torch.cuda.empty_cache()
                continue
            out.append(r)
            if rank == 0:
                print(f"{r['impl']:20s} {m:5s} {world} GPUs B={a.batch}/GPU step {r['step_ms']:8.2f} ms "
                      f"{r['tok_s']:10.0f} tok/s ({r['tok_s_per_gpu']:.0f}/GPU) warm-up {r['warmup_s']:.1f} s", flush=True)
    if rank == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": name, "gpus": world, "results": out}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
