/* main.c - the troupe-train command.
 *
 *   troupe-train --config FILE [--steps N] [--device auto|cpu|cuda] [--set KEY=VALUE]...
 *                [--metrics-json FILE] [-o text|json] [--check-config] [--log-level L]
 *   troupe-train --make-data FILE [--vocab N] [--tokens N] [--seed S]
 *
 * Settings: defaults < config file < TROUPE_TRAIN_* environment < flags. One
 * line per optimiser step goes to stdout (key=value, or JSON with -o json);
 * logs and the final error go to stderr. Exit status: 0 done, 1 training
 * failed, 2 bad usage or config, 130 interrupted (after a checkpoint). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "log.h"
#include "train.h"

#ifdef TR_HAVE_CUDA
#include "train_cuda.h"
#endif

#define MAX_SETS 64

typedef struct args {
    const char *config, *make_data, *output, *log_level;
    const char *keys[MAX_SETS], *values[MAX_SETS], *origins[MAX_SETS];
    char owned[MAX_SETS][256];
    int nsets, check_config, help;
    long long vocab, tokens, seed;
} args;

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

#ifdef TR_HAVE_CUDA
/* cuda_device_name feeds the MFU peak table ("NVIDIA H200"). */
static const char *cuda_device_name(int ordinal)
{
    static char name[256];
    tr_err err = {0};
    if (tr_cuda_device_info(ordinal, name, sizeof(name), NULL, NULL, &err) != TROUPE_OK) {
        return NULL;
    }
    return name;
}

/* cuda_gemm_ceiling measures the bf16 GEMM rate the MFU can be set against. */
static int cuda_gemm_ceiling(int ordinal, double *tflops, tr_err *err)
{
    return tr_cuda_gemm_ceiling(ordinal, 8192, tflops, err);
}
#endif

static void usage(FILE *out)
{
    fputs("usage: troupe-train --config FILE [--steps N] [--device auto|cpu|cuda] [--set KEY=VALUE]...\n"
          "                    [--metrics-json FILE] [-o text|json] [--check-config] [--log-level LEVEL]\n"
          "       troupe-train --make-data FILE [--vocab N] [--tokens N] [--seed S]\n"
          "\n"
          "Trains a GPT-2 style model on a token file and prints one line per step.\n"
          "--make-data writes a small learnable token file (default vocab 64, 65536 tokens).\n"
          "Token file: \"TRTOKENS\", u32 version 1, u32 vocab, u64 count, u64 0, then count u16\n"
          "tokens (little-endian); any other file is read as bytes (vocab 256).\n"
          "\n"
          "Settings (YAML keys; environment TROUPE_TRAIN_<KEY> with dots as underscores):\n",
          out);
    for (const tr_cfg_desc *d = tr_train_config_table; d->name != NULL; d++) {
        fprintf(out, "  %-24s %s%s%s%s\n", d->name, d->help, d->def ? " (default " : "", d->def ? d->def : "",
                d->def ? ")" : "");
    }
}

/* add_set records a flag to apply after the file and environment. */
static int add_set(args *a, const char *key, const char *value, const char *origin)
{
    if (a->nsets == MAX_SETS) {
        return -1;
    }
    a->keys[a->nsets] = key;
    a->values[a->nsets] = value;
    a->origins[a->nsets] = origin;
    a->nsets++;
    return 0;
}

/* add_kv splits "key=value" from --set. */
static int add_kv(args *a, const char *kv)
{
    const char *eq = strchr(kv, '=');
    char *key = a->owned[a->nsets < MAX_SETS ? a->nsets : 0];

    if (eq == NULL || eq == kv || (size_t)(eq - kv) >= sizeof(a->owned[0]) || a->nsets == MAX_SETS) {
        return -1;
    }
    memcpy(key, kv, (size_t)(eq - kv));
    key[eq - kv] = '\0';
    return add_set(a, key, eq + 1, "--set");
}

static int parse_args(args *a, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rv = 0, takes = 1;
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            a->help = 1;
            takes = 0;
        } else if (strcmp(f, "--check-config") == 0) {
            a->check_config = 1;
            takes = 0;
        } else if (v == NULL) {
            fprintf(stderr, "troupe-train: %s: missing value or unknown flag\n", f);
            return -1;
        } else if (strcmp(f, "--config") == 0 || strcmp(f, "-c") == 0) {
            a->config = v;
        } else if (strcmp(f, "--make-data") == 0) {
            a->make_data = v;
        } else if (strcmp(f, "-o") == 0) {
            a->output = v;
        } else if (strcmp(f, "--log-level") == 0) {
            a->log_level = v;
        } else if (strcmp(f, "--steps") == 0) {
            rv = add_set(a, "train.steps", v, "--steps");
        } else if (strcmp(f, "--device") == 0) {
            rv = add_set(a, "device", v, "--device");
        } else if (strcmp(f, "--metrics-json") == 0) {
            rv = add_set(a, "metrics.json", v, "--metrics-json");
        } else if (strcmp(f, "--set") == 0) {
            rv = add_kv(a, v);
        } else if (strcmp(f, "--vocab") == 0 || strcmp(f, "--tokens") == 0 || strcmp(f, "--seed") == 0) {
            char *end;
            long long x = strtoll(v, &end, 0);
            if (*end != '\0' || x <= 0) {
                fprintf(stderr, "troupe-train: %s: expected a positive integer, got '%s'\n", f, v);
                return -1;
            }
            *(f[2] == 'v' ? &a->vocab : f[2] == 't' ? &a->tokens : &a->seed) = x;
        } else {
            fprintf(stderr, "troupe-train: unknown flag %s (see --help)\n", f);
            return -1;
        }
        if (rv != 0) {
            fprintf(stderr, "troupe-train: %s %s: expected KEY=VALUE (at most %d)\n", f, v, MAX_SETS);
            return -1;
        }
        i += takes;
    }
    return 0;
}

/* load_config applies defaults, the file, the environment and the flags. */
static int load_config(const args *a, tr_train_config *cfg, tr_err *err)
{
    int rv = tr_train_config_init(cfg, err);

    if (rv == TROUPE_OK && a->config != NULL) {
        rv = tr_cfg_load_file(tr_train_config_table, cfg, a->config, err);
    }
    if (rv == TROUPE_OK) {
        rv = tr_cfg_load_env(tr_train_config_table, cfg, "TROUPE_TRAIN", err);
    }
    for (int i = 0; i < a->nsets && rv == TROUPE_OK; i++) {
        rv = tr_cfg_set(tr_train_config_table, cfg, a->keys[i], a->values[i], a->origins[i], err);
    }
    if (rv == TROUPE_OK) {
        rv = tr_train_config_check(cfg, err);
    }
    return rv;
}

static int on_step(const tr_train_metrics *m, void *user)
{
    const args *a = user;
    char line[1024];

    if (a->output != NULL && strcmp(a->output, "json") == 0) {
        tr_train_metrics_json(m, line, sizeof(line));
    } else {
        tr_train_metrics_line(m, line, sizeof(line));
    }
    printf("%s\n", line);
    fflush(stdout);
    return interrupted;
}

static int make_data(const args *a)
{
    tr_err err = {0};
    int rv =
        tr_data_make_learnable(a->make_data, a->vocab ? (int)a->vocab : 64,
                               a->tokens ? (size_t)a->tokens : 65536, a->seed ? (uint64_t)a->seed : 1, &err);
    if (rv != TROUPE_OK) {
        fprintf(stderr, "troupe-train: %s\n", err.msg);
        return 1;
    }
    return 0;
}

static int train(args *a)
{
    tr_train_config cfg;
    tr_err err = {0};
    struct sigaction sa = {.sa_handler = on_signal};
    int rv = load_config(a, &cfg, &err), status = 0;

    if (rv != TROUPE_OK) {
        fprintf(stderr, "troupe-train: %s\n", err.msg);
        status = 2;
        goto out;
    }
    if (a->check_config) {
        tr_cfg_print(tr_train_config_table, &cfg, stdout);
        goto out;
    }
#ifdef TR_HAVE_CUDA
    cfg.create_cuda = tr_backend_cuda_create;
    cfg.device_name = cuda_device_name;
    cfg.gemm_ceiling = cuda_gemm_ceiling;
#endif
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    rv = tr_train_run(&cfg, on_step, a, &err);
    if (rv == TROUPE_CANCELLED && interrupted) {
        fprintf(stderr, "troupe-train: interrupted: %s\n", err.msg);
        status = 130;
    } else if (rv != TROUPE_OK) {
        fprintf(stderr, "troupe-train: %s\n", err.msg);
        status = 1;
    }
out:
    tr_train_config_fini(&cfg);
    return status;
}

int main(int argc, char **argv)
{
    args a = {0};
    int level = TR_LOG_NOTICE;

    if (parse_args(&a, argc, argv) != 0) {
        return 2;
    }
    if (a.help) {
        usage(stdout);
        return 0;
    }
    if (a.log_level != NULL && (level = tr_log_level_parse(a.log_level)) < 0) {
        fprintf(stderr, "troupe-train: --log-level %s: expected err|warning|notice|info|debug\n",
                a.log_level);
        return 2;
    }
    if (a.output != NULL && strcmp(a.output, "text") != 0 && strcmp(a.output, "json") != 0) {
        fprintf(stderr, "troupe-train: -o %s: expected text or json\n", a.output);
        return 2;
    }
    tr_log_init("troupe-train", level);
    if (a.make_data != NULL) {
        return make_data(&a);
    }
    if (a.config == NULL && getenv("TROUPE_TRAIN_DATA_PATH") == NULL && a.nsets == 0) {
        usage(stderr);
        return 2;
    }
    return train(&a);
}
