/* train.c - the training loop (tr_train_run).
 *
 * One run: open the data, derive the model config (vocab from the data unless
 * set), create the backend for the requested device, then either initialise
 * the weights from the seed or resume from checkpoint.dir/ckpt.bin. Each
 * optimiser step zeroes the gradients, runs accum_steps micro-batches with
 * loss_scale 1/accum (so the accumulated gradient is the mean), clips by the
 * global norm through AdamW's grad_scale, and applies AdamW at the scheduled
 * learning rate. The only state besides the backend's is the step count and
 * the sampler's RNG, both checkpointed, so a resumed run draws the same
 * batches and (on the CPU) reproduces the loss curve bit for bit. */
#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "checkpoint.h"
#include "data.h"
#include "log.h"
#include "model.h"

typedef struct run {
    const tr_train_config *cfg;
    tr_data data;
    tr_model_config mcfg;
    tr_backend *b;
    float *params; /* host copy for init */
    int32_t *in, *tg;
    int B, T;
    uint64_t rng; /* batch sampler state, checkpointed */
    int64_t step; /* optimiser steps completed */
    uint64_t tokens_seen;
    FILE *json;
    double peak;    /* FLOP/s for MFU, 0 = unknown */
    double ceiling; /* measured GEMM FLOP/s, 0 = not measured */
    double flops_per_token;
    char ckpt_path[4096];
} run;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double tr_train_lr(const tr_train_config *cfg, int64_t step)
{
    double lr = cfg->lr, lr_min = cfg->lr * cfg->min_lr_fraction, ratio;

    if (step < cfg->warmup_steps) {
        return lr * (double)(step + 1) / (double)cfg->warmup_steps;
    }
    if (cfg->steps <= cfg->warmup_steps) {
        return lr;
    }
    ratio = (double)(step - cfg->warmup_steps) / (double)(cfg->steps - cfg->warmup_steps);
    return lr_min + 0.5 * (1.0 + cos(M_PI * ratio)) * (lr - lr_min);
}

static int model_config(run *r, tr_err *err)
{
    const tr_train_config *c = r->cfg;
    int vocab = c->vocab > 0 ? (int)c->vocab : r->data.vocab;

    if (vocab < r->data.vocab) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "model.vocab %d is smaller than the vocab %d of %s",
                          vocab, r->data.vocab, c->data_path);
    }
    r->mcfg = (tr_model_config){.layers = (int)c->layers,
                                .width = (int)c->width,
                                .heads = (int)c->heads,
                                .seq_len = (int)c->seq_len,
                                .vocab = vocab,
                                .padded_vocab = tr_model_padded_vocab(vocab)};
    return tr_model_config_check(&r->mcfg, err);
}

/* create_backend honours device: cpu, cuda (an error when unavailable), or
 * auto (cuda when this build has it and a device answers, else cpu). */
static int create_backend(run *r, tr_err *err)
{
    const tr_train_config *c = r->cfg;
    tr_backend_opts opts = {.micro_batch = r->B,
                            .precision =
                                strcmp(c->precision, "fp32") == 0 ? TR_PRECISION_FP32 : TR_PRECISION_BF16,
                            .recompute = (int)c->recompute,
                            .device = (int)c->gpu};
    int want_cuda = strcmp(c->device, "cuda") == 0, rv;

    if (want_cuda && c->create_cuda == NULL) {
        return tr_err_set(err, TROUPE_UNAVAILABLE, "device cuda: this troupe-train was built without CUDA");
    }
    if (c->create_cuda != NULL && (want_cuda || strcmp(c->device, "auto") == 0)) {
        rv = c->create_cuda(&r->mcfg, &opts, &r->b, err);
        if (rv == TROUPE_OK || want_cuda || rv != TROUPE_UNAVAILABLE) {
            return rv;
        }
        TR_LOG(TR_LOG_NOTICE, "no usable CUDA device, training on the CPU reason=\"%s\"", err->msg);
        tr_err_clear(err);
    }
    return tr_backend_cpu_create(&r->mcfg, &opts, &r->b, err);
}

static int ensure_dir(const char *dir, tr_err *err)
{
    struct stat st;

    if (mkdir(dir, 0755) == 0 || (errno == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))) {
        return TROUPE_OK;
    }
    return tr_err_set(err, TROUPE_PERMISSION_DENIED, "checkpoint.dir %s: cannot create: %s", dir,
                      errno == EEXIST ? "exists and is not a directory" : strerror(errno));
}

/* init_or_resume loads the checkpoint when there is one, else draws the
 * initial weights from the seed. */
static int init_or_resume(run *r, tr_err *err)
{
    const tr_train_config *c = r->cfg;
    tr_ckpt_state st;
    int rv;

    r->rng = (uint64_t)c->seed * 0x9E3779B97F4A7C15ull + 1;
    if (c->checkpoint_dir != NULL) {
        rv = ensure_dir(c->checkpoint_dir, err);
        if (rv != TROUPE_OK) {
            return rv;
        }
        snprintf(r->ckpt_path, sizeof(r->ckpt_path), "%s/ckpt.bin", c->checkpoint_dir);
        if (c->checkpoint_resume) {
            rv = tr_ckpt_load(r->ckpt_path, r->b, &st, err);
            if (rv == TROUPE_OK) {
                r->step = st.step;
                r->rng = st.data_rng;
                r->tokens_seen = st.tokens_seen;
                TR_LOG(TR_LOG_NOTICE, "resumed checkpoint=%s step=%lld", r->ckpt_path, (long long)st.step);
                return TROUPE_OK;
            }
            if (rv != TROUPE_NOT_FOUND) {
                return rv;
            }
            tr_err_clear(err);
        }
    }
    r->params = malloc(r->b->num_params * sizeof(float));
    if (r->params == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot allocate %zu parameters", r->b->num_params);
    }
    tr_model_init_params(&r->mcfg, (uint64_t)c->seed, r->params);
    return r->b->ops->set_params(r->b, r->params, err);
}

static int save_checkpoint(run *r, tr_err *err)
{
    tr_ckpt_state st = {
        .step = r->step, .data_rng = r->rng, .seed = (uint64_t)r->cfg->seed, .tokens_seen = r->tokens_seen};
    int rv = tr_ckpt_save(r->ckpt_path, r->b, &st, err);

    if (rv == TROUPE_OK) {
        TR_LOG(TR_LOG_INFO, "checkpoint saved path=%s step=%lld", r->ckpt_path, (long long)r->step);
    }
    return rv;
}

/* evaluate averages the loss over up to eval.batches fixed validation batches. */
static int evaluate(run *r, double *val, tr_err *err)
{
    size_t windows = r->data.val_count > (size_t)r->T ? (r->data.val_count - 1) / (size_t)r->T : 0;
    int B = windows < (size_t)r->B ? (int)windows : r->B;
    size_t nb = B > 0 ? tr_data_val_batches(&r->data, B, r->T) : 0;
    double sum = 0.0;

    *val = NAN;
    if (nb > (size_t)r->cfg->eval_batches) {
        nb = (size_t)r->cfg->eval_batches;
    }
    for (size_t k = 0; k < nb; k++) {
        float loss;
        int rv;
        tr_data_val_batch(&r->data, k, B, r->T, r->in, r->tg);
        rv = r->b->ops->forward_loss(r->b, r->in, r->tg, B, r->T, &loss, err);
        if (rv != TROUPE_OK) {
            return rv;
        }
        sum += loss;
    }
    if (nb > 0) {
        *val = sum / (double)nb;
    }
    return TROUPE_OK;
}

/* train_step runs one optimiser step (r->step, 0-based) and fills m. */
static int train_step(run *r, tr_train_metrics *m, tr_err *err)
{
    const tr_backend_ops *ops = r->b->ops;
    int64_t accum = r->cfg->accum_steps;
    double t0 = now_ms(), loss_sum = 0.0;
    float norm = 0.0f;
    tr_adamw opt = {.beta1 = 0.9f,
                    .beta2 = 0.95f,
                    .eps = 1e-8f,
                    .weight_decay = (float)r->cfg->weight_decay,
                    .grad_scale = 1.0f,
                    .t = r->step + 1};
    int rv = ops->zero_grads(r->b, err);

    for (int64_t k = 0; k < accum && rv == TROUPE_OK; k++) {
        float loss = 0.0f;
        tr_data_train_batch(&r->data, &r->rng, r->B, r->T, r->in, r->tg);
        rv = ops->forward_backward(r->b, r->in, r->tg, r->B, r->T, 1.0f / (float)accum, &loss, err);
        loss_sum += loss;
    }
    if (rv == TROUPE_OK) {
        rv = ops->grad_norm(r->b, &norm, err);
    }
    if (rv != TROUPE_OK) {
        return rv;
    }
    m->loss = loss_sum / (double)accum;
    if (!isfinite(m->loss) || !isfinite(norm)) {
        return tr_err_set(err, TROUPE_ABORTED,
                          "step %lld: loss %g, gradient norm %g: training diverged (lower train.lr?)",
                          (long long)r->step + 1, m->loss, (double)norm);
    }
    /* Clipping scales the whole gradient, folded into AdamW's first multiply. */
    if (r->cfg->grad_clip > 0.0 && norm > r->cfg->grad_clip) {
        opt.grad_scale = (float)(r->cfg->grad_clip / norm);
    }
    m->lr = tr_train_lr(r->cfg, r->step);
    opt.lr = (float)m->lr;
    rv = ops->adamw_update(r->b, &opt, err);
    if (rv == TROUPE_OK) {
        rv = ops->sync(r->b, err);
    }
    m->grad_norm = norm;
    m->step_ms = now_ms() - t0;
    m->tokens = (int64_t)accum * r->B * r->T;
    return rv;
}

/* finish_metrics fills the rates, memory and phase figures of step m. */
static void finish_metrics(run *r, tr_train_metrics *m)
{
    m->step = r->step;
    m->steps = r->cfg->steps;
    m->backend = r->b->ops->name;
    m->tokens_per_s = m->step_ms > 0.0 ? (double)m->tokens / (m->step_ms / 1e3) : NAN;
    m->mfu = r->peak > 0.0 ? r->flops_per_token * m->tokens_per_s / r->peak : NAN;
    m->mfu_gemm = r->ceiling > 0.0 ? r->flops_per_token * m->tokens_per_s / r->ceiling : NAN;
    r->b->ops->mem_stats(r->b, &m->mem);
    r->b->ops->phase_times(r->b, &m->phase);
}

static int report(run *r, const tr_train_metrics *m, tr_train_on_step cb, void *user)
{
    if (r->json != NULL) {
        char line[1024];
        tr_train_metrics_json(m, line, sizeof(line));
        fprintf(r->json, "%s\n", line);
        fflush(r->json);
    }
    return cb != NULL ? cb(m, user) : 0;
}

/* measure_ceiling times the GEMM ceiling when asked and possible; on the
 * CPU or without the hook it is skipped, with a notice. */
static int measure_ceiling(run *r, tr_err *err)
{
    const tr_train_config *c = r->cfg;
    double tflops = 0.0;
    int rv;

    if (!c->measure_gemm) {
        return TROUPE_OK;
    }
    if (c->gemm_ceiling == NULL || strcmp(r->b->ops->name, "cpu") == 0) {
        TR_LOG(TR_LOG_NOTICE, "mfu.measure_gemm ignored backend=%s", r->b->ops->name);
        return TROUPE_OK;
    }
    rv = c->gemm_ceiling((int)c->gpu, &tflops, err);
    if (rv == TROUPE_OK) {
        r->ceiling = tflops * 1e12;
        TR_LOG(TR_LOG_NOTICE, "measured bf16 GEMM ceiling tflops=%.1f", tflops);
    }
    return rv;
}

/* run_open does everything before the first step. */
static int run_open(run *r, tr_err *err)
{
    const tr_train_config *c = r->cfg;
    int rv;

    r->B = (int)c->micro_batch;
    r->T = (int)c->seq_len;
    rv = tr_data_open(&r->data, c->data_path, c->data_format, c->val_fraction, r->T, err);
    if (rv == TROUPE_OK) {
        rv = model_config(r, err);
    }
    if (rv == TROUPE_OK) {
        rv = create_backend(r, err);
    }
    if (rv != TROUPE_OK) {
        return rv;
    }
    r->in = malloc((size_t)r->B * r->T * sizeof(int32_t));
    r->tg = malloc((size_t)r->B * r->T * sizeof(int32_t));
    if (r->in == NULL || r->tg == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot allocate batch buffers");
    }
    if (c->metrics_json != NULL) {
        r->json = fopen(c->metrics_json, "a");
        if (r->json == NULL) {
            return tr_err_set(err, TROUPE_PERMISSION_DENIED, "metrics.json %s: cannot open: %s",
                              c->metrics_json, strerror(errno));
        }
    }
    r->flops_per_token = tr_model_flops_per_token(&r->mcfg, r->b->num_params);
    /* MFU is a GPU figure: on the CPU there is no meaningful peak. */
    if (strcmp(r->b->ops->name, "cpu") != 0) {
        r->peak = c->peak_tflops > 0.0
                      ? c->peak_tflops * 1e12
                      : tr_train_peak_flops(c->device_name ? c->device_name((int)c->gpu) : NULL);
    }
    rv = measure_ceiling(r, err);
    if (rv != TROUPE_OK) {
        return rv;
    }
    return init_or_resume(r, err);
}

static void run_close(run *r)
{
    if (r->b != NULL) {
        r->b->ops->destroy(r->b);
    }
    if (r->json != NULL) {
        fclose(r->json);
    }
    tr_data_close(&r->data);
    free(r->params);
    free(r->in);
    free(r->tg);
}

static int due(int64_t step, int64_t every, int64_t last)
{
    return step == last || (every > 0 && step % every == 0);
}

int tr_train_run(const tr_train_config *cfg, tr_train_on_step cb, void *user, tr_err *err)
{
    run r = {.cfg = cfg};
    int rv = tr_train_config_check(cfg, err), stop = 0;

    if (rv == TROUPE_OK) {
        rv = run_open(&r, err);
    }
    if (rv != TROUPE_OK) {
        goto out;
    }
    TR_LOG(TR_LOG_NOTICE,
           "training backend=%s params=%zu layers=%d width=%d heads=%d seq_len=%d vocab=%d tokens=%zu "
           "val_tokens=%zu start_step=%lld steps=%lld",
           r.b->ops->name, r.b->num_params, r.mcfg.layers, r.mcfg.width, r.mcfg.heads, r.mcfg.seq_len,
           r.mcfg.vocab, r.data.train_count, r.data.val_count, (long long)r.step, (long long)cfg->steps);
    if (r.step >= cfg->steps) {
        TR_LOG(TR_LOG_NOTICE, "nothing to do: the checkpoint is at step %lld of %lld", (long long)r.step,
               (long long)cfg->steps);
    }
    while (r.step < cfg->steps && !stop) {
        tr_train_metrics m = {.val_loss = NAN, .mfu_gemm = NAN};
        rv = train_step(&r, &m, err);
        if (rv != TROUPE_OK) {
            goto out;
        }
        r.step++;
        r.tokens_seen += (uint64_t)m.tokens;
        finish_metrics(&r, &m);
        if (cfg->eval_every > 0 && due(r.step, cfg->eval_every, cfg->steps)) {
            rv = evaluate(&r, &m.val_loss, err);
            if (rv != TROUPE_OK) {
                goto out;
            }
        }
        stop = report(&r, &m, cb, user);
        if (cfg->checkpoint_dir != NULL && (stop || due(r.step, cfg->checkpoint_every, cfg->steps))) {
            rv = save_checkpoint(&r, err);
            if (rv != TROUPE_OK) {
                goto out;
            }
        }
    }
    if (stop) {
        rv = tr_err_set(err, TROUPE_CANCELLED, "stopped by the step callback after step %lld",
                        (long long)r.step);
    }
out:
    run_close(&r);
    return rv;
}
