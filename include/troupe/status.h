/*
 * troupe/status.h - status codes shared by libtroupe, the daemons and the wire.
 *
 * The numbers are gRPC's (google.rpc.Code), so a code travels unchanged from the
 * head's handler to the caller of libtroupe: what the server said is what the
 * client function returns.
 */
#ifndef TROUPE_STATUS_H
#define TROUPE_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TROUPE_BUILDING_LIBRARY)
#define TROUPE_API __attribute__((visibility("default")))
#else
#define TROUPE_API
#endif

typedef enum troupe_status {
    TROUPE_OK = 0,
    TROUPE_CANCELLED = 1,
    TROUPE_UNKNOWN = 2,
    TROUPE_INVALID_ARGUMENT = 3,
    TROUPE_DEADLINE_EXCEEDED = 4,
    TROUPE_NOT_FOUND = 5,
    TROUPE_ALREADY_EXISTS = 6,
    TROUPE_PERMISSION_DENIED = 7,
    TROUPE_RESOURCE_EXHAUSTED = 8,
    TROUPE_FAILED_PRECONDITION = 9,
    TROUPE_ABORTED = 10,
    TROUPE_OUT_OF_RANGE = 11,
    TROUPE_UNIMPLEMENTED = 12,
    TROUPE_INTERNAL = 13,
    TROUPE_UNAVAILABLE = 14,
    TROUPE_DATA_LOSS = 15,
    TROUPE_UNAUTHENTICATED = 16,
} troupe_status;

/* troupe_strerror returns a static, never-NULL name for a status
 * ("DEADLINE_EXCEEDED"); unknown values give "UNKNOWN_STATUS". Thread-safe. */
TROUPE_API const char *troupe_strerror(int status);

#ifdef __cplusplus
}
#endif
#endif
