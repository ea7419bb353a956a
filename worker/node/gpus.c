/* gpus.c - GPU discovery through the CUDA driver API, and simulated GPUs.
 *
 * The driver is dlopen'ed rather than linked: troupe-node then runs on CPU
 * machines and in CPU-only builds, and reports real GPUs wherever a driver is
 * installed. Only stable driver entry points are used (the _v2 memory query). */
#include "gpus.h"

#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_name_fn)(char *, int, int);
typedef int (*cu_mem_fn)(size_t *, int);
typedef int (*cu_uuid_fn)(unsigned char *, int);

static const char *model_name(const char *alias, char *buf, size_t size)
{
    /* Short names read as NVIDIA parts; anything else is taken as given. */
    if (alias[0] == 'H' || alias[0] == 'A' || alias[0] == 'B' || alias[0] == 'L') {
        snprintf(buf, size, "NVIDIA %s", alias);
    } else {
        snprintf(buf, size, "%s", alias);
    }
    return buf;
}

static int parse_mem(const char *s, uint64_t *out)
{
    char *end;
    double v = strtod(s, &end);
    double mul;

    /* Written so that NaN fails too: it compares false with everything. */
    if (end == s || !(v > 0)) {
        return -1;
    }
    if (strcasecmp(end, "GB") == 0) {
        mul = 1e9;
    } else if (strcasecmp(end, "GIB") == 0) {
        mul = 1073741824.0;
    } else if (strcasecmp(end, "MB") == 0) {
        mul = 1e6;
    } else if (strcasecmp(end, "MIB") == 0) {
        mul = 1048576.0;
    } else {
        return -1;
    }
    /* Beyond 1 PB per GPU is a typo, and would overflow 64 bits soon after. */
    if (!(v * mul <= 1e15)) {
        return -1;
    }
    *out = (uint64_t)(v * mul);
    return 0;
}

int tr_gpus_parse_fake(const char *spec, const char *name, tr_gpu_info *out, size_t *n, tr_err *err)
{
    char model[64] = "Simulated GPU", full[96];
    uint64_t mem = 80ull * 1000 * 1000 * 1000;
    char *end;
    long count;

    *n = 0;
    count = strtol(spec, &end, 10);
    if (end == spec || count < 0 || count > TR_MAX_GPUS) {
        return tr_err_set(
            err, TROUPE_INVALID_ARGUMENT,
            "--fake-gpus '%s': expected N[xMODEL][:MEM] with N from 0 to %d (e.g. 4xH200:141GB)", spec,
            TR_MAX_GPUS);
    }
    if (*end == 'x' || *end == 'X') {
        const char *m = end + 1;
        size_t len = strcspn(m, ":");
        if (len == 0 || len >= sizeof(model)) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "--fake-gpus '%s': empty or long model name",
                              spec);
        }
        memcpy(model, m, len);
        model[len] = '\0';
        end = (char *)m + len;
    }
    if (*end == ':') {
        if (parse_mem(end + 1, &mem) != 0) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                              "--fake-gpus '%s': memory '%s' should look like 141GB, 80GiB or 24000MB", spec,
                              end + 1);
        }
    } else if (*end != '\0') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "--fake-gpus '%s': unexpected '%s'", spec, end);
    }
    model_name(model, full, sizeof(full));
    for (long i = 0; i < count; i++) {
        out[i].index = (uint32_t)i;
        snprintf(out[i].model, sizeof(out[i].model), "%s", full);
        out[i].memory_bytes = mem;
        snprintf(out[i].uuid, sizeof(out[i].uuid), "GPU-sim-%.40s-%ld", name, i);
        out[i].simulated = 1;
    }
    *n = (size_t)count;
    return TROUPE_OK;
}

int tr_gpus_discover(tr_gpu_info *out, size_t *n, tr_err *err)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    cu_init_fn init;
    cu_count_fn count;
    cu_get_fn get;
    cu_name_fn name;
    cu_mem_fn mem;
    cu_uuid_fn uuid;
    int devs = 0, rc, rv = TROUPE_OK;

    *n = 0;
    if (lib == NULL) {
        return TROUPE_OK; /* no driver: a CPU machine */
    }
    init = (cu_init_fn)dlsym(lib, "cuInit");
    count = (cu_count_fn)dlsym(lib, "cuDeviceGetCount");
    get = (cu_get_fn)dlsym(lib, "cuDeviceGet");
    name = (cu_name_fn)dlsym(lib, "cuDeviceGetName");
    mem = (cu_mem_fn)dlsym(lib, "cuDeviceTotalMem_v2");
    uuid = (cu_uuid_fn)dlsym(lib, "cuDeviceGetUuid");
    if (!init || !count || !get || !name || !mem || !uuid) {
        rv = tr_err_set(err, TROUPE_INTERNAL, "libcuda.so.1 lacks the device query functions");
        goto out;
    }
    if ((rc = init(0)) != 0) {
        /* 100 = CUDA_ERROR_NO_DEVICE: a driver without GPUs is a CPU node. */
        if (rc != 100) {
            rv = tr_err_set(err, TROUPE_UNAVAILABLE, "cuInit failed with CUDA driver error %d", rc);
        }
        goto out;
    }
    if ((rc = count(&devs)) != 0) {
        rv = tr_err_set(err, TROUPE_UNAVAILABLE, "cuDeviceGetCount failed with CUDA driver error %d", rc);
        goto out;
    }
    for (int i = 0; i < devs && i < TR_MAX_GPUS; i++) {
        int dev;
        size_t bytes = 0;
        unsigned char u[16];
        if (get(&dev, i) != 0 || name(out[i].model, sizeof(out[i].model), dev) != 0 ||
            mem(&bytes, dev) != 0 || uuid(u, dev) != 0) {
            rv = tr_err_set(err, TROUPE_UNAVAILABLE, "cannot query GPU %d through the CUDA driver", i);
            goto out;
        }
        out[i].index = (uint32_t)i;
        out[i].memory_bytes = bytes;
        out[i].simulated = 0;
        snprintf(out[i].uuid, sizeof(out[i].uuid),
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
                 u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
        *n = (size_t)(i + 1);
    }
out:
    /* Keep the driver loaded: unloading after cuInit is not supported. */
    (void)lib;
    return rv;
}

/* nth_entry copies the i-th comma-separated entry of list into buf. */
static int nth_entry(const char *list, long i, char *buf, size_t size)
{
    const char *p = list;
    for (long k = 0; k < i && p != NULL; k++) {
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    if (p == NULL || *p == '\0' || *p == ',') {
        return -1;
    }
    size_t n = strcspn(p, ",");
    if (n >= size) {
        return -1;
    }
    memcpy(buf, p, n);
    buf[n] = '\0';
    return 0;
}

int tr_gpus_translate_visible(const char *agent_visible, const char *assigned, char *out, size_t size,
                              tr_err *err)
{
    size_t off = 0;
    const char *p = assigned;

    out[0] = '\0';
    while (*p != '\0') {
        char entry[128], *end;
        long idx = strtol(p, &end, 10);
        if (end == p || idx < 0 || nth_entry(agent_visible, idx, entry, sizeof(entry)) != 0) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                              "GPU index '%s' is not in this agent's CUDA_VISIBLE_DEVICES='%s'", p, agent_visible);
        }
        int w = snprintf(out + off, size - off, "%s%s", off ? "," : "", entry);
        if (w < 0 || (size_t)w >= size - off) {
            return tr_err_set(err, TROUPE_OUT_OF_RANGE, "CUDA_VISIBLE_DEVICES too long");
        }
        off += (size_t)w;
        p = (*end == ',') ? end + 1 : end;
    }
    return TROUPE_OK;
}
