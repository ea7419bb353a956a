/* test_limits.c - the value rules (command strings, memory units, workdir,
 * step ranges), loading files, and the caps that keep absurd or hostile
 * input (huge lists, alias bombs) from costing more than a clear error. */
#include <errno.h>
#include <unistd.h>

#include "jobspec_test.h"

static void command_string(void **state)
{
    char *yaml = jt_group("1", "{gpu: 1}", "\"  python3\\t-m  train\\n --lr=1e-4 \"", "");
    Troupe__V1__JobSpec *s = jt_parse(yaml);
    const Troupe__V1__GroupSpec *g = s->groups[0];

    assert_int_equal(g->n_command, 4);
    assert_string_equal(g->command[0], "python3");
    assert_string_equal(g->command[1], "-m");
    assert_string_equal(g->command[2], "train");
    assert_string_equal(g->command[3], "--lr=1e-4");
    tr_jobspec_free(s);
    free(yaml);
    /* no shell quoting: a quote or backslash is refused, not half-honoured */
    jt_fails_group("1", "{gpu: 1}", "'python -c \"print(1)\"'", "", TROUPE_INVALID_ARGUMENT,
                   "job.yaml:8:14: groups[0].command: ", "write the command as a list");
    jt_fails_group("1", "{gpu: 1}", "'a\\b'", "", TROUPE_INVALID_ARGUMENT, "8:14", "quote or backslash");
    jt_fails_group("1", "{gpu: 1}", "\"   \"", "", TROUPE_INVALID_ARGUMENT,
                   "8:14: groups[0].command: command is empty", NULL);
    jt_fails_group("1", "{gpu: 1}", "[]", "", TROUPE_INVALID_ARGUMENT,
                   "8:14: groups[0].command: expected 1 to 256 arguments, got 0", NULL);
    jt_fails_group("1", "{gpu: 1}", "[\"\", x]", "", TROUPE_INVALID_ARGUMENT,
                   "8:15: groups[0].command[0]: the program name is empty", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run, [x]]", "", TROUPE_INVALID_ARGUMENT,
                   "8:20: groups[0].command[1]: expected a string, got a list", NULL);
    jt_fails_group("1", "{gpu: 1}", "{a: b}", "", TROUPE_INVALID_ARGUMENT,
                   "8:14: groups[0].command: expected a list of arguments or a command string", NULL);
    /* in the list form an empty later argument is kept: it can be meaningful */
    yaml = jt_group("1", "{gpu: 1}", "[run, \"\", 'a b']", "");
    s = jt_parse(yaml);
    assert_int_equal(s->groups[0]->n_command, 3);
    assert_string_equal(s->groups[0]->command[1], "");
    assert_string_equal(s->groups[0]->command[2], "a b");
    tr_jobspec_free(s);
    free(yaml);
}

static void memory_units(void **state)
{
    static const struct {
        const char *in;
        uint64_t want;
    } ok[] = {
        {"1024", 1024ULL},
        {"64GB", 64000000000ULL},
        {"64gb", 64000000000ULL},
        {"64 GB", 64000000000ULL},
        {"64GiB", 64ULL << 30},
        {"1.5GiB", 3ULL << 29},
        {"512MB", 512000000ULL},
        {"512MiB", 512ULL << 20},
        {"2KB", 2000ULL},
        {"2KiB", 2048ULL},
        {"2TB", 2000000000000ULL},
        {"1TiB", 1ULL << 40},
        {"7B", 7ULL},
        {"0.5KiB", 512ULL},
    };
    static const char *const bad[] = {"64GX", "1.5", "0",   "0GB",  "-1GB",          "GB",
                                      "",     "64 ", "1e9", "0x10", "99999999999TB", "18446744073709551616",
                                      "1.GB", "64G"};
    tr_err err = {0};
    uint64_t v;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        JT_STATUS(tr_js_memory_parse(ok[i].in, &v, &err), TROUPE_OK, &err);
        if (v != ok[i].want) {
            fail_msg("'%s': got %llu, want %llu", ok[i].in, (unsigned long long)v,
                     (unsigned long long)ok[i].want);
        }
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        JT_STATUS(tr_js_memory_parse(bad[i], &v, &err), TROUPE_INVALID_ARGUMENT, &err);
        JT_CONTAINS(err.msg, "memory size");
        assert_true(v == 0);
    }
    /* in YAML: a plain integer is bytes; errors name the key and position */
    char *yaml = jt_group("1", "{gpu: 1, memory: 68719476736}", "[run]", "");
    Troupe__V1__JobSpec *s = jt_parse(yaml);
    assert_true(s->groups[0]->memory_bytes == 68719476736ULL);
    tr_jobspec_free(s);
    free(yaml);
    jt_fails_group("1", "{gpu: 1, memory: 64GX}", "[run]", "", TROUPE_INVALID_ARGUMENT,
                   "job.yaml:7:33: groups[0].resources.memory: cannot read memory size '64GX'", "KiB");
}

static void workdir_resolution(void **state)
{
    static const char *const cases[][3] = {
        /* base, workdir, want */
        {"/srv/jobs", "run", "/srv/jobs/run"},   {"/srv/jobs", "../data/./x/", "/srv/data/x"},
        {"/srv/jobs", "/abs//a/../b", "/abs/b"}, {"/srv/jobs", ".", "/srv/jobs"},
        {"/srv/jobs/", NULL, "/srv/jobs"},       {"/", "../..", "/"},
    };
    char cwd[4096], want[4200];
    char *out = NULL;
    tr_err err = {0};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        JT_STATUS(tr_js_resolve_dir(cases[i][0], cases[i][1], &out, &err), TROUPE_OK, &err);
        assert_string_equal(out, cases[i][2]);
        free(out);
    }
    /* no base: the cwd; a relative base: against the cwd */
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    JT_STATUS(tr_js_resolve_dir(NULL, "x", &out, &err), TROUPE_OK, &err);
    snprintf(want, sizeof(want), "%s/x", strcmp(cwd, "/") == 0 ? "" : cwd);
    assert_string_equal(out, want);
    free(out);
    JT_STATUS(tr_js_resolve_dir("sub", "x", &out, &err), TROUPE_OK, &err);
    snprintf(want, sizeof(want), "%s/sub/x", strcmp(cwd, "/") == 0 ? "" : cwd);
    assert_string_equal(out, want);
    free(out);
    /* through the parser: relative workdir against base_dir, and NULL base */
    char *yaml = jt_group("1", "{gpu: 1}", "[run]", "workdir: out/../logs\n");
    Troupe__V1__JobSpec *s = jt_parse(yaml);
    assert_string_equal(s->workdir, "/srv/jobs/logs");
    tr_jobspec_free(s);
    JT_STATUS(tr_jobspec_parse(yaml, strlen(yaml), NULL, NULL, &s, &err), TROUPE_OK, &err);
    snprintf(want, sizeof(want), "%s/logs", strcmp(cwd, "/") == 0 ? "" : cwd);
    assert_string_equal(s->workdir, want);
    assert_string_equal(s->source, ""); /* no name given, none kept */
    tr_jobspec_free(s);
    free(yaml);
}

static void range_parse(void **state)
{
    static const char *const bad[][2] = {
        {"0:10", "start must be >= 1 (steps are 1-based)"},
        {"3:3", "start must be less than stop"},
        {"5:2", "start must be less than stop"},
        {"a:b", "whole numbers"},
        {"2", "has no ':'"},
        {"", "empty step range"},
        {"2:", "whole numbers"},
        {":3", "whole numbers"},
        {" 2:3", "whole numbers"},
        {"2:3:4", "whole numbers"},
        {"1:2147483648", "whole numbers"},
    };
    tr_err err = {0};
    int a = -1, b = -1;

    JT_STATUS(tr_profile_range_parse("2:3", &a, &b, &err), TROUPE_OK, &err);
    assert_int_equal(a, 2);
    assert_int_equal(b, 3);
    JT_STATUS(tr_profile_range_parse("1:2147483647", &a, &b, &err), TROUPE_OK, &err);
    assert_int_equal(b, 2147483647);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        JT_STATUS(tr_profile_range_parse(bad[i][0], &a, &b, &err), TROUPE_INVALID_ARGUMENT, &err);
        JT_CONTAINS(err.msg, bad[i][1]);
        assert_int_equal(a, 0); /* out-params are zeroed on failure */
        assert_int_equal(b, 0);
    }
    JT_STATUS(tr_profile_range_parse("3:3", &a, &b, &err), TROUPE_INVALID_ARGUMENT, &err);
    JT_CONTAINS(err.msg, "\"3:4\" profiles step 3 only");
    JT_STATUS(tr_profile_range_parse(NULL, &a, &b, &err), TROUPE_INVALID_ARGUMENT, &err);
    JT_STATUS(tr_js_globs_check("*policy*, vllm_?_worker,[!x]y,[]]", &err), TROUPE_OK, &err);
    JT_STATUS(tr_js_globs_check("a,[]", &err), TROUPE_INVALID_ARGUMENT, &err);
    JT_CONTAINS(err.msg, "'[]' has an unclosed '['");
}

/* write_file writes text to dir/name and returns the path (heap). */
static char *write_file(const char *dir, const char *name, const char *text)
{
    char *path = NULL;
    size_t len = 0;
    FILE *f;

    jt_appendf(&path, &len, "%s/%s", dir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    return path;
}

static void load_file(void **state)
{
    char tmpl[] = "/tmp/jobspec-test-XXXXXX";
    char *dir = mkdtemp(tmpl), *yaml, *path, *missing = NULL, *want = NULL;
    size_t len = 0, wlen = 0;
    Troupe__V1__JobSpec *s = NULL;
    tr_err err = {0};

    assert_non_null(dir);
    yaml = jt_group("1", "{gpu: 1}", "[run]", "workdir: out\n");
    path = write_file(dir, "job.yaml", yaml);
    JT_STATUS(tr_jobspec_load(path, &s, &err), TROUPE_OK, &err);
    jt_appendf(&want, &wlen, "%s/out", dir);
    assert_string_equal(s->workdir, want);
    assert_string_equal(s->source, path);
    tr_jobspec_free(s);
    /* errors name the file as given */
    free(yaml);
    yaml = jt_group("-2", "{gpu: 1}", "[run]", "");
    unlink(path);
    free(path);
    path = write_file(dir, "bad.yaml", yaml);
    JT_STATUS(tr_jobspec_load(path, &s, &err), TROUPE_INVALID_ARGUMENT, &err);
    assert_null(s);
    JT_CONTAINS(err.msg, "bad.yaml:6:14: groups[0].workers");
    jt_appendf(&missing, &len, "%s/nope.yaml", dir);
    JT_STATUS(tr_jobspec_load(missing, &s, &err), TROUPE_NOT_FOUND, &err);
    JT_CONTAINS(err.msg, "nope.yaml: cannot open: No such file or directory");
    JT_STATUS(tr_jobspec_load(dir, &s, &err), TROUPE_INVALID_ARGUMENT, &err);
    JT_CONTAINS(err.msg, "cannot read");
    unlink(path);
    rmdir(dir);
    free(path);
    free(yaml);
    free(missing);
    free(want);
}

/* ---- caps ------------------------------------------------------------------ */

static const char head[] = "name: demo\ncluster: {nodes: [8]}\ngroups:\n";

static void too_many_groups(void **state)
{
    char *yaml = NULL;
    size_t len = 0;

    jt_appendf(&yaml, &len, "%s", head);
    for (int i = 0; i < 257; i++) {
        jt_appendf(&yaml, &len, "  - {name: g%d, workers: 1, resources: {gpu: 1}, command: [run]}\n", i);
    }
    jt_fails(yaml, TROUPE_INVALID_ARGUMENT, "job.yaml:4:3: groups: expected 1 to 256 groups, got 257",
             (const char *)NULL);
    free(yaml);
}

static void too_many_args(void **state)
{
    char *list = NULL, *words = NULL;
    size_t ll = 0, wl = 0;

    jt_appendf(&list, &ll, "[run");
    jt_appendf(&words, &wl, "\"run");
    for (int i = 0; i < 256; i++) {
        jt_appendf(&list, &ll, ", a%d", i);
        jt_appendf(&words, &wl, " a%d", i);
    }
    jt_appendf(&list, &ll, "]");
    jt_appendf(&words, &wl, "\"");
    jt_fails_group("1", "{gpu: 1}", list, "", TROUPE_INVALID_ARGUMENT, "8:14",
                   "groups[0].command: expected 1 to 256 arguments, got 257");
    jt_fails_group("1", "{gpu: 1}", words, "", TROUPE_INVALID_ARGUMENT, "8:14",
                   "command has 257 arguments, at most 256");
    free(list);
    free(words);
}

static void long_string(void **state)
{
    char *cmd = NULL;
    size_t len = 0;

    jt_appendf(&cmd, &len, "[run, %4097s]", "x");
    for (size_t i = 0; i < len; i++) {
        cmd[i] = cmd[i] == ' ' && i >= 6 ? 'y' : cmd[i];
    }
    jt_fails_group("1", "{gpu: 1}", cmd, "", TROUPE_INVALID_ARGUMENT, "8:20",
                   "groups[0].command[1]: longer than 4096 bytes");
    free(cmd);
}

/* Aliases cost the text once and the walk many times: an env mapping named
 * by two groups counts twice, and one big command list named by 256 groups
 * would copy hundreds of MiB without the byte budget. */
static void alias_bombs(void **state)
{
    char *yaml = NULL, *big = NULL;
    size_t len = 0, blen = 0;

    jt_appendf(&yaml, &len,
               "%s  - name: a\n    workers: 1\n    resources: {gpu: 1}\n    command: [run]\n"
               "    env: &e {",
               head);
    for (int i = 0; i < 600; i++) {
        jt_appendf(&yaml, &len, "%sV%d: x", i ? ", " : "", i);
    }
    jt_appendf(&yaml, &len, "}\n  - {name: b, workers: 1, resources: {gpu: 1}, command: [run], env: *e}\n");
    /* libyaml resolves an alias to its anchor's node, so the position is the
     * anchor's (line 8); the key path names the group that overflowed */
    jt_fails(yaml, TROUPE_INVALID_ARGUMENT, "job.yaml:8:10: groups[1].env: too many environment variables",
             "at most 1024", (const char *)NULL);
    free(yaml);
    yaml = NULL;
    len = 0;
    jt_appendf(&big, &blen, "%4000s", "");
    memset(big, 'z', blen);
    jt_appendf(&yaml, &len, "%s  - name: g0\n    workers: 1\n    resources: {gpu: 1}\n    command: &c [run",
               head);
    for (int i = 0; i < 200; i++) {
        jt_appendf(&yaml, &len, ", %s", big);
    }
    jt_appendf(&yaml, &len, "]\n");
    for (int i = 1; i < 256; i++) {
        jt_appendf(&yaml, &len, "  - {name: g%d, workers: 1, resources: {gpu: 1}, command: *c}\n", i);
    }
    assert_true(len < TR_JS_MAX_TEXT);
    jt_fails(yaml, TROUPE_INVALID_ARGUMENT, "more than 4 MiB of text once aliases are expanded",
             (const char *)NULL);
    free(yaml);
    free(big);
    /* an alias to its own anchor makes a cycle; the schema walk stops at once */
    jt_fails("name: d\ncluster: {nodes: [8]}\ngroups: &g [*g]\n", TROUPE_INVALID_ARGUMENT,
             "groups[0]: expected a mapping (a group), got a list", (const char *)NULL);
}

static void huge_text(void **state)
{
    size_t n = TR_JS_MAX_TEXT + 1;
    char *text = malloc(n);
    Troupe__V1__JobSpec *s = NULL;
    tr_err err = {0};
    char *yaml = NULL, *nodes = NULL;
    size_t len = 0, nl = 0;

    assert_non_null(text);
    memset(text, '#', n);
    JT_STATUS(tr_jobspec_parse(text, n, JT_NAME, JT_BASE, &s, &err), TROUPE_INVALID_ARGUMENT, &err);
    JT_CONTAINS(err.msg, "job.yaml: the job spec is 1048577 bytes, more than the 1 MiB allowed");
    free(text);
    for (int i = 0; i <= TR_JS_MAX_NODES; i++) {
        jt_appendf(&nodes, &nl, "%s8", i ? "," : "");
    }
    jt_appendf(&yaml, &len, "name: d\ncluster: {nodes: [%s]}\n", nodes);
    jt_fails(yaml, TROUPE_INVALID_ARGUMENT, "2:18: cluster.nodes: expected 1 to 4096 nodes, got 4097",
             (const char *)NULL);
    free(yaml);
    free(nodes);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(command_string), cmocka_unit_test(memory_units), cmocka_unit_test(workdir_resolution),
    cmocka_unit_test(range_parse),    cmocka_unit_test(load_file),    cmocka_unit_test(too_many_groups),
    cmocka_unit_test(too_many_args),  cmocka_unit_test(long_string),  cmocka_unit_test(alias_bombs),
    cmocka_unit_test(huge_text),
};

const struct CMUnitTest *jt_limit_tests(size_t *n)
{
    *n = sizeof(tests) / sizeof(tests[0]);
    return tests;
}
