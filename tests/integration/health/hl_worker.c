/* hl_worker - a worker program on troupe/worker.h for the health tests.
 *
 * Runs $HL_STEPS steps (default 100000) of $HL_STEP_MS milliseconds (default
 * 50) between troupe_worker_step_begin and troupe_worker_step_end, reporting
 * a loss and allocated GPU memory: $HL_MEM_BASE bytes (default 1 GiB) plus
 * $HL_MEM_GROW bytes per step on rank $HL_MEM_RANK (default: none grows),
 * out of $HL_MEM_TOTAL (default 80 GiB). Rank $HL_SLOW_RANK takes
 * $HL_SLOW_MS per step instead. With $HL_SYNC=1 it behaves like synchronous
 * data parallelism: every rank's step lasts $HL_SLOW_MS (the others wait for
 * the slow rank, as in an all-reduce), and each reports its own compute
 * ($HL_STEP_MS, or $HL_SLOW_MS on the slow rank) as forward 50 %, backward
 * 40 %, optimizer 10 %. With $HL_FLAP=N the slow rank is slow for N steps,
 * then fast for N, and so on. It stops early when the head asks, and prints
 *   hl: rank R done at step S
 * before it exits 0. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "troupe/worker.h"

static double env_d(const char *k, double dflt)
{
    const char *v = getenv(k);
    return v && *v ? strtod(v, NULL) : dflt;
}

static void sleep_ms(double ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)((ms - 1000.0 * (long)(ms / 1000)) * 1e6)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

int main(void)
{
    troupe_worker_ctx *w = NULL;
    troupe_error err;
    long steps = (long)env_d("HL_STEPS", 100000), rank = (long)env_d("RANK", 0);
    double step_ms = rank == (long)env_d("HL_SLOW_RANK", -1) ? env_d("HL_SLOW_MS", 50) : env_d("HL_STEP_MS", 50);
    double compute = step_ms;
    int sync = env_d("HL_SYNC", 0) != 0;
    double grow = rank == (long)env_d("HL_MEM_RANK", -1) ? env_d("HL_MEM_GROW", 0) : 0;
    double base = env_d("HL_MEM_BASE", 1073741824.0), total = env_d("HL_MEM_TOTAL", 80.0 * 1073741824.0);
    long s = 1;

    if (troupe_worker_open(&w, NULL, &err) != TROUPE_OK) {
        fprintf(stderr, "hl: troupe_worker_open: %s: %s\n", troupe_strerror(err.code), err.message);
        return 1;
    }
    long flap = (long)env_d("HL_FLAP", 0);
    for (; s <= steps && !troupe_worker_should_stop(w); s++) {
        troupe_step_figures f;
        int fast_now = flap > 0 && ((s - 1) / flap) % 2 == 1; /* the flapping rank's fast half */
        troupe_worker_step_begin(w, (uint64_t)s, NULL);
        sleep_ms(sync ? env_d("HL_SLOW_MS", 50) : fast_now ? env_d("HL_STEP_MS", 50) : step_ms);
        troupe_step_figures_init(&f);
        if (sync) {
            f.forward_ms = compute * 0.5;
            f.backward_ms = compute * 0.4;
            f.optimizer_ms = compute * 0.1;
        }
        f.loss = 10.0 / (double)s;
        f.gpu_mem_in_use_bytes = base + grow * (double)s;
        f.gpu_mem_total_bytes = total;
        troupe_worker_step_end(w, (uint64_t)s, &f); /* step_ms measured by the runtime */
    }
    printf("hl: rank %ld done at step %ld\n", rank, s - 1);
    fflush(stdout);
    troupe_worker_close(w);
    return 0;
}
