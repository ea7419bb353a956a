/* gemm.cu - cuBLASLt matmuls with a per-shape plan cache, and the measured
 * GEMM ceiling exported through train_cuda.h. */
#include <cublas_v2.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cu_gemm.h"
#include "cu_kernels.h"

extern "C" {
#include "train_cuda.h"
}

#define TR_GEMM_WORKSPACE (64u << 20)
#define TR_GEMM_CACHE 64
#define TR_GEMM_CANDIDATES 8 /* per heuristic query: it returned no more than 8 for any shape here */
#define TR_GEMM_MAX_CANDS 96
#define TR_GEMM_DISK_MAX 512 /* plans read from the on-disk cache; later lines win */
#define TR_GEMM_KEY 10

/* A tuned plan as the on-disk cache keeps it: the shape key (see plan_key)
 * and the algorithm, which cuBLASLt documents as trivially serialisable for
 * use with the same cuBLASLt version (the file name carries it). */
typedef struct disk_plan {
    int key[TR_GEMM_KEY];
    cublasLtMatmulAlgo_t algo;
} disk_plan;

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
    int tune; /* TR_CUDA_GEMM_TUNE, see tr_cu_gemm_create */
    int log;  /* TR_CUDA_GEMM_LOG: print each plan's pick to stderr */
    /* on-disk plan cache (TR_CUDA_GEMM_CACHE, see cache_open); path "" = off */
    char dir[1024], path[1200];
    disk_plan *disk;
    int ndisk, save_failed;
    int built, from_disk; /* plans built, and of those taken from the disk cache */
    double build_ms;      /* host time spent building (and tuning) plans */
};

static double gemm_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* mkdir_p makes dir and its parents (0755); existing ones are fine. */
static int mkdir_p(const char *dir)
{
    char tmp[1024];
    snprintf(tmp, sizeof(tmp), "%s", dir);
    for (char *q = tmp + 1; *q != '\0'; q++) {
        if (*q == '/') {
            *q = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
                return -1;
            }
            *q = '/';
        }
    }
    return mkdir(tmp, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

/* cache_open picks the cache file and reads it. Tuning the ~20 shapes of a
 * step costs hundreds of milliseconds to seconds at every start (the first
 * step of every worker of every job); the picks depend only on the GPU, the
 * CUDA and cuBLASLt versions and the shape, so they are kept in
 * DIR/gemm-<gpu>-cc<major><minor>-cuda<rt>-cublaslt<ver>-tune<level>.txt, DIR
 * being TR_CUDA_GEMM_CACHE, else $XDG_CACHE_HOME/troupe, else
 * $HOME/.cache/troupe. TR_CUDA_GEMM_CACHE=0 (or empty) turns it off. A line
 * that does not parse is skipped; a cached algorithm that cuBLASLt no longer
 * accepts for its shape is tuned again. Workers on one host append to the
 * one file with single write()s of whole lines, so they may add duplicates
 * (harmless: the last one wins) but never torn lines. */
static void cache_open(tr_cu_gemm_ctx *g)
{
    const char *env = getenv("TR_CUDA_GEMM_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char name[256] = "", line[512];
    int dev = 0, rt = 0;
    cudaDeviceProp prop;
    FILE *f;
    g->path[0] = '\0';
    if (g->tune < 1 ||
        (env != NULL && (env[0] == '\0' || strcmp(env, "0") == 0 || strcmp(env, "off") == 0))) {
        return;
    }
    if (env != NULL) {
        snprintf(g->dir, sizeof(g->dir), "%s", env);
    } else if (xdg != NULL && xdg[0] == '/') {
        snprintf(g->dir, sizeof(g->dir), "%s/troupe", xdg);
    } else if (home != NULL && home[0] == '/') {
        snprintf(g->dir, sizeof(g->dir), "%s/.cache/troupe", home);
    } else {
        return;
    }
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess ||
        cudaRuntimeGetVersion(&rt) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    for (size_t i = 0; prop.name[i] != '\0' && i + 1 < sizeof(name); i++) {
        char ch = prop.name[i];
        name[i] = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ? ch : '_';
        name[i + 1] = '\0';
    }
    snprintf(g->path, sizeof(g->path), "%s/gemm-%s-cc%d%d-cuda%d-cublaslt%zu-tune%d.txt", g->dir, name,
             prop.major, prop.minor, rt, cublasLtGetVersion(), g->tune);
    g->disk = (disk_plan *)calloc(TR_GEMM_DISK_MAX, sizeof(*g->disk));
    if (g->disk == NULL || (f = fopen(g->path, "r")) == NULL) {
        return; /* none yet: the first run writes it */
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        disk_plan d;
        unsigned long long w[8];
        int *k = d.key;
        if (sscanf(line, "%d %d %d %d %d %d %d %d %d %d : %llx %llx %llx %llx %llx %llx %llx %llx", &k[0],
                   &k[1], &k[2], &k[3], &k[4], &k[5], &k[6], &k[7], &k[8], &k[9], &w[0], &w[1], &w[2], &w[3],
                   &w[4], &w[5], &w[6], &w[7]) != 18) {
            continue;
        }
        for (int i = 0; i < 8; i++) {
            d.algo.data[i] = (uint64_t)w[i];
        }
        if (g->ndisk < TR_GEMM_DISK_MAX) {
            g->disk[g->ndisk++] = d;
        } else { /* full: keep the newest */
            memmove(g->disk, g->disk + 1, (TR_GEMM_DISK_MAX - 1) * sizeof(*g->disk));
            g->disk[TR_GEMM_DISK_MAX - 1] = d;
        }
    }
    fclose(f);
}

static void plan_key(const tr_cu_gemm_args *a, int tune, int key[TR_GEMM_KEY])
{
    key[0] = a->m, key[1] = a->n, key[2] = a->k, key[3] = a->ta, key[4] = a->tb, key[5] = a->bias != NULL;
    key[6] = (int)a->ab_type, key[7] = (int)a->d_type, key[8] = a->epilogue, key[9] = tune;
}

static const cublasLtMatmulAlgo_t *cache_find(const tr_cu_gemm_ctx *g, const tr_cu_gemm_args *a)
{
    int key[TR_GEMM_KEY];
    plan_key(a, g->tune, key);
    for (int i = g->ndisk - 1; i >= 0; i--) {
        if (memcmp(g->disk[i].key, key, sizeof(key)) == 0) {
            return &g->disk[i].algo;
        }
    }
    return NULL;
}

/* cache_save appends a tuned plan; a failure is logged once and turns
 * saving off (tuning still works, only the next start pays for it again). */
static void cache_save(tr_cu_gemm_ctx *g, const tr_cu_gemm_args *a, const cublasLtMatmulAlgo_t *algo)
{
    int key[TR_GEMM_KEY], fd, len;
    char line[512];
    if (g->path[0] == '\0' || g->save_failed) {
        return;
    }
    plan_key(a, g->tune, key);
    len = snprintf(line, sizeof(line), "%d %d %d %d %d %d %d %d %d %d :", key[0], key[1], key[2], key[3],
                   key[4], key[5], key[6], key[7], key[8], key[9]);
    for (int i = 0; i < 8; i++) {
        len += snprintf(line + len, sizeof(line) - len, " %llx", (unsigned long long)algo->data[i]);
    }
    len += snprintf(line + len, sizeof(line) - len, "\n");
    if (mkdir_p(g->dir) != 0 || (fd = open(g->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)) < 0) {
        TR_LOG(TR_LOG_WARNING,
               "gemm plan cache %s: cannot write (%s): every start tunes again; set TR_CUDA_GEMM_CACHE to a "
               "writable directory, or 0 to silence this",
               g->path, strerror(errno));
        g->save_failed = 1;
        return;
    }
    if (write(fd, line, (size_t)len) != len) {
        TR_LOG(TR_LOG_WARNING, "gemm plan cache %s: short write (%s)", g->path, strerror(errno));
        g->save_failed = 1;
    }
    close(fd);
}

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
    /* TR_CUDA_GEMM_TUNE: 0 takes the heuristic's first algorithm, 1 times the
     * heuristic's (at most 8) candidates, 2 (default) times a wider pool,
     * see plan_build */
    g->tune = getenv("TR_CUDA_GEMM_TUNE") != NULL ? atoi(getenv("TR_CUDA_GEMM_TUNE")) : 2;
    g->log = getenv("TR_CUDA_GEMM_LOG") != NULL && atoi(getenv("TR_CUDA_GEMM_LOG")) > 0;
    TR_LT_TRY(cublasLtCreate(&g->lt));
    TR_CU_TRY(cudaMalloc(&g->ws, TR_GEMM_WORKSPACE));
    cache_open(g);
    if (g->path[0] != '\0') {
        TR_LOG(TR_LOG_INFO, "gemm plan cache path=%s plans=%d", g->path, g->ndisk);
    }
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
    if (g->built > 0) {
        TR_LOG(TR_LOG_INFO, "gemm plans built=%d from_cache=%d tuned=%d ms=%.0f", g->built, g->from_disk,
               g->built - g->from_disk, g->build_ms);
    }
    free(g->disk);
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

/* One algorithm to try for a plan, with the workspace it needs. */
typedef struct gemm_cand {
    cublasLtMatmulAlgo_t algo;
    size_t ws;
} gemm_cand;

static int cand_add(gemm_cand *c, int n, const cublasLtMatmulAlgo_t *algo, size_t ws)
{
    if (n >= TR_GEMM_MAX_CANDS || ws > TR_GEMM_WORKSPACE) {
        return n;
    }
    for (int i = 0; i < n; i++) {
        if (memcmp(&c[i].algo, algo, sizeof(*algo)) == 0) {
            return n;
        }
    }
    c[n].algo = *algo, c[n].ws = ws;
    return n + 1;
}

static cublasStatus_t run_cand(tr_cu_gemm_ctx *g, gemm_plan *p, const tr_cu_gemm_args *a, void *d,
                               const cublasLtMatmulAlgo_t *algo)
{
    float one = 1.0f, beta = a->accumulate ? 1.0f : 0.0f;
    return cublasLtMatmul(g->lt, p->desc, &one, a->a, p->la, a->b, p->lb, &beta, d, p->ld, d, p->ld, algo,
                          g->ws, TR_GEMM_WORKSPACE, g->s);
}

/* time_cand returns the mean ms of `runs` launches of one candidate, or a
 * negative value when it does not run. */
static float time_cand(tr_cu_gemm_ctx *g, gemm_plan *p, const tr_cu_gemm_args *a, void *d,
                       const cublasLtMatmulAlgo_t *algo, int runs, cudaEvent_t e0, cudaEvent_t e1)
{
    float ms = -1.0f;
    cudaEventRecord(e0, g->s);
    for (int r = 0; r < runs; r++) {
        if (run_cand(g, p, a, d, algo) != CUBLAS_STATUS_SUCCESS) {
            cudaStreamSynchronize(g->s);
            return -1.0f;
        }
    }
    cudaEventRecord(e1, g->s);
    if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
        cudaGetLastError();
        return -1.0f;
    }
    return ms / runs;
}

/* plan_tune times the candidates on the real inputs, writing a scratch D so
 * that an accumulating product leaves the real one untouched (the forward
 * GELU epilogue rewrites its aux, which the real call then writes again), and
 * keeps the fastest. Each gets a warm-up and one timed launch; only those
 * within 20% of the best so far get four more, which keeps the search over
 * dozens of candidates of the vocabulary-sized products cheap. Candidates that
 * fail to run are skipped. The L2 is hot here, unlike in the step, so close
 * calls may go either way; the heuristic's first pick stays unless another
 * wins by more than 1%. */
static int plan_tune(tr_cu_gemm_ctx *g, gemm_plan *p, const tr_cu_gemm_args *a, const gemm_cand *c, int n,
                     tr_err *err)
{
    int rv = TROUPE_OK, pick = 0;
    void *scratch = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float best = 1e30f, first = -1.0f;
    size_t dbytes = (size_t)a->m * a->n * (a->d_type == CUDA_R_32F ? 4 : 2);
    if (cudaMalloc(&scratch, dbytes) != cudaSuccess) { /* no room to tune: keep the heuristic's pick */
        cudaGetLastError();
        scratch = NULL;
        goto out;
    }
    /* let work queued before (on any stream) drain, so that it does not skew the times */
    TR_CU_TRY(cudaDeviceSynchronize());
    TR_CU_TRY(cudaMemsetAsync(scratch, 0, dbytes, g->s));
    TR_CU_TRY(cudaEventCreate(&e0));
    TR_CU_TRY(cudaEventCreate(&e1));
    TR_TRY(set_pointers(p, a, err));
    for (int i = 0; i < n; i++) {
        if (run_cand(g, p, a, scratch, &c[i].algo) != CUBLAS_STATUS_SUCCESS) { /* warm-up */
            continue;
        }
        float ms = time_cand(g, p, a, scratch, &c[i].algo, 1, e0, e1);
        if (ms < 0.0f || (g->tune >= 2 && ms > 1.2f * best && i > 0)) {
            continue;
        }
        ms = time_cand(g, p, a, scratch, &c[i].algo, g->tune >= 2 ? 4 : 3, e0, e1);
        if (i == 0) {
            first = ms;
        }
        if (ms > 0.0f && (i == 0 || ms < 0.99f * best)) {
            best = ms;
            pick = i;
        }
    }
    p->algo = c[pick].algo;
    if (g->log) {
        double fl = 2.0 * a->m * (double)a->n * a->k;
        fprintf(stderr,
                "gemm plan m=%d n=%d k=%d ta=%d tb=%d acc=%d epi=%d: %d candidates, first %.4f ms, "
                "best #%d %.4f ms (%.0f TFLOP/s)\n",
                a->m, a->n, a->k, a->ta, a->tb, a->accumulate, a->epilogue, n, first, pick, best,
                fl / (best * 1e-3) / 1e12);
    }
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

/* splitk_variants adds, for each candidate so far that supports split-K and
 * does not split already, copies that split K 2-16 ways (reduced in fp32 in
 * the workspace) which cublasLtMatmulAlgoCheck accepts. The heuristic
 * rarely offers these for the weight gradients, whose m x n is a few dozen
 * output tiles over a K of B*T: too few blocks for 132 SMs. */
static int splitk_variants(tr_cu_gemm_ctx *g, gemm_plan *p, gemm_cand *c, int n)
{
    static const int splits[] = {2, 3, 4, 6, 8, 16};
    int n0 = n;
    for (int i = 0; i < n0; i++) {
        int sup = 0, cur = 0;
        size_t wr = 0;
        if (cublasLtMatmulAlgoCapGetAttribute(&c[i].algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &sup, sizeof(sup),
                                              &wr) != CUBLAS_STATUS_SUCCESS ||
            !sup ||
            cublasLtMatmulAlgoConfigGetAttribute(&c[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &cur,
                                                 sizeof(cur), &wr) != CUBLAS_STATUS_SUCCESS ||
            cur > 1) {
            continue;
        }
        for (size_t j = 0; j < sizeof(splits) / sizeof(splits[0]); j++) {
            cublasLtMatmulAlgo_t al = c[i].algo;
            cublasLtMatmulHeuristicResult_t r;
            uint32_t sk = (uint32_t)splits[j], red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
            if ((int)sk * 256 > p->k) {
                break;
            }
            if (cublasLtMatmulAlgoConfigSetAttribute(&al, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof(sk)) !=
                    CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulAlgoConfigSetAttribute(&al, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
                                                     sizeof(red)) != CUBLAS_STATUS_SUCCESS) {
                continue;
            }
            memset(&r, 0, sizeof(r));
            if (cublasLtMatmulAlgoCheck(g->lt, p->desc, p->la, p->lb, p->ld, p->ld, &al, &r) ==
                CUBLAS_STATUS_SUCCESS) {
                n = cand_add(c, n, &al, r.workspaceSize);
            }
        }
    }
    return n;
}

static int set_pref(cublasLtMatmulPreference_t pref, uint64_t wsb, uint32_t red, tr_err *err)
{
    int rv = TROUPE_OK;
    uint32_t align = 16;
    TR_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                                   sizeof(wsb)));
    TR_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red,
                                                   sizeof(red)));
    TR_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align,
                                                   sizeof(align)));
    TR_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align,
                                                   sizeof(align)));
    TR_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align,
                                                   sizeof(align)));
    TR_LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align,
                                                   sizeof(align)));
out:
    return rv;
}

/* plan_build fills p with descriptors for a's shape and picks its algorithm
 * (see tr_cu_gemm_create for the TR_CUDA_GEMM_TUNE levels). Level 2 pools
 * the heuristic's answers under several workspace limits and reduction
 * schemes (each query returns at most 8, mostly the same kernel family)
 * plus split-K copies, and times them all. */
static int plan_build(tr_cu_gemm_ctx *g, gemm_plan *p, const tr_cu_gemm_args *a, tr_err *err)
{
    static const uint64_t ws_try[] = {TR_GEMM_WORKSPACE, 8u << 20, 1u << 20, 0};
    static const uint32_t red_try[] = {CUBLASLT_REDUCTION_SCHEME_MASK, CUBLASLT_REDUCTION_SCHEME_NONE};
    int rv = TROUPE_OK, found = 0, n = 0;
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
    gemm_cand *c = (gemm_cand *)calloc(TR_GEMM_MAX_CANDS, sizeof(*c));
    if (c == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of host memory for GEMM candidates");
    }
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
    if (g->disk != NULL && cache_find(g, a) != NULL) {
        cublasLtMatmulHeuristicResult_t r;
        cublasLtMatmulAlgo_t al = *cache_find(g, a);
        memset(&r, 0, sizeof(r));
        if (cublasLtMatmulAlgoCheck(g->lt, p->desc, p->la, p->lb, p->ld, p->ld, &al, &r) ==
                CUBLAS_STATUS_SUCCESS &&
            r.workspaceSize <= TR_GEMM_WORKSPACE) {
            p->algo = al;
            g->from_disk++;
            goto out;
        }
        TR_LOG(TR_LOG_INFO, "gemm plan cache: the entry for m=%d n=%d k=%d is not accepted now: tuning again",
               a->m, a->n, a->k);
    }
    TR_LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    for (size_t w = 0; w < (g->tune >= 2 ? sizeof(ws_try) / sizeof(ws_try[0]) : 1); w++) {
        for (size_t r = 0; r < (g->tune >= 2 ? sizeof(red_try) / sizeof(red_try[0]) : 1); r++) {
            TR_TRY(set_pref(pref, ws_try[w], red_try[r], err));
            found = 0;
            if (cublasLtMatmulAlgoGetHeuristic(g->lt, p->desc, p->la, p->lb, p->ld, p->ld, pref,
                                               TR_GEMM_CANDIDATES, res, &found) != CUBLAS_STATUS_SUCCESS) {
                continue;
            }
            for (int i = 0; i < found; i++) {
                n = cand_add(c, n, &res[i].algo, res[i].workspaceSize);
            }
        }
    }
    if (n == 0) {
        rv = tr_err_set(err, TROUPE_UNIMPLEMENTED,
                        "cuBLASLt has no algorithm for m=%d n=%d k=%d ta=%d tb=%d bias=%d", a->m, a->n, a->k,
                        a->ta, a->tb, a->bias != NULL);
        goto out;
    }
    if (g->tune >= 2) {
        n = splitk_variants(g, p, c, n);
    }
    p->algo = c[0].algo;
    if (g->tune >= 1 && n > 1) {
        TR_TRY(plan_tune(g, p, a, c, n, err));
        cache_save(g, a, &p->algo);
    }
out:
    free(c);
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
        double t0 = gemm_now_ms();
        TR_TRY(plan_build(g, p, a, err));
        g->built++;
        g->build_ms += gemm_now_ms() - t0;
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
