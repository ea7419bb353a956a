#!/usr/bin/python3
"""gloo_bench.py RANK SIZE PORT MIB ITERS: torch.distributed gloo all-reduce of
MIB MiB float32 between processes on this host, timed as coll_bench.c times
troupe's (barrier, then one all-reduce; 2 warm-ups; median). Rank 0 prints
one JSON line in coll_bench's format."""
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist

rank, size, port, mib, iters = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]),
                                int(sys.argv[5]))
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
count = int(mib * 1048576) // 4
buf = torch.empty(count, dtype=torch.float32)
times = []
for i in range(-2, iters):
    buf.fill_(rank + 1)
    dist.barrier()
    t0 = time.perf_counter()
    dist.all_reduce(buf)
    if i >= 0:
        times.append((time.perf_counter() - t0) * 1e3)
    want = size * (size + 1) / 2
    if count and (buf[0].item() != want or buf[-1].item() != want):
        sys.exit(f"gloo_bench: rank {rank}: wrong sum {buf[0].item()}")
if rank == 0:
    med, b = statistics.median(times), count * 4
    bus = 2 * (size - 1) / size * b / (med / 1e3) / 1e9 if size > 1 else 0.0
    print(json.dumps({"impl": "torch-gloo", "torch": torch.__version__, "size": size, "bytes": b, "iters": iters,
                      "median_ms": round(med, 3), "min_ms": round(min(times), 3), "busbw_GBps": round(bus, 3)}))
dist.destroy_process_group()
