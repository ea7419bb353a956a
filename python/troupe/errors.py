"""Exceptions carrying troupe's status codes (gRPC's numbering) and the
head's message. Every failed call raises a subclass of TroupeError chosen by
its code, so callers catch what they can handle:

    try:
        w.store_get("ready", timeout=5)
    except troupe.DeadlineExceeded as e:
        print(e.code_name, e.message)
"""
from __future__ import annotations

from typing import Dict, Type

CODE_NAMES = {
    0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND",
    6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION",
    10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL", 14: "UNAVAILABLE",
    15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}


class TroupeError(Exception):
    """A troupe call failed: code is the status (gRPC numbering), message the
    sentence libtroupe or the head gave."""

    code: int = 2

    def __init__(self, code: int, message: str):
        super().__init__(f"{CODE_NAMES.get(code, code)}: {message}")
        self.code = code
        self.message = message

    @property
    def code_name(self) -> str:
        return CODE_NAMES.get(self.code, str(self.code))


class Cancelled(TroupeError): pass
class Unknown(TroupeError): pass
class InvalidArgument(TroupeError): pass
class DeadlineExceeded(TroupeError, TimeoutError): pass
class NotFound(TroupeError): pass
class AlreadyExists(TroupeError): pass
class PermissionDenied(TroupeError): pass
class ResourceExhausted(TroupeError): pass
class FailedPrecondition(TroupeError): pass
class Aborted(TroupeError): pass
class OutOfRange(TroupeError): pass
class Unimplemented(TroupeError): pass
class Internal(TroupeError): pass
class Unavailable(TroupeError): pass
class DataLoss(TroupeError): pass
class Unauthenticated(TroupeError): pass


_BY_CODE: Dict[int, Type[TroupeError]] = {
    1: Cancelled, 2: Unknown, 3: InvalidArgument, 4: DeadlineExceeded, 5: NotFound, 6: AlreadyExists,
    7: PermissionDenied, 8: ResourceExhausted, 9: FailedPrecondition, 10: Aborted, 11: OutOfRange,
    12: Unimplemented, 13: Internal, 14: Unavailable, 15: DataLoss, 16: Unauthenticated,
}


def error_for(code: int, message: str) -> TroupeError:
    """The exception for a status code (TroupeError itself for an unknown one)."""
    return _BY_CODE.get(code, TroupeError)(code, message)

for _code, _cls in _BY_CODE.items():
    _cls.code = _code  # so a class names its status: w.fail(troupe.DeadlineExceeded, "...")
