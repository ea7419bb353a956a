#!/usr/bin/env python3
"""PyTorch TCPStore doing what bench/rdzv measures for troupe: rank 0 sets a
128-byte key, every other rank (its own thread and its own TCPStore client
connection) blocks in get() until it is there. Prints and writes the time from
rank 0's set() until the last rank holds the bytes.

    tcpstore.py --ranks 2,16,128 [--connect seq|burst] [--json FILE] [--timeout-s 100]
A size whose ranks do not all return within the timeout is reported as a hang.
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

import torch
import torch.distributed as dist


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Stores of the measured size, kept until the process ends: TCPStore 1.13's
# destructors of a thousand clients and their server do not return (the
# process is ended with os._exit after the result is printed), and that must
# not be reported as a hang of what was measured.
_KEEP = []


def one_size(n, timeout_s, burst=False):
    port = free_port()
    tmo = datetime.timedelta(seconds=timeout_s)
    master = dist.TCPStore("127.0.0.1", port, n, True, timeout=tmo, wait_for_workers=False)
    clients, got, ready_at, errors = [None] * n, [0.0] * n, [0.0] * n, []
    _KEEP.append((master, clients))

    def connect(k):
        # The constructor connects and makes its first round trip (an add
        # that counts the workers): troupe's side is a connection and its
        # first call (rdzv_bench --store).
        clients[k] = dist.TCPStore("127.0.0.1", port, n, False, timeout=tmo)
        ready_at[k] = time.monotonic()

    t_conn = time.monotonic()
    if not burst:
        for k in range(1, n):
            connect(k)
    ready = threading.Barrier(n)  # the waiters and the publisher

    def waiter(k):
        try:
            if burst:
                connect(k)  # every rank at once, as processes starting together
        except Exception as e:
            errors.append(f"rank {k}: connect: {e}")
        ready.wait()
        if clients[k] is None:
            return
        try:
            v = clients[k].get("nccl_id")
            if len(v) != 128:
                errors.append(f"rank {k}: {len(v)} bytes")
        except Exception as e:  # a timeout is the hang we report
            errors.append(f"rank {k}: {e}")
        got[k] = time.monotonic()

    threads = [threading.Thread(target=waiter, args=(k,), daemon=True) for k in range(1, n)]
    for t in threads:
        t.start()
    ready.wait()
    connect_ms = (max(ready_at[1:]) - t_conn) * 1e3
    time.sleep(0.2)  # let every get() reach the store before the set
    t0 = time.monotonic()
    master.set("nccl_id", b"\x5a" * 128)
    deadline = t0 + timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in threads) or errors:
        return {"ranks": n, "hang": True, "why": errors[:3] or [f"no answer within {timeout_s} s"]}
    lat = sorted((g - t0) * 1e3 for g in got[1:])
    return {"ranks": n, "last_ms": lat[-1], "median_ms": statistics.median(lat), "connect_ms": connect_ms,
            "total_ms": connect_ms + lat[-1]}


def bounded(n, timeout_s, burst=False):
    """one_size in a child process, killed at the timeout: TCPStore 1.13 can
    hang in connect as well as in get, and a hang must not stop the run."""
    try:
        p = subprocess.run([sys.executable, __file__, "--one", str(n), "--timeout-s", str(timeout_s)] +
                           (["--connect", "burst"] if burst else []),
                           capture_output=True, text=True, timeout=timeout_s + 10)
        return json.loads(p.stdout)
    except subprocess.TimeoutExpired:
        return {"ranks": n, "hang": True, "why": [f"no result within {timeout_s + 10:.0f} s (killed)"]}
    except ValueError:
        return {"ranks": n, "hang": True, "why": ["the child failed: " + p.stderr.strip()[-300:]]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="2,16,128,512,1024")
    ap.add_argument("--json")
    ap.add_argument("--timeout-s", type=float, default=100.0)
    ap.add_argument("--one", type=int)
    ap.add_argument("--connect", choices=["seq", "burst"], default="seq",
                    help="seq: the clients connect one after the other; burst: each rank's thread at once")
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one_size(a.one, a.timeout_s, a.connect == "burst")), flush=True)
        os._exit(0)  # not the destructors of _KEEP
    out = {"bench": "rdzv-tcpstore", "torch": torch.__version__, "connect": a.connect, "results": []}
    print(f"TCPStore (torch {torch.__version__})")
    print(f"{'ranks':>8} {'last rank ms':>14} {'median ms':>14} {'connect ms':>12}")
    for n in [int(x) for x in a.ranks.split(",")]:
        r = bounded(n, a.timeout_s, a.connect == "burst")
        out["results"].append(r)
        if r.get("hang"):
            print(f"{n:>8} {'HANG':>14} {'':>14} {'':>12}  {r['why']}", flush=True)
        else:
            print(f"{n:>8} {r['last_ms']:>14.2f} {r['median_ms']:>14.2f} {r['connect_ms']:>12.1f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
