/* data.h - token data for troupe-train.
 *
 * Two inputs are accepted:
 *
 * 1. A troupe token file, little-endian:
 *      offset  0  char     magic[8] = "TRTOKENS"
 *      offset  8  uint32   version  = 1
 *      offset 12  uint32   vocab      (1..65536; every token is < vocab)
 *      offset 16  uint64   count      (number of tokens that follow)
 *      offset 24  uint64   reserved = 0
 *      offset 32  uint16   tokens[count]
 *    The file size must be exactly 32 + 2*count bytes.
 * 2. Any other file, read as bytes: one token per byte, vocab 256.
 *
 * data.format picks: "tokens" (must be a token file), "bytes" (always bytes),
 * "auto" (a token file if it starts with the magic, bytes otherwise).
 *
 * The last val_fraction of the tokens is held out for validation. Training
 * windows of T+1 tokens start at positions drawn from a splitmix64 state that
 * the caller owns (and checkpoints); validation walks fixed consecutive windows
 * so that every evaluation scores the same tokens.
 *
 * A tr_data is read-only after tr_data_open and may be shared between threads. */
#ifndef TR_TRAIN_DATA_H
#define TR_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define TR_DATA_MAGIC "TRTOKENS"
#define TR_DATA_VERSION 1
#define TR_DATA_HEADER_BYTES 32

typedef struct tr_data {
    uint16_t *tokens; /* owned; count entries */
    size_t count;
    size_t train_count; /* tokens [0, train_count) are the training split */
    size_t val_count;   /* tokens [train_count, count) are held out */
    int vocab;
    int is_bytes; /* read as raw bytes */
} tr_data;

/* tr_data_open reads path into d (zeroed first). format is "auto", "tokens" or
 * "bytes"; seq_len is the window length T, used to reject files too short to
 * give one training window (and, when val_fraction > 0, one validation
 * window). Errors name the file and the reason. Free with tr_data_close. */
int tr_data_open(tr_data *d, const char *path, const char *format, double val_fraction, int seq_len,
                 tr_err *err);

/* tr_data_close frees d's tokens; NULL-safe and idempotent. */
void tr_data_close(tr_data *d);

/* tr_data_train_batch fills B windows of T inputs and T targets (int32) from
 * the training split, advancing *rng. */
void tr_data_train_batch(const tr_data *d, uint64_t *rng, int B, int T, int32_t *inputs, int32_t *targets);

/* tr_data_train_shard draws a batch of B_total windows as
 * tr_data_train_batch(B_total) would, advancing *rng alike, and fills only
 * windows [first, first + B): the share of one data-parallel rank. */
void tr_data_train_shard(const tr_data *d, uint64_t *rng, int B_total, int first, int B, int T,
                         int32_t *inputs, int32_t *targets);

/* tr_data_val_batches returns how many distinct B x T validation batches the
 * held-out split holds (0 when there is none). */
size_t tr_data_val_batches(const tr_data *d, int B, int T);

/* tr_data_val_batch fills validation batch k (k < tr_data_val_batches). */
void tr_data_val_batch(const tr_data *d, size_t k, int B, int T, int32_t *inputs, int32_t *targets);

/* tr_data_val_shard fills windows [first, first + n) of validation batch k
 * of B_total windows (a data-parallel rank's share of it). */
void tr_data_val_shard(const tr_data *d, size_t k, int B_total, int first, int n, int T, int32_t *inputs,
                       int32_t *targets);

/* tr_data_write writes count tokens (< vocab) as a token file, atomically
 * (path.tmp then rename). */
int tr_data_write(const char *path, const uint16_t *tokens, size_t count, int vocab, tr_err *err);

/* tr_data_make_learnable writes a low-entropy token file for tests and smoke
 * runs: a first-order Markov chain over vocab tokens where each token is
 * followed by a fixed successor with probability 0.9 and by a uniformly random
 * token otherwise (entropy ~0.74 nats at vocab 64, against ln 64 = 4.16).
 * Deterministic in seed. */
int tr_data_make_learnable(const char *path, int vocab, size_t count, uint64_t seed, tr_err *err);

#endif
