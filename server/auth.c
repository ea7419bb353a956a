/* auth.c - troupe-head's credentials (see auth.h for the kinds and formats).
 *
 * The minted user/node credentials live in a small table guarded by its own
 * mutex (auth checks run on every call, concurrently, and must not queue
 * behind h->mu); each change rewrites STATE_DIR/credentials whole, through a
 * temporary file and rename, before the caller is answered. The file holds
 * hashes only: a copy of the state dir does not give anyone a credential. */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mbedtls/md.h>
#include <mbedtls/sha256.h>

#include "head.h"
#include "jobs.h"
#include "log.h"
#include "safefile.h"
#include "troupe/v1/auth.pb-c.h"
#include "util.h"

#define KEY_LEN 32
#define SECRET_LEN 32 /* random bytes in a minted secret (64 hex digits) */

typedef struct cred {
    uint64_t id;
    unsigned scope; /* TR_SCOPE_USER or TR_SCOPE_NODE */
    int64_t expires_ms;
    uint8_t hash[32]; /* SHA-256 of the secret's text */
} cred;

struct tr_auth {
    pthread_mutex_t mu;
    uint8_t key[KEY_LEN];
    char path[4096]; /* STATE_DIR/credentials */
    cred *creds;
    size_t n_creds, cap_creds;
    uint64_t next_id;
    /* Changes with every change of creds (from a counter shared by every
     * tr_auth, so two heads in one process never share a value): what
     * check_minted's per-thread memory was verified against. */
    atomic_uint_least64_t gen;
};

static atomic_uint_least64_t gen_next = 1;

/* creds_changed: the table changed (caller holds a->mu). */
static void creds_changed(tr_auth *a)
{
    atomic_store(&a->gen, atomic_fetch_add(&gen_next, 1));
}

/* The minted credential last verified on this thread. An agent presents the
 * same one on every call, two a second, and the agents of a Slurm allocation
 * share one: a SHA-256 per call was 2.5% of the head's time with 5,000
 * agents. A hit needs the whole text equal (compared in constant time), the
 * table unchanged since (a revoke changes gen) and the credential not
 * expired; anything else is checked in full, as before. */
static _Thread_local struct {
    uint64_t gen; /* 0 = empty */
    size_t len;
    char token[TR_AUTH_TOKEN_MAX];
    tr_rpc_principal who;
    int64_t expires_ms;
} verified;

static void hex_encode(const uint8_t *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_decode(const char *in, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(in + 2 * i, "%2x", &v) != 1) {
            return -1;
        }
        out[i] = (uint8_t)v;
    }
    return in[2 * n] == '\0' || in[2 * n] == '\n' ? 0 : -1;
}

/* ct_equal_bytes compares in time independent of where the bytes differ. */
static int ct_equal_bytes(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint8_t diff = 0;
    for (size_t i = 0; i < n; i++) {
        diff |= (uint8_t)(a[i] ^ b[i]);
    }
    return diff == 0;
}

static void sha256(const char *text, uint8_t out[32])
{
    mbedtls_sha256_ret((const unsigned char *)text, strlen(text), out, 0);
}

/* worker_mac writes HMAC-SHA256(key, "tr1.w.JOB.ATTEMPT") as hex. */
static void worker_mac(const uint8_t *key, uint64_t job, uint32_t attempt, char hex[65])
{
    char msg[64];
    uint8_t mac[32];
    int n = snprintf(msg, sizeof(msg), "tr1.w.%" PRIu64 ".%" PRIu32, job, attempt);

    mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), key, KEY_LEN, (const unsigned char *)msg,
                    (size_t)n, mac);
    hex_encode(mac, sizeof(mac), hex);
}

void tr_auth_worker_credential(const tr_auth *a, uint64_t job_id, uint32_t attempt, char *buf, size_t size)
{
    char mac[65];
    worker_mac(a->key, job_id, attempt, mac);
    snprintf(buf, size, "tr1.w.%" PRIu64 ".%" PRIu32 ".%s", job_id, attempt, mac);
}

/* ---- the credentials file ---------------------------------------------- */

/* save writes the table to a temporary file and renames it into place, so a
 * crash leaves the old file or the new one. Caller holds a->mu. */
static int save(tr_auth *a, tr_err *err)
{
    size_t cap = 128 + a->n_creds * 120, used = 0;
    char *buf = malloc(cap);
    int rv;

    if (buf == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    used += (size_t)snprintf(buf + used, cap - used,
                             "# troupe-head minted credentials: id scope expires_ms sha256(secret)\n"
                             "next %" PRIu64 "\n",
                             a->next_id);
    for (size_t i = 0; i < a->n_creds; i++) {
        char hex[65];
        hex_encode(a->creds[i].hash, 32, hex);
        used += (size_t)snprintf(buf + used, cap - used, "%" PRIu64 " %s %" PRId64 " %s\n", a->creds[i].id,
                                 tr_rpc_scope_name(a->creds[i].scope), a->creds[i].expires_ms, hex);
    }
    rv = tr_file_replace_private(a->path, buf, used, err);
    free(buf);
    return rv;
}

static int add_cred(tr_auth *a, const cred *c)
{
    if (a->n_creds == a->cap_creds) {
        size_t cap = a->cap_creds ? a->cap_creds * 2 : 16;
        cred *p = realloc(a->creds, cap * sizeof(*p));
        if (p == NULL) {
            return -1;
        }
        a->creds = p;
        a->cap_creds = cap;
    }
    a->creds[a->n_creds++] = *c;
    creds_changed(a);
    return 0;
}

/* parse_line reads one "id scope expires hash" line; -1 when malformed. */
static int parse_line(const char *line, cred *c)
{
    char scope[16], hex[80];
    memset(c, 0, sizeof(*c));
    if (sscanf(line, "%" SCNu64 " %15s %" SCNd64 " %79s", &c->id, scope, &c->expires_ms, hex) != 4 ||
        strlen(hex) != 64 || hex_decode(hex, c->hash, 32) != 0) {
        return -1;
    }
    c->scope = strcmp(scope, "user") == 0 ? TR_SCOPE_USER : strcmp(scope, "node") == 0 ? TR_SCOPE_NODE : 0;
    return c->scope ? 0 : -1;
}

static int load(tr_auth *a, tr_err *err)
{
    char *text = NULL, *line, *save_ptr = NULL;
    size_t len = 0;
    int lineno = 0;
    int rv = tr_file_read_private(a->path, 1 << 24, &text, &len, err);

    if (rv == TROUPE_NOT_FOUND) {
        return TROUPE_OK;
    }
    if (rv != TROUPE_OK) {
        return rv;
    }
    for (line = strtok_r(text, "\n", &save_ptr); line != NULL; line = strtok_r(NULL, "\n", &save_ptr)) {
        cred c;
        lineno++;
        if (line[0] == '#' || line[0] == '\0') {
            continue;
        }
        if (sscanf(line, "next %" SCNu64, &a->next_id) == 1) {
            continue;
        }
        if (parse_line(line, &c) != 0 || add_cred(a, &c) != 0) {
            rv = tr_err_set(err, TROUPE_DATA_LOSS, "%s:%d: malformed credential record", a->path, lineno);
            break;
        }
        if (c.id >= a->next_id) {
            a->next_id = c.id + 1;
        }
    }
    free(text);
    return rv;
}

static int load_key(tr_auth *a, const char *state_dir, tr_err *err)
{
    char path[4096], *text = NULL;
    size_t len = 0;
    int rv;

    snprintf(path, sizeof(path), "%s/worker.key", state_dir);
    rv = tr_file_read_private(path, 4096, &text, &len, err);
    if (rv == TROUPE_OK) {
        if (len < 2 * KEY_LEN || hex_decode(text, a->key, KEY_LEN) != 0) {
            rv = tr_err_set(err, TROUPE_DATA_LOSS, "%s: not a worker key (64 hex digits); remove it to make "
                                                   "a new one (running workers' credentials stop working)",
                            path);
        }
        free(text);
        return rv;
    }
    if (rv != TROUPE_NOT_FOUND) {
        return rv;
    }
    char hex[2 * KEY_LEN + 2];
    if (getrandom(a->key, KEY_LEN, 0) != KEY_LEN) {
        return tr_err_set(err, TROUPE_INTERNAL, "getrandom: %s", strerror(errno));
    }
    hex_encode(a->key, KEY_LEN, hex);
    strcat(hex, "\n");
    return tr_file_replace_private(path, hex, strlen(hex), err);
}

int tr_auth_open(const char *state_dir, tr_auth **out, tr_err *err)
{
    tr_auth *a = calloc(1, sizeof(*a));
    int rv;

    *out = NULL;
    if (a == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    pthread_mutex_init(&a->mu, NULL);
    a->next_id = 1;
    creds_changed(a);
    snprintf(a->path, sizeof(a->path), "%s/credentials", state_dir);
    if ((rv = load_key(a, state_dir, err)) != TROUPE_OK || (rv = load(a, err)) != TROUPE_OK) {
        tr_auth_close(a);
        return rv;
    }
    *out = a;
    return TROUPE_OK;
}

void tr_auth_close(tr_auth *a)
{
    if (a == NULL) {
        return;
    }
    memset(a->key, 0, sizeof(a->key));
    free(a->creds);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* ---- checking a presented credential ----------------------------------- */

/* remembered: whether token is the one this thread verified last, against
 * the table as it is now, and still unexpired. */
static int remembered(const tr_auth *a, const char *token, size_t len, tr_rpc_principal *out)
{
    if (verified.gen == 0 || verified.gen != atomic_load(&a->gen) || verified.len != len ||
        !ct_equal_bytes((const uint8_t *)verified.token, (const uint8_t *)token, len) ||
        (verified.expires_ms != 0 && tr_wall_ms() >= verified.expires_ms)) {
        return 0;
    }
    *out = verified.who;
    return 1;
}

static int check_minted(tr_auth *a, unsigned scope, const char *token, const char *rest, tr_rpc_principal *out,
                        tr_err *err)
{
    char *end;
    uint64_t id = strtoull(rest, &end, 10);
    uint8_t hash[32];
    size_t len = strlen(token);
    uint64_t gen = 0;
    int64_t expires_ms = 0;
    int found = 0;

    if (end == rest || *end != '.' || strlen(end + 1) != 2 * SECRET_LEN) {
        return tr_err_set(err, TROUPE_UNAUTHENTICATED, "malformed credential");
    }
    if (len < sizeof(verified.token) && remembered(a, token, len, out)) {
        return TROUPE_OK;
    }
    sha256(end + 1, hash);
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < a->n_creds; i++) {
        const cred *c = &a->creds[i];
        if (c->id == id && c->scope == scope && ct_equal_bytes(c->hash, hash, 32)) {
            found = c->expires_ms == 0 || tr_wall_ms() < c->expires_ms ? 1 : -1;
            expires_ms = c->expires_ms;
        }
    }
    gen = atomic_load(&a->gen); /* read under mu: the table this check saw */
    pthread_mutex_unlock(&a->mu);
    if (found > 0 && len < sizeof(verified.token)) {
        memcpy(verified.token, token, len);
        verified.len = len;
        verified.who = (tr_rpc_principal){.scope = scope, .cred_id = id};
        verified.expires_ms = expires_ms;
        verified.gen = gen;
    }
    if (found <= 0) {
        return tr_err_set(err, TROUPE_UNAUTHENTICATED, found < 0 ? "credential %" PRIu64 " expired"
                                                                 : "unknown or revoked credential",
                          id);
    }
    out->scope = scope;
    out->cred_id = id;
    return TROUPE_OK;
}

static int check_worker(tr_head *h, const char *rest, tr_rpc_principal *out, tr_err *err)
{
    char *end, *end2, mac[65];
    uint64_t job = strtoull(rest, &end, 10);
    uint32_t attempt;
    tr_head_job *hj;
    int live;

    if (end == rest || *end != '.') {
        return tr_err_set(err, TROUPE_UNAUTHENTICATED, "malformed credential");
    }
    attempt = (uint32_t)strtoul(end + 1, &end2, 10);
    if (end2 == end + 1 || *end2 != '.' || strlen(end2 + 1) != 64) {
        return tr_err_set(err, TROUPE_UNAUTHENTICATED, "malformed credential");
    }
    worker_mac(h->auth->key, job, attempt, mac);
    if (!ct_equal_bytes((const uint8_t *)mac, (const uint8_t *)end2 + 1, 64)) {
        return tr_err_set(err, TROUPE_UNAUTHENTICATED, "unknown credential");
    }
    pthread_mutex_lock(&h->mu);
    hj = tr_jobs_find(h, job);
    live = hj != NULL && !tr_jobs_is_terminal(hj) && hj->j->restarts == attempt;
    pthread_mutex_unlock(&h->mu);
    if (!live) {
        return tr_err_set(err, TROUPE_UNAUTHENTICATED,
                          "worker credential of job %" PRIu64 " attempt %" PRIu32 " no longer valid (job ended "
                          "or restarted)",
                          job, attempt);
    }
    out->scope = TR_SCOPE_WORKER;
    out->job_id = job;
    out->attempt = attempt;
    return TROUPE_OK;
}

int tr_head_authenticate(void *user, const char *token, tr_rpc_principal *out, tr_err *err)
{
    tr_head *h = user;

    memset(out, 0, sizeof(*out));
    if (h->auth == NULL || strncmp(token, "tr1.", 4) != 0 || token[4] == '\0' || token[5] != '.') {
        return tr_err_set(err, TROUPE_UNAUTHENTICATED, "unknown credential");
    }
    switch (token[4]) {
    case 'u': return check_minted(h->auth, TR_SCOPE_USER, token, token + 6, out, err);
    case 'n': return check_minted(h->auth, TR_SCOPE_NODE, token, token + 6, out, err);
    case 'w': return check_worker(h, token + 6, out, err);
    default: return tr_err_set(err, TROUPE_UNAUTHENTICATED, "unknown credential");
    }
}

/* ---- node ownership ---------------------------------------------------- */

static int deny_node(tr_rpc_call *call, const tr_head_node *hn)
{
    const tr_rpc_principal *p = tr_rpc_call_principal(call);
    TR_LOG(TR_LOG_WARNING, "permission denied method=%s scope=node cred=%" PRIu64 " node=%" PRIu64,
           tr_rpc_call_method(call), p->cred_id, hn->n->id);
    tr_rpc_reply_error(call, TROUPE_PERMISSION_DENIED,
                       "node %" PRIu64 " (%s) was registered by another credential; a node credential "
                       "speaks only for the nodes it registered",
                       hn->n->id, hn->n->name);
    return 0;
}

int tr_head_node_allowed(tr_rpc_call *call, const tr_head_node *hn)
{
    const tr_rpc_principal *p = tr_rpc_call_principal(call);
    if (p->scope != TR_SCOPE_NODE || (hn->n->owner_known && hn->n->owner_credential == p->cred_id)) {
        return 1;
    }
    return deny_node(call, hn);
}

int tr_head_node_may_register(tr_rpc_call *call, tr_head *h, const char *name, uint64_t node_id)
{
    const tr_rpc_principal *p = tr_rpc_call_principal(call);
    const tr_head_node *by_id;
    uint64_t hash;

    if (p->scope != TR_SCOPE_NODE) {
        return 1;
    }
    by_id = node_id ? tr_head_node_find(h, node_id) : NULL;
    hash = tr_head_name_hash(name);
    for (size_t i = 0; i < h->n_nodes; i++) {
        const tr_head_node *hn = &h->nodes[i];
        if (hn != by_id && hn->name_hash != hash) {
            continue; /* neither its id nor its name (head.h: name_hash) */
        }
        int same = hn->n->id == node_id ||
                   (hn->n->state != TROUPE__V1__NODE_STATE__NODE_DEAD && strcmp(hn->n->name, name) == 0);
        /* The binding is part of the node's record, so a node recovered from
         * disk keeps its owner. Only a record saved before the binding was
         * stored (owner_known false) is claimed by the first credential that
         * registers it again. */
        if (same && hn->n->owner_known && hn->n->owner_credential != p->cred_id) {
            return deny_node(call, hn);
        }
    }
    return 1;
}

/* The caller has marked hn dirty (a registration): the owner is written in
 * the same batch as the registration, and the agent hears of its node only
 * once that batch is on disk — no binding is acted on that a crash could
 * lose. */
void tr_head_node_bind(tr_rpc_call *call, tr_head_node *hn)
{
    hn->n->owner_known = 1;
    hn->n->owner_credential = tr_rpc_call_principal(call)->cred_id;
}

/* ---- minting and revoking (admin) -------------------------------------- */

static int mint(tr_auth *a, unsigned scope, uint64_t ttl_s, char *token, size_t size, cred *c, tr_err *err)
{
    uint8_t secret[SECRET_LEN];
    char hex[2 * SECRET_LEN + 1];
    int rv;

    if (getrandom(secret, sizeof(secret), 0) != (ssize_t)sizeof(secret)) {
        return tr_err_set(err, TROUPE_INTERNAL, "getrandom: %s", strerror(errno));
    }
    hex_encode(secret, sizeof(secret), hex);
    memset(c, 0, sizeof(*c));
    c->scope = scope;
    c->expires_ms = ttl_s ? tr_wall_ms() + (int64_t)ttl_s * 1000 : 0;
    sha256(hex, c->hash);
    pthread_mutex_lock(&a->mu);
    c->id = a->next_id++;
    if (add_cred(a, c) != 0) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    } else if ((rv = save(a, err)) != TROUPE_OK) {
        a->n_creds--; /* not on disk: not minted */
        creds_changed(a);
    }
    pthread_mutex_unlock(&a->mu);
    snprintf(token, size, "tr1.%c.%" PRIu64 ".%s", scope == TR_SCOPE_USER ? 'u' : 'n', c->id, hex);
    memset(hex, 0, sizeof(hex));
    return rv;
}

void tr_head_create_token(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__CreateTokenRequest *r =
        (Troupe__V1__CreateTokenRequest *)tr_rpc_unpack(call, &troupe__v1__create_token_request__descriptor);
    Troupe__V1__CreateTokenReply rep = TROUPE__V1__CREATE_TOKEN_REPLY__INIT;
    char token[TR_AUTH_TOKEN_MAX];
    unsigned scope;
    cred c;
    tr_err err;

    if (r == NULL) {
        return;
    }
    scope = strcmp(r->scope, "user") == 0 ? TR_SCOPE_USER : strcmp(r->scope, "node") == 0 ? TR_SCOPE_NODE : 0;
    if (scope == 0) {
        tr_rpc_reply_error(call, TROUPE_INVALID_ARGUMENT, "scope must be user or node");
    } else if (r->ttl_s > 10ull * 365 * 24 * 3600) {
        tr_rpc_reply_error(call, TROUPE_INVALID_ARGUMENT, "ttl of %" PRIu64 " s is over 10 years", r->ttl_s);
    } else if (h->auth == NULL) {
        tr_rpc_reply_error(call, TROUPE_FAILED_PRECONDITION,
                           "the head runs without auth (no token); minted credentials would mean nothing");
    } else if (mint(h->auth, scope, r->ttl_s, token, sizeof(token), &c, &err) != TROUPE_OK) {
        tr_rpc_reply_error(call, err.code, "%s", err.msg);
    } else {
        TR_LOG(TR_LOG_NOTICE, "credential created id=%" PRIu64 " scope=%s expires_ms=%" PRId64, c.id,
               tr_rpc_scope_name(scope), c.expires_ms);
        rep.id = c.id;
        rep.token = token;
        rep.expires_ms = c.expires_ms;
        tr_rpc_reply(call, &rep.base);
    }
    memset(token, 0, sizeof(token));
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

void tr_head_revoke_token(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__RevokeTokenRequest *r =
        (Troupe__V1__RevokeTokenRequest *)tr_rpc_unpack(call, &troupe__v1__revoke_token_request__descriptor);
    Troupe__V1__RevokeTokenReply rep = TROUPE__V1__REVOKE_TOKEN_REPLY__INIT;
    tr_auth *a = h->auth;
    int rv = TROUPE_NOT_FOUND;
    tr_err err;

    if (r == NULL) {
        return;
    }
    if (a == NULL) {
        tr_rpc_reply_error(call, TROUPE_FAILED_PRECONDITION, "the head runs without auth (no token)");
        goto out;
    }
    tr_err_set(&err, TROUPE_NOT_FOUND, "no credential %" PRIu64 " (already revoked?)", r->id);
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < a->n_creds; i++) {
        if (a->creds[i].id == r->id) {
            cred gone = a->creds[i];
            a->creds[i] = a->creds[--a->n_creds];
            creds_changed(a); /* forgets it on every thread at once */
            if ((rv = save(a, &err)) != TROUPE_OK) {
                add_cred(a, &gone); /* still on disk: still valid */
            }
            break;
        }
    }
    pthread_mutex_unlock(&a->mu);
    if (rv != TROUPE_OK) {
        tr_rpc_reply_error(call, rv, "%s", err.msg);
    } else {
        TR_LOG(TR_LOG_NOTICE, "credential revoked id=%" PRIu64, r->id);
        rep.revoked = 1;
        tr_rpc_reply(call, &rep.base);
    }
out:
    protobuf_c_message_free_unpacked(&r->base, NULL);
}
