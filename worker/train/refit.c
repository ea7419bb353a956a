/* refit.c - weight refit from policy to generation (see refit.h). */
#include "refit.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dp.h"

#define REFIT_MAGIC 0x3154494645525254ll /* "TRREFIT1" little-endian */

/* The header rank 0 broadcasts first (int64 each). */
enum { H_MAGIC, H_STEP, H_FINAL, H_PARAMS, H_HASH, H_VAL_BATCH, H_VAL_BATCHES, H_POLICY_SIZE, H_COUNT };

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

uint64_t tr_refit_hash(const float *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 0xcbf29ce484222325ull;

    for (size_t i = 0; i < n * sizeof(float); i++) {
        h = (h ^ b[i]) * 0x100000001b3ull;
    }
    return h;
}

int tr_refit_check_same(tr_comm *c, const tr_refit_settings *s, tr_err *err)
{
    const tr_dp_setting v[] = {
        {"refit.every", (double)s->refit_every},
        {"model.layers", (double)s->layers},
        {"model.width", (double)s->width},
        {"model.heads", (double)s->heads},
        {"model.seq_len", (double)s->seq_len},
        {"model.vocab", (double)s->vocab},
        {"data.val_fraction", s->val_fraction},
        {"data tokens", s->data_tokens},
        {"data fingerprint (FNV-1a of the tokens)", s->data_fingerprint},
    };
    return tr_dp_check_same_for(c, v, (int)(sizeof(v) / sizeof(v[0])),
                                "the refit needs the same settings and data on the policy and generation "
                                "workers",
                                err);
}

/* One rank's part of the report. */
typedef struct report_blob {
    int32_t code;   /* troupe_status of its refit */
    float val_loss; /* generation; -1 = none */
} report_blob;

/* exchange fills v (size entries) with every rank's blob. */
static int exchange(tr_comm *c, const tr_refit_gather *g, const report_blob *mine, report_blob *v, tr_err *err)
{
    float *f;
    int rv;

    if (g != NULL && g->fn != NULL) {
        /* A failure here ends the run (the caller reports it); the
         * communicator itself is still sound. */
        return g->fn(g->user, mine, sizeof(*mine), v, c->timeout_ms, err);
    }
    if ((f = calloc((size_t)c->size * 2, sizeof(float))) == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "refit: cannot allocate the report");
    }
    f[2 * c->rank] = (float)mine->code;
    f[2 * c->rank + 1] = mine->val_loss;
    rv = c->ops->allreduce(c, f, (size_t)c->size * 2, TR_COMM_SUM, err);
    for (int r = 0; r < c->size; r++) {
        v[r] = (report_blob){.code = (int32_t)f[2 * r], .val_loss = f[2 * r + 1]};
    }
    free(f);
    return rv;
}

/* report shares every rank's status (and a generation rank's loss) and turns
 * another rank's failure into this rank's ABORTED naming it. Every rank
 * calls it, whatever happened before, unless the communicator itself failed
 * (then nobody can be told, and its error already names the peer). */
static int report(tr_comm *c, const tr_refit_gather *g, int rv, int policy_size, int64_t step, double val_loss,
                  tr_refit_stats *st, tr_err *err)
{
    report_blob mine = {.code = rv, .val_loss = isnan(val_loss) ? -1.0f : (float)val_loss};
    report_blob *v = calloc((size_t)c->size, sizeof(*v));
    tr_err own = *err;
    int crv;

    if (v == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "refit: cannot allocate the report");
    }
    crv = exchange(c, g, &mine, v, err);
    if (crv != TROUPE_OK) {
        free(v);
        return crv;
    }
    if (rv != TROUPE_OK) {
        *err = own;
        free(v);
        return rv;
    }
    for (int r = 0; r < c->size; r++) {
        if (v[r].code != TROUPE_OK) {
            rv = tr_err_set(err, TROUPE_ABORTED,
                            "refit after step %lld: rank %d of the refit communicator (%s rank %d) failed: %s "
                            "(see its log)",
                            (long long)step, r, r < policy_size ? "policy" : "generation",
                            r < policy_size ? r : r - policy_size, troupe_strerror(v[r].code));
            break;
        }
    }
    if (st != NULL) {
        st->n_gen_losses = 0;
        for (int r = policy_size; r < c->size && st->n_gen_losses < 16; r++) {
            st->gen_val_loss[st->n_gen_losses++] = v[r].val_loss < 0.0f ? NAN : (double)v[r].val_loss;
        }
    }
    free(v);
    return rv;
}

static void fill_rate(tr_refit_stats *st, uint64_t bytes, double ms)
{
    st->bytes = bytes;
    st->ms = ms;
    st->mb_per_s = ms > 0.0 ? (double)bytes / (ms * 1e3) : NAN;
}

int tr_refit_send(tr_comm *c, const tr_refit_gather *g, tr_backend *b, int policy_size, int64_t step,
                  int final, int val_batch, int val_batches, tr_refit_stats *st, tr_err *err)
{
    size_t n = b->num_params;
    float *p = malloc(n * sizeof(float)), *own = NULL;
    int64_t h[H_COUNT] = {REFIT_MAGIC, step, final, (int64_t)n, 0, val_batch, val_batches, policy_size};
    tr_refit_stats local;
    double t0;
    int rv = TROUPE_OK;

    st = st != NULL ? st : &local;
    *st = (tr_refit_stats){.step = step, .final = final, .val_loss = NAN, .eval_ms = NAN,
                           .policy_size = policy_size, .generation_size = c->size - policy_size};
    if (p == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "refit: cannot allocate %zu parameters", n);
    }
    /* Reading the weights cannot fail halfway through a collective: a
     * failure here is still reported to every rank through the header (a
     * parameter count of 0), so none waits for bytes that never come. */
    if (c->rank == 0) {
        rv = b->ops->get_params(b, p, err);
        h[H_HASH] = (int64_t)tr_refit_hash(p, n);
        h[H_PARAMS] = rv == TROUPE_OK ? (int64_t)n : -(int64_t)rv;
    }
    t0 = now_ms();
    int crv = c->ops->broadcast(c, h, sizeof(h), 0, err);
    if (crv != TROUPE_OK) {
        free(p);
        return crv;
    }
    if (h[H_PARAMS] != (int64_t)n) {
        free(p);
        return c->rank == 0 ? rv
                            : tr_err_set(err, TROUPE_ABORTED, "refit after step %lld: rank 0 could not read its "
                                         "weights (see its log)", (long long)step);
    }
    if ((crv = c->ops->broadcast(c, p, n * sizeof(float), 0, err)) != TROUPE_OK) {
        free(p);
        return crv;
    }
    fill_rate(st, (uint64_t)n * sizeof(float), now_ms() - t0);
    st->hash = (uint64_t)h[H_HASH];
    /* The other policy ranks hold the same weights when data parallelism
     * works: the copy they just relayed checks it for free. */
    if (c->rank != 0 && (own = malloc(n * sizeof(float))) == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "refit: cannot allocate %zu parameters", n);
    } else if (c->rank != 0 && (rv = b->ops->get_params(b, own, err)) == TROUPE_OK) {
        st->hash = tr_refit_hash(own, n);
        if (memcmp(own, p, n * sizeof(float)) != 0) {
            rv = tr_err_set(err, TROUPE_DATA_LOSS,
                            "refit after step %lld: policy rank %d's weights (FNV-1a %016" PRIx64
                            ") differ from rank 0's (%016" PRIx64 "): the data-parallel ranks diverged",
                            (long long)step, c->rank, st->hash, (uint64_t)h[H_HASH]);
        }
    }
    free(own);
    free(p);
    return report(c, g, rv, policy_size, step, NAN, st, err);
}

int tr_refit_eval_loss(tr_backend *b, const tr_data *d, int Bg, int nb, int B, int T, int32_t *in,
                       int32_t *tg, double *val, tr_err *err)
{
    double sum = 0.0;

    *val = NAN;
    for (int k = 0; k < nb; k++) {
        for (int lo = 0; lo < Bg; lo += B) {
            int cnt = Bg - lo < B ? Bg - lo : B;
            float loss;
            int rv;
            tr_data_val_shard(d, (size_t)k, Bg, lo, cnt, T, in, tg);
            if ((rv = b->ops->forward_loss(b, in, tg, cnt, T, &loss, err)) != TROUPE_OK) {
                return rv;
            }
            /* Weighted as train.c's evaluate weights a rank's share. */
            sum += cnt == Bg ? (double)loss : (double)loss * cnt / Bg;
        }
    }
    if (nb > 0) {
        *val = sum / (double)nb;
    }
    return TROUPE_OK;
}

/* take checks the header and the weights, sets them and hashes what the
 * backend then holds. */
static int take(tr_backend *b, const int64_t *h, const float *p, tr_refit_stats *st, tr_err *err)
{
    size_t n = b->num_params;
    float *back = malloc(n * sizeof(float));
    int rv;

    if (back == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "refit: cannot allocate %zu parameters", n);
    }
    rv = b->ops->set_params(b, p, err);
    if (rv == TROUPE_OK) {
        rv = b->ops->get_params(b, back, err);
    }
    if (rv == TROUPE_OK) {
        st->hash = tr_refit_hash(back, n);
        if (st->hash != (uint64_t)h[H_HASH]) {
            rv = tr_err_set(err, TROUPE_DATA_LOSS,
                            "refit after step %lld: the weights held after the refit hash to %016" PRIx64
                            ", policy rank 0 sent %016" PRIx64,
                            (long long)h[H_STEP], st->hash, (uint64_t)h[H_HASH]);
        }
    }
    free(back);
    return rv;
}

int tr_refit_recv(tr_comm *c, const tr_refit_gather *g, tr_backend *b, const tr_refit_eval *ev,
                  tr_refit_stats *st, tr_err *err)
{
    size_t n = b->num_params;
    int64_t h[H_COUNT] = {0};
    float *p = NULL;
    double t0;
    int rv = TROUPE_OK, crv;

    *st = (tr_refit_stats){.val_loss = NAN, .eval_ms = NAN};
    tr_comm_set_timeout(c, ev->wait_ms);
    crv = c->ops->broadcast(c, h, sizeof(h), 0, err);
    tr_comm_set_timeout(c, ev->timeout_ms);
    if (crv != TROUPE_OK) {
        return crv;
    }
    t0 = now_ms(); /* the wait for the policy's next refit is not the refit's time */
    if (h[H_MAGIC] != REFIT_MAGIC) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "refit: rank 0 of the refit communicator sent no refit header: is it troupe-train "
                          "--role policy of this version?");
    }
    st->step = h[H_STEP];
    st->final = (int)h[H_FINAL];
    st->policy_size = (int)h[H_POLICY_SIZE];
    st->generation_size = c->size - st->policy_size;
    if (h[H_PARAMS] < 0) {
        return tr_err_set(err, TROUPE_ABORTED, "refit after step %lld: policy rank 0 could not read its weights "
                          "(see its log)", (long long)h[H_STEP]);
    }
    /* Settings were compared at the start, so the count matches; a
     * mismatch here would be a bug, and still must not overrun p. */
    if (h[H_PARAMS] != (int64_t)n) {
        return tr_err_set(err, TROUPE_INTERNAL, "refit: rank 0 sends %lld parameters, this model has %zu",
                          (long long)h[H_PARAMS], n);
    }
    if ((p = malloc(n * sizeof(float))) == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "refit: cannot allocate %zu parameters", n);
    }
    if ((crv = c->ops->broadcast(c, p, n * sizeof(float), 0, err)) != TROUPE_OK) {
        free(p);
        return crv;
    }
    fill_rate(st, (uint64_t)n * sizeof(float), now_ms() - t0);
    rv = take(b, h, p, st, err);
    free(p);
    if (rv == TROUPE_OK) {
        double e0 = now_ms();
        rv = tr_refit_eval_loss(b, ev->data, (int)h[H_VAL_BATCH], (int)h[H_VAL_BATCHES], ev->B, ev->T, ev->in,
                                ev->tg, &st->val_loss, err);
        st->eval_ms = now_ms() - e0;
    }
    return report(c, g, rv, st->policy_size, st->step, st->val_loss, NULL, err);
}

void tr_refit_line(const tr_refit_stats *st, int rank, int json, char *buf, size_t len)
{
    char gen[256] = "";
    size_t used = 0;

    for (int i = 0; i < st->n_gen_losses && used < sizeof(gen); i++) {
        int w = snprintf(gen + used, sizeof(gen) - used, "%s%.6f", i ? "," : "", st->gen_val_loss[i]);
        used += w > 0 ? (size_t)w : 0;
    }
    if (json) {
        snprintf(buf, len,
                 "{\"event\":\"refit\",\"step\":%lld,\"final\":%s,\"rank\":%d,\"bytes\":%" PRIu64
                 ",\"ms\":%.3f,\"mb_per_s\":%.3f,\"params_fnv1a\":\"%016" PRIx64 "\",\"val_loss\":%.9g,"
                 "\"eval_ms\":%.3f,\"policy_ranks\":%d,\"generation_ranks\":%d,\"generation_val_loss\":[%s]}",
                 (long long)st->step, st->final ? "true" : "false", rank, st->bytes, st->ms,
                 isnan(st->mb_per_s) ? 0.0 : st->mb_per_s, st->hash, isnan(st->val_loss) ? -1.0 : st->val_loss,
                 isnan(st->eval_ms) ? 0.0 : st->eval_ms, st->policy_size, st->generation_size, gen);
        return;
    }
    used = (size_t)snprintf(buf, len,
                            "refit step=%lld final=%d rank=%d bytes=%" PRIu64 " ms=%.3f mb_per_s=%.2f "
                            "params_fnv1a=%016" PRIx64,
                            (long long)st->step, st->final, rank, st->bytes, st->ms, st->mb_per_s, st->hash);
    if (used < len && !isnan(st->val_loss)) {
        used += (size_t)snprintf(buf + used, len - used, " val_loss=%.9g eval_ms=%.3f", st->val_loss,
                                 st->eval_ms);
    }
    if (used < len && st->n_gen_losses > 0) {
        snprintf(buf + used, len - used, " generation_ranks=%d generation_val_loss=%s", st->generation_size,
                 gen);
    }
}
