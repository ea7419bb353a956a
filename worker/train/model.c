/* model.c - parameter sizes, names and GPT-2 initialisation.
 *
 * This file is the single definition of the canonical layout described in
 * backend.h; the CPU backend, the CUDA backend and checkpoints all derive their
 * offsets from tr_model_param_sizes. */
#include "model.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "rng.h"

static const char *const param_names[TR_NUM_PARAM_TENSORS] = {
    "wte",  "wpe",  "ln1w", "ln1b", "qkvw",    "qkvb",    "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw", "fcprojb", "lnfw",     "lnfb",
};

const char *tr_model_param_name(int i)
{
    if (i < 0 || i >= TR_NUM_PARAM_TENSORS) {
        return "?";
    }
    return param_names[i];
}

size_t tr_model_param_sizes(const tr_model_config *cfg, size_t sizes[TR_NUM_PARAM_TENSORS])
{
    size_t L = (size_t)cfg->layers, C = (size_t)cfg->width;
    size_t Vp = (size_t)cfg->padded_vocab, T = (size_t)cfg->seq_len;
    size_t total = 0;

    sizes[TR_P_WTE] = Vp * C;
    sizes[TR_P_WPE] = T * C;
    sizes[TR_P_LN1W] = L * C;
    sizes[TR_P_LN1B] = L * C;
    sizes[TR_P_QKVW] = L * 3 * C * C;
    sizes[TR_P_QKVB] = L * 3 * C;
    sizes[TR_P_ATTPROJW] = L * C * C;
    sizes[TR_P_ATTPROJB] = L * C;
    sizes[TR_P_LN2W] = L * C;
    sizes[TR_P_LN2B] = L * C;
    sizes[TR_P_FCW] = L * 4 * C * C;
    sizes[TR_P_FCB] = L * 4 * C;
    sizes[TR_P_FCPROJW] = L * C * 4 * C;
    sizes[TR_P_FCPROJB] = L * C;
    sizes[TR_P_LNFW] = C;
    sizes[TR_P_LNFB] = C;
    for (int i = 0; i < TR_NUM_PARAM_TENSORS; i++) {
        total += sizes[i];
    }
    return total;
}

size_t tr_model_param_offsets(const tr_model_config *cfg, size_t offs[TR_NUM_PARAM_TENSORS])
{
    size_t sizes[TR_NUM_PARAM_TENSORS];
    size_t total = 0;

    tr_model_param_sizes(cfg, sizes);
    for (int i = 0; i < TR_NUM_PARAM_TENSORS; i++) {
        offs[i] = total;
        total += sizes[i];
    }
    return total;
}

int tr_model_param_is_matrix(int i)
{
    return i == TR_P_WTE || i == TR_P_WPE || i == TR_P_QKVW || i == TR_P_ATTPROJW || i == TR_P_FCW ||
           i == TR_P_FCPROJW;
}

int tr_model_padded_vocab(int vocab)
{
    return (vocab + 127) / 128 * 128;
}

int tr_model_config_check(const tr_model_config *cfg, tr_err *err)
{
    if (cfg->layers <= 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "model.layers must be positive, got %d", cfg->layers);
    }
    if (cfg->width <= 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "model.width must be positive, got %d", cfg->width);
    }
    if (cfg->heads <= 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "model.heads must be positive, got %d", cfg->heads);
    }
    if (cfg->width % cfg->heads != 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "model.width %d is not divisible by model.heads %d",
                          cfg->width, cfg->heads);
    }
    if (cfg->seq_len <= 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "model.seq_len must be positive, got %d",
                          cfg->seq_len);
    }
    if (cfg->vocab <= 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "vocab must be positive, got %d", cfg->vocab);
    }
    if (cfg->padded_vocab != tr_model_padded_vocab(cfg->vocab)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "padded vocab %d is not vocab %d rounded up to a multiple of 128 (%d)",
                          cfg->padded_vocab, cfg->vocab, tr_model_padded_vocab(cfg->vocab));
    }
    return TROUPE_OK;
}

typedef struct fill_job {
    float *p;
    size_t n;
    double std;
    uint64_t rng;
    pthread_t tid;
} fill_job;

static void *fill_normal_part(void *arg)
{
    fill_job *j = arg;
    for (size_t i = 0; i < j->n; i++) {
        j->p[i] = (float)(j->std * tr_rng_normal(&j->rng));
    }
    return NULL;
}

/* fill_normal draws n samples, the same as one sequential loop: every
 * tr_rng_normal takes exactly two steps of the splitmix64 state, which only
 * adds a constant per step, so the state at sample i is known without the
 * samples before it and the tensor is drawn in slices on several threads.
 * Drawing GPT-2 124M's weights on one thread took 5.7 s (Box-Muller's
 * log/sqrt/cos at ~45 ns a sample) before every first step; the values
 * stay bit-identical to that loop. */
static void fill_normal(float *p, size_t n, double std, uint64_t *rng)
{
    enum { MAX_THREADS = 16, MIN_PER_THREAD = 1 << 20 };
    const uint64_t step2 = 2 * 0x9E3779B97F4A7C15ull; /* two tr_rng_next calls */
    fill_job jobs[MAX_THREADS];
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t nt = n / MIN_PER_THREAD, per, off = 0;
    int started = 0;

    nt = nt < 1 ? 1 : nt > MAX_THREADS ? MAX_THREADS : nt;
    if (cpus > 0 && nt > (size_t)cpus) {
        nt = (size_t)cpus;
    }
    per = (n + nt - 1) / nt;
    for (size_t t = 0; t < nt; t++) {
        fill_job *j = &jobs[t];
        j->p = p + off;
        j->n = off + per <= n ? per : n - off;
        j->std = std;
        j->rng = *rng + (uint64_t)off * step2;
        off += j->n;
    }
    /* slice 0 runs here; a thread that cannot start leaves its slice to
     * this thread, after the others were started */
    for (size_t t = 1; t < nt; t++) {
        if (pthread_create(&jobs[t].tid, NULL, fill_normal_part, &jobs[t]) != 0) {
            break;
        }
        started++;
    }
    fill_normal_part(&jobs[0]);
    for (size_t t = 1 + (size_t)started; t < nt; t++) {
        fill_normal_part(&jobs[t]);
    }
    for (int t = 1; t <= started; t++) {
        pthread_join(jobs[t].tid, NULL);
    }
    *rng += (uint64_t)n * step2;
}

static void fill_const(float *p, size_t n, float v)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = v;
    }
}

void tr_model_init_params(const tr_model_config *cfg, uint64_t seed, float *params)
{
    size_t sizes[TR_NUM_PARAM_TENSORS], offs[TR_NUM_PARAM_TENSORS];
    /* GPT-2: residual projections are scaled so the residual stream's variance
     * does not grow with depth (2 additions per layer). */
    double proj_std = 0.02 / sqrt(2.0 * cfg->layers);
    uint64_t rng = seed;

    tr_model_param_sizes(cfg, sizes);
    tr_model_param_offsets(cfg, offs);
    for (int i = 0; i < TR_NUM_PARAM_TENSORS; i++) {
        float *p = params + offs[i];
        switch (i) {
        case TR_P_WTE:
            /* Only the real vocabulary rows are random; padding rows stay zero. */
            fill_normal(p, (size_t)cfg->vocab * (size_t)cfg->width, 0.02, &rng);
            fill_const(p + (size_t)cfg->vocab * (size_t)cfg->width,
                       sizes[i] - (size_t)cfg->vocab * (size_t)cfg->width, 0.0f);
            break;
        case TR_P_WPE:
        case TR_P_QKVW:
        case TR_P_FCW: fill_normal(p, sizes[i], 0.02, &rng); break;
        case TR_P_ATTPROJW:
        case TR_P_FCPROJW: fill_normal(p, sizes[i], proj_std, &rng); break;
        case TR_P_LN1W:
        case TR_P_LN2W:
        case TR_P_LNFW: fill_const(p, sizes[i], 1.0f); break;
        default: fill_const(p, sizes[i], 0.0f); break;
        }
    }
}

double tr_model_flops_per_token(const tr_model_config *cfg, size_t num_params)
{
    return 6.0 * (double)num_params + 6.0 * cfg->layers * (double)cfg->width * cfg->seq_len;
}
