/* bound_names.c - node names bound per credential (see bound_names.h).
 *
 * Two chained hash tables: one of (credential, name) pairs with the number
 * of records behind each, one of credentials with their number of distinct
 * names. Both grow at a load factor of 1; chains make removal simple. */
#include "bound_names.h"

#include <stdlib.h>
#include <string.h>

typedef struct pair {
    struct pair *next;
    uint64_t cred, hash;
    size_t records;
    char *name;
} pair;

typedef struct owner {
    struct owner *next;
    uint64_t cred;
    size_t names;
} owner;

struct tr_bound_names {
    pair **pairs;
    size_t n_pairs, pair_mask;
    owner **owners;
    size_t n_owners, owner_mask;
};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static uint64_t pair_hash(uint64_t cred, const char *name)
{
    uint64_t x = 0xcbf29ce484222325ull ^ mix(cred);
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        x = (x ^ *p) * 0x100000001b3ull;
    }
    return mix(x);
}

tr_bound_names *tr_bound_names_alloc(void)
{
    tr_bound_names *b = calloc(1, sizeof(*b));

    if (b == NULL) {
        return NULL;
    }
    b->pairs = calloc(16, sizeof(*b->pairs));
    b->owners = calloc(16, sizeof(*b->owners));
    if (b->pairs == NULL || b->owners == NULL) {
        tr_bound_names_free(b);
        return NULL;
    }
    b->pair_mask = b->owner_mask = 15;
    return b;
}

void tr_bound_names_free(tr_bound_names *b)
{
    if (b == NULL) {
        return;
    }
    for (size_t i = 0; b->pairs != NULL && i <= b->pair_mask; i++) {
        for (pair *p = b->pairs[i], *next; p != NULL; p = next) {
            next = p->next;
            free(p->name);
            free(p);
        }
    }
    for (size_t i = 0; b->owners != NULL && i <= b->owner_mask; i++) {
        for (owner *o = b->owners[i], *next; o != NULL; o = next) {
            next = o->next;
            free(o);
        }
    }
    free(b->pairs);
    free(b->owners);
    free(b);
}

static pair **pair_slot(const tr_bound_names *b, uint64_t cred, const char *name, uint64_t hash)
{
    pair **pp = &b->pairs[hash & b->pair_mask];

    while (*pp != NULL && ((*pp)->hash != hash || (*pp)->cred != cred || strcmp((*pp)->name, name) != 0)) {
        pp = &(*pp)->next;
    }
    return pp;
}

static owner **owner_slot(const tr_bound_names *b, uint64_t cred)
{
    owner **op = &b->owners[mix(cred) & b->owner_mask];

    while (*op != NULL && (*op)->cred != cred) {
        op = &(*op)->next;
    }
    return op;
}

/* grow doubles a table whose entries outnumber its buckets (a failed
 * allocation leaves it as it is: longer chains, still correct). */
static void grow_pairs(tr_bound_names *b)
{
    size_t n = (b->pair_mask + 1) * 2;
    pair **t;

    if (b->n_pairs <= b->pair_mask || (t = calloc(n, sizeof(*t))) == NULL) {
        return;
    }
    for (size_t i = 0; i <= b->pair_mask; i++) {
        for (pair *p = b->pairs[i], *next; p != NULL; p = next) {
            next = p->next;
            p->next = t[p->hash & (n - 1)];
            t[p->hash & (n - 1)] = p;
        }
    }
    free(b->pairs);
    b->pairs = t;
    b->pair_mask = n - 1;
}

static void grow_owners(tr_bound_names *b)
{
    size_t n = (b->owner_mask + 1) * 2;
    owner **t;

    if (b->n_owners <= b->owner_mask || (t = calloc(n, sizeof(*t))) == NULL) {
        return;
    }
    for (size_t i = 0; i <= b->owner_mask; i++) {
        for (owner *o = b->owners[i], *next; o != NULL; o = next) {
            next = o->next;
            o->next = t[mix(o->cred) & (n - 1)];
            t[mix(o->cred) & (n - 1)] = o;
        }
    }
    free(b->owners);
    b->owners = t;
    b->owner_mask = n - 1;
}

int tr_bound_names_add(tr_bound_names *b, uint64_t cred, const char *name)
{
    uint64_t hash = pair_hash(cred, name);
    pair **pp = pair_slot(b, cred, name, hash), *p;
    owner **op, *o;

    if (*pp != NULL) {
        (*pp)->records++;
        return 0;
    }
    op = owner_slot(b, cred);
    o = *op;
    p = calloc(1, sizeof(*p));
    if (p == NULL || (p->name = strdup(name)) == NULL || (o == NULL && (o = calloc(1, sizeof(*o))) == NULL)) {
        if (p != NULL) {
            free(p->name);
        }
        free(p);
        return -1;
    }
    if (*op == NULL) {
        o->cred = cred;
        *op = o;
        b->n_owners++;
    }
    o->names++;
    p->cred = cred;
    p->hash = hash;
    p->records = 1;
    *pp = p;
    b->n_pairs++;
    grow_pairs(b);
    grow_owners(b);
    return 0;
}

void tr_bound_names_remove(tr_bound_names *b, uint64_t cred, const char *name)
{
    pair **pp = pair_slot(b, cred, name, pair_hash(cred, name)), *p = *pp;
    owner **op, *o;

    if (p == NULL || --p->records > 0) {
        return;
    }
    *pp = p->next;
    free(p->name);
    free(p);
    b->n_pairs--;
    op = owner_slot(b, cred);
    o = *op;
    if (o != NULL && --o->names == 0) {
        *op = o->next;
        free(o);
        b->n_owners--;
    }
}

int tr_bound_names_has(const tr_bound_names *b, uint64_t cred, const char *name)
{
    return *pair_slot(b, cred, name, pair_hash(cred, name)) != NULL;
}

size_t tr_bound_names_count(const tr_bound_names *b, uint64_t cred)
{
    const owner *o = *owner_slot(b, cred);

    return o != NULL ? o->names : 0;
}
