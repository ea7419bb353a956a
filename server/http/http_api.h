/* http_api.h - /api/ (http_api.c). */
#ifndef TR_HTTP_API_H
#define TR_HTTP_API_H

#include "http.h"

/* tr_http_api answers an /api/ request: fills res (status, JSON body). The
 * HTTP worker's thread; takes h->mu to read. */
void tr_http_api(tr_head *h, const tr_http_req *req, tr_http_res *res);

#endif
