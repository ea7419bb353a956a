/* test_config_data.c - bad configs and bad data files must fail with a
 * message that names the cause (unit.train.*). */
#include <stdlib.h>
#include <unistd.h>

#include "data.h"
#include "train.h"
#include "train_test.h"

typedef struct fixture {
    char dir[64];
    char path[128];
    tr_train_config cfg;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    tr_err err = {0};

    assert_non_null(f);
    snprintf(f->dir, sizeof(f->dir), "/tmp/tr-train-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof(f->path), "%s/data.bin", f->dir);
    TR_ASSERT_OK(tr_train_config_init(&f->cfg, &err), &err);
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

static int load(fixture *f, const char *yaml, tr_err *err)
{
    int rv = tr_cfg_load_string(tr_train_config_table, &f->cfg, "bad.yaml", yaml, strlen(yaml), err);
    if (rv == TROUPE_OK) {
        rv = tr_train_config_check(&f->cfg, err);
    }
    return rv;
}

static void config_unknown_key(void **state)
{
    tr_err err = {0};
    TR_ASSERT_FAILS(load(*state, "data:\n  path: x\nmodel:\n  layer: 3\n", &err), TROUPE_INVALID_ARGUMENT,
                    &err, "bad.yaml:4:3: unknown key 'model.layer'");
}

static void config_negative_layers(void **state)
{
    tr_err err = {0};
    TR_ASSERT_FAILS(load(*state, "data: {path: x}\nmodel:\n  layers: -2\n", &err), TROUPE_OUT_OF_RANGE, &err,
                    "bad.yaml:3:11: model.layers: -2 is out of range [1, 1024]");
}

static void config_width_heads(void **state)
{
    tr_err err = {0};
    TR_ASSERT_FAILS(load(*state, "data: {path: x}\nmodel: {width: 30, heads: 4}\n", &err),
                    TROUPE_INVALID_ARGUMENT, &err, "model.width 30 is not divisible by model.heads 4");
}

static void config_seq_len_zero(void **state)
{
    tr_err err = {0};
    TR_ASSERT_FAILS(load(*state, "data: {path: x}\nmodel:\n  seq_len: 0\n", &err), TROUPE_OUT_OF_RANGE, &err,
                    "bad.yaml:3:12: model.seq_len: 0 is out of range");
}

static void config_bad_enums(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    TR_ASSERT_FAILS(load(f, "data: {path: x}\ntrain: {precision: fp8}\n", &err), TROUPE_INVALID_ARGUMENT,
                    &err, "train.precision must be bf16 or fp32, got 'fp8'");
    TR_ASSERT_FAILS(load(f, "train: {precision: fp32}\ndevice: tpu\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "device must be auto, cpu or cuda, got 'tpu'");
    TR_ASSERT_FAILS(load(f, "device: cpu\nrefit: {path: gpu}\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "refit.path must be auto, host or device, got 'gpu'");
    /* dp.zero: the ZeRO stage, 0 or 1 (stages 2 and 3 do not exist here) */
    TR_ASSERT_FAILS(load(f, "data: {path: x}\ndp: {zero: 2}\n", &err), TROUPE_OUT_OF_RANGE, &err,
                    "bad.yaml:2:12: dp.zero: 2 is out of range [0, 1]");
}

static void config_missing_data_path(void **state)
{
    tr_err err = {0};
    TR_ASSERT_FAILS(load(*state, "model: {layers: 1}\n", &err), TROUPE_INVALID_ARGUMENT, &err,
                    "setting 'data.path' is required");
}

static void write_bytes(const char *path, const void *buf, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, n, fp), n);
    fclose(fp);
}

static void data_missing(void **state)
{
    fixture *f = *state;
    tr_data d;
    tr_err err = {0};
    TR_ASSERT_FAILS(tr_data_open(&d, f->path, "auto", 0.1, 8, &err), TROUPE_NOT_FOUND, &err,
                    "data.bin: cannot open data file: No such file or directory");
}

static void data_empty(void **state)
{
    fixture *f = *state;
    tr_data d;
    tr_err err = {0};
    write_bytes(f->path, "", 0);
    TR_ASSERT_FAILS(tr_data_open(&d, f->path, "auto", 0.1, 8, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "data.bin: data file is empty");
}

static void data_bad_magic(void **state)
{
    fixture *f = *state;
    tr_data d;
    tr_err err = {0};
    write_bytes(f->path, "TRTOKENZ0123456789abcdef0123456789abcdef", 40);
    TR_ASSERT_FAILS(tr_data_open(&d, f->path, "tokens", 0.0, 8, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "data.bin: bad magic: not a troupe token file");
}

static void data_too_short(void **state)
{
    fixture *f = *state;
    uint16_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    tr_data d;
    tr_err err = {0};

    TR_ASSERT_OK(tr_data_write(f->path, toks, 8, 10, &err), &err);
    TR_ASSERT_FAILS(tr_data_open(&d, f->path, "tokens", 0.0, 8, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "data.bin: too short: 8 training tokens, need at least seq_len+1 = 9");
    TR_ASSERT_OK(tr_data_open(&d, f->path, "tokens", 0.0, 7, &err), &err);
    assert_int_equal(d.vocab, 10);
    assert_int_equal(d.count, 8);
    tr_data_close(&d);
    /* as bytes, the same 48-byte file is long enough for the windows but
     * its 10% validation tail (4 bytes) is not */
    TR_ASSERT_FAILS(tr_data_open(&d, f->path, "bytes", 0.1, 8, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "give a validation split of 4 tokens");
}

static void data_malformed(void **state)
{
    fixture *f = *state;
    uint16_t toks[16] = {0};
    unsigned char buf[64];
    FILE *fp;
    tr_data d;
    tr_err err = {0};

    TR_ASSERT_OK(tr_data_write(f->path, toks, 16, 10, &err), &err);
    fp = fopen(f->path, "rb");
    assert_non_null(fp);
    assert_int_equal(fread(buf, 1, sizeof(buf), fp), 64);
    fclose(fp);
    write_bytes(f->path, buf, 60); /* truncated payload */
    TR_ASSERT_FAILS(tr_data_open(&d, f->path, "auto", 0.0, 4, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "header says 16 tokens but the file holds 28 payload bytes");
    buf[32 + 2 * 5] = 10; /* token 5 = vocab */
    write_bytes(f->path, buf, 64);
    TR_ASSERT_FAILS(tr_data_open(&d, f->path, "auto", 0.0, 4, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "token 10 at index 5 is not below vocab 10");
    buf[8] = 2; /* version */
    write_bytes(f->path, buf, 64);
    TR_ASSERT_FAILS(tr_data_open(&d, f->path, "auto", 0.0, 4, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "unsupported token file version 2");
}

/* Batches are a pure function of the sampler state, and every window is
 * a contiguous slice with targets shifted by one. */
static void data_batches(void **state)
{
    fixture *f = *state;
    tr_data d;
    tr_err err = {0};
    int32_t in1[4 * 8], tg1[4 * 8], in2[4 * 8], tg2[4 * 8];
    uint64_t r1 = 5, r2 = 5;

    TR_ASSERT_OK(tr_data_make_learnable(f->path, 64, 1000, 3, &err), &err);
    TR_ASSERT_OK(tr_data_open(&d, f->path, "auto", 0.1, 8, &err), &err);
    assert_int_equal(d.train_count, 900);
    assert_int_equal(d.val_count, 100);
    tr_data_train_batch(&d, &r1, 4, 8, in1, tg1);
    tr_data_train_batch(&d, &r2, 4, 8, in2, tg2);
    assert_memory_equal(in1, in2, sizeof(in1));
    assert_memory_equal(tg1, tg2, sizeof(tg1));
    for (int i = 0; i < 4 * 8; i++) {
        if (i % 8 != 7) {
            assert_int_equal(tg1[i], in1[i + 1]);
        }
    }
    assert_int_equal(tr_data_val_batches(&d, 4, 8), 3); /* 99 / 8 = 12 windows */
    tr_data_val_batch(&d, 2, 4, 8, in1, tg1);
    assert_int_equal(in1[3 * 8 + 7], d.tokens[900 + 11 * 8 + 7]);
    assert_int_equal(tg1[3 * 8 + 7], d.tokens[900 + 12 * 8]);
    tr_data_close(&d);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(config_unknown_key, setup, teardown),
        cmocka_unit_test_setup_teardown(config_negative_layers, setup, teardown),
        cmocka_unit_test_setup_teardown(config_width_heads, setup, teardown),
        cmocka_unit_test_setup_teardown(config_seq_len_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(config_bad_enums, setup, teardown),
        cmocka_unit_test_setup_teardown(config_missing_data_path, setup, teardown),
        cmocka_unit_test_setup_teardown(data_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(data_empty, setup, teardown),
        cmocka_unit_test_setup_teardown(data_bad_magic, setup, teardown),
        cmocka_unit_test_setup_teardown(data_too_short, setup, teardown),
        cmocka_unit_test_setup_teardown(data_malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(data_batches, setup, teardown),
    };
    return TR_TEST_MAIN("unit.train.config_data", tests, argc, argv);
}
