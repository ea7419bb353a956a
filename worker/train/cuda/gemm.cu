/* gemm.cu - cuBLASLt matmuls with a per-shape plan cache, and the measured
 * GEMM ceiling exported through train_cuda.h. */
#include <cublas_v2.h>
#include <string.h>

#include "cu_gemm.h"
#include "cu_kernels.h"

extern "C" {
#include "train_cuda.h"
}

#define TR_GEMM_WORKSPACE (64u << 20)
#define TR_GEMM_CACHE 64
#define TR_GEMM_CANDIDATES 8

/* TR_LT_TRY checks a cuBLAS(Lt) call, logs file:line and cuBLAS's own
 * message, and jumps to `out`. */
#define TR_LT_TRY(call)                                                                                      \
    do {                                                                                                     \
        cublasStatus_t tr_s_ = (call);                                                                       \
        if (tr_s_ != CUBLAS_STATUS_SUCCESS) {                                                                \
            rv = tr_err_set(                                                                                 \
                err, tr_s_ == CUBLAS_STATUS_ALLOC_FAILED ? TROUPE_RESOURCE_EXHAUSTED : TROUPE_INTERNAL,      \
                "%s:%d: %s: %s", __FILE__, __LINE__, #call, cublasGetStatusString(tr_s_));                   \
            TR_LOG(TR_LOG_ERR, "cublas error: %s", err != NULL ? err->msg : #call);                          \
            goto out;                                                                                        \
        }                                                                                                    \
    } while (0)

typedef struct gemm_plan {
    int used;
    int m, n, k, ta, tb, has_bias, epilogue;
    cudaDataType_t ab_type, d_type;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

struct tr_cu_gemm_ctx {
    cublasLtHandle_t lt;
    cudaStream_t s;
    void *ws;
    gemm_plan plans[TR_GEMM_CACHE];
    int next; /* round-robin slot to reuse when the cache is full */
};

static void plan_free(gemm_plan *p)
{
    if (p->used) {
        cublasLtMatmulDescDestroy(p->desc);
        cublasLtMatrixLayoutDestroy(p->la);
        cublasLtMatrixLayoutDestroy(p->lb);
        cublasLtMatrixLayoutDestroy(p->ld);
    }
    memset(p, 0, sizeof(*p));
}

int tr_cu_gemm_create(tr_cu_gemm_ctx **out, cudaStream_t s, tr_err *err)
{
    int rv = TROUPE_OK;
    tr_cu_gemm_ctx *g = (tr_cu_gemm_ctx *)calloc(1, sizeof(*g));
    *out = NULL;
    if (g == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of host memory for the GEMM context");
    }
    g->s = s;
    TR_LT_TRY(cublasLtCreate(&g->lt));
    TR_CU_TRY(cudaMalloc(&g->ws, TR_GEMM_WORKSPACE));
    *out = g;
    g = NULL;
out:
    tr_cu_gemm_destroy(g);
    return rv;
}

void tr_cu_gemm_destroy(tr_cu_gemm_ctx *g)
{
    if (g == NULL) {
        return;
    }
    for (int i = 0; i < TR_GEMM_CACHE; i++) {
        plan_free(&g->plans[i]);
    }
    if (g->ws != NULL) {
        cudaFree(g->ws);
    }
    if (g->lt != NULL) {
        cublasLtDestroy(g->lt);
    }
    free(g);
}

size_t tr_cu_gemm_device_bytes(const tr_cu_gemm_ctx *g)
{
    return g != NULL ? TR_GEMM_WORKSPACE : 0;
}

static int plan_matches(const gemm_plan *p, const tr_cu_gemm_args *a)
{
    return p->used && p->m == a->m && p->n == a->n && p->k == a->k && p->ta == a->ta && p->tb == a->tb &&
           p->has_bias == (a->bias != NULL) && p->ab_type == a->ab_type && p->d_type == a->d_type &&
           p->epilogue == a->epilogue;
}

static int set_pointers(gemm_plan *p, const tr_cu_gemm_args *a, tr_err *err)
{
    int rv = TROUPE_OK;
    if (a->bias != NULL) {
        TR_LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &a->bias,
                                                 sizeof(a->bias)));
    }
    if (a->epilogue != TR_CU_EPI_NONE) {
        TR_LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &a->aux,
                                                 sizeof(a->aux)));
    }
out:
    return rv;
}

/* plan_tune times each candidate algorithm (one warm-up, then three runs
 * between events) on the real inputs, writing a scratch D so that an
 * accumulating product leaves the real one untouched (the forward GELU
 * epilogue rewrites its aux, which the real call then writes again), and
 * keeps the fastest. Candidates that fail to run are skipped. */
static int plan_tune(tr_cu_gemm_ctx *g, gemm_plan *p, const tr_cu_gemm_args *a,
                     const cublasLtMatmulHeuristicResult_t *res, int found, tr_err *err)
{
    int rv = TROUPE_OK;
    void *scratch = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float best = 1e30f, one = 1.0f, beta = a->accumulate ? 1.0f : 0.0f;
    size_t dbytes = (size_t)a->m * a->n * (a->d_type == CUDA_R_32F ? 4 : 2);
    if (cudaMalloc(&scratch, dbytes) != cudaSuccess) { /* no room to tune: keep the heuristic's pick */
        cudaGetLastError();
        scratch = NULL;
        goto out;
    }
    TR_CU_TRY(cudaMemsetAsync(scratch, 0, dbytes, g->s));
    TR_CU_TRY(cudaEventCreate(&e0));
    TR_CU_TRY(cudaEventCreate(&e1));
    TR_TRY(set_pointers(p, a, err));
    for (int i = 0; i < found; i++) {
        float ms = 0.0f;
        cublasStatus_t st =
            cublasLtMatmul(g->lt, p->desc, &one, a->a, p->la, a->b, p->lb, &beta, scratch, p->ld, scratch,
                           p->ld, &res[i].algo, g->ws, TR_GEMM_WORKSPACE, g->s);
        if (st != CUBLAS_STATUS_SUCCESS) {
            continue;
        }
        TR_CU_TRY(cudaEventRecord(e0, g->s));
        for (int r = 0; r < 3; r++) {
            cublasLtMatmul(g->lt, p->desc, &one, a->a, p->la, a->b, p->lb, &beta, scratch, p->ld, scratch,
                           p->ld, &res[i].algo, g->ws, TR_GEMM_WORKSPACE, g->s);
        }
        TR_CU_TRY(cudaEventRecord(e1, g->s));
        TR_CU_TRY(cudaEventSynchronize(e1));
        TR_CU_TRY(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < best) {
            best = ms;
            p->algo = res[i].algo;
        }
    }
    TR_LOG(TR_LOG_DEBUG, "gemm plan m=%d n=%d k=%d ta=%d tb=%d epi=%d: %d candidates, best %.3f ms", a->m,
           a->n, a->k, a->ta, a->tb, a->epilogue, found, best / 3);
out:
    if (e0 != NULL) {
        cudaEventDestroy(e0);
    }
    if (e1 != NULL) {
        cudaEventDestroy(e1);
    }
    if (scratch != NULL) {
        cudaStreamSynchronize(g->s);
        cudaFree(scratch);
    }
    return rv;
}

/* plan_build fills p with descriptors for a's shape and asks the heuristic for
 * the best algorithm under our workspace and 16-byte pointer alignment. */
static int plan_build(tr_cu_gemm_ctx *g, gemm_plan *p, const tr_cu_gemm_args *a, tr_err *err)
{
    int rv = TROUPE_OK, found = 0;
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t opa = a->ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = a->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = a->bias != NULL ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (a->epilogue == TR_CU_EPI_GELU_AUX) {
        epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    } else if (a->epilogue == TR_CU_EPI_DGELU) {
        epi = CUBLASLT_EPILOGUE_DGELU;
    }
    int64_t aux_ld = a->m;
    cublasLtMatmulHeuristicResult_t res[TR_GEMM_CANDIDATES];
    uint64_t wsb = TR_GEMM_WORKSPACE;
    uint32_t align = 16;
    plan_free(p);
    p->m = a->m, p->n = a->n, p->k = a->k, p->ta = a->ta, p->tb = a->tb, p->has_bias = a->bias != NULL;
    p->ab_type = a->ab_type, p->d_type = a->d_type, p->epilogue = a->epilogue;
    TR_LT_TRY(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    p->used = 1; /* from here plan_free owns whatever was made */
    TR_LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
    TR_LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
    TR_LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (a->bias != NULL) {
        cudaDataType_t bt = a->d_type;
        TR_LT_TRY(
            cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    }
    if (a->epilogue != TR_CU_EPI_NONE) {
        TR_LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                 sizeof(aux_ld)));
        /* the heuristic reads the pointer's alignment */
        TR_LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &a->aux,
                                                 sizeof(a->aux)));
    }
    TR_LT_TRY(cublasLtMatrixLayoutCreate(&p->la, a->ab_type, a->ta ? a->k : a->m, a->ta ? a->m : a->k,
                                         a->ta ? a->k : a->m));
    TR_LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, a->ab_type, a->tb ? a->n : a->k, a->tb ? a->k : a->n,
                                         a->tb ? a->n : a->k));
    TR_LT_TRY(cublasLtMatrixLayoutCreate(&p->ld, a->d_type, a->m, a->n, a->m));
    TR_LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    TR_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                                   sizeof(wsb)));
    TR_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align,
                                                   sizeof(align)));
    TR_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align,
                                                   sizeof(align)));
    TR_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align,
                                                   sizeof(align)));
    TR_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align,
                                                   sizeof(align)));
    TR_LT_TRY(cublasLtMatmulAlgoGetHeuristic(g->lt, p->desc, p->la, p->lb, p->ld, p->ld, pref,
                                             TR_GEMM_CANDIDATES, res, &found));
    if (found == 0) {
        rv = tr_err_set(err, TROUPE_UNIMPLEMENTED,
                        "cuBLASLt has no algorithm for m=%d n=%d k=%d ta=%d tb=%d bias=%d", a->m, a->n, a->k,
                        a->ta, a->tb, a->bias != NULL);
        goto out;
    }
    p->algo = res[0].algo;
    if (found > 1) {
        TR_TRY(plan_tune(g, p, a, res, found, err));
    }
out:
    if (pref != NULL) {
        cublasLtMatmulPreferenceDestroy(pref);
    }
    if (rv != TROUPE_OK) {
        plan_free(p);
    }
    return rv;
}

int tr_cu_gemm(tr_cu_gemm_ctx *g, const tr_cu_gemm_args *a, tr_err *err)
{
    int rv = TROUPE_OK;
    gemm_plan *p = NULL;
    float one = 1.0f, beta = a->accumulate ? 1.0f : 0.0f;
    for (int i = 0; i < TR_GEMM_CACHE && p == NULL; i++) {
        if (plan_matches(&g->plans[i], a)) {
            p = &g->plans[i];
        }
    }
    if (p == NULL) {
        for (int i = 0; i < TR_GEMM_CACHE && p == NULL; i++) {
            if (!g->plans[i].used) {
                p = &g->plans[i];
            }
        }
        if (p == NULL) {
            p = &g->plans[g->next];
            g->next = (g->next + 1) % TR_GEMM_CACHE;
        }
        TR_TRY(plan_build(g, p, a, err));
    }
    TR_TRY(set_pointers(p, a, err));
    TR_LT_TRY(cublasLtMatmul(g->lt, p->desc, &one, a->a, p->la, a->b, p->lb, &beta, a->d, p->ld, a->d, p->ld,
                             &p->algo, g->ws, TR_GEMM_WORKSPACE, g->s));
out:
    return rv;
}

/* ---- measured ceiling ------------------------------------------------------ */

static int cmp_float(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

/* The ceiling is a square bf16 GEMM on random data (zeros run faster and
 * would flatter it), timed with events one launch at a time; the median of
 * the timed runs is reported. */
int tr_cuda_gemm_ceiling(int device, int n, double *tflops, tr_err *err)
{
    int rv = TROUPE_OK;
    enum { WARM = 3, RUNS = 15 };
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    tr_cu_gemm_ctx *g = NULL;
    bf16 *a = NULL, *b = NULL, *d = NULL;
    float ms[RUNS];
    size_t nn = (size_t)n * n;
    tr_cu_gemm_args ga;
    *tflops = 0.0;
    TR_CU_TRY(cudaSetDevice(device));
    TR_CU_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    TR_CU_TRY(cudaEventCreate(&e0));
    TR_CU_TRY(cudaEventCreate(&e1));
    TR_TRY(tr_cu_gemm_create(&g, s, err));
    TR_CU_TRY(cudaMalloc((void **)&a, nn * sizeof(bf16)));
    TR_CU_TRY(cudaMalloc((void **)&b, nn * sizeof(bf16)));
    TR_CU_TRY(cudaMalloc((void **)&d, nn * sizeof(bf16)));
    TR_CU_TRY(tr_cu_fill_random(a, nn, 1u, s));
    TR_CU_TRY(tr_cu_fill_random(b, nn, 2u, s));
    memset(&ga, 0, sizeof(ga));
    ga.d = d, ga.a = a, ga.b = b, ga.m = n, ga.n = n, ga.k = n, ga.ta = 1;
    ga.ab_type = CUDA_R_16BF, ga.d_type = CUDA_R_16BF;
    for (int i = 0; i < WARM + RUNS; i++) {
        TR_CU_TRY(cudaEventRecord(e0, s));
        TR_TRY(tr_cu_gemm(g, &ga, err));
        TR_CU_TRY(cudaEventRecord(e1, s));
        TR_CU_TRY(cudaEventSynchronize(e1));
        if (i >= WARM) {
            TR_CU_TRY(cudaEventElapsedTime(&ms[i - WARM], e0, e1));
        }
    }
    qsort(ms, RUNS, sizeof(float), cmp_float);
    *tflops = 2.0 * n * (double)n * n / (ms[RUNS / 2] * 1e-3) / 1e12;
out:
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
    tr_cu_gemm_destroy(g);
    if (e0 != NULL) {
        cudaEventDestroy(e0);
    }
    if (e1 != NULL) {
        cudaEventDestroy(e1);
    }
    if (s != NULL) {
        cudaStreamDestroy(s);
    }
    return rv;
}
