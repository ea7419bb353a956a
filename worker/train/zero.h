/* zero.h - the shard map of ZeRO-1 (dp.zero 1): which part of the optimiser
 * state each data-parallel rank holds and updates.
 *
 * The gradient vector is reduced in ranges (the CPU backend: one per
 * parameter tensor; the CUDA backend: one per slice of a bucket, so a bucket
 * can be reduce-scattered as soon as backward has made it final). A range of
 * len elements is cut in size pieces of per = len / size elements (the
 * collectives need equal segments) and a tail of len - size * per < size
 * elements:
 *
 *   [off, off + size*per)           reduce-scattered: rank r gets the mean of
 *                                   piece r, [off + r*per, off + (r+1)*per)
 *   [off + size*per, off + len)     the tail: all-reduced, and updated by
 *                                   every rank alike (identical inputs give
 *                                   identical bits)
 *
 * A rank's runs are its piece and the tail of every range; its AdamW m and v
 * hold exactly those elements, packed in run order (shard elements in all:
 * every piece, then every tail), about num_params / size plus fewer than
 * size per range. After the update
 * the pieces of the weights are all-gathered, so every rank again holds the
 * whole model for the next forward. */
#ifndef TR_TRAIN_ZERO_H
#define TR_TRAIN_ZERO_H

#include <stddef.h>

#include "comm.h"
#include "err.h"

typedef struct tr_zero_range {
    size_t off, len; /* a run of the flat vector */
} tr_zero_range;

typedef struct tr_zero_run {
    size_t off, len; /* in the flat vector */
    size_t soff;     /* where it starts in the packed shard */
    int range;       /* the range it belongs to */
} tr_zero_run;

typedef struct tr_zero_map {
    int rank, size;
    int nranges;
    tr_zero_range *ranges;
    int nruns;
    tr_zero_run *runs; /* every range's piece, then every tail; empty ones left out */
    size_t shard;      /* elements this rank's m (and v) hold */
    size_t pieces;     /* of which the pieces: the shard's first elements */
} tr_zero_map;

/* tr_zero_map_init builds rank's map of n ranges for size ranks into *m
 * (caller storage; free with tr_zero_map_fini). RESOURCE_EXHAUSTED when out
 * of memory, INVALID_ARGUMENT when rank is not in [0, size). */
int tr_zero_map_init(tr_zero_map *m, const tr_zero_range *ranges, int n, int rank, int size, tr_err *err);

/* tr_zero_map_fini frees what init allocated (a zeroed map is fine). */
void tr_zero_map_fini(tr_zero_map *m);

/* tr_zero_even is the reduce-scattered part of range i (size * per). */
static inline size_t tr_zero_even(const tr_zero_map *m, int i)
{
    return m->ranges[i].len / (size_t)m->size * (size_t)m->size;
}

/* tr_zero_reduce_host replaces the ranges of g (host memory) with their mean
 * over c's ranks: each piece on its rank only, each tail everywhere. */
int tr_zero_reduce_host(const tr_zero_map *m, tr_comm *c, float *g, tr_err *err);

/* tr_zero_gather_host all-gathers the pieces of x (host memory) in place. */
int tr_zero_gather_host(const tr_zero_map *m, tr_comm *c, float *x, tr_err *err);

/* tr_zero_unpack copies the packed shard s into its runs' places in the flat
 * vector x; tr_zero_pack the other way. */
void tr_zero_unpack(const tr_zero_map *m, const float *s, float *x);
void tr_zero_pack(const tr_zero_map *m, const float *x, float *s);

/* tr_zero_sumsq is this rank's share of the squared norm of g: its pieces,
 * and the tails on rank 0 only (every rank holds them), so that the sum over
 * the ranks counts every element once. */
double tr_zero_sumsq(const tr_zero_map *m, const float *g);

#endif
