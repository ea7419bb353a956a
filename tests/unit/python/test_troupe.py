"""Unit tests of the Python package (python/troupe) without a head: one case
per run (`test_troupe.py CASE`), registered as unit.python.CASE. A case that
needs torch exits 77 (skipped) where this Python has none."""
import ctypes
import os
import subprocess
import sys

import troupe
from troupe import errors
from troupe._lib import Error, check


def errors_by_code():
    """Every status maps to its own subclass, which names its code; an
    unknown code is a plain TroupeError; check() raises with the message."""
    assert len({cls for cls in errors._BY_CODE.values()}) == 16
    for code, cls in errors._BY_CODE.items():
        e = errors.error_for(code, "why")
        assert type(e) is cls and e.code == code == cls.code and e.message == "why", (code, cls)
        assert isinstance(e, troupe.TroupeError)
        assert str(e) == f"{errors.CODE_NAMES[code]}: why"
    assert type(errors.error_for(99, "x")) is troupe.TroupeError
    assert issubclass(troupe.DeadlineExceeded, TimeoutError)
    err = Error()
    err.message = b"store key 'k' is not set"
    try:
        check(5, err)
    except troupe.NotFound as e:
        assert e.message == "store key 'k' is not set" and e.code_name == "NOT_FOUND"
    else:
        raise AssertionError("check(5) raised nothing")
    check(0, err)  # OK raises nothing


def worker_outside_troupe():
    """Outside a job, Worker() raises FailedPrecondition naming the variable."""
    for k in [k for k in os.environ if k.startswith("TROUPE_") and k != "TROUPE_LIBRARY"]:
        del os.environ[k]
    try:
        troupe.Worker()
    except troupe.FailedPrecondition as e:
        assert "TROUPE_HEAD is not set" in e.message, e.message
    else:
        raise AssertionError("Worker() outside troupe raised nothing")


def library_env():
    """TROUPE_LIBRARY that does not load is an ImportError saying why, never
    a quiet fall-back to another copy."""
    env = dict(os.environ, TROUPE_LIBRARY="/nonexistent/libtroupe.so")
    r = subprocess.run([sys.executable, "-c", "import troupe"], env=env, capture_output=True, text=True)
    assert r.returncode != 0, r
    assert "ImportError: TROUPE_LIBRARY=/nonexistent/libtroupe.so:" in r.stderr, r.stderr


def step_figures():
    """A Step takes only troupe_step_figures' names; the ctypes mirror has
    them all, in the C order (troupe_step_figures_init sets every one NaN)."""
    from troupe import worker
    s = worker.Step(3, False)
    s.loss = 2
    assert s.figures == {"loss": 2.0}
    try:
        s.accuracy = 1
    except AttributeError as e:
        assert "no step figure 'accuracy'" in str(e)
    else:
        raise AssertionError("an unknown figure was taken")
    f = worker._Figures()
    troupe._lib.lib.troupe_step_figures_init(ctypes.byref(f))
    assert ctypes.sizeof(f) == 11 * 8
    assert all(getattr(f, n) != getattr(f, n) for n in worker._FIGURES)  # NaN


def torch_bytes():
    """troupe.torch turns what torch hands a Store (str, bytes, 1.13's lists
    of byte values) into bytes; timeouts in seconds; the CUDA device of a
    worker troupe placed is its first visible one."""
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: no torch in this Python")
        sys.exit(77)
    import datetime
    import troupe.torch as tt
    assert tt._bytes("ab") == b"ab" and tt._bytes(b"\x00\xff") == b"\x00\xff"
    assert tt._bytes([120, 0, 255]) == b"x\x00\xff" and tt._bytes(bytearray(b"z")) == b"z"
    assert tt._seconds(datetime.timedelta(milliseconds=1500)) == 1.5 and tt._seconds(None) is None
    assert issubclass(tt.Store, torch.distributed.Store)
    assert tt.Store.deleteKey is tt.Store.delete_key and tt.Store.getNumKeys is tt.Store.num_keys
    # Under troupe a worker sees only its own GPUs: device 0 whatever its LOCAL_RANK.
    os.environ["CUDA_VISIBLE_DEVICES"] = "3"
    assert tt._device_index(1) == 0
    del os.environ["CUDA_VISIBLE_DEVICES"]
    assert tt._device_index(0) == 0


def torch_step_cuda():
    """troupe.torch.step with CUDA in use (mocked: this machine has no GPU):
    on the steps the runtime answers profiled, torch.cuda.profiler.start at
    the window's first step and stop at the first step past it, an NVTX
    range per step, a "profiled" metric and GPU memory figures; a worker
    opened without caller_profiles only gets its steps marked."""
    try:
        import torch
    except ImportError:
        print("SKIP: no torch in this Python")
        sys.exit(77)
    import troupe.torch as tt
    calls = []

    class FakeWorker:
        name, caller_profiles = "job1-policy-1", True

        def __init__(self, window):
            self.window = window

        def step_begin(self, n):
            calls.append(f"begin {n}")
            return n in self.window

        def step_end(self, n, **figs):
            calls.append(f"end {n} {sorted(figs)}")

        def metric(self, n, name, value):
            calls.append(f"metric {n} {name}={value}")

    cuda = torch.cuda
    cuda.is_available = cuda.is_initialized = lambda: True
    cuda.synchronize = lambda *a: None
    cuda.current_device = lambda: 0
    cuda.memory_allocated = cuda.max_memory_allocated = cuda.memory_reserved = lambda d=None: 1 << 20
    cuda.get_device_properties = lambda d: type("P", (), {"total_memory": 80 << 30})()
    cuda.profiler.start = lambda: calls.append("profiler.start")
    cuda.profiler.stop = lambda: calls.append("profiler.stop")
    cuda.nvtx.range_push = lambda name: calls.append(f"push {name}")
    cuda.nvtx.range_pop = lambda: calls.append("pop")
    w = FakeWorker({3, 4})
    for n in range(1, 7):
        with tt.step(n, worker=w) as s:
            s.loss = 1.0
    mem = "['gpu_mem_in_use_bytes', 'gpu_mem_peak_bytes', 'gpu_mem_reserved_bytes', 'gpu_mem_total_bytes', 'loss']"
    want = []
    for n in range(1, 7):
        want += [f"begin {n}"] + (["profiler.start"] if n == 3 else ["profiler.stop"] if n == 5 else [])
        want += [f"push step {n}", "pop"] + ([f"metric {n} profiled=1.0"] if n in (3, 4) else []) + [f"end {n} {mem}"]
    assert calls == want, "\n".join(calls)
    assert tt.profile_windows(w) == [(3, 5)]
    # A window still open at the end is closed by troupe.torch.close() (or at exit).
    calls.clear()
    w2 = FakeWorker({2, 3, 4})
    for n in (1, 2):
        with tt.step(n, worker=w2):
            pass
    assert tt.profile_windows(w2) == [(2, 3)]
    tt._close_all()
    assert calls[-1] == "profiler.stop" and tt.profile_windows(w2) == [(2, 3)], calls
    # Without caller_profiles libtroupe drives the profiler: no torch calls here.
    calls.clear()
    w3 = FakeWorker({1})
    w3.caller_profiles = False
    with tt.step(1, worker=w3):
        pass
    assert "profiler.start" not in calls and not any(c.startswith("push") for c in calls), calls


CASES = {f.__name__: f for f in (errors_by_code, worker_outside_troupe, library_env, step_figures, torch_bytes,
                                 torch_step_cuda)}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print(f"usage: test_troupe.py {'|'.join(CASES)}", file=sys.stderr)
        sys.exit(2)
    CASES[sys.argv[1]]()
    print(f"ok: {sys.argv[1]}")
