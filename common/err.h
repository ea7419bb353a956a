/* err.h - an error value with a message the caller can read.
 *
 * Fallible internal functions return a troupe_status and, when given a tr_err,
 * fill it with a sentence naming the cause ("head.yaml:3:5: unknown key 'lisen'").
 * The struct lives in caller storage; nothing here allocates. */
#ifndef TR_ERR_H
#define TR_ERR_H

#include <stddef.h>

#include "troupe/status.h"

#define TR_ERR_MSG_MAX 512

typedef struct tr_err {
    int code;                 /* troupe_status */
    char msg[TR_ERR_MSG_MAX]; /* NUL-terminated, possibly empty */
} tr_err;

/* tr_err_set records code and a printf-style message in err (err may be NULL)
 * and returns code, so that `return tr_err_set(err, ...)` reads naturally. */
int tr_err_set(tr_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* tr_err_clear resets err to OK with an empty message (err may be NULL). */
void tr_err_clear(tr_err *err);

/* tr_err_prefix prepends "prefix: " to err's message, keeping its code. */
void tr_err_prefix(tr_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
