"""troupe.Client against a running head for integration.python.worker:
prints what it sees as JSON lines the test compares with the CLI's answers."""
import json
import sys

import troupe

job_id = int(sys.argv[1])
with troupe.Client() as c:
    job = c.wait(job_id, timeout=60)
    print(json.dumps({"job": {k: job[k] for k in ("id", "name", "state", "workers_total")},
                      "workers": sorted(w["name"] for w in job["workers"])}))
    print(json.dumps({"jobs": [j["id"] for j in c.jobs()]}))
    # name, GPUs and CPU slots: the fields around and after the last ones of troupe_node
    print(json.dumps({"nodes": sorted([n["name"], n["gpus"], n["cpus"], n["cpus_free"]] for n in c.nodes())}))
    pts = c.metrics(job_id, names=["py_metric"])["points"]
    print(json.dumps({"py_metric": sorted((p["worker"], p["step"], p["value"]) for p in pts)}))
    logs = c.logs(job_id)
    print(json.dumps({"log_lines_with_done": sum(1 for l in logs.splitlines() if "py: rank" in l and "done" in l)}))
    try:
        c.job(999999)
    except troupe.NotFound as e:
        print(json.dumps({"not_found": e.message}))
    spec = {"name": "fromdict", "cluster": {"nodes": [4]},
            "groups": [{"name": "g", "workers": 1, "resources": {"gpu": 1}, "command": ["true"]}]}
    jid = c.submit(spec)
    print(json.dumps({"dict_job": c.wait(jid, timeout=60)["state"]}))
    try:
        c.submit({"name": "bad", "groups": []})
    except troupe.InvalidArgument as e:
        print(json.dumps({"invalid": e.message}))
