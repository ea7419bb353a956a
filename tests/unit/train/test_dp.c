/* test_dp.c - data parallelism of the training loop without troupe: ranks
 * are threads joined by an in-process communicator (sums in rank order, the
 * same on every rank), so the math is checked here in isolation and the
 * CPU collective under a real head in integration.dp.* (unit.train.dp_*). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "data.h"
#include "dp.h"
#include "refit.h"
#include "train.h"
#include "train_int.h"
#include "train_test.h"

#define MAX_RANKS 4
#define MAX_STEPS 64

/* ---- an in-process communicator: threads and a barrier -------------------- */

typedef struct shared {
    int size;
    pthread_barrier_t bar;
    float *slots[MAX_RANKS];
    void *root_buf;
} shared;

typedef struct tcomm {
    tr_comm base;
    shared *s;
} tcomm;

static int t_allreduce(tr_comm *c, float *buf, size_t count, tr_comm_op op, tr_err *err)
{
    shared *s = ((tcomm *)c)->s;
    float *sum = malloc((count ? count : 1) * sizeof(float));

    if (sum == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "test comm: no memory");
    }
    s->slots[c->rank] = buf;
    pthread_barrier_wait(&s->bar);
    for (size_t i = 0; i < count; i++) {
        float acc = s->slots[0][i];
        for (int r = 1; r < s->size; r++) {
            acc += s->slots[r][i];
        }
        sum[i] = op == TR_COMM_MEAN ? acc / (float)s->size : acc;
    }
    pthread_barrier_wait(&s->bar); /* everyone has read every slot */
    memcpy(buf, sum, count * sizeof(float));
    free(sum);
    return TROUPE_OK;
}

static int t_broadcast(tr_comm *c, void *buf, size_t bytes, int root, tr_err *err)
{
    shared *s = ((tcomm *)c)->s;
    (void)err;
    if (c->rank == root) {
        s->root_buf = buf;
    }
    pthread_barrier_wait(&s->bar);
    if (c->rank != root) {
        memcpy(buf, s->root_buf, bytes);
    }
    pthread_barrier_wait(&s->bar);
    return TROUPE_OK;
}

static int t_barrier(tr_comm *c, tr_err *err)
{
    (void)err;
    pthread_barrier_wait(&((tcomm *)c)->s->bar);
    return TROUPE_OK;
}

static void t_close(tr_comm *c, int failed)
{
    (void)c;
    (void)failed;
}

/* reduce-scatter: the sums of t_allreduce, kept in this rank's segment only
 * (the rest is made garbage, as a real one leaves scratch there) */
static int t_reduce_scatter(tr_comm *c, float *buf, size_t count, tr_comm_op op, tr_err *err)
{
    size_t per = count / (size_t)c->size;
    float *keep = malloc((per ? per : 1) * sizeof(float));
    int rv;

    if (keep == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "test comm: no memory");
    }
    rv = t_allreduce(c, buf, count, op, err);
    memcpy(keep, buf + per * (size_t)c->rank, per * sizeof(float));
    for (size_t i = 0; i < count; i++) {
        buf[i] = NAN;
    }
    memcpy(buf + per * (size_t)c->rank, keep, per * sizeof(float));
    free(keep);
    return rv;
}

static int t_allgather(tr_comm *c, float *buf, size_t count, tr_err *err)
{
    shared *s = ((tcomm *)c)->s;
    size_t per = count / (size_t)c->size;
    (void)err;
    s->slots[c->rank] = buf;
    pthread_barrier_wait(&s->bar);
    for (int r = 0; r < s->size; r++) {
        if (r != c->rank) {
            memcpy(buf + per * (size_t)r, s->slots[r] + per * (size_t)r, per * sizeof(float));
        }
    }
    pthread_barrier_wait(&s->bar);
    return TROUPE_OK;
}

static const tr_comm_ops t_ops = {
    "test", t_allreduce, t_broadcast, t_barrier,        NULL,        NULL, t_close,
    NULL,   NULL,        NULL,        t_reduce_scatter, t_allgather, NULL, NULL, NULL};

/* The same with broadcast_device: "device memory" is host memory here, so
 * the refit's device path runs through refit.c exactly as on NCCL. */
static int t_broadcast_device(tr_comm *c, void *buf, size_t count, tr_comm_dtype dtype, int root, tr_err *err)
{
    return t_broadcast(c, buf, count * (dtype == TR_COMM_BF16 ? 2 : sizeof(float)), root, err);
}

static const tr_comm_ops t_dev_ops = {"test-device", t_allreduce, t_broadcast, t_barrier, NULL,
                                      NULL,          t_close,     NULL,        NULL,      t_broadcast_device,
                                      NULL,          NULL,        NULL,        NULL,      NULL};

/* ---- fixture ----------------------------------------------------------------- */

typedef struct record {
    int n;
    double loss[MAX_STEPS], norm[MAX_STEPS], val[MAX_STEPS];
    int stop_after; /* 0 = never */
} record;

typedef struct fixture {
    char dir[64], data[128], ckdir[128];
    tr_train_config cfg;
} fixture;

static int on_step(const tr_train_metrics *m, void *user)
{
    record *r = user;
    if (r->n < MAX_STEPS) {
        r->loss[r->n] = m->loss;
        r->norm[r->n] = m->grad_norm;
        r->val[r->n] = m->val_loss;
        r->n++;
    }
    return r->stop_after > 0 && m->step == r->stop_after;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    tr_err err = {0};

    assert_non_null(f);
    snprintf(f->dir, sizeof(f->dir), "/tmp/tr-dp-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->data, sizeof(f->data), "%s/data.tok", f->dir);
    snprintf(f->ckdir, sizeof(f->ckdir), "%s/ck", f->dir);
    TR_ASSERT_OK(tr_data_make_learnable(f->data, 64, 32768, 3, &err), &err);
    TR_ASSERT_OK(tr_train_config_init(&f->cfg, &err), &err);
    TR_ASSERT_OK(tr_cfg_set(tr_train_config_table, &f->cfg, "data.path", f->data, "test", &err), &err);
    TR_ASSERT_OK(tr_cfg_set(tr_train_config_table, &f->cfg, "device", "cpu", "test", &err), &err);
    f->cfg.layers = 2;
    f->cfg.width = 32;
    f->cfg.heads = 4;
    f->cfg.seq_len = 16;
    f->cfg.micro_batch = 2;
    f->cfg.accum_steps = 2;
    f->cfg.lr = 3e-3;
    f->cfg.warmup_steps = 3;
    f->cfg.grad_clip = 0.5; /* below the early norms: clipping is active */
    f->cfg.eval_every = 5;
    f->cfg.eval_batches = 3;
    f->cfg.steps = 16;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    train_fixture_cleanup(&f->cfg, f->dir);
    free(f);
    return 0;
}

/* ---- running N ranks as threads ----------------------------------------------- */

typedef struct rank_run {
    tr_train_config cfg; /* a shallow copy: strings are the fixture's */
    tcomm comm;
    record rec;
    tr_err err;
    int rv;
} rank_run;

static void *rank_main(void *arg)
{
    rank_run *rr = arg;
    rr->rv = tr_train_run(&rr->cfg, on_step, &rr->rec, &rr->err);
    return NULL;
}

/* tweak, when set, changes a rank's copy of the config before it runs. */
static void (*tweak)(int rank, tr_train_config *cfg);

/* run_ranks trains n ranks of f's config; stop_after (0 = never) is given to
 * rank 0 only: the ranks must agree to stop together. */
static void run_ranks(fixture *f, int n, int stop_after, rank_run *runs)
{
    shared s = {.size = n};
    pthread_t th[MAX_RANKS];

    assert_int_equal(pthread_barrier_init(&s.bar, NULL, (unsigned)n), 0);
    for (int r = 0; r < n; r++) {
        runs[r] = (rank_run){.cfg = f->cfg};
        runs[r].comm = (tcomm){.base = {.ops = &t_ops, .rank = r, .size = n, .timeout_ms = 1000}, .s = &s};
        runs[r].cfg.comm = &runs[r].comm.base;
        runs[r].rec.stop_after = r == 0 ? stop_after : 0;
        if (tweak != NULL) {
            tweak(r, &runs[r].cfg);
        }
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &runs[r]), 0);
    }
    for (int r = 0; r < n; r++) {
        pthread_join(th[r], NULL);
    }
    pthread_barrier_destroy(&s.bar);
}

static double rel(double a, double b)
{
    return fabs(a - b) / fmax(1.0, fabs(b));
}

/* expect_curve: every rank's steps equal ref's from step `from` (0-based)
 * within tol, and every rank's figures are rank 0's, bit for bit. */
static void expect_curve(const record *ref, int from, const rank_run *runs, int n, double tol,
                         const char *what)
{
    double worst = 0.0;
    for (int r = 0; r < n; r++) {
        const record *g = &runs[r].rec;
        for (int i = 0; i < g->n; i++) {
            const double a[3] = {g->loss[i], g->norm[i], g->val[i]};
            const double b[3] = {ref->loss[from + i], ref->norm[from + i], ref->val[from + i]};
            for (int k = 0; k < 3; k++) {
                if (isnan(a[k]) != isnan(b[k]) || (!isnan(b[k]) && rel(a[k], b[k]) > tol)) {
                    fail_msg("%s: rank %d step %d figure %d: %.9g, reference %.9g", what, r, from + i + 1, k,
                             a[k], b[k]);
                }
                worst = isnan(b[k]) ? worst : fmax(worst, rel(a[k], b[k]));
            }
            if (memcmp(&g->loss[i], &runs[0].rec.loss[i], sizeof(double)) != 0 ||
                memcmp(&g->norm[i], &runs[0].rec.norm[i], sizeof(double)) != 0) {
                fail_msg("%s: rank %d step %d differs from rank 0", what, r, from + i + 1);
            }
        }
    }
    print_message("%s: %d ranks x %d steps, max relative difference %.3g\n", what, n, runs[0].rec.n, worst);
}

/* ---- cases -------------------------------------------------------------------- */

/* The shards of N ranks are the global batch, in order, and every rank's
 * sampler ends where one drawing the global batch does. */
static void dp_shard_matches_batch(void **state)
{
    fixture *f = *state;
    tr_data d;
    tr_err err = {0};
    const int T = 8, B = 2, N = 3;
    int32_t in[6 * 8], tg[6 * 8], sin[2 * 8], stg[2 * 8];
    uint64_t rng0 = 42, rngs[3] = {42, 42, 42};

    TR_ASSERT_OK(tr_data_open(&d, f->data, "auto", 0.1, T, &err), &err);
    tr_data_train_batch(&d, &rng0, B * N, T, in, tg);
    for (int r = 0; r < N; r++) {
        tr_data_train_shard(&d, &rngs[r], B * N, r * B, B, T, sin, stg);
        assert_memory_equal(sin, in + r * B * T, sizeof(sin));
        assert_memory_equal(stg, tg + r * B * T, sizeof(stg));
        assert_true(rngs[r] == rng0);
    }
    {
        /* validation: windows 3..5 of batch 1 of 6 */
        int32_t part[3 * 8], tgp[3 * 8];
        tr_data_val_batch(&d, 1, 6, T, in, tg);
        tr_data_val_shard(&d, 1, 6, 3, 3, T, part, tgp);
        assert_memory_equal(part, in + 3 * T, sizeof(part));
        assert_memory_equal(tgp, tg + 3 * T, sizeof(tgp));
    }
    tr_data_close(&d);
}

/* N = 2, 3, 4 thread ranks follow the curve of one process with micro_batch
 * N*B (accumulation 2, clipping on, validation every 5): loss, norm and
 * validation loss within 1e-5, every rank identical to rank 0. */
static void dp_threads_match_global_batch(void **state)
{
    fixture *f = *state;
    rank_run runs[MAX_RANKS];
    tr_err err = {0};
    int clipped = 0;

    for (int n = 2; n <= MAX_RANKS; n++) {
        record ref = {0};
        char what[64];
        f->cfg.micro_batch = 2 * n;
        TR_ASSERT_OK(tr_train_run(&f->cfg, on_step, &ref, &err), &err);
        for (int i = 0; i < ref.n; i++) {
            clipped += ref.norm[i] > f->cfg.grad_clip;
        }
        f->cfg.micro_batch = 2;
        run_ranks(f, n, 0, runs);
        for (int r = 0; r < n; r++) {
            TR_ASSERT_OK(runs[r].rv, &runs[r].err);
            assert_int_equal(runs[r].rec.n, f->cfg.steps);
        }
        snprintf(what, sizeof(what), "N=%d vs micro_batch %d", n, 2 * n);
        expect_curve(&ref, 0, runs, n, 1e-5, what);
    }
    assert_true(clipped > 0);
}

/* Two ranks stopped by rank 0 alone at step 6 (both stop, both checkpoint:
 * rank 0 the model, each its data position) resume to the unbroken curve,
 * bit for bit; a missing data position fails that rank NOT_FOUND and the
 * other ABORTED naming the count. */
static void dp_threads_resume(void **state)
{
    fixture *f = *state;
    rank_run full[2], first[2], second[2];
    record ref = {0};
    tr_err err = {0};
    char pos[256];

    f->cfg.steps = 12;
    run_ranks(f, 2, 0, full);
    TR_ASSERT_OK(full[0].rv, &full[0].err);
    for (int i = 0; i < 12; i++) {
        ref.loss[i] = full[0].rec.loss[i];
        ref.norm[i] = full[0].rec.norm[i];
        ref.val[i] = full[0].rec.val[i];
    }
    TR_ASSERT_OK(tr_cfg_set(tr_train_config_table, &f->cfg, "checkpoint.dir", f->ckdir, "test", &err), &err);
    f->cfg.checkpoint_every = 4;
    run_ranks(f, 2, 6, first);
    for (int r = 0; r < 2; r++) {
        TR_ASSERT_FAILS(first[r].rv, TROUPE_CANCELLED, &first[r].err, "after step 6");
        assert_int_equal(first[r].rec.n, 6);
    }
    run_ranks(f, 2, 0, second);
    for (int r = 0; r < 2; r++) {
        TR_ASSERT_OK(second[r].rv, &second[r].err);
        assert_int_equal(second[r].rec.n, 6);
    }
    expect_curve(&ref, 6, second, 2, 0.0, "resumed at step 6");

    /* resume again, once a rank's data position is gone: it is finished, so
     * start over with more steps to make it read the positions */
    f->cfg.steps = 14;
    tr_dp_pos_path(f->ckdir, 1, pos, sizeof(pos));
    assert_int_equal(unlink(pos), 0);
    run_ranks(f, 2, 0, second);
    TR_ASSERT_FAILS(second[1].rv, TROUPE_NOT_FOUND, &second[1].err, "data-rank-1.pos");
    TR_ASSERT_FAILS(second[0].rv, TROUPE_ABORTED, &second[0].err,
                    "1 other rank could not find its data position");
}

/* ---- ZeRO-1 -------------------------------------------------------------------- */

static int64_t zero_setting;

static void with_zero(int rank, tr_train_config *cfg)
{
    (void)rank;
    cfg->dp_zero = zero_setting;
}

/* run_zero runs n ranks with dp.zero z and micro-batch B. */
static void run_zero(fixture *f, int n, int B, int64_t z, int stop_after, rank_run *runs)
{
    f->cfg.micro_batch = B;
    zero_setting = z;
    tweak = with_zero;
    run_ranks(f, n, stop_after, runs);
    tweak = NULL;
}

static void copy_record(const rank_run *run, record *out)
{
    *out = run->rec;
}

/* dp.zero 1 follows dp.zero 0's curve at 2 and 3 ranks (the 3-rank shards
 * are uneven: tensors whose size is not a multiple of 3 leave a tail every
 * rank updates): loss, norm, validation within the DP tests' 1e-5, every
 * rank identical to rank 0. Clipping is active, so the sharded norm counts. */
static void dp_zero_matches_dp(void **state)
{
    fixture *f = *state;
    rank_run plain[MAX_RANKS], zero[MAX_RANKS];
    int uneven = 0;

    for (int n = 2; n <= 3; n++) {
        char what[64];
        record ref;
        run_zero(f, n, 2, 0, 0, plain);
        run_zero(f, n, 2, 1, 0, zero);
        for (int r = 0; r < n; r++) {
            TR_ASSERT_OK(plain[r].rv, &plain[r].err);
            TR_ASSERT_OK(zero[r].rv, &zero[r].err);
            assert_int_equal(zero[r].rec.n, f->cfg.steps);
        }
        copy_record(&plain[0], &ref);
        snprintf(what, sizeof(what), "dp.zero 1 vs 0 at N=%d", n);
        expect_curve(&ref, 0, zero, n, 1e-5, what);
    }
    {
        /* the model of this fixture does have tensors with tails at 3 ranks */
        tr_model_config m = {
            .layers = 2, .width = 32, .heads = 4, .seq_len = 16, .vocab = 64, .padded_vocab = 128};
        size_t sizes[TR_NUM_PARAM_TENSORS];
        tr_model_param_sizes(&m, sizes);
        for (int i = 0; i < TR_NUM_PARAM_TENSORS; i++) {
            uneven += sizes[i] % 3 != 0;
        }
        assert_true(uneven > 0);
    }
}

/* expect_resumed: runs (resumed at step 6) continue ref's curve. */
static void expect_resumed(const record *ref, rank_run *runs, int n, const char *what)
{
    for (int r = 0; r < n; r++) {
        TR_ASSERT_OK(runs[r].rv, &runs[r].err);
        assert_int_equal(runs[r].rec.n, 6);
    }
    expect_curve(ref, 6, runs, n, 1e-5, what);
}

/* A checkpoint written by 2 ZeRO-1 ranks (micro-batch 3) resumes on 3
 * plain ranks (micro-batch 2: the same global batch) and the curve goes on
 * as if unbroken; and the other way round. The file holds the whole state:
 * a rank resuming with only its own shard of m and v would leave the rest
 * zero and leave the curve. */
static void dp_zero_checkpoint_across(void **state)
{
    fixture *f = *state;
    rank_run full[3], first[3], second[3];
    record ref;
    tr_err err = {0};
    char dir2[160];

    f->cfg.steps = 12;
    f->cfg.checkpoint_every = 3;
    run_zero(f, 2, 3, 0, 0, full);
    TR_ASSERT_OK(full[0].rv, &full[0].err);
    copy_record(&full[0], &ref);
    assert_int_equal(ref.n, 12);

    TR_ASSERT_OK(tr_cfg_set(tr_train_config_table, &f->cfg, "checkpoint.dir", f->ckdir, "test", &err), &err);
    run_zero(f, 2, 3, 1, 6, first);
    for (int r = 0; r < 2; r++) {
        TR_ASSERT_FAILS(first[r].rv, TROUPE_CANCELLED, &first[r].err, "after step 6");
    }
    run_zero(f, 3, 2, 0, 0, second);
    expect_resumed(&ref, second, 3, "zero 1 at 2 ranks -> zero 0 at 3 ranks");

    snprintf(dir2, sizeof(dir2), "%s/ck2", f->dir);
    TR_ASSERT_OK(tr_cfg_set(tr_train_config_table, &f->cfg, "checkpoint.dir", dir2, "test", &err), &err);
    run_zero(f, 3, 2, 0, 6, first);
    for (int r = 0; r < 3; r++) {
        TR_ASSERT_FAILS(first[r].rv, TROUPE_CANCELLED, &first[r].err, "after step 6");
    }
    run_zero(f, 2, 3, 1, 0, second);
    expect_resumed(&ref, second, 2, "zero 0 at 3 ranks -> zero 1 at 2 ranks");

    /* and ZeRO-1 to ZeRO-1 on another world size */
    snprintf(dir2, sizeof(dir2), "%s/ck3", f->dir);
    TR_ASSERT_OK(tr_cfg_set(tr_train_config_table, &f->cfg, "checkpoint.dir", dir2, "test", &err), &err);
    run_zero(f, 3, 2, 1, 6, first);
    run_zero(f, 2, 3, 1, 0, second);
    expect_resumed(&ref, second, 2, "zero 1 at 3 ranks -> zero 1 at 2 ranks");
}

static char other_data[128];

static void rank1_bigger_batch(int rank, tr_train_config *cfg)
{
    cfg->micro_batch = rank == 1 ? 3 : cfg->micro_batch;
}

static void rank2_other_data(int rank, tr_train_config *cfg)
{
    cfg->data_path = rank == 2 ? other_data : cfg->data_path;
}

/* Ranks that disagree on a setting, or read other data, stop before the
 * first step: the odd one names the setting and both values, the others
 * are ABORTED counting it. */
static void dp_settings_must_match(void **state)
{
    fixture *f = *state;
    rank_run runs[3];
    tr_err err = {0};

    tweak = rank1_bigger_batch;
    run_ranks(f, 2, 0, runs);
    TR_ASSERT_FAILS(
        runs[1].rv, TROUPE_FAILED_PRECONDITION, &runs[1].err,
        "train.micro_batch is 3 on rank 1, 2 on rank 0: data parallelism needs the same settings");
    TR_ASSERT_FAILS(runs[0].rv, TROUPE_ABORTED, &runs[0].err,
                    "1 other rank could not match rank 0's settings");
    assert_int_equal(runs[0].rec.n + runs[1].rec.n, 0);

    snprintf(other_data, sizeof(other_data), "%s/other.tok", f->dir);
    TR_ASSERT_OK(tr_data_make_learnable(other_data, 64, 32768, 4, &err), &err); /* same size, other seed */
    tweak = rank2_other_data;
    run_ranks(f, 3, 0, runs);
    tweak = NULL;
    TR_ASSERT_FAILS(runs[2].rv, TROUPE_FAILED_PRECONDITION, &runs[2].err, "data fingerprint");
    TR_ASSERT_FAILS(runs[0].rv, TROUPE_ABORTED, &runs[0].err, "1 other rank");
    TR_ASSERT_FAILS(runs[1].rv, TROUPE_ABORTED, &runs[1].err, "1 other rank");
}

/* The weights hash: the same bits hash the same, any one flipped bit (in
 * the four-lane words or the tail past them) or two swapped values do not. */
static void dp_params_hash(void **state)
{
    float a[37], b[37];
    uint64_t h;
    (void)state;

    for (int i = 0; i < 37; i++) {
        a[i] = (float)i * 0.25f - 3.0f;
    }
    memcpy(b, a, sizeof(a));
    h = tr_dp_params_hash(a, 37);
    assert_true(tr_dp_params_hash(b, 37) == h);
    assert_true(tr_dp_params_hash(a, 36) != h); /* the length counts */
    assert_true(tr_dp_params_hash(NULL, 0) == tr_dp_params_hash(a, 0));
    for (int i = 0; i < 37; i += 9) { /* words 0..7 are in the lanes; 8 and the last float are tail */
        for (int bit = 0; bit < 32; bit += 31) {
            uint32_t u;
            memcpy(&u, &b[i], 4);
            u ^= 1u << bit;
            memcpy(&b[i], &u, 4);
            assert_true(tr_dp_params_hash(b, 37) != h);
            memcpy(b, a, sizeof(a));
        }
    }
    b[3] = a[4];
    b[4] = a[3];
    assert_true(tr_dp_params_hash(b, 37) != h);
}

typedef struct hash_rank {
    tcomm comm;
    uint64_t hash;
    tr_err err;
    int rv;
} hash_rank;

static void *hash_rank_main(void *arg)
{
    hash_rank *hr = arg;
    hr->rv = tr_dp_check_same_params(&hr->comm.base, hr->hash, "initial weights", &hr->err);
    return NULL;
}

/* check_hashes runs tr_dp_check_same_params on n thread ranks with hashes h. */
static void check_hashes(int n, const uint64_t *h, hash_rank *hr)
{
    shared s = {.size = n};
    pthread_t th[MAX_RANKS];

    assert_int_equal(pthread_barrier_init(&s.bar, NULL, (unsigned)n), 0);
    for (int r = 0; r < n; r++) {
        hr[r] = (hash_rank){.comm = {.base = {.ops = &t_ops, .rank = r, .size = n, .timeout_ms = 1000}, .s = &s},
                            .hash = h[r]};
        assert_int_equal(pthread_create(&th[r], NULL, hash_rank_main, &hr[r]), 0);
    }
    for (int r = 0; r < n; r++) {
        pthread_join(th[r], NULL);
    }
    pthread_barrier_destroy(&s.bar);
}

/* Every rank draws its own initial weights: equal hashes pass everywhere; a
 * rank whose copy differs fails with DATA_LOSS naming both hashes, and the
 * others are ABORTED counting it instead of training a different model. */
static void dp_same_params_checked(void **state)
{
    const uint64_t same[3] = {0x1234, 0x1234, 0x1234}, odd[3] = {0x1234, 0xabcd, 0x1234};
    hash_rank hr[3];
    (void)state;

    check_hashes(3, same, hr);
    for (int r = 0; r < 3; r++) {
        TR_ASSERT_OK(hr[r].rv, &hr[r].err);
    }
    check_hashes(3, odd, hr);
    TR_ASSERT_FAILS(hr[1].rv, TROUPE_DATA_LOSS, &hr[1].err,
                    "rank 1's initial weights hash to 000000000000abcd, rank 0's to 0000000000001234");
    TR_ASSERT_FAILS(hr[0].rv, TROUPE_ABORTED, &hr[0].err, "1 other rank could not hold rank 0's weights");
    TR_ASSERT_FAILS(hr[2].rv, TROUPE_ABORTED, &hr[2].err, "1 other rank could not hold rank 0's weights");
}

/* The position file: the step's entry or the one before, and clear errors
 * for a missing file, another layout, an unknown step and garbage. */
static void dp_position_file(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    uint64_t rng = 0;
    char path[256];
    FILE *fp;

    TR_ASSERT_OK(tr_dp_pos_write(f->dir, 2, 4, 8, 40, 0xfeedfacecafebeefull, 20, 77, &err), &err);
    TR_ASSERT_OK(tr_dp_pos_read(f->dir, 2, 4, 8, 40, &rng, &err), &err);
    assert_true(rng == 0xfeedfacecafebeefull);
    TR_ASSERT_OK(tr_dp_pos_read(f->dir, 2, 4, 8, 20, &rng, &err), &err);
    assert_true(rng == 77);
    TR_ASSERT_FAILS(tr_dp_pos_read(f->dir, 2, 4, 8, 60, &rng, &err), TROUPE_FAILED_PRECONDITION, &err,
                    "holds steps 40 and 20, the model checkpoint is at step 60");
    TR_ASSERT_FAILS(tr_dp_pos_read(f->dir, 2, 3, 8, 40, &rng, &err), TROUPE_FAILED_PRECONDITION, &err,
                    "world size 4 and micro-batch 8, this one has 3 and 8");
    TR_ASSERT_FAILS(tr_dp_pos_read(f->dir, 1, 4, 8, 40, &rng, &err), TROUPE_NOT_FOUND, &err,
                    "data-rank-1.pos");
    /* another world size with the same global batch: rank 0's file serves
     * every rank (all advance one sampler); another global batch does not */
    TR_ASSERT_OK(tr_dp_pos_write(f->dir, 0, 4, 8, 40, 0x5eed, 20, 78, &err), &err);
    rng = 0;
    TR_ASSERT_OK(tr_dp_pos_read(f->dir, 5, 8, 4, 40, &rng, &err), &err);
    assert_true(rng == 0x5eed);
    TR_ASSERT_OK(tr_dp_pos_read(f->dir, 2, 2, 16, 20, &rng, &err), &err);
    assert_true(rng == 78);
    TR_ASSERT_FAILS(tr_dp_pos_read(f->dir, 2, 3, 8, 40, &rng, &err), TROUPE_FAILED_PRECONDITION, &err,
                    "world size 4 and micro-batch 8, this one has 3 and 8");
    tr_dp_pos_path(f->dir, 3, path, sizeof(path));
    assert_non_null(fp = fopen(path, "w"));
    fputs("troupe-train data position 1\nrank 3\nworld_size x\n", fp);
    fclose(fp);
    TR_ASSERT_FAILS(tr_dp_pos_read(f->dir, 3, 4, 8, 40, &rng, &err), TROUPE_DATA_LOSS, &err,
                    "not a version 1 position file of rank 3");
    TR_ASSERT_FAILS(tr_dp_pos_write("/nonexistent/dir", 0, 1, 1, 1, 1, 0, 0, &err), TROUPE_PERMISSION_DENIED,
                    &err, "cannot create");
}

/* ---- weight refit: policy ranks and a generation worker as threads ---------- */

#define MAX_REFITS 16

typedef struct refit_rec {
    int n;
    tr_refit_stats st[MAX_REFITS];
} refit_rec;

static void rec_refit(const tr_refit_stats *st, int rank, void *user)
{
    refit_rec *r = user;
    (void)rank;
    if (r->n < MAX_REFITS) {
        r->st[r->n++] = *st;
    }
}

typedef struct refit_run {
    tr_train_config cfg;
    tcomm dp, refit;
    record rec;
    refit_rec refits;
    tr_refit_link link;
    tr_err err;
    int rv, generation;
} refit_run;

static void *refit_main(void *arg)
{
    refit_run *rr = arg;
    if (rr->generation) {
        rr->link = (tr_refit_link){.comm = &rr->refit.base, .on_refit = rec_refit, .user = &rr->refits};
        rr->rv = tr_generation_run(&rr->cfg, &rr->link, &rr->err);
    } else {
        rr->rv = tr_train_run(&rr->cfg, on_step, &rr->rec, &rr->err);
    }
    return NULL;
}

/* refit_comm_ops: the refit communicator's table in run_refit. */
static const tr_comm_ops *refit_comm_ops = &t_ops;

/* run_refit: np policy ranks (data-parallel when np > 1) and ng generation
 * workers, the refit communicator across all of them (policy ranks first). */
static void run_refit(fixture *f, int np, int ng, refit_run *runs)
{
    shared dp = {.size = np}, rf = {.size = np + ng};
    pthread_t th[MAX_RANKS];

    assert_true(np + ng <= MAX_RANKS);
    assert_int_equal(pthread_barrier_init(&dp.bar, NULL, (unsigned)np), 0);
    assert_int_equal(pthread_barrier_init(&rf.bar, NULL, (unsigned)(np + ng)), 0);
    for (int r = 0; r < np + ng; r++) {
        runs[r] = (refit_run){.cfg = f->cfg, .generation = r >= np};
        runs[r].refit = (tcomm){
            .base = {.ops = refit_comm_ops, .rank = r, .size = np + ng, .timeout_ms = 1000}, .s = &rf};
        runs[r].cfg.refit = &runs[r].refit.base;
        runs[r].cfg.on_refit = rec_refit;
        runs[r].cfg.on_refit_user = &runs[r].refits;
        if (np > 1 && r < np) {
            runs[r].dp = (tcomm){.base = {.ops = &t_ops, .rank = r, .size = np, .timeout_ms = 1000}, .s = &dp};
            runs[r].cfg.comm = &runs[r].dp.base;
        }
        if (tweak != NULL) {
            tweak(r, &runs[r].cfg);
        }
        assert_int_equal(pthread_create(&th[r], NULL, refit_main, &runs[r]), 0);
    }
    for (int r = 0; r < np + ng; r++) {
        pthread_join(th[r], NULL);
    }
    pthread_barrier_destroy(&dp.bar);
    pthread_barrier_destroy(&rf.bar);
}

/* Two data-parallel policy ranks refit one generation worker every 5 steps
 * of 16 and at the end: refits at 5, 10, 15 and 16 (final); the generation
 * worker holds exactly rank 0's weights each time (hash of what its backend
 * holds), its validation loss equals the policy's own at that step within
 * 1e-6 (evaluated 2 windows at a time instead of the ranks' shares), and
 * rank 1 (which relays and checks its own copy) reports the same hash. */
static void refit_threads(void **state)
{
    fixture *f = *state;
    refit_run runs[3];
    const int64_t want[] = {5, 10, 15, 16};

    f->cfg.refit_every = 5;
    run_refit(f, 2, 1, runs);
    for (int r = 0; r < 3; r++) {
        TR_ASSERT_OK(runs[r].rv, &runs[r].err);
        assert_int_equal(runs[r].refits.n, 4);
    }
    for (int i = 0; i < 4; i++) {
        const tr_refit_stats *p = &runs[0].refits.st[i], *q = &runs[1].refits.st[i], *g = &runs[2].refits.st[i];
        double pv = runs[0].rec.val[want[i] - 1];
        assert_int_equal(p->step, want[i]);
        assert_int_equal(g->step, want[i]);
        assert_int_equal(g->final, i == 3);
        assert_true(g->hash == p->hash && q->hash == p->hash);
        assert_true(g->bytes > 0 && g->bytes == p->bytes);
        assert_int_equal(p->n_gen_losses, 1);
        assert_false(isnan(pv));
        if (rel(g->val_loss, pv) > 1e-6 || rel(p->gen_val_loss[0], pv) > 1e-6) {
            fail_msg("refit at step %lld: generation val_loss %.9g (reported %.9g), policy %.9g",
                     (long long)want[i], g->val_loss, p->gen_val_loss[0], pv);
        }
        if (i > 0) {
            assert_true(p->hash != runs[0].refits.st[i - 1].hash);
        }
    }
    print_message("4 refits, generation val_loss within 1e-6 of the policy's, hashes equal\n");
}

static void generation_every_7(int rank, tr_train_config *cfg)
{
    cfg->refit_every = rank == 1 ? 7 : cfg->refit_every;
}

/* Both sides must agree on refit.every: the generation worker names it. */
static void refit_settings_must_match(void **state)
{
    fixture *f = *state;
    refit_run runs[2];

    f->cfg.refit_every = 5;
    tweak = generation_every_7;
    run_refit(f, 1, 1, runs);
    tweak = NULL;
    TR_ASSERT_FAILS(runs[1].rv, TROUPE_FAILED_PRECONDITION, &runs[1].err,
                    "refit.every is 7 on rank 1, 5 on rank 0: the refit needs the same settings");
    TR_ASSERT_FAILS(runs[0].rv, TROUPE_ABORTED, &runs[0].err, "1 other rank could not match");
    assert_int_equal(runs[0].rec.n, 0);
}

/* ---- the device path, on a stand-in backend ------------------------------------- */

/* fake_dev wraps the CPU backend and offers the refit ops on a "device"
 * vector in host memory: f32 is the backend's weights as get_params gives
 * them, bf16 their round-to-nearest-even bf16 copy (what a bf16 CUDA
 * backend computes with). After a bf16 refit the backend holds the widened
 * bf16 values, as the CUDA backend's master then does. */
typedef struct fake_dev {
    tr_backend base;
    tr_backend *in;
    float *f32;
    uint16_t *bf16;
    int diverged; /* its weights differ from the other ranks' in one value (refit_hash sees it) */
} fake_dev;

static int fake_corrupt; /* refit_taken flips a bit of what it takes (the next refit only) */

static tr_backend *IN(tr_backend *b)
{
    return ((fake_dev *)b)->in;
}

static void fake_destroy(tr_backend *b)
{
    fake_dev *d = (fake_dev *)b;
    d->in->ops->destroy(d->in);
    free(d->f32);
    free(d->bf16);
    free(d);
}
static int fake_set_params(tr_backend *b, const float *p, tr_err *e)
{
    return IN(b)->ops->set_params(IN(b), p, e);
}
static int fake_get_params(tr_backend *b, float *p, tr_err *e)
{
    return IN(b)->ops->get_params(IN(b), p, e);
}
static int fake_zero_grads(tr_backend *b, tr_err *e)
{
    return IN(b)->ops->zero_grads(IN(b), e);
}
static int fake_fb(tr_backend *b, const int32_t *i, const int32_t *t, int B, int T, float s, float *l,
                   tr_err *e)
{
    return IN(b)->ops->forward_backward(IN(b), i, t, B, T, s, l, e);
}
static int fake_fl(tr_backend *b, const int32_t *i, const int32_t *t, int B, int T, float *l, tr_err *e)
{
    return IN(b)->ops->forward_loss(IN(b), i, t, B, T, l, e);
}
static int fake_norm(tr_backend *b, float *n, tr_err *e)
{
    return IN(b)->ops->grad_norm(IN(b), n, e);
}
static int fake_get_grads(tr_backend *b, float *g, tr_err *e)
{
    return IN(b)->ops->get_grads(IN(b), g, e);
}
static int fake_adamw(tr_backend *b, const tr_adamw *o, tr_err *e)
{
    return IN(b)->ops->adamw_update(IN(b), o, e);
}
static int fake_get_opt(tr_backend *b, float *m, float *v, tr_err *e)
{
    return IN(b)->ops->get_opt_state(IN(b), m, v, e);
}
static int fake_set_opt(tr_backend *b, const float *m, const float *v, tr_err *e)
{
    return IN(b)->ops->set_opt_state(IN(b), m, v, e);
}
static void fake_mem(tr_backend *b, tr_mem_stats *o)
{
    IN(b)->ops->mem_stats(IN(b), o);
}
static void fake_phases(tr_backend *b, tr_phase_times *o)
{
    IN(b)->ops->phase_times(IN(b), o);
}
static int fake_sync(tr_backend *b, tr_err *e)
{
    return IN(b)->ops->sync(IN(b), e);
}
static int fake_allreduce(tr_backend *b, tr_comm *c, tr_err *e)
{
    return IN(b)->ops->allreduce_grads(IN(b), c, e);
}

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* fake_refresh: f32 and bf16 from what the backend holds. */
static int fake_refresh(fake_dev *d, tr_err *e)
{
    int rv = d->in->ops->get_params(d->in, d->f32, e);
    if (d->diverged) {
        d->f32[1] += 1.0f;
    }
    for (size_t i = 0; rv == TROUPE_OK && i < d->base.num_params; i++) {
        d->bf16[i] = to_bf16(d->f32[i]);
    }
    return rv;
}

static int fake_refit_params(tr_backend *b, tr_comm_dtype dt, void **dev, tr_err *e)
{
    fake_dev *d = (fake_dev *)b;
    int rv = fake_refresh(d, e);
    *dev = rv != TROUPE_OK ? NULL : dt == TR_COMM_BF16 ? (void *)d->bf16 : (void *)d->f32;
    return rv;
}

static int fake_refit_taken(tr_backend *b, tr_comm_dtype dt, tr_err *e)
{
    fake_dev *d = (fake_dev *)b;
    if (fake_corrupt) {
        fake_corrupt = 0;
        d->f32[3] = -d->f32[3];
        d->bf16[3] ^= 0x8000u;
    }
    for (size_t i = 0; dt == TR_COMM_BF16 && i < b->num_params; i++) {
        uint32_t u = (uint32_t)d->bf16[i] << 16;
        memcpy(&d->f32[i], &u, sizeof(u));
    }
    return d->in->ops->set_params(d->in, d->f32, e);
}

static int fake_refit_hash(tr_backend *b, tr_comm_dtype dt, uint64_t *h, tr_err *e)
{
    fake_dev *d = (fake_dev *)b;
    int rv = fake_refresh(d, e);
    *h = dt == TR_COMM_BF16 ? tr_refit_mix_hash(d->bf16, b->num_params * 2)
                            : tr_refit_mix_hash(d->f32, b->num_params * sizeof(float));
    return rv;
}

static const tr_backend_ops fake_ops = {
    .name = "fake-device",
    .destroy = fake_destroy,
    .set_params = fake_set_params,
    .get_params = fake_get_params,
    .zero_grads = fake_zero_grads,
    .forward_backward = fake_fb,
    .forward_loss = fake_fl,
    .grad_norm = fake_norm,
    .get_grads = fake_get_grads,
    .adamw_update = fake_adamw,
    .get_opt_state = fake_get_opt,
    .set_opt_state = fake_set_opt,
    .mem_stats = fake_mem,
    .phase_times = fake_phases,
    .sync = fake_sync,
    .allreduce_grads = fake_allreduce,
    .refit_params = fake_refit_params,
    .refit_taken = fake_refit_taken,
    .refit_hash = fake_refit_hash,
};

/* fake_create is tr_train_config.create_cuda for device "cuda". */
static int fake_create(const tr_model_config *cfg, const tr_backend_opts *opts, tr_backend **out, tr_err *err)
{
    fake_dev *d = calloc(1, sizeof(*d));
    int rv;

    *out = NULL;
    if (d == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "fake device: no memory");
    }
    if ((rv = tr_backend_cpu_create(cfg, opts, &d->in, err)) != TROUPE_OK) {
        free(d);
        return rv;
    }
    d->base = *d->in;
    d->base.ops = &fake_ops;
    d->f32 = calloc(d->base.num_params, sizeof(float));
    d->bf16 = calloc(d->base.num_params, sizeof(uint16_t));
    if (d->f32 == NULL || d->bf16 == NULL) {
        fake_destroy(&d->base);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "fake device: no memory");
    }
    *out = &d->base;
    return TROUPE_OK;
}

/* fake_create_diverged: a rank whose weights went their own way. */
static int fake_create_diverged(const tr_model_config *cfg, const tr_backend_opts *opts, tr_backend **out,
                                tr_err *err)
{
    int rv = fake_create(cfg, opts, out, err);
    if (rv == TROUPE_OK) {
        ((fake_dev *)*out)->diverged = 1;
    }
    return rv;
}

static const char *fake_precision = "fp32";

static void on_fake_device(int rank, tr_train_config *cfg)
{
    (void)rank;
    cfg->device = (char *)"cuda";
    cfg->create_cuda = fake_create;
    cfg->precision = (char *)fake_precision;
}

/* run_fake_refit: 2 policy ranks and 1 generation worker on the stand-in
 * device backend and a communicator with broadcast_device. */
static void run_fake_refit(fixture *f, refit_run *runs)
{
    f->cfg.refit_every = 5;
    refit_comm_ops = &t_dev_ops;
    tweak = on_fake_device;
    run_refit(f, 2, 1, runs);
    tweak = NULL;
    refit_comm_ops = &t_ops;
}

/* check_device_refits: every rank took the device path in dtype, 4 refits,
 * the generation's mix64 hash equals both policy ranks', bytes are the
 * dtype's, and its val_loss is the policy's within tol. */
static void check_device_refits(const refit_run *runs, tr_comm_dtype dtype, double tol)
{
    for (int r = 0; r < 3; r++) {
        TR_ASSERT_OK(runs[r].rv, &runs[r].err);
        assert_int_equal(runs[r].refits.n, 4);
    }
    for (int i = 0; i < 4; i++) {
        const tr_refit_stats *p = &runs[0].refits.st[i], *q = &runs[1].refits.st[i],
                             *g = &runs[2].refits.st[i];
        double pv = runs[0].rec.val[p->step - 1];
        char line[1024];
        for (int r = 0; r < 3; r++) {
            assert_int_equal(runs[r].refits.st[i].device, 1);
            assert_int_equal(runs[r].refits.st[i].dtype, dtype);
        }
        assert_true(g->hash == p->hash && q->hash == p->hash);
        assert_true(g->bytes > 0);
        assert_int_equal(p->bytes, g->bytes);
        if (rel(g->val_loss, pv) > tol) {
            fail_msg("refit at step %lld: generation val_loss %.9g, policy %.9g", (long long)p->step,
                     g->val_loss, pv);
        }
        tr_refit_line(g, 2, 0, line, sizeof(line));
        assert_non_null(strstr(line, dtype == TR_COMM_BF16 ? " path=device dtype=bf16 params_mix64="
                                                           : " path=device dtype=f32 params_mix64="));
    }
}

/* fp32 on every rank: the device path in fp32; the generation holds rank
 * 0's exact weights, so its val_loss is the policy's (as on the host path). */
static void refit_device_f32(void **state)
{
    refit_run runs[3], host[3];

    fake_precision = "fp32";
    run_fake_refit(*state, runs);
    check_device_refits(runs, TR_COMM_F32, 1e-6);
    run_refit(*state, 2, 1, host); /* the CPU backend and t_ops: the host path */
    TR_ASSERT_OK(host[2].rv, &host[2].err);
    assert_int_equal(host[2].refits.st[0].device, 0);
    assert_int_equal(runs[2].refits.st[0].bytes, host[2].refits.st[0].bytes);
    print_message("device path, f32: 4 refits, %llu bytes each, hashes equal\n",
                  (unsigned long long)runs[0].refits.st[0].bytes);
}

/* bf16 on every rank: the bf16 copy travels (half the bytes of the fp32
 * host path); the generation evaluates the bf16-rounded weights, so its
 * loss is near the policy's (whose CPU stand-in computes with fp32). */
static void refit_device_bf16(void **state)
{
    fixture *f = *state;
    refit_run runs[3], host[3];

    fake_precision = "bf16";
    run_fake_refit(f, runs);
    fake_precision = "fp32";
    check_device_refits(runs, TR_COMM_BF16, 2e-2);
    run_refit(f, 2, 1, host); /* the CPU backend and t_ops: the host path, fp32 */
    TR_ASSERT_OK(host[2].rv, &host[2].err);
    assert_int_equal(host[2].refits.st[0].device, 0);
    assert_int_equal(runs[2].refits.st[0].bytes * 2, host[2].refits.st[0].bytes);
}

/* A generation worker whose device copy is not what rank 0 sent fails
 * DATA_LOSS on the mix64 hash, and the policy ranks learn it by name. */
static void refit_device_hash_mismatch(void **state)
{
    refit_run runs[3];

    fake_precision = "fp32";
    fake_corrupt = 1;
    run_fake_refit(*state, runs);
    fake_corrupt = 0;
    TR_ASSERT_FAILS(runs[2].rv, TROUPE_DATA_LOSS, &runs[2].err, "the weights held after the refit hash to");
    TR_ASSERT_FAILS(runs[0].rv, TROUPE_ABORTED, &runs[0].err,
                    "rank 2 of the refit communicator (generation rank 0) failed");
    assert_int_equal(runs[2].refits.n, 0);
}

static void rank1_diverged(int rank, tr_train_config *cfg)
{
    on_fake_device(rank, cfg);
    if (rank == 1) {
        cfg->create_cuda = fake_create_diverged;
    }
}

/* On the device path the other policy ranks compare their own weights'
 * hash with rank 0's: a data-parallel rank whose weights differ fails
 * DATA_LOSS naming itself, and every other rank learns it by name. */
static void refit_device_ranks_diverged(void **state)
{
    fixture *f = *state;
    refit_run runs[3];

    fake_precision = "fp32";
    f->cfg.refit_every = 5;
    refit_comm_ops = &t_dev_ops;
    tweak = rank1_diverged;
    run_refit(f, 2, 1, runs);
    tweak = NULL;
    refit_comm_ops = &t_ops;
    TR_ASSERT_FAILS(runs[1].rv, TROUPE_DATA_LOSS, &runs[1].err, "policy rank 1's weights (f32, mix64 ");
    TR_ASSERT_FAILS(runs[1].rv, TROUPE_DATA_LOSS, &runs[1].err, "the data-parallel ranks diverged");
    TR_ASSERT_FAILS(runs[0].rv, TROUPE_ABORTED, &runs[0].err,
                    "rank 1 of the refit communicator (policy rank 1) failed");
    TR_ASSERT_FAILS(runs[2].rv, TROUPE_ABORTED, &runs[2].err,
                    "rank 1 of the refit communicator (policy rank 1) failed");
}

static void path_device(int rank, tr_train_config *cfg)
{
    (void)rank;
    cfg->refit_path = (char *)"device";
}

/* refit.path device where a rank cannot (the CPU backend): every rank fails
 * FAILED_PRECONDITION before the first refit, saying how many can. */
static void refit_path_device_refused(void **state)
{
    fixture *f = *state;
    refit_run runs[2];

    f->cfg.refit_every = 5;
    tweak = path_device;
    run_refit(f, 1, 1, runs);
    tweak = NULL;
    for (int r = 0; r < 2; r++) {
        TR_ASSERT_FAILS(runs[r].rv, TROUPE_FAILED_PRECONDITION, &runs[r].err,
                        "refit.path is device, but only 0 of the 2 ranks of the refit communicator can");
        assert_int_equal(runs[r].refits.n, 0);
    }
}

/* The device path's hash: the reference values of tr_refit_mix_hash
 * (refit_cuda.cu computes the same on the GPU); position matters. */
static void refit_mix_hash(void **state)
{
    const float v[2] = {1.0f, -2.5f}, w[2] = {-2.5f, 1.0f};
    (void)state;

    assert_true(tr_refit_mix_hash(v, sizeof(v)) == 0x5225972427b333c4ull);
    assert_true(tr_refit_mix_hash(w, sizeof(w)) == 0xe930c8facf562f30ull);
    assert_true(tr_refit_mix_hash(NULL, 0) == 0);
    assert_int_equal(tr_refit_parse_path("device"), TR_REFIT_PATH_DEVICE);
    assert_int_equal(tr_refit_parse_path("host"), TR_REFIT_PATH_HOST);
    assert_int_equal(tr_refit_parse_path("auto"), TR_REFIT_PATH_AUTO);
    assert_int_equal(tr_refit_parse_path("gpu"), -1);
}

/* The hash is FNV-1a over the bytes; the line carries what the tests and
 * the metrics read. */
static void refit_hash_and_line(void **state)
{
    const float v[2] = {1.0f, -2.5f};
    tr_refit_stats st = {.step = 30, .final = 1, .bytes = 120320, .ms = 2.0, .mb_per_s = 60.16,
                         .hash = 0x9e629ee2dfdb3f8ull, .val_loss = 3.25, .eval_ms = 1.5, .policy_size = 2,
                         .generation_size = 1};
    char line[1024];
    (void)state;

    assert_true(tr_refit_hash(v, 2) == 0x9e629ee2dfdb3f8ull);
    assert_true(tr_refit_hash(NULL, 0) == 0xcbf29ce484222325ull);
    tr_refit_line(&st, 2, 0, line, sizeof(line));
    assert_string_equal(line,
                        "refit step=30 final=1 rank=2 bytes=120320 ms=2.000 mb_per_s=60.16 path=host "
                        "dtype=f32 params_fnv1a=09e629ee2dfdb3f8 hash_ms=0.000 total_ms=0.000 val_loss=3.25 "
                        "eval_ms=1.500");
    tr_refit_line(&st, 2, 1, line, sizeof(line));
    assert_non_null(strstr(line, "\"event\":\"refit\",\"step\":30,\"final\":true"));
    assert_non_null(strstr(line, "\"params_fnv1a\":\"09e629ee2dfdb3f8\""));
    st.device = 1;
    st.dtype = TR_COMM_BF16;
    tr_refit_line(&st, 2, 1, line, sizeof(line));
    assert_non_null(
        strstr(line, "\"path\":\"device\",\"dtype\":\"bf16\",\"params_mix64\":\"09e629ee2dfdb3f8\""));
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(dp_shard_matches_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(dp_threads_match_global_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(dp_threads_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(dp_position_file, setup, teardown),
        cmocka_unit_test_setup_teardown(dp_settings_must_match, setup, teardown),
        cmocka_unit_test_setup_teardown(dp_zero_matches_dp, setup, teardown),
        cmocka_unit_test_setup_teardown(dp_zero_checkpoint_across, setup, teardown),
        cmocka_unit_test(dp_params_hash),
        cmocka_unit_test(dp_same_params_checked),
        cmocka_unit_test_setup_teardown(refit_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(refit_settings_must_match, setup, teardown),
        cmocka_unit_test(refit_hash_and_line),
        cmocka_unit_test(refit_mix_hash),
        cmocka_unit_test_setup_teardown(refit_device_f32, setup, teardown),
        cmocka_unit_test_setup_teardown(refit_device_bf16, setup, teardown),
        cmocka_unit_test_setup_teardown(refit_device_hash_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(refit_device_ranks_diverged, setup, teardown),
        cmocka_unit_test_setup_teardown(refit_path_device_refused, setup, teardown),
    };
    return TR_TEST_MAIN("unit.train.dp", tests, argc, argv);
}
