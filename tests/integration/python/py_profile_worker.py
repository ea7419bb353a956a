"""A Python worker for integration.python.client_profile: steps of 10 ms with a
span each, until some rank has seen a profiled window end (checked by an
all-gather every 10 steps, so every rank stops at the same step) and the
client has turned profiling off (it then creates the file PYP_DONE names:
under load the window's spans can reach the head after the window, and the
client's profile_off must find the job still running). Prints
"pyp: WORKER profiled step N" for each profiled step."""
import os
import sys
import time

import troupe

with troupe.Worker() as w:
    seen = ended = False
    for step in range(1, 6001):
        with w.step(step) as s:
            with w.span("work"):
                time.sleep(0.01)
            s.loss = 1.0 / step
        if s.profiled:
            seen = True
            print(f"pyp: {w.name} profiled step {step}", flush=True)
        ended = ended or (seen and not s.profiled and os.path.exists(os.environ["PYP_DONE"]))
        if step % 10 == 0 and b"1" in w.allgather(b"1" if ended else b"0", name="ended"):
            print(f"pyp: {w.name} stops after step {step}", flush=True)
            sys.exit(0)
    w.fail(troupe.DeadlineExceeded, "no profiled window in 6000 steps")
    sys.exit(1)
