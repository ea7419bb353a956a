#!/usr/bin/env python3
"""PyTorch's TCPStore doing what `rdzv_bench --store` measures for troupe's job
store, at thousands of ranks: connection set-up (each rank's TCPStore client:
its connect and its first round trip), then rank 0's set of one 128-byte key
answering the other ranks' blocked get()s.

    tcpstore_scale.py --ranks 4096 [--connect seq|burst] [--timeout-s 100]

Prints one JSON line: ranks, connect_ms (first connect until the last rank's
client is up), last_ms and median_ms (set until a rank holds the bytes),
total_ms (connect_ms + last_ms). The server (rank 0) runs here; the other
ranks' clients run in child processes of at most 1,024 ranks each: a TCPStore
1.13 client holds 4 descriptors in its process (two connections and its
callback thread's pipe) and the server 2 per client, so 4,096 ranks in one
process pass a 20,000-descriptor limit. seq: the children connect their
clients one after the other, each child after the previous one finished (one
thread of connects, as tcpstore.py does); burst: every rank's thread connects
at once. Times are CLOCK_MONOTONIC, the same in every process.
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

PER_CHILD = 1024


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child(port, world, count, burst, timeout_s):
    """count ranks' clients: lines on stdin say go (connect) and set (the key
    is about to be set); lines on stdout report back."""
    import torch.distributed as dist

    tmo = datetime.timedelta(seconds=timeout_s)
    clients, ready_at, got, errors = [None] * count, [0.0] * count, [0.0] * count, []
    parked = threading.Barrier(count + 1)

    def connect(k):
        try:
            clients[k] = dist.TCPStore("127.0.0.1", port, world, False, timeout=tmo)
        except Exception as e:  # reported, and the rank takes no part
            errors.append(f"connect: {e}")
        ready_at[k] = time.monotonic()

    def rank(k):
        if burst:
            connect(k)
        parked.wait()
        if clients[k] is None:
            return
        try:
            v = clients[k].get("nccl_id")
            if len(v) != 128:
                errors.append(f"{len(v)} bytes")
        except Exception as e:  # a timeout: the rank never got the key
            errors.append(f"get: {e}")
        got[k] = time.monotonic()

    print("up", flush=True)  # torch imported: its seconds are not the connection's
    sys.stdin.readline()  # go
    if not burst:
        for k in range(count):
            connect(k)
    threads = [threading.Thread(target=rank, args=(k,), daemon=True) for k in range(count)]
    for t in threads:
        t.start()
    parked.wait()
    print(json.dumps({"connected": max(ready_at), "errors": errors[:3]}), flush=True)
    sys.stdin.readline()  # the set follows
    end = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    alive = sum(t.is_alive() for t in threads)
    print(json.dumps({"got": got, "alive": alive, "errors": errors[:3]}), flush=True)
    os._exit(0)  # TCPStore 1.13's destructors of many clients do not return


def one_size(n, burst, timeout_s):
    import torch.distributed as dist

    port = free_port()
    tmo = datetime.timedelta(seconds=timeout_s)
    master = dist.TCPStore("127.0.0.1", port, n, True, timeout=tmo, wait_for_workers=False)
    counts, left = [], n - 1
    while left > 0:
        counts.append(min(PER_CHILD, left))
        left -= counts[-1]
    kids = [subprocess.Popen([sys.executable, __file__, "--child", str(port), str(n), str(c),
                              "--connect", "burst" if burst else "seq", "--timeout-s", str(timeout_s)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for c in counts]

    def report(kid):
        line = kid.stdout.readline()
        if not line:
            raise RuntimeError(f"a client process ended early (exit {kid.wait()})")
        return json.loads(line)

    try:
        for kid in kids:
            if kid.stdout.readline().strip() != "up":
                raise RuntimeError(f"a client process failed to start (exit {kid.wait()})")
        t_conn = time.monotonic()
        reports = []
        for kid in kids:  # seq: one after the other; burst: all at once
            kid.stdin.write("go\n")
            kid.stdin.flush()
            if not burst:
                reports.append(report(kid))
        if burst:
            reports = [report(kid) for kid in kids]
        errors = [e for r in reports for e in r["errors"]]
        if errors:
            return {"ranks": n, "hang": True, "why": errors[:3]}
        connect_ms = (max(r["connected"] for r in reports) - t_conn) * 1e3
        time.sleep(0.2 + n / 4000)  # let every get() reach the server before the set
        for kid in kids:
            kid.stdin.write("set\n")
            kid.stdin.flush()
        t0 = time.monotonic()
        master.set("nccl_id", b"\x5a" * 128)
        done = [report(kid) for kid in kids]
        if any(d["alive"] or d["errors"] for d in done):
            return {"ranks": n, "hang": True,
                    "why": [e for d in done for e in d["errors"]][:3] or [f"no answer within {timeout_s} s"]}
        lat = sorted((g - t0) * 1e3 for d in done for g in d["got"])
        return {"ranks": n, "last_ms": lat[-1], "median_ms": statistics.median(lat), "connect_ms": connect_ms,
                "total_ms": connect_ms + lat[-1]}
    finally:
        for kid in kids:
            kid.kill()
            kid.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, required=False)
    ap.add_argument("--connect", choices=["seq", "burst"], default="seq")
    ap.add_argument("--timeout-s", type=float, default=100.0)
    ap.add_argument("--child", nargs=3, type=int, metavar=("PORT", "WORLD", "COUNT"))
    a = ap.parse_args()
    if a.child:
        child(a.child[0], a.child[1], a.child[2], a.connect == "burst", a.timeout_s)
        return
    if not a.ranks or a.ranks < 2:
        ap.error("--ranks N (2 or more) is needed")
    import torch

    r = one_size(a.ranks, a.connect == "burst", a.timeout_s)
    r.update({"torch": torch.__version__, "connect": a.connect})
    print(json.dumps(r), flush=True)
    os._exit(0)  # as in child(): the server's destructor is not waited for


if __name__ == "__main__":
    main()
