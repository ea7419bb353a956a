/* http.c - the head's HTTP server: routing, credentials, bounds.
 *
 * One nng handler takes every path and method; it queues the request for
 * the worker thread (at most QUEUE_MAX waiting, past that 503 at once), which
 * routes, checks the credential, builds the response and finishes the aio.
 *
 * Credentials: with a token configured, every path but /healthz, /login and
 * the login page's own needs an admin or user credential (the RPC layer's
 * checks: the admin token in constant time, minted ones through
 * tr_head_authenticate), given as "Authorization: Bearer CRED" or in the
 * HttpOnly cookie the login form sets. Node and worker credentials are
 * refused (403): they are for agents and workers, not people. Without a
 * token the head has no auth at all, for HTTP as for RPC.
 *
 * Bounds: a request body over MAX_BODY is answered 413 and its connection
 * closed, unread; a body must arrive within BODY_TIMEOUT_MS. nng 1.5.2
 * itself caps the request line and headers (its read buffer) and closes a
 * connection that exceeds it, without an answer. nng 1.5.2's server has no timeouts:
 * a client that sends half a request and waits holds its connection forever
 * (no thread, but a descriptor and a buffer). The guard thread below bounds
 * that from outside: once a second it looks at the head's own sockets whose
 * local end is the HTTP port and shuts down those idle (nothing received)
 * for http_idle_ms, those older than http_max_conn_ms, and the most idle ones
 * past http_max_conns. nng then sees the peer gone and frees the connection
 * itself. Keep-alive clients (browsers, Prometheus) just reconnect. */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "auth.h"
#include "http.h"
#include "http_api.h"
#include "http_prom.h"
#include "http_socks.h"
#include "log.h"
#include "rpc.h"
#include "util.h"

#define QUEUE_MAX 64
#define MAX_BODY 16384
#define BODY_TIMEOUT_MS 10000
#define COOKIE "troupe_token"
#define DEFAULT_HTTP "127.0.0.1:8470"

/* A request between nng's callback and its answer. A body (at most
 * MAX_BODY) is read by an aio of our own, with a deadline, before the
 * request is queued: nng 1.5.2 would read any body up to its own limit and
 * answer a larger one 400, and a client that sends its body slowly must not
 * hold the worker thread. */
typedef struct queued {
    tr_http *x;
    nng_aio *aio;  /* nng's, finished with the response */
    nng_aio *rd;   /* reads the body; NULL without one */
    char *body;
    size_t len;
    int read_rv;   /* the body read's result */
    struct queued *next;
    struct queued *rnext; /* on x->reading while its body is read */
} queued;

/* log_gate: one line per LOG_EVERY_MS at most for events a peer can cause
 * at will (one line per closed connection let one peer write 1,744 lines);
 * the events in between are counted and the next line says how many. */
#define LOG_EVERY_MS 10000
typedef struct log_gate {
    int64_t next_ms; /* no line before this */
    uint64_t held;   /* events since the last line */
} log_gate;

/* gate_pass: 1 if a line may be written now (*held: the events it sums up,
 * this one included); else counts the event. */
static int gate_pass(log_gate *g, int64_t now, uint64_t events, uint64_t *held)
{
    g->held += events;
    if (now < g->next_ms || g->held == 0) {
        return 0;
    }
    *held = g->held;
    g->held = 0;
    g->next_ms = now + LOG_EVERY_MS;
    return 1;
}

typedef struct conn_seen {
    ino_t ino;
    int64_t first_ms;
    int seen; /* in the latest scan */
} conn_seen;

struct tr_http {
    tr_head *h;
    nng_http_server *srv;
    nng_http_handler *handler;
    pthread_mutex_t mu;
    pthread_cond_t cv;  /* the worker's: a request queued, or stop */
    pthread_cond_t gcv; /* the guard's: stop */
    queued *head, **tail;
    size_t n_queued;
    queued *reading; /* bodies being read */
    int stop;
    pthread_t worker, guard;
    int started_worker, started_guard;
    /* the guard's view of the HTTP port */
    nng_sockaddr addr;
    conn_seen *conns;
    size_t n_conns, cap_conns;
    uint64_t closed_idle, closed_old, closed_excess;
    /* Log lines a stranger can cause (closed connections, refused
     * requests) are counted, and written at most once per LOG_EVERY_MS. */
    log_gate closes; /* the guard thread's */
    uint64_t logged_idle, logged_old, logged_excess; /* the totals at its last line */
    log_gate refusals; /* the worker thread's */
    log_gate logins;   /* the worker thread's */
};

/* ---- responses ------------------------------------------------------------ */

static void res_init(tr_http_res *res)
{
    memset(res, 0, sizeof(*res));
    res->status = 200;
    res->ctype = "text/plain; charset=utf-8";
    res->body = open_memstream(&res->buf, &res->len);
}

/* res_finish turns res into an nng response (NULL when out of memory). */
static nng_http_res *res_finish(tr_http_res *res, int close_conn)
{
    nng_http_res *r = NULL;

    if (res->body != NULL) {
        fclose(res->body);
        res->body = NULL;
    }
    if (nng_http_res_alloc(&r) != 0) {
        free(res->buf);
        return NULL;
    }
    nng_http_res_set_status(r, (uint16_t)res->status);
    nng_http_res_set_header(r, "Content-Type", res->ctype);
    nng_http_res_set_header(r, "Cache-Control", "no-store");
    nng_http_res_set_header(r, "X-Content-Type-Options", "nosniff");
    nng_http_res_set_header(r, "X-Frame-Options", "DENY");
    /* the dashboard is one HTML page and one script, both served here */
    nng_http_res_set_header(r, "Content-Security-Policy",
                            "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:");
    if (res->location[0] != '\0') {
        nng_http_res_set_header(r, "Location", res->location);
    }
    if (res->set_cookie[0] != '\0') {
        nng_http_res_set_header(r, "Set-Cookie", res->set_cookie);
    }
    if (res->status == 401) {
        nng_http_res_set_header(r, "WWW-Authenticate", "Bearer realm=\"troupe\"");
    }
    if (close_conn) {
        nng_http_res_set_header(r, "Connection", "close");
    }
    if (res->len == 0) {
        /* nng sets Content-Length only with data: without it a client
         * waits for the body until the connection closes */
        nng_http_res_set_header(r, "Content-Length", "0");
    } else if (nng_http_res_copy_data(r, res->buf, res->len) != 0) {
        nng_http_res_free(r);
        r = NULL;
    }
    free(res->buf);
    res->buf = NULL;
    return r;
}

static void res_error(tr_http_res *res, int status, const char *msg)
{
    res->status = status;
    res->ctype = "text/plain; charset=utf-8";
    fprintf(res->body, "%d %s\n", status, msg);
}

/* ---- helpers ---------------------------------------------------------------- */

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* url_decode decodes n bytes of s ("+" is a space, as forms send it). */
static void url_decode(const char *s, size_t n, char *buf, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < size; i++) {
        if (s[i] == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
            buf[o++] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            i += 2;
        } else {
            buf[o++] = s[i] == '+' ? ' ' : s[i];
        }
    }
    buf[o] = '\0';
}

int tr_http_query_get(const char *query, const char *key, char *buf, size_t size)
{
    size_t klen = strlen(key);
    const char *p = query;

    while (p != NULL && *p != '\0') {
        const char *end = strchr(p, '&');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
            url_decode(p + klen + 1, n - klen - 1, buf, size);
            return 1;
        }
        p = end ? end + 1 : NULL;
    }
    return 0;
}

/* cookie_get copies the value of cookie name from a Cookie header. */
static int cookie_get(const char *header, const char *name, char *buf, size_t size)
{
    size_t nlen = strlen(name);
    const char *p = header;

    while (p != NULL && *p != '\0') {
        while (*p == ' ' || *p == ';') {
            p++;
        }
        if (strncmp(p, name, nlen) == 0 && p[nlen] == '=') {
            const char *v = p + nlen + 1;
            size_t n = strcspn(v, ";");
            if (n + 1 > size) {
                return 0;
            }
            url_decode(v, n, buf, size); /* cookie_set encoded it */
            return 1;
        }
        p = strchr(p, ';');
    }
    return 0;
}

/* ---- credentials -------------------------------------------------------------- */

/* check_credential: 200 (allowed), 401 (none, wrong, expired) or 403 (a
 * node or worker credential), with the RPC layer's checks. */
static int check_credential(tr_head *h, const char *cred, const char **why)
{
    tr_rpc_principal p;
    tr_err err;

    if (cred == NULL || cred[0] == '\0') {
        *why = "a credential is needed: Authorization: Bearer CRED, or log in at /login";
        return 401;
    }
    if (tr_ct_equal(cred, h->cfg.token)) {
        return 200;
    }
    if (tr_head_authenticate(h, cred, &p, &err) != TROUPE_OK) {
        *why = "wrong, revoked or expired credential";
        return 401;
    }
    if ((p.scope & TR_SCOPES_USER) == 0) {
        *why = "this credential's scope may not read the cluster over HTTP (needs scope user or admin)";
        return 403;
    }
    return 200;
}

/* request_credential: the bearer token, else the login cookie. */
static int request_credential(nng_http_req *req, char *buf, size_t size)
{
    const char *a = nng_http_req_get_header(req, "Authorization");
    const char *c = nng_http_req_get_header(req, "Cookie");

    if (a != NULL && strncasecmp(a, "Bearer ", 7) == 0) {
        return tr_strlcpy(buf, a + 7, size) < size;
    }
    return c != NULL && cookie_get(c, COOKIE, buf, size);
}

static int needs_no_credential(const char *path)
{
    return strcmp(path, "/healthz") == 0 || strcmp(path, "/login") == 0 || strcmp(path, "/login.js") == 0 ||
           strcmp(path, "/logout") == 0 ||
           strcmp(path, "/style.css") == 0;
}

static void cookie_set(tr_http_res *res, const char *cred)
{
    size_t o = (size_t)snprintf(res->set_cookie, sizeof(res->set_cookie), "%s=", COOKIE);
    for (const unsigned char *p = (const unsigned char *)cred; *p != '\0' && o + 4 < sizeof(res->set_cookie); p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("._-~", *p)) {
            res->set_cookie[o++] = (char)*p;
        } else {
            o += (size_t)snprintf(res->set_cookie + o, sizeof(res->set_cookie) - o, "%%%02X", *p);
        }
    }
    snprintf(res->set_cookie + o, sizeof(res->set_cookie) - o, "; Path=/; HttpOnly; SameSite=Strict");
}

/* login handles POST /login (form field "token"): a good credential sets
 * the HttpOnly cookie and sends the browser to the dashboard. */
static void login(tr_http *x, const tr_http_req *rq, tr_http_res *res)
{
    tr_head *h = x->h;
    char form[MAX_BODY + 1], cred[1024];
    const char *why = "";
    int st;

    if (rq->body_len > 0) {
        memcpy(form, rq->body, rq->body_len);
    }
    form[rq->body_len] = '\0';
    if (!tr_http_query_get(form, "token", cred, sizeof(cred))) {
        res_error(res, 400, "the form has no token field");
        return;
    }
    st = h->cfg.token == NULL || h->cfg.token[0] == '\0' ? 200 : check_credential(h, cred, &why);
    if (st != 200) {
        uint64_t held = 0;
        if (gate_pass(&x->logins, tr_now_ms(), 1, &held)) { /* a guesser must not flood the log either */
            TR_LOG(TR_LOG_WARNING, "http: refused login: %s (%llu logins refused since the last such line, one line "
                   "per %d s at most)", why, (unsigned long long)held, LOG_EVERY_MS / 1000);
        }
        res->status = 303;
        tr_strlcpy(res->location, "/login?failed=1", sizeof(res->location));
        return;
    }
    /* The credential itself is the cookie (percent-encoded: an admin token
     * may hold any byte): HttpOnly keeps it from scripts, SameSite=Strict
     * from other sites' requests. */
    cookie_set(res, cred);
    res->status = 303;
    tr_strlcpy(res->location, "/", sizeof(res->location));
}

/* ---- routing ------------------------------------------------------------------ */

static const tr_http_asset *asset_of(const char *path)
{
    for (const tr_http_asset *a = tr_http_assets; a->path != NULL; a++) {
        if (strcmp(a->path, path) == 0) {
            return a;
        }
    }
    return NULL;
}

static void route(tr_http *x, const tr_http_req *rq, tr_http_res *res)
{
    const tr_http_asset *a;
    int get = strcmp(rq->method, "GET") == 0 || strcmp(rq->method, "HEAD") == 0;

    if (strcmp(rq->path, "/healthz") == 0 && get) {
        fprintf(res->body, "ok\n");
    } else if (strcmp(rq->path, "/metrics") == 0 && get) {
        res->ctype = "text/plain; version=0.0.4; charset=utf-8";
        tr_http_prom(x->h, res->body);
    } else if (strncmp(rq->path, "/api/", 5) == 0 && get) {
        tr_http_api(x->h, rq, res);
    } else if (strcmp(rq->path, "/login") == 0 && strcmp(rq->method, "POST") == 0) {
        login(x, rq, res);
    } else if (strcmp(rq->path, "/logout") == 0) {
        snprintf(res->set_cookie, sizeof(res->set_cookie), "%s=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
                 COOKIE);
        res->status = 303;
        tr_strlcpy(res->location, "/login", sizeof(res->location));
    } else if ((a = asset_of(rq->path)) != NULL && get) {
        res->ctype = a->ctype;
        fwrite(a->data, 1, a->len, res->body);
    } else if (a != NULL || strcmp(rq->path, "/metrics") == 0 || strcmp(rq->path, "/healthz") == 0 ||
               strncmp(rq->path, "/api/", 5) == 0) {
        res_error(res, 405, "method not allowed");
    } else {
        res_error(res, 404, "not found");
    }
}

/* serve builds the response to one request (worker thread). */
static nng_http_res *serve(tr_http *x, nng_http_req *req, const char *body, size_t body_len)
{
    tr_http_req rq = {0};
    tr_http_res res;
    char uri[2048], cred[1024];
    const char *why = "";
    char *q;
    int close_conn = 0;

    res_init(&res);
    if (res.body == NULL) {
        return NULL;
    }
    tr_strlcpy(uri, nng_http_req_get_uri(req), sizeof(uri));
    q = strchr(uri, '?');
    if (q != NULL) {
        *q++ = '\0';
    }
    rq.method = nng_http_req_get_method(req);
    rq.path = uri;
    rq.query = q ? q : "";
    rq.body = body;
    rq.body_len = body_len;
    if (x->h->cfg.token != NULL && x->h->cfg.token[0] != '\0' && !needs_no_credential(rq.path)) {
        int st = request_credential(req, cred, sizeof(cred)) ? check_credential(x->h, cred, &why)
                                                               : check_credential(x->h, "", &why);
        if (st != 200) {
            uint64_t held = 0;
            if (gate_pass(&x->refusals, tr_now_ms(), 1, &held)) {
                TR_LOG(TR_LOG_INFO, "http: %d %s %s: %s (%llu requests refused since the last such line, one line "
                       "per %d s at most)", st, rq.method, rq.path, why, (unsigned long long)held, LOG_EVERY_MS / 1000);
            }
            if (st == 401 && strcmp(rq.path, "/") == 0) {
                res.status = 303; /* a person at the dashboard: to the login form */
                tr_strlcpy(res.location, "/login", sizeof(res.location));
            } else {
                res_error(&res, st, why);
            }
            return res_finish(&res, close_conn);
        }
    }
    route(x, &rq, &res);
    return res_finish(&res, close_conn);
}

/* ---- the queue and its thread --------------------------------------------------- */

/* answer_now answers from nng's callback, without queueing. */
static void answer_now(nng_aio *aio, uint16_t status, int close_conn)
{
    nng_http_res *r = NULL;

    if (nng_http_res_alloc_error(&r, status) != 0) {
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    if (status == 503) {
        nng_http_res_set_header(r, "Retry-After", "1");
    }
    if (close_conn) {
        nng_http_res_set_header(r, "Connection", "close");
    }
    nng_aio_set_output(aio, 0, r);
    nng_aio_finish(aio, 0);
}

/* enqueue hands qd to the worker (under x->mu). */
static void enqueue(tr_http *x, queued *qd)
{
    *x->tail = qd;
    x->tail = &qd->next;
    x->n_queued++;
    pthread_cond_signal(&x->cv);
}

static void body_read(void *arg)
{
    queued *qd = arg;
    tr_http *x = qd->x;

    pthread_mutex_lock(&x->mu);
    qd->read_rv = nng_aio_result(qd->rd);
    for (queued **pp = &x->reading; *pp != NULL; pp = &(*pp)->rnext) {
        if (*pp == qd) {
            *pp = qd->rnext;
            break;
        }
    }
    enqueue(x, qd);
    pthread_cond_broadcast(&x->cv); /* a stopping worker waits for reads to end */
    pthread_mutex_unlock(&x->mu);
}

/* start_body_read: 0 when the read is under way. */
static int start_body_read(tr_http *x, queued *qd, nng_aio *aio, size_t len)
{
    nng_iov iov;

    if ((qd->body = malloc(len)) == NULL || nng_aio_alloc(&qd->rd, body_read, qd) != 0) {
        return -1;
    }
    qd->len = len;
    iov.iov_buf = qd->body;
    iov.iov_len = len;
    nng_aio_set_iov(qd->rd, 1, &iov);
    nng_aio_set_timeout(qd->rd, BODY_TIMEOUT_MS);
    qd->rnext = x->reading;
    x->reading = qd;
    nng_http_conn_read_all(nng_aio_get_input(aio, 2), qd->rd);
    return 0;
}

static void qd_free(queued *qd)
{
    if (qd->rd != NULL) {
        nng_aio_free(qd->rd);
    }
    free(qd->body);
    free(qd);
}

static void on_request(nng_aio *aio)
{
    nng_http_handler *hd = nng_aio_get_input(aio, 1);
    nng_http_req *req = nng_aio_get_input(aio, 0);
    tr_http *x = nng_http_handler_get_data(hd);
    const char *cl = nng_http_req_get_header(req, "Content-Length");
    unsigned long long len = cl ? strtoull(cl, NULL, 10) : 0;
    queued *qd = NULL;
    uint16_t status = 503;

    if (len > MAX_BODY || nng_http_req_get_header(req, "Transfer-Encoding") != NULL) {
        /* The body is never read: the connection closes after the answer. */
        answer_now(aio, len > MAX_BODY ? 413 : 411, 1);
        return;
    }
    pthread_mutex_lock(&x->mu);
    if (!x->stop && x->n_queued < QUEUE_MAX && (qd = calloc(1, sizeof(*qd))) != NULL) {
        qd->x = x;
        qd->aio = aio;
        if (len == 0) {
            enqueue(x, qd);
        } else if (start_body_read(x, qd, aio, (size_t)len) != 0) {
            qd_free(qd);
            qd = NULL;
            status = 500;
        }
    }
    pthread_mutex_unlock(&x->mu);
    if (qd == NULL) {
        answer_now(aio, status, 0); /* busy or stopping: answered without building anything */
    }
}

static void *worker_main(void *arg)
{
    tr_http *x = arg;

    pthread_mutex_lock(&x->mu);
    for (;;) {
        queued *qd;
        nng_http_res *r;
        while (x->head == NULL && (!x->stop || x->reading != NULL)) {
            if (x->stop) { /* bodies still being read: cut them short, they queue themselves */
                for (queued *r = x->reading; r != NULL; r = r->rnext) {
                    nng_aio_cancel(r->rd);
                }
            }
            pthread_cond_wait(&x->cv, &x->mu);
        }
        if ((qd = x->head) == NULL) {
            break;
        }
        x->head = qd->next;
        if (x->head == NULL) {
            x->tail = &x->head;
        }
        x->n_queued--;
        pthread_mutex_unlock(&x->mu);
        /* Even when stopping, answer what was queued: nng waits for every
         * request it handed out before it frees a connection. */
        if (qd->read_rv != 0) {
            /* the body did not come in time (or the peer left): close */
            TR_LOG(TR_LOG_INFO, "http: request body not read: %s", nng_strerror(qd->read_rv));
            nng_aio_finish(qd->aio, qd->read_rv);
            qd_free(qd);
            pthread_mutex_lock(&x->mu);
            continue;
        }
        r = serve(x, nng_aio_get_input(qd->aio, 0), qd->body, qd->len);
        if (r != NULL) {
            nng_aio_set_output(qd->aio, 0, r);
            nng_aio_finish(qd->aio, 0);
        } else {
            nng_aio_finish(qd->aio, NNG_ENOMEM);
        }
        qd_free(qd);
        pthread_mutex_lock(&x->mu);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

/* ---- the connection guard ---------------------------------------------------------- */

static conn_seen *conn_track(tr_http *x, ino_t ino, int64_t now)
{
    for (size_t i = 0; i < x->n_conns; i++) {
        if (x->conns[i].ino == ino) {
            x->conns[i].seen = 1;
            return &x->conns[i];
        }
    }
    if (x->n_conns == x->cap_conns) {
        size_t cap = x->cap_conns ? x->cap_conns * 2 : 64;
        conn_seen *n = realloc(x->conns, cap * sizeof(*n));
        if (n == NULL) {
            return NULL;
        }
        x->conns = n;
        x->cap_conns = cap;
    }
    x->conns[x->n_conns] = (conn_seen){ino, now, 1};
    return &x->conns[x->n_conns++];
}

/* guard_close shuts the socket down if fd still holds it (nng may have
 * closed it and the number been reused since the scan looked); 1 if it did. */
static int guard_close(const tr_http_sock *sk)
{
    struct stat st;
    if (sk->fd >= 0 && fstat(sk->fd, &st) == 0 && st.st_ino == sk->ino) {
        shutdown(sk->fd, SHUT_RDWR);
        return 1;
    }
    return 0;
}

/* closes_log writes the guard's summary line when its gate lets it: what it
 * closed since the last line, by reason (the counters are totals). */
static void closes_log(tr_http *x, int64_t now, uint64_t closed)
{
    uint64_t held = 0;

    if (!gate_pass(&x->closes, now, closed, &held)) {
        return;
    }
    TR_LOG(TR_LOG_INFO,
           "http: closed %llu connections since the last such line: %llu idle too long (http_idle_ms=%lld), "
           "%llu open too long (http_max_conn_ms=%lld), %llu over http_max_conns=%lld (one line per %d s at most)",
           (unsigned long long)held, (unsigned long long)(x->closed_idle - x->logged_idle),
           (long long)x->h->cfg.http_idle_ms, (unsigned long long)(x->closed_old - x->logged_old),
           (long long)x->h->cfg.http_max_conn_ms, (unsigned long long)(x->closed_excess - x->logged_excess),
           (long long)x->h->cfg.http_max_conns, LOG_EVERY_MS / 1000);
    x->logged_idle = x->closed_idle;
    x->logged_old = x->closed_old;
    x->logged_excess = x->closed_excess;
}

static int by_idle_desc(const void *a, const void *b)
{
    uint32_t x = ((const tr_http_sock *)a)->idle_ms, y = ((const tr_http_sock *)b)->idle_ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* guard_scan closes the connections idle past http_idle_ms, open past
 * http_max_conn_ms, and the most idle beyond http_max_conns. The
 * connections come from http_socks (the kernel's socket diagnostics);
 * descriptors are looked up only for the ones to close. */
static void guard_scan(tr_http *x)
{
    const tr_head_config *c = &x->h->cfg;
    int64_t now = tr_now_ms();
    tr_http_sock *sk = NULL;
    size_t n = 0, n_close = 0, n_live = 0, kept = 0;
    const char **why;

    if (tr_http_socks_list(&x->addr, 0, &sk, &n) < 0) {
        return; /* looked again in a second */
    }
    if (n == 0 || (why = calloc(n, sizeof(*why))) == NULL) {
        x->n_conns = n == 0 ? 0 : x->n_conns; /* none open: forget them all */
        free(sk);
        closes_log(x, now, 0); /* what the last lines left out */
        return;
    }
    for (size_t i = 0; i < x->n_conns; i++) {
        x->conns[i].seen = 0;
    }
    /* Those past a time bound first; the rest are live, in front. */
    for (size_t i = 0; i < n; i++) {
        conn_seen *cs = conn_track(x, sk[i].ino, now);
        if (sk[i].idle_ms > (uint32_t)c->http_idle_ms) {
            x->closed_idle++;
            why[i] = "idle too long";
        } else if (cs != NULL && now - cs->first_ms > c->http_max_conn_ms) {
            x->closed_old++;
            why[i] = "open too long";
        } else {
            tr_http_sock t = sk[n_live];
            const char *tw = why[n_live];
            sk[n_live] = sk[i];
            why[n_live] = NULL;
            sk[i] = t;
            why[i] = tw;
            n_live++;
        }
    }
    if (n_live > (size_t)c->http_max_conns) { /* the most idle go first */
        qsort(sk, n_live, sizeof(sk[0]), by_idle_desc);
        for (size_t i = 0; i < n_live - (size_t)c->http_max_conns; i++) {
            x->closed_excess++;
            why[i] = "over http_max_conns";
        }
    }
    for (size_t i = 0; i < n; i++) {
        n_close += why[i] != NULL;
    }
    if (n_close > 0) {
        tr_http_socks_find_fds(sk, n);
        for (size_t i = 0; i < n; i++) {
            if (why[i] != NULL) {
                guard_close(&sk[i]);
            }
        }
    }
    closes_log(x, now, n_close);
    for (size_t i = 0; i < x->n_conns; i++) { /* forget closed ones */
        if (x->conns[i].seen) {
            x->conns[kept++] = x->conns[i];
        }
    }
    x->n_conns = kept;
    free(why);
    free(sk);
}

static void *guard_main(void *arg)
{
    tr_http *x = arg;

    pthread_mutex_lock(&x->mu);
    while (!x->stop) {
        struct timespec ts;
        tr_abstime_in(&ts, x->h->cfg.http_idle_ms < 2000 ? 200 : 1000);
        pthread_cond_timedwait(&x->gcv, &x->mu, &ts);
        if (x->stop) {
            break;
        }
        pthread_mutex_unlock(&x->mu);
        guard_scan(x);
        pthread_mutex_lock(&x->mu);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

/* ---- start and stop ---------------------------------------------------------------- */

/* listen_url makes "http://HOST:PORT" of the setting. */
static int listen_url(const char *setting, char *url, size_t size, tr_err *err)
{
    const char *hp = strncmp(setting, "http://", 7) == 0 ? setting + 7 : setting;
    const char *colon = strrchr(hp, ':');

    if (colon == NULL || colon == hp || colon[1] == '\0' || strspn(colon + 1, "0123456789") != strlen(colon + 1) ||
        strchr(hp, '/') != NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "http '%s': use HOST:PORT (e.g. 127.0.0.1:8470) or off",
                          setting);
    }
    snprintf(url, size, "http://%s", hp);
    return TROUPE_OK;
}

int tr_http_check_address(const char *setting, tr_err *err)
{
    char url[512];
    return setting == NULL || strcmp(setting, "off") == 0 ? TROUPE_OK : listen_url(setting, url, sizeof(url), err);
}

static int serve_on(tr_http *x, const char *url, tr_err *err)
{
    nng_url *u = NULL;
    int rv;

    if ((rv = nng_url_parse(&u, url)) != 0) {
        return tr_rpc_from_nng(rv, url, err);
    }
    rv = nng_http_server_hold(&x->srv, u);
    nng_url_free(u);
    if (rv != 0) {
        return tr_rpc_from_nng(rv, url, err);
    }
    if ((rv = nng_http_handler_alloc(&x->handler, "/", on_request)) != 0 ||
        (rv = nng_http_handler_set_method(x->handler, NULL)) != 0 ||
        (rv = nng_http_handler_set_tree(x->handler)) != 0 ||
        (rv = nng_http_handler_collect_body(x->handler, false, 0)) != 0 ||
        (rv = nng_http_handler_set_data(x->handler, x, NULL)) != 0 ||
        (rv = nng_http_server_add_handler(x->srv, x->handler)) != 0) {
        return tr_rpc_from_nng(rv, "http handler", err);
    }
    x->handler = NULL; /* the server owns it now */
    if ((rv = nng_http_server_start(x->srv)) != 0) {
        return tr_rpc_from_nng(rv, url, err);
    }
    return TROUPE_OK;
}

static void release(tr_http *x)
{
    if (x->handler != NULL) {
        nng_http_handler_free(x->handler);
        x->handler = NULL;
    }
    if (x->srv != NULL) {
        nng_http_server_release(x->srv);
        x->srv = NULL;
    }
}

static int start_threads(tr_http *x, tr_err *err)
{
    if (pthread_create(&x->worker, NULL, worker_main, x) != 0) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot start the HTTP thread");
    }
    x->started_worker = 1;
    if (pthread_create(&x->guard, NULL, guard_main, x) != 0) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot start the HTTP connection guard");
    }
    x->started_guard = 1;
    return TROUPE_OK;
}

int tr_http_start(tr_head *h, tr_http **out, tr_err *err)
{
    tr_http *x;
    char url[512];
    char host[INET6_ADDRSTRLEN];
    int rv;

    *out = NULL;
    h->http_url[0] = '\0';
    if (strcmp(h->cfg.http, "off") == 0) {
        TR_LOG(TR_LOG_NOTICE, "http off");
        return TROUPE_OK;
    }
    if ((rv = listen_url(h->cfg.http, url, sizeof(url), err)) != TROUPE_OK) {
        return rv;
    }
    if ((x = calloc(1, sizeof(*x))) == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    x->h = h;
    x->tail = &x->head;
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    pthread_cond_init(&x->gcv, NULL);
    if ((rv = start_threads(x, err)) != TROUPE_OK) {
        tr_http_stop(x);
        return rv;
    }
    rv = serve_on(x, url, err);
    if (rv != TROUPE_OK && strcmp(h->cfg.http, DEFAULT_HTTP) == 0) {
        /* The default port is taken (another head on this machine): serve
         * on a free one rather than not at all; the log and `troupe
         * status` say where. */
        TR_LOG(TR_LOG_WARNING, "http: cannot serve on the default %s (%s); using a free port instead", url, err->msg);
        release(x);
        rv = serve_on(x, "http://127.0.0.1:0", err);
    }
    if (rv == TROUPE_OK && (rv = nng_http_server_get_addr(x->srv, &x->addr)) != 0) {
        rv = tr_rpc_from_nng(rv, "http address", err);
    }
    if (rv != TROUPE_OK) {
        tr_err_prefix(err, "http: cannot serve");
        tr_http_stop(x);
        return rv;
    }
    if (x->addr.s_family == NNG_AF_INET6) {
        inet_ntop(AF_INET6, x->addr.s_in6.sa_addr, host, sizeof(host));
        snprintf(h->http_url, sizeof(h->http_url), "http://[%s]:%u", host, ntohs(x->addr.s_in6.sa_port));
    } else {
        inet_ntop(AF_INET, &x->addr.s_in.sa_addr, host, sizeof(host));
        snprintf(h->http_url, sizeof(h->http_url), "http://%s:%u", host, ntohs(x->addr.s_in.sa_port));
    }
    TR_LOG(TR_LOG_NOTICE, "http serving url=%s auth=%s (/metrics, /api/, dashboard at /)", h->http_url,
           h->cfg.token && h->cfg.token[0] ? "token" : "none");
    *out = x;
    return TROUPE_OK;
}

void tr_http_stop(tr_http *x)
{
    if (x == NULL) {
        return;
    }
    if (x->srv != NULL) {
        nng_http_server_stop(x->srv);
    }
    pthread_mutex_lock(&x->mu);
    x->stop = 1;
    pthread_cond_broadcast(&x->cv);
    pthread_cond_broadcast(&x->gcv);
    pthread_mutex_unlock(&x->mu);
    if (x->started_worker) {
        pthread_join(x->worker, NULL); /* answers what is still queued first */
    }
    if (x->started_guard) {
        pthread_join(x->guard, NULL);
    }
    release(x);
    x->h->http_url[0] = '\0';
    free(x->conns);
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->cv);
    pthread_cond_destroy(&x->gcv);
    free(x);
}
