/* rpc_conns.c - the RPC server's table of connections (see rpc_conns.h). */
#include "rpc_conns.h"

#include <stdlib.h>

static size_t hash_id(uint32_t id)
{
    return (size_t)(id * 2654435761u);
}

int tr_conns_init(tr_conns *t, const tr_conns_limits *lim)
{
    size_t n = 16;

    t->lim = *lim;
    if (t->lim.max_conns == 0) {
        t->lim.max_conns = 1;
    }
    while (n < t->lim.max_conns * 2) { /* load factor <= 1/2 */
        n *= 2;
    }
    t->slot = calloc(n, sizeof(*t->slot));
    if (t->slot == NULL) {
        return -1;
    }
    t->mask = n - 1;
    t->live = 0;
    t->unauth = 0;
    return 0;
}

void tr_conns_free(tr_conns *t)
{
    free(t->slot);
    t->slot = NULL;
}

static tr_conn *find(tr_conns *t, uint32_t id)
{
    for (size_t i = hash_id(id) & t->mask;; i = (i + 1) & t->mask) {
        if (t->slot[i].id == id) {
            return &t->slot[i];
        }
        if (t->slot[i].id == 0) {
            return NULL;
        }
    }
}

static void insert(tr_conns *t, const tr_conn *c)
{
    size_t i = hash_id(c->id) & t->mask;

    while (t->slot[i].id != 0) {
        i = (i + 1) & t->mask;
    }
    t->slot[i] = *c;
    t->live++;
    t->unauth += c->authed ? 0 : 1;
}

/* erase removes the entry at slot i, shifting later entries of its probe run
 * back so lookups never stop early (no tombstones). */
static void erase(tr_conns *t, size_t i)
{
    size_t j = i;

    t->live--;
    t->unauth -= t->slot[i].authed ? 0 : 1;
    for (;;) {
        size_t home;
        j = (j + 1) & t->mask;
        if (t->slot[j].id == 0) {
            break;
        }
        home = hash_id(t->slot[j].id) & t->mask;
        /* Move j into the hole at i unless its home lies cyclically in (i, j]. */
        if ((i <= j) ? (home <= i || home > j) : (home <= i && home > j)) {
            t->slot[i] = t->slot[j];
            i = j;
        }
    }
    t->slot[i].id = 0;
}

/* oldest_stranger: the slot of the oldest unauthenticated connection with
 * nothing in flight, or (size_t)-1. */
static size_t oldest_stranger(const tr_conns *t)
{
    size_t best = (size_t)-1;

    for (size_t i = 0; i <= t->mask; i++) {
        const tr_conn *c = &t->slot[i];
        if (c->id != 0 && !c->authed && c->inflight == 0 &&
            (best == (size_t)-1 || c->opened_ms < t->slot[best].opened_ms)) {
            best = i;
        }
    }
    return best;
}

int tr_conns_add(tr_conns *t, uint32_t id, int64_t now, uint32_t *displaced)
{
    tr_conn c = {.id = id, .opened_ms = now, .last_ms = now};

    *displaced = 0;
    if (id == 0 || find(t, id) != NULL) {
        return TR_CONN_ADMITTED; /* not ours to count twice */
    }
    if (t->live >= t->lim.max_conns) {
        size_t victim = oldest_stranger(t);
        if (victim == (size_t)-1) {
            return TR_CONN_REFUSED;
        }
        *displaced = t->slot[victim].id;
        erase(t, victim);
    }
    insert(t, &c);
    return TR_CONN_ADMITTED;
}

void tr_conns_remove(tr_conns *t, uint32_t id)
{
    tr_conn *c = id ? find(t, id) : NULL;

    if (c != NULL) {
        erase(t, (size_t)(c - t->slot));
    }
}

void tr_conns_begin(tr_conns *t, uint32_t id, int authed, int64_t now)
{
    tr_conn *c = id ? find(t, id) : NULL;

    if (c == NULL) {
        return;
    }
    c->inflight++;
    c->last_ms = now;
    if (authed && !c->authed) {
        c->authed = 1;
        t->unauth--;
    }
}

void tr_conns_end(tr_conns *t, uint32_t id, int64_t now)
{
    tr_conn *c = id ? find(t, id) : NULL;

    if (c == NULL) {
        return;
    }
    if (c->inflight > 0) {
        c->inflight--;
    }
    c->last_ms = now;
}

static int expired(const tr_conns_limits *lim, const tr_conn *c, int64_t now)
{
    if (c->inflight > 0) {
        return 0;
    }
    if (!c->authed) {
        return lim->preauth_ms > 0 && now - c->opened_ms >= lim->preauth_ms;
    }
    return lim->idle_ms > 0 && now - c->last_ms >= lim->idle_ms;
}

size_t tr_conns_expire(tr_conns *t, int64_t now, uint32_t *out, size_t max, size_t *preauth)
{
    size_t n = 0;

    *preauth = 0;
    for (size_t i = 0; i <= t->mask && n < max;) {
        tr_conn *c = &t->slot[i];
        if (c->id != 0 && expired(&t->lim, c, now)) {
            *preauth += c->authed ? 0 : 1;
            out[n++] = c->id;
            erase(t, i); /* slot i now holds a shifted entry (or none): look again */
            continue;
        }
        i++;
    }
    return n;
}

size_t tr_conns_frame_limit(const tr_conns *t)
{
    size_t share, limit = 1;

    if (t->unauth == 0 || t->lim.budget / t->unauth >= t->lim.frame_max) {
        return t->lim.frame_max;
    }
    share = t->lim.budget / t->unauth;
    while (limit <= share / 2) { /* a power of two: fewer changes as counts move */
        limit *= 2;
    }
    if (limit < t->lim.frame_floor) {
        limit = t->lim.frame_floor;
    }
    return limit < t->lim.frame_max ? limit : t->lim.frame_max;
}
