/* test_gpustats.c - unit.node.gpustats: the live GPU and node figures of the
 * agent's heartbeats (worker/node/gpustats.c): simulated GPUs follow their
 * workers, NVML through a stand-in library (FAKE_NVML, set by CMake) found by
 * UUID then index, a GPU that cannot be read, NVML missing, /proc figures. */
#include <stdlib.h>

#include "test_helpers.h"

#include "gpustats.h"

static void real_gpu(tr_gpu_info *g, uint32_t index, const char *uuid)
{
    memset(g, 0, sizeof(*g));
    g->index = index;
    snprintf(g->model, sizeof(g->model), "NVIDIA H100 80GB HBM3");
    g->memory_bytes = 80ull << 30;
    snprintf(g->uuid, sizeof(g->uuid), "%s", uuid);
}

/* Simulated GPUs: a busy one runs at 70-94 % with 45 % of its memory, an
 * idle one at 0 with none; every figure is "read". */
static void simulated(void **state)
{
    tr_gpu_info gpus[4];
    tr_gpu_stats st[4];
    size_t n = 0;
    uint8_t busy[4] = {0, 1, 1, 0};
    tr_err err = {0};

    TR_ASSERT_OK(tr_gpus_parse_fake("4xH200:141GB", "na", gpus, &n, &err), &err);
    tr_gpustats *g = tr_gpustats_open(gpus, n);
    assert_non_null(g);
    assert_string_equal(tr_gpustats_source(g), "simulated");
    tr_gpustats_sample(g, busy, st);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(st[i].ok, 1);
        assert_int_equal(st[i].index, i);
        assert_true(st[i].memory_total_bytes == 141000000000ull);
        if (busy[i]) {
            assert_in_range(st[i].utilization_pct, 70, 94);
            assert_true(st[i].memory_used_bytes == 141000000000ull / 100 * 45);
            assert_true(st[i].temperature_c > 50 && st[i].power_mw > 400000);
        } else {
            assert_int_equal(st[i].utilization_pct, 0);
            assert_true(st[i].memory_used_bytes == 0);
        }
    }
    tr_gpustats_sample(g, NULL, st); /* nothing busy */
    assert_int_equal(st[1].utilization_pct, 0);
    tr_gpustats_close(g);
}

/* NVML (the stand-in): GPUs found by UUID whatever their index (listed
 * here in the other order), the third by index; its memory cannot be read
 * so it is not ok; a board without power figures reports 0 mW. */
static void nvml(void **state)
{
    tr_gpu_info gpus[3];
    tr_gpu_stats st[3];

    setenv("TROUPE_NVML", FAKE_NVML, 1);
    real_gpu(&gpus[0], 0, "GPU-bbbb");
    real_gpu(&gpus[1], 1, "GPU-aaaa");
    real_gpu(&gpus[2], 2, "GPU-not-known");
    tr_gpustats *g = tr_gpustats_open(gpus, 3);
    assert_non_null(g);
    assert_string_equal(tr_gpustats_source(g), "nvml");
    tr_gpustats_sample(g, NULL, st);
    assert_true(st[0].ok && st[1].ok);
    assert_true(st[0].memory_used_bytes == 2ull << 30 && st[0].utilization_pct == 60); /* GPU-bbbb */
    assert_true(st[0].temperature_c == 41 && st[0].power_mw == 0);
    /* GPU-aaaa through nvmlDeviceGetMemoryInfo_v2: without the driver's reserve */
    assert_true(st[1].memory_used_bytes == (1ull << 30) - (256ull << 20) && st[1].utilization_pct == 10);
    assert_true(st[1].memory_total_bytes == 80ull << 30 && st[1].power_mw == 123456 && st[1].temperature_c == 40);
    assert_int_equal(st[2].ok, 0); /* found by index 2, but its memory read fails */
    assert_int_equal(st[2].index, 2);
    tr_gpustats_close(g);
    unsetenv("TROUPE_NVML");
}

/* No NVML: the source says why, and nothing is read. */
static void nvml_missing(void **state)
{
    tr_gpu_info gpu;
    tr_gpu_stats st;

    setenv("TROUPE_NVML", "/nonexistent/libnvidia-ml.so.1", 1);
    real_gpu(&gpu, 0, "GPU-aaaa");
    tr_gpustats *g = tr_gpustats_open(&gpu, 1);
    assert_non_null(g);
    assert_string_equal(tr_gpustats_source(g), "none: /nonexistent/libnvidia-ml.so.1 not found");
    tr_gpustats_sample(g, NULL, &st);
    assert_int_equal(st.ok, 0);
    tr_gpustats_close(g);
    unsetenv("TROUPE_NVML");
    g = tr_gpustats_open(&gpu, 0);
    assert_string_equal(tr_gpustats_source(g), "none: no GPUs");
    tr_gpustats_close(g);
    tr_gpustats_close(NULL);
}

static void node_figures(void **state)
{
    double load1 = -1;
    uint64_t total = 0, avail = 0;

    tr_node_figures(&load1, &total, &avail);
    assert_true(load1 >= 0.0);
    assert_true(total > 0 && avail > 0 && avail <= total);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(simulated),
        cmocka_unit_test(nvml),
        cmocka_unit_test(nvml_missing),
        cmocka_unit_test(node_figures),
    };
    return TR_TEST_MAIN("unit.node.gpustats", tests, argc, argv);
}
