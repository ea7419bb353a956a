/* refit.c - weight refit from policy to generation (see refit.h). */
#include "refit.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dp.h"

#define REFIT_MAGIC 0x3254494645525254ll /* "TRREFIT2" little-endian */

/* The header rank 0 broadcasts first (int64 each). H_PATH and H_DTYPE
 * repeat the agreed plan, so a rank that took another path fails instead
 * of joining a broadcast of another kind. */
enum {
    H_MAGIC,
    H_STEP,
    H_FINAL,
    H_PARAMS,
    H_HASH,
    H_VAL_BATCH,
    H_VAL_BATCHES,
    H_POLICY_SIZE,
    H_PATH,
    H_DTYPE,
    H_COUNT
};

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

static uint64_t mix64(uint64_t x)
{
    uint64_t z = x + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t tr_refit_mix_hash(const void *p, size_t bytes)
{
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 0;

    for (size_t i = 0; i < bytes / 2; i++) {
        uint64_t u = (uint64_t)b[2 * i] | (uint64_t)b[2 * i + 1] << 8;
        h += mix64((uint64_t)i << 16 | u);
    }
    return h;
}

int tr_refit_parse_path(const char *s)
{
    if (s == NULL) {
        return -1;
    }
    return strcmp(s, "auto") == 0     ? TR_REFIT_PATH_AUTO
           : strcmp(s, "host") == 0   ? TR_REFIT_PATH_HOST
           : strcmp(s, "device") == 0 ? TR_REFIT_PATH_DEVICE
                                      : -1;
}

static const char *dtype_name(tr_comm_dtype t)
{
    return t == TR_COMM_BF16 ? "bf16" : "f32";
}

static size_t dtype_size(tr_comm_dtype t)
{
    return t == TR_COMM_BF16 ? 2 : sizeof(float);
}

/* can_device: this rank's backend and communicator both offer the device
 * path. */
static int can_device(const tr_comm *c, const tr_backend *b)
{
    return c->ops->broadcast_device != NULL && b->ops->refit_params != NULL && b->ops->refit_taken != NULL &&
           b->ops->refit_hash != NULL;
}

/* agree_plan: one all-reduce counts the ranks that can take the device path
 * and those that can in bf16; every rank gets the same sums, so every rank
 * picks the same plan. refit.path is the same everywhere (checked before),
 * so with host no rank calls the all-reduce. */
static int agree_plan(tr_comm *c, tr_backend *b, int64_t path, tr_refit_plan *plan, tr_err *err)
{
    float can[2] = {0.0f, 0.0f};
    int rv;

    if (path == TR_REFIT_PATH_HOST) {
        return TROUPE_OK;
    }
    can[0] = can_device(c, b) ? 1.0f : 0.0f;
    can[1] = can[0] > 0.0f && b->opts.precision == TR_PRECISION_BF16 ? 1.0f : 0.0f;
    if ((rv = c->ops->allreduce(c, can, 2, TR_COMM_SUM, err)) != TROUPE_OK) {
        return rv;
    }
    if ((int)can[0] != c->size) {
        if (path == TR_REFIT_PATH_DEVICE) {
            return tr_err_set(
                err, TROUPE_FAILED_PRECONDITION,
                "refit.path is device, but only %d of the %d ranks of the refit communicator can "
                "(each needs the CUDA backend and an NCCL communicator; this rank: %s backend, %s "
                "communicator): set refit.path auto or host, or run every worker on a GPU",
                (int)can[0], c->size, b->ops->name, c->ops->name);
        }
        return TROUPE_OK;
    }
    plan->device = 1;
    plan->dtype = (int)can[1] == c->size ? TR_COMM_BF16 : TR_COMM_F32;
    return TROUPE_OK;
}

int tr_refit_check_same(tr_comm *c, tr_backend *b, const tr_refit_settings *s, tr_refit_plan *plan,
                        tr_err *err)
{
    const tr_dp_setting v[] = {
        {"refit.every", (double)s->refit_every},
        {"refit.path (0 auto, 1 host, 2 device)", (double)s->path},
        {"model.layers", (double)s->layers},
        {"model.width", (double)s->width},
        {"model.heads", (double)s->heads},
        {"model.seq_len", (double)s->seq_len},
        {"model.vocab", (double)s->vocab},
        {"data.val_fraction", s->val_fraction},
        {"data tokens", s->data_tokens},
        {"data fingerprint (FNV-1a of the tokens)", s->data_fingerprint},
    };
    int rv = tr_dp_check_same_for(c, v, (int)(sizeof(v) / sizeof(v[0])),
                                  "the refit needs the same settings and data on the policy and generation "
                                  "workers",
                                  err);

    *plan = (tr_refit_plan){.device = 0, .dtype = TR_COMM_F32};
    return rv == TROUPE_OK ? agree_plan(c, b, s->path, plan, err) : rv;
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

/* send_host: the host path of tr_refit_send (refit.h): rank 0's fp32
 * vector through host memory; the other policy ranks compare it with
 * their own. */
static int send_host(tr_comm *c, const tr_refit_gather *g, tr_backend *b, int policy_size, int64_t *h,
                     tr_refit_stats *st, tr_err *err)
{
    size_t n = b->num_params;
    float *p = malloc(n * sizeof(float)), *own = NULL;
    double t0, start = now_ms();
    int rv = TROUPE_OK;

    if (p == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "refit: cannot allocate %zu parameters", n);
    }
    /* Reading the weights cannot fail halfway through a collective: a
     * failure here is still reported to every rank through the header (a
     * parameter count of 0), so none waits for bytes that never come. */
    if (c->rank == 0) {
        rv = b->ops->get_params(b, p, err);
        t0 = now_ms();
        h[H_HASH] = (int64_t)tr_refit_hash(p, n);
        st->hash_ms = now_ms() - t0;
        h[H_PARAMS] = rv == TROUPE_OK ? (int64_t)n : -(int64_t)rv;
    }
    t0 = now_ms();
    int crv = c->ops->broadcast(c, h, H_COUNT * sizeof(int64_t), 0, err);
    if (crv != TROUPE_OK) {
        free(p);
        return crv;
    }
    if (h[H_PARAMS] != (int64_t)n) {
        free(p);
        return c->rank == 0 ? rv
                            : tr_err_set(err, TROUPE_ABORTED,
                                         "refit after step %lld: rank 0 could not read its "
                                         "weights (see its log)",
                                         (long long)h[H_STEP]);
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
        t0 = now_ms();
        st->hash = tr_refit_hash(own, n);
        st->hash_ms = now_ms() - t0;
        if (memcmp(own, p, n * sizeof(float)) != 0) {
            rv = tr_err_set(err, TROUPE_DATA_LOSS,
                            "refit after step %lld: policy rank %d's weights (FNV-1a %016" PRIx64
                            ") differ from rank 0's (%016" PRIx64 "): the data-parallel ranks diverged",
                            (long long)h[H_STEP], c->rank, st->hash, (uint64_t)h[H_HASH]);
        }
    }
    free(own);
    free(p);
    st->total_ms = now_ms() - start;
    return report(c, g, rv, policy_size, h[H_STEP], NAN, st, err);
}

/* send_device: the device path of tr_refit_send: every policy rank hashes
 * its own vector on the device, rank 0 sends the hash in the header and the
 * vector itself from device memory; the others receive it in place (see
 * refit.h) and compare their hash with rank 0's. */
static int send_device(tr_comm *c, const tr_refit_gather *g, tr_backend *b, const tr_refit_plan *plan,
                       int policy_size, int64_t *h, tr_refit_stats *st, tr_err *err)
{
    size_t n = b->num_params;
    uint64_t own = 0;
    void *dev = NULL;
    double start = now_ms(), t0;
    int rv = b->ops->refit_params(b, plan->dtype, &dev, err), crv;

    t0 = now_ms(); /* refit_params waited for the step's last kernels: not the hash's time */
    if (rv == TROUPE_OK) {
        rv = b->ops->refit_hash(b, plan->dtype, &own, err);
    }
    st->hash_ms = now_ms() - t0;
    /* As on the host path, rank 0's failure travels in the header. */
    if (c->rank == 0) {
        h[H_HASH] = (int64_t)own;
        h[H_PARAMS] = rv == TROUPE_OK ? (int64_t)n : -(int64_t)rv;
    }
    t0 = now_ms();
    if ((crv = c->ops->broadcast(c, h, H_COUNT * sizeof(int64_t), 0, err)) != TROUPE_OK) {
        return crv;
    }
    if (h[H_PARAMS] != (int64_t)n) {
        return c->rank == 0 ? rv
                            : tr_err_set(err, TROUPE_ABORTED,
                                         "refit after step %lld: rank 0 could not read its "
                                         "weights (see its log)",
                                         (long long)h[H_STEP]);
    }
    /* Without its vector this rank cannot take part (its device failed);
     * the others' broadcast then fails at its deadline. */
    if (dev == NULL) {
        return rv;
    }
    if ((crv = c->ops->broadcast_device(c, dev, n, plan->dtype, 0, err)) != TROUPE_OK) {
        return crv;
    }
    fill_rate(st, (uint64_t)(n * dtype_size(plan->dtype)), now_ms() - t0);
    st->hash = c->rank == 0 ? (uint64_t)h[H_HASH] : own;
    if (rv == TROUPE_OK && c->rank != 0 && own != (uint64_t)h[H_HASH]) {
        rv = tr_err_set(err, TROUPE_DATA_LOSS,
                        "refit after step %lld: policy rank %d's weights (%s, mix64 %016" PRIx64
                        ") differ from rank 0's (%016" PRIx64 "): the data-parallel ranks diverged",
                        (long long)h[H_STEP], c->rank, dtype_name(plan->dtype), own, (uint64_t)h[H_HASH]);
    }
    st->total_ms = now_ms() - start;
    return report(c, g, rv, policy_size, h[H_STEP], NAN, st, err);
}

int tr_refit_send(tr_comm *c, const tr_refit_gather *g, tr_backend *b, const tr_refit_plan *plan,
                  int policy_size, int64_t step, int final, int val_batch, int val_batches,
                  tr_refit_stats *st, tr_err *err)
{
    int64_t h[H_COUNT] = {REFIT_MAGIC, step,        final,       (int64_t)b->num_params, 0,
                          val_batch,   val_batches, policy_size, plan->device,           plan->dtype};
    tr_refit_stats local;

    st = st != NULL ? st : &local;
    *st = (tr_refit_stats){.step = step,
                           .final = final,
                           .device = plan->device,
                           .dtype = plan->device ? plan->dtype : TR_COMM_F32,
                           .val_loss = NAN,
                           .eval_ms = NAN,
                           .policy_size = policy_size,
                           .generation_size = c->size - policy_size};
    return plan->device ? send_device(c, g, b, plan, policy_size, h, st, err)
                        : send_host(c, g, b, policy_size, h, st, err);
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

/* take_host receives the fp32 vector into host memory, sets it and hashes
 * what the backend then holds. *joined: the broadcast was taken part in
 * (else nothing may follow it, not even the report). */
static int take_host(tr_comm *c, tr_backend *b, tr_refit_stats *st, double t0, int *joined, tr_err *err)
{
    size_t n = b->num_params;
    float *p = malloc(n * sizeof(float)), *back = malloc(n * sizeof(float));
    double t1;
    int rv;

    if (p == NULL || back == NULL) {
        free(p);
        free(back);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "refit: cannot allocate %zu parameters", n);
    }
    if ((rv = c->ops->broadcast(c, p, n * sizeof(float), 0, err)) != TROUPE_OK) {
        /* the communicator failed: no report can follow */
        free(p);
        free(back);
        return rv;
    }
    *joined = 1;
    fill_rate(st, (uint64_t)n * sizeof(float), now_ms() - t0);
    rv = b->ops->set_params(b, p, err);
    if (rv == TROUPE_OK) {
        rv = b->ops->get_params(b, back, err);
    }
    if (rv == TROUPE_OK) {
        t1 = now_ms();
        st->hash = tr_refit_hash(back, n);
        st->hash_ms = now_ms() - t1;
    }
    free(p);
    free(back);
    return rv;
}

/* take_device receives the vector in place into the backend's own device
 * vector, lets the backend derive its other copy, and hashes the vector on
 * the device. *joined as take_host's. */
static int take_device(tr_comm *c, tr_backend *b, tr_comm_dtype dtype, tr_refit_stats *st, double t0,
                       int *joined, tr_err *err)
{
    void *dev = NULL;
    double t1;
    int rv = b->ops->refit_params(b, dtype, &dev, err);

    if (dev == NULL) {
        return rv; /* cannot take part; rank 0's broadcast fails at its deadline */
    }
    if ((rv = c->ops->broadcast_device(c, dev, b->num_params, dtype, 0, err)) != TROUPE_OK) {
        return rv;
    }
    *joined = 1;
    fill_rate(st, (uint64_t)(b->num_params * dtype_size(dtype)), now_ms() - t0);
    rv = b->ops->refit_taken(b, dtype, err);
    if (rv == TROUPE_OK) {
        t1 = now_ms();
        rv = b->ops->refit_hash(b, dtype, &st->hash, err);
        st->hash_ms = now_ms() - t1;
    }
    return rv;
}

/* recv_header checks what rank 0 announced against this rank's model and
 * plan. Any failure here means the weights broadcast will not be joined. */
static int recv_header(tr_comm *c, tr_backend *b, const tr_refit_plan *plan, const int64_t *h, tr_err *err)
{
    if (h[H_MAGIC] != REFIT_MAGIC) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "refit: rank 0 of the refit communicator sent no refit header: is it troupe-train "
                          "--role policy of this version?");
    }
    if (h[H_PARAMS] < 0) {
        return tr_err_set(err, TROUPE_ABORTED,
                          "refit after step %lld: policy rank 0 could not read its weights "
                          "(see its log)",
                          (long long)h[H_STEP]);
    }
    /* Settings and plan were agreed at the start, so these match; a
     * mismatch here would be a bug, and still must not overrun a buffer or
     * join a broadcast of another size. */
    if (h[H_PARAMS] != (int64_t)b->num_params) {
        return tr_err_set(err, TROUPE_INTERNAL, "refit: rank 0 sends %lld parameters, this model has %zu",
                          (long long)h[H_PARAMS], b->num_params);
    }
    if (h[H_PATH] != plan->device || (plan->device && h[H_DTYPE] != plan->dtype)) {
        return tr_err_set(err, TROUPE_INTERNAL,
                          "refit: rank 0 sends by the %s path (%s), rank %d agreed on the %s path (%s)",
                          h[H_PATH] ? "device" : "host", dtype_name((tr_comm_dtype)h[H_DTYPE]), c->rank,
                          plan->device ? "device" : "host", dtype_name(plan->dtype));
    }
    return TROUPE_OK;
}

int tr_refit_recv(tr_comm *c, const tr_refit_gather *g, tr_backend *b, const tr_refit_plan *plan,
                  const tr_refit_eval *ev, tr_refit_stats *st, tr_err *err)
{
    int64_t h[H_COUNT] = {0};
    double t0;
    int rv, crv, joined = 0;

    *st = (tr_refit_stats){.val_loss = NAN,
                           .eval_ms = NAN,
                           .device = plan->device,
                           .dtype = plan->device ? plan->dtype : TR_COMM_F32};
    tr_comm_set_timeout(c, ev->wait_ms);
    crv = c->ops->broadcast(c, h, sizeof(h), 0, err);
    tr_comm_set_timeout(c, ev->timeout_ms);
    if (crv != TROUPE_OK) {
        return crv;
    }
    t0 = now_ms(); /* the wait for the policy's next refit is not the refit's time */
    st->step = h[H_STEP];
    st->final = (int)h[H_FINAL];
    st->policy_size = (int)h[H_POLICY_SIZE];
    st->generation_size = c->size - st->policy_size;
    if ((rv = recv_header(c, b, plan, h, err)) != TROUPE_OK) {
        return rv;
    }
    rv = plan->device ? take_device(c, b, plan->dtype, st, t0, &joined, err)
                      : take_host(c, b, st, t0, &joined, err);
    if (!joined) {
        return rv; /* the communicator failed, or this rank could not take part: no report can follow */
    }
    if (rv == TROUPE_OK && st->hash != (uint64_t)h[H_HASH]) {
        rv = tr_err_set(err, TROUPE_DATA_LOSS,
                        "refit after step %lld: the weights held after the refit hash to %016" PRIx64
                        ", policy rank 0 sent %016" PRIx64,
                        (long long)h[H_STEP], st->hash, (uint64_t)h[H_HASH]);
    }
    st->total_ms = now_ms() - t0;
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
    const char *path = st->device ? "device" : "host", *hkey = st->device ? "params_mix64" : "params_fnv1a";

    for (int i = 0; i < st->n_gen_losses && used < sizeof(gen); i++) {
        int w = snprintf(gen + used, sizeof(gen) - used, "%s%.6f", i ? "," : "", st->gen_val_loss[i]);
        used += w > 0 ? (size_t)w : 0;
    }
    if (json) {
        snprintf(buf, len,
                 "{\"event\":\"refit\",\"step\":%lld,\"final\":%s,\"rank\":%d,\"bytes\":%" PRIu64
                 ",\"ms\":%.3f,\"mb_per_s\":%.3f,\"path\":\"%s\",\"dtype\":\"%s\",\"%s\":\"%016" PRIx64
                 "\",\"hash_ms\":%.3f,\"total_ms\":%.3f,\"val_loss\":%.9g,"
                 "\"eval_ms\":%.3f,\"policy_ranks\":%d,\"generation_ranks\":%d,\"generation_val_loss\":[%s]}",
                 (long long)st->step, st->final ? "true" : "false", rank, st->bytes, st->ms,
                 isnan(st->mb_per_s) ? 0.0 : st->mb_per_s, path, dtype_name(st->dtype), hkey, st->hash,
                 st->hash_ms, st->total_ms, isnan(st->val_loss) ? -1.0 : st->val_loss,
                 isnan(st->eval_ms) ? 0.0 : st->eval_ms, st->policy_size, st->generation_size, gen);
        return;
    }
    used =
        (size_t)snprintf(buf, len,
                         "refit step=%lld final=%d rank=%d bytes=%" PRIu64 " ms=%.3f mb_per_s=%.2f path=%s "
                         "dtype=%s %s=%016" PRIx64 " hash_ms=%.3f total_ms=%.3f",
                         (long long)st->step, st->final, rank, st->bytes, st->ms, st->mb_per_s, path,
                         dtype_name(st->dtype), hkey, st->hash, st->hash_ms, st->total_ms);
    if (used < len && !isnan(st->val_loss)) {
        used += (size_t)snprintf(buf + used, len - used, " val_loss=%.9g eval_ms=%.3f", st->val_loss,
                                 st->eval_ms);
    }
    if (used < len && st->n_gen_losses > 0) {
        snprintf(buf + used, len - used, " generation_ranks=%d generation_val_loss=%s", st->generation_size,
                 gen);
    }
}
