/* train_test.h - cmocka helpers shared by the troupe-train unit tests.
 *
 * TR_ASSERT_OK prints the status name and the error message instead of
 * cmocka's bare "0x3 != 0x0". */
#ifndef TR_TRAIN_TEST_H
#define TR_TRAIN_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "test_main.h"

#include "err.h"

#define TR_ASSERT_OK(expr, errp)                                                                             \
    do {                                                                                                     \
        int rv_ = (expr);                                                                                    \
        if (rv_ != TROUPE_OK) {                                                                              \
            fail_msg("%s failed: %s: %s", #expr, troupe_strerror(rv_), (errp)->msg);                         \
        }                                                                                                    \
    } while (0)

/* TR_ASSERT_FAILS checks that expr fails with code and that the message
 * contains needle. */
#define TR_ASSERT_FAILS(expr, code, errp, needle)                                                            \
    do {                                                                                                     \
        int rv_ = (expr);                                                                                    \
        if (rv_ != (code)) {                                                                                 \
            fail_msg("%s: expected %s, got %s (%s)", #expr, troupe_strerror(code), troupe_strerror(rv_),     \
                     (errp)->msg);                                                                           \
        }                                                                                                    \
        if (strstr((errp)->msg, (needle)) == NULL) {                                                         \
            fail_msg("%s: message \"%s\" lacks \"%s\"", #expr, (errp)->msg, (needle));                       \
        }                                                                                                    \
    } while (0)


/* train_fixture_cleanup frees a test's config and removes its temp dir;
 * shared by the train suites' teardowns. */
#include <stdlib.h>
#include "train.h"
static inline void train_fixture_cleanup(tr_train_config *cfg, const char *dir)
{
    char cmd[256];
    tr_train_config_fini(cfg);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

#endif
