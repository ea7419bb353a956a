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
#include "train_hooks.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "checkpoint.h"
#include "data.h"
#include "dp.h"
#include "log.h"
#include "model.h"
#include "refit.h"
#include "train_int.h"

typedef struct run {
    const tr_train_config *cfg;
    tr_data data;
    tr_model_config mcfg;
    tr_backend *b;
    float *params; /* host copy for init */
    int32_t *in, *tg;
    int B, T;
    /* Bg: sequences of each global micro-batch, B times the ranks the group
     * was placed with; it stays when an elastic group changes size, and
     * share = Bg / size is this rank's part of it (B until then), computed
     * in chunks of at most B. */
    int Bg, share;
    uint64_t rng; /* batch sampler state, checkpointed */
    int64_t step; /* optimiser steps completed */
    uint64_t tokens_seen;
    tr_comm *comm;    /* data parallelism; NULL alone */
    int rank, size;   /* 0 and 1 alone */
    int refit_final; /* the last refit was sent (the generation group is done) */
    tr_refit_plan refit_plan; /* agreed by tr_refit_check_same */
    int64_t pos_step; /* the data position saved last (dp), kept as the file's second entry */
    int64_t ckpt_step; /* the step the latest checkpoint of this run holds (or the one it resumed) */
    uint64_t pos_rng;
    FILE *json;
    double peak;    /* FLOP/s for MFU, 0 = unknown */
    double ceiling; /* measured GEMM FLOP/s, 0 = not measured */
    double flops_per_token;
    char ckpt_path[4096];
    const tr_train_hooks *hooks; /* NULL: none */
    int traced;                  /* the step in progress is traced: hooks->span gets its phases */
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
                            .device = (int)c->gpu,
                            .dp_bucket_bytes = (size_t)c->dp_bucket_mb << 20,
                            .dp_grad_bf16 = strcmp(c->dp_grad_dtype, "bf16") == 0,
                            .dp_overlap = c->dp_overlap,
                            .dp_zero = r->comm != NULL && c->dp_zero == 1,
                            .dp_rank = r->rank,
                            .dp_size = r->size > 0 ? r->size : 1};
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

/* load_alone loads the checkpoint when there is one (NOT_FOUND otherwise). */
static int load_checkpoint(run *r, tr_err *err)
{
    tr_ckpt_state st;
    int rv = tr_ckpt_load(r->ckpt_path, r->b, &st, err);

    if (rv == TROUPE_OK) {
        r->step = st.step;
        r->rng = st.data_rng;
        r->tokens_seen = st.tokens_seen;
        TR_LOG(TR_LOG_NOTICE, "resumed checkpoint=%s step=%lld", r->ckpt_path, (long long)st.step);
    }
    return rv;
}

/* init_params draws the initial weights from the seed. */
static int init_params(run *r, tr_err *err)
{
    r->params = malloc(r->b->num_params * sizeof(float));
    if (r->params == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot allocate %zu parameters", r->b->num_params);
    }
    tr_model_init_params(&r->mcfg, (uint64_t)r->cfg->seed, r->params);
    return r->b->ops->set_params(r->b, r->params, err);
}

/* resume_dp: rank 0 loads the model and sends it (with the optimiser state
 * and the step) to every rank; each rank then finds its own data position
 * for that step. Without a checkpoint every rank draws the initial weights
 * from the seed and checks that they hash to rank 0's. */
static int resume_dp(run *r, tr_err *err)
{
    /* status: 1 loaded, 0 nothing to load, else rank 0's error code. */
    int64_t hdr[4] = {0, 0, 0, 0};
    int rv = TROUPE_OK;
    float *buf = NULL;

    /* Rank 0 reads the file into host memory and sends it whole: every rank
     * then takes what it holds (a ZeRO-1 rank its shard of m and v), so the
     * file is the same whatever dp.zero and world size wrote or read it. */
    if (r->rank == 0 && r->ckpt_path[0] != '\0' && r->cfg->checkpoint_resume) {
        tr_ckpt_state st;
        rv = tr_ckpt_read(r->ckpt_path, r->b, &st, &buf, err);
        hdr[0] = rv == TROUPE_OK ? 1 : rv == TROUPE_NOT_FOUND ? 0 : -(int64_t)rv;
        hdr[1] = st.step;
        hdr[2] = (int64_t)st.data_rng;
        hdr[3] = (int64_t)st.tokens_seen;
    }
    if (r->rank == 0 && rv == TROUPE_NOT_FOUND) {
        tr_err_clear(err);
    }
    int crv = r->comm->ops->broadcast(r->comm, hdr, sizeof(hdr), 0, err);
    if (crv != TROUPE_OK) {
        free(buf);
        return crv;
    }
    if (hdr[0] < 0) {
        free(buf);
        return r->rank == 0 ? rv
                            : tr_err_set(err, (int)-hdr[0],
                                         "rank 0 could not load the checkpoint %s (%s; see its log)",
                                         r->ckpt_path, troupe_strerror((int)-hdr[0]));
    }
    if (hdr[0] == 0) {
        /* Every rank draws the initial weights itself: the draw is a pure
         * function of the seed and the shape, which same_everywhere checked,
         * and drawing in parallel beats moving rank 0's copy through host
         * memory (on 4 H200s that took 1.7 s at 124M and 6 s at 350M of the
         * time to the first step). The hash proves the copies are the same. */
        rv = init_params(r, err);
        rv = tr_dp_agree(r->comm, rv, "initialise the model", err);
        return rv == TROUPE_OK ? tr_dp_check_same_params(r->comm,
                                                         tr_dp_params_hash(r->params, r->b->num_params),
                                                         "initial weights", err)
                               : rv;
    }
    r->step = hdr[1];
    r->tokens_seen = (uint64_t)hdr[3];
    if (r->rank != 0 && (buf = malloc(3 * r->b->num_params * sizeof(float))) == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED,
                        "cannot allocate %zu parameters to take rank 0's model", r->b->num_params);
    }
    rv = tr_dp_agree(r->comm, rv, "allocate the model state", err);
    if (rv == TROUPE_OK) {
        rv = tr_dp_share_buffer(r->comm, r->b, buf, err);
    }
    free(buf);
    if (rv == TROUPE_OK && r->rank == 0) {
        TR_LOG(TR_LOG_NOTICE, "resumed checkpoint=%s step=%lld", r->ckpt_path, (long long)r->step);
    }
    if (rv == TROUPE_OK) {
        rv = tr_dp_pos_read(r->cfg->checkpoint_dir, r->rank, r->size, r->share, r->step, &r->rng, err);
        rv = tr_dp_agree(r->comm, rv, "find its data position", err);
    }
    if (rv == TROUPE_OK) {
        r->pos_step = r->step;
        r->pos_rng = r->rng;
        TR_LOG(TR_LOG_NOTICE, "resumed rank=%d of %d step=%lld (model from rank 0, own data position)",
               r->rank, r->size, (long long)r->step);
    }
    return rv;
}

/* ckpt_dir makes checkpoint.dir and names the model file in it (when set). */
static int ckpt_dir(run *r, tr_err *err)
{
    const char *dir = r->cfg->checkpoint_dir;
    int rv = dir != NULL ? ensure_dir(dir, err) : TROUPE_OK;

    if (rv == TROUPE_OK && dir != NULL) {
        snprintf(r->ckpt_path, sizeof(r->ckpt_path), "%s/ckpt.bin", dir);
    }
    return rv;
}

/* init_or_resume loads the checkpoint when there is one, else draws the
 * initial weights from the seed. */
static int init_or_resume(run *r, tr_err *err)
{
    const tr_train_config *c = r->cfg;
    int rv;

    r->rng = (uint64_t)c->seed * 0x9E3779B97F4A7C15ull + 1;
    if ((rv = ckpt_dir(r, err)) != TROUPE_OK) {
        return rv;
    }
    if (r->comm != NULL) {
        return resume_dp(r, err);
    }
    if (c->checkpoint_dir != NULL && c->checkpoint_resume) {
        rv = load_checkpoint(r, err);
        if (rv != TROUPE_NOT_FOUND) {
            return rv;
        }
        tr_err_clear(err);
    }
    return init_params(r, err);
}

/* save_model writes the model file; m and v, when not NULL, are the whole
 * optimiser state gathered from the ZeRO-1 shards. */
static int save_model(run *r, const float *m, const float *v, tr_err *err)
{
    tr_ckpt_state st = {
        .step = r->step, .data_rng = r->rng, .seed = (uint64_t)r->cfg->seed, .tokens_seen = r->tokens_seen};
    int rv = tr_ckpt_save_opt(r->ckpt_path, r->b, &st, m, v, err);

    if (rv == TROUPE_OK) {
        TR_LOG(TR_LOG_INFO, "checkpoint saved path=%s step=%lld", r->ckpt_path, (long long)r->step);
    }
    return rv;
}

/* gather_params makes a ZeRO-1 rank's whole fp32 master current (see
 * backend.h), before anything reads it whole: the checkpoint, the refit. */
static int gather_params(run *r, tr_err *err)
{
    if (r->comm == NULL || !r->b->opts.dp_zero || r->b->ops->gather_params == NULL) {
        return TROUPE_OK;
    }
    return r->b->ops->gather_params(r->b, r->comm, err);
}

/* save_sharded: with dp.zero 1 every rank holds a shard of AdamW's m and v;
 * the ranks gather the whole state (the file is the one dp.zero 0 writes,
 * so a run may resume on either setting and any world size), then rank 0
 * writes it. */
static int save_sharded(run *r, tr_err *err)
{
    size_t n = r->b->num_params;
    float *mv = malloc(2 * n * sizeof(float));
    int rv = mv == NULL ? tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED,
                                     "cannot allocate %zu parameters' optimiser state to gather", n)
                        : TROUPE_OK;

    rv = tr_dp_agree(r->comm, rv, "allocate the optimiser state", err);
    if (rv == TROUPE_OK) {
        rv = gather_params(r, err);
    }
    if (rv == TROUPE_OK) {
        rv = r->b->ops->gather_opt_state(r->b, r->comm, mv, mv + n, err);
    }
    if (rv == TROUPE_OK) {
        rv = tr_dp_agree(r->comm, r->rank == 0 ? save_model(r, mv, mv + n, err) : TROUPE_OK,
                         "write the model checkpoint", err);
    }
    free(mv);
    return rv;
}

/* save_checkpoint: alone, the model file. Data-parallel: every rank writes
 * its data position first, then rank 0 the model, each step agreed by all
 * (see dp.h for why in this order). */
static int save_checkpoint(run *r, tr_err *err)
{
    int rv;

    if (r->comm == NULL) {
        rv = save_model(r, NULL, NULL, err);
        r->ckpt_step = rv == TROUPE_OK ? r->step : r->ckpt_step;
        return rv;
    }
    /* the share as the micro-batch: size x share is the global batch, which
     * is what a resume on another layout checks */
    rv = tr_dp_pos_write(r->cfg->checkpoint_dir, r->rank, r->size, r->share, r->step, r->rng, r->pos_step,
                         r->pos_rng, err);
    rv = tr_dp_agree(r->comm, rv, "write its data position", err);
    if (rv == TROUPE_OK) {
        r->pos_step = r->step;
        r->pos_rng = r->rng;
        rv = r->b->opts.dp_zero
                 ? save_sharded(r, err)
                 : tr_dp_agree(r->comm, r->rank == 0 ? save_model(r, NULL, NULL, err) : TROUPE_OK,
                               "write the model checkpoint", err);
    }
    r->ckpt_step = rv == TROUPE_OK ? r->step : r->ckpt_step;
    return rv;
}

/* evaluate averages the loss over up to eval.batches fixed validation
 * batches. Data-parallel, each batch of the global size is split between
 * the ranks (window counts may differ by one) and the batch means are
 * summed over them, weighted by their share. */
/* val_shape: windows per global validation batch (Bg) and batches (nb). */
static void val_shape(const run *r, int *Bg, size_t *nb)
{
    size_t windows = r->data.val_count > (size_t)r->T ? (r->data.val_count - 1) / (size_t)r->T : 0;
    size_t want = (size_t)r->Bg;

    *Bg = windows < want ? (int)windows : (int)want;
    *nb = *Bg > 0 ? tr_data_val_batches(&r->data, *Bg, r->T) : 0;
    if (*nb > (size_t)r->cfg->eval_batches) {
        *nb = (size_t)r->cfg->eval_batches;
    }
}

static int evaluate(run *r, double *val, tr_err *err)
{
    int Bg;
    size_t nb;
    val_shape(r, &Bg, &nb);
    int lo = (int)((int64_t)r->rank * Bg / r->size), hi = (int)((int64_t)(r->rank + 1) * Bg / r->size);
    double sum = 0.0;

    *val = NAN;
    for (size_t k = 0; k < nb && hi > lo; k++) {
        for (int c0 = lo; c0 < hi; c0 += r->B) { /* a share above B (fewer ranks) in chunks of B */
            int n = hi - c0 < r->B ? hi - c0 : r->B;
            float loss;
            int rv;
            tr_data_val_shard(&r->data, k, Bg, c0, n, r->T, r->in, r->tg);
            rv = r->b->ops->forward_loss(r->b, r->in, r->tg, n, r->T, &loss, err);
            if (rv != TROUPE_OK) {
                return rv;
            }
            sum += n == Bg ? (double)loss : (double)loss * n / Bg;
        }
    }
    if (r->comm != NULL && nb > 0) {
        float s = (float)sum;
        int rv = r->comm->ops->allreduce(r->comm, &s, 1, TR_COMM_SUM, err);
        if (rv != TROUPE_OK) {
            return rv;
        }
        sum = s;
    }
    if (nb > 0) {
        *val = sum / (double)nb;
    }
    return TROUPE_OK;
}

/* trace_span hands a phase that has just ended to the span hook (traced
 * steps only). */
static void trace_span(const run *r, const char *name, double t0, double t1)
{
    if (r->traced) {
        r->hooks->span(name, t0, t1, r->hooks->user);
    }
}

/* trace_pass places the forward and backward of the forward_backward call
 * that ran from t0 to t1 on the host clock. The call returns once its work
 * is done (the CPU computes inside it; the CUDA backend waits for the loss,
 * copied back after backward), so backward ended at t1 (on the GPU up to the
 * loss copy and the wake-up earlier: tens of microseconds), and the phases'
 * own lengths (CUDA events on the GPU: device time, not launch time) place
 * their starts; clamped to t0 in case a clock disagrees. */
static void trace_pass(const run *r, double t0, double t1)
{
    tr_phase_times p;
    double b0, f0;

    if (!r->traced) {
        return;
    }
    r->b->ops->phase_times(r->b, &p);
    b0 = fmax(t0, t1 - p.last_backward_ms);
    f0 = fmax(t0, b0 - p.last_forward_ms);
    trace_span(r, "forward", f0, b0);
    trace_span(r, "backward", b0, t1);
}

/* dp_reduce averages the gradients and the step's loss over the ranks:
 * every rank then holds the gradient of the global batch, so the norm
 * taken next is the global one and the update is the same everywhere. */
static int dp_reduce(run *r, tr_train_metrics *m, tr_err *err)
{
    float loss = (float)m->loss;
    int rv;

    if (r->b->ops->allreduce_grads == NULL) {
        return tr_err_set(err, TROUPE_UNIMPLEMENTED,
                          "the %s backend cannot all-reduce gradients (data parallelism)", r->b->ops->name);
    }
    /* Host time is the all-reduce's: it returns when the reduction is done
     * (the CUDA backend waits for its communication stream), and backward
     * has ended before it (forward_backward returned). With allreduce_start
     * (dp.overlap) most buckets were reduced during backward: this is then
     * the part that did not hide behind it. */
    double t0 = now_ms();
    rv = r->b->ops->allreduce_grads(r->b, r->comm, err);
    trace_span(r, "grad all-reduce", t0, now_ms());

    if (rv == TROUPE_OK) {
        rv = r->comm->ops->allreduce(r->comm, &loss, 1, TR_COMM_MEAN, err);
    }
    m->loss = loss;
    return rv;
}

static int train_step_once(run *r, tr_train_metrics *m, tr_err *err);

/* train_step runs one optimiser step (r->step, 0-based) and fills m. A
 * step that fails leaves the sampler where it was before it, so that the
 * step can be redone (an elastic group's new membership) with the same
 * batches. */
static int train_step(run *r, tr_train_metrics *m, tr_err *err)
{
    uint64_t rng = r->rng;
    int rv = train_step_once(r, m, err);

    if (rv != TROUPE_OK) {
        r->rng = rng;
    }
    return rv;
}

static int train_step_once(run *r, tr_train_metrics *m, tr_err *err)
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
        uint64_t rng0 = r->rng;
        /* This rank's share of the global micro-batch, in chunks of at most
         * B (more than one only after an elastic group shrank); each chunk
         * draws the same global micro-batch from the same sampler state, so
         * the sampler advances once per micro-batch whatever the size. Each
         * chunk's loss scale is its part of the rank's sequences of the step,
         * so the accumulated gradient is their mean: 1/accum when the share
         * is one chunk, as before. */
        for (int c0 = 0; c0 < r->share && rv == TROUPE_OK; c0 += r->B) {
            int n = r->share - c0 < r->B ? r->share - c0 : r->B;
            float loss = 0.0f;
            double f0;
            r->rng = rng0;
            tr_data_train_shard(&r->data, &r->rng, r->Bg, r->share * r->rank + c0, n, r->T, r->in, r->tg);
            f0 = now_ms();
            /* the last micro-batch's backward makes the gradients final: a
             * backend that can starts their all-reduce during it */
            if (k == accum - 1 && c0 + n == r->share && r->comm != NULL && ops->allreduce_start != NULL) {
                rv = ops->allreduce_start(r->b, r->comm, err);
            }
            rv = rv != TROUPE_OK ? rv
                                 : ops->forward_backward(r->b, r->in, r->tg, n, r->T,
                                                         (float)n / (float)(accum * r->share), &loss, err);
            if (rv == TROUPE_OK) {
                trace_pass(r, f0, now_ms());
            }
            loss_sum += (double)loss * n / r->share;
        }
    }
    m->loss = loss_sum / (double)accum;
    if (rv == TROUPE_OK && r->comm != NULL) {
        rv = dp_reduce(r, m, err);
    }
    if (rv == TROUPE_OK) {
        rv = ops->grad_norm(r->b, &norm, err);
    }
    if (rv != TROUPE_OK) {
        return rv;
    }
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
    double o0 = now_ms();
    rv = ops->adamw_update(r->b, &opt, err);
    if (rv == TROUPE_OK) {
        rv = ops->sync(r->b, err);
    }
    if (rv == TROUPE_OK && r->traced) {
        /* after the sync the update has ended; its events give its start */
        tr_phase_times p;
        double o1 = now_ms();
        ops->phase_times(r->b, &p);
        trace_span(r, "optimizer", fmax(o0, o1 - p.optimizer_ms), o1);
    }
    m->grad_norm = norm;
    m->step_ms = now_ms() - t0;
    m->tokens = (int64_t)accum * r->share * r->T;
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

/* data_fingerprint hashes the tokens (FNV-1a over at most 4M of them,
 * evenly strided), so that ranks reading different files, or different
 * versions of one, are caught before they average unrelated gradients. */
double tr_train_data_fingerprint(const tr_data *d)
{
    size_t stride = d->count > ((size_t)1 << 22) ? d->count >> 22 : 1;
    uint64_t h = 0xcbf29ce484222325ull;

    for (size_t i = 0; i < d->count; i += stride) {
        h = (h ^ d->tokens[i]) * 0x100000001b3ull;
    }
    return (double)(h >> 11); /* 53 bits: exact in a double */
}

/* same_everywhere: every rank must train the same model on the same data
 * with the same schedule, or the averaged gradients mean nothing (and the
 * ranks' loops would not even make the same collective calls). */
static int same_everywhere(run *r, tr_err *err)
{
    const tr_train_config *c = r->cfg;
    const tr_dp_setting s[] = {
        {"seed", (double)c->seed},
        {"model.layers", (double)r->mcfg.layers},
        {"model.width", (double)r->mcfg.width},
        {"model.heads", (double)r->mcfg.heads},
        {"model.seq_len", (double)r->mcfg.seq_len},
        {"model.vocab", (double)r->mcfg.vocab},
        {"train.steps", (double)c->steps},
        {"train.micro_batch", (double)c->micro_batch},
        {"train.accum_steps", (double)c->accum_steps},
        {"train.lr", c->lr},
        {"train.min_lr_fraction", c->min_lr_fraction},
        {"train.warmup_steps", (double)c->warmup_steps},
        {"train.weight_decay", c->weight_decay},
        {"train.grad_clip", c->grad_clip},
        {"train.precision (0 bf16, 1 fp32)", strcmp(c->precision, "fp32") == 0 ? 1.0 : 0.0},
        {"data tokens", (double)r->data.count},
        {"data.val_fraction", c->val_fraction},
        {"data fingerprint (FNV-1a of the tokens)", tr_train_data_fingerprint(&r->data)},
        {"eval.every", (double)c->eval_every},
        {"eval.batches", (double)c->eval_batches},
        {"checkpoint.every", (double)c->checkpoint_every},
        {"checkpoint.dir set", c->checkpoint_dir != NULL ? 1.0 : 0.0},
        {"dp.zero", (double)c->dp_zero},
    };
    return tr_dp_check_same(r->comm, s, (int)(sizeof(s) / sizeof(s[0])), err);
}

/* share_error: the group's size does not divide the global micro-batch. */
static int share_error(const run *r, tr_err *err)
{
    return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                      "dp.elastic: %d ranks cannot split the global micro-batch of %d sequences (train.micro_batch "
                      "%d x %d placed ranks) evenly, so the global batch cannot stay the same: choose a "
                      "micro_batch that every group size from elastic.min_workers to workers divides into",
                      r->size, r->Bg, r->B, r->Bg / r->B);
}

/* elastic_sync is the first thing the ranks of a new membership of an
 * elastic group do together. Each says how many steps it completed (holds:
 * it has a model; a replacement or a fresh start has none); when any has
 * one, the first rank with the most completed steps sends its model,
 * optimiser state, step, sampler state and data positions to all (in a ring
 * a rank may finish an all-reduce that its neighbour did not, so the ranks
 * may be a step apart; none redoes a step another applied), and the
 * settings are checked as at the start. *joined: the state was taken (0:
 * no rank had any, a fresh start). Steps are counted in floats: exact to
 * 2^24. */
static int elastic_sync(run *r, int holds, int *joined, tr_err *err)
{
    size_t n = r->b->num_params;
    float *done = calloc((size_t)r->size, sizeof(float)), *buf = NULL;
    int64_t hdr[5] = {r->step, (int64_t)r->rng, (int64_t)r->tokens_seen, r->pos_step, (int64_t)r->pos_rng};
    int src = 0, same = 1, rv;

    *joined = 0;
    if (done == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot allocate %d ranks' step counts", r->size);
    }
    done[r->rank] = holds ? (float)(r->step + 1) : 0.0f;
    rv = r->comm->ops->allreduce(r->comm, done, (size_t)r->size, TR_COMM_SUM, err);
    for (int i = 1; rv == TROUPE_OK && i < r->size; i++) {
        src = done[i] > done[src] ? i : src;
    }
    if (rv != TROUPE_OK || done[src] == 0.0f) {
        free(done);
        return rv;
    }
    /* Ranks that completed the same steps hold the same model and optimiser
     * state (every step applied the same reduced gradients): after a shrink
     * the survivors usually do, and a rank left alone always does. Only the
     * step and the sampler's state travel then, not 3 x the parameters. */
    for (int i = 0; i < r->size; i++) {
        same = same && done[i] == done[src];
    }
    free(done);
    if ((rv = r->comm->ops->broadcast(r->comm, hdr, sizeof(hdr), src, err)) != TROUPE_OK) {
        return rv;
    }
    if (same) {
        goto settled;
    }
    if ((buf = malloc(3 * n * sizeof(float))) == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot allocate %zu parameters to take rank %d's model",
                        n, src);
    }
    if (rv == TROUPE_OK && r->rank == src) {
        rv = r->b->ops->get_params(r->b, buf, err);
        rv = rv == TROUPE_OK ? r->b->ops->get_opt_state(r->b, buf + n, buf + 2 * n, err) : rv;
    }
    rv = tr_dp_agree(r->comm, rv, "hold the model state to send", err);
    if (rv == TROUPE_OK) {
        rv = r->comm->ops->broadcast(r->comm, buf, 3 * n * sizeof(float), src, err);
    }
    if (rv == TROUPE_OK && r->rank != src) {
        rv = r->b->ops->set_params(r->b, buf, err);
        rv = rv == TROUPE_OK ? r->b->ops->set_opt_state(r->b, buf + n, buf + 2 * n, err) : rv;
    }
    free(buf);
    if (r->comm->failed) {
        return rv;
    }
    rv = tr_dp_agree(r->comm, rv, "take the model state", err);
settled:
    if (rv == TROUPE_OK) {
        if (hdr[0] != r->step || !holds) {
            TR_LOG(TR_LOG_NOTICE, "elastic: took the state after step %lld from rank %d (this rank had %s)",
                   (long long)hdr[0], src, holds ? "another step" : "none");
        }
        r->step = hdr[0];
        r->rng = (uint64_t)hdr[1];
        r->tokens_seen = (uint64_t)hdr[2];
        r->pos_step = hdr[3];
        r->pos_rng = (uint64_t)hdr[4];
        rv = ckpt_dir(r, err);
        rv = tr_dp_agree(r->comm, rv, "make checkpoint.dir", err);
    }
    if (rv == TROUPE_OK) {
        rv = same_everywhere(r, err);
    }
    *joined = rv == TROUPE_OK;
    return rv;
}

/* elastic_lost: the step's collective failed and the group may go on
 * without the peer (dp.elastic). */
static int elastic_lost(const run *r)
{
    return r->cfg->rejoin != NULL && r->comm != NULL && r->comm->failed;
}

/* elastic_rebuild: after the communicator failed (or the membership grew),
 * until the ranks of a newer epoch stand together and hold one state, or
 * the group has no new membership for this rank (that error ends the run).
 * A failure while they meet (a second loss) waits for the next epoch. */
static int elastic_rebuild(run *r, const char *cause, tr_err *err)
{
    double t0 = now_ms(), t_join = t0;
    int from = r->size, joined = 0, rv;
    char why[512];

    snprintf(why, sizeof(why), "%s", cause);
    TR_LOG(TR_LOG_NOTICE, "elastic: rank %d of %d at step %lld: %s; waiting for the group's new membership",
           r->rank, r->size, (long long)r->step + 1, why);
    for (;;) {
        tr_err_clear(err);
        if ((rv = r->cfg->rejoin(r->cfg->elastic_user, &r->comm, err)) != TROUPE_OK) {
            return rv;
        }
        t_join = now_ms();
        r->rank = r->comm->rank;
        r->size = r->comm->size;
        if (r->Bg % r->size != 0) {
            return share_error(r, err);
        }
        r->share = r->Bg / r->size;
        if ((rv = elastic_sync(r, 1, &joined, err)) == TROUPE_OK) {
            break;
        }
        if (!r->comm->failed) {
            return rv;
        }
        TR_LOG(TR_LOG_NOTICE, "elastic: the new membership did not stand (%s); waiting for the next", err->msg);
    }
    TR_LOG(TR_LOG_NOTICE,
           "elastic: rank %d of %d (was %d ranks) at step %lld, %d sequences per micro-batch of %d: membership "
           "and communicator %.0f ms, state %.0f ms",
           r->rank, r->size, from, (long long)r->step + 1, r->share, r->Bg, t_join - t0, now_ms() - t_join);
    return TROUPE_OK;
}

/* checkpoint writes the checkpoint of the step just completed. When a peer
 * is lost while the ranks write it (dp.elastic), the new membership writes
 * it again rather than skipping it: every survivor completed this step (the
 * ranks agreed on it before), so they hold its state, and at the last step
 * no later checkpoint would make up for it. A stop asked by the step
 * callback is not waited out. */
static int checkpoint(run *r, int stop, tr_err *err)
{
    int rv;

    while ((rv = save_checkpoint(r, err)) != TROUPE_OK) {
        if (stop || !elastic_lost(r) || (rv = elastic_rebuild(r, err->msg, err)) != TROUPE_OK) {
            return rv;
        }
        TR_LOG(TR_LOG_NOTICE, "elastic: writing the checkpoint of step %lld again as rank %d of %d",
               (long long)r->step, r->rank, r->size);
    }
    return TROUPE_OK;
}

/* run_open does everything before the first step, and logs where the time
 * went (a slow start is otherwise invisible: the first metrics line comes
 * after all of it). */
static int run_open(run *r, tr_err *err)
{
    const tr_train_config *c = r->cfg;
    double t0 = now_ms(), t_data, t_backend, t_ceiling, t_checks;
    int rv;

    r->B = (int)c->micro_batch;
    r->T = (int)c->seq_len;
    r->comm = c->comm;
    r->rank = c->comm != NULL ? c->comm->rank : 0;
    r->size = c->comm != NULL ? c->comm->size : 1;
    r->Bg = r->B * (c->rejoin != NULL && c->placed_size > 0 ? c->placed_size : r->size);
    if (r->Bg % r->size != 0) {
        return share_error(r, err);
    }
    r->share = r->Bg / r->size;

    rv = tr_data_open(&r->data, c->data_path, c->data_format, c->val_fraction, r->T, err);
    if (rv == TROUPE_OK) {
        rv = model_config(r, err);
    }
    t_data = now_ms();
    if (rv == TROUPE_OK) {
        rv = create_backend(r, err);
    }
    t_backend = now_ms();
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
    t_ceiling = now_ms();
    if (rv == TROUPE_OK && r->comm != NULL && c->rejoin != NULL) {
        /* An elastic group may be under way: a replacement takes the
         * members' state instead of starting from the seed or the file. */
        int joined = 0;
        rv = elastic_sync(r, 0, &joined, err);
        if (rv == TROUPE_OK && joined) {
            t_checks = now_ms();
            TR_LOG(TR_LOG_NOTICE, "elastic: joined the group as rank %d of %d at step %lld in %.0f ms", r->rank,
                   r->size, (long long)r->step, t_checks - t0);
            return TROUPE_OK;
        }
    }
    if (rv == TROUPE_OK && r->comm != NULL) {
        rv = same_everywhere(r, err);
    }
    if (rv == TROUPE_OK && c->refit != NULL) {
        tr_refit_settings s;
        tr_train_refit_settings(c, &r->mcfg, &r->data, &s);
        rv = tr_refit_check_same(c->refit, r->b, &s, &r->refit_plan, err);
    }
    t_checks = now_ms();
    if (rv != TROUPE_OK) {
        return rv;
    }
    rv = init_or_resume(r, err);
    if (rv == TROUPE_OK) {
        double t_end = now_ms();
        TR_LOG(TR_LOG_NOTICE,
               "startup ms: data=%.0f backend=%.0f gemm_ceiling=%.0f checks=%.0f weights=%.0f total=%.0f "
               "(backend: device context, buffers; weights: %s)",
               t_data - t0, t_backend - t_data, t_ceiling - t_backend, t_checks - t_ceiling, t_end - t_checks,
               t_end - t0,
               r->comm != NULL ? "drawn from the seed on every rank and checked against rank 0's, or "
                                 "loaded by rank 0 and sent"
                               : "drawn from the seed or loaded from the checkpoint");
    }
    return rv;
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

/* agree_stop: a stop asked of one rank (a signal, the head) stops all of
 * them after the same step, so they checkpoint together and none waits in
 * a collective for a rank that left. */
static int agree_stop(run *r, int *stop, tr_err *err)
{
    float any = *stop ? 1.0f : 0.0f;
    int rv = r->comm->ops->allreduce(r->comm, &any, 1, TR_COMM_SUM, err);

    *stop = any > 0.0f;
    return rv;
}

static int due(int64_t step, int64_t every, int64_t last)
{
    return step == last || (every > 0 && step % every == 0);
}

/* refit sends the weights after r->step to the generation group (every
 * policy rank takes part; see refit.h). final: the last one. */
static int refit(run *r, int final, tr_err *err)
{
    tr_refit_stats st;
    int Bg, rv;
    size_t nb;

    val_shape(r, &Bg, &nb);
    if ((rv = gather_params(r, err)) != TROUPE_OK) {
        return rv;
    }
    rv = tr_refit_send(r->cfg->refit, r->cfg->refit_gather, r->b, &r->refit_plan, r->size, r->step, final, Bg,
                       (int)nb, &st, err);
    if (rv == TROUPE_OK) {
        r->refit_final = final;
        if (r->cfg->on_refit != NULL) {
            r->cfg->on_refit(&st, r->cfg->refit->rank, r->cfg->on_refit_user);
        }
    }
    return rv;
}

void tr_train_refit_settings(const tr_train_config *c, const tr_model_config *m, const tr_data *d,
                             tr_refit_settings *s)
{
    *s = (tr_refit_settings){.refit_every = c->refit_every,
                             .path = tr_refit_parse_path(c->refit_path),
                             .layers = m->layers,
                             .width = m->width,
                             .heads = m->heads,
                             .seq_len = m->seq_len,
                             .vocab = m->vocab,
                             .val_fraction = c->val_fraction,
                             .data_tokens = (double)d->count,
                             .data_fingerprint = tr_train_data_fingerprint(d)};
}

int tr_train_model_backend(const tr_train_config *cfg, const tr_data *d, tr_model_config *mcfg, tr_backend **b,
                           tr_err *err)
{
    run r = {.cfg = cfg, .B = (int)cfg->micro_batch, .T = (int)cfg->seq_len};
    int rv;

    *b = NULL;
    r.data = *d; /* read only: the vocab */
    rv = model_config(&r, err);
    if (rv == TROUPE_OK) {
        rv = create_backend(&r, err);
    }
    *mcfg = r.mcfg;
    *b = r.b;
    return rv;
}

int tr_train_run(const tr_train_config *cfg, tr_train_on_step cb, void *user, tr_err *err)
{
    return tr_train_run_hooked(cfg, NULL, cb, user, err);
}

int tr_train_run_hooked(const tr_train_config *cfg, const tr_train_hooks *hooks, tr_train_on_step cb,
                        void *user, tr_err *err)
{
    run r = {.cfg = cfg, .hooks = hooks};
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
    if (r.comm != NULL) {
        TR_LOG(
            TR_LOG_NOTICE,
            "data parallel: rank %d of %d over %s, global batch %lld sequences (micro_batch %d x accum_steps "
            "%lld x %d ranks), collective deadline %u ms",
            r.rank, r.size, r.comm->ops->name, (long long)r.B * cfg->accum_steps * r.size, r.B,
            (long long)cfg->accum_steps, r.size, r.comm->timeout_ms);
    }
    if (r.step >= cfg->steps) {
        TR_LOG(TR_LOG_NOTICE, "nothing to do: the checkpoint is at step %lld of %lld", (long long)r.step,
               (long long)cfg->steps);
    }
    int64_t start_step = r.step;
    r.ckpt_step = r.step;
    while (r.step < cfg->steps && !stop) {
        tr_train_metrics m = {.val_loss = NAN, .mfu_gemm = NAN};
        /* A grown membership is met here, between steps, while the old
         * communicator still works; a lost peer where a collective fails. */
        if (cfg->membership_moved != NULL && cfg->membership_moved(cfg->elastic_user)) {
            if ((rv = elastic_rebuild(&r, "the group's membership changed", err)) != TROUPE_OK) {
                goto out;
            }
            continue;
        }
        if (hooks != NULL && hooks->begin != NULL &&
            (rv = hooks->begin(r.step + 1, hooks->user, err)) != TROUPE_OK) {
            goto out;
        }
        r.traced = hooks != NULL && hooks->span != NULL && (hooks->traced == NULL || hooks->traced(hooks->user));
        double t_step = now_ms();
        rv = train_step(&r, &m, err);
        if (rv == TROUPE_OK && r.step < start_step + 2) {
            /* on a GPU the first step also builds the GEMM plans (tuned, or
             * read from the plan cache), the second captures the CUDA graphs */
            TR_LOG(TR_LOG_NOTICE, "step %lld took %.0f ms (with its one-time work: %s)",
                   (long long)r.step + 1, now_ms() - t_step,
                   r.step == start_step ? "warm-up, GEMM plans on a GPU" : "CUDA graph capture on a GPU");
        }
        if (rv != TROUPE_OK) {
            if (hooks != NULL && hooks->end != NULL) {
                hooks->end(r.step + 1, NULL, hooks->user);
            }
            /* the step in flight is redone by the new membership (unless
             * a survivor applied it: then its state is taken) */
            if (elastic_lost(&r) && (rv = elastic_rebuild(&r, err->msg, err)) == TROUPE_OK) {
                continue;
            }
            goto out;
        }
        r.step++;
        r.tokens_seen += (uint64_t)m.tokens * (uint64_t)r.size;
        finish_metrics(&r, &m);
        if (hooks != NULL && hooks->end != NULL) {
            hooks->end(r.step, &m, hooks->user);
        }
        if (cfg->eval_every > 0 && due(r.step, cfg->eval_every, cfg->steps)) {
            rv = evaluate(&r, &m.val_loss, err);
            if (rv != TROUPE_OK) {
                if (elastic_lost(&r) && (rv = elastic_rebuild(&r, err->msg, err)) == TROUPE_OK) {
                    continue; /* the step is done; its evaluation is lost */
                }
                goto out;
            }
        }
        stop = report(&r, &m, cb, user);
        if (r.comm != NULL && (rv = agree_stop(&r, &stop, err)) != TROUPE_OK) {
            if (elastic_lost(&r) && (rv = elastic_rebuild(&r, err->msg, err)) == TROUPE_OK) {
                stop = 0; /* a stop asked of this rank alone is asked again after the next step */
                continue;
            }
            goto out;
        }
        if (cfg->checkpoint_dir != NULL && (stop || due(r.step, cfg->checkpoint_every, cfg->steps)) &&
            (rv = checkpoint(&r, stop, err)) != TROUPE_OK) {
            goto out;
        }
        if (cfg->refit != NULL && (stop || due(r.step, cfg->refit_every, cfg->steps))) {
            rv = refit(&r, stop || r.step >= cfg->steps, err);
            if (rv != TROUPE_OK) {
                goto out;
            }
        }
    }
    /* A peer lost after the last step and before its checkpoint (in the
     * stop agreement or the evaluation) sent the survivors round the loop
     * once more with nothing left to train: the last checkpoint is written
     * by them here. */
    if (!stop && cfg->checkpoint_dir != NULL && r.step >= cfg->steps && r.ckpt_step != r.step) {
        TR_LOG(TR_LOG_NOTICE, "elastic: the checkpoint of step %lld was not written before the loss; writing it as "
               "rank %d of %d", (long long)r.step, r.rank, r.size);
        if ((rv = checkpoint(&r, 0, err)) != TROUPE_OK) {
            goto out;
        }
    }
    /* A run with nothing left to train (resumed at its last step) still
     * ends the generation group's wait. */
    if (cfg->refit != NULL && !r.refit_final && (rv = refit(&r, 1, err)) != TROUPE_OK) {
        goto out;
    }
    if (stop) {
        rv = tr_err_set(err, TROUPE_CANCELLED, "stopped by the step callback after step %lld",
                        (long long)r.step);
    }
out:
    run_close(&r);
    return rv;
}
