/* names.h - the name rules every door enforces: the CLI and the agent before
 * they send, the head before it stores or logs (so that no client can store
 * a forged string). Job and group names follow the job spec's rule
 * (jobspec_rules.c, tr_js_name_ok); these are the others. */
#ifndef TR_NAMES_H
#define TR_NAMES_H

#include "err.h"

#define TR_NODE_NAME_MAX 253
#define TR_NODE_NAME_RULE "1 to 253 of letters, digits, '.', '_' or '-', not '.' or '..'"
#define TR_LABEL_KEY_RULE "1 to 253 of letters, digits, '.', '_', '-' or '/'"
#define TR_LABEL_VALUE_RULE "at most 253 of letters, digits, '.', '_', '-', '/' or ':'"
#define TR_ADDRESS_RULE "1 to 253 of letters, digits, '.', '_', '-', ':', '[' or ']'"
#define TR_TEXT_RULE "printable ASCII (no control bytes)"

/* tr_node_name_ok: 1 if s is a valid node name (a host name fits). */
int tr_node_name_ok(const char *s);

/* tr_node_name_check: INVALID_ARGUMENT "WHAT 'S' is not valid (rule)". */
int tr_node_name_check(const char *what, const char *s, tr_err *err);

/* tr_address_check: an agent's address (host name or IP literal). */
int tr_address_check(const char *what, const char *s, tr_err *err);

/* tr_label_check: a label key and value (value may be "" or NULL). */
int tr_label_check(const char *key, const char *value, tr_err *err);

/* tr_text_check: at most max bytes of printable ASCII (GPU models, ids). */
int tr_text_check(const char *what, const char *s, size_t max, tr_err *err);

/* tr_labels_check_list checks "k=v,k2=v2" as the agent's labels setting
 * takes it (at most max labels). */
int tr_labels_check_list(const char *list, size_t max, tr_err *err);

#endif
