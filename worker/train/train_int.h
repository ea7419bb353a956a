/* train_int.h - pieces of the training loop (train.c) that the generation
 * worker (generation.c) shares: the same model from the same settings and
 * data, on the same device choice. */
#ifndef TR_TRAIN_TRAIN_INT_H
#define TR_TRAIN_TRAIN_INT_H

#include "data.h"
#include "refit.h"
#include "train.h"

/* tr_train_data_fingerprint hashes the tokens (FNV-1a over at most 4M of
 * them, evenly strided), as a double exact to 53 bits. */
double tr_train_data_fingerprint(const tr_data *d);

/* tr_train_model_backend derives the model config from cfg and d (vocab from
 * the data unless set) and creates the backend cfg->device asks for, for
 * micro-batches of cfg->micro_batch. On OK free *b with its destroy op. */
int tr_train_model_backend(const tr_train_config *cfg, const tr_data *d, tr_model_config *mcfg, tr_backend **b,
                           tr_err *err);

/* tr_train_refit_settings fills what both sides of a refit must share. */
void tr_train_refit_settings(const tr_train_config *c, const tr_model_config *m, const tr_data *d,
                             tr_refit_settings *s);

/* How the generation worker reaches the policy (main.c provides it). */
typedef struct tr_refit_link {
    tr_comm *comm; /* the refit communicator; rejoin may replace it */
    const tr_refit_gather *gather; /* the report through the head; NULL: all-reduce */
    /* rejoin, when set, is called after comm failed because a peer went away
     * (UNAVAILABLE): it closes comm, waits for the communicator's next epoch
     * (the policy group restarted) and joins it into *comm. Its error ends
     * the run. */
    int (*rejoin)(void *user, tr_comm **comm, tr_err *err);
    /* on_refit gets each refit's figures (borrowed for the call). */
    void (*on_refit)(const tr_refit_stats *st, int rank, void *user);
    void *user;
} tr_refit_link;

/* tr_generation_run is `troupe-train --role generation`: the model of cfg,
 * no training; takes every refit over link->comm and evaluates it, until
 * the policy's final refit (OK). */
int tr_generation_run(const tr_train_config *cfg, tr_refit_link *link, tr_err *err);

#endif
