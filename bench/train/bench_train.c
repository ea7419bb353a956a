/* bench_train.c - tokens/s, MFU and memory of troupe-train's CUDA backend on
 * GPT-2 shapes (bench/train; see bench/RESULTS.md).
 *
 *   troupe-bench-train [--model 124M|350M] [--batch B[,B...]] [--steps N]
 *                      [--warmup N] [--recompute 0|1] [--json FILE] [--no-ceiling] [--profile]
 *
 * One training step = zero_grads + forward_backward + grad_norm + AdamW (with
 * clipping at 1.0), exactly what the training loop does per optimizer step
 * without accumulation. Steps are timed on the host around a synchronised
 * step (forward_backward waits for the GPU, AdamW is then synced); the median
 * of the timed steps is reported. MFU uses llm.c's 6N + 6LCT FLOPs per token
 * against 989 TFLOP/s (H100/H200 dense bf16) and against a bf16 cuBLASLt GEMM
 * ceiling measured in the same run. Tokens are uniform random ids: the
 * kernels do the same work whatever the ids are. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "model.h"
#include "rng.h"
#include "train_cuda.h"

typedef struct result {
    const char *model;
    int B, T, recompute;
    size_t nparams;
    double step_ms, tok_s, mfu, mfu_ceiling, fwd_ms, bwd_ms, opt_ms, loss;
    double peak_gib, bytes_per_param, device_used_gib;
} result;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static tr_model_config model_cfg(const char *name)
{
    tr_model_config c = {12, 768, 12, 1024, 50257, 50304};
    if (strcmp(name, "350M") == 0 || strcmp(name, "355M") == 0) {
        c.layers = 24, c.width = 1024, c.heads = 16;
    }
    return c;
}

static int profile_last; /* --profile: bracket the last step with the CUDA profiler API (ncu/nsys ranges) */

static int bench_one(const char *model, int B, int steps, int warmup, int recompute, double ceiling,
                     result *r, tr_err *err)
{
    tr_model_config cfg = model_cfg(model);
    tr_backend_opts o = {.micro_batch = B, .precision = TR_PRECISION_BF16, .recompute = recompute};
    tr_backend *b = NULL;
    float *p = NULL, loss = 0, norm = 0;
    int32_t *in = NULL, *tg = NULL;
    double *ms = NULL;
    int rv;
    size_t n = (size_t)B * cfg.seq_len;
    uint64_t rng = 1;
    memset(r, 0, sizeof(*r));
    rv = tr_backend_cuda_create(&cfg, &o, &b, err);
    if (rv != TROUPE_OK) {
        goto out;
    }
    p = malloc(b->num_params * sizeof(float));
    in = malloc(n * sizeof(int32_t));
    tg = malloc(n * sizeof(int32_t));
    ms = malloc((size_t)steps * sizeof(double));
    if (p == NULL || in == NULL || tg == NULL || ms == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of host memory");
        goto out;
    }
    tr_model_init_params(&cfg, 1, p);
    for (size_t i = 0; i < n; i++) {
        in[i] = (int32_t)tr_rng_below(&rng, (uint64_t)cfg.vocab);
        tg[i] = (int32_t)tr_rng_below(&rng, (uint64_t)cfg.vocab);
    }
    if ((rv = b->ops->set_params(b, p, err)) != TROUPE_OK) {
        goto out;
    }
    for (int s = 0; s < warmup + steps; s++) {
        double t0 = now_ms();
        if (profile_last && s == warmup + steps - 1) {
            tr_cuda_profiler_start();
        }
        tr_adamw opt = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, s + 1};
        if ((rv = b->ops->zero_grads(b, err)) != TROUPE_OK ||
            (rv = b->ops->forward_backward(b, in, tg, B, cfg.seq_len, 1.0f, &loss, err)) != TROUPE_OK ||
            (rv = b->ops->grad_norm(b, &norm, err)) != TROUPE_OK) {
            goto out;
        }
        opt.grad_scale = norm > 1.0f ? 1.0f / norm : 1.0f;
        if ((rv = b->ops->adamw_update(b, &opt, err)) != TROUPE_OK ||
            (rv = b->ops->sync(b, err)) != TROUPE_OK) {
            goto out;
        }
        if (profile_last && s == warmup + steps - 1) {
            tr_cuda_profiler_stop();
        }
        if (s >= warmup) {
            ms[s - warmup] = now_ms() - t0;
        }
    }
    qsort(ms, steps, sizeof(double), cmp_double);
    tr_phase_times pt;
    tr_mem_stats mem;
    b->ops->phase_times(b, &pt);
    b->ops->mem_stats(b, &mem);
    double fpt = tr_model_flops_per_token(&cfg, b->num_params);
    r->model = model, r->B = B, r->T = cfg.seq_len, r->recompute = recompute, r->nparams = b->num_params;
    r->step_ms = ms[steps / 2];
    r->tok_s = n / (r->step_ms * 1e-3);
    r->mfu = fpt * r->tok_s / (TR_CUDA_PEAK_BF16_TFLOPS * 1e12);
    r->mfu_ceiling = ceiling > 0 ? fpt * r->tok_s / (ceiling * 1e12) : 0;
    r->fwd_ms = pt.forward_ms, r->bwd_ms = pt.backward_ms, r->opt_ms = pt.optimizer_ms, r->loss = loss;
    r->peak_gib = mem.peak_bytes / 1073741824.0;
    r->bytes_per_param = (double)mem.peak_bytes / b->num_params;
out:
    if (b != NULL) {
        b->ops->destroy(b);
    }
    free(p), free(in), free(tg), free(ms);
    return rv;
}

static void write_json(FILE *f, const char *dev, double ceiling, const result *rs, int nr)
{
    fprintf(f, "{\n  \"device\": \"%s\",\n  \"peak_tflops\": %.1f,\n  \"gemm_ceiling_tflops\": %.1f,\n", dev,
            TR_CUDA_PEAK_BF16_TFLOPS, ceiling);
    fprintf(f, "  \"results\": [\n");
    for (int i = 0; i < nr; i++) {
        const result *r = &rs[i];
        fprintf(
            f,
            "    {\"impl\": \"troupe-cuda\", \"model\": \"%s\", \"params\": %zu, \"B\": %d, \"T\": %d, "
            "\"recompute\": %d, \"step_ms\": %.3f, \"tok_s\": %.0f, \"mfu\": %.4f, \"mfu_vs_ceiling\": %.4f, "
            "\"forward_ms\": %.3f, \"backward_ms\": %.3f, \"optimizer_ms\": %.3f, \"loss\": %.4f, "
            "\"peak_gib\": %.3f, \"peak_bytes_per_param\": %.1f}%s\n",
            r->model, r->nparams, r->B, r->T, r->recompute, r->step_ms, r->tok_s, r->mfu, r->mfu_ceiling,
            r->fwd_ms, r->bwd_ms, r->opt_ms, r->loss, r->peak_gib, r->bytes_per_param, i + 1 < nr ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
}

int main(int argc, char **argv)
{
    const char *model = "124M", *json = NULL, *batches = "16";
    int steps = 10, warmup = 3, recompute = 0, do_ceiling = 1, nr = 0;
    result rs[16];
    char dev[128] = "?";
    double ceiling = 0;
    tr_err err = {0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
            model = argv[++i];
        } else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
            batches = argv[++i];
        } else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
            steps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) {
            warmup = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--recompute") == 0 && i + 1 < argc) {
            recompute = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            json = argv[++i];
        } else if (strcmp(argv[i], "--profile") == 0) {
            profile_last = 1;
        } else if (strcmp(argv[i], "--no-ceiling") == 0) {
            do_ceiling = 0;
        } else {
            fprintf(stderr,
                    "usage: %s [--model 124M|350M] [--batch B[,B..]] [--steps N] [--warmup N] "
                    "[--recompute 0|1] [--json FILE] [--no-ceiling] [--profile]\n",
                    argv[0]);
            return 2;
        }
    }
    if (steps < 1) {
        steps = 1;
    }
    if (tr_cuda_device_info(0, dev, sizeof(dev), NULL, NULL, &err) != TROUPE_OK) {
        printf("SKIP: no CUDA device (%s)\n", err.msg);
        return 77;
    }
    if (do_ceiling && tr_cuda_gemm_ceiling(0, 8192, &ceiling, &err) != TROUPE_OK) {
        fprintf(stderr, "gemm ceiling: %s\n", err.msg);
        return 1;
    }
    printf("device %s, bf16 GEMM ceiling (8192^3 cuBLASLt) %.1f TFLOP/s, peak %.0f\n", dev, ceiling,
           TR_CUDA_PEAK_BF16_TFLOPS);
    char *list = strdup(batches), *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok != NULL && nr < 16; tok = strtok_r(NULL, ",", &save)) {
        int rv = bench_one(model, atoi(tok), steps, warmup, recompute, ceiling, &rs[nr], &err);
        if (rv != TROUPE_OK) {
            printf("%s B=%s: %s: %s\n", model, tok, troupe_strerror(rv), err.msg);
            continue;
        }
        nr++;
    }
    free(list);
    printf("%-5s %4s %5s %3s %9s %10s %6s %8s %8s %8s %8s %8s %9s\n", "model", "B", "T", "rc", "step_ms",
           "tok/s", "MFU", "MFU/ceil", "fwd_ms", "bwd_ms", "opt_ms", "peakGiB", "B/param");
    for (int i = 0; i < nr; i++) {
        const result *r = &rs[i];
        printf("%-5s %4d %5d %3d %9.2f %10.0f %5.1f%% %7.1f%% %8.2f %8.2f %8.2f %8.2f %9.1f\n", r->model,
               r->B, r->T, r->recompute, r->step_ms, r->tok_s, 100 * r->mfu, 100 * r->mfu_ceiling, r->fwd_ms,
               r->bwd_ms, r->opt_ms, r->peak_gib, r->bytes_per_param);
    }
    if (json != NULL) {
        FILE *f = fopen(json, "w");
        if (f == NULL) {
            perror(json);
            return 1;
        }
        write_json(f, dev, ceiling, rs, nr);
        fclose(f);
    }
    return nr > 0 ? 0 : 1;
}
