/* metrics.c - MFU peak table and the per-step line and JSON formats. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train.h"

/* Dense bf16 peaks by device-name substring, first match wins (so "H100
 * PCIe" precedes "H100"). SXM figures from NVIDIA's datasheets as used by
 * nanoGPT, Megatron-LM and llm.c's mfu.h (988.8 computed for H100 SXM). */
static const struct {
    const char *match;
    double flops;
} peaks[] = {
    {"H100 PCIe", 756e12}, {"H100 NVL", 835e12}, {"H200", 989e12}, {"H100", 989e12},
    {"GH200", 989e12},     {"A100", 312e12},     {"L40S", 362e12}, {"A10G", 70e12},
};

double tr_train_peak_flops(const char *device_name)
{
    if (device_name == NULL) {
        return 0.0;
    }
    for (size_t i = 0; i < sizeof(peaks) / sizeof(peaks[0]); i++) {
        if (strstr(device_name, peaks[i].match) != NULL) {
            return peaks[i].flops;
        }
    }
    return 0.0;
}

/* fmt_opt prints " key=%.2f", or " key=n/a" when value is NAN. */
static int fmt_opt(char *buf, size_t len, const char *key, double value)
{
    if (isnan(value)) {
        return snprintf(buf, len, " %s=n/a", key);
    }
    return snprintf(buf, len, " %s=%.2f", key, value);
}

#define APPEND(expr)                                                                                         \
    do {                                                                                                     \
        int n_ = (expr);                                                                                     \
        if (n_ > 0 && (size_t)n_ < len) {                                                                    \
            buf += n_;                                                                                       \
            len -= (size_t)n_;                                                                               \
        } else {                                                                                             \
            len = 0;                                                                                         \
        }                                                                                                    \
    } while (0)

void tr_train_metrics_line(const tr_train_metrics *m, char *buf, size_t len)
{
    if (len == 0) {
        return;
    }
    buf[0] = '\0';
    APPEND(snprintf(buf, len, "step=%lld/%lld loss=%.4f", (long long)m->step, (long long)m->steps, m->loss));
    if (!isnan(m->val_loss)) {
        APPEND(snprintf(buf, len, " val_loss=%.4f", m->val_loss));
    }
    APPEND(snprintf(buf, len, " grad_norm=%.4f lr=%.4e step_ms=%.2f tok_s=%.0f", m->grad_norm, m->lr,
                    m->step_ms, m->tokens_per_s));
    APPEND(isnan(m->mfu) ? snprintf(buf, len, " mfu=n/a")
                         : snprintf(buf, len, " mfu=%.2f%%", 100.0 * m->mfu));
    if (!isnan(m->mfu_gemm)) {
        APPEND(snprintf(buf, len, " mfu_gemm=%.2f%%", 100.0 * m->mfu_gemm));
    }
    APPEND(snprintf(buf, len, " mem_mib=%.1f peak_mib=%.1f", m->mem.in_use_bytes / 1048576.0,
                    m->mem.peak_bytes / 1048576.0));
    APPEND(fmt_opt(buf, len, "fwd_ms", m->phase.forward_ms));
    APPEND(fmt_opt(buf, len, "bwd_ms", m->phase.backward_ms));
    APPEND(fmt_opt(buf, len, "opt_ms", m->phase.optimizer_ms));
}

/* json_num prints a number or null (JSON has no NaN). */
static int json_num(char *buf, size_t len, const char *key, double v)
{
    if (!isfinite(v)) {
        return snprintf(buf, len, ",\"%s\":null", key);
    }
    return snprintf(buf, len, ",\"%s\":%.9g", key, v);
}

void tr_train_metrics_json(const tr_train_metrics *m, char *buf, size_t len)
{
    if (len == 0) {
        return;
    }
    buf[0] = '\0';
    APPEND(snprintf(buf, len, "{\"step\":%lld,\"steps\":%lld,\"backend\":\"%s\",\"tokens\":%lld",
                    (long long)m->step, (long long)m->steps, m->backend ? m->backend : "",
                    (long long)m->tokens));
    APPEND(json_num(buf, len, "loss", m->loss));
    APPEND(json_num(buf, len, "val_loss", m->val_loss));
    APPEND(json_num(buf, len, "grad_norm", m->grad_norm));
    APPEND(json_num(buf, len, "lr", m->lr));
    APPEND(json_num(buf, len, "step_ms", m->step_ms));
    APPEND(json_num(buf, len, "tokens_per_s", m->tokens_per_s));
    APPEND(json_num(buf, len, "mfu", m->mfu));
    APPEND(json_num(buf, len, "mfu_gemm", m->mfu_gemm));
    APPEND(snprintf(buf, len, ",\"mem_in_use_bytes\":%llu,\"mem_peak_bytes\":%llu,\"mem_total_bytes\":%llu",
                    (unsigned long long)m->mem.in_use_bytes, (unsigned long long)m->mem.peak_bytes,
                    (unsigned long long)m->mem.total_bytes));
    APPEND(json_num(buf, len, "forward_ms", m->phase.forward_ms));
    APPEND(json_num(buf, len, "backward_ms", m->phase.backward_ms));
    APPEND(json_num(buf, len, "optimizer_ms", m->phase.optimizer_ms));
    APPEND(snprintf(buf, len, "}"));
}
