/* names.c - name rules shared by the CLI, the agent and the head (names.h). */
#include "names.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* chars_ok: 1 if s has min..max bytes, each alphanumeric or in extra. */
static int chars_ok(const char *s, size_t min, size_t max, const char *extra)
{
    size_t n = s ? strlen(s) : 0;

    if (n < min || n > max) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!isalnum(ch) && strchr(extra, ch) == NULL) {
            return 0;
        }
    }
    return 1;
}

/* shown: a bad value as it may be echoed (the log escapes control bytes; the
 * reply is cut so a long value does not hide the rule). */
static const char *shown(const char *s)
{
    return s ? s : "";
}

int tr_node_name_ok(const char *s)
{
    return chars_ok(s, 1, TR_NODE_NAME_MAX, "._-") && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

int tr_node_name_check(const char *what, const char *s, tr_err *err)
{
    if (tr_node_name_ok(s)) {
        return TROUPE_OK;
    }
    return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s '%.80s' is not valid (%s)", what, shown(s),
                      TR_NODE_NAME_RULE);
}

int tr_address_check(const char *what, const char *s, tr_err *err)
{
    if (chars_ok(s, 1, 253, "._-:[]")) {
        return TROUPE_OK;
    }
    return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s '%.80s' is not valid (%s)", what, shown(s), TR_ADDRESS_RULE);
}

int tr_label_check(const char *key, const char *value, tr_err *err)
{
    if (!chars_ok(key, 1, 253, "._-/")) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "label key '%.80s' is not valid (%s)", shown(key),
                          TR_LABEL_KEY_RULE);
    }
    if (!chars_ok(value ? value : "", 0, 253, "._-/:")) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "label %s: value '%.80s' is not valid (%s)", key,
                          shown(value), TR_LABEL_VALUE_RULE);
    }
    return TROUPE_OK;
}

int tr_text_check(const char *what, const char *s, size_t max, tr_err *err)
{
    size_t n = s ? strlen(s) : 0;

    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s is not valid (%s, at most %zu bytes)", what,
                              TR_TEXT_RULE, max);
        }
    }
    if (n > max) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s is %zu bytes (%s, at most %zu bytes)", what, n,
                          TR_TEXT_RULE, max);
    }
    return TROUPE_OK;
}

int tr_labels_check_list(const char *list, size_t max, tr_err *err)
{
    char key[256], value[256];
    const char *p = list ? list : "";
    size_t count = 0;

    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        size_t klen = eq ? (size_t)(eq - p) : len;
        size_t vlen = eq ? len - klen - 1 : 0;
        int rv;

        if (++count > max) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "labels: more than %zu", max);
        }
        if (klen >= sizeof(key) || vlen >= sizeof(value)) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "labels: label %zu is longer than 253 bytes", count);
        }
        memcpy(key, p, klen);
        key[klen] = '\0';
        memcpy(value, eq ? eq + 1 : "", vlen);
        value[vlen] = '\0';
        if ((rv = tr_label_check(key, value, err)) != TROUPE_OK) {
            return rv;
        }
        p += len + (end ? 1 : 0);
    }
    return TROUPE_OK;
}
