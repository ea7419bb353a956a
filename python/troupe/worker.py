"""troupe.Worker: the worker runtime (libtroupe's include/troupe/worker.h) for
a process troupe started: who it is, the job's key-value store, barriers and
all-gathers through the head, metrics, steps (profiling control, step figures
the head judges health from), spans and failure reports.

Threads: a Worker may be used from several threads, except step(), span() and
their begin/end, which belong to the thread that runs the steps (as in C).
"""
from __future__ import annotations

import contextlib
import ctypes
import math
from ctypes import POINTER, Structure, byref, c_char_p, c_double, c_int, c_int64, c_size_t, c_uint32, c_uint64
from typing import Iterator, List, Optional, Sequence, Union

from . import _lib
from ._lib import Error, check, dec, enc, lib

Bytes = Union[bytes, bytearray, memoryview, str]


class _Self(Structure):
    _fields_ = [("job_id", c_uint64), ("job_name", c_char_p), ("group", c_char_p), ("worker", c_char_p),
                ("rank", c_uint32), ("world_size", c_uint32), ("local_rank", c_uint32), ("attempt", c_uint32)]


class _CommInfo(Structure):
    _fields_ = [("epoch", c_uint32), ("rank", c_uint32), ("size", c_uint32)]


class _Opts(Structure):
    _fields_ = [("head_url", c_char_p), ("wait_ms", c_uint32), ("no_control", c_int), ("caller_profiles", c_int)]


class _Blob(Structure):
    _fields_ = [("data", ctypes.c_void_p), ("len", c_size_t)]


class _Blobs(Structure):
    _fields_ = [("count", c_size_t), ("items", POINTER(_Blob))]


_FIGURES = ("loss", "tokens_per_s", "mfu", "step_ms", "forward_ms", "backward_ms", "optimizer_ms",
            "gpu_mem_in_use_bytes", "gpu_mem_reserved_bytes", "gpu_mem_peak_bytes", "gpu_mem_total_bytes")


class _Figures(Structure):
    _fields_ = [(n, c_double) for n in _FIGURES]


def _b(v: Bytes) -> bytes:
    if isinstance(v, str):
        return v.encode("utf-8")
    return bytes(v)


def _ms(timeout: Optional[float]) -> int:
    """Seconds (None = the handle's default) to the C API's milliseconds (0 = default)."""
    if timeout is None:
        return 0
    return max(1, min(int(timeout * 1000), 0xFFFFFFFF))


class CommInfo:
    """A communicator as this worker sees it: epoch, rank, size."""

    def __init__(self, epoch: int, rank: int, size: int):
        self.epoch, self.rank, self.size = epoch, rank, size

    def __repr__(self) -> str:
        return f"CommInfo(epoch={self.epoch}, rank={self.rank}, size={self.size})"


class Step:
    """What `with w.step(n) as s:` yields: s.profiled says whether this step
    is profiled for this worker; set figures (s.loss = ..., s.tokens_per_s =
    ...; the names of troupe_step_figures) and they are reported at the end."""

    def __init__(self, n: int, profiled: bool):
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "profiled", profiled)
        object.__setattr__(self, "figures", {})

    def __setattr__(self, name: str, value: float) -> None:
        if name not in _FIGURES:
            raise AttributeError(f"no step figure {name!r}: one of {', '.join(_FIGURES)}")
        self.figures[name] = float(value)


class Worker:
    """The worker runtime from the environment troupe-node gives a worker.

    Worker(head=None, wait=None, control=True, caller_profiles=False): head
    overrides $TROUPE_HEAD, wait (seconds) is the default deadline of waits
    (300 s), control=False skips the background poll for run-time profile
    changes. caller_profiles=True leaves starting and stopping the CUDA
    profiler and NVTX ranges to the caller (troupe.torch.step does it through
    torch): the runtime still decides which steps are profiled (step_begin's
    answer) and records their spans. Outside troupe it raises
    FailedPrecondition naming the missing variable. Use as a context manager,
    or call close() (it flushes metrics)."""

    def __init__(self, head: Optional[str] = None, wait: Optional[float] = None, control: bool = True,
                 caller_profiles: bool = False):
        self._h = ctypes.c_void_p()
        self._head = enc(head)  # kept alive for the call
        self.caller_profiles = bool(caller_profiles)
        opts = _Opts(self._head, _ms(wait), 0 if control else 1, 1 if caller_profiles else 0)
        err = Error()
        check(lib.troupe_worker_open(byref(self._h), byref(opts), byref(err)), err)
        me = _Self.from_address(lib.troupe_worker_self_info(self._h))
        self.job_id: int = me.job_id
        self.job_name: str = dec(me.job_name)
        self.group: str = dec(me.group)
        self.name: str = dec(me.worker)
        self.rank: int = me.rank
        self.world_size: int = me.world_size
        self.local_rank: int = me.local_rank
        self.attempt: int = me.attempt

    # -- life ------------------------------------------------------------------
    def close(self) -> None:
        """Stop profiling if on, flush metrics (TROUPE_METRICS_FLUSH_MS) and
        disconnect. Idempotent."""
        if self._h:
            lib.troupe_worker_close(self._h)
            self._h = ctypes.c_void_p()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def _handle(self) -> ctypes.c_void_p:
        if not self._h:
            raise _lib.error_for(9, "this troupe.Worker is closed")
        return self._h

    # -- communicators ------------------------------------------------------------
    def comm_info(self, comm: Optional[str] = None) -> CommInfo:
        """Rank, size and epoch of communicator comm (None = this group)."""
        ci, err = _CommInfo(), Error()
        check(lib.troupe_worker_comm_info(self._handle(), enc(comm), byref(ci), byref(err)), err)
        return CommInfo(ci.epoch, ci.rank, ci.size)

    def barrier(self, name: str = "barrier", comm: Optional[str] = None, timeout: Optional[float] = None) -> None:
        """Return once every rank of comm called barrier(name); the k-th call
        with a name meets the others' k-th. DeadlineExceeded names the ranks
        that never arrived."""
        err = Error()
        check(lib.troupe_worker_barrier(self._handle(), enc(comm), enc(name), _ms(timeout), byref(err)), err)

    def allgather(self, data: Bytes, name: str = "allgather", comm: Optional[str] = None,
                  timeout: Optional[float] = None) -> List[bytes]:
        """Every rank's bytes (at most 4096 each), in rank order."""
        buf = _b(data)
        out, err = ctypes.c_void_p(), Error()
        check(lib.troupe_worker_allgather(self._handle(), enc(comm), enc(name), buf, len(buf), _ms(timeout),
                                          byref(out), byref(err)), err)
        try:
            blobs = ctypes.cast(out, POINTER(_Blobs)).contents
            return [ctypes.string_at(blobs.items[i].data, blobs.items[i].len) if blobs.items[i].len else b""
                    for i in range(blobs.count)]
        finally:
            lib.troupe_blobs_free(out)

    # -- the job's key-value store -------------------------------------------------------
    def store_set(self, key: str, value: Bytes, comm: Optional[str] = None) -> None:
        """Set key to value in comm's store (None = this group's)."""
        v, err = _b(value), Error()
        check(lib.troupe_worker_store_set(self._handle(), enc(comm), enc(key), v, len(v), byref(err)), err)

    def store_get(self, key: str, timeout: Optional[float] = None, comm: Optional[str] = None) -> bytes:
        """key's value, waiting up to timeout seconds for it to be set
        (DeadlineExceeded naming the key)."""
        out, n, err = ctypes.c_void_p(), c_size_t(), Error()
        check(lib.troupe_worker_store_get(self._handle(), enc(comm), enc(key), _ms(timeout), byref(out), byref(n),
                                          byref(err)), err)
        try:
            return ctypes.string_at(out, n.value) if n.value else b""
        finally:
            lib.troupe_free(out)

    def store_add(self, key: str, amount: int, comm: Optional[str] = None) -> int:
        """Add amount to key's decimal number (missing = 0); the sum."""
        out, err = c_int64(), Error()
        check(lib.troupe_worker_store_add(self._handle(), enc(comm), enc(key), amount, byref(out), byref(err)), err)
        return out.value

    def store_compare_set(self, key: str, expected: Bytes, desired: Bytes, comm: Optional[str] = None) -> bytes:
        """Set key to desired when it equals expected (or is missing and
        expected is empty); the value now (TCPStore's answers)."""
        e, d = _b(expected), _b(desired)
        out, n, err = ctypes.c_void_p(), c_size_t(), Error()
        check(lib.troupe_worker_store_compare_set(self._handle(), enc(comm), enc(key), e, len(e), d, len(d),
                                                  byref(out), byref(n), byref(err)), err)
        try:
            return ctypes.string_at(out, n.value) if n.value else b""
        finally:
            lib.troupe_free(out)

    @staticmethod
    def _keys(keys: Sequence[str]):
        arr = (c_char_p * len(keys))(*[enc(k) for k in keys])
        return arr, len(keys)

    def store_wait(self, keys: Sequence[str], timeout: Optional[float] = None, comm: Optional[str] = None) -> None:
        """Wait until every key is set (DeadlineExceeded names those never set)."""
        arr, n = self._keys(keys)
        err = Error()
        check(lib.troupe_worker_store_wait(self._handle(), enc(comm), arr, n, _ms(timeout), byref(err)), err)

    def store_check(self, keys: Sequence[str], comm: Optional[str] = None) -> bool:
        """Whether every key is set, without waiting."""
        arr, n = self._keys(keys)
        present, err = c_int(), Error()
        check(lib.troupe_worker_store_check(self._handle(), enc(comm), arr, n, byref(present), byref(err)), err)
        return bool(present.value)

    def store_delete(self, key: str, comm: Optional[str] = None) -> bool:
        """Remove key; whether it was set."""
        deleted, err = c_int(), Error()
        check(lib.troupe_worker_store_delete(self._handle(), enc(comm), enc(key), byref(deleted), byref(err)), err)
        return bool(deleted.value)

    def store_num_keys(self, comm: Optional[str] = None) -> int:
        """How many keys comm's store holds."""
        n, err = c_uint64(), Error()
        check(lib.troupe_worker_store_num_keys(self._handle(), enc(comm), byref(n), byref(err)), err)
        return n.value

    # -- metrics, steps, spans, failures -------------------------------------------------
    def metric(self, step: int, name: str, value: float) -> bool:
        """Report one scalar of a step; never blocks on the network. False
        when the buffer was full and the point was dropped (counted);
        InvalidArgument for a bad name."""
        rv = lib.troupe_worker_metric(self._handle(), step, enc(name), float(value))
        if rv == 8:
            return False
        check(rv, None if rv == 0 else _err_of(rv, f"metric {name!r}: not a valid name (1-127 printable "
                                                   "characters, no spaces or commas)"))
        return True

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until the head confirmed every metric reported so far."""
        err = Error()
        check(lib.troupe_worker_metrics_flush(self._handle(), _ms(timeout), byref(err)), err)

    def step_begin(self, n: int) -> bool:
        """Mark the start of step n (1-based, increasing); True when profiled."""
        prof = c_int()
        check(lib.troupe_worker_step_begin(self._handle(), n, byref(prof)), _err_of(3, f"step {n}"))
        return bool(prof.value)

    def step_end(self, n: int, **figures: float) -> None:
        """Mark the end of step n with its figures (loss=, tokens_per_s=, ...);
        step_ms is measured when not given."""
        f = _Figures()
        lib.troupe_step_figures_init(byref(f))
        for k, v in figures.items():
            if k not in _FIGURES:
                raise _lib.error_for(3, f"no step figure {k!r}: one of {', '.join(_FIGURES)}")
            setattr(f, k, float(v))
        rv = lib.troupe_worker_step_end(self._handle(), n, byref(f))
        if rv not in (0, 8):  # 8: a figure dropped (buffer full), counted; the step is over either way
            check(rv, _err_of(rv, f"step {n}"))

    @contextlib.contextmanager
    def step(self, n: int) -> Iterator[Step]:
        """`with w.step(n) as s:` - step_begin(n), then step_end(n) with the
        figures set on s, also when the body raises."""
        s = Step(n, self.step_begin(n))
        try:
            yield s
        finally:
            self.step_end(n, **s.figures)

    @contextlib.contextmanager
    def span(self, name: str) -> Iterator[None]:
        """A named phase of the current step in the built-in trace (recorded
        only on profiled steps)."""
        check(lib.troupe_worker_span_begin(self._handle(), enc(name)), _err_of(3, f"span {name!r}"))
        try:
            yield
        finally:
            lib.troupe_worker_span_end(self._handle())

    def should_stop(self) -> bool:
        """True once the head asked this worker to stop."""
        return bool(lib.troupe_worker_should_stop(self._handle()))

    def fail(self, code: int, reason: str) -> None:
        """Tell the head why this worker fails (it still has to exit). code
        is a status number or a TroupeError subclass."""
        if isinstance(code, type):
            code = code.code if isinstance(code.code, int) and code.code else 2
        err = Error()
        check(lib.troupe_worker_fail(self._handle(), int(code), enc(reason), byref(err)), err)


def _err_of(code: int, msg: str) -> Error:
    e = Error()
    e.code = code
    e.message = msg.encode()[:511]
    return e
