/* http.h - troupe-head's HTTP side: /healthz, /metrics
 * (Prometheus text), /api/ (JSON) and the dashboard at /, on nng 1.5.2's HTTP
 * server. It sits above the core and the services and only reads them: the
 * head works the same with it off (`--http off`).
 *
 * Threads: nng's HTTP callbacks only queue a request; one thread of ours
 * builds every response, so a scrape never runs on (or blocks) the threads
 * that also carry the RPC server's callbacks, and a slow store read delays
 * HTTP, never RPC. A guard thread bounds connections in time and number
 * (http.c says why nng's server needs it). */
#ifndef TR_HTTP_H
#define TR_HTTP_H

#include <stdio.h>

#include "head.h"

typedef struct tr_http tr_http;

/* tr_http_start serves HTTP on h->cfg.http ("HOST:PORT", "http://HOST:PORT"
 * or "off") once the head serves RPC. On success *out is the server (NULL
 * when off) and h->http_url says where it listens. When the configured
 * address is the default and its port is taken (a second head on the
 * machine), it falls back to a free port on the same host and says so in
 * the log; an address given explicitly that cannot be bound is an error. */
int tr_http_start(tr_head *h, tr_http **out, tr_err *err);

/* tr_http_check_address checks the http setting (at config load):
 * INVALID_ARGUMENT naming the forms it takes. */
int tr_http_check_address(const char *setting, tr_err *err);

/* tr_http_stop stops serving and frees x; NULL is a no-op. Before
 * tr_head_stop. */
void tr_http_stop(tr_http *x);

/* ---- internals shared by the files of server/http ---------------------------------- */

/* A request as the worker thread sees it. */
typedef struct tr_http_req {
    const char *method; /* "GET", "POST" */
    const char *path;   /* without the query */
    const char *query;  /* after '?', "" if none */
    const void *body;
    size_t body_len;
} tr_http_req;

/* A response being built: body is an open_memstream. */
typedef struct tr_http_res {
    int status;
    const char *ctype;
    FILE *body;
    char *buf;
    size_t len;
    char location[256];   /* redirect target, "" for none */
    char set_cookie[1200]; /* Set-Cookie value, "" for none */
} tr_http_res;

/* tr_http_query_get copies the value of key in a query string (URL-decoded)
 * into buf; 1 if present. */
int tr_http_query_get(const char *query, const char *key, char *buf, size_t size);

/* The dashboard's assets, compiled in (dashboard.c, generated at build). */
typedef struct tr_http_asset {
    const char *path; /* "/", "/app.js", "/login" */
    const char *ctype;
    const unsigned char *data;
    size_t len;
} tr_http_asset;
extern const tr_http_asset tr_http_assets[]; /* ends with path NULL */

#endif
