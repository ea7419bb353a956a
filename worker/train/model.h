/* model.h - the GPT-2 parameter layout and initialisation shared by every
 * backend of troupe-train (see backend.h for the canonical tensor order).
 *
 * Pure functions of the model config: no allocation except where stated,
 * safe from any thread. */
#ifndef TR_TRAIN_MODEL_H
#define TR_TRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* Indices of the 16 tensors in canonical order. */
enum {
    TR_P_WTE = 0,
    TR_P_WPE,
    TR_P_LN1W,
    TR_P_LN1B,
    TR_P_QKVW,
    TR_P_QKVB,
    TR_P_ATTPROJW,
    TR_P_ATTPROJB,
    TR_P_LN2W,
    TR_P_LN2B,
    TR_P_FCW,
    TR_P_FCB,
    TR_P_FCPROJW,
    TR_P_FCPROJB,
    TR_P_LNFW,
    TR_P_LNFB,
};

/* tr_model_param_name returns the static name of tensor i ("wte", ...) or "?". */
const char *tr_model_param_name(int i);

/* tr_model_padded_vocab rounds vocab up to a multiple of 128. */
int tr_model_padded_vocab(int vocab);

/* tr_model_config_check validates cfg (positive sizes, width divisible by
 * heads, padded_vocab consistent with vocab) and returns INVALID_ARGUMENT with
 * a message naming the offending field otherwise. */
int tr_model_config_check(const tr_model_config *cfg, tr_err *err);

/* tr_model_param_offsets fills offs[16] with the start of each tensor in the
 * canonical vector (offs[i] = sum of sizes before i) and returns the total. */
size_t tr_model_param_offsets(const tr_model_config *cfg, size_t offs[TR_NUM_PARAM_TENSORS]);

/* tr_model_init_params writes GPT-2 initial values into params (num_params
 * floats): N(0, 0.02) for embeddings and matrices, scaled by 1/sqrt(2L) for the
 * two residual projections, LayerNorm weights 1, biases 0, padded wte rows 0.
 * Deterministic in seed. */
void tr_model_init_params(const tr_model_config *cfg, uint64_t seed, float *params);

/* tr_model_flops_per_token is llm.c's 6*N + 6*L*C*T training estimate (N
 * counts every parameter, the tied wte included). */
double tr_model_flops_per_token(const tr_model_config *cfg, size_t num_params);

#endif
