/* checkpoint.h - save and resume a training run.
 *
 * A checkpoint holds everything that decides the rest of the loss curve: the
 * model config, the step count, the data sampler's RNG state, the fp32
 * parameters and AdamW's m and v. Layout (little-endian):
 *
 *   char magic[8] = "TRCKPT01"; u32 version = 1; u32 header bytes (= 96)
 *   i32 layers, width, heads, seq_len, vocab, padded_vocab
 *   u64 num_params; i64 step; u64 data_rng; u64 seed; u64 tokens_seen
 *   u64 payload_fnv1a (FNV-1a 64 of the three float arrays); u8 pad[8]
 *   f32 params[num_params]; f32 m[num_params]; f32 v[num_params]
 *
 * Writes are atomic: a temporary file in the same directory is written,
 * fsynced and renamed over the target, then the directory is fsynced, so a
 * crash leaves either the old or the new checkpoint, never a torn one. */
#ifndef TR_TRAIN_CHECKPOINT_H
#define TR_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "err.h"

typedef struct tr_ckpt_state {
    int64_t step;      /* optimiser steps completed */
    uint64_t data_rng; /* sampler state after those steps */
    uint64_t seed;
    uint64_t tokens_seen;
} tr_ckpt_state;

/* tr_ckpt_save writes b's parameters and optimiser state with st to path. */
int tr_ckpt_save(const char *path, tr_backend *b, const tr_ckpt_state *st, tr_err *err);

/* tr_ckpt_save_opt is tr_ckpt_save with AdamW's m and v (num_params each,
 * canonical layout) given by the caller instead of read from b: with
 * dp.zero 1 b holds only its shard, and the ranks gather the whole state
 * first (gather_opt_state). NULL m: read from b. */
int tr_ckpt_save_opt(const char *path, tr_backend *b, const tr_ckpt_state *st, const float *m, const float *v,
                     tr_err *err);

/* tr_ckpt_read reads and checks path like tr_ckpt_load, without touching b
 * (its config only): on OK *buf (free it) holds params, m and v, num_params
 * floats each, and *st the rest. Same errors as tr_ckpt_load. */
int tr_ckpt_read(const char *path, const tr_backend *b, tr_ckpt_state *st, float **buf, tr_err *err);

/* tr_ckpt_load reads path into b and *st. Returns NOT_FOUND when path does
 * not exist, FAILED_PRECONDITION when it was written for another model config
 * (the message lists both), DATA_LOSS when it is truncated or corrupt. */
int tr_ckpt_load(const char *path, tr_backend *b, tr_ckpt_state *st, tr_err *err);

#endif
