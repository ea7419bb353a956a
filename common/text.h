/* text.h - client text made safe to print (stateless: the CLI links it
 * beside libtroupe, as it does json.c). */
#ifndef TR_TEXT_H
#define TR_TEXT_H

#include <stddef.h>

/* tr_text_escape writes s into out (size > 0, always terminated) with every
 * byte that is not printable ASCII, and the backslash, escaped as \n, \r,
 * \t, \\ or \xNN: text a client sent can never start a line of its own or
 * drive the terminal. Cut to fit; returns out. */
char *tr_text_escape(char *out, size_t size, const char *s);

#endif
