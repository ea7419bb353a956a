/* jobspec.c - the job YAML read into a troupe.v1.JobSpec (schema in jobspec.h).
 *
 * The text is loaded with libyaml's document API and walked by the schema:
 * each mapping first has its keys checked against the keys it may hold
 * (unknown and repeated keys are errors at the key), then every known key is
 * read by its own small function whose errors point at the value, or at the
 * enclosing mapping when a required key is missing. The walk follows the
 * schema and never recurses into arbitrary nodes, so alias cycles cannot loop
 * it, and the caps of jobspec_int.h bound what aliases can make it copy.
 *
 * Ownership: the message is built directly on the heap with malloc, in the
 * shape protobuf-c's unpack produces: every message *__init'ed, every string
 * and array malloc'd, unset strings left at protobuf_c_empty_string. So one
 * destructor, troupe__v1__job_spec__free_unpacked with the default
 * (malloc/free) allocator, frees a finished spec and a half-built one alike.
 * Entries are linked into their parent before they are filled and counts
 * (n_groups, n_env, ...) rise only once an entry is in place, so a failure at
 * any point leaves a message that frees cleanly. We build in place rather
 * than pack and unpack a temporary copy to avoid a second copy of every
 * string and a second set of cleanup paths. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "jobspec_int.h"
#include "names.h"

#define PATH_LEN 160 /* a key path in messages: "groups[12].resources.memory" */

typedef struct js_ctx {
    yaml_document_t *doc;
    const char *name; /* the file name in messages */
    tr_err *err;
    size_t n_env; /* env entries so far; TR_JS_MAX_ENV counts the whole job */
    size_t bytes; /* string bytes copied so far; see TR_JS_MAX_BYTES */
    size_t n_vnodes; /* cluster.nodes entries: where groups with GPUs go */
} js_ctx;

/* ---- errors and node helpers --------------------------------------------- */

static int js_failc(js_ctx *c, const yaml_node_t *at, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* js_failc records "file:line:col: message" at node at (or "file: message"
 * without a node) with the given code. */
static int js_failc(js_ctx *c, const yaml_node_t *at, int code, const char *fmt, ...)
{
    char msg[TR_ERR_MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (at == NULL) {
        return tr_err_set(c->err, code, "%s: %s", c->name, msg);
    }
    return tr_err_set(c->err, code, "%s:%zu:%zu: %s", c->name, at->start_mark.line + 1,
                      at->start_mark.column + 1, msg);
}

#define js_fail(c, at, ...) js_failc((c), (at), TROUPE_INVALID_ARGUMENT, __VA_ARGS__)

static int js_oom(js_ctx *c)
{
    return tr_err_set(c->err, TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", c->name);
}

static const char *js_kind(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_MAPPING_NODE: return "a mapping";
    case YAML_SEQUENCE_NODE: return "a list";
    default: return n->data.scalar.length == 0 ? "an empty value" : "a single value";
    }
}

static const char *js_sval(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

/* js_is_null: YAML's null is a plain "", "~" or "null"; a quoted "" is a string. */
static int js_is_null(const yaml_node_t *n)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};

    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
        return 0;
    }
    for (size_t i = 0; i < sizeof(nulls) / sizeof(nulls[0]); i++) {
        if (strcmp(js_sval(n), nulls[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

static size_t js_len(const yaml_node_t *n)
{
    return n->type == YAML_MAPPING_NODE ? (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start)
           : n->type == YAML_SEQUENCE_NODE
               ? (size_t)(n->data.sequence.items.top - n->data.sequence.items.start)
               : 0;
}

static yaml_node_t *js_item(js_ctx *c, const yaml_node_t *seq, size_t i)
{
    return yaml_document_get_node(c->doc, seq->data.sequence.items.start[i]);
}

/* js_path writes "path.key" into buf (PATH_LEN bytes). A long env name may
 * not fit; the message then shows the path shortened with "...". */
static const char *js_path(char *buf, const char *path, const char *key)
{
    if (snprintf(buf, PATH_LEN, "%s%s%s", path, path[0] ? "." : "", key) >= PATH_LEN) {
        memcpy(buf + PATH_LEN - 4, "...", 4);
    }
    return buf;
}

static int js_expect(js_ctx *c, const yaml_node_t *n, const char *path, yaml_node_type_t type,
                     const char *what)
{
    if (n->type != type) {
        return js_fail(c, n, "%s: expected %s, got %s", path, what, js_kind(n));
    }
    return TROUPE_OK;
}

/* ---- mappings -------------------------------------------------------------- */

static int js_key_is(const yaml_node_t *k, const char *key)
{
    return k->type == YAML_SCALAR_NODE && strcmp(js_sval(k), key) == 0;
}

static int js_known(const yaml_node_t *k, const char *const *keys)
{
    for (size_t i = 0; keys[i] != NULL; i++) {
        if (js_key_is(k, keys[i])) {
            return 1;
        }
    }
    return 0;
}

/* js_check_keys: every key of map is a scalar without NUL bytes, appears once
 * and, when keys is not NULL, is one of keys (hint lists them). where names
 * the mapping: "cluster", "groups[0]", "the job". */
static int js_check_keys(js_ctx *c, const yaml_node_t *map, const char *where, const char *const *keys,
                         const char *hint)
{
    const yaml_node_pair_t *first = map->data.mapping.pairs.start;

    for (const yaml_node_pair_t *p = first; p < map->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        if (k->type != YAML_SCALAR_NODE || strlen(js_sval(k)) != k->data.scalar.length) {
            return js_fail(c, k, "keys in %s must be plain names, got %s", where, js_kind(k));
        }
        if (keys != NULL && !js_known(k, keys)) {
            return js_fail(c, k, "unknown key '%s' in %s (expected %s)", js_sval(k), where, hint);
        }
        for (const yaml_node_pair_t *q = first; q < p; q++) {
            const yaml_node_t *prev = yaml_document_get_node(c->doc, q->key);
            if (js_key_is(prev, js_sval(k))) {
                return js_fail(c, k, "duplicate key '%s' in %s (first at line %zu)", js_sval(k), where,
                               prev->start_mark.line + 1);
            }
        }
    }
    return TROUPE_OK;
}

/* js_find returns the value of key in map (keys already checked), or NULL. */
static yaml_node_t *js_find(js_ctx *c, const yaml_node_t *map, const char *key, yaml_node_t **key_node)
{
    for (const yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        if (js_key_is(k, key)) {
            if (key_node != NULL) {
                *key_node = k;
            }
            return yaml_document_get_node(c->doc, p->value);
        }
    }
    return NULL;
}

/* js_opt: an optional key; absent and null ("key:" with nothing) read the same. */
static yaml_node_t *js_opt(js_ctx *c, const yaml_node_t *map, const char *key)
{
    yaml_node_t *v = js_find(c, map, key, NULL);
    return (v == NULL || js_is_null(v)) ? NULL : v;
}

static int js_req(js_ctx *c, const yaml_node_t *map, const char *path, const char *key, yaml_node_t **out)
{
    char full[PATH_LEN];

    *out = js_find(c, map, key, NULL);
    if (*out == NULL) {
        return js_fail(c, map, "missing required key '%s'", js_path(full, path, key));
    }
    return TROUPE_OK;
}

/* ---- scalars ------------------------------------------------------------- */

static int js_scalar(js_ctx *c, const yaml_node_t *n, const char *path, const char *what, const char **out)
{
    int rv = js_expect(c, n, path, YAML_SCALAR_NODE, what);

    if (rv != TROUPE_OK) {
        return rv;
    }
    if (strlen(js_sval(n)) != n->data.scalar.length) {
        return js_fail(c, n, "%s: contains a NUL character", path);
    }
    if (n->data.scalar.length > TR_JS_MAX_STRING) {
        return js_fail(c, n, "%s: longer than %d bytes", path, TR_JS_MAX_STRING);
    }
    *out = js_sval(n);
    return TROUPE_OK;
}

/* js_charge counts bytes about to be copied against TR_JS_MAX_BYTES. */
static int js_charge(js_ctx *c, const yaml_node_t *at, const char *path, size_t len)
{
    c->bytes += len + 1;
    if (c->bytes > TR_JS_MAX_BYTES) {
        return js_fail(c, at, "%s: the spec holds more than %d MiB of text once aliases are expanded", path,
                       TR_JS_MAX_BYTES >> 20);
    }
    return TROUPE_OK;
}

/* js_copy replaces *dst (an unset protobuf string) with a heap copy of s. */
static int js_copy(js_ctx *c, const yaml_node_t *at, const char *path, const char *s, char **dst)
{
    int rv = js_charge(c, at, path, strlen(s));
    char *copy;

    if (rv != TROUPE_OK) {
        return rv;
    }
    copy = strdup(s);
    if (copy == NULL) {
        return js_oom(c);
    }
    *dst = copy;
    return TROUPE_OK;
}

/* js_string copies a scalar; a null value reads as "" (used for env and
 * label values, where "KEY:" plainly means an empty value). */
static int js_string(js_ctx *c, const yaml_node_t *n, const char *path, char **dst)
{
    const char *s = "";
    int rv = js_is_null(n) ? TROUPE_OK : js_scalar(c, n, path, "a single value", &s);

    return rv != TROUPE_OK ? rv : js_copy(c, n, path, s, dst);
}

static int js_int(js_ctx *c, const yaml_node_t *n, const char *path, long long min, long long max,
                  long long *out)
{
    const char *s;
    char *end = NULL;
    long long v;
    int rv = js_scalar(c, n, path, "an integer", &s);

    if (rv != TROUPE_OK) {
        return rv;
    }
    errno = 0;
    v = strtoll(s, &end, 10);
    if (s[0] == '\0' || end == s || *end != '\0' ||
        (s[0] != '-' && s[0] != '+' && (s[0] < '0' || s[0] > '9'))) {
        return js_fail(c, n, "%s: expected an integer from %lld to %lld, got '%s'", path, min, max, s);
    }
    if (v < min || (errno == ERANGE && s[0] == '-')) {
        return js_fail(c, n, "%s: expected an integer >= %lld, got %s", path, min, s);
    }
    if (v > max || errno == ERANGE) {
        return js_fail(c, n, "%s: expected an integer <= %lld, got %s", path, max, s);
    }
    *out = v;
    return TROUPE_OK;
}

static int js_name(js_ctx *c, const yaml_node_t *n, const char *path, char **dst)
{
    const char *s;
    int rv = js_scalar(c, n, path, "a name", &s);

    if (rv != TROUPE_OK) {
        return rv;
    }
    if (s[0] == '\0') {
        return js_fail(c, n, "%s: expected a name, got an empty value", path);
    }
    if (!tr_js_name_ok(s)) {
        return js_fail(c, n, "%s: '%s' is not a valid name (1 to %d of letters, digits, '.', '_' or '-')",
                       path, s, TR_JS_NAME_MAX);
    }
    return js_copy(c, n, path, s, dst);
}

/* ---- cluster ------------------------------------------------------------- */

static int js_nodes(js_ctx *c, const yaml_node_t *n, Troupe__V1__JobSpec *spec)
{
    size_t count = js_len(n);
    int rv = js_expect(c, n, "cluster.nodes", YAML_SEQUENCE_NODE, "a list of GPUs per node, e.g. [8, 8]");

    if (rv != TROUPE_OK) {
        return rv;
    }
    if (count == 0 || count > TR_JS_MAX_NODES) {
        return js_fail(c, n, "cluster.nodes: expected 1 to %d nodes, got %zu", TR_JS_MAX_NODES, count);
    }
    spec->cluster_nodes = calloc(count, sizeof(*spec->cluster_nodes));
    if (spec->cluster_nodes == NULL) {
        return js_oom(c);
    }
    for (size_t i = 0; i < count; i++) {
        char path[PATH_LEN];
        long long v;
        snprintf(path, sizeof(path), "cluster.nodes[%zu]", i);
        rv = js_int(c, js_item(c, n, i), path, 1, TR_JS_MAX_NODE_GPUS, &v);
        if (rv != TROUPE_OK) {
            return rv;
        }
        spec->cluster_nodes[spec->n_cluster_nodes++] = (uint32_t)v;
    }
    return TROUPE_OK;
}

static int js_labels(js_ctx *c, const yaml_node_t *n, Troupe__V1__JobSpec *spec)
{
    size_t count = js_len(n);
    int rv = js_expect(c, n, "cluster.labels", YAML_MAPPING_NODE, "a mapping of label: value");

    if (rv == TROUPE_OK && count > TR_JS_MAX_LABELS) {
        rv = js_fail(c, n, "cluster.labels: %zu labels, at most %d allowed", count, TR_JS_MAX_LABELS);
    }
    if (rv == TROUPE_OK) {
        rv = js_check_keys(c, n, "cluster.labels", NULL, NULL);
    }
    if (rv != TROUPE_OK || count == 0) {
        return rv;
    }
    spec->cluster_labels = calloc(count, sizeof(*spec->cluster_labels));
    if (spec->cluster_labels == NULL) {
        return js_oom(c);
    }
    for (size_t i = 0; i < count && rv == TROUPE_OK; i++) {
        const yaml_node_pair_t *p = &n->data.mapping.pairs.start[i];
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        Troupe__V1__Label *l = malloc(sizeof(*l));
        char path[PATH_LEN];
        if (l == NULL) {
            return js_oom(c);
        }
        troupe__v1__label__init(l);
        spec->cluster_labels[spec->n_cluster_labels++] = l;
        if (k->data.scalar.length == 0) {
            return js_fail(c, k, "cluster.labels: a label name is empty");
        }
        rv = js_copy(c, k, "cluster.labels", js_sval(k), &l->key);
        if (rv == TROUPE_OK) {
            rv = js_string(c, yaml_document_get_node(c->doc, p->value),
                           js_path(path, "cluster.labels", js_sval(k)), &l->value);
        }
        if (rv == TROUPE_OK) { /* the node label rules (names.h), named at the value's position */
            tr_err why;
            if (tr_label_check(l->key, l->value, &why) != TROUPE_OK) {
                rv = js_fail(c, yaml_document_get_node(c->doc, p->value), "cluster.labels: %s", why.msg);
            }
        }
    }
    return rv;
}

static const char *const cluster_keys[] = {"nodes", "labels", NULL};

static int js_cluster(js_ctx *c, const yaml_node_t *n, Troupe__V1__JobSpec *spec)
{
    yaml_node_t *v = NULL;
    int rv = js_expect(c, n, "cluster", YAML_MAPPING_NODE, "a mapping with nodes and labels");

    if (rv == TROUPE_OK) {
        rv = js_check_keys(c, n, "cluster", cluster_keys, "nodes or labels");
    }
    /* nodes may be left out by a job of CPU-only groups (checked per group). */
    if (rv == TROUPE_OK && (v = js_opt(c, n, "nodes")) != NULL) {
        rv = js_nodes(c, v, spec);
    }
    c->n_vnodes = spec->n_cluster_nodes;
    v = js_opt(c, n, "labels");
    if (rv == TROUPE_OK && v != NULL) {
        rv = js_labels(c, v, spec);
    }
    return rv;
}

/* ---- env ------------------------------------------------------------------ */

static int js_env_var(js_ctx *c, const yaml_node_pair_t *p, const char *path, Troupe__V1__EnvVar *e)
{
    yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
    char vpath[PATH_LEN];
    int rv;

    if (!tr_js_env_name_ok(js_sval(k))) {
        return js_fail(c, k,
                       "%s: '%s' is not a valid variable name (letters, digits and '_', not starting "
                       "with a digit)",
                       path, js_sval(k));
    }
    rv = js_copy(c, k, path, js_sval(k), &e->key);
    if (rv != TROUPE_OK) {
        return rv;
    }
    return js_string(c, yaml_document_get_node(c->doc, p->value), js_path(vpath, path, js_sval(k)),
                     &e->value);
}

/* js_env reads a NAME: value mapping (the job's or a group's env). Values
 * are taken as written: 'true' stays "true", a null value is "". */
static int js_env(js_ctx *c, const yaml_node_t *n, const char *path, Troupe__V1__EnvVar ***arr, size_t *count)
{
    size_t want = js_len(n);
    int rv = js_expect(c, n, path, YAML_MAPPING_NODE, "a mapping of NAME: value");

    if (rv == TROUPE_OK && c->n_env + want > TR_JS_MAX_ENV) {
        rv = js_fail(c, n, "%s: too many environment variables (a job may set at most %d in all)", path,
                     TR_JS_MAX_ENV);
    }
    if (rv == TROUPE_OK) {
        rv = js_check_keys(c, n, path, NULL, NULL);
    }
    if (rv != TROUPE_OK || want == 0) {
        return rv;
    }
    c->n_env += want;
    *arr = calloc(want, sizeof(**arr));
    if (*arr == NULL) {
        return js_oom(c);
    }
    for (size_t i = 0; i < want && rv == TROUPE_OK; i++) {
        Troupe__V1__EnvVar *e = malloc(sizeof(*e));
        if (e == NULL) {
            return js_oom(c);
        }
        troupe__v1__env_var__init(e);
        (*arr)[(*count)++] = e;
        rv = js_env_var(c, &n->data.mapping.pairs.start[i], path, e);
    }
    return rv;
}

/* ---- groups --------------------------------------------------------------- */

static int js_cpu(js_ctx *c, const yaml_node_t *n, const char *path, double *out)
{
    const char *s;
    char *end = NULL;
    double v;
    int rv = js_scalar(c, n, path, "a number", &s);

    if (rv != TROUPE_OK) {
        return rv;
    }
    /* strtod also takes "inf", "nan" and hex floats; none is a CPU count. */
    v = strtod(s, &end);
    if (!((s[0] >= '0' && s[0] <= '9') || s[0] == '.') || strpbrk(s, "xX") != NULL || *end != '\0' ||
        !isfinite(v) || v <= 0 || v > TR_JS_MAX_CPUS) {
        return js_fail(c, n, "%s: expected a number > 0 and <= %d, got '%s'", path, TR_JS_MAX_CPUS, s);
    }
    *out = v;
    return TROUPE_OK;
}

static int js_memory(js_ctx *c, const yaml_node_t *n, const char *path, uint64_t *out)
{
    const char *s;
    tr_err e = {0};
    int rv = js_scalar(c, n, path, "a size such as 64GB", &s);

    if (rv != TROUPE_OK) {
        return rv;
    }
    rv = tr_js_memory_parse(s, out, &e);
    return rv == TROUPE_OK ? rv : js_failc(c, n, rv, "%s: %s", path, e.msg);
}

static const char *const resource_keys[] = {"gpu", "cpu", "memory", NULL};

static int js_resources(js_ctx *c, const yaml_node_t *n, const char *path, Troupe__V1__GroupSpec *g)
{
    char sub[PATH_LEN];
    yaml_node_t *v = NULL;
    long long gpus = 0;
    int rv = js_expect(c, n, path, YAML_MAPPING_NODE, "a mapping with gpu, cpu and memory");

    if (rv == TROUPE_OK) {
        rv = js_check_keys(c, n, path, resource_keys, "gpu, cpu or memory");
    }
    if (rv == TROUPE_OK) {
        rv = js_req(c, n, path, "gpu", &v);
    }
    if (rv == TROUPE_OK) {
        rv = js_int(c, v, js_path(sub, path, "gpu"), 0, TR_JS_MAX_GPUS, &gpus);
        g->gpus = (uint32_t)gpus;
    }
    if (rv == TROUPE_OK && gpus > 0 && c->n_vnodes == 0) {
        rv = js_fail(c, v,
                     "%s: %lld GPUs per worker, but the job has no cluster.nodes to place them in (add "
                     "cluster: {nodes: [N]}, or gpu: 0 for a CPU-only worker)",
                     js_path(sub, path, "gpu"), gpus);
    }
    if (rv == TROUPE_OK && (v = js_opt(c, n, "cpu")) != NULL) {
        rv = js_cpu(c, v, js_path(sub, path, "cpu"), &g->cpus);
    }
    if (rv == TROUPE_OK && (v = js_opt(c, n, "memory")) != NULL) {
        rv = js_memory(c, v, js_path(sub, path, "memory"), &g->memory_bytes);
    }
    return rv;
}

static int js_strategy(js_ctx *c, const yaml_node_t *n, const char *path, Troupe__V1__GroupSpec *g)
{
    const char *s = "PACK"; /* the default, when the key is absent */
    int rv = n ? js_scalar(c, n, path, "a strategy name", &s) : TROUPE_OK;

    if (rv != TROUPE_OK) {
        return rv;
    }
    if (tr_js_strategy(s) == NULL) {
        return js_fail(c, n, "%s: unknown strategy '%s' (use %s)", path, s, TR_JS_STRATEGIES);
    }
    return js_copy(c, n, path, tr_js_strategy(s), &g->strategy);
}

/* js_env_style reads env_style: absent is troupe's own variables only. */
static int js_env_style(js_ctx *c, const yaml_node_t *n, const char *path, Troupe__V1__GroupSpec *g)
{
    const char *s;
    int rv = js_scalar(c, n, path, "an environment style", &s);

    if (rv != TROUPE_OK) {
        return rv;
    }
    if (strcmp(s, TR_JS_ENV_TORCHRUN) != 0) {
        return js_fail(c, n,
                       "%s: unknown env_style '%s' (use " TR_JS_ENV_TORCHRUN
                       ", or leave it out for troupe's variables only)",
                       path, s);
    }
    return js_copy(c, n, path, s, &g->env_style);
}

/* js_command_string splits the string form; see tr_js_split_command. */
static int js_command_string(js_ctx *c, const yaml_node_t *n, const char *path, Troupe__V1__GroupSpec *g)
{
    const char *s;
    tr_err e = {0};
    int rv = js_scalar(c, n, path, "a command", &s);

    if (rv != TROUPE_OK) {
        return rv;
    }
    rv = tr_js_split_command(s, &g->command, &g->n_command, &e);
    if (rv != TROUPE_OK) {
        return js_failc(c, n, rv, "%s: %s", path, e.msg);
    }
    return js_charge(c, n, path, strlen(s) + g->n_command);
}

static int js_command(js_ctx *c, const yaml_node_t *n, const char *path, Troupe__V1__GroupSpec *g)
{
    size_t count = js_len(n);
    int rv = TROUPE_OK;

    if (n->type == YAML_SCALAR_NODE) {
        return js_command_string(c, n, path, g);
    }
    if (n->type != YAML_SEQUENCE_NODE) {
        return js_fail(c, n, "%s: expected a list of arguments or a command string, got %s", path,
                       js_kind(n));
    }
    if (count == 0 || count > TR_JS_MAX_ARGS) {
        return js_fail(c, n, "%s: expected 1 to %d arguments, got %zu", path, TR_JS_MAX_ARGS, count);
    }
    g->command = calloc(count, sizeof(*g->command));
    if (g->command == NULL) {
        return js_oom(c);
    }
    for (size_t i = 0; i < count && rv == TROUPE_OK; i++) {
        yaml_node_t *item = js_item(c, n, i);
        char sub[PATH_LEN];
        const char *s;
        if (snprintf(sub, sizeof(sub), "%s[%zu]", path, i) >= (int)sizeof(sub)) {
            sub[0] = '\0'; /* cannot happen: path is at most "groups[255].command" */
        }
        rv = js_scalar(c, item, sub, "a string", &s);
        if (rv == TROUPE_OK && i == 0 && s[0] == '\0') {
            rv = js_fail(c, item, "%s: the program name is empty", sub);
        }
        if (rv == TROUPE_OK) {
            rv = js_copy(c, item, sub, s, &g->command[i]);
            g->n_command += rv == TROUPE_OK;
        }
    }
    return rv;
}

static const char *const elastic_keys[] = {"min_workers", "max_workers", NULL};

/* js_elastic reads `elastic: {min_workers: K, max_workers: M}` of a group
 * whose workers were read; the bounds (tr_js_elastic_check) point at the
 * key they concern. */
static int js_elastic(js_ctx *c, const yaml_node_t *n, const char *path, Troupe__V1__GroupSpec *g)
{
    char sub[PATH_LEN];
    const char *bad = NULL;
    yaml_node_t *v = NULL;
    long long k = 0;
    tr_err e = {0};
    int rv = js_expect(c, n, path, YAML_MAPPING_NODE, "a mapping with min_workers and max_workers");

    if (rv == TROUPE_OK) {
        rv = js_check_keys(c, n, path, elastic_keys, "min_workers and max_workers");
    }
    if (rv == TROUPE_OK && (g->elastic = malloc(sizeof(*g->elastic))) == NULL) {
        return js_oom(c);
    }
    if (rv != TROUPE_OK) {
        return rv;
    }
    troupe__v1__elastic_spec__init(g->elastic);
    if ((rv = js_req(c, n, path, "min_workers", &v)) == TROUPE_OK) {
        rv = js_int(c, v, js_path(sub, path, "min_workers"), 1, TR_JS_MAX_WORKERS, &k);
        g->elastic->min_workers = (uint32_t)k;
    }
    g->elastic->max_workers = g->workers;
    if (rv == TROUPE_OK && (v = js_opt(c, n, "max_workers")) != NULL) {
        rv = js_int(c, v, js_path(sub, path, "max_workers"), 1, TR_JS_MAX_WORKERS, &k);
        g->elastic->max_workers = (uint32_t)k;
    }
    if (rv == TROUPE_OK && tr_js_elastic_check(g, &bad, &e) != TROUPE_OK) {
        const yaml_node_t *at = js_opt(c, n, bad);
        rv = js_fail(c, at ? at : n, "%s: %s", path, e.msg);
    }
    return rv;
}

static const char *const group_keys[] = {"name", "workers", "resources", "strategy", "command",
                                         "env",  "env_style", "elastic",  NULL};

/* js_group reads one entry of groups; *name_key is where its name was written
 * (for duplicate-name messages). */
static int js_group(js_ctx *c, const yaml_node_t *n, const char *path, Troupe__V1__GroupSpec *g,
                    yaml_node_t **name_key)
{
    char sub[PATH_LEN];
    yaml_node_t *v = NULL;
    long long workers = 0;
    int rv = js_expect(c, n, path, YAML_MAPPING_NODE, "a mapping (a group)");

    if (rv == TROUPE_OK) {
        rv = js_check_keys(c, n, path, group_keys,
                           "name, workers, resources, strategy, command, env, env_style or elastic");
    }
    if (rv == TROUPE_OK && (rv = js_req(c, n, path, "name", &v)) == TROUPE_OK) {
        js_find(c, n, "name", name_key);
        rv = js_name(c, v, js_path(sub, path, "name"), &g->name);
    }
    if (rv == TROUPE_OK && (rv = js_req(c, n, path, "workers", &v)) == TROUPE_OK) {
        rv = js_int(c, v, js_path(sub, path, "workers"), 1, TR_JS_MAX_WORKERS, &workers);
        g->workers = (uint32_t)workers;
    }
    if (rv == TROUPE_OK && (rv = js_req(c, n, path, "resources", &v)) == TROUPE_OK) {
        rv = js_resources(c, v, js_path(sub, path, "resources"), g);
    }
    if (rv == TROUPE_OK) {
        rv = js_strategy(c, js_opt(c, n, "strategy"), js_path(sub, path, "strategy"), g);
    }
    if (rv == TROUPE_OK && (rv = js_req(c, n, path, "command", &v)) == TROUPE_OK) {
        rv = js_command(c, v, js_path(sub, path, "command"), g);
    }
    if (rv == TROUPE_OK && (v = js_opt(c, n, "env")) != NULL) {
        rv = js_env(c, v, js_path(sub, path, "env"), &g->env, &g->n_env);
    }
    if (rv == TROUPE_OK && (v = js_opt(c, n, "env_style")) != NULL) {
        rv = js_env_style(c, v, js_path(sub, path, "env_style"), g);
    }
    if (rv == TROUPE_OK && (v = js_opt(c, n, "elastic")) != NULL) {
        rv = js_elastic(c, v, js_path(sub, path, "elastic"), g);
    }
    return rv;
}

static int js_groups(js_ctx *c, const yaml_node_t *n, Troupe__V1__JobSpec *spec)
{
    yaml_node_t *names[TR_JS_MAX_GROUPS] = {0}; /* the name key of each group */
    size_t count = js_len(n);
    int rv = js_expect(c, n, "groups", YAML_SEQUENCE_NODE, "a list of groups");

    if (rv == TROUPE_OK && (count == 0 || count > TR_JS_MAX_GROUPS)) {
        rv = js_fail(c, n, "groups: expected 1 to %d groups, got %zu", TR_JS_MAX_GROUPS, count);
    }
    if (rv != TROUPE_OK) {
        return rv;
    }
    spec->groups = calloc(count, sizeof(*spec->groups));
    if (spec->groups == NULL) {
        return js_oom(c);
    }
    for (size_t i = 0; i < count && rv == TROUPE_OK; i++) {
        Troupe__V1__GroupSpec *g = malloc(sizeof(*g));
        char path[PATH_LEN];
        if (g == NULL) {
            return js_oom(c);
        }
        troupe__v1__group_spec__init(g);
        spec->groups[spec->n_groups++] = g;
        snprintf(path, sizeof(path), "groups[%zu]", i);
        rv = js_group(c, js_item(c, n, i), path, g, &names[i]);
        for (size_t j = 0; j < i && rv == TROUPE_OK; j++) {
            if (strcmp(spec->groups[j]->name, g->name) == 0) {
                rv = js_fail(c, names[i], "duplicate group name '%s' (first at line %zu)", g->name,
                             names[j]->start_mark.line + 1);
            }
        }
    }
    return rv;
}

/* ---- the rest of the top level ------------------------------------------- */

/* js_workdir stores the absolute workdir: the value resolved against base_dir
 * (see tr_js_resolve_dir), or base_dir itself when n is NULL. */
static int js_workdir(js_ctx *c, const yaml_node_t *n, const char *base_dir, Troupe__V1__JobSpec *spec)
{
    const char *s = NULL;
    tr_err e = {0};
    int rv = n ? js_scalar(c, n, "workdir", "a directory", &s) : TROUPE_OK;

    if (rv == TROUPE_OK && s != NULL && s[0] == '\0') {
        rv = js_fail(c, n, "workdir: expected a directory, got an empty value");
    }
    if (rv != TROUPE_OK) {
        return rv;
    }
    rv = tr_js_resolve_dir(base_dir, s, &spec->workdir, &e);
    if (rv != TROUPE_OK) {
        spec->workdir = (char *)protobuf_c_empty_string;
        return js_failc(c, n, rv, "workdir: %s", e.msg);
    }
    return js_charge(c, n, "workdir", strlen(spec->workdir));
}

static const char *const restart_keys[] = {"max_restarts", NULL};

static int js_restart(js_ctx *c, const yaml_node_t *n, Troupe__V1__JobSpec *spec)
{
    yaml_node_t *v;
    long long max = 0;
    int rv = js_expect(c, n, "restart", YAML_MAPPING_NODE, "a mapping with max_restarts");

    if (rv == TROUPE_OK) {
        rv = js_check_keys(c, n, "restart", restart_keys, "max_restarts");
    }
    if (rv == TROUPE_OK && (v = js_opt(c, n, "max_restarts")) != NULL) {
        rv = js_int(c, v, "restart.max_restarts", 0, TR_JS_MAX_RESTARTS, &max);
        spec->max_restarts = (uint32_t)max;
    }
    return rv;
}

static const char *const profile_keys[] = {"steps", "workers", "nsys", "nsys_options", NULL};

/* js_profile_values checks both values, then stores them. */
static int js_profile_values(js_ctx *c, const yaml_node_t *steps, const yaml_node_t *workers,
                             Troupe__V1__JobSpec *spec)
{
    const char *s, *w;
    tr_err e = {0};
    int a, b;
    int rv = js_scalar(c, steps, "profile.steps", "a step range such as \"2:3\"", &s);

    if (rv == TROUPE_OK && tr_profile_range_parse(s, &a, &b, &e) != TROUPE_OK) {
        rv = js_fail(c, steps, "profile.steps: %s", e.msg);
    }
    if (rv == TROUPE_OK) {
        rv = js_scalar(c, workers, "profile.workers", "comma-separated worker patterns", &w);
    }
    if (rv == TROUPE_OK && tr_js_globs_check(w, &e) != TROUPE_OK) {
        rv = js_fail(c, workers, "profile.workers: %s", e.msg);
    }
    if (rv != TROUPE_OK) {
        return rv;
    }
    spec->profile = malloc(sizeof(*spec->profile));
    if (spec->profile == NULL) {
        return js_oom(c);
    }
    troupe__v1__profile_spec__init(spec->profile);
    rv = js_copy(c, steps, "profile.steps", s, &spec->profile->steps);
    return rv != TROUPE_OK ? rv : js_copy(c, workers, "profile.workers", w, &spec->profile->workers);
}

/* js_profile: steps and workers go together, as NeMo RL asserts for its
 * NRL_NSYS_PROFILE_STEP_RANGE and NRL_NSYS_WORKER_PATTERNS; a profile mapping
 * with neither (all commented out) means no profiling. */
static int js_bool(js_ctx *c, const yaml_node_t *n, const char *path, int *out)
{
    const char *s;
    int rv = js_scalar(c, n, path, "true or false", &s);

    if (rv != TROUPE_OK) {
        return rv;
    }
    if (strcmp(s, "true") != 0 && strcmp(s, "false") != 0) {
        return js_fail(c, n, "%s: true or false, not '%s'", path, s);
    }
    *out = strcmp(s, "true") == 0;
    return TROUPE_OK;
}

static int js_profile(js_ctx *c, const yaml_node_t *n, Troupe__V1__JobSpec *spec)
{
    yaml_node_t *steps, *workers, *nsys, *opts;
    const char *o;
    int on = 0;
    int rv = js_expect(c, n, "profile", YAML_MAPPING_NODE, "a mapping with steps and workers");

    if (rv == TROUPE_OK) {
        rv = js_check_keys(c, n, "profile", profile_keys, "steps, workers, nsys and nsys_options");
    }
    if (rv != TROUPE_OK) {
        return rv;
    }
    steps = js_opt(c, n, "steps");
    workers = js_opt(c, n, "workers");
    nsys = js_opt(c, n, "nsys");
    opts = js_opt(c, n, "nsys_options");
    if (nsys != NULL && (rv = js_bool(c, nsys, "profile.nsys", &on)) != TROUPE_OK) {
        return rv;
    }
    if (opts != NULL && !on) {
        return js_fail(c, opts, "profile.nsys_options: goes with nsys: true");
    }
    if (on && (steps == NULL || workers == NULL)) {
        return js_fail(c, nsys, "profile.nsys: needs steps and workers (the workers that run under nsys and the "
                                "steps it captures)");
    }
    if (steps == NULL && workers == NULL) {
        return TROUPE_OK;
    }
    if (steps == NULL || workers == NULL) {
        return js_fail(c, n, "profile: steps and workers go together (set both or neither); %s is missing",
                       steps == NULL ? "steps" : "workers");
    }
    if ((rv = js_profile_values(c, steps, workers, spec)) != TROUPE_OK || !on) {
        return rv;
    }
    spec->profile->nsys = 1;
    if (opts != NULL && (rv = js_scalar(c, opts, "profile.nsys_options", "nsys options", &o)) == TROUPE_OK) {
        rv = js_copy(c, opts, "profile.nsys_options", o, &spec->profile->nsys_options);
    }
    return rv;
}

/* ---- health ------------------------------------------------------------ */

static const char *const health_keys[] = {"stall_after",   "on_stall",      "straggler_factor", "straggler_window",
                                          "memory_window", "memory_slope_mb", "memory_near",      NULL};

static int js_double(js_ctx *c, const yaml_node_t *n, const char *path, double *out)
{
    const char *s;
    char *end = NULL;
    int rv = js_scalar(c, n, path, "a number", &s);

    if (rv != TROUPE_OK) {
        return rv;
    }
    errno = 0;
    *out = strtod(s, &end);
    if (s[0] == '\0' || end == s || *end != '\0' || errno == ERANGE || !isfinite(*out)) {
        return js_fail(c, n, "%s: expected a number, got '%s'", path, s);
    }
    return TROUPE_OK;
}

/* js_health_stall reads stall_after (a duration, or "auto") and on_stall
 * (warn or fail). */
static int js_health_stall(js_ctx *c, const yaml_node_t *n, Troupe__V1__HealthSpec *h)
{
    yaml_node_t *v;
    const char *s;
    tr_err e = {0};
    int64_t ms = 0;
    int rv = TROUPE_OK;

    if ((v = js_opt(c, n, "stall_after")) != NULL &&
        (rv = js_scalar(c, v, "health.stall_after", "a duration such as 30s, or auto", &s)) == TROUPE_OK &&
        strcmp(s, "auto") != 0) {
        if (tr_js_duration_parse(s, &ms, &e) != TROUPE_OK) {
            return js_fail(c, v, "health.stall_after: %s", e.msg);
        }
        if (ms < 100) {
            return js_fail(c, v, "health.stall_after: %s is shorter than 100 ms (or write auto)", s);
        }
        h->stall_after_ms = (uint32_t)ms;
    }
    if (rv == TROUPE_OK && (v = js_opt(c, n, "on_stall")) != NULL &&
        (rv = js_scalar(c, v, "health.on_stall", "warn or fail", &s)) == TROUPE_OK) {
        if (strcmp(s, "warn") != 0 && strcmp(s, "fail") != 0) {
            return js_fail(c, v, "health.on_stall: expected warn or fail, got '%s'", s);
        }
        h->on_stall_set = 1;
        h->on_stall_fail = strcmp(s, "fail") == 0;
    }
    return rv;
}

/* js_health_numbers reads the straggler and memory thresholds; their bounds
 * are checked after (tr_js_health_check), pointing at the key. */
static int js_health_numbers(js_ctx *c, const yaml_node_t *n, Troupe__V1__HealthSpec *h)
{
    yaml_node_t *v;
    long long w = 0;
    int rv = TROUPE_OK;

    if ((v = js_opt(c, n, "straggler_factor")) != NULL) {
        rv = js_double(c, v, "health.straggler_factor", &h->straggler_factor);
    }
    if (rv == TROUPE_OK && (v = js_opt(c, n, "straggler_window")) != NULL) {
        rv = js_int(c, v, "health.straggler_window", 2, TR_JS_MAX_HEALTH_WINDOW, &w);
        h->straggler_window = (uint32_t)w;
    }
    if (rv == TROUPE_OK && (v = js_opt(c, n, "memory_window")) != NULL) {
        rv = js_int(c, v, "health.memory_window", 2, TR_JS_MAX_HEALTH_WINDOW, &w);
        h->memory_window = (uint32_t)w;
    }
    if (rv == TROUPE_OK && (v = js_opt(c, n, "memory_slope_mb")) != NULL) {
        rv = js_double(c, v, "health.memory_slope_mb", &h->memory_slope_mb);
    }
    if (rv == TROUPE_OK && (v = js_opt(c, n, "memory_near")) != NULL) {
        rv = js_double(c, v, "health.memory_near", &h->memory_near);
    }
    return rv;
}

/* js_health: `health: {stall_after: 30s, on_stall: fail, ...}`; anything
 * left out is the head's default. */
static int js_health(js_ctx *c, const yaml_node_t *n, Troupe__V1__JobSpec *spec)
{
    Troupe__V1__HealthSpec *h;
    const char *bad = NULL;
    tr_err e = {0};
    int rv = js_expect(c, n, "health", YAML_MAPPING_NODE, "a mapping of health thresholds");

    if (rv == TROUPE_OK) {
        rv = js_check_keys(c, n, "health", health_keys,
                           "stall_after, on_stall, straggler_factor, straggler_window, memory_window, "
                           "memory_slope_mb or memory_near");
    }
    if (rv != TROUPE_OK) {
        return rv;
    }
    if ((h = malloc(sizeof(*h))) == NULL) {
        return js_oom(c);
    }
    troupe__v1__health_spec__init(h);
    spec->health = h;
    if ((rv = js_health_stall(c, n, h)) == TROUPE_OK) {
        rv = js_health_numbers(c, n, h);
    }
    if (rv == TROUPE_OK && tr_js_health_check(h, &bad, &e) != TROUPE_OK) {
        const yaml_node_t *at = bad != NULL ? js_find(c, n, bad, NULL) : NULL;
        rv = js_fail(c, at ? at : n, "%s", e.msg);
    }
    return rv;
}

static const char *const comm_keys[] = {"name", "groups", NULL};

/* js_comm reads one communicator; its rules (tr_js_comm_check) run once the
 * whole list is read, pointing at the offending name or group entry. */
static int js_comm(js_ctx *c, const yaml_node_t *n, const char *path, Troupe__V1__CommunicatorSpec *cs)
{
    char sub[PATH_LEN];
    yaml_node_t *v = NULL;
    int rv = js_expect(c, n, path, YAML_MAPPING_NODE, "a mapping with name and groups");

    if (rv == TROUPE_OK) {
        rv = js_check_keys(c, n, path, comm_keys, "name and groups");
    }
    if (rv == TROUPE_OK && (rv = js_req(c, n, path, "name", &v)) == TROUPE_OK) {
        rv = js_name(c, v, js_path(sub, path, "name"), &cs->name);
    }
    if (rv == TROUPE_OK && (rv = js_req(c, n, path, "groups", &v)) == TROUPE_OK) {
        rv = js_expect(c, v, js_path(sub, path, "groups"), YAML_SEQUENCE_NODE, "a list of group names");
    }
    if (rv == TROUPE_OK && js_len(v) > TR_JS_MAX_GROUPS) {
        rv = js_fail(c, v, "%s: at most %d groups", sub, TR_JS_MAX_GROUPS);
    }
    if (rv == TROUPE_OK && (cs->groups = calloc(js_len(v) + 1, sizeof(char *))) == NULL) {
        rv = js_oom(c);
    }
    for (size_t i = 0; rv == TROUPE_OK && i < js_len(v); i++) {
        char item[PATH_LEN];
        if (snprintf(item, sizeof(item), "%s.groups[%zu]", path, i) >= (int)sizeof(item)) {
            memcpy(item + sizeof(item) - 4, "...", 4);
        }
        rv = js_name(c, js_item(c, v, i), item, &cs->groups[cs->n_groups]);
        cs->n_groups += rv == TROUPE_OK;
    }
    return rv;
}

/* js_communicators: `communicators: [{name: refit, groups: [policy,
 * generation]}]`, checked against the groups read before. */
static int js_communicators(js_ctx *c, const yaml_node_t *n, Troupe__V1__JobSpec *spec)
{
    size_t count = js_len(n), bad = SIZE_MAX;
    int rv = js_expect(c, n, "communicators", YAML_SEQUENCE_NODE, "a list of communicators");
    tr_err e = {0};

    if (rv == TROUPE_OK && count > TR_JS_MAX_GROUPS) {
        rv = js_fail(c, n, "communicators: at most %d", TR_JS_MAX_GROUPS);
    }
    if (rv == TROUPE_OK && (spec->communicators = calloc(count + 1, sizeof(*spec->communicators))) == NULL) {
        rv = js_oom(c);
    }
    for (size_t i = 0; rv == TROUPE_OK && i < count; i++) {
        Troupe__V1__CommunicatorSpec *cs = malloc(sizeof(*cs));
        const yaml_node_t *item = js_item(c, n, i);
        char path[PATH_LEN];
        if (cs == NULL) {
            return js_oom(c);
        }
        troupe__v1__communicator_spec__init(cs);
        spec->communicators[spec->n_communicators++] = cs;
        snprintf(path, sizeof(path), "communicators[%zu]", i);
        rv = js_comm(c, item, path, cs);
        if (rv == TROUPE_OK && tr_js_comm_check(spec, i, &bad, &e) != TROUPE_OK) {
            const yaml_node_t *at = js_find(c, item, bad == SIZE_MAX ? "name" : "groups", NULL);
            if (bad != SIZE_MAX && at != NULL) {
                at = js_item(c, at, bad);
            }
            rv = js_fail(c, at ? at : item, "%s: %s", path, e.msg);
        }
    }
    return rv;
}

/* js_nrl_env: NeMo RL's NRL_NSYS_* variables in the job's env and in each
 * group's, checked where they are written: the entry at fault in the group's
 * env: when it is there, else in the job's (which the group inherits). */
static int js_nrl_env(js_ctx *c, const yaml_node_t *root, const Troupe__V1__JobSpec *spec)
{
    const char *bad = NULL;
    const yaml_node_t *env = js_opt(c, root, "env"), *genv = NULL, *groups = js_opt(c, root, "groups"), *at = NULL;
    yaml_node_t *key = NULL;
    size_t bad_group = SIZE_MAX;
    tr_err e = {0};

    if (tr_js_nrl_env(spec, &bad, &bad_group, &e) == TROUPE_OK) {
        return TROUPE_OK;
    }
    if (bad_group != SIZE_MAX && groups != NULL && groups->type == YAML_SEQUENCE_NODE &&
        bad_group < (size_t)(groups->data.sequence.items.top - groups->data.sequence.items.start)) {
        const yaml_node_t *item = js_item(c, groups, bad_group);
        genv = item != NULL && item->type == YAML_MAPPING_NODE ? js_opt(c, item, "env") : NULL;
    }
    if (bad != NULL) {
        if (genv != NULL) {
            at = js_find(c, genv, bad, &key);
        }
        if (at == NULL && env != NULL) {
            at = js_find(c, env, bad, &key);
        }
        at = (at == NULL || js_is_null(at) || strstr(e.msg, "without") != NULL) ? key : at;
    }
    return js_fail(c, at ? at : (genv ? genv : env), "%s", e.msg);
}

static const char *const top_keys[] = {"name",    "cluster",   "groups",  "env",           "workdir",
                                       "restart", "timeout_s", "profile", "communicators", "health", NULL};

static int js_top_optional(js_ctx *c, const yaml_node_t *root, const char *base_dir,
                           Troupe__V1__JobSpec *spec)
{
    yaml_node_t *v;
    long long timeout = 0;
    int rv = TROUPE_OK;

    if ((v = js_opt(c, root, "env")) != NULL) {
        rv = js_env(c, v, "env", &spec->env, &spec->n_env);
    }
    if (rv == TROUPE_OK) {
        rv = js_workdir(c, js_opt(c, root, "workdir"), base_dir, spec);
    }
    if (rv == TROUPE_OK && (v = js_opt(c, root, "restart")) != NULL) {
        rv = js_restart(c, v, spec);
    }
    if (rv == TROUPE_OK && (v = js_opt(c, root, "timeout_s")) != NULL) {
        rv = js_int(c, v, "timeout_s", 0, UINT32_MAX, &timeout);
        spec->timeout_s = (uint32_t)timeout;
    }
    if (rv == TROUPE_OK && (v = js_opt(c, root, "profile")) != NULL) {
        rv = js_profile(c, v, spec);
    }
    if (rv == TROUPE_OK && (v = js_opt(c, root, "communicators")) != NULL) {
        rv = js_communicators(c, v, spec);
    }
    if (rv == TROUPE_OK && (v = js_opt(c, root, "health")) != NULL) {
        rv = js_health(c, v, spec);
    }
    return rv == TROUPE_OK ? js_nrl_env(c, root, spec) : rv;
}

static int js_root(js_ctx *c, const yaml_node_t *root, const char *base_dir, Troupe__V1__JobSpec *spec)
{
    yaml_node_t *v = NULL;
    int rv = js_expect(c, root, "job spec", YAML_MAPPING_NODE, "a mapping with name, cluster and groups");

    if (rv == TROUPE_OK) {
        rv = js_check_keys(c, root, "the job", top_keys,
                           "name, cluster, groups, env, workdir, restart, timeout_s, profile, communicators or health");
    }
    if (rv == TROUPE_OK && (rv = js_req(c, root, "", "name", &v)) == TROUPE_OK) {
        rv = js_name(c, v, "name", &spec->name);
    }
    if (rv == TROUPE_OK && (v = js_opt(c, root, "cluster")) != NULL) {
        rv = js_cluster(c, v, spec);
    }
    if (rv == TROUPE_OK && (rv = js_req(c, root, "", "groups", &v)) == TROUPE_OK) {
        rv = js_groups(c, v, spec);
    }
    return rv == TROUPE_OK ? js_top_optional(c, root, base_dir, spec) : rv;
}

/* ---- entry points ---------------------------------------------------------- */

/* js_yaml_fail reports libyaml's own problem at its own position. */
static int js_yaml_fail(js_ctx *c, const yaml_parser_t *p)
{
    const char *problem = p->problem ? p->problem : "malformed YAML";

    if (p->context != NULL) {
        return tr_err_set(c->err, TROUPE_INVALID_ARGUMENT, "%s:%zu:%zu: %s (%s at line %zu)", c->name,
                          p->problem_mark.line + 1, p->problem_mark.column + 1, problem, p->context,
                          p->context_mark.line + 1);
    }
    return tr_err_set(c->err, TROUPE_INVALID_ARGUMENT, "%s:%zu:%zu: %s", c->name, p->problem_mark.line + 1,
                      p->problem_mark.column + 1, problem);
}

/* js_load_doc loads the one document of the text into *doc; on error no
 * document is left to delete. A second document is refused rather than
 * silently ignored. */
static int js_load_doc(js_ctx *c, yaml_parser_t *p, yaml_document_t *doc)
{
    yaml_document_t next;
    yaml_node_t *root, *extra;
    int rv = TROUPE_OK;

    if (!yaml_parser_load(p, doc)) {
        return js_yaml_fail(c, p);
    }
    root = yaml_document_get_root_node(doc);
    if (root == NULL || js_is_null(root)) {
        rv = js_fail(c, NULL, "empty job spec (expected a mapping with name, cluster and groups)");
        goto out;
    }
    if (!yaml_parser_load(p, &next)) {
        rv = js_yaml_fail(c, p);
        goto out;
    }
    extra = yaml_document_get_root_node(&next);
    if (extra != NULL) {
        rv = js_fail(c, extra, "a job spec is one YAML document; found a second one");
    }
    yaml_document_delete(&next);
out:
    if (rv != TROUPE_OK) {
        yaml_document_delete(doc);
    }
    return rv;
}

int tr_jobspec_parse(const char *text, size_t len, const char *name, const char *base_dir,
                     Troupe__V1__JobSpec **out, tr_err *err)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    Troupe__V1__JobSpec *spec = NULL;
    js_ctx c = {&doc, name ? name : "job spec", err, 0, 0, 0};
    int rv;

    *out = NULL;
    if (len > TR_JS_MAX_TEXT) {
        return js_fail(&c, NULL, "the job spec is %zu bytes, more than the %d MiB allowed", len,
                       TR_JS_MAX_TEXT >> 20);
    }
    if (!yaml_parser_initialize(&parser)) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "%s: cannot start the YAML parser", c.name);
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)(text ? text : ""), text ? len : 0);
    rv = js_load_doc(&c, &parser, &doc);
    if (rv != TROUPE_OK) {
        goto out_parser;
    }
    spec = malloc(sizeof(*spec));
    if (spec == NULL) {
        rv = js_oom(&c);
        goto out;
    }
    troupe__v1__job_spec__init(spec);
    rv = js_root(&c, yaml_document_get_root_node(&doc), base_dir, spec);
    if (rv == TROUPE_OK && name != NULL) {
        rv = js_copy(&c, NULL, "source", name, &spec->source);
    }
    if (rv == TROUPE_OK) {
        /* The walk enforces every rule with a position; this only catches a
         * walk that drifted from tr_jobspec_validate. */
        rv = tr_jobspec_validate(spec, err);
    }
out:
    yaml_document_delete(&doc);
out_parser:
    yaml_parser_delete(&parser);
    if (rv != TROUPE_OK) {
        tr_jobspec_free(spec);
        spec = NULL;
    }
    *out = spec;
    return rv;
}

void tr_jobspec_free(Troupe__V1__JobSpec *spec)
{
    /* NULL allocator = protobuf-c's default, malloc/free, which built it. */
    troupe__v1__job_spec__free_unpacked(spec, NULL);
}
