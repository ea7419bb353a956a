"""troupe.Client's run-time profiling and trace against a running job, for
integration.python.client_profile: waits for the job to run, profiles the
next 3 steps of *policy-1, waits for their spans, turns profiling off, and
prints JSON lines (the setting, the trace, the errors) the test checks."""
import json
import os
import sys
import time

import troupe

job_id = int(sys.argv[1])


def until(what, pred, timeout=60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise troupe.DeadlineExceeded(4, f"{what} within {timeout} s")


with troupe.Client() as c:
    until("job running with steps", lambda: c.job(job_id)["state"] == "RUNNING" and c.metrics(job_id)["points"])
    for bad in ({"steps": "5:3"}, {"workers": "*policy-1"}):
        try:
            c.profile(job_id, **bad)
        except troupe.InvalidArgument as e:
            print(json.dumps({"invalid": bad, "message": e.message}))
    v1 = c.profile(job_id, next=3, workers="*policy-1")
    print(json.dumps({"set": v1, "profile": c.job(job_id)["profile"]}))
    steps = lambda: sorted({s["step"] for s in c.trace(job_id)["spans"] if s["cat"] == "step"})
    until("3 profiled steps in the trace", lambda: len(steps()) >= 3)
    v2 = c.profile_off(job_id)
    print(json.dumps({"off": v2, "profile": c.job(job_id)["profile"]}))
    open(os.environ["PYP_DONE"], "w").close()  # the workers may stop now
    print(json.dumps({"job": c.wait(job_id, timeout=60)["state"]}))
    t = c.trace(job_id)
    print(json.dumps({"trace": {"steps": sorted({(s["rank"], s["step"]) for s in t["spans"]}),
                                "names": sorted({s["name"] for s in t["spans"]}),
                                "workers": [w["worker"] for w in t["workers"]]}}))
    with open(sys.argv[2], "w") as f:
        json.dump(c.chrome_trace(job_id), f)
    try:
        c.profile(job_id, next=3)
    except troupe.FailedPrecondition as e:
        print(json.dumps({"ended": e.message}))
    try:
        c.trace(999999)
    except troupe.NotFound as e:
        print(json.dumps({"not_found": e.message}))
