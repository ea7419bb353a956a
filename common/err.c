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
    char old[TR_ERR_MSG_MAX];
    va_list ap;

    if (err == NULL) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    snprintf(err->msg, sizeof(err->msg), "%s: %s", prefix, old);
}
