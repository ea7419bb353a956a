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


CASES = {f.__name__: f for f in (errors_by_code, worker_outside_troupe, library_env, step_figures, torch_bytes)}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print(f"usage: test_troupe.py {'|'.join(CASES)}", file=sys.stderr)
        sys.exit(2)
    CASES[sys.argv[1]]()
    print(f"ok: {sys.argv[1]}")
