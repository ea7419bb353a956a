"""A PyTorch worker for integration.python.torch_missing: the worker named in
PT_ABSENT never reaches troupe (it sleeps, then exits); the others wait for it
through the job store and through troupe.torch.init_process_group, and print
what each wait raised ("pt: ..." lines the test greps)."""
import datetime
import os
import sys
import time

if os.environ.get("TROUPE_WORKER") == os.environ.get("PT_ABSENT"):
    time.sleep(float(os.environ.get("PT_ABSENT_S", "30")))
    sys.exit(0)

import troupe  # noqa: E402
import troupe.torch  # noqa: E402

w = troupe.Worker()
store = troupe.torch.Store(worker=w, timeout=datetime.timedelta(seconds=2))
# The present ranks meet first, with a long wait: on a loaded machine one of
# them imports torch seconds after the other, and a 2 s wait begun alone
# named that late rank as never having called the store too.
absent = int(os.environ["PT_ABSENT"].rsplit("-", 1)[1])
store.set(f"here/{w.rank}", b"1")
store.wait([f"here/{r}" for r in range(w.world_size) if r != absent], datetime.timedelta(seconds=120))
try:
    store.wait([f"ready/{(w.rank + 1) % w.world_size}"])
    print("pt: store wait returned", flush=True)
except RuntimeError as e:
    print(f"pt: store wait raised RuntimeError: {e}", flush=True)
t0 = time.monotonic()
try:
    troupe.torch.init_process_group(backend="gloo", worker=w, timeout=datetime.timedelta(seconds=3))
    print("pt: init_process_group returned", flush=True)
except troupe.DeadlineExceeded as e:
    print(f"pt: init_process_group raised {type(e).__name__} after {time.monotonic() - t0:.1f} s: {e}", flush=True)
w.close()
