#include "json.h"

#include <string.h>

void tr_json_str(FILE *out, const char *s)
{
    if (s == NULL) {
        fputs("null", out);
        return;
    }
    tr_json_strn(out, s, strlen(s));
}

void tr_json_strn(FILE *out, const char *s, size_t len)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; p < (const unsigned char *)s + len; p++) {
        switch (*p) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (*p < 0x20 || *p == 0x7f) {
                fprintf(out, "\\u%04x", *p);
            } else {
                fputc(*p, out);
            }
        }
    }
    fputc('"', out);
}
