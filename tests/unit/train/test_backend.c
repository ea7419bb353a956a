/* test_backend.c - the CPU backend against finite differences, AdamW and
 * input checks (unit.train.*). */
#include <math.h>
#include <stdlib.h>

#include "backend.h"
#include "model.h"
#include "rng.h"
#include "train_test.h"
#include "zero.h"

enum { TB = 2, TT = 5 };

static const tr_model_config tiny = {
    .layers = 2, .width = 8, .heads = 2, .seq_len = TT, .vocab = 13, .padded_vocab = 128};

typedef struct fixture {
    tr_backend *b;
    float *params, *grads;
    int32_t inputs[TB * TT], targets[TB * TT];
    size_t offs[TR_NUM_PARAM_TENSORS];
} fixture;

/* randomise gives every tensor non-trivial values (biases and LayerNorm
 * parameters included), so that each has a gradient worth checking. */
static void randomise(const tr_model_config *cfg, float *params, uint64_t seed)
{
    size_t sizes[TR_NUM_PARAM_TENSORS], offs[TR_NUM_PARAM_TENSORS];
    uint64_t rng = seed;

    tr_model_param_sizes(cfg, sizes);
    tr_model_param_offsets(cfg, offs);
    for (int i = 0; i < TR_NUM_PARAM_TENSORS; i++) {
        int is_ln_w = i == TR_P_LN1W || i == TR_P_LN2W || i == TR_P_LNFW;
        for (size_t j = 0; j < sizes[i]; j++) {
            double x = tr_rng_normal(&rng);
            params[offs[i] + j] =
                (float)(is_ln_w ? 1.0 + 0.2 * x : (tr_model_param_is_matrix(i) ? 0.3 : 0.1) * x);
        }
    }
    /* padded rows of wte stay zero, as the layout requires */
    memset(params + (size_t)cfg->vocab * cfg->width, 0,
           (sizes[TR_P_WTE] - (size_t)cfg->vocab * cfg->width) * sizeof(float));
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    tr_backend_opts opts = {.micro_batch = TB, .precision = TR_PRECISION_FP32};
    tr_err err = {0};
    uint64_t rng = 7;

    assert_non_null(f);
    TR_ASSERT_OK(tr_backend_cpu_create(&tiny, &opts, &f->b, &err), &err);
    f->params = malloc(f->b->num_params * sizeof(float));
    f->grads = malloc(f->b->num_params * sizeof(float));
    assert_non_null(f->params);
    assert_non_null(f->grads);
    tr_model_param_offsets(&tiny, f->offs);
    randomise(&tiny, f->params, 42);
    TR_ASSERT_OK(f->b->ops->set_params(f->b, f->params, &err), &err);
    for (int i = 0; i < TB * TT; i++) {
        f->inputs[i] = (int32_t)tr_rng_below(&rng, (uint64_t)tiny.vocab);
        f->targets[i] = (int32_t)tr_rng_below(&rng, (uint64_t)tiny.vocab);
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f->b != NULL) {
        f->b->ops->destroy(f->b);
    }
    free(f->params);
    free(f->grads);
    free(f);
    return 0;
}

static float loss_at(fixture *f)
{
    tr_err err = {0};
    float loss = 0.0f;
    TR_ASSERT_OK(f->b->ops->set_params(f->b, f->params, &err), &err);
    TR_ASSERT_OK(f->b->ops->forward_loss(f->b, f->inputs, f->targets, TB, TT, &loss, &err), &err);
    return loss;
}

/* central_diff returns (L(p+h) - L(p-h)) / (actual step), restoring p. */
static double central_diff(fixture *f, size_t j, float h)
{
    float p0 = f->params[j];
    float hi = p0 + h, lo = p0 - h;
    double lp, lm;

    f->params[j] = hi;
    lp = loss_at(f);
    f->params[j] = lo;
    lm = loss_at(f);
    f->params[j] = p0;
    return (lp - lm) / ((double)hi - (double)lo);
}

/* Entries to check in tensor i: the three largest analytic gradients (where
 * a wrong formula shows most) and three random ones (where a wrong index
 * shows). Real rows of wte only: the padded rows are checked elsewhere. */
static void pick_entries(fixture *f, int i, size_t n, size_t out[6], uint64_t *rng)
{
    const float *g = f->grads + f->offs[i];
    for (int k = 0; k < 3; k++) {
        size_t best = 0;
        for (size_t j = 0; j < n; j++) {
            int taken = 0;
            for (int q = 0; q < k; q++) {
                taken |= out[q] == j;
            }
            if (!taken && fabsf(g[j]) > fabsf(g[best])) {
                best = j;
            }
        }
        out[k] = best;
    }
    for (int k = 3; k < 6; k++) {
        out[k] = (size_t)tr_rng_below(rng, n);
    }
}

static void gradcheck(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    size_t sizes[TR_NUM_PARAM_TENSORS];
    float loss;
    uint64_t rng = 99;
    double worst = 0.0;

    tr_model_param_sizes(&tiny, sizes);
    TR_ASSERT_OK(f->b->ops->zero_grads(f->b, &err), &err);
    TR_ASSERT_OK(f->b->ops->forward_backward(f->b, f->inputs, f->targets, TB, TT, 1.0f, &loss, &err), &err);
    TR_ASSERT_OK(f->b->ops->get_grads(f->b, f->grads, &err), &err);
    for (int i = 0; i < TR_NUM_PARAM_TENSORS; i++) {
        size_t n = i == TR_P_WTE ? (size_t)tiny.vocab * tiny.width : sizes[i];
        size_t idx[6];
        pick_entries(f, i, n, idx, &rng);
        /* A tensor whose largest gradient is ~0 would make the check vacuous. */
        assert_true(fabsf(f->grads[f->offs[i] + idx[0]]) > 1e-3f);
        for (int k = 0; k < 6; k++) {
            size_t j = f->offs[i] + idx[k];
            double ana = f->grads[j];
            double num = central_diff(f, j, 1e-2f);
            double tol = 2e-5 + 2e-3 * fabs(ana);
            double e = fabs(num - ana) / tol;
            if (e > worst) {
                worst = e;
            }
            if (fabs(num - ana) > tol) {
                fail_msg("%s[%zu]: analytic %.6g, numeric %.6g (tolerance %.2g)", tr_model_param_name(i),
                         idx[k], ana, num, tol);
            }
        }
    }
    print_message("gradcheck: loss %.4f, worst error %.2f of tolerance\n", loss, worst);
}

static void padded_vocab_grads_zero(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    float loss;
    size_t sizes[TR_NUM_PARAM_TENSORS];

    tr_model_param_sizes(&tiny, sizes);
    TR_ASSERT_OK(f->b->ops->zero_grads(f->b, &err), &err);
    TR_ASSERT_OK(f->b->ops->forward_backward(f->b, f->inputs, f->targets, TB, TT, 1.0f, &loss, &err), &err);
    TR_ASSERT_OK(f->b->ops->get_grads(f->b, f->grads, &err), &err);
    for (size_t j = (size_t)tiny.vocab * tiny.width; j < sizes[TR_P_WTE]; j++) {
        assert_true(f->grads[j] == 0.0f);
    }
    /* loss is a mean cross-entropy over a 13-way softmax: positive and finite */
    assert_true(loss > 0.0f && isfinite(loss));
}

/* With zero gradients, AdamW changes a parameter only through weight decay,
 * which must touch matrices and leave vectors (biases, LayerNorm) alone. */
static void adamw_decay_matrices_only(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    tr_adamw opt = {.lr = 0.1f,
                    .beta1 = 0.9f,
                    .beta2 = 0.95f,
                    .eps = 1e-8f,
                    .weight_decay = 0.5f,
                    .grad_scale = 1.0f,
                    .t = 1};
    float *after = malloc(f->b->num_params * sizeof(float));
    size_t sizes[TR_NUM_PARAM_TENSORS];

    assert_non_null(after);
    tr_model_param_sizes(&tiny, sizes);
    TR_ASSERT_OK(f->b->ops->zero_grads(f->b, &err), &err);
    TR_ASSERT_OK(f->b->ops->adamw_update(f->b, &opt, &err), &err);
    TR_ASSERT_OK(f->b->ops->get_params(f->b, after, &err), &err);
    for (int i = 0; i < TR_NUM_PARAM_TENSORS; i++) {
        size_t j = f->offs[i];
        float want = tr_model_param_is_matrix(i) ? f->params[j] * (1.0f - 0.1f * 0.5f) : f->params[j];
        if (fabsf(after[j] - want) > 1e-6f) {
            fail_msg("%s: %g after decay, want %g", tr_model_param_name(i), after[j], want);
        }
    }
    free(after);
}

/* Two half batches with loss_scale 0.5 accumulate the same gradient as the
 * whole batch with loss_scale 1 (the mean), up to float rounding. */
static void accumulation_matches_full_batch(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    float loss, l1, l2;
    float *acc = malloc(f->b->num_params * sizeof(float));
    double maxdiff = 0.0, maxg = 0.0;

    assert_non_null(acc);
    TR_ASSERT_OK(f->b->ops->zero_grads(f->b, &err), &err);
    TR_ASSERT_OK(f->b->ops->forward_backward(f->b, f->inputs, f->targets, TB, TT, 1.0f, &loss, &err), &err);
    TR_ASSERT_OK(f->b->ops->get_grads(f->b, f->grads, &err), &err);
    TR_ASSERT_OK(f->b->ops->zero_grads(f->b, &err), &err);
    TR_ASSERT_OK(f->b->ops->forward_backward(f->b, f->inputs, f->targets, 1, TT, 0.5f, &l1, &err), &err);
    TR_ASSERT_OK(f->b->ops->forward_backward(f->b, f->inputs + TT, f->targets + TT, 1, TT, 0.5f, &l2, &err),
                 &err);
    TR_ASSERT_OK(f->b->ops->get_grads(f->b, acc, &err), &err);
    for (size_t j = 0; j < f->b->num_params; j++) {
        maxdiff = fmax(maxdiff, fabs((double)acc[j] - f->grads[j]));
        maxg = fmax(maxg, fabs((double)f->grads[j]));
    }
    assert_float_equal(loss, 0.5f * (l1 + l2), 1e-5);
    assert_true(maxg > 1e-2);
    if (maxdiff > 1e-5 * maxg) {
        fail_msg("accumulated gradient differs by %g (largest gradient %g)", maxdiff, maxg);
    }
    free(acc);
}

static void bad_batch_rejected(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    float loss;

    f->inputs[3] = tiny.vocab; /* one past the vocabulary */
    TR_ASSERT_FAILS(f->b->ops->forward_loss(f->b, f->inputs, f->targets, TB, TT, &loss, &err),
                    TROUPE_INVALID_ARGUMENT, &err, "outside the vocabulary");
    f->inputs[3] = 0;
    TR_ASSERT_FAILS(f->b->ops->forward_loss(f->b, f->inputs, f->targets, 1, TT + 1, &loss, &err),
                    TROUPE_INVALID_ARGUMENT, &err, "batch 1x6");
}

/* tr_model_init_params draws large tensors on several threads (model.c,
 * fill_normal): the weights must be exactly those of one sequential draw,
 * including where the next tensor's draw starts. wte here is 4M samples,
 * up to 4 slices (as many as there are CPUs). */
static void init_threads_bit_identical(void **state)
{
    (void)state;
    tr_model_config c = {.layers = 1, .width = 256, .heads = 4, .seq_len = 64, .vocab = 16384};
    size_t sizes[TR_NUM_PARAM_TENSORS], offs[TR_NUM_PARAM_TENSORS];
    c.padded_vocab = tr_model_padded_vocab(c.vocab);
    size_t n = tr_model_param_sizes(&c, sizes);
    tr_model_param_offsets(&c, offs);
    float *p = malloc(n * sizeof(float));
    assert_non_null(p);
    tr_model_init_params(&c, 42, p);
    uint64_t rng = 42;
    size_t wte = (size_t)c.vocab * c.width, bad = 0;
    for (size_t i = 0; i < wte; i++) {
        bad += p[offs[TR_P_WTE] + i] != (float)(0.02 * tr_rng_normal(&rng));
    }
    for (size_t i = 0; i < sizes[TR_P_WPE]; i++) { /* drawn right after wte's real rows */
        bad += p[offs[TR_P_WPE] + i] != (float)(0.02 * tr_rng_normal(&rng));
    }
    free(p);
    assert_int_equal(bad, 0);
}

/* The shard map: over the ranks, every piece element is held exactly once
 * and every tail element by every rank; a rank's runs pack its shard
 * without gaps; the pieces are equal (the collectives need it). */
static void zero_map_covers(void **state)
{
    const tr_zero_range ranges[] = {{0, 7}, {7, 2}, {9, 0}, {9, 4099}, {4108, 96}};
    const int nr = (int)(sizeof(ranges) / sizeof(ranges[0]));
    int count[4204];
    tr_err err = {0};
    (void)state;

    for (int size = 1; size <= 4; size++) {
        memset(count, 0, sizeof(count));
        for (int r = 0; r < size; r++) {
            tr_zero_map m;
            size_t packed = 0;
            TR_ASSERT_OK(tr_zero_map_init(&m, ranges, nr, r, size, &err), &err);
            for (int k = 0; k < m.nruns; k++) {
                assert_true(m.runs[k].soff == packed);
                packed += m.runs[k].len;
                for (size_t j = m.runs[k].off; j < m.runs[k].off + m.runs[k].len; j++) {
                    count[j]++;
                }
            }
            assert_true(packed == m.shard);
            tr_zero_map_fini(&m);
        }
        for (int i = 0; i < nr; i++) {
            size_t even = ranges[i].len / (size_t)size * (size_t)size;
            for (size_t j = 0; j < ranges[i].len; j++) {
                assert_int_equal(count[ranges[i].off + j], j < even ? 1 : size);
            }
        }
    }
    TR_ASSERT_FAILS(tr_zero_map_init(&(tr_zero_map){0}, ranges, nr, 2, 2, &err), TROUPE_INVALID_ARGUMENT,
                    &err, "rank 2 of 2");
}

/* ZeRO-1's point: AdamW's m and v per rank fall to about 1/N. The CPU
 * backend's allocation tally (mem_stats) with dp.zero 1 at N ranks is the
 * unsharded one less 2 x (num_params - shard) floats, and the shard is
 * num_params / N plus fewer than N elements per tensor. */
static void zero_optimizer_memory(void **state)
{
    const tr_model_config m = {
        .layers = 4, .width = 64, .heads = 4, .seq_len = 32, .vocab = 500, .padded_vocab = 512};
    tr_backend_opts o = {.micro_batch = 2, .dp_size = 1};
    tr_backend *b = NULL;
    tr_mem_stats plain, sharded;
    tr_err err = {0};
    (void)state;

    TR_ASSERT_OK(tr_backend_cpu_create(&m, &o, &b, &err), &err);
    b->ops->mem_stats(b, &plain);
    size_t n = b->num_params;
    b->ops->destroy(b);
    for (int size = 2; size <= 4; size++) {
        uint64_t opt_total = 0;
        for (int r = 0; r < size; r++) {
            o = (tr_backend_opts){.micro_batch = 2, .dp_zero = 1, .dp_rank = r, .dp_size = size};
            TR_ASSERT_OK(tr_backend_cpu_create(&m, &o, &b, &err), &err);
            b->ops->mem_stats(b, &sharded);
            b->ops->destroy(b);
            uint64_t saved = plain.in_use_bytes - sharded.in_use_bytes;
            uint64_t opt = 2 * n * sizeof(float) - saved; /* this rank's m and v */
            assert_true(opt >= 2 * (n / (size_t)size) * sizeof(float));
            assert_true(opt <= 2 * (n / (size_t)size + (size_t)size * TR_NUM_PARAM_TENSORS) * sizeof(float));
            opt_total += opt;
            print_message(
                "N=%d rank %d: optimiser state %.1f%% of the unsharded one (in use %llu of %llu bytes)\n",
                size, r, 100.0 * (double)opt / (double)(2 * n * sizeof(float)),
                (unsigned long long)sharded.in_use_bytes, (unsigned long long)plain.in_use_bytes);
        }
        /* over the ranks: the whole state once, plus the tails each rank repeats */
        assert_true(opt_total >= 2 * n * sizeof(float));
        assert_true(opt_total <= 2 * (n + (size_t)size * size * TR_NUM_PARAM_TENSORS) * sizeof(float));
    }
    o = (tr_backend_opts){.micro_batch = 2, .dp_zero = 1, .dp_rank = 3, .dp_size = 3};
    TR_ASSERT_FAILS(tr_backend_cpu_create(&m, &o, &b, &err), TROUPE_INVALID_ARGUMENT, &err, "rank 3 of 3");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(gradcheck, setup, teardown),
        cmocka_unit_test_setup_teardown(padded_vocab_grads_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(adamw_decay_matrices_only, setup, teardown),
        cmocka_unit_test_setup_teardown(accumulation_matches_full_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_batch_rejected, setup, teardown),
        cmocka_unit_test(init_threads_bit_identical),
        cmocka_unit_test(zero_map_covers),
        cmocka_unit_test(zero_optimizer_memory),
    };
    return TR_TEST_MAIN("unit.train.backend", tests, argc, argv);
}
