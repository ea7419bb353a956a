/* config.c - the table-driven loader behind config.h.
 *
 * The YAML text is parsed with libyaml's document API; we then walk mappings
 * recursively, building the dotted key of each scalar, and hand it to the same
 * setter that flags and environment variables use. That single setter is the
 * only place values are parsed and bounds checked. */
#include "config.h"
#include "url.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#define KEY_MAX 256

const tr_cfg_desc *tr_cfg_find(const tr_cfg_desc *table, const char *key)
{
    for (const tr_cfg_desc *d = table; d->name != NULL; d++) {
        if (strcmp(d->name, key) == 0) {
            return d;
        }
    }
    return NULL;
}

static int parse_bool(const char *v, int *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

static int out_of_bounds(const tr_cfg_desc *d, double x)
{
    return d->min <= d->max && (x < d->min || x > d->max);
}

/* set_value is the one parser for every source; where says where the value
 * came from ("head.yaml:3:5" or "--listen" or "env TROUPE_LISTEN"). */
static int set_value(const tr_cfg_desc *d, void *obj, const char *v, const char *where, tr_err *err)
{
    char *end = NULL;

    switch (d->type) {
    case TR_CFG_STRING: {
        char *copy;
        if (v[0] != '\0' && (d->flags & (TR_CFG_URL | TR_CFG_HOST))) {
            tr_err why;
            int rv = (d->flags & TR_CFG_URL) ? tr_url_check(v, &why) : tr_host_check(v, &why);
            if (rv != TROUPE_OK) {
                return tr_err_set(err, rv, "%s: %s: '%s': %s", where, d->name, v, why.msg);
            }
        }
        copy = strdup(v);
        if (copy == NULL) {
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", where);
        }
        free(*TR_CFG_FIELD(obj, d, char *));
        *TR_CFG_FIELD(obj, d, char *) = copy;
        return TROUPE_OK;
    }
    case TR_CFG_INT: {
        long long x;
        errno = 0;
        x = strtoll(v, &end, 0);
        if (errno != 0 || end == v || *end != '\0') {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: %s: expected an integer, got '%s'", where,
                              d->name, v);
        }
        if (out_of_bounds(d, (double)x)) {
            return tr_err_set(err, TROUPE_OUT_OF_RANGE, "%s: %s: %lld is out of range [%.0f, %.0f]", where,
                              d->name, x, d->min, d->max);
        }
        *TR_CFG_FIELD(obj, d, int64_t) = (int64_t)x;
        return TROUPE_OK;
    }
    case TR_CFG_DOUBLE: {
        double x;
        errno = 0;
        x = strtod(v, &end);
        if (errno != 0 || end == v || *end != '\0' || !isfinite(x)) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: %s: expected a number, got '%s'", where,
                              d->name, v);
        }
        if (out_of_bounds(d, x)) {
            return tr_err_set(err, TROUPE_OUT_OF_RANGE, "%s: %s: %g is out of range [%g, %g]", where, d->name,
                              x, d->min, d->max);
        }
        *TR_CFG_FIELD(obj, d, double) = x;
        return TROUPE_OK;
    }
    case TR_CFG_BOOL: {
        int b;
        if (parse_bool(v, &b) != 0) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: %s: expected true or false, got '%s'", where,
                              d->name, v);
        }
        *TR_CFG_FIELD(obj, d, int) = b;
        return TROUPE_OK;
    }
    }
    return tr_err_set(err, TROUPE_INTERNAL, "%s: %s: bad descriptor type", where, d->name);
}

int tr_cfg_defaults(const tr_cfg_desc *table, void *obj, tr_err *err)
{
    for (const tr_cfg_desc *d = table; d->name != NULL; d++) {
        switch (d->type) {
        case TR_CFG_STRING: *TR_CFG_FIELD(obj, d, char *) = NULL; break;
        case TR_CFG_INT: *TR_CFG_FIELD(obj, d, int64_t) = 0; break;
        case TR_CFG_DOUBLE: *TR_CFG_FIELD(obj, d, double) = 0.0; break;
        case TR_CFG_BOOL: *TR_CFG_FIELD(obj, d, int) = 0; break;
        }
    }
    for (const tr_cfg_desc *d = table; d->name != NULL; d++) {
        if (d->def != NULL) {
            int rv = set_value(d, obj, d->def, "default", err);
            if (rv != TROUPE_OK) {
                return rv;
            }
        }
    }
    return TROUPE_OK;
}

int tr_cfg_set(const tr_cfg_desc *table, void *obj, const char *key, const char *value, const char *origin,
               tr_err *err)
{
    const tr_cfg_desc *d = tr_cfg_find(table, key);
    if (d == NULL) {
        return tr_err_set(err, TROUPE_NOT_FOUND, "%s: unknown setting '%s'", origin, key);
    }
    return set_value(d, obj, value, origin, err);
}

typedef struct walk {
    const tr_cfg_desc *table;
    void *obj;
    const char *name;
    yaml_document_t *doc;
    tr_err *err;
} walk;

static int walk_node(walk *w, yaml_node_t *node, const char *prefix);

/* has_prefix_key reports whether any table key starts with "prefix.", i.e.
 * whether a mapping is expected under this key. */
static int has_section(const tr_cfg_desc *table, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const tr_cfg_desc *d = table; d->name != NULL; d++) {
        if (strncmp(d->name, prefix, n) == 0 && d->name[n] == '.') {
            return 1;
        }
    }
    return 0;
}

static int walk_mapping(walk *w, yaml_node_t *node, const char *prefix)
{
    for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
        char key[KEY_MAX];
        int rv;

        if (k == NULL || v == NULL || k->type != YAML_SCALAR_NODE) {
            return tr_err_set(w->err, TROUPE_INVALID_ARGUMENT, "%s:%zu:%zu: keys must be plain names",
                              w->name, (k ? k->start_mark.line : 0) + 1, (k ? k->start_mark.column : 0) + 1);
        }
        snprintf(key, sizeof(key), "%s%s%s", prefix, prefix[0] ? "." : "",
                 (const char *)k->data.scalar.value);
        if (tr_cfg_find(w->table, key) == NULL && !has_section(w->table, key)) {
            return tr_err_set(w->err, TROUPE_INVALID_ARGUMENT, "%s:%zu:%zu: unknown key '%s'", w->name,
                              k->start_mark.line + 1, k->start_mark.column + 1, key);
        }
        rv = walk_node(w, v, key);
        if (rv != TROUPE_OK) {
            return rv;
        }
    }
    return TROUPE_OK;
}

static int walk_node(walk *w, yaml_node_t *node, const char *key)
{
    char where[KEY_MAX + 64];
    const tr_cfg_desc *d;

    snprintf(where, sizeof(where), "%s:%zu:%zu", w->name, node->start_mark.line + 1,
             node->start_mark.column + 1);
    if (node->type == YAML_MAPPING_NODE) {
        if (key[0] != '\0' && !has_section(w->table, key)) {
            return tr_err_set(w->err, TROUPE_INVALID_ARGUMENT,
                              "%s: %s: expected a single value, not a mapping", where, key);
        }
        return walk_mapping(w, node, key);
    }
    d = tr_cfg_find(w->table, key);
    if (d == NULL) {
        return tr_err_set(w->err, TROUPE_INVALID_ARGUMENT, "%s: %s: expected a mapping of settings", where,
                          key[0] ? key : "document");
    }
    if (node->type != YAML_SCALAR_NODE) {
        return tr_err_set(w->err, TROUPE_INVALID_ARGUMENT, "%s: %s: expected a single value, not a list",
                          where, key);
    }
    return set_value(d, w->obj, (const char *)node->data.scalar.value, where, w->err);
}

int tr_cfg_load_string(const tr_cfg_desc *table, void *obj, const char *name, const char *text, size_t len,
                       tr_err *err)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_node_t *root;
    walk w = {table, obj, name, &doc, err};
    int rv = TROUPE_OK;

    if (!yaml_parser_initialize(&parser)) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "%s: cannot start the YAML parser", name);
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        rv = tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s:%zu:%zu: %s", name, parser.problem_mark.line + 1,
                        parser.problem_mark.column + 1, parser.problem ? parser.problem : "malformed YAML");
        yaml_parser_delete(&parser);
        return rv;
    }
    root = yaml_document_get_root_node(&doc);
    if (root == NULL) {
        goto out; /* an empty file sets nothing */
    }
    if (root->type == YAML_SCALAR_NODE && root->data.scalar.length == 0) {
        goto out;
    }
    if (root->type != YAML_MAPPING_NODE) {
        rv = tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s:%zu:%zu: expected a mapping of settings", name,
                        root->start_mark.line + 1, root->start_mark.column + 1);
        goto out;
    }
    rv = walk_mapping(&w, root, "");
out:
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rv;
}

int tr_cfg_load_file(const tr_cfg_desc *table, void *obj, const char *path, tr_err *err)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    int rv;

    if (f == NULL) {
        return tr_err_set(err, TROUPE_NOT_FOUND, "%s: cannot open: %s", path, strerror(errno));
    }
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        rv = tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: cannot read: %s", path, strerror(errno));
        goto out;
    }
    buf = malloc((size_t)n + 1);
    if (buf == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", path);
        goto out;
    }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        rv = tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: short read", path);
        goto out;
    }
    buf[n] = '\0';
    rv = tr_cfg_load_string(table, obj, path, buf, (size_t)n, err);
out:
    free(buf);
    fclose(f);
    return rv;
}

int tr_cfg_load_env(const tr_cfg_desc *table, void *obj, const char *prefix, tr_err *err)
{
    for (const tr_cfg_desc *d = table; d->name != NULL; d++) {
        char var[KEY_MAX];
        char where[KEY_MAX + 8];
        const char *v;
        size_t n = (size_t)snprintf(var, sizeof(var), "%s_", prefix);

        for (const char *c = d->name; *c != '\0' && n + 1 < sizeof(var); c++) {
            var[n++] = (*c == '.' || *c == '-') ? '_' : (char)toupper((unsigned char)*c);
        }
        var[n] = '\0';
        v = getenv(var);
        if (v == NULL) {
            continue;
        }
        snprintf(where, sizeof(where), "env %s", var);
        int rv = set_value(d, obj, v, where, err);
        if (rv != TROUPE_OK) {
            return rv;
        }
    }
    return TROUPE_OK;
}

int tr_cfg_validate(const tr_cfg_desc *table, const void *obj, tr_err *err)
{
    for (const tr_cfg_desc *d = table; d->name != NULL; d++) {
        if ((d->flags & TR_CFG_REQUIRED) && d->type == TR_CFG_STRING) {
            const char *s = *TR_CFG_FIELD(obj, d, char *const);
            if (s == NULL || s[0] == '\0') {
                return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "setting '%s' is required (%s)", d->name,
                                  d->help ? d->help : "no default");
            }
        }
    }
    return TROUPE_OK;
}

void tr_cfg_print(const tr_cfg_desc *table, const void *obj, FILE *out)
{
    for (const tr_cfg_desc *d = table; d->name != NULL; d++) {
        fprintf(out, "%s: ", d->name);
        switch (d->type) {
        case TR_CFG_STRING: {
            const char *s = *TR_CFG_FIELD(obj, d, char *const);
            if (d->flags & TR_CFG_SENSITIVE) {
                fputs((s && s[0]) ? "<redacted>" : "<unset>", out);
            } else if (s == NULL) {
                fputs("~", out);
            } else {
                fprintf(out, "\"%s\"", s);
            }
            break;
        }
        case TR_CFG_INT: fprintf(out, "%lld", (long long)*TR_CFG_FIELD(obj, d, const int64_t)); break;
        case TR_CFG_DOUBLE: fprintf(out, "%g", *TR_CFG_FIELD(obj, d, const double)); break;
        case TR_CFG_BOOL: fputs(*TR_CFG_FIELD(obj, d, const int) ? "true" : "false", out); break;
        }
        if (d->help != NULL) {
            fprintf(out, "    # %s", d->help);
        }
        fputc('\n', out);
    }
}

void tr_cfg_free(const tr_cfg_desc *table, void *obj)
{
    for (const tr_cfg_desc *d = table; d->name != NULL; d++) {
        if (d->type == TR_CFG_STRING) {
            free(*TR_CFG_FIELD(obj, d, char *));
            *TR_CFG_FIELD(obj, d, char *) = NULL;
        }
    }
}

/* ---- command line --------------------------------------------------------- */

static int is_meta_flag(const char *a)
{
    return strcmp(a, "--check-config") == 0 || strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 ||
           strcmp(a, "--version") == 0;
}

/* flag_key turns "--state-dir" or "--state-dir=x" into "state_dir"; returns
 * a pointer to the inline value after '=' or NULL. */
static const char *flag_key(const char *arg, char *key, size_t size)
{
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg) - 2;

    if (n >= size) {
        n = size - 1;
    }
    for (size_t i = 0; i < n; i++) {
        key[i] = arg[2 + i] == '-' ? '_' : arg[2 + i];
    }
    key[n] = '\0';
    return eq ? eq + 1 : NULL;
}

/* walk_args visits each --key VALUE pair (skipping meta flags and --config),
 * applying it when obj is not NULL. */
static int walk_args(const tr_cfg_desc *table, void *obj, int argc, char **argv, tr_cfg_args *meta,
                     tr_err *err)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char key[KEY_MAX];
        const char *v;

        if (is_meta_flag(a)) {
            if (meta != NULL) {
                meta->check_config |= strcmp(a, "--check-config") == 0;
                meta->help |= (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0);
                meta->version |= strcmp(a, "--version") == 0;
            }
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "unexpected argument '%s' (see --help)", a);
        }
        v = flag_key(a, key, sizeof(key));
        if (v == NULL && tr_cfg_find(table, key) != NULL && tr_cfg_find(table, key)->type == TR_CFG_BOOL) {
            int b;
            /* A bare boolean flag (--shared-uid) means true; a following
             * true/false/yes/no/on/off/1/0 is its value. */
            v = i + 1 < argc && parse_bool(argv[i + 1], &b) == 0 ? argv[++i] : "true";
        }
        if (v == NULL) {
            if (i + 1 >= argc) {
                return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s needs a value", a);
            }
            v = argv[++i];
        }
        if (strcmp(key, "config") == 0) {
            if (meta != NULL) {
                meta->config_path = v;
            }
            continue;
        }
        if (tr_cfg_find(table, key) == NULL) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "unknown option '--%.*s' (see --help)",
                              (int)strcspn(a + 2, "="), a + 2);
        }
        if (obj != NULL) {
            char origin[KEY_MAX + 4];
            snprintf(origin, sizeof(origin), "--%.*s", (int)strcspn(a + 2, "="), a + 2);
            int rv = set_value(tr_cfg_find(table, key), obj, v, origin, err);
            if (rv != TROUPE_OK) {
                return rv;
            }
        }
    }
    return TROUPE_OK;
}

int tr_cfg_scan_args(const tr_cfg_desc *table, int argc, char **argv, tr_cfg_args *out, tr_err *err)
{
    memset(out, 0, sizeof(*out));
    return walk_args(table, NULL, argc, argv, out, err);
}

int tr_cfg_apply_args(const tr_cfg_desc *table, void *obj, int argc, char **argv, tr_err *err)
{
    return walk_args(table, obj, argc, argv, NULL, err);
}

void tr_cfg_usage(const tr_cfg_desc *table, FILE *out)
{
    for (const tr_cfg_desc *d = table; d->name != NULL; d++) {
        char flag[KEY_MAX];
        size_t n = 0;
        for (const char *c = d->name; *c != '\0' && n + 1 < sizeof(flag); c++) {
            flag[n++] = (*c == '_') ? '-' : *c;
        }
        flag[n] = '\0';
        fprintf(out, "  --%-22s %s", flag, d->help ? d->help : "");
        if (d->def != NULL && !(d->flags & TR_CFG_SENSITIVE)) {
            fprintf(out, " [default: %s]", d->def);
        }
        fputc('\n', out);
    }
}
