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

Works with torch's Python-store trampoline (torch.distributed.Store
subclasses, torch 1.13 and later): it calls set/get/add/compare_set/wait and,
by their C++ names, deleteKey and getNumKeys; delete_key, num_keys and check
are here too for direct use.
"""
from __future__ import annotations

import datetime
import os
from typing import Any, List, Optional, Sequence, Union

import torch
import torch.distributed as dist

from .errors import DeadlineExceeded
from .worker import Worker

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
        self.worker = worker if worker is not None else Worker()
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
        """Close the worker when the store opened it."""
        if self._owned:
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
    w = worker if worker is not None else Worker()
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
