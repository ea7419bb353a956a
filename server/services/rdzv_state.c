/* rdzv_state.c - one communicator epoch's rendezvous state (rdzv_state.h).
 *
 * Waiters live on singly linked lists (one for the IDs, one per gather in
 * progress); every list is short-lived and bounded by the ranks that can
 * call (a rank that retries may be listed twice until one answer reaches
 * both). Blobs are copied in, so nothing here borrows the caller's memory
 * past the call. */
#include "rdzv_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

typedef struct waiter {
    void *token;
    uint32_t rank;
    int64_t until;
    struct waiter *next;
} waiter;

typedef struct gather {
    char name[TR_RDZV_MAX_NAME];
    uint64_t seq;       /* being collected; 0 = none */
    uint8_t *arrived;   /* per rank */
    uint32_t n_arrived;
    uint8_t **data;     /* per rank, malloc'ed (NULL for empty) */
    uint32_t *len;
    waiter *waiters;
    uint64_t done_seq;  /* the last completed seq; 0 = none */
    uint8_t **done_data;
    uint32_t *done_len;
    struct gather *next;
} gather;

struct tr_rdzv_comm {
    char name[TR_RDZV_MAX_NAME];
    uint32_t epoch, size;
    char **rank_names;
    uint8_t *arrived; /* IDs: ranks that called in this epoch */
    uint8_t *ids;     /* published, n_ids * TR_RDZV_ID_BYTES; NULL until then */
    uint32_t n_ids;
    waiter *waiters;  /* ID waiters */
    gather *gathers;
    size_t n_gathers;
};

int tr_rdzv_comm_new(const char *name, uint32_t epoch, uint32_t size, const char *const *rank_names,
                     tr_rdzv_comm **out, tr_err *err)
{
    tr_rdzv_comm *c = calloc(1, sizeof(*c));

    *out = NULL;
    if (c == NULL || size == 0 || (c->rank_names = calloc(size, sizeof(char *))) == NULL ||
        (c->arrived = calloc(size, 1)) == NULL) {
        tr_rdzv_comm_free(c, TROUPE_INTERNAL, "", NULL, NULL);
        return tr_err_set(err, size ? TROUPE_RESOURCE_EXHAUSTED : TROUPE_INVALID_ARGUMENT,
                          size ? "out of memory" : "communicator %s has no ranks", name);
    }
    tr_strlcpy(c->name, name, sizeof(c->name));
    c->epoch = epoch;
    c->size = size;
    for (uint32_t r = 0; r < size; r++) {
        c->rank_names[r] = strdup(rank_names && rank_names[r] ? rank_names[r] : "?");
        if (c->rank_names[r] == NULL) {
            tr_rdzv_comm_free(c, TROUPE_INTERNAL, "", NULL, NULL);
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        }
    }
    *out = c;
    return TROUPE_OK;
}

static void blobs_free(uint8_t **data, uint32_t n)
{
    for (uint32_t r = 0; data != NULL && r < n; r++) {
        free(data[r]);
    }
    free(data);
}

/* answer_all answers and frees every waiter of a list. */
static void answer_all(waiter **list, int code, const char *msg, const tr_rdzv_result *res,
                       tr_rdzv_answer_fn answer, void *ctx)
{
    waiter *w = *list;
    *list = NULL;
    while (w != NULL) {
        waiter *next = w->next;
        if (answer != NULL) {
            tr_rdzv_result r;
            if (res != NULL) {
                r = *res;
                r.rank = w->rank;
            }
            answer(w->token, code, msg, res ? &r : NULL, ctx);
        }
        free(w);
        w = next;
    }
}

static void gather_free(tr_rdzv_comm *c, gather *g, int code, const char *why, tr_rdzv_answer_fn answer,
                        void *ctx)
{
    answer_all(&g->waiters, code, why, NULL, answer, ctx);
    blobs_free(g->data, c->size);
    blobs_free(g->done_data, c->size);
    free(g->arrived);
    free(g->len);
    free(g->done_len);
    free(g);
}

void tr_rdzv_comm_free(tr_rdzv_comm *c, int code, const char *why, tr_rdzv_answer_fn answer, void *ctx)
{
    if (c == NULL) {
        return;
    }
    answer_all(&c->waiters, code, why, NULL, answer, ctx);
    while (c->gathers != NULL) {
        gather *g = c->gathers;
        c->gathers = g->next;
        gather_free(c, g, code, why, answer, ctx);
    }
    for (uint32_t r = 0; c->rank_names != NULL && r < c->size; r++) {
        free(c->rank_names[r]);
    }
    free(c->rank_names);
    free(c->arrived);
    free(c->ids);
    free(c);
}

const char *tr_rdzv_comm_name(const tr_rdzv_comm *c)
{
    return c->name;
}

uint32_t tr_rdzv_comm_epoch(const tr_rdzv_comm *c)
{
    return c->epoch;
}

uint32_t tr_rdzv_comm_size(const tr_rdzv_comm *c)
{
    return c->size;
}

static int check_rank(const tr_rdzv_comm *c, uint32_t rank, tr_err *err)
{
    if (rank >= c->size) {
        return tr_err_set(err, TROUPE_OUT_OF_RANGE, "rank %u is out of range for communicator %s of %u ranks",
                          rank, c->name, c->size);
    }
    return TROUPE_OK;
}

static void ids_result(const tr_rdzv_comm *c, uint32_t rank, tr_rdzv_result *res)
{
    memset(res, 0, sizeof(*res));
    res->epoch = c->epoch;
    res->rank = rank;
    res->size = c->size;
    res->ids = c->ids;
    res->n_ids = c->n_ids;
}

static int check_ids(const tr_rdzv_comm *c, const size_t *lens, size_t n_ids, tr_err *err)
{
    if (n_ids == 0 || n_ids > TR_RDZV_MAX_IDS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "rank 0 of communicator %s must publish 1 to %d IDs, not %zu", c->name,
                          TR_RDZV_MAX_IDS, n_ids);
    }
    for (size_t i = 0; i < n_ids; i++) {
        if (lens[i] != TR_RDZV_ID_BYTES) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                              "ID %zu for communicator %s is %zu bytes; an NCCL unique ID is %d", i, c->name,
                              lens[i], TR_RDZV_ID_BYTES);
        }
    }
    return TROUPE_OK;
}

/* same_ids: a retried publish carries exactly what is recorded. */
static int same_ids(const tr_rdzv_comm *c, const uint8_t *const *ids, size_t n_ids)
{
    if (n_ids != c->n_ids) {
        return 0;
    }
    for (size_t i = 0; i < n_ids; i++) {
        if (memcmp(c->ids + i * TR_RDZV_ID_BYTES, ids[i], TR_RDZV_ID_BYTES) != 0) {
            return 0;
        }
    }
    return 1;
}

int tr_rdzv_publish(tr_rdzv_comm *c, uint32_t rank, const uint8_t *const *ids, const size_t *lens, size_t n_ids,
                    tr_rdzv_answer_fn answer, void *ctx, tr_err *err)
{
    tr_rdzv_result res;
    int rv = check_rank(c, rank, err);

    if (rv != TROUPE_OK) {
        return rv;
    }
    if (rank != 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "rank %u (%s) cannot publish IDs for communicator %s: only rank 0 publishes", rank,
                          c->rank_names[rank], c->name);
    }
    if ((rv = check_ids(c, lens, n_ids, err)) != TROUPE_OK) {
        return rv;
    }
    if (c->ids != NULL) {
        if (same_ids(c, ids, n_ids)) {
            return TROUPE_OK; /* a retry */
        }
        return tr_err_set(err, TROUPE_ALREADY_EXISTS,
                          "communicator %s epoch %u already has other IDs; a new initialisation needs a new "
                          "epoch (restart the group)",
                          c->name, c->epoch);
    }
    if ((c->ids = malloc(n_ids * TR_RDZV_ID_BYTES)) == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    for (size_t i = 0; i < n_ids; i++) {
        memcpy(c->ids + i * TR_RDZV_ID_BYTES, ids[i], TR_RDZV_ID_BYTES);
    }
    c->n_ids = (uint32_t)n_ids;
    c->arrived[0] = 1;
    ids_result(c, 0, &res);
    answer_all(&c->waiters, TROUPE_OK, "", &res, answer, ctx);
    return TROUPE_OK;
}

static int park(waiter **list, void *token, uint32_t rank, int64_t until, tr_err *err)
{
    waiter *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    w->token = token;
    w->rank = rank;
    w->until = until;
    w->next = *list;
    *list = w;
    return TROUPE_OK;
}

int tr_rdzv_ids_wait(tr_rdzv_comm *c, uint32_t rank, void *token, int64_t until, tr_rdzv_result *res,
                     int *parked, tr_err *err)
{
    int rv = check_rank(c, rank, err);

    *parked = 0;
    if (rv != TROUPE_OK) {
        return rv;
    }
    if (rank == 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "rank 0 (%s) of communicator %s publishes the IDs; it does not wait for them",
                          c->rank_names[0], c->name);
    }
    c->arrived[rank] = 1;
    if (c->ids != NULL) {
        ids_result(c, rank, res);
        return TROUPE_OK;
    }
    rv = park(&c->waiters, token, rank, until, err);
    *parked = rv == TROUPE_OK;
    return rv;
}

static gather *gather_find(tr_rdzv_comm *c, const char *name)
{
    for (gather *g = c->gathers; g != NULL; g = g->next) {
        if (strcmp(g->name, name) == 0) {
            return g;
        }
    }
    return NULL;
}

static int gather_get(tr_rdzv_comm *c, const char *name, gather **out, tr_err *err)
{
    gather *g = gather_find(c, name);

    if (g != NULL) {
        *out = g;
        return TROUPE_OK;
    }
    if (name[0] == '\0' || strlen(name) >= TR_RDZV_MAX_NAME) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "gather name must be 1 to %d bytes",
                          TR_RDZV_MAX_NAME - 1);
    }
    if (c->n_gathers >= TR_RDZV_MAX_GATHERS) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED,
                          "communicator %s already has %d named barriers/gathers in this epoch", c->name,
                          TR_RDZV_MAX_GATHERS);
    }
    g = calloc(1, sizeof(*g));
    if (g == NULL || (g->arrived = calloc(c->size, 1)) == NULL ||
        (g->data = calloc(c->size, sizeof(*g->data))) == NULL || (g->len = calloc(c->size, sizeof(*g->len))) == NULL) {
        if (g != NULL) {
            gather_free(c, g, TROUPE_INTERNAL, "", NULL, NULL);
        }
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    tr_strlcpy(g->name, name, sizeof(g->name));
    g->next = c->gathers;
    c->gathers = g;
    c->n_gathers++;
    *out = g;
    return TROUPE_OK;
}

static void gather_result(const tr_rdzv_comm *c, const gather *g, uint32_t rank, tr_rdzv_result *res)
{
    memset(res, 0, sizeof(*res));
    res->epoch = c->epoch;
    res->rank = rank;
    res->size = c->size;
    res->data = (const uint8_t *const *)g->done_data;
    res->len = g->done_len;
}

/* gather_complete moves the collected blobs to the kept result and answers
 * everyone parked. */
static void gather_complete(tr_rdzv_comm *c, gather *g, tr_rdzv_answer_fn answer, void *ctx)
{
    tr_rdzv_result res;
    uint8_t **d = g->done_data;
    uint32_t *l = g->done_len;

    g->done_data = g->data;
    g->done_len = g->len;
    g->done_seq = g->seq;
    blobs_free(d, c->size);
    memset(g->arrived, 0, c->size);
    g->n_arrived = 0;
    g->seq = 0;
    g->data = calloc(c->size, sizeof(*g->data));
    g->len = l != NULL ? l : calloc(c->size, sizeof(*g->len));
    if (g->len != NULL) {
        memset(g->len, 0, c->size * sizeof(*g->len));
    }
    gather_result(c, g, 0, &res);
    answer_all(&g->waiters, TROUPE_OK, "", &res, answer, ctx);
}

/* gather_seq_check decides what seq means for g: 1 = answer from the kept
 * result, 0 = collect, or an error. */
static int gather_seq_check(const tr_rdzv_comm *c, const gather *g, uint32_t rank, uint64_t seq, tr_err *err)
{
    if (seq == 0) {
        return -tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: seq starts at 1", g->name);
    }
    if (g->done_seq != 0 && seq == g->done_seq && g->done_data != NULL) {
        return 1;
    }
    if (g->seq == 0 ? seq <= g->done_seq : seq != g->seq) {
        return -tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                           "%s of communicator %s epoch %u: rank %u (%s) is at number %llu while the others are "
                           "at %llu (last completed %llu); ranks disagree on the sequence",
                           g->name, c->name, c->epoch, rank, c->rank_names[rank], (unsigned long long)seq,
                           (unsigned long long)(g->seq ? g->seq : g->done_seq + 1),
                           (unsigned long long)g->done_seq);
    }
    return 0;
}

static int gather_add(tr_rdzv_comm *c, gather *g, uint32_t rank, const uint8_t *data, size_t len, tr_err *err)
{
    if (g->arrived[rank]) {
        if (len != g->len[rank] || (len > 0 && memcmp(data, g->data[rank], len) != 0)) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                              "%s of communicator %s: rank %u sent different data for number %llu", g->name,
                              c->name, rank, (unsigned long long)g->seq);
        }
        return TROUPE_OK; /* a retry: park it again */
    }
    if (len > 0 && (g->data[rank] = malloc(len)) == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    if (len > 0) {
        memcpy(g->data[rank], data, len);
    }
    g->len[rank] = (uint32_t)len;
    g->arrived[rank] = 1;
    g->n_arrived++;
    return TROUPE_OK;
}

int tr_rdzv_gather(tr_rdzv_comm *c, uint32_t rank, const char *name, uint64_t seq, const uint8_t *data,
                   size_t len, void *token, int64_t until, tr_rdzv_answer_fn answer, void *ctx,
                   tr_rdzv_result *res, int *parked, tr_err *err)
{
    gather *g = NULL;
    int rv = check_rank(c, rank, err);

    *parked = 0;
    if (rv == TROUPE_OK && len > TR_RDZV_MAX_BLOB) {
        rv = tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: %zu bytes from rank %u; at most %d per rank", name,
                        len, rank, TR_RDZV_MAX_BLOB);
    }
    if (rv == TROUPE_OK) {
        rv = gather_get(c, name, &g, err);
    }
    if (rv != TROUPE_OK) {
        return rv;
    }
    rv = gather_seq_check(c, g, rank, seq, err);
    if (rv < 0) {
        return -rv;
    }
    if (rv == 1) {
        gather_result(c, g, rank, res);
        return TROUPE_OK;
    }
    if (g->data == NULL || g->len == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    g->seq = seq;
    if ((rv = gather_add(c, g, rank, data, len, err)) != TROUPE_OK) {
        return rv;
    }
    if (g->n_arrived == c->size) {
        gather_complete(c, g, answer, ctx);
        gather_result(c, g, rank, res);
        return TROUPE_OK;
    }
    rv = park(&g->waiters, token, rank, until, err);
    *parked = rv == TROUPE_OK;
    return rv;
}

/* missing_text: "2 of 4 ranks never arrived: 1 job7-policy-1 on node-a, ..." */
static void missing_text(const tr_rdzv_comm *c, const uint8_t *arrived, char *buf, size_t size)
{
    uint32_t missing = 0, listed = 0;
    size_t off;

    for (uint32_t r = 0; r < c->size; r++) {
        missing += !arrived[r];
    }
    off = (size_t)snprintf(buf, size, "%u of %u ranks never arrived:", missing, c->size);
    for (uint32_t r = 0; r < c->size && off < size; r++) {
        if (arrived[r]) {
            continue;
        }
        if (off + 80 > size || listed == 32) {
            snprintf(buf + off, size - off, " ... (%u more)", missing - listed);
            return;
        }
        off += (size_t)snprintf(buf + off, size - off, "%s %u %s", listed ? "," : "", r, c->rank_names[r]);
        listed++;
    }
}

/* expire_list answers the waiters of one list whose time is up. */
static int64_t expire_list(waiter **pp, int64_t now, const char *msg, tr_rdzv_answer_fn answer, void *ctx)
{
    int64_t next = INT64_MAX;

    while (*pp != NULL) {
        waiter *w = *pp;
        if (w->until <= now) {
            *pp = w->next;
            answer(w->token, TROUPE_DEADLINE_EXCEEDED, msg, NULL, ctx);
            free(w);
        } else {
            next = w->until < next ? w->until : next;
            pp = &w->next;
        }
    }
    return next;
}

static int has_expired(const waiter *w, int64_t now)
{
    for (; w != NULL; w = w->next) {
        if (w->until <= now) {
            return 1;
        }
    }
    return 0;
}

int64_t tr_rdzv_expire(tr_rdzv_comm *c, int64_t now, tr_rdzv_answer_fn answer, void *ctx)
{
    char miss[2048], msg[2400];
    int64_t next = INT64_MAX, n;

    if (has_expired(c->waiters, now)) {
        missing_text(c, c->arrived, miss, sizeof(miss));
        snprintf(msg, sizeof(msg), "communicator %s epoch %u: no IDs yet%s; %s", c->name, c->epoch,
                 c->arrived[0] ? "" : " (rank 0 never published)", miss);
    }
    n = expire_list(&c->waiters, now, msg, answer, ctx);
    next = n < next ? n : next;
    for (gather *g = c->gathers; g != NULL; g = g->next) {
        if (has_expired(g->waiters, now)) {
            missing_text(c, g->arrived, miss, sizeof(miss));
            snprintf(msg, sizeof(msg), "%s number %llu of communicator %s epoch %u: %s", g->name,
                     (unsigned long long)g->seq, c->name, c->epoch, miss);
        }
        n = expire_list(&g->waiters, now, msg, answer, ctx);
        next = n < next ? n : next;
    }
    return next;
}

static int forget_in(waiter **pp, void *token)
{
    for (; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->token == token) {
            waiter *w = *pp;
            *pp = w->next;
            free(w);
            return 1;
        }
    }
    return 0;
}

int tr_rdzv_forget(tr_rdzv_comm *c, void *token)
{
    if (forget_in(&c->waiters, token)) {
        return 1;
    }
    for (gather *g = c->gathers; g != NULL; g = g->next) {
        if (forget_in(&g->waiters, token)) {
            return 1;
        }
    }
    return 0;
}

static void pending_fill(const tr_rdzv_comm *c, const char *what, const uint8_t *arrived, tr_rdzv_pending *p)
{
    memset(p, 0, sizeof(*p));
    tr_strlcpy(p->what, what, sizeof(p->what));
    for (uint32_t r = 0; r < c->size; r++) {
        if (arrived[r]) {
            p->arrived++;
        } else if (p->n_missing < 32) {
            p->missing_rank[p->n_missing] = r;
            p->missing[p->n_missing++] = c->rank_names[r];
        }
    }
}

size_t tr_rdzv_pending_list(const tr_rdzv_comm *c, tr_rdzv_pending *out, size_t max)
{
    size_t n = 0;

    if (c->waiters != NULL) {
        if (n < max) {
            pending_fill(c, "ids", c->arrived, &out[n]);
        }
        n++;
    }
    for (const gather *g = c->gathers; g != NULL; g = g->next) {
        if (g->waiters != NULL) {
            if (n < max) {
                pending_fill(c, g->name, g->arrived, &out[n]);
            }
            n++;
        }
    }
    return n;
}
