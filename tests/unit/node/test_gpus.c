/* test_gpus.c - unit.node.gpus: --fake-gpus specs (tr_gpus_parse_fake in
 * worker/node/gpus.c). */
#include "test_helpers.h"

#include "gpus.h"

static tr_gpu_info gpus[TR_MAX_GPUS + 1];

/* parse runs tr_gpus_parse_fake with a canary entry after the table. */
static int parse(const char *spec, size_t *n, tr_err *err)
{
    memset(gpus, 0xee, sizeof(gpus));
    *n = 12345;
    return tr_gpus_parse_fake(spec, "node-a", gpus, n, err);
}

static void count_only(void **state)
{
    tr_err err = {0};
    size_t n;

    TR_ASSERT_OK(parse("8", &n, &err), &err);
    assert_int_equal(n, 8);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(gpus[i].index, i);
        assert_string_equal(gpus[i].model, "Simulated GPU");
        assert_true(gpus[i].memory_bytes == 80ull * 1000 * 1000 * 1000);
        assert_int_equal(gpus[i].simulated, 1);
    }
    assert_int_equal(((unsigned char *)&gpus[8])[0], 0xee); /* nothing written past n */
}

static void model_and_memory(void **state)
{
    tr_err err = {0};
    size_t n;

    TR_ASSERT_OK(parse("4xH200:141GB", &n, &err), &err);
    assert_int_equal(n, 4);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(gpus[i].model, "NVIDIA H200");
        assert_true(gpus[i].memory_bytes == 141ull * 1000 * 1000 * 1000);
    }
    /* Short NVIDIA-style names get the vendor; others are taken as given. */
    TR_ASSERT_OK(parse("2XA100", &n, &err), &err);
    assert_int_equal(n, 2);
    assert_string_equal(gpus[0].model, "NVIDIA A100");
    assert_true(gpus[0].memory_bytes == 80ull * 1000 * 1000 * 1000);
    TR_ASSERT_OK(parse("1xRTX4090:24GiB", &n, &err), &err);
    assert_string_equal(gpus[0].model, "RTX4090");
    assert_true(gpus[0].memory_bytes == 24ull << 30);
}

static void memory_units(void **state)
{
    static const struct {
        const char *spec;
        uint64_t bytes;
    } cases[] = {
        {"1:24000MB", 24000ull * 1000 * 1000}, {"1:512MiB", 512ull << 20}, {"1:80gib", 80ull << 30},
        {"1:1.5GB", 1500ull * 1000 * 1000},    {"1:141gb", 141ull * 1000 * 1000 * 1000},
    };
    tr_err err = {0};
    size_t n;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TR_ASSERT_OK(parse(cases[i].spec, &n, &err), &err);
        assert_int_equal(n, 1);
        if (gpus[0].memory_bytes != cases[i].bytes) {
            fail_msg("%s: expected %llu bytes, got %llu", cases[i].spec, (unsigned long long)cases[i].bytes,
                     (unsigned long long)gpus[0].memory_bytes);
        }
    }
}

static void zero_and_max(void **state)
{
    tr_err err = {0};
    size_t n;

    TR_ASSERT_OK(parse("0", &n, &err), &err);
    assert_int_equal(n, 0);
    TR_ASSERT_OK(parse("64xH100:80GB", &n, &err), &err);
    assert_int_equal(n, TR_MAX_GPUS);
    assert_int_equal(gpus[63].index, 63);
    assert_int_equal(((unsigned char *)&gpus[64])[0], 0xee);
    TR_ASSERT_FAILS(parse("65", &n, &err), TROUPE_INVALID_ARGUMENT, &err,
                    "--fake-gpus '65': expected N[xMODEL][:MEM] with N from 0 to 64");
    assert_int_equal(n, 0);
}

static void bad_specs(void **state)
{
    static const struct {
        const char *spec;
        const char *needle;
    } cases[] = {
        {"", "expected N[xMODEL][:MEM]"},
        {"abc", "--fake-gpus 'abc': expected N[xMODEL][:MEM]"},
        {"-1", "expected N[xMODEL][:MEM]"},
        {"4x", "--fake-gpus '4x': empty or long model name"},
        {"4x:80GB", "empty or long model name"},
        {"4xH200:", "memory '' should look like 141GB"},
        {"4xH200:141TB", "memory '141TB' should look like 141GB, 80GiB or 24000MB"},
        {"4xH200:141", "memory '141'"},
        {"4xH200:-5GB", "memory '-5GB'"},
        {"4xH200:0GB", "memory '0GB'"},
        {"4xH200:GB", "memory 'GB'"},
        {"8y", "--fake-gpus '8y': unexpected 'y'"},
        {"8 ", "unexpected ' '"},
        {"4xAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "empty or long model name"},
    };
    tr_err err = {0};
    size_t n;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rv = parse(cases[i].spec, &n, &err);
        if (rv != TROUPE_INVALID_ARGUMENT) {
            fail_msg("spec '%s': expected INVALID_ARGUMENT, got %s (%zu GPUs)", cases[i].spec, troupe_strerror(rv),
                     n);
        }
        TR_ASSERT_CONTAINS(err.msg, cases[i].needle);
        assert_int_equal(n, 0);
    }
}

/* Memory sizes out of uint64_t's range, infinite or NaN are INVALID_ARGUMENT
 * (converting such a double to an integer would be undefined behaviour; NaN
 * also slips past a plain `v <= 0` test). */
static void huge_memory_rejected(void **state)
{
    static const char *const specs[] = {"1xH200:1e30GB", "1xH200:infGB", "1xH200:nanGB", "1xH200:20000000000GB"};
    tr_err err = {0};
    size_t n;

    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        int rv = parse(specs[i], &n, &err);
        if (rv != TROUPE_INVALID_ARGUMENT) {
            fail_msg("spec '%s': expected INVALID_ARGUMENT, got %s with memory_bytes %llu", specs[i],
                     troupe_strerror(rv), n ? (unsigned long long)gpus[0].memory_bytes : 0ull);
        }
        TR_ASSERT_CONTAINS(err.msg, "should look like 141GB");
    }
}

static void uuids(void **state)
{
    char longname[200];
    tr_err err = {0};
    size_t n;

    TR_ASSERT_OK(parse("3", &n, &err), &err);
    assert_string_equal(gpus[0].uuid, "GPU-sim-node-a-0");
    assert_string_equal(gpus[2].uuid, "GPU-sim-node-a-2");
    /* A long node name is cut so the UUID still fits and stays unique per index. */
    memset(longname, 'n', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    memset(gpus, 0, sizeof(gpus));
    TR_ASSERT_OK(tr_gpus_parse_fake("2", longname, gpus, &n, &err), &err);
    assert_true(strlen(gpus[0].uuid) < sizeof(gpus[0].uuid));
    assert_string_not_equal(gpus[0].uuid, gpus[1].uuid);
    assert_memory_equal(gpus[1].uuid + strlen(gpus[1].uuid) - 2, "-1", 2);
}

/* The agent maps worker GPU indices through its own CUDA_VISIBLE_DEVICES. */
static void translate_visible(void **state)
{
    char out[256];
    tr_err err = {0};

    (void)state;
    TR_ASSERT_OK(tr_gpus_translate_visible("4,5,6,7", "0,1", out, sizeof(out), &err), &err);
    assert_string_equal(out, "4,5");
    TR_ASSERT_OK(tr_gpus_translate_visible("4,5,6,7", "3", out, sizeof(out), &err), &err);
    assert_string_equal(out, "7");
    TR_ASSERT_OK(tr_gpus_translate_visible("GPU-aaa,GPU-bbb", "1,0", out, sizeof(out), &err), &err);
    assert_string_equal(out, "GPU-bbb,GPU-aaa");
    TR_ASSERT_STATUS(tr_gpus_translate_visible("4,5", "2", out, sizeof(out), &err), TROUPE_INVALID_ARGUMENT, &err);
    TR_ASSERT_CONTAINS(err.msg, "not in this agent's CUDA_VISIBLE_DEVICES='4,5'");
    TR_ASSERT_STATUS(tr_gpus_translate_visible("4,5", "x", out, sizeof(out), &err), TROUPE_INVALID_ARGUMENT, &err);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(count_only),   cmocka_unit_test(model_and_memory), cmocka_unit_test(memory_units),
        cmocka_unit_test(zero_and_max), cmocka_unit_test(bad_specs),        cmocka_unit_test(huge_memory_rejected),
        cmocka_unit_test(uuids),          cmocka_unit_test(translate_visible),
    };
    return TR_TEST_MAIN("unit.node.gpus", tests, argc, argv);
}
