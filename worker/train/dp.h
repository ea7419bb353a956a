/* dp.h - the data-parallel parts of the training loop that are not the
 * step itself: agreeing on a status, sending rank 0's model to every rank,
 * and each rank's data position file next to the checkpoint.
 *
 * Data position file (text, written atomically: temp file, fsync, rename):
 *   troupe-train data position 1
 *   rank R
 *   world_size N
 *   micro_batch B
 *   step S rng X        <- the position after step S
 *   step S0 rng X0      <- the one before (0 0 when none)
 * Two entries, because every rank writes its position before rank 0 writes
 * the model: a crash between the two leaves the model one checkpoint behind
 * the positions, and resume finds the model's step among the two. */
#ifndef TR_TRAIN_DP_H
#define TR_TRAIN_DP_H

#include <stdint.h>

#include "backend.h"
#include "comm.h"
#include "err.h"

/* tr_dp_agree tells every rank whether any rank failed a local action:
 * returns own rv (with its err) when this rank failed, ABORTED naming how
 * many others did when only they failed, the communicator's error when the
 * agreement itself failed, else OK. what: "write its data position". */
int tr_dp_agree(tr_comm *c, int rv, const char *what, tr_err *err);

/* One setting that every rank must share, by name and value. */
typedef struct tr_dp_setting {
    const char *name;
    double value;
} tr_dp_setting;

/* tr_dp_check_same compares n settings with rank 0's (every rank passes the
 * same names in the same order): FAILED_PRECONDITION naming the first that
 * differs ("train.micro_batch is 4 on rank 1, 2 on rank 0: data parallelism
 * needs the same settings on every rank"), ABORTED on the ranks that match
 * while another does not. n at most 64. */
int tr_dp_check_same(tr_comm *c, const tr_dp_setting *s, int n, tr_err *err);

/* tr_dp_check_same_for is tr_dp_check_same with another reason after the
 * colon (needs: "the refit needs the same settings on ..."). */
int tr_dp_check_same_for(tr_comm *c, const tr_dp_setting *s, int n, const char *needs, tr_err *err);

/* tr_dp_share_buffer broadcasts rank 0's buf (params, m, v: num_params
 * floats each, as tr_ckpt_read gives them; every other rank passes a buffer
 * of that size) and sets every rank's backend from it (set_opt_state keeps
 * a ZeRO-1 rank's shard); agreed by all. */
int tr_dp_share_buffer(tr_comm *c, tr_backend *b, float *buf, tr_err *err);

/* tr_dp_params_hash is a fast 64-bit hash of n floats' bits (four
 * independent multiply-xor lanes over 8-byte words, about 8x the speed of a
 * byte-wise FNV: 124M parameters in tens of milliseconds). Order-sensitive;
 * for checking that two copies are bit-identical, not for security. */
uint64_t tr_dp_params_hash(const float *p, size_t n);

/* tr_dp_check_same_params compares hash (of this rank's parameters) with rank
 * 0's: DATA_LOSS on a rank whose differs ("rank 2's initial weights hash to
 * X, rank 0's to Y: ..."), ABORTED on the ranks that match while another does
 * not. what names the weights ("initial weights"). */
int tr_dp_check_same_params(tr_comm *c, uint64_t hash, const char *what, tr_err *err);

/* tr_dp_pos_path formats dir/data-rank-R.pos. */
void tr_dp_pos_path(const char *dir, int rank, char *buf, size_t len);

/* tr_dp_pos_write writes rank's position after step (and the previous one). */
int tr_dp_pos_write(const char *dir, int rank, int size, int micro_batch, int64_t step, uint64_t rng,
                    int64_t prev_step, uint64_t prev_rng, tr_err *err);

/* tr_dp_pos_read finds rank's position after step in its file: NOT_FOUND when
 * the file is missing, FAILED_PRECONDITION when it was written by another
 * layout (world size, micro-batch) or holds no entry for step, DATA_LOSS when
 * it does not parse. Messages name the file. When rank's own file is missing
 * or of another layout, rank 0's serves if it was written by another world
 * size with the same global batch (world size x micro-batch): every rank
 * advances the one sampler of the global batch, so a run may resume on
 * another world size (when it does not serve, the error is still the one
 * about rank's own file). */
int tr_dp_pos_read(const char *dir, int rank, int size, int micro_batch, int64_t step, uint64_t *rng,
                   tr_err *err);

#endif
