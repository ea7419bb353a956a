/* fake_nvml.c - a stand-in for libnvidia-ml.so.1 with the few NVML calls
 * troupe-node makes (worker/node/gpustats.c), for unit.node.gpustats on
 * machines without a GPU. Two devices: "GPU-aaaa" (index 0) and "GPU-bbbb"
 * (index 1) with fixed figures; a third index exists whose memory cannot be
 * read. Handles are pointers to the device number. */
#include <string.h>

static int devs[3] = {0, 1, 2};
static int inited;

int nvmlInit_v2(void)
{
    inited = 1;
    return 0;
}

int nvmlShutdown(void)
{
    inited = 0;
    return 0;
}

int nvmlDeviceGetHandleByUUID(const char *uuid, void **dev)
{
    if (!inited) {
        return 1; /* NVML_ERROR_UNINITIALIZED */
    }
    if (strcmp(uuid, "GPU-aaaa") == 0 || strcmp(uuid, "GPU-bbbb") == 0) {
        *dev = &devs[uuid[4] == 'a' ? 0 : 1];
        return 0;
    }
    return 6; /* NVML_ERROR_NOT_FOUND */
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **dev)
{
    if (!inited || index > 2) {
        return index > 2 ? 2 : 1;
    }
    *dev = &devs[index];
    return 0;
}

typedef struct {
    unsigned long long total, free, used;
} mem_t;
typedef struct {
    unsigned int gpu, memory;
} util_t;

int nvmlDeviceGetMemoryInfo(void *dev, mem_t *m)
{
    int d = *(int *)dev;
    if (d == 2) {
        return 999; /* NVML_ERROR_UNKNOWN */
    }
    m->total = 80ull << 30;
    m->used = (unsigned long long)(d + 1) << 30; /* 1 GiB, 2 GiB */
    m->free = m->total - m->used;
    return 0;
}

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} mem2_t;

/* v2: "GPU-aaaa" has 256 MiB reserved by the driver, which v2's used leaves
 * out (nvidia-smi's memory.used); "GPU-bbbb" does not support it (v1 then).
 * A wrong version is refused as NVML does. */
int nvmlDeviceGetMemoryInfo_v2(void *dev, mem2_t *m)
{
    int d = *(int *)dev;
    if (m->version != (unsigned int)(sizeof(mem2_t) | (2u << 24))) {
        return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    }
    if (d != 0) {
        return 3; /* NVML_ERROR_NOT_SUPPORTED */
    }
    m->total = 80ull << 30;
    m->reserved = 256ull << 20;
    m->used = (1ull << 30) - m->reserved;
    m->free = m->total - m->reserved - m->used;
    return 0;
}

int nvmlDeviceGetUtilizationRates(void *dev, util_t *u)
{
    u->gpu = 10u + 50u * (unsigned)*(int *)dev; /* 10 %, 60 % */
    u->memory = 5;
    return 0;
}

int nvmlDeviceGetTemperature(void *dev, int sensor, unsigned int *t)
{
    *t = sensor == 0 ? 40u + (unsigned)*(int *)dev : 0u;
    return 0;
}

int nvmlDeviceGetPowerUsage(void *dev, unsigned int *mw)
{
    if (*(int *)dev == 1) {
        return 3; /* NVML_ERROR_NOT_SUPPORTED: some boards do not report power */
    }
    *mw = 123456;
    return 0;
}
