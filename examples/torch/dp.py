"""A small model trained data-parallel under troupe with PyTorch.

Every rank holds the same model (DistributedDataParallel averages the
gradients) and takes its share of each global batch; the process group meets
through troupe's store (troupe.torch.init_process_group: gloo on CPU, NCCL on
GPUs, no MASTER_PORT). Each step is a troupe.torch.step with its figures
(loss, step time, GPU memory on GPUs), so `troupe metrics`, `troupe job`
(health: stalls, stragglers) and profiling (`profile:` in the job, `troupe
profile`, NRL_NSYS_PROFILE_STEP_RANGE: torch.cuda.profiler.start/stop and NVTX
ranges per step) work as for troupe-train. The data is synthetic
(a noisy linear map through a tanh), the same on every rank from a fixed
seed, so 2 ranks train exactly what 1 rank does with the same global batch.

    python3 dp.py [--steps 50] [--global-batch 64] [--lr 0.05]
"""
import argparse
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import troupe
import troupe.torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--global-batch", type=int, default=64, help="samples per step over all ranks")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    # caller_profiles: troupe.torch.step drives the CUDA profiler and NVTX
    # through torch on the steps troupe says to profile.
    w = troupe.Worker(caller_profiles=True)
    troupe.torch.init_process_group(worker=w)
    rank, size = dist.get_rank(), dist.get_world_size()
    if args.global_batch % size:
        w.fail(troupe.InvalidArgument, f"--global-batch {args.global_batch} is not a multiple of {size} ranks")
        return 2
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")

    g = torch.Generator().manual_seed(1234)
    n, d = 8192, 32
    x = torch.randn(n, d, generator=g)
    y = torch.tanh(x @ torch.randn(d, 1, generator=g)) + 0.01 * torch.randn(n, 1, generator=g)
    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(d, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).to(dev)
    ddp = DDP(model, device_ids=[dev.index] if cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    per = args.global_batch // size

    for step in range(1, args.steps + 1):
        start = ((step - 1) * args.global_batch) % (n - args.global_batch + 1)
        lo = start + rank * per
        xb, yb = x[lo:lo + per].to(dev), y[lo:lo + per].to(dev)
        with troupe.torch.step(step, worker=w) as s:  # GPU memory figures filled in on CUDA
            with w.span("forward"):
                loss = torch.nn.functional.mse_loss(ddp(xb), yb)
            with w.span("backward"):
                opt.zero_grad()
                loss.backward()
            with w.span("optimizer"):
                opt.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            s.loss = mean.item() / size
        if rank == 0 and (step == 1 or step % 10 == 0 or step == args.steps):
            print(f"dp: step {step} loss {s.figures['loss']:.6f}", flush=True)
        if w.should_stop():
            break
    total = sum(p.detach().double().sum().item() for p in model.parameters())
    print(f"dp: rank {rank}/{size} done: backend {dist.get_backend()} on {dev.type}, final loss "
          f"{s.figures['loss']:.6f} parameter sum {total:.9f}", flush=True)
    dist.destroy_process_group()
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
