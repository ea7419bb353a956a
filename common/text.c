/* text.c - client text made safe to print (text.h). */
#include "text.h"

#include <string.h>

char *tr_text_escape(char *out, size_t size, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;

    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p != '\0'; p++) {
        char e[5] = {0};
        size_t len;
        if (*p >= 0x20 && *p < 0x7f && *p != '\\') {
            e[0] = (char)*p;
        } else if (*p == '\\' || *p == '\n' || *p == '\r' || *p == '\t') {
            e[0] = '\\';
            e[1] = *p == '\n' ? 'n' : *p == '\r' ? 'r' : *p == '\t' ? 't' : '\\';
        } else {
            e[0] = '\\';
            e[1] = 'x';
            e[2] = hex[*p >> 4];
            e[3] = hex[*p & 15];
        }
        len = strlen(e);
        if (n + len >= size) {
            break;
        }
        memcpy(out + n, e, len);
        n += len;
    }
    out[n] = '\0';
    return out;
}
