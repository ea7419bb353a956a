"""A PyTorch worker for integration.python.torch_stall: a process group
through troupe.torch (gloo), then steps under troupe.torch.step every
PT_STEP_MS ms until the job is stopped. Rank PT_STALL_RANK, after its step
PT_STALL_AFTER, stops stepping (as a rank stuck in a data loader or a hung
kernel would) until the file PT_RESUME exists, then steps again. Steps hold
no collective, so the other ranks keep stepping meanwhile."""
import os
import time

import torch
import torch.distributed as dist

import troupe.torch

os.environ.pop("MASTER_ADDR", None)
os.environ.pop("MASTER_PORT", None)
troupe.torch.init_process_group(backend="gloo")
rank = dist.get_rank()
t = torch.ones(4)
dist.all_reduce(t)  # both ranks are up before the first step
stall_rank = int(os.environ.get("PT_STALL_RANK", "-1"))
stall_after = int(os.environ.get("PT_STALL_AFTER", "0"))
resume = os.environ.get("PT_RESUME", "")
step_s = int(os.environ.get("PT_STEP_MS", "50")) / 1000.0
n = 0
while True:
    n += 1
    with troupe.torch.step(n) as s:
        x = torch.randn(64, 64)
        s.loss = float((x @ x).mean())
        time.sleep(step_s)
    if rank == stall_rank and n == stall_after:
        print(f"ptstall: rank {rank} stops stepping after step {n}", flush=True)
        while not (resume and os.path.exists(resume)):
            time.sleep(0.05)
        print(f"ptstall: rank {rank} steps again", flush=True)
