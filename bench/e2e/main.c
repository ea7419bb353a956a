/* main.c - troupe-bench-e2e: the control plane end to end.
 *
 * For each durability setting (sync_full true, then false) and each group
 * size W, a fresh troupe-head is started and 1,000 simulated nodes register;
 * then each concurrency K is measured in turn on that head (so a cell starts
 * with the jobs of the cells before it in the head's tables: the table says
 * how many). A fresh head per W keeps the rows comparable across W. Last, the
 * submit -> all-started time of a 64-worker job with real agents.
 *
 * Usage: troupe-bench-e2e --head BIN [--node BIN] [--json FILE] [options]
 * (--help lists them). Exit status 1 when any cell failed or completed no
 * cycle (each is named on stderr): figures of a broken harness must not pass
 * for measurements. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e_bench.h"

#define MAX_LIST 8

typedef struct args {
    const char *head_bin, *node_bin, *json, *tmp, *log_level;
    int workers[MAX_LIST], n_workers;
    int clients[MAX_LIST], n_clients;
    int batches[MAX_LIST], n_batches;
    int syncs[2], n_syncs;
    size_t nodes;
    double seconds;
    int warmup_ms, reps, deadline_ms;
} args;

static void usage(FILE *out, const char *prog)
{
    fprintf(out,
            "usage: %s --head TROUPE_HEAD [--node TROUPE_NODE] [--json FILE]\n"
            "  --workers 1,8,64      workers (1 GPU each) per group\n"
            "  --clients 1,8,32      concurrent client threads\n"
            "  --batch 1,100         groups per call (1: SubmitJob/StopJob; more: SubmitJobs/StopJobs)\n"
            "  --sync true,false     head sync_full settings to measure\n"
            "  --nodes 1000          simulated nodes (4/8/16 GPUs)\n"
            "  --seconds 2           measured window per cell (after --warmup-ms 300)\n"
            "  --startup-reps 5      submit -> all RUNNING repetitions (needs --node; 0 skips)\n"
            "  --cycle-deadline-ms 10000  a cycle slower than this is an error\n"
            "  --tmp DIR             where state dirs go (default $TMPDIR or /var/tmp; must be on disk)\n"
            "  --log-level LEVEL     of the head and agents (default info, as deployed)\n"
            "exit status 1 when a cell fails or completes no cycle (each is named on stderr)\n",
            prog);
}

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    char *end;
    while (*s && n < max) {
        out[n++] = (int)strtol(s, &end, 10);
        if (end == s || out[n - 1] <= 0) {
            return -1;
        }
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

static int parse_syncs(const char *s, args *a)
{
    a->n_syncs = 0;
    if (strstr(s, "true") != NULL) {
        a->syncs[a->n_syncs++] = 1;
    }
    if (strstr(s, "false") != NULL) {
        a->syncs[a->n_syncs++] = 0;
    }
    return a->n_syncs > 0 ? 0 : -1;
}

static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){.log_level = "info",
                .workers = {1, 8, 64},
                .n_workers = 3,
                .clients = {1, 8, 32},
                .n_clients = 3,
                .batches = {1},
                .n_batches = 1,
                .syncs = {1, 0},
                .n_syncs = 2,
                .nodes = 1000,
                .seconds = 2,
                .warmup_ms = 300,
                .reps = 5,
                .deadline_ms = 10000};
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = v != NULL;
        if (strcmp(k, "--help") == 0) {
            usage(stdout, argv[0]);
            exit(0);
        } else if (ok && strcmp(k, "--head") == 0) {
            a->head_bin = v;
        } else if (ok && strcmp(k, "--node") == 0) {
            a->node_bin = v;
        } else if (ok && strcmp(k, "--json") == 0) {
            a->json = v;
        } else if (ok && strcmp(k, "--tmp") == 0) {
            a->tmp = v;
        } else if (ok && strcmp(k, "--log-level") == 0) {
            a->log_level = v;
        } else if (ok && strcmp(k, "--workers") == 0) {
            ok = (a->n_workers = parse_list(v, a->workers, MAX_LIST)) > 0;
        } else if (ok && strcmp(k, "--clients") == 0) {
            ok = (a->n_clients = parse_list(v, a->clients, MAX_LIST)) > 0;
        } else if (ok && strcmp(k, "--batch") == 0) {
            ok = (a->n_batches = parse_list(v, a->batches, MAX_LIST)) > 0;
        } else if (ok && strcmp(k, "--sync") == 0) {
            ok = parse_syncs(v, a) == 0;
        } else if (ok && strcmp(k, "--nodes") == 0) {
            ok = (a->nodes = (size_t)atol(v)) > 0;
        } else if (ok && strcmp(k, "--seconds") == 0) {
            ok = (a->seconds = atof(v)) > 0;
        } else if (ok && strcmp(k, "--warmup-ms") == 0) {
            a->warmup_ms = atoi(v);
        } else if (ok && strcmp(k, "--startup-reps") == 0) {
            a->reps = atoi(v);
        } else if (ok && strcmp(k, "--cycle-deadline-ms") == 0) {
            ok = (a->deadline_ms = atoi(v)) > 0;
        } else {
            ok = 0;
        }
        if (!ok) {
            fprintf(stderr, "%s: bad or incomplete option '%s'\n", argv[0], k);
            return -1;
        }
    }
    if (a->head_bin == NULL) {
        fprintf(stderr, "%s: --head is required\n", argv[0]);
        return -1;
    }
    return 0;
}

/* run_cell measures one (B, K) on a running head, unless the groups in
 * flight would not fit the cluster at once (they would wait PENDING, which
 * is not what the cell measures). */
static int run_cell(const args *a, const eb_head *h, eb_cluster *cl, eb_cell *c)
{
    eb_cycle_opts co = {.url = h->url,
                        .head_log = h->log,
                        .head_pid = h->pid,
                        .cluster = cl,
                        .warmup_ms = a->warmup_ms,
                        .duration_ms = (int)(a->seconds * 1000),
                        .cycle_deadline_ms = (uint32_t)a->deadline_ms};
    double in_flight = (double)c->workers * c->batch * c->clients;
    char why[300];
    int rv = 0;

    if (in_flight > 0.8 * cl->gpus_total) {
        snprintf(c->note, sizeof(c->note), "skipped: %.0f GPUs in flight, cluster has %u", in_flight,
                 cl->gpus_total);
    } else if (eb_cluster_check(h->url, cl, why, sizeof(why)) != 0) {
        /* Measuring would only time out on nodes the head no longer trusts. */
        snprintf(c->note, sizeof(c->note), "not measured: %.200s", why);
        c->ran = 1;
        c->errors = 1;
        rv = -1;
    } else if (eb_cycles_run(&co, c) != 0) {
        rv = -1;
    }
    fprintf(stderr,
            "  sync_full=%d W=%-2d B=%-3d K=%-2d %8.0f cycles/s  p50 %.2f ms  p99 %.2f ms  cpu/cycle head "
            "%.3f ms "
            "bench %.3f ms  load %.1f%s%s\n",
            c->sync_full, c->workers, c->batch, c->clients, c->per_s, c->p50_ms, c->p99_ms, c->head_cpu_ms,
            c->bench_cpu_ms, c->load1, c->note[0] ? "  " : "", c->note);
    return rv;
}

/* run_head_w measures every (B, K) for one (sync_full, W) on a fresh head. */
static int run_head_w(const args *a, int sync_full, int w, eb_cell *cells, double *reg_s)
{
    eb_head_opts ho = {
        .bin = a->head_bin, .tmp_base = a->tmp, .sync_full = sync_full, .log_level = a->log_level, .sim = 1};
    eb_cluster cl;
    eb_head h;
    char why[400];
    int rv = 0;

    if (eb_head_start(&ho, &h, why, sizeof(why)) != 0) {
        fprintf(stderr, "troupe-bench-e2e: %s\n", why);
        return -1;
    }
    if (eb_cluster_register(h.url, a->nodes, 4, &cl, reg_s, why, sizeof(why)) != 0) {
        fprintf(stderr, "troupe-bench-e2e: registering %zu nodes: %s\n", a->nodes, why);
        eb_cluster_free(&cl);
        eb_head_stop(&h);
        return -1;
    }
    for (int b = 0; b < a->n_batches; b++) {
        for (int k = 0; k < a->n_clients; k++) {
            eb_cell *c = &cells[b * a->n_clients + k];
            *c = (eb_cell){
                .sync_full = sync_full, .workers = w, .clients = a->clients[k], .batch = a->batches[b]};
            if (run_cell(a, &h, &cl, c) != 0) {
                rv = -1;
            }
        }
    }
    if (rv != 0) {
        eb_head_tail(&h, 15); /* the state dir, and the log with it, goes next */
    }
    eb_cluster_free(&cl);
    eb_head_stop(&h);
    return rv;
}

/* report_failed names every cell that failed on stderr; returns how many. */
static size_t report_failed(const eb_cell *cells, size_t n)
{
    size_t bad = 0;

    for (size_t i = 0; i < n; i++) {
        const eb_cell *c = &cells[i];
        if (!c->ran || c->errors == 0) {
            continue;
        }
        if (bad++ == 0) {
            fprintf(stderr, "\ntroupe-bench-e2e: FAILED cells (their figures are not measurements):\n");
        }
        fprintf(stderr, "  sync_full=%d W=%d B=%d K=%d: %llu cycles, %llu errors: %s\n", c->sync_full,
                c->workers, c->batch, c->clients, (unsigned long long)c->cycles,
                (unsigned long long)c->errors, c->note);
    }
    return bad;
}

static void settings_json(const args *a, char *buf, size_t size)
{
    snprintf(buf, size,
             "{\"nodes\": %zu, \"seconds_per_cell\": %.2f, \"warmup_ms\": %d, \"cycle_deadline_ms\": %d, "
             "\"head_log_level\": \"%s\", \"heartbeat_ms\": 60000, \"dead_after\": 100}",
             a->nodes, a->seconds, a->warmup_ms, a->deadline_ms, a->log_level);
}

int main(int argc, char **argv)
{
    static eb_cell cells[2 * MAX_LIST * MAX_LIST * MAX_LIST];
    eb_startup st = {0}, *stp = NULL;
    double reg[2] = {0, 0};
    size_t n = 0;
    char settings[512];
    args a;
    int failed = 0;

    if (parse_args(argc, argv, &a) != 0) {
        usage(stderr, argv[0]);
        return 2;
    }
    eb_procs_init();
    for (int s = 0; s < a.n_syncs; s++) {
        for (int w = 0; w < a.n_workers; w++) {
            double r = 0;
            failed |= run_head_w(&a, a.syncs[s], a.workers[w], &cells[n], &r) != 0;
            n += (size_t)(a.n_clients * a.n_batches);
            if (w == 0) {
                reg[a.syncs[s] ? 0 : 1] = r;
            }
        }
    }
    if (a.node_bin != NULL && a.reps > 0) {
        eb_startup_opts so = {.head_bin = a.head_bin,
                              .node_bin = a.node_bin,
                              .tmp_base = a.tmp,
                              .log_level = a.log_level,
                              .reps = a.reps};
        failed |= eb_startup_run(&so, &st) != 0;
        stp = &st;
    }
    eb_report_table(cells, n, stp, a.nodes, reg);
    eb_report_goals(cells, n);
    settings_json(&a, settings, sizeof(settings));
    if (a.json != NULL && eb_report_json(a.json, settings, cells, n, stp) != 0) {
        failed = 1;
    }
    if (report_failed(cells, n) > 0) {
        failed = 1;
    }
    if (failed) {
        fprintf(stderr, "troupe-bench-e2e: failed (exit 1): see the cells and messages above\n");
    }
    return failed ? 1 : 0;
}
