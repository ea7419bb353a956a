/* auth.c - troupe-head's credentials (see auth.h for the kinds and formats).
 *
 * The minted user/node credentials live in a small table guarded by its own
 * mutex (auth checks run on every call, concurrently, and must not queue
 * behind h->mu); each change rewrites STATE_DIR/credentials whole, through a
 * temporary file and rename, before the caller is answered. The file holds
 * hashes only: a copy of the state dir does not give anyone a credential.
 *
 * A worker credential is current while its job has not ended and its attempt
 * is its worker's. That is read from a copy of the jobs' workers (wjob: per
 * job, ended or not, and each worker's attempt and name) under a lock of its
 * own (wmu, a leaf), kept up to date by the job events, which every change of
 * a job publishes under h->mu (events.h) before h->mu is let go. So a worker's
 * call takes h->mu once, in its handler, not also to be authenticated. A job
 * the copy has not heard of since the head started (recovered from the store)
 * is read once under h->mu and copied then. */
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

#include "bound_names.h"
#include "head.h"
#include "jobs.h"
#include "log.h"
#include "names.h"
#include "safefile.h"
#include "troupe/v1/auth.pb-c.h"
#include "util.h"

#define KEY_LEN 32
#define SECRET_LEN 32 /* random bytes in a minted secret (64 hex digits) */

typedef struct cred {
    uint64_t id;
    unsigned scope; /* TR_SCOPE_USER, TR_SCOPE_NODE or TR_SCOPE_ADMIN */
    int64_t expires_ms;
    uint8_t hash[32]; /* SHA-256 of the secret's text */
    /* Node credentials: the one name it may register ("" = the first it
     * registers) and how many names in all; 0 = any number, for records
     * minted before node credentials were bound (the head warns of them). */
    char node[64];
    uint32_t max_nodes;
} cred;

/* wjob: what a worker credential of job id is checked against. */
typedef struct wslot {
    uint32_t attempt;
    char name[sizeof(((tr_rpc_principal *)0)->worker)];
} wslot;

typedef struct wjob {
    uint64_t id;
    int ended;   /* the job is finished: none of its credentials is current */
    size_t n;    /* workers (0 while it is not placed, or has ended) */
    wslot *w;    /* by index in the job's record */
} wjob;

struct tr_auth {
    pthread_mutex_t wmu; /* the workers' copy; a leaf, taken under h->mu or alone */
    wjob *wjobs;         /* by id */
    size_t n_wjobs, cap_wjobs;
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

/* worker_mac writes HMAC-SHA256(key, "tr1.w.JOB.ATTEMPT.INDEX") as hex. */
static void worker_mac(const uint8_t *key, uint64_t job, uint32_t attempt, uint32_t index, char hex[65])
{
    char msg[96];
    uint8_t mac[32];
    int n = snprintf(msg, sizeof(msg), "tr1.w.%" PRIu64 ".%" PRIu32 ".%" PRIu32, job, attempt, index);

    mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), key, KEY_LEN, (const unsigned char *)msg,
                    (size_t)n, mac);
    hex_encode(mac, sizeof(mac), hex);
}

void tr_auth_worker_credential(const tr_auth *a, uint64_t job_id, uint32_t attempt, uint32_t index, char *buf,
                               size_t size)
{
    char mac[65];
    worker_mac(a->key, job_id, attempt, index, mac);
    snprintf(buf, size, "tr1.w.%" PRIu64 ".%" PRIu32 ".%" PRIu32 ".%s", job_id, attempt, index, mac);
}

/* ---- the credentials file ---------------------------------------------- */

/* save writes the table to a temporary file and renames it into place, so a
 * crash leaves the old file or the new one. Caller holds a->mu. */
static int save(tr_auth *a, tr_err *err)
{
    size_t cap = 128 + a->n_creds * 220, used = 0;
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
        used += (size_t)snprintf(buf + used, cap - used, "%" PRIu64 " %s %" PRId64 " %s", a->creds[i].id,
                                 tr_rpc_scope_name(a->creds[i].scope), a->creds[i].expires_ms, hex);
        if (a->creds[i].scope == TR_SCOPE_NODE) {
            used +=
                (size_t)snprintf(buf + used, cap - used, " max_nodes=%" PRIu32 "%s%s", a->creds[i].max_nodes,
                                 a->creds[i].node[0] ? " node=" : "", a->creds[i].node);
        }
        used += (size_t)snprintf(buf + used, cap - used, "\n");
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

unsigned tr_auth_scope_of(const char *s)
{
    return strcmp(s, "user") == 0    ? TR_SCOPE_USER
           : strcmp(s, "node") == 0  ? TR_SCOPE_NODE
           : strcmp(s, "admin") == 0 ? TR_SCOPE_ADMIN
                                     : 0;
}

/* parse_line reads one "id scope expires hash [max_nodes=N] [node=NAME]"
 * line; -1 when malformed. */
static int parse_line(const char *line, cred *c)
{
    char scope[16], hex[80];
    int used = 0;
    memset(c, 0, sizeof(*c));
    if (sscanf(line, "%" SCNu64 " %15s %" SCNd64 " %79s%n", &c->id, scope, &c->expires_ms, hex, &used) != 4 ||
        strlen(hex) != 64 || hex_decode(hex, c->hash, 32) != 0) {
        return -1;
    }
    for (const char *p = line + used; *p != '\0';) {
        char word[96];
        int n = 0;
        if (sscanf(p, " %95s%n", word, &n) != 1) {
            break;
        }
        p += n;
        if (strncmp(word, "max_nodes=", 10) == 0) {
            c->max_nodes = (uint32_t)strtoul(word + 10, NULL, 10);
        } else if (strncmp(word, "node=", 5) == 0) {
            tr_strlcpy(c->node, word + 5, sizeof(c->node));
        } else {
            return -1;
        }
    }
    c->scope = tr_auth_scope_of(scope);
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
        if (c.scope == TR_SCOPE_NODE && c.max_nodes == 0) {
            TR_LOG(TR_LOG_WARNING,
                   "node credential %" PRIu64
                   " was minted before node credentials were bound to their node: it "
                   "may register any number of nodes; revoke it and mint one per node (troupe token create "
                   "--scope node --node NAME) or with --max-nodes",
                   c.id);
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
    pthread_mutex_init(&a->wmu, NULL);
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
    for (size_t i = 0; i < a->n_wjobs; i++) {
        free(a->wjobs[i].w);
    }
    free(a->wjobs);
    pthread_mutex_destroy(&a->mu);
    pthread_mutex_destroy(&a->wmu);
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

/* next_number reads "DIGITS." at *p and moves past the dot; -1 if malformed. */
static int next_number(const char **p, uint64_t max, uint64_t *out)
{
    char *end;
    if (**p < '0' || **p > '9') {
        return -1;
    }
    errno = 0;
    *out = strtoull(*p, &end, 10);
    if (errno != 0 || *out > max || *end != '.') {
        return -1;
    }
    *p = end + 1;
    return 0;
}

/* ---- the workers' copy (a->wmu) ------------------------------------------ */

/* wjob_at: the index of job id in a->wjobs, or where it would go (*found 0). */
static size_t wjob_at(const tr_auth *a, uint64_t id, int *found)
{
    size_t lo = 0, hi = a->n_wjobs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a->wjobs[mid].id < id) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    *found = lo < a->n_wjobs && a->wjobs[lo].id == id;
    return lo;
}

static void wjob_remove(tr_auth *a, size_t i)
{
    free(a->wjobs[i].w);
    memmove(&a->wjobs[i], &a->wjobs[i + 1], (a->n_wjobs - i - 1) * sizeof(*a->wjobs));
    a->n_wjobs--;
}

/* wjob_copy makes the copy of hj current (h->mu held; takes a->wmu). Out of
 * memory, the job leaves the copy: its workers are then checked under h->mu
 * again, as a job the copy never heard of. */
static void wjob_copy(tr_auth *a, const tr_head_job *hj)
{
    const Troupe__V1__Job *j = hj->j;
    int found, ended = tr_jobs_is_terminal(hj);
    size_t n = ended ? 0 : j->n_workers, i;
    wjob *wj;

    pthread_mutex_lock(&a->wmu);
    i = wjob_at(a, j->id, &found);
    if (!found) {
        if (a->n_wjobs == a->cap_wjobs) {
            size_t cap = a->cap_wjobs ? 2 * a->cap_wjobs : 64;
            wjob *grown = realloc(a->wjobs, cap * sizeof(*grown));
            if (grown == NULL) {
                goto out;
            }
            a->wjobs = grown;
            a->cap_wjobs = cap;
        }
        memmove(&a->wjobs[i + 1], &a->wjobs[i], (a->n_wjobs - i) * sizeof(*a->wjobs));
        a->n_wjobs++;
        a->wjobs[i] = (wjob){.id = j->id};
    }
    wj = &a->wjobs[i];
    if (n != wj->n) {
        wslot *w = n ? realloc(wj->w, n * sizeof(*w)) : NULL;
        if (n != 0 && w == NULL) {
            wjob_remove(a, i);
            goto out;
        }
        if (n == 0) {
            free(wj->w);
        }
        wj->w = w;
        wj->n = n;
    }
    wj->ended = ended;
    for (size_t k = 0; k < n; k++) {
        wj->w[k].attempt = j->workers[k]->attempt;
        tr_strlcpy(wj->w[k].name, j->workers[k]->name, sizeof(wj->w[k].name));
    }
out:
    pthread_mutex_unlock(&a->wmu);
}

/* The job events keep the copy (events.h: under h->mu, before it is let go,
 * on the thread that changed the job). h->auth is read when they come: a
 * head started without a token has none. */
static void on_job_changed(tr_head *h, const tr_event *ev, void *arg)
{
    (void)arg;
    if (h->auth != NULL) {
        wjob_copy(h->auth, ev->hj);
    }
}

static void on_job_deleted(tr_head *h, const tr_event *ev, void *arg)
{
    int found;
    size_t i;

    (void)arg;
    if (h->auth == NULL) {
        return;
    }
    pthread_mutex_lock(&h->auth->wmu);
    i = wjob_at(h->auth, ev->hj->j->id, &found);
    if (found) {
        wjob_remove(h->auth, i);
    }
    pthread_mutex_unlock(&h->auth->wmu);
}

int tr_auth_follow_jobs(tr_head *h, tr_err *err)
{
    int rv;

    for (size_t i = 0; i < h->evbus.n[TR_EV_JOB_CHANGED]; i++) {
        if (h->evbus.subs[TR_EV_JOB_CHANGED][i].fn == on_job_changed) {
            return TROUPE_OK; /* this head struct was started before */
        }
    }
    if ((rv = tr_events_subscribe(h, TR_EV_JOB_CHANGED, on_job_changed, NULL, err)) != TROUPE_OK) {
        return rv;
    }
    return tr_events_subscribe(h, TR_EV_JOB_DELETED, on_job_deleted, NULL, err);
}

/* worker_current: whether worker index of job at attempt is current in the
 * copy (its name into name); -1 when the copy has not heard of the job. */
static int worker_current(tr_auth *a, uint64_t job, uint64_t attempt, uint64_t index, char *name, size_t size)
{
    int found, live = -1;
    size_t i;

    pthread_mutex_lock(&a->wmu);
    i = wjob_at(a, job, &found);
    if (found) {
        const wjob *wj = &a->wjobs[i];
        /* Current only for the worker's attempt now: a group restart, or an
         * elastic group's replacement, gives that worker a new one. */
        live = !wj->ended && index < wj->n && wj->w[index].attempt == attempt;
        if (live) {
            tr_strlcpy(name, wj->w[index].name, size);
        }
    }
    pthread_mutex_unlock(&a->wmu);
    return live;
}

static int check_worker(tr_head *h, const char *rest, tr_rpc_principal *out, tr_err *err)
{
    uint64_t job, attempt, index;
    const char *p = rest;
    char mac[65];
    tr_head_job *hj;
    int live;

    if (next_number(&p, UINT64_MAX, &job) != 0 || next_number(&p, UINT32_MAX, &attempt) != 0 ||
        next_number(&p, UINT32_MAX, &index) != 0 || strlen(p) != 64) {
        return tr_err_set(err, TROUPE_UNAUTHENTICATED,
                          "malformed credential (a worker credential from before per-worker credentials "
                          "ends with its job's attempt; restart the job)");
    }
    worker_mac(h->auth->key, job, (uint32_t)attempt, (uint32_t)index, mac);
    if (!ct_equal_bytes((const uint8_t *)mac, (const uint8_t *)p, 64)) {
        return tr_err_set(err, TROUPE_UNAUTHENTICATED, "unknown credential");
    }
    live = worker_current(h->auth, job, attempt, index, out->worker, sizeof(out->worker));
    if (live < 0) {
        /* Not heard of since the head started: its record, once. */
        pthread_mutex_lock(&h->mu);
        hj = tr_jobs_find(h, job);
        live = hj != NULL && !tr_jobs_is_terminal(hj) && index < hj->j->n_workers &&
               hj->j->workers[index]->attempt == attempt;
        if (live) {
            tr_strlcpy(out->worker, hj->j->workers[index]->name, sizeof(out->worker));
        }
        if (hj != NULL) {
            wjob_copy(h->auth, hj);
        }
        pthread_mutex_unlock(&h->mu);
    }
    if (!live) {
        return tr_err_set(err, TROUPE_UNAUTHENTICATED,
                          "worker credential of job %" PRIu64 " attempt %" PRIu64
                          " no longer valid (job ended "
                          "or restarted)",
                          job, attempt);
    }
    out->scope = TR_SCOPE_WORKER;
    out->job_id = job;
    out->attempt = (uint32_t)attempt;
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
    case 'a': return check_minted(h->auth, TR_SCOPE_ADMIN, token, token + 6, out, err);
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

/* may_name: whether node credential p may register a node called name: a
 * name it registered before, or a new one within what it was minted for
 * (its --node, or --max-nodes names, 1 by default). The names a credential
 * bound are looked up in h->bound_names (walking the node table for them
 * made 2,000 agents sharing one credential register in quadratic time).
 * Caller holds h->mu. */
static int may_name(tr_rpc_call *call, tr_head *h, const tr_rpc_principal *p, const char *name)
{
    cred c = {0};
    size_t names;
    int found = 0;

    pthread_mutex_lock(&h->auth->mu);
    for (size_t i = 0; i < h->auth->n_creds; i++) {
        if (h->auth->creds[i].id == p->cred_id) {
            c = h->auth->creds[i];
            found = 1;
        }
    }
    pthread_mutex_unlock(&h->auth->mu);
    if (!found) {
        return 1; /* revoked meanwhile: authentication refuses its next call */
    }
    if (c.node[0] != '\0' && strcmp(c.node, name) != 0) {
        goto deny;
    }
    if (h->bound_names != NULL && tr_bound_names_has(h->bound_names, p->cred_id, name)) {
        return 1; /* its own node, back again */
    }
    names = h->bound_names != NULL ? tr_bound_names_count(h->bound_names, p->cred_id) : 0;
    if (c.max_nodes == 0 || names < (c.node[0] ? 1u : c.max_nodes)) {
        return 1;
    }
deny:;
    char what[128];
    if (c.node[0] != '\0') {
        snprintf(what, sizeof(what), "node '%s'", c.node);
    } else if (c.max_nodes > 1) {
        snprintf(what, sizeof(what), "the %" PRIu32 " nodes it registered", c.max_nodes);
    } else {
        snprintf(what, sizeof(what), "the node it registered first");
    }
    TR_LOG(TR_LOG_WARNING, "permission denied method=%s scope=node cred=%" PRIu64 " register name=%s",
           tr_rpc_call_method(call), p->cred_id, name);
    tr_rpc_reply_error(call, TROUPE_PERMISSION_DENIED,
                       "node credential %" PRIu64
                       " is bound to %s; it cannot register node '%s' (mint one per "
                       "node: troupe token create --scope node --node %s)",
                       p->cred_id, what, name, name);
    return 0;
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
    /* Not another credential's node: then within what this one was minted for. */
    return may_name(call, h, p, name);
}

/* The caller has marked hn dirty (a registration): the owner is written in
 * the same batch as the registration, and the agent hears of its node only
 * once that batch is on disk — no binding is acted on that a crash could
 * lose. */
void tr_head_names_bound(tr_head *h, const Troupe__V1__Node *n, int delta)
{
    if (!n->owner_known) {
        return;
    }
    if (delta < 0) {
        if (h->bound_names != NULL) {
            tr_bound_names_remove(h->bound_names, n->owner_credential, n->name);
        }
        return;
    }
    if ((h->bound_names == NULL && (h->bound_names = tr_bound_names_alloc()) == NULL) ||
        tr_bound_names_add(h->bound_names, n->owner_credential, n->name) != 0) {
        TR_LOG(TR_LOG_ERR, "out of memory for the index of bound node names");
        tr_log_flush(1000);
        abort();
    }
}

void tr_head_node_bind(tr_rpc_call *call, tr_head *h, tr_head_node *hn)
{
    tr_head_names_bound(h, hn->n, -1);
    hn->n->owner_known = 1;
    hn->n->owner_credential = tr_rpc_call_principal(call)->cred_id;
    tr_head_names_bound(h, hn->n, 1);
}

/* ---- job owners -------------------------------------------------------- */

void tr_head_caller_name(tr_rpc_call *call, const tr_head *h, char *buf, size_t size)
{
    const tr_rpc_principal *p = tr_rpc_call_principal(call);

    if (h->auth == NULL) {
        snprintf(buf, size, "%s", "");
    } else if (p->cred_id != 0) {
        snprintf(buf, size, "%s:%" PRIu64, tr_rpc_scope_name(p->scope), p->cred_id);
    } else {
        snprintf(buf, size, "%s", tr_rpc_scope_name(p->scope));
    }
}

int tr_head_may_manage(tr_rpc_call *call, const tr_head_job *hj, tr_err *err)
{
    const tr_rpc_principal *p = tr_rpc_call_principal(call);
    char me[48];

    if (p->scope != TR_SCOPE_USER) {
        return 1; /* admins; workers and nodes never reach the methods that call this */
    }
    snprintf(me, sizeof(me), "user:%" PRIu64, p->cred_id);
    if (hj->j->owner != NULL && strcmp(hj->j->owner, me) == 0) {
        return 1;
    }
    TR_LOG(TR_LOG_WARNING, "permission denied method=%s cred=%s job=%" PRIu64 " owner=%s",
           tr_rpc_call_method(call), me, hj->j->id, hj->j->owner && hj->j->owner[0] ? hj->j->owner : "-");
    tr_err_set(err, TROUPE_PERMISSION_DENIED,
               "job %" PRIu64
               " belongs to %s, not to this credential (%s): a user credential stops and deletes "
               "only its own jobs; ask its owner or an admin (troupe token create --scope admin)",
               hj->j->id, hj->j->owner && hj->j->owner[0] ? hj->j->owner : "no recorded owner", me);
    return 0;
}

/* ---- minting and revoking (admin) -------------------------------------- */

int tr_auth_mint(tr_auth *a, unsigned scope, const char *node, uint32_t max_nodes, uint64_t ttl_s, char *token,
                 size_t size, tr_auth_minted *out, tr_err *err)
{
    uint8_t secret[SECRET_LEN];
    cred mine, *c = &mine;
    char hex[2 * SECRET_LEN + 1];
    int rv;

    if (getrandom(secret, sizeof(secret), 0) != (ssize_t)sizeof(secret)) {
        return tr_err_set(err, TROUPE_INTERNAL, "getrandom: %s", strerror(errno));
    }
    hex_encode(secret, sizeof(secret), hex);
    memset(c, 0, sizeof(*c));
    c->scope = scope;
    c->expires_ms = ttl_s ? tr_wall_ms() + (int64_t)ttl_s * 1000 : 0;
    if (scope == TR_SCOPE_NODE) {
        tr_strlcpy(c->node, node != NULL ? node : "", sizeof(c->node));
        c->max_nodes = max_nodes ? max_nodes : 1;
    }
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
    snprintf(token, size, "tr1.%c.%" PRIu64 ".%s",
             scope == TR_SCOPE_USER   ? 'u'
             : scope == TR_SCOPE_NODE ? 'n'
                                      : 'a',
             c->id, hex);
    memset(hex, 0, sizeof(hex));
    memset(out, 0, sizeof(*out));
    out->id = c->id;
    out->expires_ms = c->expires_ms;
    tr_strlcpy(out->node, c->node, sizeof(out->node));
    out->max_nodes = c->max_nodes;
    return rv;
}

int tr_auth_revoke(tr_auth *a, uint64_t id, tr_err *err)
{
    int rv = TROUPE_NOT_FOUND;

    tr_err_set(err, TROUPE_NOT_FOUND, "no credential %" PRIu64 " (already revoked?)", id);
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < a->n_creds; i++) {
        if (a->creds[i].id == id) {
            cred gone = a->creds[i];
            a->creds[i] = a->creds[--a->n_creds];
            creds_changed(a); /* forgets it on every thread at once */
            if ((rv = save(a, err)) != TROUPE_OK) {
                add_cred(a, &gone); /* still on disk: still valid */
            }
            break;
        }
    }
    pthread_mutex_unlock(&a->mu);
    return rv;
}
