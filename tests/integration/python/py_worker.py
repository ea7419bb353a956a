"""A worker on troupe.Worker for integration.python.worker: store operations
and their exceptions, a barrier, an all-gather, steps with figures, metrics.
Prints "py: ..." lines the test greps."""
import sys

import troupe

with troupe.Worker(control=False) as w:
    print(f"py: rank {w.rank}/{w.world_size} group {w.group} worker {w.name} attempt {w.attempt}", flush=True)
    if w.rank == 0:
        w.store_set("greeting", b"hi from 0")
    print(f"py: rank {w.rank} get greeting = {w.store_get('greeting', timeout=20).decode()}", flush=True)
    n = w.store_add("arrived", 1)
    if n == w.world_size:
        w.store_set("all", "")
    w.store_wait(["all"], timeout=20)
    print(f"py: rank {w.rank} arrived = {w.store_get('arrived')}", flush=True)
    w.barrier("after-store", timeout=20)
    names = w.allgather(w.name.encode(), name="names", timeout=20)
    print(f"py: rank {w.rank} allgather = {','.join(x.decode() for x in names)}", flush=True)
    if w.rank == 0:
        print(f"py: cas = {w.store_compare_set('c', '', 'v1')} {w.store_compare_set('c', 'zz', 'v2')}", flush=True)
        print(f"py: check = {w.store_check(['greeting', 'c'])} {w.store_check(['nope'])}", flush=True)
        print(f"py: delete = {w.store_delete('c')} {w.store_delete('c')}", flush=True)
        for what, fn in (("get", lambda: w.store_get("never-set", timeout=1)),
                         ("add", lambda: w.store_add("greeting", 1)),
                         ("metric", lambda: w.metric(1, "bad name", 1.0))):
            try:
                fn()
                print(f"py: {what} raised nothing", flush=True)
            except troupe.TroupeError as e:
                print(f"py: {what} raised {type(e).__name__} code {e.code} isinstance-TroupeError "
                      f"{isinstance(e, troupe.TroupeError)}: {e.message}", flush=True)
    for step in range(1, 4):
        with w.step(step) as s:
            s.loss = 1.0 / step
        w.metric(step, "py_metric", step * 10 + w.rank)
    w.flush(timeout=10)
    print(f"py: rank {w.rank} done", flush=True)
sys.exit(0)
