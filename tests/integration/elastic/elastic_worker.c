/* elastic_worker - data-parallel training on the CPU collective that keeps
 * going when its elastic group shrinks (`elastic: {min_workers: K}`).
 *
 * The model is a linear regression with a fixed global batch: step s uses
 * samples s*B .. s*B+B-1, every one computed from its index alone, and each
 * rank takes the contiguous shard [r*B/n, (r+1)*B/n) of them for the world
 * size n it has now. The gradient sums are all-reduced (float64) with the
 * sample count; the update is applied only once the all-reduce completed,
 * so a step either happened with the whole global batch or not at all.
 *
 * When the all-reduce fails (a peer died), the rank abandons the ring
 * (troupe_coll_abort), waits for the membership the head decides
 * (troupe_worker_await_membership), opens the collective of the new epoch,
 * and agrees with the survivors where training stands: every rank puts its
 * completed steps in its slot of a vector that is summed; the first rank
 * with the most completed steps broadcasts its weights (in a ring a rank may
 * finish an all-reduce its neighbour did not). The step in flight is then
 * redone with the shards of the new world size. A failure during all this
 * (a second death) starts it over from the next epoch.
 *
 * Growing back: at each step boundary the rank looks at the membership the
 * control poll told (troupe_worker_membership); a newer epoch (the head
 * started a replacement) makes it leave the old ring and meet the others in
 * the new one, where the same agreement hands the replacement the state. A
 * replacement starts like any rank: it opens the collective and agrees.
 *
 * It is also the example of the worker API for elastic groups (README).
 * Prints "ew: ..." lines that the tests read: each completed step, each
 * rebuild with its timings, and the final weights (%.17g).
 *
 * Lines about a change carry "wall MS" (CLOCK_REALTIME), which
 * bench/elastic reads to time a shrink against the moment of the kill.
 *
 * Environment: EW_STEPS (40), EW_BATCH (60), EW_DIM (8), EW_STEP_MS (pause
 * after each step, 50), EW_TIMEOUT_MS (each collective's deadline, 10000),
 * EW_WAIT_MS (how long to wait for a new membership, 30000), EW_LOG_EVERY
 * (print every Nth step's line, 1), EW_REPLACEMENT_EXIT (a worker started
 * at an attempt above 0, a replacement, exits with this code before it
 * joins: a replacement that keeps crashing; unset: none does),
 * EW_STALL_RANK and EW_STALL_STEP (the worker of that placed rank stops
 * stepping at that step, before its all-reduce, without ending: a hung
 * rank; unset: none does). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "troupe/worker.h"

#define MAX_DIM 64
#define LR 0.05

typedef struct trainer {
    troupe_worker_ctx *w;
    troupe_coll *c;
    troupe_comm_info m; /* membership now */
    uint32_t steps, batch, dim, step_ms, timeout_ms, wait_ms, log_every;
    uint64_t done; /* steps completed */
    double weights[MAX_DIM];
} trainer;

static uint32_t env_u32(const char *name, uint32_t def)
{
    const char *s = getenv(name);
    return s != NULL && s[0] != '\0' ? (uint32_t)strtoul(s, NULL, 10) : def;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* uniform: a value in [-1, 1) from (k, d) alone (splitmix64). */
static double uniform(uint64_t k, uint64_t d)
{
    uint64_t z = k * 0x9E3779B97F4A7C15ull + d * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / 4503599627370496.0 - 1.0;
}

/* sample k: x from uniform, y = <w*, x> + small noise, w*[d] = (d+1)/dim. */
static double sample(const trainer *t, uint64_t k, double *x)
{
    double y = 0.01 * uniform(k, 1000);
    for (uint32_t d = 0; d < t->dim; d++) {
        x[d] = uniform(k, d);
        y += x[d] * (double)(d + 1) / t->dim;
    }
    return y;
}

/* shard_grad fills g (dim sums, then the squared error, then the count) for
 * this rank's shard of step s's global batch. */
static void shard_grad(const trainer *t, uint64_t s, double *g)
{
    uint32_t n = t->m.size, r = t->m.rank;
    uint64_t lo = (uint64_t)t->batch * r / n, hi = (uint64_t)t->batch * (r + 1) / n;
    double x[MAX_DIM];

    memset(g, 0, (t->dim + 2) * sizeof(double));
    for (uint64_t i = lo; i < hi; i++) {
        double y = sample(t, s * t->batch + i, x), e = -y;
        for (uint32_t d = 0; d < t->dim; d++) {
            e += t->weights[d] * x[d];
        }
        for (uint32_t d = 0; d < t->dim; d++) {
            g[d] += e * x[d];
        }
        g[t->dim] += e * e;
        g[t->dim + 1] += 1.0;
    }
}

static int open_coll(trainer *t, troupe_error *err)
{
    troupe_coll_opts o = {0};
    int rv;

    o.timeout_ms = t->timeout_ms;
    o.no_fail_report = 1; /* a peer's death is not this rank's failure: the group shrinks */
    if ((rv = troupe_worker_coll_open(t->w, NULL, &t->c, &o, err)) != TROUPE_OK) {
        return rv;
    }
    t->m.rank = troupe_coll_rank(t->c);
    t->m.size = troupe_coll_size(t->c);
    return TROUPE_OK;
}

/* agree: every rank's completed steps, summed slot by slot; the first rank
 * with the most broadcasts its weights. */
static int agree(trainer *t, troupe_error *err)
{
    double *v = calloc(t->m.size, sizeof(double)), state[MAX_DIM + 1];
    uint32_t src = 0;
    int rv;

    if (v == NULL) {
        return TROUPE_RESOURCE_EXHAUSTED;
    }
    v[t->m.rank] = (double)t->done;
    if ((rv = troupe_coll_allreduce(t->c, v, t->m.size, TROUPE_F64, TROUPE_SUM, err)) == TROUPE_OK) {
        for (uint32_t r = 1; r < t->m.size; r++) {
            src = v[r] > v[src] ? r : src;
        }
        memcpy(state, t->weights, t->dim * sizeof(double));
        state[t->dim] = (double)t->done;
        rv = troupe_coll_broadcast(t->c, state, (t->dim + 1) * sizeof(double), src, err);
    }
    if (rv == TROUPE_OK) {
        if ((uint64_t)state[t->dim] != t->done) {
            printf("ew: rank %u took step %llu's state from rank %u (it had %llu)\n", t->m.rank,
                   (unsigned long long)state[t->dim], src, (unsigned long long)t->done);
        }
        memcpy(t->weights, state, t->dim * sizeof(double));
        t->done = (uint64_t)state[t->dim];
    }
    free(v);
    return rv;
}

/* rebuild: after a failed collective, until the ring of a newer epoch stands
 * and the ranks agree, or the membership cannot be had. */
static int rebuild(trainer *t, const char *cause, int64_t t_fail)
{
    troupe_error err = {0};
    int64_t t_agreed = 0, t_open = 0;
    uint32_t from = t->m.size;
    int rv;

    printf("ew: rank %u/%u epoch %u: %s at step %llu wall %lld\n", t->m.rank, t->m.size, t->m.epoch, cause,
           (unsigned long long)t->done + 1, (long long)wall_ms());
    for (;;) {
        troupe_coll_abort(t->c);
        t->c = NULL;
        if ((rv = troupe_worker_await_membership(t->w, t->m.epoch, t->wait_ms, &t->m, &err)) != TROUPE_OK) {
            printf("ew: no new membership: %s: %s\n", troupe_strerror(rv), err.message);
            return rv;
        }
        t_agreed = now_ms();
        if ((rv = open_coll(t, &err)) == TROUPE_OK) {
            t_open = now_ms();
            if ((rv = agree(t, &err)) == TROUPE_OK) {
                break;
            }
        }
        printf("ew: epoch %u did not stand (%s: %s); waiting for the next\n", t->m.epoch, troupe_strerror(rv),
               err.message);
    }
    printf("ew: rebuilt rank %u/%u epoch %u (was %u ranks) at step %llu: agreement %lld ms, rebuild %lld ms, "
           "sync %lld ms wall %lld\n",
           t->m.rank, t->m.size, t->m.epoch, from, (unsigned long long)t->done + 1, (long long)(t_agreed - t_fail),
           (long long)(t_open - t_agreed), (long long)(now_ms() - t_open), (long long)wall_ms());
    return TROUPE_OK;
}

/* step runs step done+1; OK when it completed, else the collective's error. */
static int step(trainer *t, troupe_error *err)
{
    double g[MAX_DIM + 2], loss;
    uint64_t s = t->done + 1;
    int rv;

    troupe_worker_step_begin(t->w, s, NULL);
    if (getenv("EW_STALL_RANK") != NULL && env_u32("RANK", 0) == env_u32("EW_STALL_RANK", 0) &&
        s == env_u32("EW_STALL_STEP", 0)) {
        printf("ew: rank %u stops stepping at step %llu (EW_STALL_RANK)\n", t->m.rank, (unsigned long long)s);
        fflush(stdout);
        for (;;) {
            sleep_ms(1000); /* until its agent stops it */
        }
    }
    shard_grad(t, s, g);
    if ((rv = troupe_coll_allreduce(t->c, g, t->dim + 2, TROUPE_F64, TROUPE_SUM, err)) != TROUPE_OK) {
        return rv;
    }
    if ((uint32_t)g[t->dim + 1] != t->batch) {
        fprintf(stderr, "ew: step %llu summed %.0f samples, the global batch is %u\n", (unsigned long long)s,
                g[t->dim + 1], t->batch);
        exit(3);
    }
    for (uint32_t d = 0; d < t->dim; d++) {
        t->weights[d] -= LR * g[d] / t->batch;
    }
    loss = g[t->dim] / t->batch;
    t->done = s;
    troupe_step_figures f;
    troupe_step_figures_init(&f);
    f.loss = loss;
    troupe_worker_step_end(t->w, s, &f);
    if (s % t->log_every == 0) {
        printf("ew: step %llu rank %u/%u epoch %u loss %.10f wall %lld\n", (unsigned long long)s, t->m.rank,
               t->m.size, t->m.epoch, loss, (long long)wall_ms());
    }
    fflush(stdout);
    return TROUPE_OK;
}

int main(void)
{
    trainer t = {0};
    troupe_error err = {0};
    int64_t t_fail = 0;
    uint64_t redo = 0;
    int rv;

    setvbuf(stdout, NULL, _IOLBF, 0);
    t.steps = env_u32("EW_STEPS", 40);
    t.batch = env_u32("EW_BATCH", 60);
    t.dim = env_u32("EW_DIM", 8);
    t.step_ms = env_u32("EW_STEP_MS", 50);
    t.timeout_ms = env_u32("EW_TIMEOUT_MS", 10000);
    t.wait_ms = env_u32("EW_WAIT_MS", 30000);
    t.log_every = env_u32("EW_LOG_EVERY", 1);
    t.log_every = t.log_every ? t.log_every : 1;
    if (t.dim == 0 || t.dim > MAX_DIM || t.batch == 0) {
        fprintf(stderr, "ew: EW_DIM must be 1..%d and EW_BATCH > 0\n", MAX_DIM);
        return 2;
    }
    if (getenv("EW_REPLACEMENT_EXIT") != NULL && env_u32("TROUPE_ATTEMPT", 0) > 0) {
        fprintf(stderr, "ew: replacement at attempt %u exits with %u (EW_REPLACEMENT_EXIT)\n",
                env_u32("TROUPE_ATTEMPT", 0), env_u32("EW_REPLACEMENT_EXIT", 1));
        return (int)env_u32("EW_REPLACEMENT_EXIT", 1);
    }
    if ((rv = troupe_worker_open(&t.w, NULL, &err)) != TROUPE_OK ||
        (rv = troupe_worker_comm_info(t.w, NULL, &t.m, &err)) != TROUPE_OK) {
        fprintf(stderr, "ew: %s: %s\n", troupe_strerror(rv), err.message);
        return 1;
    }
    if ((rv = open_coll(&t, &err)) != TROUPE_OK || (rv = agree(&t, &err)) != TROUPE_OK) {
        fprintf(stderr, "ew: joining the collective: %s: %s\n", troupe_strerror(rv), err.message);
        troupe_worker_close(t.w);
        return 1;
    }
    printf("ew: joined rank %u/%u epoch %u at step %llu wall %lld\n", t.m.rank, t.m.size, t.m.epoch,
           (unsigned long long)t.done + 1, (long long)wall_ms());
    while (t.done < t.steps) {
        troupe_comm_info now;
        char cause[640];
        if (troupe_worker_membership(t.w, &now, NULL) == TROUPE_OK && now.epoch > t.m.epoch) {
            snprintf(cause, sizeof(cause), "membership moved to epoch %u (%u ranks)", now.epoch, now.size);
            t_fail = now_ms();
            redo = t.done + 1;
            if (rebuild(&t, cause, t_fail) != TROUPE_OK) {
                troupe_worker_close(t.w);
                return 1;
            }
            continue;
        }
        if ((rv = step(&t, &err)) != TROUPE_OK) {
            snprintf(cause, sizeof(cause), "collective failed: %s", err.message);
            t_fail = now_ms();
            redo = t.done + 1;
            if (rebuild(&t, cause, t_fail) != TROUPE_OK) {
                troupe_worker_close(t.w);
                return 1; /* taken out, or the group failed: the head's rules decide */
            }
            continue;
        }
        if (redo != 0 && t.done >= redo) {
            printf("ew: step %llu completed %lld ms after the change was noticed wall %lld\n",
                   (unsigned long long)t.done, (long long)(now_ms() - t_fail), (long long)wall_ms());
            redo = 0;
        }
        sleep_ms(t.step_ms);
    }
    printf("ew: final rank %u/%u epoch %u steps %llu w", t.m.rank, t.m.size, t.m.epoch, (unsigned long long)t.done);
    for (uint32_t d = 0; d < t.dim; d++) {
        printf(" %.17g", t.weights[d]);
    }
    printf("\n");
    troupe_coll_close(t.c);
    troupe_worker_close(t.w);
    return 0;
}
