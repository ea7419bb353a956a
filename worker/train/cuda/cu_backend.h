/* cu_backend.h - the CUDA backend's state, shared by backend_cuda.cu (setup
 * and the ops table) and model_cuda.cu (forward and backward passes).
 *
 * Memory plan (llm.c's): parameters live once in canonical layout as T (bf16,
 * or float in fp32 mode, where they are also the master copy); fp32 master,
 * gradients and AdamW m, v beside them. Activations for B x T tokens are
 * allocated once at create for opts.micro_batch x cfg.seq_len; per layer we
 * keep what backward reads (LayerNorm outputs and statistics, qkv, attention
 * output and its log-sum-exp, residuals, the MLP pre-activation and its GELU),
 * and one set of scratch buffers serves every layer's backward. */
#ifndef TR_CU_BACKEND_H
#define TR_CU_BACKEND_H

#include "cu_gemm.h"
#include "cu_kernels.h"

extern "C" {
#include "backend.h"
#include "model.h"
#include "zero.h"
}

#define TR_CU_MAX_ALLOCS 1024
/* graph slots: forward only; backward adding / writing fresh (see
 * zero_elide); the same two recording the bucket events of an overlapped
 * all-reduce (the last micro-batch of a data-parallel step) */
#define TR_CU_GRAPH_SLOTS 5
#define TR_CU_GRAPH_KEY 8

typedef struct cu_layer {
    void *ln1, *qkv, *atty, *res2, *ln2, *fch, *fch_gelu, *res3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lse;
    void *att; /* reference attention only: B x NH x T x T probabilities */
} cu_layer;

typedef struct cu_backend {
    tr_backend base;
    int dev;
    cudaStream_t s;
    tr_cu_gemm_ctx *gemm;
    int bf16;     /* storage type T is bf16 (else float) */
    size_t esz;   /* sizeof(T) */
    int flash;    /* use the flash attention kernels */
    int gelu_epi; /* GELU / dGELU in the cuBLASLt epilogues */
    /* CUDA graphs of the last pass shape, one for forward-only passes and one
     * for forward+backward (index: backward), see tr_cu_pass */
    int use_graphs;
    cudaGraphExec_t graph_exec[TR_CU_GRAPH_SLOTS]; /* index: backward + fresh_dw + 2 dp_armed */
    int graph_key[TR_CU_GRAPH_SLOTS][TR_CU_GRAPH_KEY], eager_key[TR_CU_GRAPH_SLOTS][TR_CU_GRAPH_KEY];
    int have_eager_key[TR_CU_GRAPH_SLOTS];
    /* zero_grads left the tensors the weight-gradient matmuls cover (wte and
     * the four per-layer matrices) unzeroed: the next backward writes them
     * with beta = 0 instead of accumulating, which saves a 0.5 GB memset per
     * optimizer step at 124M. Anything that reads the gradients before that
     * backward zeroes them first (tr_cu_flush_zero). TR_CUDA_ZERO_ELIDE=0
     * turns it off. */
    int zero_elide, zero_pending, fresh_dw;
    size_t offs[TR_NUM_PARAM_TENSORS + 1];
    void *params; /* T, canonical layout; == master in fp32 mode */
    float *master, *grads, *m, *v;
    cu_layer *layers;
    void *encoded, *lnf, *logits;
    float *lnf_mean, *lnf_rstd, *losses, *loss_dev;
    /* backward scratch */
    void *dres, *dbtc, *dbt4c, *dqkv, *proj, *gelu_tmp, *att_scratch;
    float *dsum, *norm_partial, *norm_dev;
    int32_t *d_inputs, *d_targets;
    int32_t *h_inputs, *h_targets; /* pinned staging */
    float *h_scalar;               /* pinned */
    size_t cap_bt;
    cudaEvent_t ev[5]; /* fwd start, fwd end = bwd start, bwd end, opt start, opt end */
    /* data parallelism (dp_cuda.cu), created on first use */
    cudaStream_t comm_s;
    cudaEvent_t ev_grads, ev_reduced;
    void *comm_bf16; /* bf16 staging of the gradients (dp.grad_dtype bf16) */
    /* overlap (dp.overlap): allreduce_start arms the next backward, which
     * records ev_layer[l] once block l's backward is done (every gradient
     * of layer l is then final) and ev_layer[L] at its end (wte, wpe, lnf);
     * right after launching it the host queues each bucket on comm_s behind
     * its event (dp_issued), and allreduce_grads only waits. */
    tr_comm *dp_comm;
    int dp_armed, dp_issued;
    cudaEvent_t *ev_layer; /* L + 1 */
    /* The bucket plan (dp_cuda.cu, built at create): the slices of the flat
     * gradient vector in the order they are reduced, bucket b being slices
     * [plan_first[b], plan_first[b+1]) queued behind ev_layer[plan_ev[b]]. */
    tr_zero_range *plan_sl;
    int plan_nsl, plan_nb;
    int *plan_first, *plan_ev;
    /* ZeRO-1 (opts.dp_zero, dp_cuda.cu): zmap's ranges are the plan's
     * slices; m and v hold zmap.shard elements, zruns_dev is the runs table
     * for the kernels; zcomm is the communicator of this step's
     * allreduce_grads, which the norm and the update use. */
    tr_zero_map zmap;
    void *zruns_dev;
    tr_comm *zcomm;
    /* in bf16 precision only the bf16 copy is all-gathered after a step:
     * the master is then current on this rank's shard only, until
     * tr_cu_zero_gather_master (get_params and the refit refuse it) */
    int master_stale;
    cudaEvent_t ev_updated, ev_gathered;
    int have_fb, have_opt;
    unsigned long long *refit_hash_dev; /* refit_cuda.cu's hash, allocated on first use */
    /* allocation tally, and every device allocation for destroy */
    void *allocs[TR_CU_MAX_ALLOCS];
    int nallocs;
    uint64_t in_use, peak;
} cu_backend;

/* tr_cu_alloc allocates bytes of device memory, records it for destroy and
 * counts it in the tally. */
int tr_cu_alloc(cu_backend *cb, void **p, size_t bytes, tr_err *err);

/* tr_cu_pass runs forward (and, with dloss != 0, backward into the
 * gradients) for B x Tn tokens already on the device; the mean loss is left
 * in cb->loss_dev. */
int tr_cu_pass(cu_backend *cb, int B, int Tn, float dloss, int backward, tr_err *err);

/* tr_cu_allreduce_grads averages the gradients over c's ranks in buckets on
 * the communication stream (dp_cuda.cu); tr_cu_dp_destroy frees its stream
 * and events. */
int tr_cu_allreduce_grads(cu_backend *cb, tr_comm *c, tr_err *err);
void tr_cu_dp_destroy(cu_backend *cb);

/* tr_cu_allreduce_start arms the next backward for overlap (dp.overlap;
 * a no-op when it is off); tr_cu_dp_issue queues the buckets behind the
 * events of the armed backward just launched; tr_cu_record records ev on the
 * compute stream, also while a graph is being captured. */
int tr_cu_allreduce_start(cu_backend *cb, tr_comm *c, tr_err *err);
int tr_cu_dp_issue(cu_backend *cb, tr_err *err);
cudaError_t tr_cu_record(cu_backend *cb, cudaEvent_t ev);

/* ZeRO-1 (dp_cuda.cu). tr_cu_dp_plan builds the bucket plan and, with
 * opts.dp_zero, the shard map (before alloc_params sizes m and v);
 * tr_cu_zero_alloc allocates the shard's device buffers. tr_cu_zero_norm
 * and tr_cu_zero_adamw are grad_norm and the AdamW step (args a) of a
 * sharded rank; the get/set/gather_opt_state ops of backend.h likewise. */
int tr_cu_dp_plan(cu_backend *cb, tr_err *err);
int tr_cu_zero_alloc(cu_backend *cb, tr_err *err);
int tr_cu_zero_norm(cu_backend *cb, float *norm, tr_err *err);
int tr_cu_zero_adamw(cu_backend *cb, const tr_cu_adamw_args *a, tr_err *err);
int tr_cu_zero_get_opt(cu_backend *cb, float *m, float *v, tr_err *err);
int tr_cu_zero_set_opt(cu_backend *cb, const float *m, const float *v, tr_err *err);
int tr_cu_zero_gather_opt(cu_backend *cb, tr_comm *c, float *m, float *v, tr_err *err);
int tr_cu_zero_gather_master(cu_backend *cb, tr_comm *c, tr_err *err);
/* tr_cu_master_current: FAILED_PRECONDITION naming what when the master is
 * stale (master_stale). */
int tr_cu_master_current(const cu_backend *cb, const char *what, tr_err *err);

/* tr_cu_dw_tensor: parameter tensor i's gradient is written whole by a
 * weight-gradient matmul, the first thing of a backward to touch it. */
int tr_cu_dw_tensor(int i);

/* The refit ops of backend.h (refit_cuda.cu). */
int tr_cu_refit_params(tr_backend *b, tr_comm_dtype dtype, void **dev, tr_err *err);
int tr_cu_refit_taken(tr_backend *b, tr_comm_dtype dtype, tr_err *err);
int tr_cu_refit_hash(tr_backend *b, tr_comm_dtype dtype, uint64_t *hash, tr_err *err);

#endif
