/* generation.c - `troupe-train --role generation` (train_int.h).
 *
 * A generation worker builds the same model as the policy from the same
 * settings and data, but never trains: it waits for refits (refit.h), takes
 * the weights, evaluates the validation loss on them and reports, until the
 * policy's final refit. In an RL job this is where rollouts would be
 * generated with the fresh weights; the validation loss stands in for that
 * work and proves the weights arrived whole (it must equal the policy's own).
 *
 * When the policy group restarts (a policy rank died and the job's
 * max_restarts allows), this worker's refit communicator fails UNAVAILABLE;
 * link->rejoin waits for the communicator's next epoch and joins it, and the
 * settings are compared again with the restarted policy before its next
 * refit, which comes from the policy's checkpoint. */
#include <stdlib.h>

#include "log.h"
#include "train_int.h"

typedef struct gen {
    const tr_train_config *cfg;
    tr_data data;
    tr_model_config mcfg;
    tr_backend *b;
    int32_t *in, *tg;
    tr_refit_plan plan; /* agreed by check_same */
} gen;

static int gen_open(gen *g, tr_err *err)
{
    const tr_train_config *c = g->cfg;
    size_t n = (size_t)c->micro_batch * (size_t)c->seq_len;
    int rv = tr_data_open(&g->data, c->data_path, c->data_format, c->val_fraction, (int)c->seq_len, err);

    if (rv == TROUPE_OK) {
        rv = tr_train_model_backend(c, &g->data, &g->mcfg, &g->b, err);
    }
    if (rv != TROUPE_OK) {
        return rv;
    }
    g->in = malloc(n * sizeof(int32_t));
    g->tg = malloc(n * sizeof(int32_t));
    if (g->in == NULL || g->tg == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot allocate batch buffers");
    }
    return TROUPE_OK;
}

static void gen_close(gen *g)
{
    if (g->b != NULL) {
        g->b->ops->destroy(g->b);
    }
    tr_data_close(&g->data);
    free(g->in);
    free(g->tg);
}

/* check_same compares the settings with the policy's. The policy may still
 * be starting (loading data, building its model), so the wait is the long
 * one. */
static int check_same(gen *g, tr_comm *c, tr_err *err)
{
    tr_refit_settings s;
    int rv;

    tr_train_refit_settings(g->cfg, &g->mcfg, &g->data, &s);
    tr_comm_set_timeout(c, (uint32_t)g->cfg->refit_wait_ms);
    rv = tr_refit_check_same(c, g->b, &s, &g->plan, err);
    tr_comm_set_timeout(c, (uint32_t)g->cfg->refit_timeout_ms);
    return rv;
}

int tr_generation_run(const tr_train_config *cfg, tr_refit_link *link, tr_err *err)
{
    gen g = {.cfg = cfg};
    tr_refit_stats st;
    int rv = tr_train_config_check(cfg, err), checked = 0, refits = 0;

    if (rv == TROUPE_OK) {
        rv = gen_open(&g, err);
    }
    if (rv == TROUPE_OK) {
        TR_LOG(TR_LOG_NOTICE,
               "generation: backend=%s params=%zu layers=%d width=%d heads=%d seq_len=%d vocab=%d "
               "val_tokens=%zu; waiting for refits over communicator %s (%s, rank %d of %d)",
               g.b->ops->name, g.b->num_params, g.mcfg.layers, g.mcfg.width, g.mcfg.heads, g.mcfg.seq_len,
               g.mcfg.vocab, g.data.val_count, cfg->refit_comm, link->comm->ops->name, link->comm->rank,
               link->comm->size);
    }
    while (rv == TROUPE_OK) {
        tr_refit_eval ev = {.data = &g.data,
                            .B = (int)cfg->micro_batch,
                            .T = (int)cfg->seq_len,
                            .in = g.in,
                            .tg = g.tg,
                            .wait_ms = (uint32_t)cfg->refit_wait_ms,
                            .timeout_ms = (uint32_t)cfg->refit_timeout_ms};
        if (!checked) {
            rv = check_same(&g, link->comm, err);
            checked = rv == TROUPE_OK;
        }
        if (rv == TROUPE_OK) {
            rv = tr_refit_recv(link->comm, link->gather, g.b, &g.plan, &ev, &st, err);
        }
        if (rv == TROUPE_OK) {
            refits++;
            if (link->on_refit != NULL) {
                link->on_refit(&st, link->comm->rank, link->user);
            }
            if (st.final) {
                break;
            }
            continue;
        }
        /* A policy rank gone: its group may be restarting. */
        if (rv == TROUPE_UNAVAILABLE && link->comm->failed && link->rejoin != NULL) {
            TR_LOG(TR_LOG_NOTICE,
                   "generation: the refit communicator failed (%s); waiting up to %lld ms (refit.wait_ms) for "
                   "it to come back in a new epoch (the policy group restarting)",
                   err->msg, (long long)cfg->refit_wait_ms);
            tr_err_clear(err);
            rv = link->rejoin(link->user, &link->comm, err);
            checked = 0;
        }
    }
    if (rv == TROUPE_OK) {
        TR_LOG(TR_LOG_NOTICE, "generation: done after %d refit%s (the last one was the policy's final)", refits,
               refits == 1 ? "" : "s");
    }
    gen_close(&g);
    return rv;
}
