/* main.c - the troupe-train command.
 *
 *   troupe-train --config FILE [--role policy|generation] [--steps N] [--device auto|cpu|cuda]
 *                [--set KEY=VALUE]... [--metrics-json FILE] [-o text|json] [--check-config] [--log-level L]
 *   troupe-train --make-data FILE [--vocab N] [--tokens N] [--seed S]
 *
 * Settings: defaults < config file < TROUPE_TRAIN_* environment < flags. One
 * line per optimiser step goes to stdout (key=value, or JSON with -o json);
 * logs and the final error go to stderr. Exit status: 0 done, 1 training
 * failed, 2 bad usage or config, 130 interrupted (after a checkpoint).
 *
 * --role generation (under troupe only) trains nothing: it takes the policy
 * group's weights over the job's refit communicator and prints one
 * "refit step=..." line per refit (refit.h, generation.c). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_troupe.h"
#include "data.h"
#include "log.h"
#include "refit.h"
#include "train.h"
#include "train_int.h"
#include "under_troupe.h"

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
    tr_troupe *troupe; /* the worker API under troupe; NULL standalone */
    tr_comm *comm;     /* the group's communicator under troupe, when there is one */
    tr_comm *refit;    /* the refit communicator (policy and generation), when the job has one */
    tr_refit_gather gather;
    uint32_t refit_epoch;
    uint32_t group_epoch; /* dp.elastic: the epoch of comm */
    const tr_train_config *cfg;
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

/* on_gpu: training will run on a CUDA device (device cuda, or auto with one). */
static int on_gpu(const tr_train_config *cfg)
{
#ifdef TR_HAVE_CUDA
    return strcmp(cfg->device, "cuda") == 0 ||
           (strcmp(cfg->device, "auto") == 0 && cuda_device_name((int)cfg->gpu) != NULL);
#else
    (void)cfg;
    return 0;
#endif
}

/* elastic_open joins the group's communicator of the current epoch for
 * dp.elastic: quiet, since a peer's loss is not this rank's failure (the
 * group goes on without it). */
static int elastic_open(args *a, tr_comm **c, tr_err *err)
{
    const tr_train_config *cfg = a->cfg;
    troupe_worker_ctx *w = tr_troupe_worker(a->troupe);
    uint32_t init_ms = (uint32_t)cfg->dp_init_timeout_ms, op_ms = (uint32_t)cfg->dp_timeout_ms;

    if (on_gpu(cfg)) {
#if defined(TR_HAVE_CUDA) && defined(TR_HAVE_NCCL)
        return tr_comm_nccl_open_quiet(w, NULL, (int)cfg->gpu, init_ms, op_ms, 1, c, err);
#else
        return tr_err_set(err, TROUPE_UNIMPLEMENTED,
                          "data parallelism on the GPU needs NCCL, and this troupe-train was built without it");
#endif
    }
    return tr_comm_coll_open_named(w, NULL, init_ms, op_ms, 1, c, err);
}

/* elastic_rejoin (tr_train_config.rejoin): drops the broken communicator
 * without waiting on its peers (NCCL: ncclCommAbort), waits for the head's
 * next membership of the group (dp.init_timeout_ms) and joins the new
 * epoch's communicator (NCCL: its rank 0 publishes a new ID through the
 * head, as at the start). */
static int elastic_rejoin(void *user, tr_comm **c, tr_err *err)
{
    args *a = user;
    troupe_worker_ctx *w = tr_troupe_worker(a->troupe);
    troupe_comm_info m = {0};
    troupe_error e = {0};
    uint32_t wait_ms = (uint32_t)a->cfg->dp_init_timeout_ms;
    troupe_status st;
    int rv;

    tr_comm_abort(*c);
    *c = NULL;
    a->comm = NULL;
    for (;;) {
        st = troupe_worker_await_membership(w, a->group_epoch, wait_ms, &m, &e);
        if (st != TROUPE_OK) {
            return tr_err_set(err, st,
                              "dp.elastic: no membership of the group after epoch %u within %u ms "
                              "(dp.init_timeout_ms): %s",
                              a->group_epoch, wait_ms, e.message[0] ? e.message : troupe_strerror(st));
        }
        a->group_epoch = m.epoch;
        if ((rv = elastic_open(a, c, err)) == TROUPE_OK) {
            a->comm = *c;
            return TROUPE_OK;
        }
        /* a second loss while the ranks met: that epoch never stands, the
         * head's next one may */
        TR_LOG(TR_LOG_NOTICE, "elastic: the communicator of epoch %u did not stand (%s); waiting for the next",
               m.epoch, err->msg);
        tr_err_clear(err);
    }
}

/* elastic_moved (tr_train_config.membership_moved): the control poll told
 * a newer epoch than this rank's communicator (the group grew back). */
static int elastic_moved(void *user)
{
    args *a = user;
    troupe_comm_info now = {0};

    return troupe_worker_membership(tr_troupe_worker(a->troupe), &now, NULL) == TROUPE_OK &&
           now.epoch > a->group_epoch;
}

/* group_comm joins the worker group's communicator under troupe: NCCL when
 * training runs on a GPU (always, so that the GPU path is exercised even at
 * world size 1), the CPU collective otherwise when data parallelism is on
 * (dp.mode auto with WORLD_SIZE > 1, or on). cfg->comm is set when the
 * training loop is to use it (data parallelism). */
static int group_comm(args *a, tr_train_config *cfg, tr_err *err)
{
    const troupe_worker_self *s = troupe_worker_self_info(tr_troupe_worker(a->troupe));
    int dp = strcmp(cfg->dp_mode, "on") == 0 || (strcmp(cfg->dp_mode, "auto") == 0 && s->world_size > 1);
    uint32_t init_ms = (uint32_t)cfg->dp_init_timeout_ms, op_ms = (uint32_t)cfg->dp_timeout_ms;
    int rv = TROUPE_OK;

    if (dp && cfg->dp_elastic) {
        troupe_comm_info info = {0};
        troupe_error e = {0};
        troupe_status st = troupe_worker_comm_info(tr_troupe_worker(a->troupe), NULL, &info, &e);
        if (st != TROUPE_OK) {
            return tr_err_set(err, st, "dp.elastic: the group's communicator: %s", e.message);
        }
        a->group_epoch = info.epoch;
        cfg->rejoin = elastic_rejoin;
        cfg->membership_moved = elastic_moved;
        cfg->elastic_user = a;
        cfg->placed_size = (int)s->world_size;
        rv = elastic_open(a, &a->comm, err);
    } else if (on_gpu(cfg)) {
#if defined(TR_HAVE_CUDA) && defined(TR_HAVE_NCCL)
        rv = tr_comm_nccl_open(tr_troupe_worker(a->troupe), (int)cfg->gpu, init_ms, op_ms, &a->comm, err);
#else
        if (dp) {
            rv = tr_err_set(
                err, TROUPE_UNIMPLEMENTED,
                "data parallelism on the GPU needs NCCL, and this troupe-train was built without it");
        }
#endif
    } else if (dp) {
        rv = tr_comm_coll_open(tr_troupe_worker(a->troupe), init_ms, op_ms, &a->comm, err);
    } else {
        TR_LOG(TR_LOG_NOTICE, "no communicator: world size %u, dp.mode %s, device %s", s->world_size,
               cfg->dp_mode, cfg->device);
    }
    if (rv == TROUPE_OK && a->comm != NULL && dp) {
        cfg->comm = a->comm;
    } else if (rv == TROUPE_OK && a->comm != NULL && s->world_size > 1) {
        TR_LOG(TR_LOG_WARNING, "dp.mode off with WORLD_SIZE=%u: each rank trains its own model",
               s->world_size);
    }
    return rv;
}

/* refit_join opens the refit communicator (NCCL when this worker runs on a
 * GPU, else the CPU collective) and remembers its epoch, for a rejoin. */
static int refit_join(args *a, const tr_train_config *cfg, uint32_t init_ms, tr_err *err)
{
    troupe_worker_ctx *w = tr_troupe_worker(a->troupe);
    troupe_comm_info info = {0};
    troupe_error e = {0};
    troupe_status st = troupe_worker_comm_info(w, cfg->refit_comm, &info, &e);

    if (st != TROUPE_OK) {
        return tr_err_set(err, st, "refit communicator %s: %s", cfg->refit_comm, e.message);
    }
    a->refit_epoch = info.epoch;
    /* The weights travel through host memory either way (get_params, then
     * set_params), so the CPU collective costs little more than NCCL here
     * and works where NCCL cannot: two workers on one GPU, or a GPU policy
     * with CPU generation workers. */
    if (on_gpu(cfg) && strcmp(cfg->refit_transport, "cpu") != 0) {
#if defined(TR_HAVE_CUDA) && defined(TR_HAVE_NCCL)
        return tr_comm_nccl_open_named(w, cfg->refit_comm, (int)cfg->gpu, init_ms, (uint32_t)cfg->refit_timeout_ms,
                                       &a->refit, err);
#else
        return tr_err_set(err, TROUPE_UNIMPLEMENTED,
                          "a refit between GPU workers needs NCCL, and this troupe-train was built without it");
#endif
    }
    /* A generation worker rejoins after a policy restart: its collective
     * must not report a peer gone as its own failure (the job's reason would
     * name it); it reports what it cannot recover from itself. */
    return tr_comm_coll_open_named(w, cfg->refit_comm, init_ms, (uint32_t)cfg->refit_timeout_ms,
                                   strcmp(cfg->role, "generation") == 0, &a->refit, err);
}

/* policy_refit joins the refit communicator when the job declares it and
 * this worker is a member; a job without one trains as before. */
static int policy_refit(args *a, tr_train_config *cfg, tr_err *err)
{
    troupe_comm_info info;
    troupe_error e = {0};
    troupe_status st = troupe_worker_comm_info(tr_troupe_worker(a->troupe), cfg->refit_comm, &info, &e);
    int rv;

    if (st == TROUPE_NOT_FOUND || st == TROUPE_PERMISSION_DENIED) {
        TR_LOG(TR_LOG_INFO, "no refit: %s", e.message);
        return TROUPE_OK;
    }
    rv = refit_join(a, cfg, (uint32_t)cfg->dp_init_timeout_ms, err);
    if (rv == TROUPE_OK) {
        cfg->refit = a->refit;
        TR_LOG(TR_LOG_NOTICE,
               "refit: rank %d of %d of communicator %s over %s, every %lld steps and at the end, deadline %lld ms",
               a->refit->rank, a->refit->size, cfg->refit_comm, a->refit->ops->name, (long long)cfg->refit_every,
               (long long)cfg->refit_timeout_ms);
    }
    return rv;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* generation_rejoin (tr_refit_link.rejoin): the refit communicator failed
 * because a rank went away. When the policy group restarts, the head moves
 * the communicator to a new epoch; join that one. When the job ends instead,
 * the head asks this worker to stop. */
static int generation_rejoin(void *user, tr_comm **c, tr_err *err)
{
    args *a = user;
    troupe_worker_ctx *w = tr_troupe_worker(a->troupe);
    int64_t deadline = mono_ms() + a->cfg->refit_wait_ms;
    uint32_t old = a->refit_epoch;

    tr_comm_close(*c, 1);
    *c = a->refit = NULL;
    while (mono_ms() < deadline) {
        troupe_comm_info info = {0};
        troupe_error e = {0};
        if (interrupted || tr_troupe_should_stop(a->troupe)) {
            return tr_err_set(err, TROUPE_CANCELLED, "stopped while waiting for the refit communicator %s to "
                              "come back (the job is ending)", a->cfg->refit_comm);
        }
        if (troupe_worker_comm_info(w, a->cfg->refit_comm, &info, &e) == TROUPE_OK && info.epoch > old) {
            int64_t left = deadline - mono_ms();
            TR_LOG(TR_LOG_NOTICE, "generation: refit communicator %s is at epoch %u now: joining it",
                   a->cfg->refit_comm, info.epoch);
            int rv = refit_join(a, a->cfg, (uint32_t)(left > 1000 ? left : 1000), err);
            *c = a->refit;
            return rv;
        }
        struct timespec ts = {0, 200 * 1000000};
        nanosleep(&ts, NULL);
    }
    return tr_err_set(err, TROUPE_DEADLINE_EXCEEDED,
                      "the refit communicator %s lost a rank and did not come back in a new epoch within %lld ms "
                      "(refit.wait_ms): the policy group did not restart",
                      a->cfg->refit_comm, (long long)a->cfg->refit_wait_ms);
}

/* refit_gather (tr_refit_gather): the refit's report through the head's
 * all-gather, which names a rank that never came (a stalled generation
 * worker) exactly. Counted per epoch by the worker API, so a rejoin after a
 * restart starts over with the restarted ranks. */
static int refit_gather(void *user, const void *mine, size_t len, void *all, uint32_t timeout_ms, tr_err *err)
{
    const args *a = user;
    troupe_blobs *b = NULL;
    troupe_error e = {0};
    troupe_status st = troupe_worker_allgather(tr_troupe_worker(a->troupe), a->cfg->refit_comm,
                                               "troupe-train.refit", mine, len, timeout_ms, &b, &e);

    if (st != TROUPE_OK) {
        return tr_err_set(err, st, "refit report (refit.timeout_ms %u): %s", timeout_ms, e.message);
    }
    for (size_t i = 0; i < b->count; i++) {
        if (b->items[i].len != len) {
            troupe_blobs_free(b);
            return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                              "refit report: rank %zu sent %zu bytes, expected %zu (another troupe-train version?)", i,
                              b->items[i].len, len);
        }
        memcpy((char *)all + i * len, b->items[i].data, len);
    }
    troupe_blobs_free(b);
    return TROUPE_OK;
}

/* on_refit prints and reports one refit: the generation's line on stdout
 * (its only output, like the policy's step lines), policy rank 0's in the
 * log; both as metrics of the policy's step. The generation reports named
 * metrics, not step figures: between refits far apart the head would judge
 * a worker without steps stalled. */
static void on_refit(const tr_refit_stats *st, int rank, void *user)
{
    const args *a = user;
    int json = a->output != NULL && strcmp(a->output, "json") == 0;
    int generation = rank >= st->policy_size;
    char line[1024];

    if (!generation && rank != 0) {
        TR_LOG(TR_LOG_INFO, "refit step=%lld took part (relay, weights equal to rank 0's)", (long long)st->step);
        return;
    }
    tr_refit_line(st, rank, json && generation, line, sizeof(line));
    if (generation) {
        printf("%s\n", line);
        fflush(stdout);
    } else {
        TR_LOG(TR_LOG_NOTICE, "%s", line);
    }
    if (a->troupe != NULL) {
        troupe_worker_ctx *w = tr_troupe_worker(a->troupe);
        uint64_t step = (uint64_t)st->step;
        troupe_worker_metric(w, step, "refit_bytes", (double)st->bytes);
        troupe_worker_metric(w, step, "refit_ms", st->ms);
        troupe_worker_metric(w, step, "refit_mb_per_s", st->mb_per_s);
        troupe_worker_metric(w, step, "refit_total_ms", st->total_ms);
        if (generation && !isnan(st->val_loss)) {
            troupe_worker_metric(w, step, "val_loss", st->val_loss);
            troupe_worker_metric(w, step, "refit_eval_ms", st->eval_ms);
        }
    }
}

/* report_failure tells the head why training failed under troupe, so that
 * the job's reason names this rank, unless the communicator failed: it
 * reported that itself (a peer gone, a deadline), and the first report is
 * the one that counts. */
static void report_failure(const args *a, int rv, const tr_err *err)
{
    if (a->troupe == NULL || (a->comm != NULL && a->comm->failed && a->comm->reports_failures) ||
        (a->refit != NULL && a->refit->failed && a->refit->reports_failures)) {
        return;
    }
    (void)troupe_worker_fail(tr_troupe_worker(a->troupe), (troupe_status)rv, err->msg, NULL);
}

/* peer_grace: after a collective failed, give the rank that failed first
 * the time for its own end to reach the head, so that the job's reason
 * names it rather than this rank, which only noticed. */
static void peer_grace(const args *a, const tr_train_config *cfg, int rv)
{
    int failed = (a->comm != NULL && a->comm->failed) || (a->refit != NULL && a->refit->failed);

    /* ABORTED: another rank failed an agreed check (settings, a checkpoint,
     * a refit) and said so through the collective; its own report must reach
     * the head before this rank's, so the wait comes before reporting. */
    if ((!failed && rv != TROUPE_ABORTED) || cfg->dp_fail_grace_ms <= 0) {
        return;
    }
    TR_LOG(TR_LOG_NOTICE, "collective failed: waiting %lld ms (dp.fail_grace_ms) before exiting",
           (long long)cfg->dp_fail_grace_ms);
    struct timespec ts = {cfg->dp_fail_grace_ms / 1000, (cfg->dp_fail_grace_ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static void usage(FILE *out)
{
    fputs("usage: troupe-train --config FILE [--role policy|generation] [--steps N] [--device auto|cpu|cuda]\n"
          "                    [--set KEY=VALUE]... [--metrics-json FILE] [-o text|json] [--check-config]\n"
          "                    [--log-level LEVEL]\n"
          "       troupe-train --make-data FILE [--vocab N] [--tokens N] [--seed S]\n"
          "\n"
          "Trains a GPT-2 style model on a token file and prints one line per step.\n"
          "--role generation (under troupe): holds the model without training, takes the policy's\n"
          "weights at every refit over the job's refit.comm communicator and prints one line per refit.\n"
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
        } else if (strcmp(f, "--role") == 0) {
            rv = add_set(a, "role", v, "--role");
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
    tr_troupe_report_eval(a->troupe, m);
    if (tr_troupe_should_stop(a->troupe)) {
        TR_LOG(TR_LOG_NOTICE, "troupe asked this worker to stop after step %lld", (long long)m->step);
        interrupted = 1;
    }
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
    tr_train_hooks hooks;
    int rv = load_config(a, &cfg, &err), status = 0, generation = 0, graced = 0;

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
    a->cfg = &cfg;
    cfg.on_refit = on_refit;
    cfg.on_refit_user = a;
    a->gather = (tr_refit_gather){.fn = refit_gather, .user = a};
    cfg.refit_gather = &a->gather;
    generation = strcmp(cfg.role, "generation") == 0;
    rv = tr_troupe_open(&a->troupe, &err);
    if (rv == TROUPE_OK && a->troupe == NULL && generation) {
        fprintf(stderr, "troupe-train: --role generation runs under troupe only: it takes its weights from the "
                        "policy group over the job's refit communicator (README, \"Weight refit\")\n");
        status = 2;
        goto out;
    }
    if (rv == TROUPE_OK && a->troupe != NULL && generation) {
        rv = refit_join(a, &cfg, (uint32_t)cfg.dp_init_timeout_ms, &err);
        if (rv == TROUPE_NOT_FOUND) {
            rv = tr_err_set(&err, TROUPE_FAILED_PRECONDITION,
                            "--role generation: the job declares no communicator %s; add `communicators: [{name: "
                            "%s, groups: [policy, generation]}]` to its YAML (or set refit.comm)",
                            cfg.refit_comm, cfg.refit_comm);
        }
    } else if (rv == TROUPE_OK && a->troupe != NULL) {
        tr_troupe_hooks(a->troupe, &hooks);
        rv = group_comm(a, &cfg, &err);
        if (rv == TROUPE_OK) {
            rv = policy_refit(a, &cfg, &err);
        }
    }
    if (rv != TROUPE_OK) {
        fprintf(stderr, "troupe-train: %s\n", err.msg);
        peer_grace(a, &cfg, rv);
        report_failure(a, rv, &err);
        status = 1;
        graced = 1;
        goto out;
    }
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (generation) {
        tr_refit_link link = {.comm = a->refit, .gather = &a->gather, .rejoin = generation_rejoin, .on_refit = on_refit, .user = a};
        rv = tr_generation_run(&cfg, &link, &err);
        a->refit = link.comm;
    } else {
        rv = tr_train_run_hooked(&cfg, a->troupe != NULL ? &hooks : NULL, on_step, a, &err);
    }
    if (rv == TROUPE_CANCELLED) {
        fprintf(stderr, "troupe-train: interrupted: %s\n", err.msg);
        status = 130;
    } else if (rv != TROUPE_OK) {
        fprintf(stderr, "troupe-train: %s\n", err.msg);
        peer_grace(a, &cfg, rv);
        report_failure(a, rv, &err);
        status = 1;
        graced = 1;
    }
out:
    if (status != 0 && !graced) {
        peer_grace(a, &cfg, rv);
    }
    tr_comm_close(a->refit, status != 0);
    a->refit = NULL;
    tr_comm_close(a->comm, status != 0);
    a->comm = NULL;
    tr_troupe_close(a->troupe);
    a->troupe = NULL;
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
