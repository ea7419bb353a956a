#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int tr_err_set(tr_err *err, int code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return code;
}

void tr_err_clear(tr_err *err)
{
    if (err != NULL) {
        err->code = TROUPE_OK;
        err->msg[0] = '\0';
    }
}

void tr_err_prefix(tr_err *err, const char *fmt, ...)
{
    char prefix[TR_ERR_MSG_MAX];
    size_t room = sizeof(err->msg) - 1, pl, ol;
    va_list ap;

    if (err == NULL) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    /* "prefix: message" in place; when it does not fit, the end of the old
     * message gives way first (its start names the failing call). */
    pl = strlen(prefix);
    if (pl > room - 2) {
        pl = room - 2;
    }
    ol = strlen(err->msg);
    if (ol > room - 2 - pl) {
        ol = room - 2 - pl;
    }
    memmove(err->msg + pl + 2, err->msg, ol);
    memcpy(err->msg, prefix, pl);
    memcpy(err->msg + pl, ": ", 2);
    err->msg[pl + 2 + ol] = '\0';
}
