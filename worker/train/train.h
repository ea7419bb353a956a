/* train.h - the training loop of troupe-train, as a library.
 *
 * The worker runtime (and main.c) fills a tr_train_config, usually from YAML
 * through tr_train_config_load, and calls tr_train_run, which owns the backend,
 * data, schedule, checkpoints and evaluation, and reports every optimiser step
 * through a callback. Everything runs on the calling thread.
 *
 * Config keys (YAML, dotted; defaults < file < TROUPE_TRAIN_* env < flags):
 *   seed                   run seed: init, batch order (default 1337)
 *   device                 auto | cpu | cuda (default auto: cuda when built and present)
 *   gpu                    CUDA device ordinal (default 0)
 *   model.layers           L (default 2)
 *   model.width            C, divisible by heads (default 64)
 *   model.heads            NH (default 4)
 *   model.seq_len          T, tokens per sequence (default 64)
 *   model.vocab            0 = the data's vocab, else at least the data's (default 0)
 *   train.steps            optimiser steps (default 100)
 *   train.micro_batch      B, sequences per forward/backward (default 4)
 *   train.accum_steps      micro-batches per step; loss_scale = 1/accum (default 1)
 *   train.lr               peak learning rate (default 1e-3)
 *   train.min_lr_fraction  cosine decays to lr * this (default 0.1)
 *   train.warmup_steps     linear warm-up steps (default 10)
 *   train.weight_decay     AdamW decay on matrices only (default 0.1)
 *   train.grad_clip        global-norm clip, 0 = off (default 1.0)
 *   train.precision        bf16 | fp32 (default bf16; the CPU computes fp32)
 *   train.recompute        0 none, 1 GELU, 2 GELU+LayerNorm (default 1)
 *   data.path              token file or any file read as bytes (required)
 *   data.format            auto | tokens | bytes (default auto; see data.h)
 *   data.val_fraction      held-out tail for validation, 0 = none (default 0.1)
 *   eval.every             validation every N steps and at the end, 0 = never (default 50)
 *   eval.batches           validation micro-batches per evaluation, at most (default 8)
 *   checkpoint.dir         where ckpt.bin is written; unset = no checkpoints
 *   checkpoint.every       save every N steps (and at the end), 0 = only at the end (default 0)
 *   checkpoint.resume      resume from checkpoint.dir/ckpt.bin when present (default true)
 *   metrics.json           file to append one JSON object per step to (optional)
 *   mfu.peak_tflops        peak for MFU; 0 = from the device name table (default 0)
 *   mfu.measure_gemm       CUDA: time a bf16 GEMM at start and also report MFU
 *                          against that measured ceiling (default false)
 *   dp.mode                auto | on | off: data parallelism under troupe; auto = when
 *                          WORLD_SIZE > 1, on = also at world size 1 (to measure the
 *                          path), off = every rank trains alone (default auto)
 *   dp.init_timeout_ms     deadline for joining the group's communicator (dp.elastic: also for
 *                          the group's next membership) (default 600000)
 *   dp.timeout_ms          deadline of every collective (default 300000)
 *   dp.grad_dtype          fp32 | bf16: gradient all-reduce type on CUDA (default fp32;
 *                          the CPU collective always reduces fp32)
 *   dp.bucket_mb           CUDA: gradient all-reduce bucket size in MiB (default 25)
 *   dp.overlap             CUDA: start each bucket's all-reduce as soon as the last
 *                          micro-batch's backward has made it final (default true;
 *                          false: every bucket after backward)
 *   dp.zero                0 | 1: ZeRO-1, each rank keeps only its shard of AdamW's m and
 *                          v and updates only that shard of the weights; the gradients
 *                          are reduce-scattered and the weights (CUDA: the bf16 copy)
 *                          all-gathered after the update. Checkpoints hold the whole
 *                          state either way (default 0)
 *   dp.elastic             follow the group's elastic membership (the job's `elastic:`):
 *                          when a collective fails because a peer is gone, rejoin the
 *                          survivors in the head's new epoch, take the model and optimiser
 *                          state of a rank that completed the last step, and redo the step
 *                          in flight; a grown membership is joined at a step boundary. The
 *                          global batch stays that of the starting world size (each rank's
 *                          share recomputed; a size that does not divide it is refused);
 *                          not with dp.zero 1 (default false)
 *   dp.fail_grace_ms       after a collective fails because of a peer, wait this long
 *                          before exiting so the peer's own end reaches the head first
 *                          and the job names it (default 2000)
 *   role                   policy | generation (default policy; flag --role): a generation
 *                          worker holds the model and takes the policy's weights, never trains
 *   refit.comm             the job's communicator across policy and generation (default refit)
 *   refit.every            policy: send the weights every N steps, and always at the end;
 *                          0 = only at the end; both sides must agree (default 10)
 *   refit.transport        auto (NCCL when the worker runs on a GPU, else the CPU
 *                          collective) | cpu (always the CPU collective: GPU and CPU
 *                          workers mixed, or several workers on one GPU); both sides
 *                          must choose the same (default auto)
 *   refit.path             how the weights travel: auto (device to device when every
 *                          rank has the CUDA backend and an NCCL communicator, else
 *                          through host memory) | host | device (fails when a rank
 *                          cannot); the same on both sides (default auto)
 *   refit.timeout_ms       deadline of each refit's collectives (default 300000)
 *   refit.wait_ms          generation: deadline of the wait for the policy's next refit,
 *                          and for the policy group to come back after a restart (default 3600000)
 *
 * Data parallelism (cfg.comm set): rank r of N reads sequences [r*B, (r+1)*B)
 * of each global micro-batch of N*B sequences drawn from the one sampler every
 * rank advances alike, gradients are averaged over the ranks before the
 * global norm is taken, and the loss and validation loss are those of the
 * global batch: the curve of one process with micro_batch N*B. Rank 0 writes
 * the model checkpoint, every rank its data position (data-rank-R.pos). */
#ifndef TR_TRAIN_TRAIN_H
#define TR_TRAIN_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "backend.h"
#include "config.h"
#include "err.h"

/* Factory of a backend, so that the core library need not link CUDA. */
typedef int (*tr_backend_create_fn)(const tr_model_config *cfg, const tr_backend_opts *opts, tr_backend **out,
                                    tr_err *err);

struct tr_refit_stats;
struct tr_refit_gather;

typedef struct tr_train_config {
    /* Settings from the table (tr_train_config_table); strings are owned. */
    int64_t seed;
    char *device;
    int64_t gpu;
    int64_t layers, width, heads, seq_len, vocab;
    int64_t steps, micro_batch, accum_steps, warmup_steps, recompute;
    double lr, min_lr_fraction, weight_decay, grad_clip;
    char *precision;
    char *data_path, *data_format;
    double val_fraction;
    int64_t eval_every, eval_batches;
    char *checkpoint_dir;
    int64_t checkpoint_every;
    int checkpoint_resume;
    char *metrics_json;
    double peak_tflops;
    int measure_gemm;
    char *dp_mode, *dp_grad_dtype;
    int64_t dp_init_timeout_ms, dp_timeout_ms, dp_bucket_mb, dp_fail_grace_ms;
    char *role;       /* policy | generation */
    char *refit_comm; /* the job's communicator the refit uses */
    char *refit_transport; /* auto | cpu */
    char *refit_path;      /* auto | host | device */
    int64_t refit_every, refit_timeout_ms, refit_wait_ms;
    int dp_overlap;
    int64_t dp_zero;
    int dp_elastic;
    /* Not in the table: set by the program. */
    tr_comm *comm;                    /* data parallelism over this communicator; NULL = alone */
    /* refit, when set: send the weights to the generation group over it
     * every refit_every steps and at the end (refit.h); on_refit, when set,
     * gets each refit's figures (borrowed for the call). */
    tr_comm *refit;
    const struct tr_refit_gather *refit_gather; /* the report through the head; NULL: all-reduce */
    void (*on_refit)(const struct tr_refit_stats *st, int rank, void *user);
    void *on_refit_user;
    /* Elastic data parallelism (dp.elastic; both set by the program, or
     * both NULL). rejoin, after comm failed or membership_moved said so:
     * drops *comm without waiting on its peers, waits for the group's next
     * membership and joins its communicator into *comm (its error ends the
     * run). membership_moved: at a step boundary, the group's membership is
     * newer than comm's (a replacement joined). */
    int (*rejoin)(void *user, tr_comm **comm, tr_err *err);
    int (*membership_moved)(void *user);
    void *elastic_user;
    int placed_size; /* the ranks the group was placed with (WORLD_SIZE); 0: comm's size */
    tr_backend_create_fn create_cuda; /* NULL when built without CUDA */
    /* device_name, when set, names the device the backend runs on ("NVIDIA
     * H200"), for the MFU peak table; NULL on CPU. */
    const char *(*device_name)(int ordinal);
    /* gemm_ceiling, when set, measures the device's bf16 GEMM rate in
     * TFLOP/s (used when mfu.measure_gemm is on); NULL on CPU. */
    int (*gemm_ceiling)(int ordinal, double *tflops, tr_err *err);
} tr_train_config;

/* tr_train_config_table is the descriptor table behind the keys above. */
extern const tr_cfg_desc tr_train_config_table[];

/* tr_train_config_init zeroes cfg and applies the defaults. */
int tr_train_config_init(tr_train_config *cfg, tr_err *err);

/* tr_train_config_check validates what the table's bounds cannot (enumerated
 * strings, width % heads, required data.path); messages name the key. */
int tr_train_config_check(const tr_train_config *cfg, tr_err *err);

/* tr_train_config_fini frees cfg's strings. */
void tr_train_config_fini(tr_train_config *cfg);

/* One optimiser step's figures. Times in ms; NAN where not measured. */
typedef struct tr_train_metrics {
    int64_t step;     /* 1-based number of the step just finished */
    int64_t steps;    /* train.steps */
    double loss;      /* mean training loss over the step's micro-batches */
    double val_loss;  /* NAN unless evaluated after this step */
    double grad_norm; /* before clipping */
    double lr;
    double step_ms;
    double tokens_per_s;
    double mfu;      /* fraction of peak; NAN when the peak is unknown (CPU) */
    double mfu_gemm; /* fraction of the measured GEMM ceiling; NAN unless measured */
    int64_t tokens;  /* tokens processed this step */
    tr_mem_stats mem;
    tr_phase_times phase;
    const char *backend; /* "cpu", "cuda" */
} tr_train_metrics;

/* tr_train_on_step receives each step's metrics (borrowed for the call);
 * returning non-zero stops training after the step (tr_train_run then
 * returns CANCELLED). */
typedef int (*tr_train_on_step)(const tr_train_metrics *m, void *user);

/* tr_train_run trains as cfg says, resuming from a checkpoint when one
 * exists, and returns OK after train.steps steps. cb may be NULL. */
int tr_train_run(const tr_train_config *cfg, tr_train_on_step cb, void *user, tr_err *err);

/* tr_train_lr is the schedule: linear warm-up to lr over warmup_steps, then
 * cosine decay to lr * min_lr_fraction at the last step. step is 0-based. */
double tr_train_lr(const tr_train_config *cfg, int64_t step);

/* tr_train_peak_flops returns the dense bf16 peak for a device name
 * (H100/H200 SXM: 989e12), or 0 when the name is unknown or NULL. */
double tr_train_peak_flops(const char *device_name);

/* tr_train_metrics_line formats m as one "key=value ..." line (no newline). */
void tr_train_metrics_line(const tr_train_metrics *m, char *buf, size_t len);

/* tr_train_metrics_json formats m as one JSON object (no newline). */
void tr_train_metrics_json(const tr_train_metrics *m, char *buf, size_t len);

#endif
