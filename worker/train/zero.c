/* zero.c - the shard map of ZeRO-1 and its host-memory collectives (zero.h). */
#include "zero.h"

#include <stdlib.h>
#include <string.h>

int tr_zero_map_init(tr_zero_map *m, const tr_zero_range *ranges, int n, int rank, int size, tr_err *err)
{
    memset(m, 0, sizeof(*m));
    if (size < 1 || rank < 0 || rank >= size || n < 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "zero: rank %d of %d ranks, %d ranges", rank, size,
                          n);
    }
    m->rank = rank;
    m->size = size;
    m->ranges = malloc(((size_t)n + 1) * sizeof(*m->ranges));
    m->runs = malloc(2 * ((size_t)n + 1) * sizeof(*m->runs));
    if (m->ranges == NULL || m->runs == NULL) {
        tr_zero_map_fini(m);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "zero: cannot allocate the shard map of %d ranges",
                          n);
    }
    memcpy(m->ranges, ranges, (size_t)n * sizeof(*ranges));
    m->nranges = n;
    /* pieces first, then tails: a norm over the shard's first `pieces`
     * elements is this rank's share without the tails every rank holds */
    for (int i = 0; i < n; i++) {
        size_t per = ranges[i].len / (size_t)size;
        if (per > 0) {
            m->runs[m->nruns++] = (tr_zero_run){ranges[i].off + (size_t)rank * per, per, m->shard, i};
            m->shard += per;
        }
    }
    m->pieces = m->shard;
    for (int i = 0; i < n; i++) {
        size_t even = tr_zero_even(m, i);
        if (ranges[i].len > even) {
            m->runs[m->nruns++] = (tr_zero_run){ranges[i].off + even, ranges[i].len - even, m->shard, i};
            m->shard += ranges[i].len - even;
        }
    }
    return TROUPE_OK;
}

void tr_zero_map_fini(tr_zero_map *m)
{
    free(m->ranges);
    free(m->runs);
    memset(m, 0, sizeof(*m));
}

int tr_zero_reduce_host(const tr_zero_map *m, tr_comm *c, float *g, tr_err *err)
{
    int rv = TROUPE_OK;

    if (c->ops->reduce_scatter == NULL) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "dp.zero 1 needs a communicator with reduce-scatter and all-gather, %s has none "
                          "(set dp.zero 0)",
                          c->ops->name);
    }
    for (int i = 0; i < m->nranges && rv == TROUPE_OK; i++) {
        const tr_zero_range *r = &m->ranges[i];
        size_t even = tr_zero_even(m, i);
        if (even > 0) {
            rv = c->ops->reduce_scatter(c, g + r->off, even, TR_COMM_MEAN, err);
        }
        if (rv == TROUPE_OK && r->len > even) {
            rv = c->ops->allreduce(c, g + r->off + even, r->len - even, TR_COMM_MEAN, err);
        }
    }
    return rv;
}

int tr_zero_gather_host(const tr_zero_map *m, tr_comm *c, float *x, tr_err *err)
{
    int rv = TROUPE_OK;

    if (c->ops->allgather == NULL) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "dp.zero 1: %s cannot all-gather (set dp.zero 0)",
                          c->ops->name);
    }
    for (int i = 0; i < m->nranges && rv == TROUPE_OK; i++) {
        size_t even = tr_zero_even(m, i);
        if (even > 0) {
            rv = c->ops->allgather(c, x + m->ranges[i].off, even, err);
        }
    }
    return rv;
}

void tr_zero_unpack(const tr_zero_map *m, const float *s, float *x)
{
    for (int k = 0; k < m->nruns; k++) {
        memcpy(x + m->runs[k].off, s + m->runs[k].soff, m->runs[k].len * sizeof(float));
    }
}

void tr_zero_pack(const tr_zero_map *m, const float *x, float *s)
{
    for (int k = 0; k < m->nruns; k++) {
        memcpy(s + m->runs[k].soff, x + m->runs[k].off, m->runs[k].len * sizeof(float));
    }
}

double tr_zero_sumsq(const tr_zero_map *m, const float *g)
{
    double sum = 0.0;

    for (int k = 0; k < m->nruns; k++) {
        const tr_zero_run *u = &m->runs[k];
        if (u->soff >= m->pieces && m->rank != 0) {
            continue; /* a tail */
        }
        for (size_t j = u->off; j < u->off + u->len; j++) {
            sum += (double)g[j] * g[j];
        }
    }
    return sum;
}
