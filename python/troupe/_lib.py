"""Loading libtroupe and declaring the C functions the package calls.

Where libtroupe is looked for, in order:
1. $TROUPE_LIBRARY: the path of libtroupe.so (a build tree's client/libtroupe.so);
   when it is set and does not load, the import fails saying why;
2. a build tree beside this package's checkout (../build/client/libtroupe.so
   from the python/ folder), for `pip install -e ./python` and running in place;
3. pkg-config's troupe.pc (an installed troupe), then the loader's search
   path (ldconfig).
The first that exists is loaded; none found raises ImportError naming what was
tried.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
from ctypes import (POINTER, Structure, c_char_p, c_double, c_int, c_int64, c_size_t, c_uint32, c_uint64,
                    c_void_p)
from typing import List, Optional

from .errors import error_for


class Error(Structure):
    """troupe_error: code and a sentence."""
    _fields_ = [("code", c_int), ("message", ctypes.c_char * 512)]


def _candidates() -> List[str]:
    out = []
    env = os.environ.get("TROUPE_LIBRARY")
    if env:
        out.append(env)
    here = os.path.dirname(os.path.abspath(__file__))
    for build in ("build", "build-asan"):
        out.append(os.path.join(here, "..", "..", build, "client", "libtroupe.so"))
    try:
        libdir = subprocess.run(["pkg-config", "--variable=libdir", "troupe"], capture_output=True, text=True,
                                timeout=10).stdout.strip()
        if libdir:
            out.append(os.path.join(libdir, "libtroupe.so"))
    except (OSError, subprocess.SubprocessError):
        pass
    found = ctypes.util.find_library("troupe")
    if found:
        out.append(found)
    return out


def _load() -> ctypes.CDLL:
    env = os.environ.get("TROUPE_LIBRARY")
    if env:
        # Named on purpose: never fall back to another copy without a word.
        try:
            return ctypes.CDLL(env)
        except OSError as e:
            raise ImportError(f"TROUPE_LIBRARY={env}: {e}") from e
    tried = _candidates()
    for path in tried:
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    raise ImportError("libtroupe not found (tried: %s): set TROUPE_LIBRARY to the path of libtroupe.so, "
                      "or install troupe (cmake --install build)" % (", ".join(tried) or "nothing"))


lib = _load()


def _fn(name: str, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


E = POINTER(Error)
VP = c_void_p
PP = POINTER(c_void_p)

# troupe/worker.h
_fn("troupe_worker_open", c_int, PP, c_void_p, E)
_fn("troupe_worker_close", None, VP)
_fn("troupe_worker_self_info", c_void_p, VP)
_fn("troupe_worker_comm_info", c_int, VP, c_char_p, c_void_p, E)
_fn("troupe_worker_barrier", c_int, VP, c_char_p, c_char_p, c_uint32, E)
_fn("troupe_worker_allgather", c_int, VP, c_char_p, c_char_p, c_void_p, c_size_t, c_uint32, PP, E)
_fn("troupe_blobs_free", None, VP)
_fn("troupe_worker_step_begin", c_int, VP, c_uint64, POINTER(c_int))
_fn("troupe_step_figures_init", None, c_void_p)
_fn("troupe_worker_step_end", c_int, VP, c_uint64, c_void_p)
_fn("troupe_worker_span_begin", c_int, VP, c_char_p)
_fn("troupe_worker_span_end", c_int, VP)
_fn("troupe_worker_should_stop", c_int, VP)
_fn("troupe_worker_fail", c_int, VP, c_int, c_char_p, E)
_fn("troupe_worker_metric", c_int, VP, c_uint64, c_char_p, c_double)
_fn("troupe_worker_metrics_flush", c_int, VP, c_uint32, E)
_fn("troupe_worker_store_set", c_int, VP, c_char_p, c_char_p, c_char_p, c_size_t, E)
_fn("troupe_worker_store_get", c_int, VP, c_char_p, c_char_p, c_uint32, PP, POINTER(c_size_t), E)
_fn("troupe_worker_store_add", c_int, VP, c_char_p, c_char_p, c_int64, POINTER(c_int64), E)
_fn("troupe_worker_store_compare_set", c_int, VP, c_char_p, c_char_p, c_char_p, c_size_t, c_char_p, c_size_t, PP,
    POINTER(c_size_t), E)
_fn("troupe_worker_store_wait", c_int, VP, c_char_p, POINTER(c_char_p), c_size_t, c_uint32, E)
_fn("troupe_worker_store_check", c_int, VP, c_char_p, POINTER(c_char_p), c_size_t, POINTER(c_int), E)
_fn("troupe_worker_store_delete", c_int, VP, c_char_p, c_char_p, POINTER(c_int), E)
_fn("troupe_worker_store_num_keys", c_int, VP, c_char_p, POINTER(c_uint64), E)
_fn("troupe_free", None, VP)
_fn("troupe_strerror", c_char_p, c_int)

# troupe/client.h
_fn("troupe_client_open", c_int, PP, c_void_p, E)
_fn("troupe_client_close", None, VP)
_fn("troupe_submit_file", c_int, VP, c_char_p, POINTER(c_uint64), E)
_fn("troupe_submit_yaml", c_int, VP, c_char_p, c_size_t, c_char_p, c_char_p, POINTER(c_uint64), E)
_fn("troupe_get_job", c_int, VP, c_uint64, PP, E)
_fn("troupe_wait_job", c_int, VP, c_uint64, c_uint64, c_uint32, PP, E)
_fn("troupe_job_free", None, VP)
_fn("troupe_list_jobs", c_int, VP, c_int, PP, E)
_fn("troupe_job_list_free", None, VP)
_fn("troupe_stop_job", c_int, VP, c_uint64, E)
_fn("troupe_delete_job", c_int, VP, c_uint64, E)
_fn("troupe_read_logs", c_int, VP, c_uint64, c_char_p, c_uint64, c_uint32, PP, POINTER(c_size_t),
    POINTER(c_uint64), POINTER(c_int), E)
_fn("troupe_list_nodes", c_int, VP, c_int, PP, E)
_fn("troupe_node_list_free", None, VP)
_fn("troupe_get_metrics", c_int, VP, c_uint64, c_void_p, PP, E)
_fn("troupe_metrics_page_free", None, VP)
_fn("troupe_get_trace", c_int, VP, c_uint64, PP, E)
_fn("troupe_trace_free", None, VP)
_fn("troupe_set_profile", c_int, VP, c_uint64, c_void_p, POINTER(c_uint64), E)
_fn("troupe_client_url", c_char_p, VP)
_fn("troupe_job_state_name", c_char_p, c_int)
_fn("troupe_worker_state_name", c_char_p, c_int)
_fn("troupe_node_state_name", c_char_p, c_int)


def check(rv: int, err: Optional[Error]) -> None:
    """Raise the exception for rv (not OK) with err's message."""
    if rv != 0:
        msg = err.message.decode("utf-8", "replace") if err is not None and err.message else ""
        raise error_for(rv, msg or lib.troupe_strerror(rv).decode())


def enc(s: Optional[str]) -> Optional[bytes]:
    return None if s is None else s.encode("utf-8")


def dec(b: Optional[bytes]) -> str:
    return "" if not b else b.decode("utf-8", "replace")
