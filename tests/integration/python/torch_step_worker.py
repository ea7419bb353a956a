"""A PyTorch worker for integration.python.torch_step: a process group
through troupe.torch (gloo), then PT_STEPS steps under troupe.torch.step, each
an all_reduce and a loss figure; prints "ptstep: ..." lines (the steps it was
told are profiled, the windows at the end)."""
import os

import torch
import torch.distributed as dist

import troupe.torch

os.environ.pop("MASTER_ADDR", None)
os.environ.pop("MASTER_PORT", None)
store = troupe.torch.init_process_group(backend="gloo")
rank = dist.get_rank()
for n in range(1, int(os.environ.get("PT_STEPS", "6")) + 1):
    with troupe.torch.step(n) as s:
        t = torch.ones(4) * n
        dist.all_reduce(t)
        s.loss = float(t[0]) / 100
    if s.profiled:
        print(f"ptstep: rank {rank} step {n} profiled", flush=True)
windows = troupe.torch.profile_windows()
dist.destroy_process_group()
troupe.torch.close()
print(f"ptstep: rank {rank} windows {windows}", flush=True)
