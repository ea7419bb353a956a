/* test_util.c - unit.common.util: tr_ct_equal, tr_strlcpy, tr_mkdir_p and the
 * clocks (common/util.c). */
#include "test_helpers.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

static void ct_equal(void **state)
{
    assert_true(tr_ct_equal("s3cret", "s3cret"));
    assert_true(tr_ct_equal("", ""));
    assert_false(tr_ct_equal("S3cret", "s3cret")); /* first byte differs */
    assert_false(tr_ct_equal("s3creT", "s3cret")); /* last byte differs */
    assert_false(tr_ct_equal("s3cre", "s3cret"));  /* prefix of the secret */
    assert_false(tr_ct_equal("s3crett", "s3cret")); /* secret is a prefix of it */
    assert_false(tr_ct_equal("", "s3cret"));
    assert_false(tr_ct_equal("s3cret", ""));
    /* A NUL inside `given` ends it: no match against a longer secret. */
    assert_false(tr_ct_equal("s3c\0ret", "s3cret"));
    /* Bytes that differ only above 0x7f, or only in one bit, still differ. */
    assert_false(tr_ct_equal("\x80", "\x81"));
    assert_false(tr_ct_equal("a", "c"));
}

/* The comparison reads `given` only within its own length: a short given
 * against a long secret stays inside given's buffer (ASan checks this). */
static void ct_equal_bounds(void **state)
{
    char *given = malloc(2);
    char secret[300];

    assert_non_null(given);
    given[0] = 'a';
    given[1] = '\0';
    memset(secret, 'a', sizeof(secret) - 1);
    secret[sizeof(secret) - 1] = '\0';
    assert_false(tr_ct_equal(given, secret));
    free(given);
}

static void strlcpy_cases(void **state)
{
    char buf[8];

    memset(buf, 'Z', sizeof(buf));
    assert_int_equal(tr_strlcpy(buf, "hello", sizeof(buf)), 5);
    assert_string_equal(buf, "hello");

    assert_int_equal(tr_strlcpy(buf, "0123456789", sizeof(buf)), 10); /* returns strlen(src) */
    assert_string_equal(buf, "0123456");                              /* size-1 bytes, terminated */

    assert_int_equal(tr_strlcpy(buf, "1234567", sizeof(buf)), 7); /* exact fit */
    assert_string_equal(buf, "1234567");

    memset(buf, 'Z', sizeof(buf));
    assert_int_equal(tr_strlcpy(buf, "abc", 0), 3); /* size 0 writes nothing */
    assert_int_equal(buf[0], 'Z');

    assert_int_equal(tr_strlcpy(buf, "abc", 1), 3);
    assert_string_equal(buf, "");
    assert_int_equal(tr_strlcpy(buf, "", sizeof(buf)), 0);
    assert_string_equal(buf, "");
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void rm_tree(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void mkdir_p_nested(void **state)
{
    char tmp[256], path[512];

    tr_test_tmpdir(tmp, sizeof(tmp), "util");
    snprintf(path, sizeof(path), "%s/a/b/c", tmp);
    assert_int_equal(tr_mkdir_p(path), 0);
    assert_true(is_dir(path));
    /* Again: everything exists, still success. */
    assert_int_equal(tr_mkdir_p(path), 0);
    /* A trailing slash and doubled slashes are fine. */
    snprintf(path, sizeof(path), "%s/d//e/", tmp);
    assert_int_equal(tr_mkdir_p(path), 0);
    snprintf(path, sizeof(path), "%s/d/e", tmp);
    assert_true(is_dir(path));
    rm_tree(tmp);
}

static void mkdir_p_through_file(void **state)
{
    char tmp[256], path[512];
    FILE *f;

    tr_test_tmpdir(tmp, sizeof(tmp), "util");
    snprintf(path, sizeof(path), "%s/file", tmp);
    f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/file/sub", tmp);
    errno = 0;
    assert_int_equal(tr_mkdir_p(path), -1);
    assert_int_equal(errno, ENOTDIR);
    rm_tree(tmp);
}

/* When the last component exists as a regular file, mkdir() fails with
 * EEXIST, which is not success: tr_mkdir_p returns -1 with ENOTDIR, so a
 * state_dir pointing at a file fails at once with a clear error. */
static void mkdir_p_existing_file_fails(void **state)
{
    char tmp[256], path[512];
    FILE *f;
    int rv;

    tr_test_tmpdir(tmp, sizeof(tmp), "util");
    snprintf(path, sizeof(path), "%s/file", tmp);
    f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    errno = 0;
    rv = tr_mkdir_p(path);
    rm_tree(tmp);
    if (rv == 0) {
        fail_msg("tr_mkdir_p(\"%s\") returned 0 but the path is a regular file, not a directory", path);
    }
    assert_int_equal(errno, ENOTDIR);
}

static void mkdir_p_too_long(void **state)
{
    char *path = malloc(5000);

    assert_non_null(path);
    memset(path, 'a', 4999);
    path[0] = '/';
    path[4999] = '\0';
    errno = 0;
    assert_int_equal(tr_mkdir_p(path), -1);
    assert_int_equal(errno, ENAMETOOLONG);
    free(path);
}

static void clocks(void **state)
{
    int64_t t0 = tr_now_ms();
    int64_t w0 = tr_wall_ms();

    tr_sleep_ms(30);
    assert_true(tr_now_ms() - t0 >= 30);
    assert_true(tr_now_ms() - t0 < 5000);
    assert_true(w0 > 1600000000000LL); /* unix ms, after 2020 */
    tr_sleep_ms(0);
}

/* A run of tr_run_bounded: fn waits until `go` (when hold) and frees it. */
typedef struct run {
    atomic_int go, ran;
} run;

static atomic_int freed;

static void run_fn(void *arg)
{
    run *r = arg;
    while (!atomic_load(&r->go)) {
        tr_sleep_ms(5);
    }
    atomic_store(&r->ran, 1);
    free(r); /* fn owns arg */
    atomic_fetch_add(&freed, 1);
}

/* A step that returns in time is waited for: it ran and freed before the
 * call returned. */
static void run_bounded_in_time(void **state)
{
    run *r = calloc(1, sizeof(*r));
    (void)state;
    atomic_store(&r->go, 1);
    atomic_store(&freed, 0);
    assert_int_equal(tr_run_bounded(run_fn, r, 5000), 1);
    assert_int_equal(atomic_load(&freed), 1);
}

/* A step that hangs does not hang its caller: back after the bound with 0,
 * and the step still finishes on its own thread when it can. */
static void run_bounded_hangs(void **state)
{
    run *r = calloc(1, sizeof(*r));
    int64_t t0 = tr_now_ms(), took;
    (void)state;
    atomic_store(&freed, 0);
    assert_int_equal(tr_run_bounded(run_fn, r, 100), 0);
    took = tr_now_ms() - t0;
    if (took < 100 || took > 3000) {
        fail_msg("tr_run_bounded returned after %lld ms for a bound of 100", (long long)took);
    }
    assert_int_equal(atomic_load(&freed), 0);
    atomic_store(&r->go, 1); /* r is still alive: the step owns it until it returns */
    for (int i = 0; i < 500 && atomic_load(&freed) == 0; i++) {
        tr_sleep_ms(10);
    }
    assert_int_equal(atomic_load(&freed), 1);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ct_equal),
        cmocka_unit_test(ct_equal_bounds),
        cmocka_unit_test(strlcpy_cases),
        cmocka_unit_test(mkdir_p_nested),
        cmocka_unit_test(mkdir_p_through_file),
        cmocka_unit_test(mkdir_p_existing_file_fails),
        cmocka_unit_test(mkdir_p_too_long),
        cmocka_unit_test(clocks),
        cmocka_unit_test(run_bounded_in_time),
        cmocka_unit_test(run_bounded_hangs),
    };
    return TR_TEST_MAIN("unit.common.util", tests, argc, argv);
}
