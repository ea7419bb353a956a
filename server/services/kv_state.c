/* kv_state.c - one space of a job's key-value store (kv_state.h).
 *
 * Keys are kept in an array sorted by key (binary search; inserts move the
 * tail): a process group's store holds a few keys per rank, and a sorted
 * array keeps them in one allocation. Waiters are a plain array: a set walks
 * it and answers those whose keys are now all present. Every change that
 * could complete a wait goes through wake(). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv_state.h"

typedef struct kv_entry {
    char *key;
    uint8_t *val;
    size_t len;
} kv_entry;

typedef struct kv_waiter {
    void *token;
    int64_t since, until;
    char **keys;
    size_t n;
    int want_values;
} kv_waiter;

struct tr_kv_space {
    char *comm;
    uint32_t epoch;
    uint32_t size;     /* ranks of the communicator */
    char **rank_names; /* size of them: "job7-policy-1 on node-b" */
    uint8_t *touched;  /* size flags: the rank called this space */
    tr_kv_usage *usage;
    kv_entry *e;
    size_t n, cap;
    kv_waiter *w;
    size_t n_w, cap_w;
};

static void names_free(tr_kv_space *s)
{
    for (uint32_t r = 0; s->rank_names != NULL && r < s->size; r++) {
        free(s->rank_names[r]);
    }
    free(s->rank_names);
    free(s->touched);
}

int tr_kv_space_new(const char *comm, uint32_t epoch, uint32_t size, const char *const *rank_names,
                    tr_kv_usage *usage, tr_kv_space **out, tr_err *err)
{
    tr_kv_space *s = calloc(1, sizeof(*s));
    int ok = s != NULL && (s->comm = strdup(comm)) != NULL;

    *out = NULL;
    if (ok) {
        s->size = size;
        s->rank_names = calloc(size ? size : 1, sizeof(char *));
        s->touched = calloc(size ? size : 1, 1);
        ok = s->rank_names != NULL && s->touched != NULL;
    }
    for (uint32_t r = 0; ok && r < size; r++) {
        s->rank_names[r] = strdup(rank_names != NULL && rank_names[r] != NULL ? rank_names[r] : "?");
        ok = s->rank_names[r] != NULL;
    }
    if (!ok) {
        if (s != NULL) {
            names_free(s);
            free(s->comm);
        }
        free(s);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
    }
    s->epoch = epoch;
    s->usage = usage;
    *out = s;
    return TROUPE_OK;
}

void tr_kv_touch(tr_kv_space *s, uint32_t rank)
{
    if (rank < s->size) {
        s->touched[rank] = 1;
    }
}

static void waiter_free(kv_waiter *w)
{
    for (size_t i = 0; i < w->n; i++) {
        free(w->keys[i]);
    }
    free(w->keys);
}

void tr_kv_space_free(tr_kv_space *s, int code, const char *why, tr_kv_answer_fn answer, void *ctx)
{
    if (s == NULL) {
        return;
    }
    for (size_t i = 0; i < s->n_w; i++) {
        answer(s->w[i].token, code, why, NULL, NULL, 0, ctx);
        waiter_free(&s->w[i]);
    }
    for (size_t i = 0; i < s->n; i++) {
        s->usage->keys--;
        s->usage->bytes -= strlen(s->e[i].key) + s->e[i].len;
        free(s->e[i].key);
        free(s->e[i].val);
    }
    free(s->w);
    free(s->e);
    names_free(s);
    free(s->comm);
    free(s);
}

const char *tr_kv_space_comm(const tr_kv_space *s)
{
    return s->comm;
}

uint32_t tr_kv_space_epoch(const tr_kv_space *s)
{
    return s->epoch;
}

size_t tr_kv_num_keys(const tr_kv_space *s)
{
    return s->n;
}

size_t tr_kv_num_waiters(const tr_kv_space *s)
{
    return s->n_w;
}

/* find returns the index of key, or where it would go with *found = 0. */
static size_t find(const tr_kv_space *s, const char *key, int *found)
{
    size_t lo = 0, hi = s->n;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(s->e[mid].key, key);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    *found = 0;
    return lo;
}

static int check_key(const char *key, tr_err *err)
{
    size_t n = key ? strlen(key) : 0;
    if (n == 0 || n > TR_KV_MAX_KEY) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "a store key is 1 to %d bytes, not %zu",
                          TR_KV_MAX_KEY, n);
    }
    return TROUPE_OK;
}

int tr_kv_get(const tr_kv_space *s, const char *key, const uint8_t **val, size_t *len)
{
    int found;
    size_t i = find(s, key, &found);

    if (found) {
        *val = s->e[i].val;
        *len = s->e[i].len;
    }
    return found;
}

static int grow(tr_kv_space *s)
{
    size_t cap = s->cap ? s->cap * 2 : 16;
    kv_entry *e;

    if (s->n < s->cap) {
        return 0;
    }
    if ((e = realloc(s->e, cap * sizeof(*e))) == NULL) {
        return -1;
    }
    s->e = e;
    s->cap = cap;
    return 0;
}

/* put stores len bytes under key within the job's bounds. */
static int put(tr_kv_space *s, const char *key, const uint8_t *val, size_t len, tr_err *err)
{
    int found, rv = check_key(key, err);
    size_t i, klen = key ? strlen(key) : 0;
    uint64_t bytes;
    uint8_t *copy;

    if (rv != TROUPE_OK) {
        return rv;
    }
    i = find(s, key, &found);
    bytes = s->usage->bytes + len + (found ? 0 : klen) - (found ? s->e[i].len : 0);
    if (!found && s->usage->keys + 1 > s->usage->max_keys) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED,
                          "the job's store holds %" PRIu64 " keys, its most (head store_max_keys=%" PRIu64
                          "): delete keys the job no longer needs, or raise store_max_keys",
                          s->usage->keys, s->usage->max_keys);
    }
    if (bytes > s->usage->max_bytes) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED,
                          "setting '%.64s' (%zu bytes) would bring the job's store to %" PRIu64
                          " bytes, over store_max_bytes=%" PRIu64 " (now %" PRIu64
                          "): store less, or raise it",
                          key, len, bytes, s->usage->max_bytes, s->usage->bytes);
    }
    if ((copy = malloc(len ? len : 1)) == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
    }
    if (len > 0) {
        memcpy(copy, val, len);
    }
    if (!found) {
        char *k = strdup(key);
        if (k == NULL || grow(s) != 0) {
            free(k);
            free(copy);
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
        }
        memmove(s->e + i + 1, s->e + i, (s->n - i) * sizeof(*s->e));
        s->e[i].key = k;
        s->e[i].val = NULL;
        s->e[i].len = 0;
        s->n++;
        s->usage->keys++;
    } else {
        free(s->e[i].val);
    }
    s->e[i].val = copy;
    s->e[i].len = len;
    s->usage->bytes = bytes;
    return TROUPE_OK;
}

static int all_set(const tr_kv_space *s, const kv_waiter *w)
{
    int found;
    for (size_t k = 0; k < w->n; k++) {
        (void)find(s, w->keys[k], &found);
        if (!found) {
            return 0;
        }
    }
    return 1;
}

/* answer_ok answers w with its keys' values (or none). */
static void answer_ok(tr_kv_space *s, kv_waiter *w, tr_kv_answer_fn answer, void *ctx)
{
    const uint8_t *vals[TR_KV_MAX_WAIT_KEYS];
    size_t lens[TR_KV_MAX_WAIT_KEYS], n = w->want_values ? w->n : 0;

    for (size_t k = 0; k < n; k++) {
        (void)tr_kv_get(s, w->keys[k], &vals[k], &lens[k]);
    }
    answer(w->token, TROUPE_OK, NULL, vals, lens, n, ctx);
}

/* wake answers every waiter whose keys are all set now. */
static void wake(tr_kv_space *s, tr_kv_answer_fn answer, void *ctx)
{
    size_t k = 0;

    for (size_t i = 0; i < s->n_w; i++) {
        if (all_set(s, &s->w[i])) {
            answer_ok(s, &s->w[i], answer, ctx);
            waiter_free(&s->w[i]);
        } else {
            s->w[k++] = s->w[i];
        }
    }
    s->n_w = k;
}

int tr_kv_set(tr_kv_space *s, const char *key, const uint8_t *val, size_t len, tr_kv_answer_fn answer,
              void *ctx, tr_err *err)
{
    int rv = put(s, key, val, len, err);
    if (rv == TROUPE_OK) {
        wake(s, answer, ctx);
    }
    return rv;
}

static int parse_i64(const uint8_t *val, size_t len, int64_t *out)
{
    char buf[32], *end = NULL;
    long long v;

    if (len == 0 || len >= sizeof(buf)) {
        return -1;
    }
    memcpy(buf, val, len);
    buf[len] = '\0';
    errno = 0;
    v = strtoll(buf, &end, 10);
    if (errno != 0 || end == buf || *end != '\0') {
        return -1;
    }
    *out = v;
    return 0;
}

int tr_kv_add(tr_kv_space *s, const char *key, int64_t amount, int64_t *out, tr_kv_answer_fn answer,
              void *ctx, tr_err *err)
{
    const uint8_t *cur;
    size_t len;
    int64_t v = 0, sum;
    char text[32];
    int rv = check_key(key, err);

    *out = 0;
    if (rv != TROUPE_OK) {
        return rv;
    }
    if (tr_kv_get(s, key, &cur, &len) && parse_i64(cur, len, &v) != 0) {
        return tr_err_set(
            err, TROUPE_INVALID_ARGUMENT,
            "store key '%.64s' holds %zu bytes that are not a decimal integer: add needs a number "
            "(set it with add only, or delete it first)",
            key, len);
    }
    if (__builtin_add_overflow(v, amount, &sum)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "store key '%.64s': %" PRId64 " + %" PRId64 " overflows int64", key, v, amount);
    }
    snprintf(text, sizeof(text), "%" PRId64, sum);
    if ((rv = put(s, key, (const uint8_t *)text, strlen(text), err)) != TROUPE_OK) {
        return rv;
    }
    *out = sum;
    wake(s, answer, ctx);
    return TROUPE_OK;
}

int tr_kv_compare_set(tr_kv_space *s, const char *key, const uint8_t *expected, size_t exp_len,
                      const uint8_t *desired, size_t des_len, const uint8_t **cur, size_t *cur_len,
                      tr_kv_answer_fn answer, void *ctx, tr_err *err)
{
    const uint8_t *v;
    size_t len;
    int rv = check_key(key, err), found;

    *cur = NULL;
    *cur_len = 0;
    if (rv != TROUPE_OK) {
        return rv;
    }
    found = tr_kv_get(s, key, &v, &len);
    if (!found && exp_len > 0) {
        *cur = expected;
        *cur_len = exp_len;
        return TROUPE_OK;
    }
    if (found && (len != exp_len || (len > 0 && memcmp(v, expected, len) != 0))) {
        *cur = v;
        *cur_len = len;
        return TROUPE_OK;
    }
    if ((rv = put(s, key, desired, des_len, err)) != TROUPE_OK) {
        return rv;
    }
    (void)tr_kv_get(s, key, cur, cur_len);
    wake(s, answer, ctx);
    return TROUPE_OK;
}

int tr_kv_delete(tr_kv_space *s, const char *key)
{
    int found;
    size_t i = key ? find(s, key, &found) : (found = 0, 0);

    if (!found) {
        return 0;
    }
    s->usage->keys--;
    s->usage->bytes -= strlen(s->e[i].key) + s->e[i].len;
    free(s->e[i].key);
    free(s->e[i].val);
    memmove(s->e + i, s->e + i + 1, (s->n - i - 1) * sizeof(*s->e));
    s->n--;
    return 1;
}

int tr_kv_wait(tr_kv_space *s, const char *const *keys, size_t n, int want_values, void *token, int64_t since,
               int64_t until, int *parked, tr_err *err)
{
    kv_waiter w = {token, since, until, NULL, n, want_values};
    int rv;

    *parked = 0;
    if (n == 0 || n > TR_KV_MAX_WAIT_KEYS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "wait for 1 to %d keys, not %zu", TR_KV_MAX_WAIT_KEYS,
                          n);
    }
    for (size_t k = 0; k < n; k++) {
        if ((rv = check_key(keys[k], err)) != TROUPE_OK) {
            return rv;
        }
    }
    w.keys = (char **)keys; /* borrowed for the check only */
    if (all_set(s, &w)) {
        return TROUPE_OK;
    }
    if (s->n_w == s->cap_w) {
        size_t cap = s->cap_w ? s->cap_w * 2 : 8;
        kv_waiter *grown = realloc(s->w, cap * sizeof(*grown));
        if (grown == NULL) {
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
        }
        s->w = grown;
        s->cap_w = cap;
    }
    if ((w.keys = calloc(n, sizeof(char *))) == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
    }
    for (size_t k = 0; k < n; k++) {
        if ((w.keys[k] = strdup(keys[k])) == NULL) {
            w.n = k;
            waiter_free(&w);
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
        }
    }
    s->w[s->n_w++] = w;
    *parked = 1;
    return TROUPE_OK;
}

/* absent_text appends "; 1 of 4 ranks never called this store: 2 job7-policy-2
 * on node-b" when some rank never did: a rank that never arrived is the usual
 * reason a key is never set, and its name is what the user needs. */
static int absent_text(const tr_kv_space *s, char *msg, size_t used, size_t cap)
{
    uint32_t absent = 0, listed = 0;

    for (uint32_t r = 0; r < s->size; r++) {
        absent += !s->touched[r];
    }
    if (absent == 0 || used >= cap) {
        return 0;
    }
    used += (size_t)snprintf(msg + used, cap - used, "; %u of %u ranks never called this store:", absent,
                             s->size);
    for (uint32_t r = 0; r < s->size && used < cap; r++) {
        if (s->touched[r]) {
            continue;
        }
        if (used + 80 > cap || listed == 16) {
            snprintf(msg + used, cap - used, " ... (%u more)", absent - listed);
            return 1;
        }
        used += (size_t)snprintf(msg + used, cap - used, "%s %u %s", listed ? "," : "", r, s->rank_names[r]);
        listed++;
    }
    return 1;
}

/* expire_msg names the keys w still waits for (the first few, quoted) and
 * the ranks that never called the space. */
static void expire_msg(const tr_kv_space *s, const kv_waiter *w, int64_t now, char *msg, size_t cap)
{
    size_t used, missing = 0, named = 0;
    int found;

    used = (size_t)snprintf(msg, cap, "store of %s (epoch %u): waited %" PRId64 " ms for key", s->comm,
                            s->epoch, now - w->since);
    for (size_t k = 0; k < w->n; k++) {
        (void)find(s, w->keys[k], &found);
        if (!found) {
            missing++;
        }
    }
    used += (size_t)snprintf(msg + used, used < cap ? cap - used : 0, "%s", missing > 1 ? "s" : "");
    for (size_t k = 0; k < w->n && used < cap; k++) {
        (void)find(s, w->keys[k], &found);
        if (!found && named < 8) {
            used += (size_t)snprintf(msg + used, cap - used, "%s'%.128s'", named ? ", " : " ", w->keys[k]);
            named++;
        }
    }
    if (used < cap) {
        used += (size_t)snprintf(msg + used, cap - used, "%s, never set (%zu of %zu keys missing)",
                                 missing > named ? " ..." : "", missing, w->n);
    }
    if (!absent_text(s, msg, used, cap) && (used = strlen(msg)) < cap) {
        snprintf(msg + used, cap - used, ": is every rank running and setting it?");
    }
}

int64_t tr_kv_expire(tr_kv_space *s, int64_t now, tr_kv_answer_fn answer, void *ctx)
{
    int64_t next = INT64_MAX;
    char msg[3072];
    size_t k = 0;

    for (size_t i = 0; i < s->n_w; i++) {
        if (s->w[i].until <= now) {
            expire_msg(s, &s->w[i], now, msg, sizeof(msg));
            answer(s->w[i].token, TROUPE_DEADLINE_EXCEEDED, msg, NULL, NULL, 0, ctx);
            waiter_free(&s->w[i]);
        } else {
            next = s->w[i].until < next ? s->w[i].until : next;
            s->w[k++] = s->w[i];
        }
    }
    s->n_w = k;
    return next;
}

int tr_kv_forget(tr_kv_space *s, void *token)
{
    for (size_t i = 0; i < s->n_w; i++) {
        if (s->w[i].token == token) {
            waiter_free(&s->w[i]);
            s->w[i] = s->w[--s->n_w];
            return 1;
        }
    }
    return 0;
}
