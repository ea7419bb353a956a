/* metric_buf.h - the worker runtime's bounded metrics buffer and its drop
 * accounting (pure: no I/O, no locks; the caller serialises).
 *
 * Every reported point gets the next seq (1, 2, ...), whether it is kept or
 * dropped: a full buffer drops the new point and counts it, so the head sees
 * the gap and knows exactly what was lost. take() copies the oldest points
 * for a report and says up to which seq the report settles (`reported`):
 * the last point's seq, or - when the report empties the buffer - every seq
 * assigned so far, so drops after the last kept point are settled too.
 * ack() forgets what the head confirmed. */
#ifndef TR_METRIC_BUF_H
#define TR_METRIC_BUF_H

#include <stddef.h>
#include <stdint.h>

#define TR_MBUF_MAX_NAMES 1024 /* distinct metric names per worker */
#define TR_MBUF_NAME_MAX 127

typedef struct tr_mpoint {
    uint64_t seq, step;
    int64_t ts_ms;
    double value;
    const char *name; /* interned: valid until tr_mbuf_free */
} tr_mpoint;

typedef struct tr_mbuf_stats {
    uint64_t reported; /* seqs assigned (points given to add) */
    uint64_t acked;    /* highest seq the head confirmed (stored or known dropped) */
    uint64_t dropped;  /* points this side dropped (buffer full, or refused for good) */
    uint64_t buffered; /* points waiting */
} tr_mbuf_stats;

typedef struct tr_mbuf tr_mbuf;

/* tr_mbuf_new: a buffer of cap points (>= 1); NULL when out of memory. */
tr_mbuf *tr_mbuf_new(size_t cap);
void tr_mbuf_free(tr_mbuf *b);

/* tr_mbuf_name_ok: 1..127 printable bytes, no space or comma. */
int tr_mbuf_name_ok(const char *name);

/* tr_mbuf_add: OK; INVALID_ARGUMENT for a bad name (no seq used);
 * RESOURCE_EXHAUSTED when the point was dropped and counted (buffer full, or
 * more than TR_MBUF_MAX_NAMES names). */
int tr_mbuf_add(tr_mbuf *b, uint64_t step, const char *name, double value, int64_t ts_ms);

/* tr_mbuf_take copies up to max of the oldest points into out (left in the
 * buffer) and returns how many; *reported is the seq the report settles.
 * Returns 0 with *reported > acked when only drops are left to tell. */
size_t tr_mbuf_take(const tr_mbuf *b, size_t max, tr_mpoint *out, uint64_t *reported);

/* tr_mbuf_pending: there is something to report (points, or drops the head
 * has not heard of). */
int tr_mbuf_pending(const tr_mbuf *b);

/* tr_mbuf_ack forgets the points with seq <= acked (the head has them). */
void tr_mbuf_ack(tr_mbuf *b, uint64_t acked);

/* tr_mbuf_discard drops the points with seq <= upto for good (the head
 * refused them for a reason that will not change) and counts them. */
void tr_mbuf_discard(tr_mbuf *b, uint64_t upto);

void tr_mbuf_stats_get(const tr_mbuf *b, tr_mbuf_stats *st);

/* The receiving side (the head): what it knows of one worker's stream. */
typedef struct tr_mseq {
    uint64_t last_seq; /* the highest seq stored or settled */
    uint64_t stored;   /* points taken */
    uint64_t dropped;  /* seqs skipped by the sender (its drops) */
} tr_mseq;

/* tr_mseq_resend: a point with this seq was taken already (seq <= last_seq):
 * the sender lost the answer and sent it again. */
int tr_mseq_resend(uint64_t seq, uint64_t last_seq);

/* tr_mseq_take counts the point with this seq (points of one report come in
 * increasing seq) and returns 1, or returns 0 for a resend, which is not to
 * be stored again. A gap before seq is points the sender dropped. */
int tr_mseq_take(tr_mseq *m, uint64_t seq);

/* tr_mseq_settle: the sender has reported every seq up to reported; any it
 * did not send after the last taken were dropped. */
void tr_mseq_settle(tr_mseq *m, uint64_t reported);

#endif
