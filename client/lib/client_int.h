/* client_int.h - libtroupe internals shared by its source files. Not API. */
#ifndef TR_CLIENT_INT_H
#define TR_CLIENT_INT_H

#include "err.h"
#include "rpc.h"
#include "troupe/client.h"
#include "util.h"

struct troupe_client {
    tr_rpc_client *rpc;
    char url[512];
    uint32_t timeout_ms;
};

/* tr_client_finish copies an internal error into the caller's troupe_error
 * (which may be NULL) and returns the code. */
static inline troupe_status tr_client_finish(troupe_error *err, const tr_err *e, int rv)
{
    if (err != NULL) {
        err->code = rv;
        tr_strlcpy(err->message, rv == TROUPE_OK ? "" : e->msg, sizeof(err->message));
    }
    return (troupe_status)rv;
}

#endif
