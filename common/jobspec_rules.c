/* jobspec_rules.c - value rules of the job spec, shared by the YAML walk and
 * tr_jobspec_validate: names, strategies, memory sizes, command splitting,
 * workdir resolution and the profiling range and patterns.
 *
 * None of these functions know where a value came from; their messages start
 * with the value itself and the caller adds the position and key. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "jobspec_int.h"
#include "names.h"

int tr_js_name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;

    if (n == 0 || n > TR_JS_NAME_MAX || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!isalnum(ch) && ch != '.' && ch != '_' && ch != '-') {
            return 0;
        }
    }
    return 1;
}

int tr_js_env_name_ok(const char *s)
{
    if (s == NULL || !(isalpha((unsigned char)s[0]) || s[0] == '_')) {
        return 0;
    }
    for (const char *p = s; *p != '\0'; p++) {
        if (!isalnum((unsigned char)*p) && *p != '_') {
            return 0;
        }
    }
    return 1;
}

const char *tr_js_strategy(const char *s)
{
    static const char *const names[] = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"};

    for (size_t i = 0; s != NULL && i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcasecmp(s, names[i]) == 0) {
            return names[i];
        }
    }
    return NULL;
}

/* ---- memory ----------------------------------------------------------------
 * "64GB", "1.5 GiB", "1048576". KB, MB, GB and TB are powers of 1000 and KiB,
 * MiB, GiB and TiB powers of 1024, as the names say (no guessing that "GB"
 * means GiB); units are matched case-insensitively. A plain integer is bytes. */

typedef struct mem_unit {
    const char *name;
    uint64_t mul;
} mem_unit;

static const mem_unit mem_units[] = {
    {"B", 1ULL},
    {"KB", 1000ULL},
    {"MB", 1000ULL * 1000},
    {"GB", 1000ULL * 1000 * 1000},
    {"TB", 1000ULL * 1000 * 1000 * 1000},
    {"KiB", 1ULL << 10},
    {"MiB", 1ULL << 20},
    {"GiB", 1ULL << 30},
    {"TiB", 1ULL << 40},
};

static int mem_bad(const char *s, tr_err *err)
{
    return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                      "cannot read memory size '%s' (use bytes, or a number with B, KB, MB, GB, TB, KiB, "
                      "MiB, GiB or TiB, e.g. 64GB)",
                      s);
}

/* mem_number reads "123" or "1.5" at s; returns the end or NULL. The
 * fraction is kept as a double: it only ever adds less than one unit. */
static const char *mem_number(const char *s, uint64_t *whole, double *frac)
{
    const char *p = s;
    uint64_t w = 0;

    *frac = 0.0;
    for (; isdigit((unsigned char)*p); p++) {
        if (w > (UINT64_MAX - 9) / 10) {
            return NULL;
        }
        w = w * 10 + (uint64_t)(*p - '0');
    }
    if (p == s) {
        return NULL;
    }
    if (*p == '.') {
        double scale = 0.1;
        const char *q = ++p;
        for (; isdigit((unsigned char)*p); p++, scale /= 10) {
            *frac += (*p - '0') * scale;
        }
        if (p == q) {
            return NULL;
        }
    }
    *whole = w;
    return p;
}

/* unit_mul returns the multiplier of a unit name, 0 when unknown. */
static uint64_t unit_mul(const char *u)
{
    for (size_t i = 0; i < sizeof(mem_units) / sizeof(mem_units[0]); i++) {
        if (strcasecmp(u, mem_units[i].name) == 0) {
            return mem_units[i].mul;
        }
    }
    return 0;
}

int tr_js_memory_parse(const char *s, uint64_t *out, tr_err *err)
{
    uint64_t whole = 0, mul, extra;
    double frac = 0.0;
    const char *p, *unit;

    *out = 0;
    p = s ? mem_number(s, &whole, &frac) : NULL;
    if (p == NULL) {
        return mem_bad(s ? s : "", err);
    }
    unit = p + strspn(p, " ");
    if (*unit == '\0') {
        mul = unit == p ? 1 : 0; /* "64" is bytes; "64 " lacks its unit */
    } else {
        mul = unit_mul(unit);
    }
    if (mul == 0 || (mul == 1 && frac != 0.0)) {
        return mem_bad(s, err); /* unknown unit, or a fraction of a byte */
    }
    extra = (uint64_t)(frac * (double)mul);
    if (whole > UINT64_MAX / mul || whole * mul > UINT64_MAX - extra) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "memory size '%s' is too large", s);
    }
    *out = whole * mul + extra;
    if (*out == 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "memory size '%s' must be more than 0 bytes", s);
    }
    return TROUPE_OK;
}

/* ---- command ---------------------------------------------------------------
 * The string form ("troupe-train --config train.yaml") is split on runs of
 * whitespace and nothing else: no shell quoting, globbing or variables. A
 * string holding a quote or a backslash is refused rather than split in a way
 * the author did not mean; such commands are written as a list. */

void tr_js_free_argv(char **argv, size_t argc)
{
    for (size_t i = 0; argv != NULL && i < argc; i++) {
        free(argv[i]);
    }
    free(argv);
}

static size_t count_words(const char *s)
{
    size_t n = 0;
    for (const char *p = s; *p != '\0';) {
        p += strspn(p, " \t\r\n\v\f");
        if (*p != '\0') {
            n++;
            p += strcspn(p, " \t\r\n\v\f");
        }
    }
    return n;
}

int tr_js_split_command(const char *s, char ***argv, size_t *argc, tr_err *err)
{
    size_t n = count_words(s);
    char **v = NULL;
    size_t got = 0;
    int rv = TROUPE_OK;

    *argv = NULL;
    *argc = 0;
    if (strpbrk(s, "'\"\\") != NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "'%s' holds a quote or backslash; a command string is split on whitespace "
                          "without shell quoting, so write the command as a list",
                          s);
    }
    if (n == 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "command is empty");
    }
    if (n > TR_JS_MAX_ARGS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "command has %zu arguments, at most %d allowed", n,
                          TR_JS_MAX_ARGS);
    }
    v = calloc(n, sizeof(*v));
    if (v == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    for (const char *p = s + strspn(s, " \t\r\n\v\f"); *p != '\0'; p += strspn(p, " \t\r\n\v\f")) {
        size_t len = strcspn(p, " \t\r\n\v\f");
        v[got] = strndup(p, len);
        if (v[got] == NULL) {
            rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
            goto out;
        }
        got++;
        p += len;
    }
    *argv = v;
    *argc = got;
    v = NULL;
out:
    tr_js_free_argv(v, got);
    return rv;
}

/* ---- workdir ---------------------------------------------------------------
 * Resolution is lexical: symlinks are not followed and the directory need
 * not exist here, because workers may start on another machine whose tree is
 * laid out the same (a shared file system) but which we cannot look at. */

/* normalize removes empty, "." and ".." components of an absolute path in
 * place (".." at the root stays at the root). The write position never passes
 * the read position, so one buffer serves both. */
static void normalize(char *p)
{
    const char *in = p;
    size_t n = 0;

    while (*in != '\0') {
        size_t len;
        in += strspn(in, "/");
        len = strcspn(in, "/");
        if (len == 2 && in[0] == '.' && in[1] == '.') {
            while (n > 0 && p[n - 1] != '/') {
                n--;
            }
            n = n > 0 ? n - 1 : 0;
        } else if (len > 0 && !(len == 1 && in[0] == '.')) {
            p[n++] = '/';
            memmove(p + n, in, len);
            n += len;
        }
        in += len;
    }
    if (n == 0) {
        p[n++] = '/';
    }
    p[n] = '\0';
}

/* join_abs writes "a/b" (or just b when b is absolute, or a alone when b is
 * NULL) to a malloc'd string, a being made absolute against the cwd first. */
static int join_abs(const char *a, const char *b, char **out, tr_err *err)
{
    char cwd[PATH_MAX];
    size_t need;

    *out = NULL;
    if (b != NULL && b[0] == '/') {
        *out = strdup(b);
    } else if (a != NULL && a[0] == '/') {
        need = strlen(a) + (b ? strlen(b) : 0) + 2;
        *out = malloc(need);
        if (*out != NULL) {
            snprintf(*out, need, "%s/%s", a, b ? b : "");
        }
    } else {
        if (getcwd(cwd, sizeof(cwd)) == NULL) {
            return tr_err_set(err, TROUPE_INTERNAL, "cannot read the current directory: %s", strerror(errno));
        }
        need = strlen(cwd) + (a ? strlen(a) : 0) + (b ? strlen(b) : 0) + 3;
        *out = malloc(need);
        if (*out != NULL) {
            snprintf(*out, need, "%s/%s/%s", cwd, a ? a : "", b ? b : "");
        }
    }
    if (*out == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    return TROUPE_OK;
}

int tr_js_resolve_dir(const char *base, const char *dir, char **out, tr_err *err)
{
    int rv = join_abs(base, dir, out, err);

    if (rv != TROUPE_OK) {
        return rv;
    }
    normalize(*out);
    if (strlen(*out) > TR_JS_MAX_STRING) {
        free(*out);
        *out = NULL;
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "path is longer than %d bytes", TR_JS_MAX_STRING);
    }
    return TROUPE_OK;
}

/* ---- profiling -------------------------------------------------------------
 * NeMo RL's NRL_NSYS_PROFILE_STEP_RANGE: "A:B", steps 1-based, A inclusive, B
 * exclusive, so "2:3" profiles step 2 only and "0:10" is an error. */

/* parse_step reads n decimal digits (no sign, no spaces) into an int. */
static int parse_step(const char *p, size_t n, int *out)
{
    long long v = 0;

    if (n == 0) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)p[i]) || v > INT_MAX / 10) {
            return -1;
        }
        v = v * 10 + (p[i] - '0');
    }
    if (v > INT_MAX) {
        return -1;
    }
    *out = (int)v;
    return 0;
}

int tr_profile_range_parse(const char *s, int *start, int *stop, tr_err *err)
{
    const char *colon = s ? strchr(s, ':') : NULL;
    int a = 0, b = 0;

    *start = 0;
    *stop = 0;
    if (s == NULL || s[0] == '\0') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "empty step range (expected \"A:B\", e.g. \"2:3\")");
    }
    if (colon == NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "step range '%s' has no ':' (expected \"A:B\", e.g. \"2:3\" profiles step 2)", s);
    }
    if (parse_step(s, (size_t)(colon - s), &a) != 0 || parse_step(colon + 1, strlen(colon + 1), &b) != 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "step range '%s': start and stop must be whole numbers (expected \"A:B\")", s);
    }
    if (a < 1) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "step range '%s': start must be >= 1 (steps are 1-based)", s);
    }
    if (a >= b) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "step range '%s': start must be less than stop (stop is exclusive: \"%d:%d\" "
                          "profiles step %d only)",
                          s, a, a + 1, a);
    }
    *start = a;
    *stop = b;
    return TROUPE_OK;
}

/* glob_ok rejects a '[' without its ']': fnmatch would then match the '['
 * literally, which is never what the author meant. "[]x]" and "[!]x]" hold
 * a literal ']' as their first member. */
static int glob_ok(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '[') {
            size_t j = i + 1;
            j += (j < n && (p[j] == '!' || p[j] == '^'));
            j += (j < n && p[j] == ']');
            while (j < n && p[j] != ']') {
                j++;
            }
            if (j >= n) {
                return 0;
            }
            i = j;
        }
    }
    return 1;
}

int tr_js_globs_check(const char *s, tr_err *err)
{
    size_t count = 0;
    const char *p = s ? s : "";
    /* Shown by `troupe job` and kept with the job: no control bytes (a
     * newline would forge a line of its own), and a bounded length. */
    int rv = tr_text_check("worker patterns", p, TR_JS_GLOBS_MAX, err);

    if (rv != TROUPE_OK) {
        return rv;
    }
    for (;;) {
        size_t len = strcspn(p, ",");
        const char *a = p, *b = p + len;
        while (a < b && isspace((unsigned char)*a)) {
            a++;
        }
        while (b > a && isspace((unsigned char)b[-1])) {
            b--;
        }
        if (b > a && !glob_ok(a, (size_t)(b - a))) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "worker pattern '%.*s' has an unclosed '['",
                              (int)(b - a), a);
        }
        count += b > a; /* empty items ("a,,b", a trailing comma) are skipped, as NeMo RL does */
        if (p[len] == '\0') {
            break;
        }
        p += len + 1;
    }
    if (count == 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "no worker patterns (expected comma-separated globs, e.g. \"*policy*\")");
    }
    return TROUPE_OK;
}
