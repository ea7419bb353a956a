/* config.h - configuration by table (after Redis's config.c).
 *
 * A program describes its settings once, as an array of tr_cfg_desc ending in a
 * zeroed entry; every loader below walks that table. Keys are dotted paths into
 * the YAML document ("model.layers" is `model: {layers: 12}`), so nested files
 * and flat flags share one namespace. Unknown keys, wrong types and values out of
 * bounds are errors that read "file:line:col: message".
 *
 * Precedence is the order of calls: tr_cfg_defaults, then tr_cfg_load_file,
 * then tr_cfg_load_env, then tr_cfg_set for each command-line flag.
 *
 * Ownership: string values are heap copies owned by the config object; free
 * them with tr_cfg_free. Not thread-safe: load before starting threads. */
#ifndef TR_CONFIG_H
#define TR_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"

typedef enum tr_cfg_type {
    TR_CFG_STRING, /* char *, NULL when unset */
    TR_CFG_INT,    /* int64_t */
    TR_CFG_DOUBLE, /* double */
    TR_CFG_BOOL,   /* int, 0 or 1; accepts true/false/yes/no/on/off/1/0; a bare --flag means true */
} tr_cfg_type;

enum {
    TR_CFG_SENSITIVE = 1u << 0, /* redacted by tr_cfg_print, never logged */
    TR_CFG_REQUIRED = 1u << 1,  /* tr_cfg_validate fails when still unset/empty */
    TR_CFG_URL = 1u << 2,       /* STRING: an RPC address, checked by tr_url_check (url.h) */
    TR_CFG_HOST = 1u << 3,      /* STRING: a host name or IP address (tr_host_check) */
};

typedef struct tr_cfg_desc {
    const char *name; /* dotted key, e.g. "heartbeat_ms" or "model.layers" */
    tr_cfg_type type;
    size_t offset;   /* offsetof(struct, field) */
    const char *def; /* default as text, parsed like a file value; NULL = unset */
    double min, max; /* inclusive bounds for INT/DOUBLE; ignored when min > max */
    unsigned flags;
    const char *help; /* one line, shown by --help and tr_cfg_print */
} tr_cfg_desc;

/* TR_CFG_UNBOUNDED: min/max pair meaning "no bounds". */
#define TR_CFG_UNBOUNDED 1.0, 0.0

/* tr_cfg_defaults zeroes every field in the table and applies defaults. */
int tr_cfg_defaults(const tr_cfg_desc *table, void *obj, tr_err *err);

/* tr_cfg_load_file reads a YAML mapping from path into obj. */
int tr_cfg_load_file(const tr_cfg_desc *table, void *obj, const char *path, tr_err *err);

/* tr_cfg_load_string is tr_cfg_load_file for text in memory; name is used in
 * error messages in place of a file name. */
int tr_cfg_load_string(const tr_cfg_desc *table, void *obj, const char *name, const char *text, size_t len,
                       tr_err *err);

/* tr_cfg_load_env applies PREFIX_KEY variables ("TROUPE_HEARTBEAT_MS" for
 * prefix "TROUPE" and key "heartbeat_ms"; dots become underscores). */
int tr_cfg_load_env(const tr_cfg_desc *table, void *obj, const char *prefix, tr_err *err);

/* tr_cfg_set parses value for key (as from a flag); origin names the source in
 * errors ("--heartbeat-ms"). Returns NOT_FOUND for an unknown key. */
int tr_cfg_set(const tr_cfg_desc *table, void *obj, const char *key, const char *value, const char *origin,
               tr_err *err);

/* tr_cfg_find returns the descriptor for key, or NULL. */
const tr_cfg_desc *tr_cfg_find(const tr_cfg_desc *table, const char *key);

/* tr_cfg_validate checks TR_CFG_REQUIRED entries. */
int tr_cfg_validate(const tr_cfg_desc *table, const void *obj, tr_err *err);

/* tr_cfg_print writes "key: value" lines (YAML) with sensitive values shown as
 * "<redacted>" (or "<unset>" when empty). */
void tr_cfg_print(const tr_cfg_desc *table, const void *obj, FILE *out);

/* tr_cfg_free frees the strings owned by obj and sets them to NULL. */
void tr_cfg_free(const tr_cfg_desc *table, void *obj);

/* Typed accessors for code that walks the table generically. */
#define TR_CFG_FIELD(obj, d, T) ((T *)((char *)(obj) + (d)->offset))

/* ---- command-line helpers for the daemons -------------------------------- */

/* tr_cfg_args describes the flags every daemon takes besides its table's keys. */
typedef struct tr_cfg_args {
    const char *config_path; /* --config FILE */
    int check_config;        /* --check-config */
    int help;                /* --help / -h */
    int version;             /* --version */
} tr_cfg_args;

/* tr_cfg_scan_args finds --config/--check-config/--help/--version (first pass,
 * before the file is loaded). Every other argument must be a --key VALUE or
 * --key=VALUE whose key (dashes read as underscores) is in the table;
 * otherwise INVALID_ARGUMENT naming the argument. */
int tr_cfg_scan_args(const tr_cfg_desc *table, int argc, char **argv, tr_cfg_args *out, tr_err *err);

/* tr_cfg_apply_args applies the --key VALUE flags (second pass, last in
 * precedence). */
int tr_cfg_apply_args(const tr_cfg_desc *table, void *obj, int argc, char **argv, tr_err *err);

/* tr_cfg_usage prints one line per setting: flag, default, help. */
void tr_cfg_usage(const tr_cfg_desc *table, FILE *out);

#endif
