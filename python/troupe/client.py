"""troupe.Client: what the troupe CLI does, from Python, over libtroupe's
include/troupe/client.h: submit (a YAML file or a dict), job, jobs, wait,
stop, delete, logs (follow), metrics (follow), nodes, run-time profiling
(profile) and the built-in trace (trace, chrome_trace). Results are plain
dicts and lists. A Client may be used from several threads.

Credentials and TLS are libtroupe's, as the CLI's: token=, token_file=, else
$TROUPE_TOKEN, $TROUPE_TOKEN_FILE, $TROUPE_CREDENTIALS; a tls+tcp:// head is
verified with tls_ca= (else $TROUPE_TLS_CA), with tls_cert=/tls_key= where
the head asks for a client certificate and tls_server_name= to check another
name than the URL's host.
"""
from __future__ import annotations

import ctypes
import json
import os
import time
from ctypes import POINTER, Structure, byref, c_char_p, c_double, c_int, c_int64, c_size_t, c_uint32, c_uint64, c_void_p
from typing import Any, Dict, Iterator, List, Optional, Union

from ._lib import Error, check, dec, enc, lib
from .errors import DeadlineExceeded, error_for


class _ClientOpts(Structure):
    _fields_ = [("head_url", c_char_p), ("token", c_char_p), ("timeout_ms", c_uint32), ("token_file", c_char_p),
                ("tls_ca", c_char_p), ("tls_cert", c_char_p), ("tls_key", c_char_p), ("tls_server_name", c_char_p)]


class _Worker(Structure):
    _fields_ = [("name", c_char_p), ("group", c_char_p), ("rank", c_uint32), ("local_rank", c_uint32),
                ("local_world_size", c_uint32), ("node_rank", c_uint32), ("node_id", c_uint64),
                ("node_name", c_char_p), ("n_gpus", c_size_t), ("gpus", POINTER(c_uint32)), ("state", c_int),
                ("exit_code", c_int), ("signal", c_int), ("pid", c_uint32), ("attempt", c_uint32),
                ("message", c_char_p), ("started_ms", c_int64), ("ended_ms", c_int64), ("paused", c_int),
                ("nsys_report", c_char_p), ("removed", c_int), ("member_rank", c_uint32),
                ("regrown", c_uint32), ("regrow_stopped", c_int)]


class _Group(Structure):
    _fields_ = [("name", c_char_p), ("master_addr", c_char_p), ("master_port", c_uint32), ("world_size", c_uint32),
                ("placed_size", c_uint32), ("min_workers", c_uint32), ("max_workers", c_uint32), ("epoch", c_uint32)]


class _MembershipChange(Structure):
    _fields_ = [("ts_ms", c_int64), ("group", c_char_p), ("kind", c_char_p), ("from_size", c_uint32),
                ("to_size", c_uint32), ("epoch", c_uint32), ("step", c_uint64), ("worker", c_char_p),
                ("text", c_char_p)]


class _Event(Structure):
    _fields_ = [("ts_ms", c_int64), ("kind", c_char_p), ("message", c_char_p)]


class _Profile(Structure):
    _fields_ = [("spec_steps", c_char_p), ("spec_workers", c_char_p), ("version", c_uint64), ("off", c_int),
                ("steps", c_char_p), ("next", c_uint32), ("align", c_uint32), ("workers", c_char_p),
                ("set_ms", c_int64)]


class _Job(Structure):
    # troupe_job (client.h), every field: listings are arrays of it, so the
    # size must be the C one. The pointers after events are not read here.
    _fields_ = [("id", c_uint64), ("name", c_char_p), ("state", c_int), ("reason", c_char_p),
                ("submitted_ms", c_int64), ("started_ms", c_int64), ("ended_ms", c_int64), ("restarts", c_uint32),
                ("max_restarts", c_uint32), ("workers_total", c_uint32), ("version", c_uint64),
                ("n_workers", c_size_t), ("workers", POINTER(_Worker)), ("n_groups", c_size_t),
                ("groups", POINTER(_Group)), ("n_events", c_size_t), ("events", POINTER(_Event)),
                ("events_dropped", c_uint32), ("n_waits", c_size_t), ("waits", c_void_p), ("profile", POINTER(_Profile)),
                ("next_restart_ms", c_int64), ("n_failures", c_size_t), ("failures", c_void_p),
                ("failures_dropped", c_uint32), ("health", c_void_p), ("owner", c_char_p),
                ("n_membership", c_size_t), ("membership", POINTER(_MembershipChange))]


class _ProfileReq(Structure):
    _fields_ = [("off", c_int), ("steps", c_char_p), ("next", c_uint32), ("align", c_uint32), ("workers", c_char_p)]


class _Span(Structure):
    _fields_ = [("name", c_char_p), ("cat", c_char_p), ("ts_us", c_int64), ("dur_us", c_int64), ("step", c_uint64),
                ("tid", c_uint32), ("rank", c_uint32)]


class _TraceWorker(Structure):
    _fields_ = [("worker", c_char_p), ("group", c_char_p), ("node", c_char_p), ("rank", c_uint32),
                ("group_rank", c_uint32), ("attempt", c_uint32), ("offset_us", c_int64), ("rtt_us", c_int64),
                ("spans", c_uint64), ("dropped", c_uint64)]


class _Trace(Structure):
    _fields_ = [("n_spans", c_size_t), ("spans", POINTER(_Span)), ("n_workers", c_size_t),
                ("workers", POINTER(_TraceWorker))]


class _JobList(Structure):
    _fields_ = [("count", c_size_t), ("jobs", POINTER(_Job)), ("next_cursor", c_uint64)]


class _Node(Structure):
    # troupe_node, every field (node lists are arrays of it).
    _fields_ = [("id", c_uint64), ("name", c_char_p), ("hostname", c_char_p), ("address", c_char_p),
                ("state", c_int), ("reason", c_char_p), ("registered_ms", c_int64), ("last_seen_ms", c_int64),
                ("pid", c_uint32), ("gpus_free", c_uint32), ("n_gpus", c_size_t), ("gpus", c_void_p),
                ("n_labels", c_size_t), ("labels", c_void_p), ("stop_grace_ms", c_uint32), ("draining", c_int),
                ("replaces", c_uint64), ("fenced_workers", c_uint32), ("has_nsys", c_int), ("stats_ms", c_int64),
                ("gpu_source", c_char_p), ("load1", c_double), ("mem_total_bytes", c_uint64),
                ("mem_available_bytes", c_uint64), ("isolation", c_char_p), ("sync_error", c_char_p),
                ("cpus", c_uint32), ("cpus_free", c_double)]


class _NodeList(Structure):
    _fields_ = [("count", c_size_t), ("nodes", POINTER(_Node))]


class _Point(Structure):
    _fields_ = [("id", c_uint64), ("seq", c_uint64), ("step", c_uint64), ("worker", c_char_p),
                ("attempt", c_uint32), ("name", c_char_p), ("value", c_double), ("ts_ms", c_int64)]


class _MetricsQuery(Structure):
    _fields_ = [("workers", POINTER(c_char_p)), ("n_workers", c_size_t), ("names", POINTER(c_char_p)),
                ("n_names", c_size_t), ("after_id", c_uint64), ("last", c_uint32), ("limit", c_uint32),
                ("wait_ms", c_uint32)]


class _MetricsPage(Structure):
    _fields_ = [("n_points", c_size_t), ("points", POINTER(_Point)), ("n_streams", c_size_t),
                ("streams", c_void_p), ("next_id", c_uint64), ("more", c_int), ("kept", c_uint64),
                ("trimmed", c_uint64)]


def _job_dict(j: _Job) -> Dict[str, Any]:
    d: Dict[str, Any] = {
        "id": j.id, "name": dec(j.name), "state": dec(lib.troupe_job_state_name(j.state)), "reason": dec(j.reason),
        "submitted_ms": j.submitted_ms, "started_ms": j.started_ms, "ended_ms": j.ended_ms,
        "restarts": j.restarts, "max_restarts": j.max_restarts, "workers_total": j.workers_total,
        "version": j.version, "owner": dec(j.owner),
    }
    d["workers"] = [{
        "name": dec(w.name), "group": dec(w.group), "rank": w.rank, "local_rank": w.local_rank,
        "node": dec(w.node_name), "gpus": [w.gpus[k] for k in range(w.n_gpus)],
        "state": dec(lib.troupe_worker_state_name(w.state)), "exit_code": w.exit_code, "signal": w.signal,
        "pid": w.pid, "attempt": w.attempt, "message": dec(w.message),
        "removed": bool(w.removed), "member_rank": w.member_rank,
        "regrown": w.regrown, "regrow_stopped": bool(w.regrow_stopped),
    } for w in (j.workers[i] for i in range(j.n_workers))]
    d["groups"] = [{"name": dec(g.name), "world_size": g.world_size, "placed_size": g.placed_size,
                    **({"elastic": {"min_workers": g.min_workers, "max_workers": g.max_workers, "epoch": g.epoch}}
                       if g.min_workers else {})}
                   for g in (j.groups[i] for i in range(j.n_groups))]
    d["membership"] = [{"ts_ms": m.ts_ms, "group": dec(m.group), "kind": dec(m.kind), "from": m.from_size,
                        "to": m.to_size, "epoch": m.epoch, "step": m.step, "worker": dec(m.worker),
                        "text": dec(m.text)}
                       for m in (j.membership[i] for i in range(j.n_membership))]
    d["events"] = [{"ts_ms": e.ts_ms, "kind": dec(e.kind), "message": dec(e.message)}
                   for e in (j.events[i] for i in range(j.n_events))]
    if j.profile:
        p = j.profile.contents
        d["profile"] = {"spec_steps": dec(p.spec_steps), "spec_workers": dec(p.spec_workers),
                        "version": p.version, "off": bool(p.off), "steps": dec(p.steps), "next": p.next,
                        "align": p.align, "workers": dec(p.workers), "set_ms": p.set_ms}
    return d


_TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


class Client:
    """A connection to troupe-head.

    Client(head=None, token=None, token_file=None, timeout=10.0,
    tls_ca=None, tls_cert=None, tls_key=None, tls_server_name=None): head
    defaults to $TROUPE_HEAD, the credential to token, token_file, then the
    environment (as the CLI); the TLS files to $TROUPE_TLS_CA, ...
    Unavailable when nothing answers at head; a call without a valid
    credential raises Unauthenticated, one outside its scope
    PermissionDenied."""

    def __init__(self, head: Optional[str] = None, token: Optional[str] = None, token_file: Optional[str] = None,
                 timeout: float = 10.0, tls_ca: Optional[str] = None, tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None, tls_server_name: Optional[str] = None):
        self._h = c_void_p()
        self._keep = [enc(head), enc(token), enc(token_file), enc(tls_ca), enc(tls_cert), enc(tls_key),
                      enc(tls_server_name)]
        opts = _ClientOpts(self._keep[0], self._keep[1], int(timeout * 1000), *self._keep[2:])
        err = Error()
        check(lib.troupe_client_open(byref(self._h), byref(opts), byref(err)), err)

    @property
    def head(self) -> str:
        """The head URL in use."""
        return dec(lib.troupe_client_url(self._h))

    def close(self) -> None:
        """Disconnect. Idempotent."""
        if self._h:
            lib.troupe_client_close(self._h)
            self._h = c_void_p()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def submit(self, spec: Union[str, os.PathLike, Dict[str, Any]], name: str = "job.yaml",
               base_dir: Optional[str] = None) -> int:
        """Submit a job: a YAML file's path, or the spec as a dict (sent as
        JSON, which is YAML). Returns the job id; InvalidArgument names
        file:line:col, FailedPrecondition an impossible placement."""
        jid, err = c_uint64(), Error()
        if isinstance(spec, dict):
            text = json.dumps(spec).encode()
            check(lib.troupe_submit_yaml(self._h, text, len(text), enc(name), enc(base_dir), byref(jid),
                                         byref(err)), err)
        else:
            check(lib.troupe_submit_file(self._h, enc(os.fspath(spec)), byref(jid), byref(err)), err)
        return jid.value

    def job(self, job_id: int) -> Dict[str, Any]:
        """One job with its workers, groups and events (NotFound when unknown)."""
        out, err = c_void_p(), Error()
        check(lib.troupe_get_job(self._h, job_id, byref(out), byref(err)), err)
        try:
            return _job_dict(ctypes.cast(out, POINTER(_Job)).contents)
        finally:
            lib.troupe_job_free(out)

    def jobs(self, active: bool = False) -> List[Dict[str, Any]]:
        """Every job the head keeps (only PENDING and RUNNING with active)."""
        out, err = c_void_p(), Error()
        check(lib.troupe_list_jobs(self._h, 1 if active else 0, byref(out), byref(err)), err)
        try:
            lst = ctypes.cast(out, POINTER(_JobList)).contents
            return [_job_dict(lst.jobs[i]) for i in range(lst.count)]
        finally:
            lib.troupe_job_list_free(out)

    def wait(self, job_id: int, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Wait until the job ends (SUCCEEDED, FAILED or STOPPED) and return
        it; DeadlineExceeded after timeout seconds (None = no limit)."""
        end = None if timeout is None else time.monotonic() + timeout
        job = self.job(job_id)
        while job["state"] not in _TERMINAL:
            left = 30.0 if end is None else end - time.monotonic()
            if left <= 0:
                raise DeadlineExceeded(4, f"job {job_id} is still {job['state']} after {timeout} s")
            out, err = c_void_p(), Error()
            check(lib.troupe_wait_job(self._h, job_id, job["version"], int(min(left, 30.0) * 1000) or 1, byref(out),
                                      byref(err)), err)
            try:
                job = _job_dict(ctypes.cast(out, POINTER(_Job)).contents)
            finally:
                lib.troupe_job_free(out)
        return job

    def stop(self, job_id: int) -> None:
        """Stop a job (SIGTERM, then SIGKILL after the node's grace)."""
        err = Error()
        check(lib.troupe_stop_job(self._h, job_id, byref(err)), err)

    def delete(self, job_id: int) -> None:
        """Delete a finished job with its events and logs."""
        err = Error()
        check(lib.troupe_delete_job(self._h, job_id, byref(err)), err)

    def _read_logs(self, job_id: int, worker: Optional[str], offset: int, wait_ms: int):
        data, n, nxt, done, err = c_void_p(), c_size_t(), c_uint64(), c_int(), Error()
        check(lib.troupe_read_logs(self._h, job_id, enc(worker), offset, wait_ms, byref(data), byref(n), byref(nxt),
                                   byref(done), byref(err)), err)
        try:
            text = ctypes.string_at(data, n.value).decode("utf-8", "replace") if n.value else ""
        finally:
            lib.troupe_free(data)
        return text, nxt.value, bool(done.value)

    def logs(self, job_id: int, worker: Optional[str] = None) -> str:
        """The job's output so far ("[worker] line" lines)."""
        out, offset = [], 0
        while True:
            text, nxt, done = self._read_logs(job_id, worker, offset, 0)
            out.append(text)
            if done or nxt == offset or not text:
                return "".join(out)
            offset = nxt

    def follow_logs(self, job_id: int, worker: Optional[str] = None) -> Iterator[str]:
        """The job's output as it comes, until the job has ended and all is read."""
        offset = 0
        while True:
            text, offset, done = self._read_logs(job_id, worker, offset, 5000)
            if text:
                yield text
            if done:
                return

    def metrics(self, job_id: int, names: Optional[List[str]] = None, after_id: int = 0,
                wait: float = 0.0) -> Dict[str, Any]:
        """One page of a job's metrics: {"points": [{step, worker, name,
        value, ...}], "next_id": ...}; pass next_id as after_id for the next
        page, with wait (seconds) to follow without polling."""
        q = _MetricsQuery()
        arr = None
        if names:
            arr = (c_char_p * len(names))(*[enc(n) for n in names])
            q.names, q.n_names = ctypes.cast(arr, POINTER(c_char_p)), len(names)
        q.after_id, q.wait_ms = after_id, int(wait * 1000)
        out, err = c_void_p(), Error()
        check(lib.troupe_get_metrics(self._h, job_id, byref(q), byref(out), byref(err)), err)
        try:
            p = ctypes.cast(out, POINTER(_MetricsPage)).contents
            pts = [{"id": x.id, "step": x.step, "worker": dec(x.worker), "attempt": x.attempt, "name": dec(x.name),
                    "value": x.value, "ts_ms": x.ts_ms} for x in (p.points[i] for i in range(p.n_points))]
            return {"points": pts, "next_id": p.next_id, "more": bool(p.more)}
        finally:
            lib.troupe_metrics_page_free(out)

    def nodes(self, include_dead: bool = False) -> List[Dict[str, Any]]:
        """Registered nodes: id, name, address, state, reason, GPUs free/total, CPU slots free/total."""
        out, err = c_void_p(), Error()
        check(lib.troupe_list_nodes(self._h, 1 if include_dead else 0, byref(out), byref(err)), err)
        try:
            lst = ctypes.cast(out, POINTER(_NodeList)).contents
            return [{"id": n.id, "name": dec(n.name), "hostname": dec(n.hostname), "address": dec(n.address),
                     "state": dec(lib.troupe_node_state_name(n.state)), "reason": dec(n.reason),
                     "gpus": n.n_gpus, "gpus_free": n.gpus_free, "cpus": n.cpus, "cpus_free": n.cpus_free,
                     "isolation": dec(n.isolation),
                     "sync_error": dec(n.sync_error)} for n in (lst.nodes[i] for i in range(lst.count))]
        finally:
            lib.troupe_node_list_free(out)

    # -- profiling and the built-in trace ----------------------------------------------

    def profile(self, job_id: int, steps: Optional[str] = None, next: int = 0, align: int = 0,
                workers: Optional[str] = None, off: bool = False) -> int:
        """Change a running job's profiling (`troupe profile`): steps "A:B"
        (1-based, B exclusive), or the next N steps from each worker's next
        step boundary (from a multiple of align when align > 0), on the
        workers matching workers (comma-separated globs on group and worker
        names; None = all); off=True stops it. Workers profile those steps
        (CUDA profiler range, NVTX, spans for trace()). Returns the setting's
        version. InvalidArgument for a bad range or pattern, NotFound for an
        unknown job, FailedPrecondition for one that ended."""
        if not off and not steps and not next:
            raise error_for(3, "profile: give steps='A:B', next=N or off=True")
        req = _ProfileReq(1 if off else 0, enc(steps), next, align, enc(workers))
        ver, err = c_uint64(), Error()
        check(lib.troupe_set_profile(self._h, job_id, byref(req), byref(ver), byref(err)), err)
        return ver.value

    def profile_off(self, job_id: int) -> int:
        """Stop a job's run-time profiling (profile(job_id, off=True))."""
        return self.profile(job_id, off=True)

    def trace(self, job_id: int) -> Dict[str, Any]:
        """The spans of profiled steps the head holds for a job, on the
        head's clock: {"spans": [{name, cat, ts_us, dur_us, step, tid,
        rank}], "workers": [{worker, group, node, rank, group_rank,
        attempt, offset_us, rtt_us, spans, dropped}]}. Empty lists when no
        worker profiled yet; NotFound for an unknown job."""
        out, err = c_void_p(), Error()
        check(lib.troupe_get_trace(self._h, job_id, byref(out), byref(err)), err)
        try:
            t = ctypes.cast(out, POINTER(_Trace)).contents
            spans = [{"name": dec(x.name), "cat": dec(x.cat), "ts_us": x.ts_us, "dur_us": x.dur_us,
                      "step": x.step, "tid": x.tid, "rank": x.rank} for x in (t.spans[i] for i in range(t.n_spans))]
            workers = [{"worker": dec(w.worker), "group": dec(w.group), "node": dec(w.node), "rank": w.rank,
                        "group_rank": w.group_rank, "attempt": w.attempt, "offset_us": w.offset_us,
                        "rtt_us": w.rtt_us, "spans": w.spans, "dropped": w.dropped}
                       for w in (t.workers[i] for i in range(t.n_workers))]
            return {"spans": spans, "workers": workers}
        finally:
            lib.troupe_trace_free(out)

    def chrome_trace(self, job_id: int) -> Dict[str, Any]:
        """trace() as Chrome/Perfetto trace-event JSON, the document `troupe
        trace JOB` writes: a process per rank named after its worker, a
        thread per worker thread, complete events in microseconds from the
        first span."""
        return chrome_trace(job_id, self.trace(job_id))


def chrome_trace(job_id: int, t: Dict[str, Any]) -> Dict[str, Any]:
    """A trace() result as trace-event JSON (the same as the CLI's)."""
    spans = sorted(t["spans"], key=lambda s: (s["rank"], s["tid"], s["ts_us"], -s["dur_us"]))
    origin = min((s["ts_us"] for s in spans), default=2**63 - 1)
    events: List[Dict[str, Any]] = []
    for w in t["workers"]:
        if any(o["rank"] == w["rank"] and o["attempt"] > w["attempt"] for o in t["workers"]):
            continue  # named after its newest attempt
        name = f"{w['worker']} (rank {w['rank']}: {w['group']} {w['group_rank']} on {w['node'] or '?'})"
        events.append({"name": "process_name", "ph": "M", "pid": w["rank"], "tid": 0, "args": {"name": name}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": w["rank"], "tid": 0,
                       "args": {"sort_index": w["rank"]}})
    for s in spans:
        events.append({"name": s["name"], "cat": s["cat"], "ph": "X", "pid": s["rank"], "tid": s["tid"],
                       "ts": s["ts_us"] - origin, "dur": s["dur_us"], "args": {"step": s["step"]}})
    other = {"job": job_id, "clock": "troupe-head wall clock", "origin_unix_us": origin,
             "workers": [{"worker": w["worker"], "rank": w["rank"], "attempt": w["attempt"],
                          "offset_us": w["offset_us"], "rtt_us": w["rtt_us"], "spans": w["spans"],
                          "dropped": w["dropped"]} for w in t["workers"]]}
    return {"displayTimeUnit": "ms", "traceEvents": events, "otherData": other}
