/* jobspec_test.h - helpers shared by the job spec unit tests.
 *
 * Failures print the status name and the parser's message ("expected OK, got
 * INVALID_ARGUMENT: job.yaml:7:14: groups[0].workers: ...") rather than
 * cmocka's bare numbers. Every parse uses the file name "job.yaml" and the
 * base directory "/srv/jobs" unless a test says otherwise. */
#ifndef TR_JOBSPEC_TEST_H
#define TR_JOBSPEC_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "jobspec.h"
#include "jobspec_int.h"

#define JT_NAME "job.yaml"
#define JT_BASE "/srv/jobs"

/* JT_CONTAINS fails unless hay contains needle. */
#define JT_CONTAINS(hay, needle)                                                                             \
    do {                                                                                                     \
        const char *h_ = (hay), *n_ = (needle);                                                              \
        if (h_ == NULL || strstr(h_, n_) == NULL) {                                                          \
            fail_msg("\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_);                              \
        }                                                                                                    \
    } while (0)

/* JT_STATUS fails unless expr returns code; errp's message is shown. */
#define JT_STATUS(expr, code, errp)                                                                          \
    do {                                                                                                     \
        int rv_ = (expr);                                                                                    \
        if (rv_ != (code)) {                                                                                 \
            fail_msg("%s: expected %s, got %s: %s", #expr, troupe_strerror(code), troupe_strerror(rv_),      \
                     (errp)->msg);                                                                           \
        }                                                                                                    \
    } while (0)

/* jt_parse parses yaml (NUL-terminated) and fails the test on error. */
Troupe__V1__JobSpec *jt_parse(const char *yaml);

/* jt_fails parses yaml, expects code and a message holding every needle
 * (a NULL-terminated list), and returns the message in a static buffer. */
const char *jt_fails(const char *yaml, int code, ...);

/* jt_group formats the template below with the given workers, resources and
 * command values and extra trailing lines; the caller frees the result.
 *   1 name: demo           5   - name: policy
 *   2 cluster:             6     workers: <workers>       (value at 6:14)
 *   3   nodes: [8]         7     resources: <resources>   (value at 7:16)
 *   4 groups:              8     command: <command>       (value at 8:14)
 *                          9+ <extra> */
char *jt_group(const char *workers, const char *resources, const char *command, const char *extra);

/* jt_fails_group is jt_fails on a jt_group text. */
const char *jt_fails_group(const char *workers, const char *resources, const char *command, const char *extra,
                           int code, const char *needle1, const char *needle2);

/* jt_appendf appends printf output to a growing heap string. */
void jt_appendf(char **buf, size_t *len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

const struct CMUnitTest *jt_parse_tests(size_t *n);
const struct CMUnitTest *jt_limit_tests(size_t *n);
const struct CMUnitTest *jt_validate_tests(size_t *n);

#endif
