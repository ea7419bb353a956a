#!/usr/bin/env python3
"""gloo_bench - PyTorch's gloo all-reduce with the method of coll_bench.c, for
run.sh to put beside troupe's CPU collective: N processes on this host over
TCP loopback, for every size (bytes of float32) 2 warm-up all-reduces, then
ITERS timed ones each after a barrier; rank 0's median (and min) time, the
algorithm bandwidth (bytes / time) and bus bandwidth (algbw * 2 (n-1) / n).
Each rank adds rank+1, so every element must be n (n+1) / 2.

    gloo_bench.py [--ranks 2,4,8] [--sizes 4,1024,...] [--json FILE]
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time


def iters_for(nbytes):
    it = (64 << 20) // max(nbytes, 1)  # ~64 MiB of all-reduce per size and rank count, as coll_bench
    return max(5, min(200, it))


def rank_main(rank, n, port, sizes, queue):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
    out = []
    for nbytes in sizes:
        count = nbytes // 4
        iters = iters_for(nbytes)
        buf = torch.empty(count, dtype=torch.float32)
        want = n * (n + 1) / 2
        times = []
        for i in range(2 + iters):
            buf.fill_(rank + 1)
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            dt = (time.perf_counter() - t0) * 1e6
            if i >= 2:
                times.append(dt)
            if count and (buf[0].item() != want or buf[-1].item() != want):
                raise SystemExit(f"rank {rank}: wrong sum {buf[0].item()} (want {want})")
        if rank == 0:
            times.sort()
            out.append({"ranks": n, "bytes": nbytes, "iters": iters, "median_us": round(times[len(times) // 2], 1),
                        "min_us": round(times[0], 1)})
    dist.destroy_process_group()
    if rank == 0:
        queue.put(out)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def human(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1024 else f"{b} B"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("--sizes", default="4,1024,65536,1048576,4194304,16777216,67108864,268435456")
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    sizes = [int(x) for x in a.sizes.split(",")]
    results = []
    print(f"PyTorch {torch.__version__} gloo all-reduce (f32 sum, TCP loopback), {os.cpu_count()} cores")
    print(f"{'ranks':>5} {'size':>10} {'iters':>6} {'median_us':>12} {'min_us':>12} {'algbw_GB/s':>12} {'busbw_GB/s':>12}")
    for n in [int(x) for x in a.ranks.split(",")]:
        q = ctx.Queue()
        port = free_port()
        procs = [ctx.Process(target=rank_main, args=(r, n, port, sizes, q)) for r in range(n)]
        for p in procs:
            p.start()
        out = q.get(timeout=3600)
        for p in procs:
            p.join()
            if p.exitcode != 0:
                sys.exit(f"gloo_bench: a rank of {n} exited {p.exitcode}")
        for r in out:
            algbw = r["bytes"] / r["median_us"] / 1e3 if r["median_us"] > 0 else 0.0
            r["algbw_gbs"] = round(algbw, 4)
            r["busbw_gbs"] = round(algbw * 2 * (n - 1) / n, 4)
            print(f"{n:>5} {human(r['bytes']):>10} {r['iters']:>6} {r['median_us']:>12.1f} {r['min_us']:>12.1f} "
                  f"{r['algbw_gbs']:>12.3f} {r['busbw_gbs']:>12.3f}", flush=True)
        results += out
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"impl": "gloo", "torch": torch.__version__, "results": results}, f)


if __name__ == "__main__":
    main()
