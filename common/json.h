/* json.h - minimal JSON writing for `-o json` output (stateless helpers). */
#ifndef TR_JSON_H
#define TR_JSON_H

#include <stdio.h>

/* tr_json_str writes s as a quoted, escaped JSON string ("null" for NULL). */
void tr_json_str(FILE *out, const char *s);

/* tr_json_strn writes len bytes of s (NULs included, escaped) as a JSON string. */
void tr_json_strn(FILE *out, const char *s, size_t len);

#endif
