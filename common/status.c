#include "troupe/status.h"

#include <stddef.h>

/* Names as gRPC spells them, so logs and CLI errors match what gRPC users know. */
static const char *const status_names[] = {
    "OK",        "CANCELLED",       "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS",  "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",    "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED",
};

TROUPE_API const char *troupe_strerror(int status)
{
    if (status < 0 || (size_t)status >= sizeof(status_names) / sizeof(status_names[0])) {
        return "UNKNOWN_STATUS";
    }
    return status_names[status];
}
