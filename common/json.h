/* json.h - minimal JSON writing for `-o json` output (stateless helpers). */
#ifndef TR_JSON_H
#define TR_JSON_H

#include <stdio.h>

/* tr_json_str writes s as a quoted, escaped JSON string ("null" for NULL). */
void tr_json_str(FILE *out, const char *s);

#endif
