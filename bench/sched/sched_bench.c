/* sched_bench.c - the scheduler core alone: gang place + release per second
 * on 1,000 simulated heterogeneous nodes (4, 8 and 16 GPUs), for each strategy
 * and 1, 8 and 64 workers per group (1 and 2 GPUs each).
 *
 * Each job is the analogue of one Ray placement group: one vnode per worker
 * (bundle), one group with the strategy. STRICT_PACK needs the whole group on
 * one node, so its job is a single vnode of workers x GPUs (64 x 1 cannot fit
 * any node and is reported as infeasible, as Ray would leave it pending).
 *
 * Steady state, not an empty cluster: jobs stay in flight in a ring until
 * about half of all GPUs are in use; each step places a new job and releases
 * the oldest, so the buckets see realistic fragmentation. Ray's published
 * figures are end to end (GCS + raylets + RPC), ours exclude RPC: the table
 * says "core alone", and the end-to-end half is measured elsewhere.
 *
 * Usage: troupe-bench-sched [--json FILE] [--seconds S] [--nodes N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched/sched.h"

typedef struct result {
    const char *strategy;
    int workers, gpw;
    char layout[32];
    double ops, us;
    size_t inflight;
    uint64_t waited; /* places that found no room (counted as ops; should be 0) */
    const char *ray;
    double ray_ops;
} result;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int make_cluster(tr_sched **out, unsigned nodes)
{
    static const unsigned sizes[] = {4, 8, 16};
    tr_err err;
    uint64_t x = 0x2545F4914F6CDD1DULL;
    int rv = tr_sched_open(out, &err);

    for (unsigned i = 0; i < nodes && rv == TROUPE_OK; i++) {
        char name[32];
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* shuffled mix, a third of each size */
        tr_sched_node_spec ns = {.id = 1000 + i, .name = name, .gpus = sizes[x % 3]};
        snprintf(name, sizeof(name), "sim-%u", i);
        rv = tr_sched_node_add(*out, &ns, &err);
    }
    if (rv != TROUPE_OK) {
        fprintf(stderr, "cluster: %s\n", err.msg);
    }
    return rv;
}

/* Ray #20243 (100 PGs each, end to end) and ray_perf's placement_group_create/removal. */
static void ray_reference(result *r)
{
    if (r->workers == 1) {
        r->ray = "~800/s (1 bundle, ray_perf 765-818)";
        r->ray_ops = 800;
    } else if (r->workers <= 10) {
        r->ray = "138/s (10 bundles, #20243)";
        r->ray_ops = 138;
    } else {
        r->ray = "10.6/s (40 bundles, #20243)";
        r->ray_ops = 10.6;
    }
}

/* The job for a row: one vnode per worker, or one vnode for STRICT_PACK. */
static void job_layout(result *r, int *vn, tr_sched_group_spec *g, tr_sched_job_spec *spec)
{
    tr_sched_strategy st = TR_SCHED_PACK;

    tr_sched_strategy_parse(r->strategy, &st, NULL);
    *g = (tr_sched_group_spec){.name = "g", .workers = r->workers, .gpus_per_worker = r->gpw, .strategy = st};
    *spec = (tr_sched_job_spec){.name = "bench", .vnodes = vn, .groups = g, .ngroups = 1};
    if (st == TR_SCHED_STRICT_PACK) {
        vn[0] = r->workers * r->gpw;
        spec->nvnodes = 1;
        snprintf(r->layout, sizeof(r->layout), "[%d]", vn[0]);
    } else {
        for (int i = 0; i < r->workers; i++) {
            vn[i] = r->gpw;
        }
        spec->nvnodes = (size_t)r->workers;
        snprintf(r->layout, sizeof(r->layout), "%dx[%d]", r->workers, r->gpw);
    }
}

static int run_one(tr_sched *s, uint64_t total_gpus, double seconds, result *r)
{
    int vn[64];
    tr_sched_group_spec g;
    tr_sched_job_spec spec;
    tr_err err;

    job_layout(r, vn, &g, &spec);
    ray_reference(r);
    if (tr_sched_check(s, &spec, &err) != TROUPE_OK) {
        snprintf(r->layout + strlen(r->layout), sizeof(r->layout) - strlen(r->layout), " infeasible");
        return TROUPE_OK;
    }
    size_t cap = (size_t)(total_gpus / 2 / (uint64_t)(r->workers * r->gpw));
    cap = cap == 0 ? 1 : cap;
    tr_sched_placement **ring = calloc(cap, sizeof(*ring));
    if (ring == NULL) {
        return TROUPE_RESOURCE_EXHAUSTED;
    }
    uint64_t id = 1, ops = 0;
    size_t head = 0;
    double t0 = now_s(), t1 = t0;
    while (t1 - t0 < seconds) {
        for (int k = 0; k < 256; k++, ops++) {
            tr_sched_release(s, ring[head]);
            ring[head] = NULL;
            int rv = tr_sched_place(s, id++, &spec, &ring[head], &err);
            r->waited += rv == TROUPE_RESOURCE_EXHAUSTED;
            if (rv != TROUPE_OK && rv != TROUPE_RESOURCE_EXHAUSTED) {
                fprintf(stderr, "%s %dx%d: %s\n", r->strategy, r->workers, r->gpw, err.msg);
                free(ring);
                return rv;
            }
            head = (head + 1) % cap;
        }
        t1 = now_s();
    }
    for (size_t i = 0; i < cap; i++) {
        tr_sched_release(s, ring[i]);
    }
    free(ring);
    r->ops = (double)ops / (t1 - t0);
    r->us = 1e6 / r->ops;
    r->inflight = cap;
    return tr_sched_check_invariants(s, &err);
}

/* A queue pass: every 16-GPU node busy with a 16-GPU job, then `npend` (<= 64)
 * pending jobs of 1..64 one-GPU bundles under rotating strategies (STRICT_PACK
 * ones as a single vnode of up to 16). Each pass starts what fits (backfill);
 * the started jobs are released after it, so every pass sees the same state.
 * Returns passes per second; *started says how many jobs a pass starts. */
static double queue_pass(tr_sched *s, uint64_t total_gpus, size_t npend, double seconds, size_t *started)
{
    static tr_sched_placement *busy[4096];
    int ones[64], single[64], sixteen = 16;
    tr_sched_group_spec g[64], bg = {.name = "b", .workers = 16, .gpus_per_worker = 1};
    tr_sched_job_spec spec[64], big = {.vnodes = &sixteen, .nvnodes = 1, .groups = &bg, .ngroups = 1};
    tr_sched_pending q[64];
    tr_sched_decision d[64];
    tr_err err;
    size_t nbusy = 0, passes = 0;

    while (nbusy < 4096 && (uint64_t)(nbusy + 1) * 16 < total_gpus * 95 / 100 &&
           tr_sched_place(s, 1000000 + nbusy, &big, &busy[nbusy], &err) == TROUPE_OK) {
        nbusy++;
    }
    for (size_t i = 0; i < npend; i++) {
        int w = 1 + (int)((i * 37) % 64);
        int strict_pack = i % 4 == TR_SCHED_STRICT_PACK;
        ones[i] = 1;
        single[i] = w = strict_pack ? 1 + w % 16 : w;
        g[i] =
            (tr_sched_group_spec){.name = "g", .workers = w, .gpus_per_worker = 1, .strategy = (int)(i % 4)};
        spec[i] = (tr_sched_job_spec){.vnodes = strict_pack ? &single[i] : ones,
                                      .nvnodes = strict_pack ? 1 : (size_t)w,
                                      .groups = &g[i],
                                      .ngroups = 1};
        q[i] = (tr_sched_pending){.job_id = 1 + i, .spec = &spec[i]};
    }
    for (size_t i = npend; i < 64; i++) {
        ones[i] = 1;
    }
    double t0 = now_s(), t1 = t0;
    while (t1 - t0 < seconds) {
        tr_sched_schedule(s, q, npend, d, &err);
        *started = 0;
        for (size_t i = 0; i < npend; i++) {
            *started += d[i].placement != NULL;
            tr_sched_release(s, d[i].placement);
        }
        passes++;
        t1 = now_s();
    }
    for (size_t i = 0; i < nbusy; i++) {
        tr_sched_release(s, busy[i]);
    }
    return (double)passes / (t1 - t0);
}

static void print_table(const result *rs, size_t n, unsigned nodes)
{
    printf("scheduler core alone: %u nodes (4/8/16 GPUs), ~50%% of GPUs held by jobs in flight\n", nodes);
    /* Ray's figures are published ones from other machines and end to end:
     * context, not a ratio (a ratio needs a peer measured in the same run). */
    printf("%-14s %7s %4s %-18s %12s %7s %8s %6s  %-36s\n", "strategy", "workers", "gpw", "vnodes",
           "place+rel/s", "us/op", "inflight", "waited", "Ray published (other machine, e2e)");
    for (size_t i = 0; i < n; i++) {
        const result *r = &rs[i];
        if (r->ops == 0) {
            printf("%-14s %7d %4d %-18s %12s %7s %8s %6s  %-36s\n", r->strategy, r->workers, r->gpw,
                   r->layout, "-", "-", "-", "-", r->ray);
            continue;
        }
        printf("%-14s %7d %4d %-18s %12.0f %7.2f %8zu %6llu  %-36s\n", r->strategy, r->workers, r->gpw,
               r->layout, r->ops, r->us, r->inflight, (unsigned long long)r->waited, r->ray);
    }
}

static int write_json(const char *path, const result *rs, size_t n, unsigned nodes, double seconds,
                      double qps, size_t started)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    fprintf(f,
            "{\n  \"bench\": \"sched-core\",\n  \"nodes\": %u,\n  \"seconds_per_case\": %.2f,\n  "
            "\"results\": [\n",
            nodes, seconds);
    for (size_t i = 0; i < n; i++) {
        const result *r = &rs[i];
        fprintf(f,
                "    {\"strategy\": \"%s\", \"workers\": %d, \"gpus_per_worker\": %d, \"vnodes\": \"%s\", "
                "\"place_release_per_s\": %.1f, \"us_per_op\": %.3f, \"inflight\": %zu, \"waited\": %llu, "
                "\"ray_published_per_s\": %.1f}%s\n",
                r->strategy, r->workers, r->gpw, r->layout, r->ops, r->us, r->inflight,
                (unsigned long long)r->waited, r->ray_ops, i + 1 < n ? "," : "");
    }
    fprintf(
        f,
        "  ],\n  \"queue_pass\": {\"pending\": 64, \"passes_per_s\": %.1f, \"started_per_pass\": %zu}\n}\n",
        qps, started);
    return fclose(f) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    static const char *const strategies[] = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"};
    static const int workers[] = {1, 8, 64};
    const char *json = NULL;
    double seconds = 0.5;
    unsigned nodes = 1000;
    result rs[24];
    size_t n = 0;
    tr_sched *s = NULL;
    tr_sched_stats st;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            json = argv[++i];
        } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            seconds = atof(argv[++i]);
        } else if (strcmp(argv[i], "--nodes") == 0 && i + 1 < argc) {
            nodes = (unsigned)atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--json FILE] [--seconds S] [--nodes N]\n", argv[0]);
            return 2;
        }
    }
    if (make_cluster(&s, nodes) != TROUPE_OK) {
        return 1;
    }
    tr_sched_stats_get(s, &st);
    for (int gpw = 1; gpw <= 2; gpw++) {
        for (size_t a = 0; a < 4; a++) {
            for (size_t w = 0; w < 3; w++, n++) {
                rs[n] = (result){.strategy = strategies[a], .workers = workers[w], .gpw = gpw};
                if (run_one(s, st.alive_gpus, seconds, &rs[n]) != TROUPE_OK) {
                    fprintf(stderr, "benchmark failed\n");
                    return 1;
                }
            }
        }
    }
    print_table(rs, n, nodes);
    size_t started = 0;
    double qps = queue_pass(s, st.alive_gpus, 64, seconds, &started);
    printf("queue pass (tr_sched_schedule): 64 pending jobs of 1-64 bundles, every 16-GPU node busy: "
           "%.0f passes/s (%.1f us/pass), %zu jobs start per pass\n",
           qps, 1e6 / qps, started);
    tr_sched_close(s);
    return json != NULL ? write_json(json, rs, n, nodes, seconds, qps, started) : 0;
}
