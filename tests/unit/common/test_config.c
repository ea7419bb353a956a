/* test_config.c - unit.common.config: the table-driven loader (common/config.c):
 * defaults, YAML files with nested and dotted keys, environment, flags,
 * precedence, bounds, bools, unknown keys and malformed YAML (file:line:col),
 * --check-config printing with secrets redacted. */
#include "test_helpers.h"

#include <stddef.h>
#include <unistd.h>

#include "config.h"

typedef struct cfg {
    char *listen;
    int64_t heartbeat_ms;
    double ratio;
    int verbose;
    char *token;
    int64_t model_layers;
    char *model_name;
    char *state_dir;
} cfg;

#define F(x) offsetof(cfg, x)
static const tr_cfg_desc table[] = {
    {"listen", TR_CFG_STRING, F(listen), "tcp://127.0.0.1:7070", TR_CFG_UNBOUNDED, 0, "address to listen on"},
    {"heartbeat_ms", TR_CFG_INT, F(heartbeat_ms), "1000", 10, 60000, 0, "heartbeat period"},
    {"ratio", TR_CFG_DOUBLE, F(ratio), "0.5", 0, 1, 0, "a fraction"},
    {"verbose", TR_CFG_BOOL, F(verbose), "false", TR_CFG_UNBOUNDED, 0, "chatty logs"},
    {"token", TR_CFG_STRING, F(token), NULL, TR_CFG_UNBOUNDED, TR_CFG_SENSITIVE, "auth token"},
    {"model.layers", TR_CFG_INT, F(model_layers), "12", 1, 96, 0, "transformer layers"},
    {"model.name", TR_CFG_STRING, F(model_name), "gpt2", TR_CFG_UNBOUNDED, 0, "model name"},
    {"state_dir", TR_CFG_STRING, F(state_dir), NULL, TR_CFG_UNBOUNDED, TR_CFG_REQUIRED, "where state lives"},
    {0},
};

static const char *const env_vars[] = {"TTEST_LISTEN",  "TTEST_HEARTBEAT_MS", "TTEST_RATIO",     "TTEST_VERBOSE",
                                       "TTEST_TOKEN",   "TTEST_MODEL_LAYERS", "TTEST_MODEL_NAME", "TTEST_STATE_DIR"};

static int setup(void **state)
{
    cfg *c = calloc(1, sizeof(*c));
    tr_err err = {0};

    for (size_t i = 0; i < sizeof(env_vars) / sizeof(env_vars[0]); i++) {
        unsetenv(env_vars[i]);
    }
    if (c == NULL || tr_cfg_defaults(table, c, &err) != TROUPE_OK) {
        fprintf(stderr, "defaults failed: %s\n", err.msg);
        return -1;
    }
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    cfg *c = *state;
    tr_cfg_free(table, c);
    assert_null(c->listen); /* tr_cfg_free resets the pointers */
    free(c);
    return 0;
}

/* load loads YAML text; returns the status and leaves the message in err. */
static int load(cfg *c, const char *text, tr_err *err)
{
    return tr_cfg_load_string(table, c, "t.yaml", text, strlen(text), err);
}

/* write_file writes text into a fresh temp file; path gets its name. */
static void write_file(char *path, size_t size, const char *text)
{
    char dir[256];
    FILE *f;

    tr_test_tmpdir(dir, sizeof(dir), "cfg");
    snprintf(path, size, "%s/head.yaml", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    fclose(f);
}

static void remove_file(const char *path)
{
    char dir[512];
    unlink(path);
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = '\0';
    rmdir(dir);
}

static void defaults(void **state)
{
    cfg *c = *state;

    assert_string_equal(c->listen, "tcp://127.0.0.1:7070");
    assert_int_equal(c->heartbeat_ms, 1000);
    assert_true(c->ratio == 0.5);
    assert_int_equal(c->verbose, 0);
    assert_null(c->token);
    assert_int_equal(c->model_layers, 12);
    assert_string_equal(c->model_name, "gpt2");
    assert_null(c->state_dir);
}

static void bad_default(void **state)
{
    static const tr_cfg_desc bad[] = {
        {"port", TR_CFG_INT, 0, "99999", 1, 65535, 0, "port"},
        {0},
    };
    int64_t port = 0;
    tr_err err = {0};

    TR_ASSERT_FAILS(tr_cfg_defaults(bad, &port, &err), TROUPE_OUT_OF_RANGE, &err,
                    "default: port: 99999 is out of range [1, 65535]");
}

static void file_nested_and_dotted(void **state)
{
    cfg *c = *state;
    char path[512];
    tr_err err = {0};

    write_file(path, sizeof(path),
               "# head config\n"
               "listen: ipc:///tmp/x.sock\n"
               "heartbeat_ms: 0x20\n"
               "ratio: 0.25\n"
               "verbose: yes\n"
               "model:\n"
               "  layers: 24\n"
               "model.name: gpt2-medium\n");
    TR_ASSERT_OK(tr_cfg_load_file(table, c, path, &err), &err);
    remove_file(path);
    assert_string_equal(c->listen, "ipc:///tmp/x.sock");
    assert_int_equal(c->heartbeat_ms, 32); /* integers take C prefixes */
    assert_true(c->ratio == 0.25);
    assert_int_equal(c->verbose, 1);
    assert_int_equal(c->model_layers, 24);
    assert_string_equal(c->model_name, "gpt2-medium");
}

static void file_missing(void **state)
{
    cfg *c = *state;
    tr_err err = {0};

    TR_ASSERT_FAILS(tr_cfg_load_file(table, c, "/nonexistent/troupe/head.yaml", &err), TROUPE_NOT_FOUND, &err,
                    "/nonexistent/troupe/head.yaml: cannot open: No such file or directory");
}

static void empty_file(void **state)
{
    cfg *c = *state;
    tr_err err = {0};

    TR_ASSERT_OK(load(c, "", &err), &err);
    TR_ASSERT_OK(load(c, "# only a comment\n", &err), &err);
    TR_ASSERT_OK(load(c, "---\n", &err), &err);
    assert_int_equal(c->heartbeat_ms, 1000); /* nothing changed */
}

static void unknown_key(void **state)
{
    cfg *c = *state;
    char path[512];
    tr_err err = {0};

    /* The nested key sits on line 3, column 5; the message names the file. */
    write_file(path, sizeof(path), "heartbeat_ms: 500\nmodel:\n    lisen: 3\n");
    TR_ASSERT_FAILS(tr_cfg_load_file(table, c, path, &err), TROUPE_INVALID_ARGUMENT, &err,
                    ":3:5: unknown key 'model.lisen'");
    TR_ASSERT_CONTAINS(err.msg, path);
    remove_file(path);

    TR_ASSERT_FAILS(load(c, "verbose: true\nlisen: tcp://x:1\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "t.yaml:2:1: unknown key 'lisen'");
    TR_ASSERT_FAILS(load(c, "{verbose: true, lisen: 1}\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "t.yaml:1:17: unknown key 'lisen'");
}

static void malformed_yaml(void **state)
{
    cfg *c = *state;
    char path[512];
    char want[600];
    tr_err err = {0};

    /* An unclosed flow sequence: libyaml notices on line 3. */
    write_file(path, sizeof(path), "verbose: true\nlisten: [a, b\nheartbeat_ms: 3\n");
    TR_ASSERT_STATUS(tr_cfg_load_file(table, c, path, &err), TROUPE_INVALID_ARGUMENT, &err);
    snprintf(want, sizeof(want), "%s:3:13: ", path);
    TR_ASSERT_CONTAINS(err.msg, want);
    remove_file(path);

    /* A tab in indentation, and a bad mapping value. */
    TR_ASSERT_FAILS(load(c, "model:\n\tlayers: 3\n", &err), TROUPE_INVALID_ARGUMENT, &err, "t.yaml:2:1: ");
    TR_ASSERT_FAILS(load(c, "a: b: c\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "t.yaml:1:5: mapping values are not allowed in this context");
}

static void wrong_shapes(void **state)
{
    cfg *c = *state;
    tr_err err = {0};

    TR_ASSERT_FAILS(load(c, "- a\n- b\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "t.yaml:1:1: expected a mapping of settings");
    TR_ASSERT_FAILS(load(c, "just a scalar\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "t.yaml:1:1: expected a mapping of settings");
    TR_ASSERT_FAILS(load(c, "listen:\n  host: x\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "t.yaml:2:3: listen: expected a single value, not a mapping");
    TR_ASSERT_FAILS(load(c, "listen: [a, b]\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "t.yaml:1:9: listen: expected a single value, not a list");
    TR_ASSERT_FAILS(load(c, "model: 3\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "t.yaml:1:8: model: expected a mapping of settings");
    TR_ASSERT_FAILS(load(c, "? [a]\n: 1\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "t.yaml:1:3: keys must be plain names");
}

static void bounds(void **state)
{
    cfg *c = *state;
    tr_err err = {0};

    TR_ASSERT_FAILS(load(c, "heartbeat_ms: 5\n", &err), TROUPE_OUT_OF_RANGE, &err,
                    "t.yaml:1:15: heartbeat_ms: 5 is out of range [10, 60000]");
    TR_ASSERT_FAILS(load(c, "ratio: 1.5\n", &err), TROUPE_OUT_OF_RANGE, &err,
                    "t.yaml:1:8: ratio: 1.5 is out of range [0, 1]");
    TR_ASSERT_FAILS(load(c, "model:\n  layers: 0\n", &err), TROUPE_OUT_OF_RANGE, &err,
                    "t.yaml:2:11: model.layers: 0 is out of range [1, 96]");
    assert_int_equal(c->heartbeat_ms, 1000); /* refused values are not stored */
    assert_int_equal(c->model_layers, 12);
    /* The bounds are inclusive. */
    TR_ASSERT_OK(load(c, "heartbeat_ms: 10\nratio: 1\nmodel.layers: 96\n", &err), &err);
    assert_int_equal(c->heartbeat_ms, 10);
    assert_true(c->ratio == 1.0);
    assert_int_equal(c->model_layers, 96);
}

static void numbers(void **state)
{
    cfg *c = *state;
    tr_err err = {0};

    TR_ASSERT_FAILS(load(c, "heartbeat_ms: 12abc\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "heartbeat_ms: expected an integer, got '12abc'");
    TR_ASSERT_FAILS(load(c, "heartbeat_ms: 99999999999999999999999\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "expected an integer");
    TR_ASSERT_FAILS(load(c, "heartbeat_ms:\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "heartbeat_ms: expected an integer, got ''");
    TR_ASSERT_FAILS(load(c, "heartbeat_ms: 1.5\n", &err), TROUPE_INVALID_ARGUMENT, &err, "got '1.5'");
    TR_ASSERT_FAILS(load(c, "ratio: nan\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "ratio: expected a number, got 'nan'");
    TR_ASSERT_FAILS(load(c, "ratio: 1e999\n", &err), TROUPE_INVALID_ARGUMENT, &err, "expected a number");
    TR_ASSERT_FAILS(load(c, "ratio: half\n", &err), TROUPE_INVALID_ARGUMENT, &err, "got 'half'");
    TR_ASSERT_OK(load(c, "ratio: 2.5e-1\n", &err), &err);
    assert_true(c->ratio == 0.25);
}

static void bools(void **state)
{
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "on", "ON", "1"};
    static const char *const no[] = {"false", "False", "no", "NO", "off", "0"};
    cfg *c = *state;
    tr_err err = {0};
    char text[64];

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        c->verbose = 0;
        snprintf(text, sizeof(text), "verbose: %s\n", yes[i]);
        TR_ASSERT_OK(load(c, text, &err), &err);
        assert_int_equal(c->verbose, 1);
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        c->verbose = 1;
        snprintf(text, sizeof(text), "verbose: %s\n", no[i]);
        TR_ASSERT_OK(load(c, text, &err), &err);
        assert_int_equal(c->verbose, 0);
    }
    TR_ASSERT_FAILS(load(c, "verbose: maybe\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "t.yaml:1:10: verbose: expected true or false, got 'maybe'");
    TR_ASSERT_FAILS(load(c, "verbose: 2\n", &err), TROUPE_INVALID_ARGUMENT, &err, "got '2'");
}

static void strings_replace(void **state)
{
    cfg *c = *state;
    tr_err err = {0};

    /* Each load replaces (and frees) the previous string; ASan checks the frees. */
    TR_ASSERT_OK(load(c, "listen: a\n", &err), &err);
    TR_ASSERT_OK(load(c, "listen: 'b c'\n", &err), &err);
    assert_string_equal(c->listen, "b c");
    TR_ASSERT_OK(load(c, "listen: \"quoted: yes\"\n", &err), &err);
    assert_string_equal(c->listen, "quoted: yes");
    TR_ASSERT_OK(load(c, "listen: 42\n", &err), &err); /* a number is fine as a string */
    assert_string_equal(c->listen, "42");
}

static void env(void **state)
{
    cfg *c = *state;
    tr_err err = {0};

    setenv("TTEST_HEARTBEAT_MS", "250", 1);
    setenv("TTEST_MODEL_LAYERS", "6", 1);
    setenv("TTEST_VERBOSE", "on", 1);
    setenv("TTEST_TOKEN", "from-env", 1);
    TR_ASSERT_OK(tr_cfg_load_env(table, c, "TTEST", &err), &err);
    assert_int_equal(c->heartbeat_ms, 250);
    assert_int_equal(c->model_layers, 6);
    assert_int_equal(c->verbose, 1);
    assert_string_equal(c->token, "from-env");
    assert_string_equal(c->listen, "tcp://127.0.0.1:7070"); /* unset variables leave values */

    setenv("TTEST_RATIO", "abc", 1);
    TR_ASSERT_FAILS(tr_cfg_load_env(table, c, "TTEST", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "env TTEST_RATIO: ratio: expected a number, got 'abc'");
    setenv("TTEST_RATIO", "0.75", 1);
    setenv("TTEST_MODEL_LAYERS", "1000", 1);
    TR_ASSERT_FAILS(tr_cfg_load_env(table, c, "TTEST", &err), TROUPE_OUT_OF_RANGE, &err,
                    "env TTEST_MODEL_LAYERS: model.layers: 1000 is out of range [1, 96]");
    for (size_t i = 0; i < sizeof(env_vars) / sizeof(env_vars[0]); i++) {
        unsetenv(env_vars[i]);
    }
}

static void flags(void **state)
{
    cfg *c = *state;
    tr_err err = {0};
    tr_cfg_args meta;
    char *argv[] = {"troupe-head", "--config", "/etc/troupe/head.yaml", "--check-config", "--heartbeat-ms",
                    "300", "--model.layers=7", "--verbose", "true", "--listen=ipc:///x=y", NULL};
    int argc = (int)(sizeof(argv) / sizeof(argv[0])) - 1;

    TR_ASSERT_OK(tr_cfg_scan_args(table, argc, argv, &meta, &err), &err);
    assert_string_equal(meta.config_path, "/etc/troupe/head.yaml");
    assert_int_equal(meta.check_config, 1);
    assert_int_equal(meta.help, 0);
    assert_int_equal(meta.version, 0);
    assert_int_equal(c->heartbeat_ms, 1000); /* the scan pass applies nothing */

    TR_ASSERT_OK(tr_cfg_apply_args(table, c, argc, argv, &err), &err);
    assert_int_equal(c->heartbeat_ms, 300);
    assert_int_equal(c->model_layers, 7);
    assert_int_equal(c->verbose, 1);
    assert_string_equal(c->listen, "ipc:///x=y"); /* only the first '=' splits */
}

/* flags_bare_bool: a boolean flag without a value means true, whether last
 * or followed by another flag; a bool word after it is its value. */
static void flags_bare_bool(void **state)
{
    cfg *c = *state;
    tr_err err = {0};
    char *last[] = {"p", "--heartbeat-ms", "300", "--verbose", NULL};
    char *middle[] = {"p", "--verbose", "--heartbeat-ms", "400", NULL};
    char *valued[] = {"p", "--verbose", "off", "--heartbeat-ms", "500", NULL};

    TR_ASSERT_OK(tr_cfg_apply_args(table, c, 4, last, &err), &err);
    assert_int_equal(c->verbose, 1);
    assert_int_equal(c->heartbeat_ms, 300);
    c->verbose = 0;
    TR_ASSERT_OK(tr_cfg_apply_args(table, c, 4, middle, &err), &err);
    assert_int_equal(c->verbose, 1);
    assert_int_equal(c->heartbeat_ms, 400);
    TR_ASSERT_OK(tr_cfg_apply_args(table, c, 5, valued, &err), &err);
    assert_int_equal(c->verbose, 0);
    assert_int_equal(c->heartbeat_ms, 500);
}

static void flags_meta(void **state)
{
    tr_err err = {0};
    tr_cfg_args meta;
    char *argv[] = {"troupe-head", "-h", "--version", "--config=/a.yaml", NULL};

    memset(&meta, 0xff, sizeof(meta));
    TR_ASSERT_OK(tr_cfg_scan_args(table, 4, argv, &meta, &err), &err);
    assert_int_equal(meta.help, 1);
    assert_int_equal(meta.version, 1);
    assert_int_equal(meta.check_config, 0);
    assert_string_equal(meta.config_path, "/a.yaml");
}

static void flags_errors(void **state)
{
    cfg *c = *state;
    tr_err err = {0};
    tr_cfg_args meta;
    char *unknown[] = {"p", "--lisen", "x", NULL};
    char *unknown_eq[] = {"p", "--lisen=x", NULL};
    char *no_value[] = {"p", "--listen", NULL};
    char *positional[] = {"p", "stray", NULL};
    char *dashes[] = {"p", "--", NULL};
    char *range[] = {"p", "--heartbeat-ms=1", NULL};
    char *notint[] = {"p", "--heartbeat-ms", "soon", NULL};

    TR_ASSERT_FAILS(tr_cfg_scan_args(table, 3, unknown, &meta, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "unknown option '--lisen' (see --help)");
    TR_ASSERT_FAILS(tr_cfg_scan_args(table, 2, unknown_eq, &meta, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "unknown option '--lisen' (see --help)");
    TR_ASSERT_FAILS(tr_cfg_scan_args(table, 2, no_value, &meta, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "--listen needs a value");
    TR_ASSERT_FAILS(tr_cfg_scan_args(table, 2, positional, &meta, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "unexpected argument 'stray'");
    TR_ASSERT_FAILS(tr_cfg_scan_args(table, 2, dashes, &meta, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "unexpected argument '--'");
    /* Values are checked when applied, with the flag as the origin. */
    TR_ASSERT_OK(tr_cfg_scan_args(table, 2, range, &meta, &err), &err);
    TR_ASSERT_FAILS(tr_cfg_apply_args(table, c, 2, range, &err), TROUPE_OUT_OF_RANGE, &err,
                    "--heartbeat-ms: heartbeat_ms: 1 is out of range [10, 60000]");
    TR_ASSERT_FAILS(tr_cfg_apply_args(table, c, 3, notint, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "--heartbeat-ms: heartbeat_ms: expected an integer, got 'soon'");
}

static void set_and_find(void **state)
{
    cfg *c = *state;
    tr_err err = {0};

    TR_ASSERT_OK(tr_cfg_set(table, c, "model.name", "llama", "--model.name", &err), &err);
    assert_string_equal(c->model_name, "llama");
    TR_ASSERT_FAILS(tr_cfg_set(table, c, "nope", "1", "--nope", &err), TROUPE_NOT_FOUND, &err,
                    "--nope: unknown setting 'nope'");
    assert_non_null(tr_cfg_find(table, "model.layers"));
    assert_int_equal(tr_cfg_find(table, "model.layers")->type, TR_CFG_INT);
    assert_null(tr_cfg_find(table, "model"));
    assert_null(tr_cfg_find(table, ""));
}

/* Precedence is defaults < file < environment < flags: each source overrides
 * only what it sets. */
static void precedence(void **state)
{
    cfg *c = *state;
    tr_err err = {0};
    char *argv[] = {"p", "--heartbeat-ms", "300", NULL};

    TR_ASSERT_OK(load(c, "heartbeat_ms: 100\nratio: 0.1\nmodel:\n  layers: 2\n", &err), &err);
    setenv("TTEST_HEARTBEAT_MS", "200", 1);
    setenv("TTEST_RATIO", "0.2", 1);
    TR_ASSERT_OK(tr_cfg_load_env(table, c, "TTEST", &err), &err);
    unsetenv("TTEST_HEARTBEAT_MS");
    unsetenv("TTEST_RATIO");
    TR_ASSERT_OK(tr_cfg_apply_args(table, c, 3, argv, &err), &err);

    assert_int_equal(c->heartbeat_ms, 300);                  /* flag */
    assert_true(c->ratio == 0.2);                            /* env */
    assert_int_equal(c->model_layers, 2);                    /* file */
    assert_string_equal(c->listen, "tcp://127.0.0.1:7070"); /* default */
}

static void validate_required(void **state)
{
    cfg *c = *state;
    tr_err err = {0};

    TR_ASSERT_FAILS(tr_cfg_validate(table, c, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "setting 'state_dir' is required (where state lives)");
    TR_ASSERT_OK(load(c, "state_dir: ''\n", &err), &err);
    TR_ASSERT_FAILS(tr_cfg_validate(table, c, &err), TROUPE_INVALID_ARGUMENT, &err, "'state_dir' is required");
    TR_ASSERT_OK(load(c, "state_dir: /var/lib/troupe\n", &err), &err);
    TR_ASSERT_OK(tr_cfg_validate(table, c, &err), &err);
}

/* print_to_string runs tr_cfg_print into a malloc'ed string. */
static char *print_to_string(const cfg *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    assert_non_null(f);
    tr_cfg_print(table, c, f);
    fclose(f);
    return buf;
}

static void print_redacts(void **state)
{
    cfg *c = *state;
    tr_err err = {0};
    char *out = print_to_string(c);

    TR_ASSERT_CONTAINS(out, "token: <unset>    # auth token\n");
    TR_ASSERT_CONTAINS(out, "listen: \"tcp://127.0.0.1:7070\"");
    TR_ASSERT_CONTAINS(out, "heartbeat_ms: 1000");
    TR_ASSERT_CONTAINS(out, "ratio: 0.5");
    TR_ASSERT_CONTAINS(out, "verbose: false");
    TR_ASSERT_CONTAINS(out, "model.layers: 12");
    TR_ASSERT_CONTAINS(out, "state_dir: ~");
    free(out);

    TR_ASSERT_OK(load(c, "token: hunter2-s3cret\nverbose: on\n", &err), &err);
    out = print_to_string(c);
    TR_ASSERT_CONTAINS(out, "token: <redacted>");
    TR_ASSERT_LACKS(out, "hunter2");
    TR_ASSERT_CONTAINS(out, "verbose: true");
    free(out);
}

static void usage_hides_secret_defaults(void **state)
{
    static const tr_cfg_desc t[] = {
        {"state_dir", TR_CFG_STRING, 0, "/var/lib/troupe", TR_CFG_UNBOUNDED, 0, "state directory"},
        {"token", TR_CFG_STRING, 0, "default-secret", TR_CFG_UNBOUNDED, TR_CFG_SENSITIVE, "auth token"},
        {0},
    };
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    assert_non_null(f);
    tr_cfg_usage(t, f);
    fclose(f);
    TR_ASSERT_CONTAINS(buf, "--state-dir");
    TR_ASSERT_CONTAINS(buf, "state directory [default: /var/lib/troupe]");
    TR_ASSERT_CONTAINS(buf, "--token");
    TR_ASSERT_LACKS(buf, "default-secret");
    free(buf);
}

int main(int argc, char **argv)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(defaults),       T(bad_default),     T(file_nested_and_dotted), T(file_missing),
        T(empty_file),     T(unknown_key),     T(malformed_yaml),         T(wrong_shapes),
        T(bounds),         T(numbers),         T(bools),                  T(strings_replace),
        T(env),            T(flags),           T(flags_meta),             T(flags_errors),
        T(flags_bare_bool),
        T(set_and_find),   T(precedence),      T(validate_required),      T(print_redacts),
        T(usage_hides_secret_defaults),
    };
#undef T
    return TR_TEST_MAIN("unit.common.config", tests, argc, argv);
}
