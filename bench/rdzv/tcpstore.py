#!/usr/bin/env python3
"""PyTorch TCPStore doing what bench/rdzv measures for troupe: rank 0 sets a
128-byte key, every other rank (its own thread and its own TCPStore client
connection) blocks in get() until it is there. Prints and writes the time from
rank 0's set() until the last rank holds the bytes.

    tcpstore.py --ranks 2,16,128 [--json FILE] [--timeout-s 100]
A size whose ranks do not all return within the timeout is reported as a hang.
"""
import argparse
import datetime
import json
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


def one_size(n, timeout_s):
    port = free_port()
    tmo = datetime.timedelta(seconds=timeout_s)
    master = dist.TCPStore("127.0.0.1", port, n, True, timeout=tmo, wait_for_workers=False)
    clients, got, errors = [], [0.0] * n, []
    t_conn = time.monotonic()
    for _ in range(1, n):
        clients.append(dist.TCPStore("127.0.0.1", port, n, False, timeout=tmo))
    connect_ms = (time.monotonic() - t_conn) * 1e3
    ready = threading.Barrier(n)  # the waiters and the publisher

    def waiter(k, store):
        ready.wait()
        try:
            v = store.get("nccl_id")
            if len(v) != 128:
                errors.append(f"rank {k}: {len(v)} bytes")
        except Exception as e:  # a timeout is the hang we report
            errors.append(f"rank {k}: {e}")
        got[k] = time.monotonic()

    threads = [threading.Thread(target=waiter, args=(k + 1, c), daemon=True) for k, c in enumerate(clients)]
    for t in threads:
        t.start()
    ready.wait()
    time.sleep(0.2)  # let every get() reach the store before the set
    t0 = time.monotonic()
    master.set("nccl_id", b"\x5a" * 128)
    deadline = t0 + timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in threads) or errors:
        return {"ranks": n, "hang": True, "why": errors[:3] or [f"no answer within {timeout_s} s"]}
    lat = sorted((g - t0) * 1e3 for g in got[1:])
    return {"ranks": n, "last_ms": lat[-1], "median_ms": statistics.median(lat), "connect_ms": connect_ms}


def bounded(n, timeout_s):
    """one_size in a child process, killed at the timeout: TCPStore 1.13 can
    hang in connect as well as in get, and a hang must not stop the run."""
    try:
        p = subprocess.run([sys.executable, __file__, "--one", str(n), "--timeout-s", str(timeout_s)],
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
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one_size(a.one, a.timeout_s)))
        return
    out = {"bench": "rdzv-tcpstore", "torch": torch.__version__, "results": []}
    print(f"TCPStore (torch {torch.__version__})")
    print(f"{'ranks':>8} {'last rank ms':>14} {'median ms':>14} {'connect ms':>12}")
    for n in [int(x) for x in a.ranks.split(",")]:
        r = bounded(n, a.timeout_s)
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
