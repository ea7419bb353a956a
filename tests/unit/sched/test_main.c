/* test_main.c - runs the scheduler's unit tests; argv[1] picks one by name
 * (ctest registers each as unit.sched.<name>). An unknown name fails, so a
 * typo in CMake cannot turn into a test that runs nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_test.h"

int main(int argc, char **argv)
{
    size_t np, nq;
    const struct CMUnitTest *p = sched_place_tests(&np);
    const struct CMUnitTest *q = sched_queue_tests(&nq);
    struct CMUnitTest *all = calloc(np + nq, sizeof(*all));
    size_t n = 0;

    if (all == NULL) {
        return 2;
    }
    for (size_t i = 0; i < np + nq; i++) {
        const struct CMUnitTest *t = i < np ? &p[i] : &q[i - np];
        if (argc < 2 || strcmp(argv[1], t->name) == 0) {
            all[n++] = *t;
        }
    }
    if (n == 0) {
        fprintf(stderr, "no test named '%s'\n", argv[1]);
        free(all);
        return 2;
    }
    int rv = _cmocka_run_group_tests("sched", all, n, NULL, NULL);
    free(all);
    return rv;
}
