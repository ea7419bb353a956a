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
    t->limit = t->lim.frame_max;
    t->charged = 0;
    t->released = 0;
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
    t->charged += c->charge;
}

/* erase removes the entry at slot i, shifting later entries of its probe run
 * back so lookups never stop early (no tombstones). */
static void erase(tr_conns *t, size_t i)
{
    size_t j = i;

    t->live--;
    t->unauth -= t->slot[i].authed ? 0 : 1;
    t->charged -= t->slot[i].charge;
    t->released += t->slot[i].charge;
    if (t->unauth == 0) {
        t->limit = t->lim.frame_max; /* no stranger left to hold an old, larger frame */
    }
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

/* idle_longest: the slot of the connection with nothing in flight whose last
 * request or reply is the oldest, or (size_t)-1. */
static size_t idle_longest(const tr_conns *t)
{
    size_t best = (size_t)-1;

    for (size_t i = 0; i <= t->mask; i++) {
        const tr_conn *c = &t->slot[i];
        if (c->id != 0 && c->inflight == 0 && (best == (size_t)-1 || c->last_ms < t->slot[best].last_ms)) {
            best = i;
        }
    }
    return best;
}

static size_t pow2_at_most(size_t x)
{
    size_t p = 1;

    while (p <= x / 2) {
        p *= 2;
    }
    return p;
}

/* fair_share is the per-frame limit n strangers may have: budget / n, a power
 * of two (fewer changes as counts move) between the floor and frame_max. */
static size_t fair_share(const tr_conns_limits *lim, size_t n)
{
    size_t limit;

    if (n == 0 || lim->budget / n >= lim->frame_max) {
        return lim->frame_max;
    }
    limit = pow2_at_most(lim->budget / n);
    if (limit < lim->frame_floor) {
        limit = lim->frame_floor;
    }
    return limit < lim->frame_max ? limit : lim->frame_max;
}

/* make_room displaces one connection when the budget has less than the floor
 * left or the table is at its cap; 0, or -1 (refuse: *why says why). A
 * stranger's charge is at least the floor, so one displacement is enough. */
static int make_room(tr_conns *t, uint32_t *displaced, int *why)
{
    size_t victim;

    if (t->lim.budget - t->charged < t->lim.frame_floor) {
        victim = oldest_stranger(t);
        *why = TR_CONN_WHY_BUDGET;
        if (victim == (size_t)-1) {
            *why = TR_CONN_WHY_BUDGET_BUSY;
            return -1;
        }
    } else if (t->live >= t->lim.max_conns) {
        /* Without credentials a stranger is only a connection whose first
         * call has not arrived yet (a client that just connected): the one
         * idle longest goes, whether it made a call or not. */
        victim = t->lim.displace_idle ? idle_longest(t) : oldest_stranger(t);
        *why = t->lim.displace_idle ? TR_CONN_WHY_CAP_IDLE : TR_CONN_WHY_CAP_STRANGER;
        if (victim == (size_t)-1) {
            *why = TR_CONN_WHY_CAP_BUSY;
            return -1;
        }
    } else {
        *why = TR_CONN_WHY_NONE;
        return 0;
    }
    *displaced = t->slot[victim].id;
    erase(t, victim);
    return 0;
}

/* above_floor_room is what a new stranger may be charged beyond the floor:
 * charges above the floor may together take only half the budget, so the
 * other half always admits a burst of strangers at the floor (512 of 64 KiB
 * in 64 MiB) without displacing anyone. Charging the first strangers of a
 * burst the largest frame until the budget was full made the ninth displace
 * the first while its first call was still on the way. */
static size_t above_floor_room(const tr_conns *t)
{
    size_t half = t->lim.budget / 2;

    return t->charged < half ? half - t->charged : 0;
}

int tr_conns_add(tr_conns *t, uint32_t id, int64_t now, uint32_t *displaced, int *why)
{
    tr_conn c = {.id = id, .opened_ms = now, .last_ms = now};
    int dummy;
    size_t room;

    *displaced = 0;
    why = why ? why : &dummy;
    *why = TR_CONN_WHY_NONE;
    if (id == 0 || find(t, id) != NULL) {
        return TR_CONN_ADMITTED; /* not ours to count twice */
    }
    if (make_room(t, displaced, why) != 0) {
        return TR_CONN_REFUSED;
    }
    /* Its charge: the limit, no more than its fair share or what is left of
     * the half of the budget that charges above the floor may take. */
    room = above_floor_room(t);
    c.charge = fair_share(&t->lim, t->unauth + 1);
    if (c.charge > t->limit) {
        c.charge = t->limit;
    }
    if (c.charge > room) {
        c.charge = room > 0 ? pow2_at_most(room) : 0;
    }
    /* A full budget halves the limit: under a flood it falls to the floor and
     * strangers grow toward budget / floor, instead of a few holding large
     * frames and displacing each other in turn. */
    if (*why == TR_CONN_WHY_BUDGET && c.charge > t->limit / 2) {
        c.charge = t->limit / 2;
    }
    if (c.charge < t->lim.frame_floor) {
        c.charge = t->lim.frame_floor; /* make_room left at least the floor: it fits */
    }
    t->limit = c.charge;
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

/* mark_authed marks c authenticated for good. */
static void mark_authed(tr_conns *t, tr_conn *c)
{
    c->authed = 1;
    t->unauth--;
    t->charged -= c->charge; /* its frame arrived whole: nothing of it is held as a stranger's */
    c->charge = 0;
    if (t->unauth == 0) {
        t->limit = t->lim.frame_max;
    }
}

void tr_conns_authed(tr_conns *t, uint32_t id)
{
    tr_conn *c = id ? find(t, id) : NULL;

    if (c != NULL && !c->authed) {
        mark_authed(t, c);
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
        mark_authed(t, c);
    } else if (!c->authed && c->charge > t->limit) {
        /* Its frame arrived whole; the next one is read at the limit now. */
        t->charged -= c->charge - t->limit;
        c->charge = t->limit;
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
    return t->limit;
}

/* charged_at is what the strangers would be charged together at limit. */
static size_t charged_at(const tr_conns *t, size_t limit)
{
    size_t sum = 0;

    for (size_t i = 0; i <= t->mask; i++) {
        const tr_conn *c = &t->slot[i];
        if (c->id != 0 && !c->authed) {
            sum += c->charge > limit ? c->charge : limit;
        }
    }
    return sum;
}

void tr_conns_relax(tr_conns *t)
{
    size_t want = fair_share(&t->lim, t->unauth);

    /* Halve from the fair share until every stranger's charge fits in the
     * half of the budget that charges above the floor may take (the other
     * half stays for strangers arriving at the floor, above_floor_room). */
    for (; want > t->limit; want /= 2) {
        size_t sum = charged_at(t, want);
        if (sum <= t->lim.budget / 2) {
            for (size_t i = 0; i <= t->mask; i++) {
                tr_conn *c = &t->slot[i];
                if (c->id != 0 && !c->authed && c->charge < want) {
                    c->charge = want;
                }
            }
            t->charged = sum;
            t->limit = want;
            return;
        }
    }
}

size_t tr_conns_released(tr_conns *t)
{
    size_t n = t->released;

    t->released = 0;
    return n;
}
