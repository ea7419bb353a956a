/* rpc_conns.h - the RPC server's table of connections (internal to
 * rpc_server.c; pure bookkeeping, no nng, so the policy is unit-tested alone).
 *
 * Why: before a peer has shown a credential it can still hold a descriptor
 * and make nng allocate a whole frame (nng 1.5.2 allocates the length the
 * frame header announces, and fills it as bytes arrive). The table bounds
 * both:
 *  - at most max_conns connections; at the cap a new one displaces the oldest
 *    connection that has never made an authenticated call and has nothing in
 *    flight (an idle flood cannot lock legitimate clients out), and is
 *    refused only when every connection has authenticated;
 *  - the per-frame receive limit is budget / (unauthenticated connections),
 *    rounded down to a power of two, between floor and frame_max: with few
 *    strangers a frame may be as large as configured, with many each may
 *    only send a small one (nng checks the limit at each frame header and
 *    drops the connection of a frame over it);
 *  - the bytes strangers may hold together stay within budget, whatever the
 *    order they came in: each stranger is charged the limit in force when it
 *    could last have started a frame (nng allocates a frame whole at its
 *    header, so a stranger that came while the limit was high keeps its
 *    large buffer after the limit drops). A new stranger is charged the
 *    limit while charges above the floor take at most half the budget, else
 *    the floor (the other half admits a burst of fresh connections whose
 *    first calls are on their way without displacing any); when less than
 *    the floor is left the oldest idle stranger is displaced (its buffer
 *    goes back) and the limit halves, or the new one is refused. The floor
 *    therefore also bounds how many strangers there are: budget / floor.
 *    The limit is raised again only by tr_conns_relax, once every
 *    stranger's charge at the new limit fits half the budget;
 *  - with no credential configured (displace_idle) a call proves nothing, so
 *    at the cap the connection idle longest (last request or reply, or its
 *    opening) is displaced, whether it made a call or not: an idle flood that
 *    made one call each cannot lock clients out either, and a client that
 *    has just connected is the last to go;
 *  - a connection that made no authenticated call within preauth_ms of
 *    opening, or (authenticated) has had nothing in flight for idle_ms, is
 *    closed: a slow sender of an unfinished frame gives its buffer back.
 * Not thread-safe: the server holds its lock around every call. */
#ifndef TR_RPC_CONNS_H
#define TR_RPC_CONNS_H

#include <stddef.h>
#include <stdint.h>

typedef struct tr_conns_limits {
    size_t max_conns;   /* connection cap (>= 1) */
    size_t budget;      /* bytes unauthenticated connections may have in flight together */
    size_t frame_max;   /* the per-frame limit with few strangers */
    size_t frame_floor; /* it never drops below this */
    int64_t preauth_ms; /* close connections with no authenticated call after this; 0 = never */
    int64_t idle_ms;    /* close authenticated connections idle this long; 0 = never */
    int displace_idle;  /* at the cap, displace idle connections that made a call too */
} tr_conns_limits;

typedef struct tr_conn {
    uint32_t id; /* nng pipe id; 0 = free slot */
    uint8_t authed;
    uint32_t inflight;
    int64_t opened_ms;
    int64_t last_ms; /* last request or reply */
    size_t charge;   /* a stranger's share of the budget (bytes it may hold) */
} tr_conn;

typedef struct tr_conns {
    tr_conns_limits lim;
    tr_conn *slot; /* open addressing, linear probing */
    size_t mask;   /* slots - 1 */
    size_t live;
    size_t unauth;
    size_t limit;    /* the per-frame limit told to the transport */
    size_t charged;  /* sum of the strangers' charges (<= budget) */
    size_t released; /* charges of strangers closed, since tr_conns_released */
} tr_conns;

enum { TR_CONN_ADMITTED = 0, TR_CONN_REFUSED = 1 };

/* Why tr_conns_add displaced a connection (or refused one). */
enum {
    TR_CONN_WHY_NONE = 0,
    TR_CONN_WHY_CAP_STRANGER, /* max_conns reached: the oldest stranger made room */
    TR_CONN_WHY_CAP_IDLE,     /* max_conns reached, displace_idle: the connection idle longest */
    TR_CONN_WHY_BUDGET,       /* the budget is taken: the oldest stranger made room */
    TR_CONN_WHY_CAP_BUSY,     /* refused: at max_conns, nothing could be displaced */
    TR_CONN_WHY_BUDGET_BUSY,  /* refused: the budget is taken by strangers with calls in flight */
};

/* tr_conns_init allocates the table; 0, or -1 when out of memory. */
int tr_conns_init(tr_conns *t, const tr_conns_limits *lim);
void tr_conns_free(tr_conns *t);

/* tr_conns_add admits connection id (TR_CONN_ADMITTED; *displaced is the id of
 * a connection removed to make room, which the caller closes, or 0) or
 * refuses it (TR_CONN_REFUSED; the caller closes it). *why (may be NULL)
 * says why one was displaced or refused (TR_CONN_WHY_*). */
int tr_conns_add(tr_conns *t, uint32_t id, int64_t now, uint32_t *displaced, int *why);

/* tr_conns_remove forgets id (unknown ids are ignored: displaced and expired
 * connections are removed before nng reports them closed). */
void tr_conns_remove(tr_conns *t, uint32_t id);

/* tr_conns_begin notes a request on id (authed: it carried a valid
 * credential, which marks the connection for good); tr_conns_end its reply.
 * A request counts from its arrival, before its credential is checked: a
 * connection whose whole frame has arrived is in flight, and a burst of
 * new connections does not displace those whose first calls wait for a
 * handler. tr_conns_authed marks id authenticated once the credential of a
 * request already begun has been checked. */
void tr_conns_begin(tr_conns *t, uint32_t id, int authed, int64_t now);
void tr_conns_authed(tr_conns *t, uint32_t id);
void tr_conns_end(tr_conns *t, uint32_t id, int64_t now);

/* tr_conns_expire removes up to max connections past preauth_ms / idle_ms
 * into out and returns how many; *preauth counts those that never
 * authenticated. */
size_t tr_conns_expire(tr_conns *t, int64_t now, uint32_t *out, size_t max, size_t *preauth);

/* tr_conns_frame_limit is the per-frame receive limit for the table as it is. */
size_t tr_conns_frame_limit(const tr_conns *t);

/* tr_conns_relax raises the per-frame limit toward budget / strangers as far
 * as every stranger's charge at the new limit fits the budget (a scan of the
 * table: called about once a second, not per connection). */
void tr_conns_relax(tr_conns *t);

/* tr_conns_released returns the charges of strangers closed since the last
 * call (what their buffers may have held) and starts counting again. */
size_t tr_conns_released(tr_conns *t);

#endif
