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
} tr_conns_limits;

typedef struct tr_conn {
    uint32_t id; /* nng pipe id; 0 = free slot */
    uint8_t authed;
    uint32_t inflight;
    int64_t opened_ms;
    int64_t last_ms; /* last request or reply */
} tr_conn;

typedef struct tr_conns {
    tr_conns_limits lim;
    tr_conn *slot; /* open addressing, linear probing */
    size_t mask;   /* slots - 1 */
    size_t live;
    size_t unauth;
} tr_conns;

enum { TR_CONN_ADMITTED = 0, TR_CONN_REFUSED = 1 };

/* tr_conns_init allocates the table; 0, or -1 when out of memory. */
int tr_conns_init(tr_conns *t, const tr_conns_limits *lim);
void tr_conns_free(tr_conns *t);

/* tr_conns_add admits connection id (TR_CONN_ADMITTED; *displaced is the id of
 * a connection removed to make room, which the caller closes, or 0) or
 * refuses it (TR_CONN_REFUSED; the caller closes it). */
int tr_conns_add(tr_conns *t, uint32_t id, int64_t now, uint32_t *displaced);

/* tr_conns_remove forgets id (unknown ids are ignored: displaced and expired
 * connections are removed before nng reports them closed). */
void tr_conns_remove(tr_conns *t, uint32_t id);

/* tr_conns_begin notes a request on id (authed: it carried a valid
 * credential, which marks the connection for good); tr_conns_end its reply. */
void tr_conns_begin(tr_conns *t, uint32_t id, int authed, int64_t now);
void tr_conns_end(tr_conns *t, uint32_t id, int64_t now);

/* tr_conns_expire removes up to max connections past preauth_ms / idle_ms
 * into out and returns how many; *preauth counts those that never
 * authenticated. */
size_t tr_conns_expire(tr_conns *t, int64_t now, uint32_t *out, size_t max, size_t *preauth);

/* tr_conns_frame_limit is the per-frame receive limit for the table as it is. */
size_t tr_conns_frame_limit(const tr_conns *t);

#endif
