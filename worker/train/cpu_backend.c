/* cpu_backend.c - the plain C fp32 implementation of backend.h.
 *
 * The backend owns four parameter-sized vectors (params, grads, AdamW m and v)
 * in canonical layout, plus an activation arena sized for the largest B x T it
 * has been asked to run. forward_backward runs the forward pass keeping every
 * activation the backward needs, then walks the layers in reverse, adding into
 * the gradients; the per-layer input gradients live in one reused scratch set
 * because only the residual stream's gradient crosses layers.
 *
 * Precision and recompute are accepted and ignored: everything is fp32 here and
 * activations are cheap to keep at the sizes the CPU path is for. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cpu_ops.h"
#include "model.h"
#include "zero.h"

/* Per-layer activations kept from forward for backward. */
typedef struct layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *residual2;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *residual3;
} layer_acts;

typedef struct cpu_backend {
    tr_backend base;
    float *params, *grads, *m, *v;
    float *p[TR_NUM_PARAM_TENSORS]; /* tensor views into params */
    float *g[TR_NUM_PARAM_TENSORS]; /* tensor views into grads */
    /* Activation arena for cap_bt = B*T rows and cap_att attention entries. */
    float *arena;
    size_t cap_bt, cap_att;
    float *encoded, *lnf, *lnf_mean, *lnf_rstd, *logits, *losses;
    size_t arena_bytes;
    layer_acts *layers;
    /* Backward scratch: one layer's worth of input gradients. */
    float *dres, *dln, *dqkv, *datty, *dfch, *dfch_gelu;
    double *dscratch;
    uint64_t in_use, peak;
    tr_phase_times phase;
    /* ZeRO-1 (opts.dp_zero): m and v hold zmap.shard elements, packed;
     * zcomm is the communicator of the last allreduce_grads, which the
     * norm and the update of the same step talk over. */
    tr_zero_map zmap;
    tr_comm *zcomm;
} cpu_backend;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void account(cpu_backend *cb, long long delta)
{
    cb->in_use = (uint64_t)((long long)cb->in_use + delta);
    if (cb->in_use > cb->peak) {
        cb->peak = cb->in_use;
    }
}

static void free_arena(cpu_backend *cb)
{
    account(cb, -(long long)cb->arena_bytes);
    free(cb->arena);
    free(cb->dscratch);
    cb->arena = NULL;
    cb->dscratch = NULL;
    cb->arena_bytes = 0;
    cb->cap_bt = 0;
    cb->cap_att = 0;
}

/* take carves n floats at *off from base (NULL while only counting). */
static float *take(float *base, size_t *off, size_t n)
{
    float *p = base != NULL ? base + *off : NULL;
    *off += n;
    return p;
}

/* arena_layout carves (or, with base == NULL, only counts) the activations
 * for bt rows and att attention entries; returns the float count. */
static size_t arena_layout(cpu_backend *cb, float *base, size_t bt, size_t att)
{
    size_t C = (size_t)cb->base.cfg.width, V = (size_t)cb->base.cfg.vocab;
    size_t off = 0;

    cb->encoded = take(base, &off, bt * C);
    for (int l = 0; l < cb->base.cfg.layers; l++) {
        layer_acts *a = &cb->layers[l];
        a->ln1 = take(base, &off, bt * C);
        a->ln1_mean = take(base, &off, bt);
        a->ln1_rstd = take(base, &off, bt);
        a->qkv = take(base, &off, bt * 3 * C);
        a->atty = take(base, &off, bt * C);
        a->att = take(base, &off, att);
        a->residual2 = take(base, &off, bt * C);
        a->ln2 = take(base, &off, bt * C);
        a->ln2_mean = take(base, &off, bt);
        a->ln2_rstd = take(base, &off, bt);
        a->fch = take(base, &off, bt * 4 * C);
        a->fch_gelu = take(base, &off, bt * 4 * C);
        a->residual3 = take(base, &off, bt * C);
    }
    cb->lnf = take(base, &off, bt * C);
    cb->lnf_mean = take(base, &off, bt);
    cb->lnf_rstd = take(base, &off, bt);
    cb->logits = take(base, &off, bt * V);
    cb->losses = take(base, &off, bt);
    cb->dres = take(base, &off, bt * C);
    cb->dln = take(base, &off, bt * C);
    cb->dqkv = take(base, &off, bt * 3 * C);
    cb->datty = take(base, &off, bt * C);
    cb->dfch = take(base, &off, bt * 4 * C);
    cb->dfch_gelu = take(base, &off, bt * 4 * C);
    return off;
}

/* ensure_arena grows the activation arena to fit B x T (never shrinks). */
static int ensure_arena(cpu_backend *cb, int B, int T, tr_err *err)
{
    size_t bt = (size_t)B * T;
    size_t att = (size_t)B * cb->base.cfg.heads * T * T;
    size_t C = (size_t)cb->base.cfg.width;
    size_t nd = 4 * C > 2 * (size_t)T ? 4 * C : 2 * (size_t)T;
    size_t nf;

    if (bt <= cb->cap_bt && att <= cb->cap_att) {
        return TROUPE_OK;
    }
    free_arena(cb);
    nf = arena_layout(cb, NULL, bt, att);
    cb->arena = malloc(nf * sizeof(float));
    cb->dscratch = malloc(nd * sizeof(double));
    if (cb->arena == NULL || cb->dscratch == NULL) {
        free_arena(cb);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED,
                          "cpu backend: cannot allocate %zu MiB of activations for B=%d T=%d",
                          nf * sizeof(float) >> 20, B, T);
    }
    arena_layout(cb, cb->arena, bt, att);
    cb->cap_bt = bt;
    cb->cap_att = att;
    cb->arena_bytes = nf * sizeof(float) + nd * sizeof(double);
    account(cb, (long long)cb->arena_bytes);
    return TROUPE_OK;
}

static int check_batch(cpu_backend *cb, const int32_t *inputs, const int32_t *targets, int B, int T,
                       tr_err *err)
{
    int V = cb->base.cfg.vocab;

    if (B <= 0 || T <= 0 || T > cb->base.cfg.seq_len) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "cpu backend: batch %dx%d outside 1..%d tokens", B, T,
                          cb->base.cfg.seq_len);
    }
    for (size_t i = 0; i < (size_t)B * T; i++) {
        if (inputs[i] < 0 || inputs[i] >= V || targets[i] < 0 || targets[i] >= V) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                              "cpu backend: token %zu of the batch is outside the vocabulary [0, %d)", i, V);
        }
    }
    return ensure_arena(cb, B, T, err);
}

/* forward runs the model and returns the mean loss; activations stay in the
 * arena for backward. */
static double forward(cpu_backend *cb, const int32_t *inputs, const int32_t *targets, int B, int T)
{
    int C = cb->base.cfg.width, NH = cb->base.cfg.heads, V = cb->base.cfg.vocab;
    int N = B * T;
    size_t C_ = (size_t)C;
    float *const *p = cb->p;
    const float *residual = cb->encoded;

    tr_cpu_encoder_forward(cb->encoded, inputs, p[TR_P_WTE], p[TR_P_WPE], B, T, C);
    for (int l = 0; l < cb->base.cfg.layers; l++) {
        layer_acts *a = &cb->layers[l];
        tr_cpu_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, residual, p[TR_P_LN1W] + l * C_,
                                 p[TR_P_LN1B] + l * C_, N, C);
        tr_cpu_matmul_forward(a->qkv, a->ln1, p[TR_P_QKVW] + l * 3 * C_ * C_, p[TR_P_QKVB] + l * 3 * C_, N, C,
                              3 * C);
        tr_cpu_attention_forward(a->atty, a->att, a->qkv, B, T, C, NH, cb->dscratch);
        tr_cpu_matmul_forward(a->residual2, a->atty, p[TR_P_ATTPROJW] + l * C_ * C_,
                              p[TR_P_ATTPROJB] + l * C_, N, C, C);
        tr_cpu_residual_forward(a->residual2, a->residual2, residual, N * C);
        tr_cpu_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->residual2, p[TR_P_LN2W] + l * C_,
                                 p[TR_P_LN2B] + l * C_, N, C);
        tr_cpu_matmul_forward(a->fch, a->ln2, p[TR_P_FCW] + l * 4 * C_ * C_, p[TR_P_FCB] + l * 4 * C_, N, C,
                              4 * C);
        tr_cpu_gelu_forward(a->fch_gelu, a->fch, N * 4 * C);
        tr_cpu_matmul_forward(a->residual3, a->fch_gelu, p[TR_P_FCPROJW] + l * 4 * C_ * C_,
                              p[TR_P_FCPROJB] + l * C_, N, 4 * C, C);
        tr_cpu_residual_forward(a->residual3, a->residual3, a->residual2, N * C);
        residual = a->residual3;
    }
    tr_cpu_layernorm_forward(cb->lnf, cb->lnf_mean, cb->lnf_rstd, residual, p[TR_P_LNFW], p[TR_P_LNFB], N, C);
    /* Only the V real rows of the tied head are used: padded logits would be
     * exactly zero and must not enter the softmax. */
    tr_cpu_matmul_forward(cb->logits, cb->lnf, p[TR_P_WTE], NULL, N, C, V);
    return tr_cpu_softmax_xent_forward(cb->logits, cb->losses, cb->logits, targets, N, V) / N;
}

/* backward_layer adds layer l's gradients; on entry cb->dres holds
 * d(loss)/d(residual3[l]), on return d(loss)/d(input of layer l). */
static void backward_layer(cpu_backend *cb, int l, int B, int T)
{
    int C = cb->base.cfg.width, NH = cb->base.cfg.heads, N = B * T;
    size_t C_ = (size_t)C;
    float *const *p = cb->p, *const *g = cb->g;
    layer_acts *a = &cb->layers[l];
    const float *residual = l == 0 ? cb->encoded : cb->layers[l - 1].residual3;
    double *s = cb->dscratch;

    tr_cpu_matmul_backward(cb->dfch_gelu, g[TR_P_FCPROJW] + l * 4 * C_ * C_, g[TR_P_FCPROJB] + l * C_,
                           cb->dres, a->fch_gelu, p[TR_P_FCPROJW] + l * 4 * C_ * C_, N, 4 * C, C, s);
    tr_cpu_gelu_backward(cb->dfch, a->fch, cb->dfch_gelu, N * 4 * C);
    tr_cpu_matmul_backward(cb->dln, g[TR_P_FCW] + l * 4 * C_ * C_, g[TR_P_FCB] + l * 4 * C_, cb->dfch, a->ln2,
                           p[TR_P_FCW] + l * 4 * C_ * C_, N, C, 4 * C, s);
    tr_cpu_layernorm_backward(cb->dres, g[TR_P_LN2W] + l * C_, g[TR_P_LN2B] + l * C_, cb->dln, a->residual2,
                              p[TR_P_LN2W] + l * C_, a->ln2_mean, a->ln2_rstd, N, C);
    tr_cpu_matmul_backward(cb->datty, g[TR_P_ATTPROJW] + l * C_ * C_, g[TR_P_ATTPROJB] + l * C_, cb->dres,
                           a->atty, p[TR_P_ATTPROJW] + l * C_ * C_, N, C, C, s);
    memset(cb->dqkv, 0, (size_t)N * 3 * C_ * sizeof(float));
    tr_cpu_attention_backward(cb->dqkv, cb->datty, a->qkv, a->att, B, T, C, NH, s);
    tr_cpu_matmul_backward(cb->dln, g[TR_P_QKVW] + l * 3 * C_ * C_, g[TR_P_QKVB] + l * 3 * C_, cb->dqkv,
                           a->ln1, p[TR_P_QKVW] + l * 3 * C_ * C_, N, C, 3 * C, s);
    tr_cpu_layernorm_backward(cb->dres, g[TR_P_LN1W] + l * C_, g[TR_P_LN1B] + l * C_, cb->dln, residual,
                              p[TR_P_LN1W] + l * C_, a->ln1_mean, a->ln1_rstd, N, C);
}

static void backward(cpu_backend *cb, const int32_t *inputs, const int32_t *targets, int B, int T,
                     float loss_scale)
{
    int C = cb->base.cfg.width, V = cb->base.cfg.vocab, L = cb->base.cfg.layers, N = B * T;

    tr_cpu_softmax_xent_backward(cb->logits, targets, N, V, loss_scale / (float)N);
    tr_cpu_matmul_backward(cb->dln, cb->g[TR_P_WTE], NULL, cb->logits, cb->lnf, cb->p[TR_P_WTE], N, C, V,
                           cb->dscratch);
    memset(cb->dres, 0, (size_t)N * C * sizeof(float));
    tr_cpu_layernorm_backward(cb->dres, cb->g[TR_P_LNFW], cb->g[TR_P_LNFB], cb->dln,
                              cb->layers[L - 1].residual3, cb->p[TR_P_LNFW], cb->lnf_mean, cb->lnf_rstd, N,
                              C);
    for (int l = L - 1; l >= 0; l--) {
        backward_layer(cb, l, B, T);
    }
    tr_cpu_encoder_backward(cb->g[TR_P_WTE], cb->g[TR_P_WPE], cb->dres, inputs, B, T, C);
}

static int cpu_forward_backward(tr_backend *b, const int32_t *inputs, const int32_t *targets, int B, int T,
                                float loss_scale, float *loss, tr_err *err)
{
    cpu_backend *cb = (cpu_backend *)b;
    double t0, t1;
    int rv = check_batch(cb, inputs, targets, B, T, err);

    if (rv != TROUPE_OK) {
        return rv;
    }
    t0 = now_ms();
    *loss = (float)forward(cb, inputs, targets, B, T);
    t1 = now_ms();
    backward(cb, inputs, targets, B, T, loss_scale);
    cb->phase.last_forward_ms = t1 - t0;
    cb->phase.last_backward_ms = now_ms() - t1;
    cb->phase.forward_ms += cb->phase.last_forward_ms;
    cb->phase.backward_ms += cb->phase.last_backward_ms;
    return TROUPE_OK;
}

static int cpu_forward_loss(tr_backend *b, const int32_t *inputs, const int32_t *targets, int B, int T,
                            float *loss, tr_err *err)
{
    cpu_backend *cb = (cpu_backend *)b;
    int rv = check_batch(cb, inputs, targets, B, T, err);

    if (rv != TROUPE_OK) {
        return rv;
    }
    *loss = (float)forward(cb, inputs, targets, B, T);
    return TROUPE_OK;
}

static int cpu_set_params(tr_backend *b, const float *params, tr_err *err)
{
    cpu_backend *cb = (cpu_backend *)b;
    memcpy(cb->params, params, b->num_params * sizeof(float));
    return TROUPE_OK;
}

static int cpu_get_params(tr_backend *b, float *params, tr_err *err)
{
    cpu_backend *cb = (cpu_backend *)b;
    memcpy(params, cb->params, b->num_params * sizeof(float));
    return TROUPE_OK;
}

/* zero_grads starts a step: it also resets the phase timers, so that
 * phase_times reports the sum over this step's micro-batches. */
static int cpu_zero_grads(tr_backend *b, tr_err *err)
{
    cpu_backend *cb = (cpu_backend *)b;
    memset(cb->grads, 0, b->num_params * sizeof(float));
    memset(&cb->phase, 0, sizeof(cb->phase));
    return TROUPE_OK;
}

/* zero_comm is the communicator a sharded step talks over. */
static int zero_comm(cpu_backend *cb, const char *what, tr_err *err)
{
    if (cb->zcomm == NULL && cb->zmap.size > 1) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "cpu backend: %s with dp.zero 1 needs allreduce_grads first (it names the ranks)",
                          what);
    }
    return TROUPE_OK;
}

static int cpu_grad_norm(tr_backend *b, float *norm, tr_err *err)
{
    cpu_backend *cb = (cpu_backend *)b;
    double sum = 0.0;
    int rv;

    if (b->opts.dp_zero) {
        /* each rank holds the mean gradient of its shard only */
        float part;
        if ((rv = zero_comm(cb, "the gradient norm", err)) != TROUPE_OK) {
            return rv;
        }
        part = (float)tr_zero_sumsq(&cb->zmap, cb->grads);
        if (cb->zcomm != NULL &&
            (rv = cb->zcomm->ops->allreduce(cb->zcomm, &part, 1, TR_COMM_SUM, err)) != TROUPE_OK) {
            return rv;
        }
        *norm = sqrtf(part);
        return TROUPE_OK;
    }
    for (size_t i = 0; i < b->num_params; i++) {
        sum += (double)cb->grads[i] * cb->grads[i];
    }
    *norm = (float)sqrt(sum);
    return TROUPE_OK;
}

static int cpu_get_grads(tr_backend *b, float *grads, tr_err *err)
{
    cpu_backend *cb = (cpu_backend *)b;
    memcpy(grads, cb->grads, b->num_params * sizeof(float));
    return TROUPE_OK;
}

/* adamw_run updates n weights p from gradients g and state m, v: the
 * arithmetic of every element, shared by the whole and the sharded update. */
static void adamw_run(const tr_adamw *opt, float wd, float bc1, float bc2, float *p, const float *g, float *m,
                      float *v, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        float gj = g[j] * opt->grad_scale;
        float mj = opt->beta1 * m[j] + (1.0f - opt->beta1) * gj;
        float vj = opt->beta2 * v[j] + (1.0f - opt->beta2) * gj * gj;
        float mhat = mj / bc1, vhat = vj / bc2;
        m[j] = mj;
        v[j] = vj;
        p[j] -= opt->lr * (mhat / (sqrtf(vhat) + opt->eps) + wd * p[j]);
    }
}

/* zero_adamw updates this rank's runs (a range is one tensor, so one decay
 * each), then all-gathers the weights' pieces. */
static int zero_adamw(cpu_backend *cb, const tr_adamw *opt, float bc1, float bc2, double t0, tr_err *err)
{
    const tr_zero_map *zm = &cb->zmap;
    int rv = zero_comm(cb, "the AdamW update", err);

    for (int k = 0; rv == TROUPE_OK && k < zm->nruns; k++) {
        const tr_zero_run *u = &zm->runs[k];
        float wd = tr_model_param_is_matrix(u->range) ? opt->weight_decay : 0.0f;
        adamw_run(opt, wd, bc1, bc2, cb->params + u->off, cb->grads + u->off, cb->m + u->soff,
                  cb->v + u->soff, u->len);
    }
    if (rv == TROUPE_OK && cb->zcomm != NULL) {
        rv = tr_zero_gather_host(zm, cb->zcomm, cb->params, err);
    }
    cb->zcomm = NULL; /* the next step names its communicator again */
    cb->phase.optimizer_ms = now_ms() - t0;
    return rv;
}

static int cpu_adamw_update(tr_backend *b, const tr_adamw *opt, tr_err *err)
{
    cpu_backend *cb = (cpu_backend *)b;
    double t0 = now_ms();
    size_t off = 0;
    float bc1, bc2;

    if (opt->t < 1) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "cpu backend: AdamW step %lld must be >= 1",
                          (long long)opt->t);
    }
    bc1 = (float)(1.0 - pow(opt->beta1, (double)opt->t));
    bc2 = (float)(1.0 - pow(opt->beta2, (double)opt->t));
    if (b->opts.dp_zero) {
        return zero_adamw(cb, opt, bc1, bc2, t0, err);
    }
    for (int i = 0; i < TR_NUM_PARAM_TENSORS; i++) {
        float wd = tr_model_param_is_matrix(i) ? opt->weight_decay : 0.0f;
        adamw_run(opt, wd, bc1, bc2, cb->params + off, cb->grads + off, cb->m + off, cb->v + off,
                  b->param_sizes[i]);
        off += b->param_sizes[i];
    }
    cb->phase.optimizer_ms = now_ms() - t0;
    return TROUPE_OK;
}

static int cpu_get_opt_state(tr_backend *b, float *m, float *v, tr_err *err)
{
    cpu_backend *cb = (cpu_backend *)b;
    if (b->opts.dp_zero) {
        tr_zero_unpack(&cb->zmap, cb->m, m);
        tr_zero_unpack(&cb->zmap, cb->v, v);
        return TROUPE_OK;
    }
    memcpy(m, cb->m, b->num_params * sizeof(float));
    memcpy(v, cb->v, b->num_params * sizeof(float));
    return TROUPE_OK;
}

static int cpu_set_opt_state(tr_backend *b, const float *m, const float *v, tr_err *err)
{
    cpu_backend *cb = (cpu_backend *)b;
    if (b->opts.dp_zero) {
        tr_zero_pack(&cb->zmap, m, cb->m);
        tr_zero_pack(&cb->zmap, v, cb->v);
        return TROUPE_OK;
    }
    memcpy(cb->m, m, b->num_params * sizeof(float));
    memcpy(cb->v, v, b->num_params * sizeof(float));
    return TROUPE_OK;
}

/* cpu_gather_opt_state: each rank unpacks its runs, then the pieces are
 * all-gathered (the tails every rank holds already). */
static int cpu_gather_opt_state(tr_backend *b, tr_comm *c, float *m, float *v, tr_err *err)
{
    cpu_backend *cb = (cpu_backend *)b;
    int rv = cpu_get_opt_state(b, m, v, err);

    if (rv == TROUPE_OK && b->opts.dp_zero && c != NULL) {
        rv = tr_zero_gather_host(&cb->zmap, c, m, err);
        rv = rv == TROUPE_OK ? tr_zero_gather_host(&cb->zmap, c, v, err) : rv;
    }
    return rv;
}

static void cpu_mem_stats(tr_backend *b, tr_mem_stats *out)
{
    cpu_backend *cb = (cpu_backend *)b;
    out->in_use_bytes = cb->in_use;
    out->peak_bytes = cb->peak;
    out->total_bytes = 0;
}

static void cpu_phase_times(tr_backend *b, tr_phase_times *out)
{
    *out = ((cpu_backend *)b)->phase;
}

static int cpu_sync(tr_backend *b, tr_err *err)
{
    return TROUPE_OK;
}

static void cpu_destroy(tr_backend *b)
{
    cpu_backend *cb = (cpu_backend *)b;
    if (cb == NULL) {
        return;
    }
    free_arena(cb);
    free(cb->layers);
    free(cb->params);
    free(cb->m);
    tr_zero_map_fini(&cb->zmap);
    free(cb);
}

/* cpu_allreduce_grads averages the fp32 gradients over the ranks in place
 * (with dp.zero 1: each rank's shard of them, tensor by tensor). */
static int cpu_allreduce_grads(tr_backend *b, tr_comm *c, tr_err *err)
{
    cpu_backend *cb = (cpu_backend *)b;
    if (b->opts.dp_zero) {
        if (c->rank != b->opts.dp_rank || c->size != b->opts.dp_size) {
            return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                              "cpu backend: sharded for rank %d of %d, the communicator is rank %d of %d",
                              b->opts.dp_rank, b->opts.dp_size, c->rank, c->size);
        }
        cb->zcomm = c;
        return tr_zero_reduce_host(&cb->zmap, c, cb->grads, err);
    }
    return c->ops->allreduce(c, cb->grads, b->num_params, TR_COMM_MEAN, err);
}

static const tr_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .set_params = cpu_set_params,
    .get_params = cpu_get_params,
    .zero_grads = cpu_zero_grads,
    .forward_backward = cpu_forward_backward,
    .forward_loss = cpu_forward_loss,
    .grad_norm = cpu_grad_norm,
    .get_grads = cpu_get_grads,
    .adamw_update = cpu_adamw_update,
    .get_opt_state = cpu_get_opt_state,
    .set_opt_state = cpu_set_opt_state,
    .mem_stats = cpu_mem_stats,
    .phase_times = cpu_phase_times,
    .sync = cpu_sync,
    .allreduce_grads = cpu_allreduce_grads,
    .gather_opt_state = cpu_gather_opt_state,
};

static int check_opts(const tr_backend_opts *opts, tr_err *err)
{
    if (opts->micro_batch <= 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "cpu backend: micro_batch must be positive, got %d",
                          opts->micro_batch);
    }
    if (opts->precision != TR_PRECISION_BF16 && opts->precision != TR_PRECISION_FP32) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "cpu backend: unknown precision %d",
                          (int)opts->precision);
    }
    if (opts->recompute < 0 || opts->recompute > 2) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "cpu backend: recompute must be 0, 1 or 2, got %d",
                          opts->recompute);
    }
    return TROUPE_OK;
}

/* zero_setup builds the shard map: one range per tensor with dp.zero 1,
 * else one rank holding everything (the map then covers the whole vector,
 * so shard == num_params). */
static int zero_setup(cpu_backend *cb, const size_t offs[TR_NUM_PARAM_TENSORS], tr_err *err)
{
    const tr_backend_opts *o = &cb->base.opts;
    tr_zero_range r[TR_NUM_PARAM_TENSORS];

    for (int i = 0; i < TR_NUM_PARAM_TENSORS; i++) {
        r[i] = (tr_zero_range){offs[i], cb->base.param_sizes[i]};
    }
    if (!o->dp_zero) {
        return tr_zero_map_init(&cb->zmap, r, TR_NUM_PARAM_TENSORS, 0, 1, err);
    }
    return tr_zero_map_init(&cb->zmap, r, TR_NUM_PARAM_TENSORS, o->dp_rank, o->dp_size, err);
}

int tr_backend_cpu_create(const tr_model_config *cfg, const tr_backend_opts *opts, tr_backend **out,
                          tr_err *err)
{
    cpu_backend *cb = NULL;
    size_t offs[TR_NUM_PARAM_TENSORS], n;
    int rv;

    *out = NULL;
    rv = tr_model_config_check(cfg, err);
    if (rv == TROUPE_OK) {
        rv = check_opts(opts, err);
    }
    if (rv != TROUPE_OK) {
        goto out;
    }
    cb = calloc(1, sizeof(*cb));
    if (cb == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cpu backend: out of memory");
        goto out;
    }
    cb->base.ops = &cpu_ops;
    cb->base.cfg = *cfg;
    cb->base.opts = *opts;
    n = tr_model_param_sizes(cfg, cb->base.param_sizes);
    cb->base.num_params = n;
    tr_model_param_offsets(cfg, offs);
    rv = zero_setup(cb, offs, err);
    if (rv != TROUPE_OK) {
        goto out;
    }
    /* params and grads in one block, m and v (the shard's with dp.zero) in
     * another: freed together, counted once. */
    cb->params = calloc(2 * n, sizeof(float));
    cb->m = calloc(2 * cb->zmap.shard, sizeof(float));
    cb->layers = calloc((size_t)cfg->layers, sizeof(layer_acts));
    if (cb->params == NULL || cb->m == NULL || cb->layers == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cpu backend: cannot allocate %zu MiB of parameters",
                        (2 * n + 2 * cb->zmap.shard) * sizeof(float) >> 20);
        goto out;
    }
    cb->grads = cb->params + n;
    cb->v = cb->m + cb->zmap.shard;
    for (int i = 0; i < TR_NUM_PARAM_TENSORS; i++) {
        cb->p[i] = cb->params + offs[i];
        cb->g[i] = cb->grads + offs[i];
    }
    account(cb, (long long)((2 * n + 2 * cb->zmap.shard) * sizeof(float)));
    /* Size the arena for the configured micro-batch now, so that an
     * impossible size fails at start rather than at the first step. */
    rv = ensure_arena(cb, opts->micro_batch, cfg->seq_len, err);
    if (rv != TROUPE_OK) {
        goto out;
    }
    *out = &cb->base;
    cb = NULL;
out:
    if (cb != NULL) {
        cpu_destroy(&cb->base);
    }
    return rv;
}
