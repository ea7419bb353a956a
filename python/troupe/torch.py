"""troupe.torch: torch.distributed over troupe's job store.

    import troupe.torch
    troupe.torch.init_process_group()          # gloo on CPU, NCCL on GPUs
    torch.distributed.all_reduce(t)

Store is a torch.distributed.Store backed by the head's key-value store
(troupe.Worker.store_*): the process group's rendezvous (gloo's addresses,
NCCL's unique ID, init_process_group's store barrier) goes over each worker's
one connection to the head. No MASTER_ADDR/MASTER_PORT, no TCPStore listener.
Keys are scoped to the job, the communicator and its epoch: a restarted group
starts with an empty store. A get or wait that runs out raises
torch's timeout error whose message names the keys never set and the ranks
(worker, node) that never called the store.

troupe.torch.step(n) marks a training step as troupe.Worker.step does (the
head's step figures and health, run-time profiling) and drives profiling
through torch: on the steps the head asks this worker to profile (`profile:`,
NRL_NSYS_PROFILE_STEP_RANGE/NRL_NSYS_WORKER_PATTERNS, `troupe profile`),
torch.cuda.profiler.start() at the first and stop() at the first step past
the window (what `nsys --capture-range=cudaProfilerApi` captures), an NVTX
range "step N" per step, and GPU memory figures, when CUDA is in use. On CPU
the window is recorded all the same (profile_windows(), the trace's spans,
a "profiled" metric of 1 per profiled step).

Works with torch's Python-store trampoline (torch.distributed.Store
subclasses, torch 1.13 and later): it calls set/get/add/compare_set/wait and,
by their C++ names, deleteKey and getNumKeys; delete_key, num_keys and check
are here too for direct use.
"""
from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import sys
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from .errors import DeadlineExceeded
from .worker import Step, Worker

_DEFAULT_TIMEOUT = datetime.timedelta(minutes=5)


def _bytes(v: Any) -> bytes:
    """torch hands values as str, bytes or a list of byte values (1.13's
    compare_set), depending on the method and version."""
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (list, tuple)):
        return bytes(bytearray(v))
    return bytes(v)


def _seconds(timeout: Optional[Union[datetime.timedelta, float]]) -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout)


class Store(dist.Store):
    """A torch.distributed.Store on troupe's job store.

    Store(worker=None, comm=None, timeout=5 min): worker is a troupe.Worker
    (one is opened from the environment when None, and closed with the
    store), comm the communicator whose store this is (None = the worker's
    group). Thread-safe: torch calls it from its own threads (the GIL is
    released while a call waits on the head)."""

    def __init__(self, worker: Optional[Worker] = None, comm: Optional[str] = None,
                 timeout: datetime.timedelta = _DEFAULT_TIMEOUT):
        super().__init__()
        self._owned = worker is None
        self.worker = worker if worker is not None else _default_worker()
        self.comm = comm
        self.set_timeout(timeout)

    def _wait_s(self, timeout: Optional[Union[datetime.timedelta, float]] = None) -> float:
        s = _seconds(timeout)
        if s is None or s <= 0:
            s = self.timeout.total_seconds()
        return s

    def set(self, key: str, value: Any) -> None:
        self.worker.store_set(key, _bytes(value), comm=self.comm)

    def get(self, key: str) -> bytes:
        try:
            return self.worker.store_get(key, timeout=self._wait_s(), comm=self.comm)
        except DeadlineExceeded as e:
            raise RuntimeError(f"Socket Timeout: {e.message}") from e

    def add(self, key: str, amount: int) -> int:
        return self.worker.store_add(key, int(amount), comm=self.comm)

    def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
        return self.worker.store_compare_set(key, _bytes(expected), _bytes(desired), comm=self.comm)

    def wait(self, keys: Sequence[str], timeout: Optional[datetime.timedelta] = None) -> None:
        try:
            self.worker.store_wait(list(keys), timeout=self._wait_s(timeout), comm=self.comm)
        except DeadlineExceeded as e:
            raise RuntimeError(f"Socket Timeout: {e.message}") from e

    def check(self, keys: Sequence[str]) -> bool:
        return self.worker.store_check(list(keys), comm=self.comm)

    def delete_key(self, key: str) -> bool:
        return self.worker.store_delete(key, comm=self.comm)

    def num_keys(self) -> int:
        return self.worker.store_num_keys(comm=self.comm)

    # The C++ names torch's trampoline looks up.
    deleteKey = delete_key
    getNumKeys = num_keys

    def close(self) -> None:
        """Close the worker when the store opened it (troupe.torch's own
        worker: troupe.torch.close())."""
        if self._owned:
            if self.worker is _worker:
                close()
            else:
                self.worker.close()


_store: Optional[Store] = None


def _device_index(local_rank: int) -> int:
    """The CUDA device of this worker: troupe-node sets CUDA_VISIBLE_DEVICES
    to the worker's own GPUs, so its first visible device; without it (not
    under troupe's placement), the LOCAL_RANK-th."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "") != "":
        return 0
    return local_rank % max(1, torch.cuda.device_count())


def init_process_group(backend: Optional[str] = None, worker: Optional[Worker] = None, comm: Optional[str] = None,
                       timeout: datetime.timedelta = _DEFAULT_TIMEOUT, **kwargs: Any) -> Store:
    """torch.distributed.init_process_group through troupe: rank and world
    size are this worker's in comm (None = its group; a communicator the job
    declares across groups otherwise), the rendezvous goes through Store.
    backend None picks NCCL when CUDA is available (and sets the device:
    the first of the worker's own GPUs, see _device_index), gloo otherwise.
    Returns the Store (kept for the process group's life; close it after
    destroy_process_group). When a rank does not arrive within timeout,
    raises troupe.DeadlineExceeded (a TimeoutError) naming the ranks that
    never arrived, with their worker names and nodes."""
    global _store
    w = worker if worker is not None else _default_worker()
    info = w.comm_info(comm)
    # Every rank meets at a troupe barrier first: the backends' own waits
    # (gloo's address exchange, NCCL's unique ID, torch's store barrier that
    # polls add()) end in torch's messages, which name a key or a count; the
    # head's barrier names the ranks that never came, with worker and node.
    try:
        w.barrier("troupe.torch.init_process_group", comm=comm, timeout=_seconds(timeout))
    except DeadlineExceeded as e:
        raise DeadlineExceeded(e.code, f"init_process_group of communicator {comm or w.group}: {e.message}") from e
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(_device_index(w.local_rank))
    store = Store(worker=w, comm=comm, timeout=timeout)
    store._owned = worker is None
    dist.init_process_group(backend, store=store, rank=info.rank, world_size=info.size, timeout=timeout, **kwargs)
    _store = store
    return store


_made: Dict[str, int] = {}
_pg_stores: List[Store] = []


def new_process_group(comm: str, backend: Optional[str] = None, worker: Optional[Worker] = None,
                      timeout: datetime.timedelta = _DEFAULT_TIMEOUT) -> Tuple[Any, int, int]:
    """A process group of communicator comm (one the job declares across
    groups, e.g. refit: [policy, generation]) beside the default one, for
    weight refits: (pg, rank, size). It is a torch ProcessGroupGloo or
    ProcessGroupNCCL on Store(comm=comm) that is not registered with
    torch.distributed's world, so call its own methods:
    pg.broadcast([t], opts).wait() with a torch.distributed.BroadcastOptions
    (rootRank in comm's ranks: the declaring groups' ranks in spec order).
    backend None: NCCL when CUDA is available, gloo otherwise. Every rank of
    comm calls it, in the same order as its other new_process_group calls;
    a rank that never comes is named (troupe.DeadlineExceeded) at timeout."""
    w = worker if worker is not None else _default_worker()
    info = w.comm_info(comm)
    try:
        w.barrier("troupe.torch.new_process_group", comm=comm, timeout=_seconds(timeout))
    except DeadlineExceeded as e:
        raise DeadlineExceeded(e.code, f"new_process_group of communicator {comm}: {e.message}") from e
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    n = _made.get(comm, 0)
    _made[comm] = n + 1
    # A prefix per call: a second group of the same communicator must not
    # read the first one's rendezvous keys.
    inner = Store(worker=w, comm=comm, timeout=timeout)
    # torch holds a Python store only through its C++ side: the Python object
    # must stay alive as long as the group may call it.
    _pg_stores.append(inner)
    store = dist.PrefixStore(f"troupe.pg.{n}/", inner)
    if backend == "gloo":
        pg = dist.ProcessGroupGloo(store, info.rank, info.size, timeout)
    elif backend == "nccl":
        try:
            pg = dist.ProcessGroupNCCL(store, info.rank, info.size, timeout)
        except TypeError:  # builds whose binding takes only Options
            opts = dist.ProcessGroupNCCL.Options()
            opts._timeout = timeout
            pg = dist.ProcessGroupNCCL(store, info.rank, info.size, opts)
    else:
        raise ValueError(f"backend {backend!r}: nccl or gloo")
    return pg, info.rank, info.size


# ---- steps and profiling -------------------------------------------------------------

_worker: Optional[Worker] = None


def _default_worker() -> Worker:
    """The worker troupe.torch opens from the environment when not given
    one, once per process, with caller_profiles so that the CUDA profiler
    and NVTX are torch's (the runtime would otherwise load a libcudart of
    its own, which need not be the one torch uses)."""
    global _worker
    if _worker is None:
        _worker = Worker(caller_profiles=True)
    return _worker


class _Profiling:
    """One worker's profiling state across steps: whether the window is
    open, where it started, the windows so far."""

    def __init__(self) -> None:
        self.on = False
        self.cuda = False
        self.start = 0
        self.last = 0
        self.windows: List[Tuple[int, int]] = []


_prof: Dict[int, _Profiling] = {}


def _cuda_in_use() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def _say(w: Worker, text: str) -> None:
    print(f"troupe.torch: {w.name}: {text}", file=sys.stderr, flush=True)


def _window_open(w: Worker, p: _Profiling, n: int) -> None:
    p.on, p.start, p.cuda = True, n, _cuda_in_use()
    if p.cuda:
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
    _say(w, f"profiling from step {n} ({'torch.cuda.profiler.start' if p.cuda else 'CPU: spans and metrics only'})")


def _window_close(w: Worker, p: _Profiling) -> None:
    if not p.on:
        return
    if p.cuda:
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    p.on = False
    p.windows.append((p.start, p.last + 1))
    _say(w, f"profiled steps {p.start}..{p.last} ({'torch.cuda.profiler.stop' if p.cuda else 'CPU'})")


def _close_all() -> None:
    for key, p in list(_prof.items()):
        w = _owners.get(key)
        if w is not None:
            _window_close(w, p)


_owners: Dict[int, Worker] = {}
atexit.register(_close_all)


def profile_windows(worker: Optional[Worker] = None) -> List[Tuple[int, int]]:
    """The profiling windows troupe.torch.step has driven for worker (the
    module's own when None): [(A, B), ...], steps A..B-1, the open one
    included up to its last step so far."""
    w = worker if worker is not None else _default_worker()
    p = _prof.get(id(w))
    if p is None:
        return []
    return p.windows + ([(p.start, p.last + 1)] if p.on else [])


def _memory_figures(s: Step) -> None:
    dev = torch.cuda.current_device()
    for name, value in (("gpu_mem_in_use_bytes", torch.cuda.memory_allocated(dev)),
                        ("gpu_mem_peak_bytes", torch.cuda.max_memory_allocated(dev)),
                        ("gpu_mem_reserved_bytes", torch.cuda.memory_reserved(dev)),
                        ("gpu_mem_total_bytes", torch.cuda.get_device_properties(dev).total_memory)):
        if name not in s.figures:
            setattr(s, name, value)


@contextlib.contextmanager
def step(n: int, worker: Optional[Worker] = None) -> Iterator[Step]:
    """`with troupe.torch.step(n) as s:` around training step n (1-based,
    increasing): the worker's step (s.profiled, figures set on s reported at
    the end, step_ms measured), with profiling driven through torch when the
    worker was opened with caller_profiles (troupe.torch's own worker, the
    default): torch.cuda.profiler.start/stop at the window's edges, an NVTX
    range "step n", GPU memory figures when CUDA is in use. A worker opened
    without it profiles through libtroupe's own libcudart instead (as C
    programs do), and this only marks the steps."""
    w = worker if worker is not None else _default_worker()
    drive = w.caller_profiles
    p = _prof.setdefault(id(w), _Profiling())
    _owners[id(w)] = w
    profiled = w.step_begin(n)
    if drive and profiled and not p.on:
        _window_open(w, p, n)
    elif drive and not profiled and p.on:
        _window_close(w, p)
    nvtx = drive and _cuda_in_use()
    if nvtx:
        torch.cuda.nvtx.range_push(f"step {n}")
    s = Step(n, profiled)
    try:
        yield s
    finally:
        if nvtx:
            torch.cuda.nvtx.range_pop()
        if profiled:
            p.last = n
            w.metric(n, "profiled", 1.0)
        if _cuda_in_use():
            _memory_figures(s)
        w.step_end(n, **s.figures)


def close() -> None:
    """End what troupe.torch holds: the profiling window if open, the
    module's worker (flushing its metrics). destroy_process_group first."""
    global _worker, _store
    _close_all()
    if _worker is not None:
        _prof.pop(id(_worker), None)
        _owners.pop(id(_worker), None)
        _worker.close()
        _worker = None
    _store = None
