/* backend.h - the GPU boundary of troupe-train.
 *
 * The training loop (data, schedule, checkpoints, metrics, config) is written
 * once against this table of operations; a CPU backend (plain C, fp32) and a
 * CUDA backend (bf16, cuBLASLt, fused kernels) implement it. CI has no GPU, so
 * everything above this line is tested through the CPU backend.
 *
 * Model: GPT-2 style decoder (token + position embeddings, pre-norm blocks of
 * LayerNorm -> causal multi-head attention -> residual, LayerNorm -> GELU MLP ->
 * residual, final LayerNorm, output head tied to the token embedding,
 * cross-entropy loss). Parameters have one canonical fp32 layout, shared by every
 * backend and by checkpoints, in this order (L layers, C width, Vp padded vocab,
 * T max sequence length; matrices are [out][in], row-major):
 *
 *   wte[Vp*C] wpe[T*C] ln1w[L*C] ln1b[L*C] qkvw[L*3C*C] qkvb[L*3C]
 *   attprojw[L*C*C] attprojb[L*C] ln2w[L*C] ln2b[L*C] fcw[L*4C*C] fcb[L*4C]
 *   fcprojw[L*C*4C] fcprojb[L*C] lnfw[C] lnfb[C]
 *
 * Rows of wte at index >= vocab are padding: they stay zero and their logits
 * never enter the loss.
 *
 * Threading: a backend object is used by one thread at a time. */
#ifndef TR_TRAIN_BACKEND_H
#define TR_TRAIN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "err.h"

#define TR_NUM_PARAM_TENSORS 16

typedef struct tr_model_config {
    int layers;       /* L */
    int width;        /* C, divisible by heads */
    int heads;        /* NH */
    int seq_len;      /* T, the maximum sequence length */
    int vocab;        /* V, real vocabulary size */
    int padded_vocab; /* Vp, V rounded up to a multiple of 128 */
} tr_model_config;

typedef enum tr_precision {
    TR_PRECISION_BF16 = 0, /* bf16 params/activations, fp32 master weights and optimiser */
    TR_PRECISION_FP32 = 1, /* everything fp32: for checking against the CPU path */
} tr_precision;

typedef struct tr_backend_opts {
    int micro_batch; /* B: sequences per forward/backward call */
    tr_precision precision;
    int recompute; /* 0 none, 1 recompute GELU activations in backward, 2 also LayerNorm */
    int device;    /* GPU ordinal for CUDA backends */
    /* data parallelism (allreduce_grads) on GPU backends */
    size_t dp_bucket_bytes; /* all-reduce bucket size (dp.bucket_mb) */
    int dp_grad_bf16;       /* reduce the gradients as bf16 (dp.grad_dtype) */
    int dp_overlap;         /* start buckets during the last backward (dp.overlap; allreduce_start) */
    /* ZeRO-1 (dp.zero): with dp_zero 1 the backend is rank dp_rank of
     * dp_size and holds AdamW's m and v only for its shard (zero.h);
     * allreduce_grads then reduce-scatters, grad_norm and adamw_update become
     * collective over the communicator allreduce_grads was given (the norm
     * summed over the shards, the update of the shard followed by the
     * all-gather of the weights), get_opt_state/set_opt_state copy only this
     * rank's runs of the canonical vectors (other entries are left as they
     * are / ignored) and gather_opt_state assembles the whole state. */
    int dp_zero;
    int dp_rank, dp_size;
} tr_backend_opts;

typedef struct tr_adamw {
    float lr;
    float beta1;        /* 0.9 */
    float beta2;        /* 0.95 */
    float eps;          /* 1e-8 */
    float weight_decay; /* applied to matrices (2-D tensors) only */
    float grad_scale;   /* multiply gradients by this first (clipping: min(1, clip/norm)) */
    int64_t t;          /* 1-based optimiser step, for bias correction */
} tr_adamw;

typedef struct tr_mem_stats {
    uint64_t in_use_bytes; /* device (or host) memory held by the backend now */
    uint64_t peak_bytes;
    uint64_t total_bytes; /* device capacity; 0 for CPU */
} tr_mem_stats;

/* Phase timings of the last step, in milliseconds (CUDA events on the GPU).
 * last_forward_ms/last_backward_ms are those of the last forward_backward
 * call alone: it returns when its work is done (the loss is read back), so
 * its backward ended when it returned and the trace can place both phases
 * on the host clock (train.c, trace_phases). */
typedef struct tr_phase_times {
    double forward_ms;
    double backward_ms;
    double optimizer_ms;
    double last_forward_ms;
    double last_backward_ms;
} tr_phase_times;

typedef struct tr_backend tr_backend;

typedef struct tr_backend_ops {
    const char *name; /* "cpu", "cuda" */
    /* Sizes of the 16 tensors, in the order above. */
    void (*destroy)(tr_backend *b);
    /* set_params/get_params copy the whole fp32 canonical vector (num_params). */
    int (*set_params)(tr_backend *b, const float *params, tr_err *err);
    int (*get_params)(tr_backend *b, float *params, tr_err *err);
    /* zero_grads clears the gradient accumulators. */
    int (*zero_grads)(tr_backend *b, tr_err *err);
    /* forward_backward runs one micro-batch of B x T tokens (T <= seq_len; int32
     * ids < vocab), adds d(loss * loss_scale)/d(params) into the gradients, and
     * returns the mean cross-entropy of the micro-batch in *loss.
     * With loss_scale = 1/accum_steps the accumulated gradient is the mean. */
    int (*forward_backward)(tr_backend *b, const int32_t *inputs, const int32_t *targets, int B, int T,
                            float loss_scale, float *loss, tr_err *err);
    /* forward_loss evaluates the mean loss without touching gradients. */
    int (*forward_loss)(tr_backend *b, const int32_t *inputs, const int32_t *targets, int B, int T,
                        float *loss, tr_err *err);
    /* grad_norm returns the global L2 norm of the accumulated gradients. */
    int (*grad_norm)(tr_backend *b, float *norm, tr_err *err);
    /* get_grads copies the fp32 gradients in canonical layout (for tests). */
    int (*get_grads)(tr_backend *b, float *grads, tr_err *err);
    /* adamw_update applies one AdamW step to every parameter. */
    int (*adamw_update)(tr_backend *b, const tr_adamw *opt, tr_err *err);
    /* get_opt_state/set_opt_state copy AdamW m and v (fp32, canonical layout,
     * num_params each), for checkpoints. */
    int (*get_opt_state)(tr_backend *b, float *m, float *v, tr_err *err);
    int (*set_opt_state)(tr_backend *b, const float *m, const float *v, tr_err *err);
    void (*mem_stats)(tr_backend *b, tr_mem_stats *out);
    void (*phase_times)(tr_backend *b, tr_phase_times *out);
    /* sync waits for queued device work (no-op on CPU). */
    int (*sync)(tr_backend *b, tr_err *err);
    /* allreduce_grads replaces the accumulated gradients with their mean
     * over c's ranks (data parallelism; called once per optimiser step,
     * after the last micro-batch). Last in the table so that positional
     * initialisers of older backends stay valid. */
    int (*allreduce_grads)(tr_backend *b, tr_comm *c, tr_err *err);
    /* allreduce_start (optional, NULL: not offered) is called before the
     * forward_backward of a step's last micro-batch: a backend may then
     * start all-reducing each bucket of gradients over c as soon as that
     * backward has made it final, so communication runs behind the rest of
     * backward; allreduce_grads, called as before, then only finishes and
     * waits. A backend may also ignore it (opts.dp_overlap 0). */
    int (*allreduce_start)(tr_backend *b, tr_comm *c, tr_err *err);
    /* The refit from device memory (refit.h), all optional (NULL: the
     * backend's weights reach the refit only through get_params/set_params).
     * refit_params waits for queued work and sets *dev to the backend's own
     * device vector of the num_params weights in dtype: the fp32 master
     * (TR_COMM_F32) or the bf16 copy the passes compute with (TR_COMM_BF16,
     * FAILED_PRECONDITION in fp32 precision; *dev is NULL on any failure);
     * it lives as long as b, and a collective may read it or write it in
     * place. refit_taken says that vector was overwritten: the backend
     * refreshes its other copy from it (bf16 from fp32, or fp32 widened from
     * bf16). refit_hash sets *hash to tr_refit_mix_hash of that vector's
     * bytes, computed on the device. */
    int (*refit_params)(tr_backend *b, tr_comm_dtype dtype, void **dev, tr_err *err);
    int (*refit_taken)(tr_backend *b, tr_comm_dtype dtype, tr_err *err);
    int (*refit_hash)(tr_backend *b, tr_comm_dtype dtype, uint64_t *hash, tr_err *err);
    /* gather_opt_state (collective over c; required when the backend
     * accepts opts.dp_zero) fills m and v (host, num_params each, canonical
     * layout) with the whole AdamW state on every rank, for a checkpoint. */
    int (*gather_opt_state)(tr_backend *b, tr_comm *c, float *m, float *v, tr_err *err);
    /* gather_params (optional, collective over c; NULL: every rank always
     * holds its whole fp32 master): with dp.zero 1 a backend may all-gather
     * only the copy the passes compute with (bf16) after each step, leaving
     * the fp32 master current on the rank's shard only; this makes the
     * whole master current again, for get_params and the refit (which
     * refuse a stale master with FAILED_PRECONDITION). */
    int (*gather_params)(tr_backend *b, tr_comm *c, tr_err *err);
} tr_backend_ops;

/* Every backend struct starts with this header. */
struct tr_backend {
    const tr_backend_ops *ops;
    tr_model_config cfg;
    tr_backend_opts opts;
    size_t param_sizes[TR_NUM_PARAM_TENSORS];
    size_t num_params;
};

/* tr_model_param_sizes fills sizes[16] and returns the total parameter count. */
size_t tr_model_param_sizes(const tr_model_config *cfg, size_t sizes[TR_NUM_PARAM_TENSORS]);

/* tr_model_param_is_matrix says whether tensor i gets weight decay (wte, wpe,
 * qkvw, attprojw, fcw, fcprojw). */
int tr_model_param_is_matrix(int i);

/* tr_backend_cpu_create makes the plain-C fp32 backend; *out is set on success.
 * Free with b->ops->destroy(b). */
int tr_backend_cpu_create(const tr_model_config *cfg, const tr_backend_opts *opts, tr_backend **out,
                          tr_err *err);

/* tr_backend_cuda_create makes the CUDA backend (only in builds with CUDA; the
 * function is absent otherwise and TR_HAVE_CUDA is undefined). Returns
 * UNAVAILABLE when no device is present. */
int tr_backend_cuda_create(const tr_model_config *cfg, const tr_backend_opts *opts, tr_backend **out,
                           tr_err *err);

#endif
