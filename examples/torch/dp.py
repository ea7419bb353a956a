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

The same script runs under torchrun instead, without troupe (torch's own
rendezvous: env://, a TCPStore on MASTER_PORT; no metrics, profiling or
trace), so the two can be compared as they are (bench/torch_start):

    torchrun --standalone --nproc-per-node 2 dp.py --torchrun
"""
import argparse
import contextlib
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import troupe
import troupe.torch


class _Step:
    """troupe.torch.step's figures, for --torchrun (nothing is reported)."""

    def __init__(self) -> None:
        self.figures: dict = {}

    def __enter__(self) -> "_Step":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def __setattr__(self, name: str, value: object) -> None:
        if name == "figures":
            object.__setattr__(self, name, value)
        else:
            self.figures[name] = value


class _Torchrun:
    """What dp.py asks of troupe.Worker, under torchrun: no runtime."""

    def fail(self, code: object, reason: str) -> None:
        print(f"dp: {reason}", file=sys.stderr, flush=True)

    def span(self, name: str) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def step(self, n: int) -> _Step:
        return _Step()

    def should_stop(self) -> bool:
        return False

    def close(self) -> None:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--global-batch", type=int, default=64, help="samples per step over all ranks")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--torchrun", action="store_true",
                    help="run under torchrun without troupe: env:// rendezvous (TCPStore), no troupe runtime")
    args = ap.parse_args()

    if args.torchrun:
        w = _Torchrun()
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    else:
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
        with w.step(step) if args.torchrun else troupe.torch.step(step, worker=w) as s:  # GPU memory on CUDA
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
        if rank == 0 and step == 1:  # when the job's first step ended (bench/torch_start reads it)
            print(f"dp: first step done at unix time {time.time():.3f}", flush=True)
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
