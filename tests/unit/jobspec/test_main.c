/* test_main.c - helpers of jobspec_test.h, and main: argv[1] picks one case
 * by name (ctest registers each as unit.common.jobspec.<name>). An unknown
 * name fails, so a typo in CMakeLists.txt cannot become a test that runs
 * nothing. */
#include "jobspec_test.h"

Troupe__V1__JobSpec *jt_parse(const char *yaml)
{
    Troupe__V1__JobSpec *spec = NULL;
    tr_err err = {0};

    JT_STATUS(tr_jobspec_parse(yaml, strlen(yaml), JT_NAME, JT_BASE, &spec, &err), TROUPE_OK, &err);
    assert_non_null(spec);
    return spec;
}

const char *jt_fails(const char *yaml, int code, ...)
{
    static tr_err err;
    Troupe__V1__JobSpec *spec = (Troupe__V1__JobSpec *)&err; /* must be reset to NULL */
    const char *needle;
    va_list ap;

    memset(&err, 0, sizeof(err));
    JT_STATUS(tr_jobspec_parse(yaml, strlen(yaml), JT_NAME, JT_BASE, &spec, &err), code, &err);
    assert_null(spec);
    va_start(ap, code);
    while ((needle = va_arg(ap, const char *)) != NULL) {
        JT_CONTAINS(err.msg, needle);
    }
    va_end(ap);
    return err.msg;
}

void jt_appendf(char **buf, size_t *len, const char *fmt, ...)
{
    va_list ap, ap2;
    int n;

    va_start(ap, fmt);
    va_copy(ap2, ap);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    *buf = realloc(*buf, *len + (size_t)n + 1);
    assert_non_null(*buf);
    vsnprintf(*buf + *len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    *len += (size_t)n;
}

char *jt_group(const char *workers, const char *resources, const char *command, const char *extra)
{
    char *buf = NULL;
    size_t len = 0;

    jt_appendf(&buf, &len,
               "name: demo\ncluster:\n  nodes: [8]\ngroups:\n  - name: policy\n    workers: %s\n"
               "    resources: %s\n    command: %s\n%s",
               workers, resources, command, extra);
    return buf;
}

const char *jt_fails_group(const char *workers, const char *resources, const char *command, const char *extra,
                           int code, const char *needle1, const char *needle2)
{
    char *yaml = jt_group(workers, resources, command, extra);
    const char *msg = jt_fails(yaml, code, needle1, needle2, (const char *)NULL);
    free(yaml);
    return msg;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest *sets[3];
    size_t ns[3], n = 0, total = 0;
    struct CMUnitTest *pick;
    int rv;

    sets[0] = jt_parse_tests(&ns[0]);
    sets[1] = jt_limit_tests(&ns[1]);
    sets[2] = jt_validate_tests(&ns[2]);
    pick = calloc(ns[0] + ns[1] + ns[2], sizeof(*pick));
    if (pick == NULL) {
        return 2;
    }
    for (size_t s = 0; s < 3; s++) {
        for (size_t i = 0; i < ns[s]; i++, total++) {
            if (argc < 2 || strcmp(argv[1], sets[s][i].name) == 0) {
                pick[n++] = sets[s][i];
            }
        }
    }
    if (n == 0) {
        fprintf(stderr, "no test named '%s' among %zu\n", argc > 1 ? argv[1] : "", total);
        free(pick);
        return 2;
    }
    rv = _cmocka_run_group_tests("jobspec", pick, n, NULL, NULL);
    free(pick);
    return rv;
}
