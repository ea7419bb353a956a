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

/* tr_test_main runs the case named argv[1] (all cases when absent); returns the
 * process exit status. Unknown names fail with the list of known ones. */
static inline int tr_test_main(const char *group, const struct CMUnitTest *tests, size_t n, int argc,
                               char **argv, CMFixtureFunction setup, CMFixtureFunction teardown)
{
    if (argc < 2) {
        return _cmocka_run_group_tests(group, tests, n, setup, teardown);
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(tests[i].name, argv[1]) == 0) {
            return _cmocka_run_group_tests(group, &tests[i], 1, setup, teardown);
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
