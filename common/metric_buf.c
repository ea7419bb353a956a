/* metric_buf.c - see metric_buf.h. A ring of points plus an append-only
 * table of interned names (so a point is 40 bytes, whatever its name). */
#include <stdlib.h>
#include <string.h>

#include "metric_buf.h"
#include "troupe/status.h"

struct tr_mbuf {
    tr_mpoint *ring;
    size_t cap, head, n; /* oldest at head */
    uint64_t seq, acked, dropped;
    char *names[TR_MBUF_MAX_NAMES];
    size_t n_names;
};

tr_mbuf *tr_mbuf_new(size_t cap)
{
    tr_mbuf *b = calloc(1, sizeof(*b));

    if (b == NULL || cap == 0 || (b->ring = calloc(cap, sizeof(*b->ring))) == NULL) {
        free(b);
        return NULL;
    }
    b->cap = cap;
    return b;
}

void tr_mbuf_free(tr_mbuf *b)
{
    if (b == NULL) {
        return;
    }
    for (size_t i = 0; i < b->n_names; i++) {
        free(b->names[i]);
    }
    free(b->ring);
    free(b);
}

int tr_mbuf_name_ok(const char *name)
{
    size_t len = name != NULL ? strlen(name) : 0;

    if (len == 0 || len > TR_MBUF_NAME_MAX) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c <= ' ' || c >= 0x7f || c == ',') {
            return 0;
        }
    }
    return 1;
}

static const char *intern(tr_mbuf *b, const char *name)
{
    for (size_t i = 0; i < b->n_names; i++) {
        if (strcmp(b->names[i], name) == 0) {
            return b->names[i];
        }
    }
    if (b->n_names == TR_MBUF_MAX_NAMES || (b->names[b->n_names] = strdup(name)) == NULL) {
        return NULL;
    }
    return b->names[b->n_names++];
}

int tr_mbuf_add(tr_mbuf *b, uint64_t step, const char *name, double value, int64_t ts_ms)
{
    const char *in;
    tr_mpoint *p;

    if (!tr_mbuf_name_ok(name)) {
        return TROUPE_INVALID_ARGUMENT;
    }
    b->seq++;
    if (b->n == b->cap || (in = intern(b, name)) == NULL) {
        b->dropped++;
        return TROUPE_RESOURCE_EXHAUSTED;
    }
    p = &b->ring[(b->head + b->n) % b->cap];
    p->seq = b->seq;
    p->step = step;
    p->ts_ms = ts_ms;
    p->value = value;
    p->name = in;
    b->n++;
    return TROUPE_OK;
}

size_t tr_mbuf_take(const tr_mbuf *b, size_t max, tr_mpoint *out, uint64_t *reported)
{
    size_t n = b->n < max ? b->n : max;

    for (size_t i = 0; i < n; i++) {
        out[i] = b->ring[(b->head + i) % b->cap];
    }
    /* Emptying the buffer settles every seq given so far: the ones after the
     * last point were dropped. Otherwise only up to the last point taken. */
    *reported = n == b->n ? b->seq : out[n - 1].seq;
    return n;
}

int tr_mbuf_pending(const tr_mbuf *b)
{
    return b->n > 0 || b->seq > b->acked;
}

static void pop_upto(tr_mbuf *b, uint64_t upto, int count)
{
    while (b->n > 0 && b->ring[b->head].seq <= upto) {
        b->head = (b->head + 1) % b->cap;
        b->n--;
        b->dropped += (uint64_t)count;
    }
}

void tr_mbuf_ack(tr_mbuf *b, uint64_t acked)
{
    pop_upto(b, acked, 0);
    if (acked > b->acked) {
        b->acked = acked > b->seq ? b->seq : acked;
    }
}

void tr_mbuf_discard(tr_mbuf *b, uint64_t upto)
{
    pop_upto(b, upto, 1);
}

void tr_mbuf_stats_get(const tr_mbuf *b, tr_mbuf_stats *st)
{
    st->reported = b->seq;
    st->acked = b->acked;
    st->dropped = b->dropped;
    st->buffered = b->n;
}

int tr_mseq_resend(uint64_t seq, uint64_t last_seq)
{
    return seq <= last_seq;
}

int tr_mseq_take(tr_mseq *m, uint64_t seq)
{
    if (tr_mseq_resend(seq, m->last_seq)) {
        return 0;
    }
    m->dropped += seq - m->last_seq - 1;
    m->last_seq = seq;
    m->stored++;
    return 1;
}

void tr_mseq_settle(tr_mseq *m, uint64_t reported)
{
    if (reported > m->last_seq) {
        m->dropped += reported - m->last_seq;
        m->last_seq = reported;
    }
}
