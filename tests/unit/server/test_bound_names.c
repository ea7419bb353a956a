/* test_bound_names.c - unit.server.bound_names: the index of node names bound
 * per node credential (server/bound_names.c) that RegisterNode's --max-nodes
 * check reads: names counted once however many records carry them, a name
 * unbound only when its last record goes, credentials kept apart, and its
 * answers equal to a plain walk over a list of records through growth and
 * removals. */
#include "test_helpers.h"

#include <stdio.h>
#include <stdlib.h>

#include "bound_names.h"

static void counts_distinct_names(void **state)
{
    tr_bound_names *b = tr_bound_names_alloc();

    (void)state;
    assert_non_null(b);
    assert_int_equal(tr_bound_names_count(b, 7), 0);
    assert_false(tr_bound_names_has(b, 7, "gpu-1"));
    assert_int_equal(tr_bound_names_add(b, 7, "gpu-1"), 0);
    assert_int_equal(tr_bound_names_add(b, 7, "gpu-1"), 0); /* a dead record and its successor */
    assert_int_equal(tr_bound_names_add(b, 7, "gpu-2"), 0);
    assert_int_equal(tr_bound_names_count(b, 7), 2);
    assert_true(tr_bound_names_has(b, 7, "gpu-1"));
    assert_false(tr_bound_names_has(b, 7, "gpu-10"));
    assert_false(tr_bound_names_has(b, 7, "gpu-"));
    tr_bound_names_remove(b, 7, "gpu-1"); /* one record of two */
    assert_true(tr_bound_names_has(b, 7, "gpu-1"));
    assert_int_equal(tr_bound_names_count(b, 7), 2);
    tr_bound_names_remove(b, 7, "gpu-1");
    assert_false(tr_bound_names_has(b, 7, "gpu-1"));
    assert_int_equal(tr_bound_names_count(b, 7), 1);
    tr_bound_names_remove(b, 7, "never-bound"); /* ignored */
    tr_bound_names_remove(b, 8, "gpu-2");
    assert_int_equal(tr_bound_names_count(b, 7), 1);
    tr_bound_names_free(b);
    tr_bound_names_free(NULL);
}

static void credentials_apart(void **state)
{
    tr_bound_names *b = tr_bound_names_alloc();

    (void)state;
    assert_non_null(b);
    assert_int_equal(tr_bound_names_add(b, 1, "n"), 0);
    assert_int_equal(tr_bound_names_add(b, 2, "n"), 0);
    assert_int_equal(tr_bound_names_add(b, 2, "m"), 0);
    assert_int_equal(tr_bound_names_count(b, 1), 1);
    assert_int_equal(tr_bound_names_count(b, 2), 2);
    assert_false(tr_bound_names_has(b, 1, "m"));
    tr_bound_names_remove(b, 2, "n");
    assert_true(tr_bound_names_has(b, 1, "n"));
    assert_false(tr_bound_names_has(b, 2, "n"));
    tr_bound_names_free(b);
}

/* A list of (credential, name) records, walked as may_name once walked the
 * node table: the reference the index must agree with. */
#define RECORDS 6000
typedef struct rec {
    uint64_t cred;
    char name[24];
    int live;
} rec;

static int ref_has(const rec *r, size_t n, uint64_t cred, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (r[i].live && r[i].cred == cred && strcmp(r[i].name, name) == 0) {
            return 1;
        }
    }
    return 0;
}

static size_t ref_count(const rec *r, size_t n, uint64_t cred)
{
    size_t names = 0;
    for (size_t i = 0; i < n; i++) {
        int seen = 0;
        for (size_t k = 0; k < i && !seen && r[i].live && r[i].cred == cred; k++) {
            seen = r[k].live && r[k].cred == cred && strcmp(r[k].name, r[i].name) == 0;
        }
        names += r[i].live && r[i].cred == cred && !seen;
    }
    return names;
}

static void matches_a_walk(void **state)
{
    tr_bound_names *b = tr_bound_names_alloc();
    rec *r = calloc(RECORDS, sizeof(*r));
    unsigned seed = 12345;

    (void)state;
    assert_non_null(b);
    assert_non_null(r);
    for (size_t i = 0; i < RECORDS; i++) { /* 3 credentials, names reused: growth and duplicates */
        seed = seed * 1103515245u + 12345u;
        r[i].cred = 1 + (seed >> 16) % 3;
        snprintf(r[i].name, sizeof(r[i].name), "node-%u", (seed >> 8) % 2500);
        r[i].live = 1;
        assert_int_equal(tr_bound_names_add(b, r[i].cred, r[i].name), 0);
    }
    for (size_t i = 0; i < RECORDS; i += 3) { /* records replaced */
        r[i].live = 0;
        tr_bound_names_remove(b, r[i].cred, r[i].name);
    }
    for (uint64_t cred = 0; cred <= 4; cred++) {
        if (tr_bound_names_count(b, cred) != ref_count(r, RECORDS, cred)) {
            fail_msg("credential %llu: index counts %zu names, a walk %zu", (unsigned long long)cred,
                     tr_bound_names_count(b, cred), ref_count(r, RECORDS, cred));
        }
        for (unsigned k = 0; k < 2600; k += 7) {
            char name[24];
            snprintf(name, sizeof(name), "node-%u", k);
            if (tr_bound_names_has(b, cred, name) != ref_has(r, RECORDS, cred, name)) {
                fail_msg("credential %llu name %s: index says %d, a walk %d", (unsigned long long)cred, name,
                         tr_bound_names_has(b, cred, name), ref_has(r, RECORDS, cred, name));
            }
        }
    }
    free(r);
    tr_bound_names_free(b);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(counts_distinct_names),
        cmocka_unit_test(credentials_apart),
        cmocka_unit_test(matches_a_walk),
    };
    return TR_TEST_MAIN("unit.server.bound_names", tests, argc, argv);
}
