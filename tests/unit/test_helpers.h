/* test_helpers.h - cmocka helpers shared by the foundation unit tests
 * (tests/unit/common, tests/unit/server, tests/unit/node).
 *
 * The assert macros print the status name and the error message on failure
 * ("tr_cfg_load_file(...) failed: INVALID_ARGUMENT: t.yaml:3:5: unknown key
 * 'lisen'") rather than cmocka's bare "0x3 != 0x0".
 *
 * tr_test_main (test_main.h) runs one named case; an unknown name fails. */
#ifndef TR_TEST_HELPERS_H
#define TR_TEST_HELPERS_H

#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_main.h"

#include "err.h"
#include "troupe/status.h"

/* TR_ASSERT_OK fails unless expr returns TROUPE_OK; errp is a tr_err *. */
#define TR_ASSERT_OK(expr, errp)                                                                   \
    do {                                                                                           \
        int rv_ = (expr);                                                                          \
        if (rv_ != TROUPE_OK) {                                                                    \
            fail_msg("%s failed: %s: %s", #expr, troupe_strerror(rv_), (errp)->msg);               \
        }                                                                                          \
    } while (0)

/* TR_ASSERT_STATUS fails unless expr returns code. */
#define TR_ASSERT_STATUS(expr, code, errp)                                                         \
    do {                                                                                           \
        int rv_ = (expr);                                                                          \
        if (rv_ != (code)) {                                                                       \
            fail_msg("%s: expected %s, got %s (message: \"%s\")", #expr, troupe_strerror(code),    \
                     troupe_strerror(rv_), (errp)->msg);                                           \
        }                                                                                          \
    } while (0)

/* TR_ASSERT_FAILS checks the code and that the message contains needle. */
#define TR_ASSERT_FAILS(expr, code, errp, needle)                                                  \
    do {                                                                                           \
        TR_ASSERT_STATUS(expr, code, errp);                                                        \
        TR_ASSERT_CONTAINS((errp)->msg, needle);                                                   \
    } while (0)

/* TR_ASSERT_CONTAINS checks that string hay contains needle. */
#define TR_ASSERT_CONTAINS(hay, needle)                                                            \
    do {                                                                                           \
        const char *h_ = (hay);                                                                    \
        const char *n_ = (needle);                                                                 \
        if (h_ == NULL || strstr(h_, n_) == NULL) {                                                \
            fail_msg("\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_);                    \
        }                                                                                          \
    } while (0)

/* TR_ASSERT_LACKS checks that string hay does not contain needle. */
#define TR_ASSERT_LACKS(hay, needle)                                                               \
    do {                                                                                           \
        const char *h_ = (hay);                                                                    \
        const char *n_ = (needle);                                                                 \
        if (h_ != NULL && strstr(h_, n_) != NULL) {                                                \
            fail_msg("\"%s\" should not contain \"%s\"", h_, n_);                                  \
        }                                                                                          \
    } while (0)

/* The directories tr_test_tmpdir made in this file's cases, removed with all
 * they hold when the process exits - also after a failed assertion, whose
 * longjmp skips the case's own clean-up. (A head under test writes its state
 * dir full; a case that forgot its rmdir left one per run in /tmp.) */
static char tr_test_dirs_[16][320] __attribute__((unused));
static int tr_test_ndirs_ __attribute__((unused));

static inline int tr_test_rm_one_(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static inline void tr_test_rm_dirs_(void)
{
    for (int i = 0; i < tr_test_ndirs_; i++) {
        nftw(tr_test_dirs_[i], tr_test_rm_one_, 16, FTW_DEPTH | FTW_PHYS);
    }
}

/* tr_test_tmpdir makes a fresh directory under $TMPDIR (or /tmp) and writes its
 * path into buf; fails the test on error. The directory and what is in it
 * are removed at exit. */
static inline void tr_test_tmpdir(char *buf, size_t size, const char *tag)
{
    const char *base = getenv("TMPDIR");
    snprintf(buf, size, "%s/troupe-%s-XXXXXX", (base && base[0]) ? base : "/tmp", tag);
    if (mkdtemp(buf) == NULL) {
        fail_msg("mkdtemp %s failed", buf);
    }
    if (tr_test_ndirs_ == 0) {
        atexit(tr_test_rm_dirs_);
    }
    if (tr_test_ndirs_ < (int)(sizeof(tr_test_dirs_) / sizeof(tr_test_dirs_[0]))) {
        snprintf(tr_test_dirs_[tr_test_ndirs_++], sizeof(tr_test_dirs_[0]), "%s", buf);
    } else {
        fail_msg("tr_test_tmpdir: more than %d directories in one process", tr_test_ndirs_);
    }
}

#endif
