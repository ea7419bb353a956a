/* train_config.c - the settings table of troupe-train (keys in train.h).
 *
 * Bounds that a single value can break live in the table, so the loader
 * reports them with file:line:col; relations between values (width and heads)
 * and enumerations are checked afterwards by tr_train_config_check. */
#include <stddef.h>
#include <string.h>

#include "train.h"

#define F(field) offsetof(tr_train_config, field)

const tr_cfg_desc tr_train_config_table[] = {
    {"seed", TR_CFG_INT, F(seed), "1337", 0, 9.2e18, 0, "run seed: initial weights and batch order"},
    {"device", TR_CFG_STRING, F(device), "auto", TR_CFG_UNBOUNDED, 0, "auto | cpu | cuda"},
    {"gpu", TR_CFG_INT, F(gpu), "0", 0, 1023, 0, "CUDA device ordinal"},
    {"model.layers", TR_CFG_INT, F(layers), "2", 1, 1024, 0, "transformer blocks (L)"},
    {"model.width", TR_CFG_INT, F(width), "64", 1, 65536, 0, "channels (C), divisible by model.heads"},
    {"model.heads", TR_CFG_INT, F(heads), "4", 1, 1024, 0, "attention heads (NH)"},
    {"model.seq_len", TR_CFG_INT, F(seq_len), "64", 1, 1 << 20, 0, "tokens per sequence (T)"},
    {"model.vocab", TR_CFG_INT, F(vocab), "0", 0, 65536, 0,
     "vocabulary size; 0 = the data file's (padded to a multiple of 128)"},
    {"train.steps", TR_CFG_INT, F(steps), "100", 1, 1e12, 0, "optimiser steps"},
    {"train.micro_batch", TR_CFG_INT, F(micro_batch), "4", 1, 1 << 20, 0,
     "sequences per forward/backward (B)"},
    {"train.accum_steps", TR_CFG_INT, F(accum_steps), "1", 1, 1 << 20, 0,
     "micro-batches accumulated per optimiser step"},
    {"train.lr", TR_CFG_DOUBLE, F(lr), "1e-3", 0, 10, 0, "peak learning rate"},
    {"train.min_lr_fraction", TR_CFG_DOUBLE, F(min_lr_fraction), "0.1", 0, 1, 0,
     "cosine schedule ends at lr * this"},
    {"train.warmup_steps", TR_CFG_INT, F(warmup_steps), "10", 0, 1e12, 0,
     "linear learning-rate warm-up steps"},
    {"train.weight_decay", TR_CFG_DOUBLE, F(weight_decay), "0.1", 0, 10, 0,
     "AdamW weight decay (matrices only)"},
    {"train.grad_clip", TR_CFG_DOUBLE, F(grad_clip), "1.0", 0, 1e9, 0, "global gradient-norm clip; 0 = off"},
    {"train.precision", TR_CFG_STRING, F(precision), "bf16", TR_CFG_UNBOUNDED, 0,
     "bf16 | fp32 (the CPU backend always computes fp32)"},
    {"train.recompute", TR_CFG_INT, F(recompute), "1", 0, 2, 0,
     "activation recompute: 0 none, 1 GELU, 2 GELU+LayerNorm"},
    {"data.path", TR_CFG_STRING, F(data_path), NULL, TR_CFG_UNBOUNDED, TR_CFG_REQUIRED,
     "token file (magic TRTOKENS, u32 version 1, u32 vocab, u64 count, u64 0, u16 tokens) or any file as "
     "bytes"},
    {"data.format", TR_CFG_STRING, F(data_format), "auto", TR_CFG_UNBOUNDED, 0,
     "auto (token file if it has the magic, else bytes) | tokens | bytes"},
    {"data.val_fraction", TR_CFG_DOUBLE, F(val_fraction), "0.1", 0, 0.9, 0,
     "last fraction of the tokens held out for validation; 0 = none"},
    {"eval.every", TR_CFG_INT, F(eval_every), "50", 0, 1e12, 0,
     "validation loss every N steps and at the end; 0 = never"},
    {"eval.batches", TR_CFG_INT, F(eval_batches), "8", 1, 1 << 20, 0,
     "validation micro-batches per evaluation (at most)"},
    {"checkpoint.dir", TR_CFG_STRING, F(checkpoint_dir), NULL, TR_CFG_UNBOUNDED, 0,
     "directory for ckpt.bin; unset = no checkpoints"},
    {"checkpoint.every", TR_CFG_INT, F(checkpoint_every), "0", 0, 1e12, 0,
     "save every N steps and at the end; 0 = only at the end"},
    {"checkpoint.resume", TR_CFG_BOOL, F(checkpoint_resume), "true", TR_CFG_UNBOUNDED, 0,
     "resume from checkpoint.dir/ckpt.bin when it exists"},
    {"metrics.json", TR_CFG_STRING, F(metrics_json), NULL, TR_CFG_UNBOUNDED, 0,
     "append one JSON object per step to this file"},
    {"mfu.peak_tflops", TR_CFG_DOUBLE, F(peak_tflops), "0", 0, 1e6, 0,
     "peak TFLOP/s for MFU; 0 = from the device name (H100/H200: 989)"},
    {"mfu.measure_gemm", TR_CFG_BOOL, F(measure_gemm), "false", TR_CFG_UNBOUNDED, 0,
     "CUDA: measure the bf16 GEMM ceiling at start and report MFU against it too"},
    {"dp.mode", TR_CFG_STRING, F(dp_mode), "auto", TR_CFG_UNBOUNDED, 0,
     "data parallelism under troupe: auto (when WORLD_SIZE > 1) | on (also at 1) | off"},
    {"dp.init_timeout_ms", TR_CFG_INT, F(dp_init_timeout_ms), "600000", 1, 86400000, 0,
     "deadline for joining the group's communicator (dp.elastic: also for the group's next membership)"},
    {"dp.timeout_ms", TR_CFG_INT, F(dp_timeout_ms), "300000", 1, 86400000, 0,
     "deadline of every collective (gradients, loss, checkpoints)"},
    {"dp.grad_dtype", TR_CFG_STRING, F(dp_grad_dtype), "fp32", TR_CFG_UNBOUNDED, 0,
     "fp32 | bf16: CUDA gradient all-reduce type (the CPU collective reduces fp32)"},
    {"dp.bucket_mb", TR_CFG_INT, F(dp_bucket_mb), "25", 1, 4096, 0,
     "CUDA: gradient all-reduce bucket size (MiB)"},
    {"dp.overlap", TR_CFG_BOOL, F(dp_overlap), "true", TR_CFG_UNBOUNDED, 0,
     "CUDA: all-reduce each bucket as soon as the last micro-batch's backward has made it final "
     "(false: all buckets after backward)"},
    {"dp.zero", TR_CFG_INT, F(dp_zero), "0", 0, 1, 0,
     "ZeRO-1: 1 = each rank keeps and updates only its shard of the optimiser state (gradients "
     "reduce-scattered, weights all-gathered); 0 = every rank the whole state"},
    {"dp.elastic", TR_CFG_BOOL, F(dp_elastic), "false", TR_CFG_UNBOUNDED, 0,
     "follow the group's elastic membership (job `elastic:`): after a peer is lost, rejoin the survivors, "
     "take the state of one that completed the last step and redo the step in flight with the same global "
     "batch; grow back at a step boundary"},
    {"dp.fail_grace_ms", TR_CFG_INT, F(dp_fail_grace_ms), "2000", 0, 600000, 0,
     "after a peer's failure, wait this long before exiting so the job names that peer"},
    {"role", TR_CFG_STRING, F(role), "policy", TR_CFG_UNBOUNDED, 0,
     "policy (trains; sends refits when the job has refit.comm) | generation (takes refits, never trains)"},
    {"refit.comm", TR_CFG_STRING, F(refit_comm), "refit", TR_CFG_UNBOUNDED, 0,
     "the job's communicator across the policy and generation groups (job YAML communicators:)"},
    {"refit.transport", TR_CFG_STRING, F(refit_transport), "auto", TR_CFG_UNBOUNDED, 0,
     "auto (NCCL on a GPU, else the CPU collective) | cpu (the CPU collective always); the same on both "
     "sides"},
    {"refit.path", TR_CFG_STRING, F(refit_path), "auto", TR_CFG_UNBOUNDED, 0,
     "auto (GPU to GPU over NCCL when every rank can, else through host memory) | host | device; the same on "
     "both sides"},
    {"refit.every", TR_CFG_INT, F(refit_every), "10", 0, 1e12, 0,
     "policy: send the weights to the generation group every N steps and at the end; 0 = only at the end"},
    {"refit.timeout_ms", TR_CFG_INT, F(refit_timeout_ms), "300000", 1, 86400000, 0,
     "deadline of each refit (header, weights, the generation's evaluation and report)"},
    {"refit.wait_ms", TR_CFG_INT, F(refit_wait_ms), "3600000", 1, 86400000, 0,
     "generation: deadline of the wait for the next refit, or for the policy group to restart"},
    {0},
};

int tr_train_config_init(tr_train_config *cfg, tr_err *err)
{
    memset(cfg, 0, sizeof(*cfg));
    return tr_cfg_defaults(tr_train_config_table, cfg, err);
}

void tr_train_config_fini(tr_train_config *cfg)
{
    tr_cfg_free(tr_train_config_table, cfg);
}

static int one_of(const char *v, const char *a, const char *b, const char *c)
{
    return v != NULL && (strcmp(v, a) == 0 || strcmp(v, b) == 0 || (c != NULL && strcmp(v, c) == 0));
}

int tr_train_config_check(const tr_train_config *cfg, tr_err *err)
{
    int rv = tr_cfg_validate(tr_train_config_table, cfg, err);

    if (rv != TROUPE_OK) {
        return rv;
    }
    if (cfg->width % cfg->heads != 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "model.width %lld is not divisible by model.heads %lld", (long long)cfg->width,
                          (long long)cfg->heads);
    }
    if (!one_of(cfg->device, "auto", "cpu", "cuda")) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "device must be auto, cpu or cuda, got '%s'",
                          cfg->device ? cfg->device : "");
    }
    if (!one_of(cfg->precision, "bf16", "fp32", NULL)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "train.precision must be bf16 or fp32, got '%s'",
                          cfg->precision ? cfg->precision : "");
    }
    if (!one_of(cfg->dp_mode, "auto", "on", "off")) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "dp.mode must be auto, on or off, got '%s'",
                          cfg->dp_mode ? cfg->dp_mode : "");
    }
    if (!one_of(cfg->dp_grad_dtype, "fp32", "bf16", NULL)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "dp.grad_dtype must be fp32 or bf16, got '%s'",
                          cfg->dp_grad_dtype ? cfg->dp_grad_dtype : "");
    }
    if (!one_of(cfg->role, "policy", "generation", NULL)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "role must be policy or generation, got '%s'",
                          cfg->role ? cfg->role : "");
    }
    if (!one_of(cfg->refit_transport, "auto", "cpu", NULL)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "refit.transport must be auto or cpu, got '%s'",
                          cfg->refit_transport ? cfg->refit_transport : "");
    }
    if (!one_of(cfg->refit_path, "auto", "host", "device")) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "refit.path must be auto, host or device, got '%s'",
                          cfg->refit_path ? cfg->refit_path : "");
    }
    if (cfg->dp_elastic && cfg->dp_zero != 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "dp.elastic with dp.zero 1: a lost rank takes its shard of the optimiser state with "
                          "it; set dp.zero 0 to follow an elastic group");
    }
    if (cfg->refit_comm == NULL || cfg->refit_comm[0] == '\0') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "refit.comm must name a communicator of the job");
    }
    if (!one_of(cfg->data_format, "auto", "tokens", "bytes")) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "data.format must be auto, tokens or bytes, got '%s'",
                          cfg->data_format ? cfg->data_format : "");
    }
    return TROUPE_OK;
}
