/* test_main.h - tr_test_main, the main() of every cmocka suite (unit tests of
 * the foundation and of troupe-train).
 *
 * ctest registers each case as its own test (unit.<module>.<case>) that runs
 * the executable with the case's name. Unlike cmocka_set_test_filter, an
 * unknown name is an error, so a typo in a CMakeLists.txt cannot turn into a
 * test that runs nothing and passes. */
#ifndef TR_TEST_MAIN_H
#define TR_TEST_MAIN_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

/* tr_test_skipped is set by TR_SKIP; one object across the suite's files
 * (weak: every file that includes this header defines it). */
__attribute__((weak)) int tr_test_skipped;

/* TR_SKIP(fmt, ...) ends the running case as skipped, saying why: the case
 * cannot run here (no room to raise a nice, say). cmocka's own skip() ends
 * the process with 0, which ctest counts as passed; tr_test_main turns a
 * skipped single case into exit 77, ctest's SKIP_RETURN_CODE. */
#define TR_SKIP(...)                                                                               \
    do {                                                                                           \
        print_message("SKIP: " __VA_ARGS__);                                                       \
        print_message("\n");                                                                       \
        tr_test_skipped = 1;                                                                       \
        skip();                                                                                    \
    } while (0)

/* tr_test_main runs the case named argv[1] (all cases when absent); returns the
 * process exit status: 77 when that one case skipped (TR_SKIP). Unknown names
 * fail with the list of known ones. */
static inline int tr_test_main(const char *group, const struct CMUnitTest *tests, size_t n, int argc,
                               char **argv, CMFixtureFunction setup, CMFixtureFunction teardown)
{
    if (argc < 2) {
        return _cmocka_run_group_tests(group, tests, n, setup, teardown);
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(tests[i].name, argv[1]) == 0) {
            int failed = _cmocka_run_group_tests(group, &tests[i], 1, setup, teardown);
            return (failed == 0 && tr_test_skipped) ? 77 : failed;
        }
    }
    fprintf(stderr, "%s: no test case named '%s'; known cases:\n", group, argv[1]);
    for (size_t i = 0; i < n; i++) {
        fprintf(stderr, "  %s\n", tests[i].name);
    }
    return 2;
}

#define TR_TEST_MAIN(group, tests, argc, argv)                                                     \
    tr_test_main((group), (tests), sizeof(tests) / sizeof((tests)[0]), (argc), (argv), NULL, NULL)

#endif
