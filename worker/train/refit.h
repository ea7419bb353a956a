/* refit.h - weight refit from the policy group to the generation group (the
 * RL pattern NeMo RL is built around): the policy trains, and every
 * refit.every steps (and once at the end) its rank 0 broadcasts the current
 * weights over the job's cross-group communicator (`communicators: [{name:
 * refit, groups: [policy, generation]}]`); the generation workers, which hold
 * the model but never train, take them and compute a validation loss on them.
 *
 * The communicator's ranks are the policy group's, then the generation
 * group's (troupe/worker.h), so policy rank 0 is the root. Every member takes
 * part in every refit, because the collective needs every rank (on the CPU
 * collective the ring relays the bytes through them); the other policy ranks
 * use the copy they receive to check that data parallelism kept their weights
 * bit-identical to rank 0's. One refit is three collectives:
 *   1. header broadcast: step, final or not, parameter count, rank 0's FNV-1a
 *      hash of the parameter bytes, the validation batch shape and the
 *      policy's rank count;
 *   2. weights broadcast: num_params values, by one of two paths (the
 *      plan, agreed once by tr_refit_check_same):
 *      - device: when every rank has a backend with the refit ops (CUDA)
 *        and a communicator with broadcast_device (NCCL), one broadcast
 *        from the root's device vector into every other rank's own device
 *        vector, no host memory on the way; bf16 (the copy the passes
 *        compute with) when every rank runs in bf16 precision, else the fp32
 *        master. The hash is tr_refit_mix_hash, computed on the device;
 *      - host: the fp32 canonical vector of get_params/set_params through
 *        host memory (the CPU backend, the CPU collective, refit.path host);
 *        the hash is FNV-1a (tr_refit_hash);
 *   3. report: every rank's status and (generation) validation loss, through
 *      the head's all-gather (tr_refit_gather) or the communicator's
 *      all-reduce, so that a rank which could not take the refit (or never
 *      came) fails every rank with its name, and policy rank 0 learns what
 *      the generation measured.
 * A generation worker waits for the next header up to refit.wait_ms (the
 * time between refits is training time); every other part has
 * refit.timeout_ms. Both sides first compare their settings
 * (tr_refit_check_same), so a mismatch fails FAILED_PRECONDITION naming the
 * setting instead of a broadcast of the wrong size.
 *
 * Threading: the thread that owns the communicator. */
#ifndef TR_TRAIN_REFIT_H
#define TR_TRAIN_REFIT_H

#include <stdint.h>

#include "backend.h"
#include "comm.h"
#include "data.h"
#include "err.h"

/* What one refit did on this rank, for the log line and the metrics. */
typedef struct tr_refit_stats {
    int64_t step;        /* the policy's optimiser step the weights are from */
    int final;           /* the last refit of the run (training ended or stopped) */
    uint64_t bytes;      /* weight bytes broadcast */
    double ms;           /* header + weights broadcast, on this rank */
    double mb_per_s;     /* bytes / ms (10^6 bytes per second) */
    uint64_t hash;       /* FNV-1a of the parameter bytes this rank holds after the refit */
    int device;          /* the weights went device to device (else through host memory) */
    tr_comm_dtype dtype; /* their type on the wire */
    double hash_ms;      /* time spent hashing on this rank (outside ms) */
    /* the whole refit on this rank but the report (and the generation's
     * evaluation): reading the weights out, hashing, the broadcasts, taking
     * and checking them; on the host path the copies through host memory */
    double total_ms;
    double val_loss;     /* generation: its validation loss on the weights (NAN: no split) */
    double eval_ms;      /* generation: time of that evaluation */
    int policy_size;     /* policy ranks (the first ranks of the communicator) */
    int generation_size; /* generation ranks */
    /* policy rank 0: the generation ranks' losses as reported (float), in
     * rank order; n_gen_losses of them (at most 16 kept). */
    double gen_val_loss[16];
    int n_gen_losses;
} tr_refit_stats;

/* tr_refit_gather exchanges a few bytes between every rank of the refit
 * communicator through the head (troupe_worker_allgather): on OK all holds
 * size x len bytes in rank order. A rank that never arrives within
 * timeout_ms fails every other one DEADLINE_EXCEEDED naming it (the head
 * knows who is missing; a ring's timeouts all fire at once and may name a
 * rank that only waited too). Used for the report when set; the
 * communicator's all-reduce otherwise. */
typedef struct tr_refit_gather {
    int (*fn)(void *user, const void *mine, size_t len, void *all, uint32_t timeout_ms, tr_err *err);
    void *user;
} tr_refit_gather;

/* tr_refit_hash is the FNV-1a hash (64-bit) of n floats' bytes. */
uint64_t tr_refit_hash(const float *p, size_t n);

/* tr_refit_mix_hash is the hash of the device path: over the bytes read as
 * little-endian 16-bit units u[i] (bytes even), the sum mod 2^64 of
 * splitmix64's finaliser of (i << 16 | u[i]) + 0x9e3779b97f4a7c15. Every
 * term depends on one unit and its position only, so a GPU computes it in
 * parallel (refit_cuda.cu); this is the reference. */
uint64_t tr_refit_mix_hash(const void *p, size_t bytes);

/* refit.path: how the weights travel (see above). */
typedef enum tr_refit_path {
    TR_REFIT_PATH_AUTO = 0,   /* device when every rank can, else host */
    TR_REFIT_PATH_HOST = 1,   /* always through host memory */
    TR_REFIT_PATH_DEVICE = 2, /* device to device; FAILED_PRECONDITION when a rank cannot */
} tr_refit_path;

/* tr_refit_parse_path maps "auto", "host", "device" (-1: anything else). */
int tr_refit_parse_path(const char *s);

/* The path every rank of the refit agreed on (tr_refit_check_same). */
typedef struct tr_refit_plan {
    int device;          /* device to device; 0: host memory */
    tr_comm_dtype dtype; /* on the device path: BF16 when every rank runs bf16, else F32 */
} tr_refit_plan;

/* One setting both sides of the refit must share (see tr_dp_setting). */
typedef struct tr_refit_settings {
    int64_t refit_every;
    int64_t path; /* tr_refit_path */
    int64_t layers, width, heads, seq_len, vocab;
    double val_fraction;
    double data_tokens, data_fingerprint;
} tr_refit_settings;

/* tr_refit_check_same compares s with policy rank 0's on every rank of the
 * refit communicator: FAILED_PRECONDITION naming the first setting that
 * differs ("refit.every is 5 on rank 2, 10 on rank 0: the refit needs ..."),
 * ABORTED on the ranks that match while another does not. Then it agrees
 * the plan (one all-reduce of what each rank's b and c can do): with
 * refit.path device and a rank that cannot, FAILED_PRECONDITION on every
 * rank saying how many can. */
int tr_refit_check_same(tr_comm *c, tr_backend *b, const tr_refit_settings *s, tr_refit_plan *plan,
                        tr_err *err);

/* tr_refit_send: a policy rank's part of one refit of b's weights after
 * step. policy_size: the policy group's rank count (the communicator's first
 * ranks). val_batch/val_batches: the shape of the policy's evaluation
 * (windows per batch, batches), so that the generation's loss is the same
 * quantity. Rank 0 sends; the others receive and check their own weights
 * against the copy (DATA_LOSS when they differ). On the device path they
 * hash their own vector first and then receive rank 0's in place over it
 * (the same bytes when data parallelism is sound, and no second copy of the
 * model on the GPU; when it is not, the DATA_LOSS ends the run). plan: from
 * tr_refit_check_same. st may be NULL. */
int tr_refit_send(tr_comm *c, const tr_refit_gather *g, tr_backend *b, const tr_refit_plan *plan,
                  int policy_size, int64_t step, int final, int val_batch, int val_batches,
                  tr_refit_stats *st, tr_err *err);

/* The generation side's working memory for evaluation. */
typedef struct tr_refit_eval {
    const tr_data *data;
    int B, T;             /* micro-batch the backend was made for, sequence length */
    int32_t *in, *tg;     /* B x T each */
    uint32_t wait_ms;     /* deadline of the wait for the next header */
    uint32_t timeout_ms;  /* deadline of every other part */
} tr_refit_eval;

/* tr_refit_recv: a generation rank's part of one refit: waits for the header
 * (ev->wait_ms), takes the weights into b, checks the hash of what b then
 * holds against rank 0's (DATA_LOSS when different), evaluates the
 * validation loss as the policy does (ev->B windows at a time, weighted) and
 * reports. st->final says the policy will send no more. */
int tr_refit_recv(tr_comm *c, const tr_refit_gather *g, tr_backend *b, const tr_refit_plan *plan,
                  const tr_refit_eval *ev, tr_refit_stats *st, tr_err *err);

/* tr_refit_eval_loss is the policy's validation loss computed by one process:
 * nb batches of Bg windows, each evaluated B windows at a time and weighted
 * by its share. NAN when nb is 0. */
int tr_refit_eval_loss(tr_backend *b, const tr_data *d, int Bg, int nb, int B, int T, int32_t *in,
                       int32_t *tg, double *val, tr_err *err);

/* tr_refit_line formats st as one "refit step=... key=value" line (text) or a
 * JSON object with "event":"refit" (json = 1); no newline. The hash is
 * params_fnv1a on the host path, params_mix64 on the device path. */
void tr_refit_line(const tr_refit_stats *st, int rank, int json, char *buf, size_t len);

#endif
