"""troupe from Python, over libtroupe (ctypes; no compiler needed).

    import troupe
    with troupe.Worker() as w:             # inside a job troupe started
        w.store_set("addr", "10.0.0.1:29500")
        with w.step(1) as s:
            s.loss = 0.5
    c = troupe.Client(head="tcp://head:7770")
    jid = c.submit("job.yaml"); print(c.wait(jid)["state"])

troupe.torch (imported on its own: it needs torch) gives torch.distributed a
Store on the head and init_process_group with no MASTER_PORT.
Errors raise TroupeError subclasses named after the status (NotFound,
DeadlineExceeded, ...), carrying .code and the head's .message.
"""
from .client import Client
from .errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded, FailedPrecondition, Internal,
                     InvalidArgument, NotFound, OutOfRange, PermissionDenied, ResourceExhausted, TroupeError,
                     Unauthenticated, Unavailable, Unimplemented, Unknown)
from .worker import CommInfo, Step, Worker

__version__ = "0.1.0"
__all__ = ["Client", "Worker", "CommInfo", "Step", "TroupeError", "Cancelled", "Unknown", "InvalidArgument",
           "DeadlineExceeded", "NotFound", "AlreadyExists", "PermissionDenied", "ResourceExhausted",
           "FailedPrecondition", "Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss",
           "Unauthenticated"]
