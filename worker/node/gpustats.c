/* gpustats.c - live GPU and node figures (see gpustats.h).
 *
 * NVML is loaded with dlopen on first use and its handful of functions
 * looked up by name (their signatures are NVML's stable C API), so the agent
 * builds and runs where no NVIDIA driver is installed. A GPU is found by the
 * UUID the CUDA driver gave it at discovery (the same "GPU-..." string NVML
 * uses), else by its index. Simulated GPUs (--fake-gpus) get figures that
 * follow whether a worker holds them: busy ones run hot and use memory, idle
 * ones do not, so `troupe nodes` and the dashboard show something to test
 * against without hardware. */
#include "gpustats.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void *nvml_dev;
typedef struct {
    unsigned long long total, free, used;
} nvml_memory;
/* nvmlMemory_v2_t: its used leaves out the memory the driver reserves
 * (480 MiB on an H100 with driver 580), as nvidia-smi's memory.used does;
 * v1's used counts it (seen on a lent H100: v1 9239 MiB, nvidia-smi 8759). */
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvml_memory_v2;
#define NVML_MEMORY_V2 ((unsigned int)(sizeof(nvml_memory_v2) | (2u << 24)))
typedef struct {
    unsigned int gpu, memory;
} nvml_util;

struct tr_gpustats {
    size_t n;
    tr_gpu_info gpus[TR_MAX_GPUS];
    int simulated;
    char source[160];
    void *lib;
    nvml_dev dev[TR_MAX_GPUS];
    int (*shutdown)(void);
    int (*memory)(nvml_dev, nvml_memory *);
    int (*memory_v2)(nvml_dev, nvml_memory_v2 *); /* NULL on drivers before 510 */
    int (*util)(nvml_dev, nvml_util *);
    int (*temp)(nvml_dev, int, unsigned int *);
    int (*power)(nvml_dev, unsigned int *);
};

/* nvml_load opens NVML and finds each GPU; on failure source says why. */
static void nvml_load(tr_gpustats *g)
{
    const char *path = getenv("TROUPE_NVML");
    int (*init)(void);
    int (*by_uuid)(const char *, nvml_dev *);
    int (*by_index)(unsigned int, nvml_dev *);

    path = path != NULL && path[0] != '\0' ? path : "libnvidia-ml.so.1";
    if ((g->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL) {
        snprintf(g->source, sizeof(g->source), "none: %s not found", path);
        return;
    }
    *(void **)&init = dlsym(g->lib, "nvmlInit_v2");
    *(void **)&g->shutdown = dlsym(g->lib, "nvmlShutdown");
    *(void **)&by_uuid = dlsym(g->lib, "nvmlDeviceGetHandleByUUID");
    *(void **)&by_index = dlsym(g->lib, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&g->memory = dlsym(g->lib, "nvmlDeviceGetMemoryInfo");
    *(void **)&g->memory_v2 = dlsym(g->lib, "nvmlDeviceGetMemoryInfo_v2");
    *(void **)&g->util = dlsym(g->lib, "nvmlDeviceGetUtilizationRates");
    *(void **)&g->temp = dlsym(g->lib, "nvmlDeviceGetTemperature");
    *(void **)&g->power = dlsym(g->lib, "nvmlDeviceGetPowerUsage");
    if (init == NULL || g->shutdown == NULL || by_index == NULL || g->memory == NULL || g->util == NULL ||
        g->temp == NULL || g->power == NULL) {
        snprintf(g->source, sizeof(g->source), "none: %s lacks the NVML functions used", path);
        dlclose(g->lib);
        g->lib = NULL;
        return;
    }
    if (init() != 0) {
        snprintf(g->source, sizeof(g->source), "none: nvmlInit_v2 failed (is the NVIDIA driver loaded?)");
        dlclose(g->lib);
        g->lib = NULL;
        return;
    }
    for (size_t i = 0; i < g->n; i++) {
        if (by_uuid == NULL || by_uuid(g->gpus[i].uuid, &g->dev[i]) != 0) {
            if (by_index(g->gpus[i].index, &g->dev[i]) != 0) {
                g->dev[i] = NULL;
            }
        }
    }
    snprintf(g->source, sizeof(g->source), "nvml");
}

tr_gpustats *tr_gpustats_open(const tr_gpu_info *gpus, size_t n)
{
    tr_gpustats *g = calloc(1, sizeof(*g));

    if (g == NULL) {
        return NULL;
    }
    g->n = n > TR_MAX_GPUS ? TR_MAX_GPUS : n;
    memcpy(g->gpus, gpus, g->n * sizeof(*gpus));
    g->simulated = g->n > 0 && gpus[0].simulated;
    if (g->n == 0) {
        snprintf(g->source, sizeof(g->source), "none: no GPUs");
    } else if (g->simulated) {
        snprintf(g->source, sizeof(g->source), "simulated");
    } else {
        nvml_load(g);
    }
    return g;
}

const char *tr_gpustats_source(const tr_gpustats *g)
{
    return g->source;
}

/* simulate: a busy GPU at 70-94 % with 45 % of its memory, hot and drawing
 * power; an idle one cool and empty. The variation moves with the clock so a
 * dashboard shows live lines. */
static void simulate(const tr_gpustats *g, size_t i, int busy, tr_gpu_stats *o)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint32_t wobble = (uint32_t)((ts.tv_sec + (time_t)i * 7) % 25);

    o->ok = 1;
    o->memory_total_bytes = g->gpus[i].memory_bytes;
    o->utilization_pct = busy ? 70 + wobble : 0;
    o->memory_used_bytes = busy ? g->gpus[i].memory_bytes / 100 * 45 : 0;
    o->temperature_c = 32 + o->utilization_pct / 3;
    o->power_mw = 60000 + o->utilization_pct * 5000;
}

static void nvml_read(const tr_gpustats *g, size_t i, tr_gpu_stats *o)
{
    nvml_memory m;
    nvml_memory_v2 m2 = {.version = NVML_MEMORY_V2};
    nvml_util u;
    unsigned int t = 0, p = 0;

    if (g->lib == NULL || g->dev[i] == NULL || g->memory(g->dev[i], &m) != 0 || g->util(g->dev[i], &u) != 0) {
        return; /* ok stays 0 */
    }
    if (g->memory_v2 != NULL && g->memory_v2(g->dev[i], &m2) == 0) {
        m.used = m2.used;
    }
    o->ok = 1;
    o->memory_used_bytes = m.used;
    o->memory_total_bytes = m.total;
    o->utilization_pct = u.gpu;
    if (g->temp(g->dev[i], 0 /* NVML_TEMPERATURE_GPU */, &t) == 0) {
        o->temperature_c = t;
    }
    if (g->power(g->dev[i], &p) == 0) { /* milliwatts; not every board reports it */
        o->power_mw = p;
    }
}

void tr_gpustats_sample(tr_gpustats *g, const uint8_t *busy, tr_gpu_stats *out)
{
    for (size_t i = 0; i < g->n; i++) {
        memset(&out[i], 0, sizeof(out[i]));
        out[i].index = g->gpus[i].index;
        if (g->simulated) {
            simulate(g, i, busy != NULL && busy[i], &out[i]);
        } else {
            nvml_read(g, i, &out[i]);
        }
    }
}

void tr_gpustats_close(tr_gpustats *g)
{
    if (g == NULL) {
        return;
    }
    if (g->lib != NULL) {
        g->shutdown();
        dlclose(g->lib);
    }
    free(g);
}

void tr_node_figures(double *load1, uint64_t *mem_total, uint64_t *mem_available)
{
    FILE *f = fopen("/proc/loadavg", "r");
    char line[256];
    unsigned long long v;

    *load1 = 0.0;
    *mem_total = *mem_available = 0;
    if (f != NULL) {
        if (fscanf(f, "%lf", load1) != 1) {
            *load1 = 0.0;
        }
        fclose(f);
    }
    if ((f = fopen("/proc/meminfo", "r")) == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "MemTotal: %llu kB", &v) == 1) {
            *mem_total = (uint64_t)v * 1024;
        } else if (sscanf(line, "MemAvailable: %llu kB", &v) == 1) {
            *mem_available = (uint64_t)v * 1024;
        }
    }
    fclose(f);
}
