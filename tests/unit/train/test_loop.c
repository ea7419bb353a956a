/* test_loop.c - the training loop end to end on the CPU: learning, resume,
 * checkpoint mismatch, schedule and metrics formats (unit.train.*). */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "checkpoint.h"
#include "data.h"
#include "train.h"
#include "train_test.h"

#define MAX_STEPS 200

typedef struct fixture {
    char dir[64];
    char data[128];
    char ckdir[128];
    tr_train_config cfg;
} fixture;

typedef struct record {
    int n;
    double loss[MAX_STEPS], norm[MAX_STEPS], val[MAX_STEPS];
    int stop_after; /* 0 = never */
} record;

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
    snprintf(f->dir, sizeof(f->dir), "/tmp/tr-train-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->data, sizeof(f->data), "%s/data.tok", f->dir);
    snprintf(f->ckdir, sizeof(f->ckdir), "%s/ck", f->dir);
    TR_ASSERT_OK(tr_data_make_learnable(f->data, 64, 32768, 1, &err), &err);
    TR_ASSERT_OK(tr_train_config_init(&f->cfg, &err), &err);
    TR_ASSERT_OK(tr_cfg_set(tr_train_config_table, &f->cfg, "data.path", f->data, "test", &err), &err);
    TR_ASSERT_OK(tr_cfg_set(tr_train_config_table, &f->cfg, "device", "cpu", "test", &err), &err);
    f->cfg.layers = 2;
    f->cfg.width = 32;
    f->cfg.heads = 4;
    f->cfg.seq_len = 32;
    f->cfg.micro_batch = 4;
    f->cfg.lr = 1e-2;
    f->cfg.warmup_steps = 5;
    f->cfg.eval_every = 10;
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

static void use_checkpoints(fixture *f, int every)
{
    tr_err err = {0};
    TR_ASSERT_OK(tr_cfg_set(tr_train_config_table, &f->cfg, "checkpoint.dir", f->ckdir, "test", &err), &err);
    f->cfg.checkpoint_every = every;
}

/* A 2-layer model on the Markov data (entropy ~0.74 nats) must get from
 * ~ln 64 = 4.16 to below 30% of it in 100 steps (< 1 s on one core): the
 * mean training loss of the last 10 steps and the final validation loss. */
static void learns(void **state)
{
    fixture *f = *state;
    record r = {0};
    tr_err err = {0};

    double tail = 0.0;

    f->cfg.steps = 100;
    f->cfg.accum_steps = 2;
    TR_ASSERT_OK(tr_train_run(&f->cfg, on_step, &r, &err), &err);
    assert_int_equal(r.n, 100);
    for (int i = 90; i < 100; i++) {
        tail += r.loss[i] / 10.0;
    }
    print_message("learns: first loss %.4f, mean of last 10 %.4f, final val %.4f (ln 64 = %.4f)\n", r.loss[0],
                  tail, r.val[99], log(64.0));
    assert_true(fabs(r.loss[0] - log(64.0)) < 0.3);
    assert_true(tail < 0.3 * log(64.0));
    assert_true(r.val[99] < 0.3 * log(64.0));
    assert_true(isnan(r.val[0]) && !isnan(r.val[9]));
}

/* Stopping at step 6 (checkpoint written on stop) and resuming must give the
 * same losses and norms for steps 7..12, bit for bit, as an unbroken run. */
static void resume_bit_exact(void **state)
{
    fixture *f = *state;
    record full = {0}, first = {.stop_after = 6}, second = {0};
    tr_err err = {0};

    f->cfg.steps = 12;
    f->cfg.accum_steps = 2;
    TR_ASSERT_OK(tr_train_run(&f->cfg, on_step, &full, &err), &err);
    use_checkpoints(f, 4);
    TR_ASSERT_FAILS(tr_train_run(&f->cfg, on_step, &first, &err), TROUPE_CANCELLED, &err, "after step 6");
    assert_int_equal(first.n, 6);
    TR_ASSERT_OK(tr_train_run(&f->cfg, on_step, &second, &err), &err);
    assert_int_equal(second.n, 6);
    for (int i = 0; i < 6; i++) {
        assert_memory_equal(&first.loss[i], &full.loss[i], sizeof(double));
        if (memcmp(&second.loss[i], &full.loss[6 + i], sizeof(double)) != 0 ||
            memcmp(&second.norm[i], &full.norm[6 + i], sizeof(double)) != 0) {
            fail_msg("step %d: resumed loss %.9g norm %.9g, unbroken %.9g %.9g", 7 + i, second.loss[i],
                     second.norm[i], full.loss[6 + i], full.norm[6 + i]);
        }
    }
    /* a finished run resumes to nothing and succeeds */
    second.n = 0;
    TR_ASSERT_OK(tr_train_run(&f->cfg, on_step, &second, &err), &err);
    assert_int_equal(second.n, 0);
}

static void checkpoint_mismatch(void **state)
{
    fixture *f = *state;
    record r = {0};
    tr_err err = {0};

    f->cfg.steps = 2;
    use_checkpoints(f, 0);
    TR_ASSERT_OK(tr_train_run(&f->cfg, on_step, &r, &err), &err);
    f->cfg.width = 16;
    f->cfg.steps = 4;
    TR_ASSERT_FAILS(tr_train_run(&f->cfg, on_step, &r, &err), TROUPE_FAILED_PRECONDITION, &err,
                    "does not match the model config: it has layers=2 width=32");
    assert_non_null(strstr(err.msg, "ckpt.bin"));
}

static void checkpoint_corrupt(void **state)
{
    fixture *f = *state;
    record r = {0};
    tr_err err = {0};
    char path[256];
    FILE *fp;

    f->cfg.steps = 2;
    use_checkpoints(f, 0);
    TR_ASSERT_OK(tr_train_run(&f->cfg, on_step, &r, &err), &err);
    snprintf(path, sizeof(path), "%s/ckpt.bin", f->ckdir);
    fp = fopen(path, "r+b");
    assert_non_null(fp);
    fseek(fp, 200, SEEK_SET);
    fputc(0x5a, fp);
    fclose(fp);
    f->cfg.steps = 4;
    TR_ASSERT_FAILS(tr_train_run(&f->cfg, on_step, &r, &err), TROUPE_DATA_LOSS, &err, "checksum mismatch");
}

static void lr_schedule(void **state)
{
    fixture *f = *state;

    f->cfg.steps = 110;
    f->cfg.warmup_steps = 10;
    f->cfg.lr = 1.0;
    f->cfg.min_lr_fraction = 0.1;
    assert_float_equal(tr_train_lr(&f->cfg, 0), 0.1, 1e-12);
    assert_float_equal(tr_train_lr(&f->cfg, 9), 1.0, 1e-12);
    assert_float_equal(tr_train_lr(&f->cfg, 10), 1.0, 1e-12);
    assert_float_equal(tr_train_lr(&f->cfg, 60), 0.55, 1e-12); /* half way down the cosine */
    assert_true(tr_train_lr(&f->cfg, 109) > 0.1 && tr_train_lr(&f->cfg, 109) < 0.1003);
}

static void metrics_formats(void **state)
{
    tr_train_metrics m = {.step = 5,
                          .steps = 100,
                          .loss = 3.12345,
                          .val_loss = NAN,
                          .grad_norm = 1.5,
                          .lr = 3e-4,
                          .step_ms = 10.0,
                          .tokens_per_s = 1234.0,
                          .mfu = NAN,
                          .mfu_gemm = NAN,
                          .tokens = 512,
                          .backend = "cpu"};
    char line[1024];

    tr_train_metrics_line(&m, line, sizeof(line));
    assert_non_null(strstr(line, "step=5/100 loss=3.1235 grad_norm=1.5000 lr=3.0000e-04"));
    assert_non_null(strstr(line, "mfu=n/a"));
    assert_null(strstr(line, "val_loss"));
    m.val_loss = 2.5;
    m.mfu = 0.4567;
    tr_train_metrics_line(&m, line, sizeof(line));
    assert_non_null(strstr(line, "val_loss=2.5000"));
    assert_non_null(strstr(line, "mfu=45.67%"));
    assert_null(strstr(line, "mfu_gemm"));
    m.mfu_gemm = 0.5;
    tr_train_metrics_line(&m, line, sizeof(line));
    assert_non_null(strstr(line, "mfu=45.67% mfu_gemm=50.00% mem_mib="));
    tr_train_metrics_json(&m, line, sizeof(line));
    assert_non_null(strstr(line, "{\"step\":5,\"steps\":100,\"backend\":\"cpu\",\"tokens\":512"));
    assert_non_null(strstr(line, "\"val_loss\":2.5,"));
    assert_int_equal(line[strlen(line) - 1], '}');
    assert_float_equal(tr_train_peak_flops("NVIDIA H200"), 989e12, 1);
    assert_float_equal(tr_train_peak_flops("NVIDIA H100 80GB HBM3"), 989e12, 1);
    assert_float_equal(tr_train_peak_flops("NVIDIA H100 PCIe"), 756e12, 1);
    assert_float_equal(tr_train_peak_flops("Some CPU"), 0.0, 0);
    assert_float_equal(tr_train_peak_flops(NULL), 0.0, 0);
    (void)state;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(learns, setup, teardown),
        cmocka_unit_test_setup_teardown(resume_bit_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(checkpoint_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(checkpoint_corrupt, setup, teardown),
        cmocka_unit_test_setup_teardown(lr_schedule, setup, teardown),
        cmocka_unit_test(metrics_formats),
    };
    return TR_TEST_MAIN("unit.train.loop", tests, argc, argv);
}
