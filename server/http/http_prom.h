/* http_prom.h - /metrics (http_prom.c). */
#ifndef TR_HTTP_PROM_H
#define TR_HTTP_PROM_H

#include <stdio.h>

/* Defined in head.h; named here so this header stands alone (C11 allows
 * the typedef twice). */
typedef struct tr_head tr_head;

/* tr_http_prom writes the Prometheus text exposition (version 0.0.4) of
 * the head to out. The HTTP worker's thread; takes h->mu to read. */
void tr_http_prom(tr_head *h, FILE *out);

#endif
