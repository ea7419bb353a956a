/* test_ids.c - unit.node.ids: the ids workers run under (worker/node/ids.c).
 * Two tr_ids on one lock dir stand for two agents on one host (flock locks
 * belong to open file descriptions, so they exclude each other in one process
 * as across processes). The dynamic and user modes need root; as another
 * user those cases skip. */
#include "test_helpers.h"

#include <stdlib.h>
#include <unistd.h>

#include "ids.h"

static char dir[320];

/* Under $TMPDIR (the test command's, where what is left is seen), removed at
 * exit even after a failed assertion. */
static int setup(void **state)
{
    (void)state;
    tr_test_tmpdir(dir, sizeof(dir), "ids");
    return 0;
}

static tr_ids *open_ids(const char *range, const char *user, int shared)
{
    tr_ids_opts o = {shared, user, range, dir};
    tr_ids *ids = NULL;
    tr_err err = {0};
    TR_ASSERT_OK(tr_ids_open(&o, &ids, &err), &err);
    return ids;
}

/* dynamic: a uid per worker, a gid per job shared by its workers, nothing
 * shared between two agents of one host, and a range that runs out says so. */
static void dynamic(void **state)
{
    uid_t u0, u1, v0;
    gid_t g0, g1, h0;
    int sw;
    tr_err err = {0};
    tr_ids *a, *b;

    (void)state;
    if (geteuid() != 0) {
        skip();
    }
    a = open_ids("3000000000-3000000004", NULL, 0);
    b = open_ids("3000000000-3000000004", NULL, 0);
    assert_int_equal(tr_ids_get_mode(a), TR_IDS_DYNAMIC);
    TR_ASSERT_OK(tr_ids_acquire(a, 1, "job1-g-0", 0, &sw, &u0, &g0, &err), &err);
    assert_int_equal(sw, 1);
    TR_ASSERT_OK(tr_ids_acquire(a, 1, "job1-g-1", 0, &sw, &u1, &g1, &err), &err);
    assert_int_equal(g0, g1);
    assert_true(u0 != u1 && u0 != g0 && u1 != g0);
    TR_ASSERT_OK(tr_ids_acquire(b, 1, "job1-g-2", 0, &sw, &v0, &h0, &err), &err);
    assert_true(v0 != u0 && v0 != u1 && v0 != g0 && h0 != u0 && h0 != u1 && h0 != g0 && h0 != v0);
    /* The same worker asked again gets what it holds. */
    TR_ASSERT_OK(tr_ids_acquire(a, 1, "job1-g-0", 0, &sw, &u1, &g1, &err), &err);
    assert_true(u1 == u0 && g1 == g0);
    /* Five ids, all held: the next worker of a new job finds none. */
    TR_ASSERT_STATUS(tr_ids_acquire(b, 2, "job2-g-0", 0, &sw, &v0, &h0, &err), TROUPE_RESOURCE_EXHAUSTED,
                     &err);
    TR_ASSERT_CONTAINS(err.msg, "no free id left in worker_uid_range 3000000000-3000000004");
    /* Job 1's workers on agent a end: their uids and the job's gid go back. */
    tr_ids_release(a, 1, "job1-g-0", 0);
    tr_ids_release(a, 1, "job1-g-1", 0);
    TR_ASSERT_OK(tr_ids_acquire(b, 2, "job2-g-0", 0, &sw, &v0, &h0, &err), &err);
    tr_ids_close(a);
    tr_ids_close(b);
}

static void modes(void **state)
{
    uid_t u;
    gid_t g;
    int sw;
    tr_err err = {0};
    tr_ids_opts root_user = {0, "root", NULL, dir}, bad_range = {0, NULL, "10-5", dir};
    tr_ids *ids = NULL;
    char text[256];

    (void)state;
    ids = open_ids(NULL, NULL, 1);
    assert_int_equal(tr_ids_get_mode(ids), TR_IDS_SHARED);
    TR_ASSERT_OK(tr_ids_acquire(ids, 1, "job1-g-0", 0, &sw, &u, &g, &err), &err);
    assert_int_equal(sw, 0);
    tr_ids_describe(ids, text, sizeof(text));
    TR_ASSERT_CONTAINS(text, "--shared-uid");
    tr_ids_close(ids);
    TR_ASSERT_STATUS(tr_ids_open(&bad_range, &ids, &err), TROUPE_INVALID_ARGUMENT, &err);
    TR_ASSERT_CONTAINS(err.msg, "worker_uid_range '10-5'");
    if (geteuid() != 0) {
        skip();
    }
    TR_ASSERT_STATUS(tr_ids_open(&root_user, &ids, &err), TROUPE_INVALID_ARGUMENT, &err);
    TR_ASSERT_CONTAINS(err.msg, "workers must not run as root");
    ids = open_ids(NULL, "nobody", 0);
    assert_int_equal(tr_ids_get_mode(ids), TR_IDS_USER);
    TR_ASSERT_OK(tr_ids_acquire(ids, 1, "job1-g-0", 0, &sw, &u, &g, &err), &err);
    assert_true(sw == 1 && u == 65534);
    tr_ids_close(ids);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(dynamic, setup),
        cmocka_unit_test_setup(modes, setup),
    };
    return TR_TEST_MAIN("unit.node.ids", tests, argc, argv);
}
