/* report.c - the table, the goals and the JSON of troupe-bench-e2e.
 *
 * Ray's figures are end to end too (GCS + raylets + RPC, one machine):
 * ray_perf's placement_group_create/removal, 818 one-bundle PGs/s (2.9.0),
 * and ray #20243: 138/s at 10 bundles, 10.6/s at 40. There is no Ray figure
 * at 8 or 64 bundles; the nearest larger-or-equal one is used (10 for 8, 40
 * for 64), which flatters Ray. They are shown as context, never divided by:
 * they come from other machines (bench/e2e/ray_pg.py measures Ray here). */
#include <stdio.h>

#include "e2e_bench.h"

#define GOAL_W1 8000.0
#define GOAL_W64 1000.0

double eb_ray_ref(int workers, const char **label)
{
    if (workers <= 1) {
        *label = "818/s (1 bundle, ray_perf)";
        return 818;
    }
    if (workers <= 10) {
        *label = "138/s (10 bundles, #20243)";
        return 138;
    }
    *label = "10.6/s (40 bundles, #20243)";
    return 10.6;
}

static void print_cell(const eb_cell *c)
{
    const char *ray;
    (void)eb_ray_ref(c->workers, &ray);

    if (!c->ran || c->cycles == 0) {
        printf("%-9s %7d %5d %7d %10s %8s %8s %8s %8s %6s %7s %7s %8s %6llu %5.1f  %-28s  %s\n",
               c->sync_full ? "true" : "false", c->workers, c->batch, c->clients, "-", "-", "-", "-", "-",
               "-", "-", "-", "-", (unsigned long long)c->errors, c->load1, ray, c->note);
        return;
    }
    printf("%-9s %7d %5d %7d %10.0f %8.2f %8.2f %8.2f %8.2f %6.1f %7.3f %7.3f %8llu %6llu %5.1f  %-28s"
           "%s%s\n",
           c->sync_full ? "true" : "false", c->workers, c->batch, c->clients, c->per_s, c->p50_ms, c->p99_ms,
           c->place_p50_ms, c->release_p50_ms, c->rpcs_per_cycle, c->head_cpu_ms, c->bench_cpu_ms,
           (unsigned long long)c->jobs_before, (unsigned long long)c->errors, c->load1, ray,
           c->note[0] ? "  " : "", c->note);
}

void eb_report_table(const eb_cell *cells, size_t n, const eb_startup *s, size_t nodes, double reg_s[2])
{
    printf("\nend to end through libtroupe: a real troupe-head (SQLite state on disk), %zu simulated nodes "
           "(4/8/16 GPUs)\n",
           nodes);
    printf("cycle = submit (W x 1 GPU, PACK) -> RUNNING -> stop -> agents' NodeSync reports -> no worker "
           "RUNNING/PENDING (GPUs released)\n");
    printf(
        "batch = groups per call: 1 = SubmitJob/StopJob per group; B > 1 = SubmitJobs/StopJobs of B groups "
        "(as ray_perf creates 100 PGs, waits, removes them); p50/p99/place50/relse50 are then per batch\n");
    printf("registration of the nodes (RegisterNode from 4 threads):");
    if (reg_s[0] > 0) {
        printf(" %.2f s with sync_full=true", reg_s[0]);
    }
    if (reg_s[1] > 0) {
        printf(" %.2f s with sync_full=false", reg_s[1]);
    }
    printf("\n");
    printf(
        "columns: place50/relse50 = p50 ms of submit..RUNNING and stop..released; rpc/c = calls per cycle; "
        "headCPU/bnchCPU = CPU ms per cycle of troupe-head and of this bench (client + agents); jobs< = jobs "
        "the head held before the cell; load = 1-min load average at the start\n");
    printf("%-9s %7s %5s %7s %10s %8s %8s %8s %8s %6s %7s %7s %8s %6s %5s  %-28s\n", "sync_full",
           "workers", "batch", "clients", "cycles/s", "p50 ms", "p99 ms", "place50", "relse50", "rpc/c",
           "headCPU", "bnchCPU", "jobs<", "errors", "load", "Ray published (context)");
    for (size_t i = 0; i < n; i++) {
        print_cell(&cells[i]);
    }
    if (s == NULL) {
        return;
    }
    if (s->ran) {
        printf("\nsubmit -> all %d workers RUNNING (%d real troupe-node agents x %d fake GPUs, `sleep 30` "
               "workers, "
               "sync_full=true): median %.1f ms, min %.1f ms over %d runs; stop -> all GPUs free: median "
               "%.1f ms\n",
               s->workers, s->nodes, s->gpus_per_node, s->median_ms, s->min_ms, s->done,
               s->release_median_ms);
    } else {
        printf("\nsubmit -> all workers RUNNING: not measured: %s\n", s->note);
    }
}

static double best(const eb_cell *cells, size_t n, int sync_full, int w, int *k, int *batch)
{
    double b = 0;
    for (size_t i = 0; i < n; i++) {
        if (cells[i].sync_full == sync_full && cells[i].workers == w && cells[i].per_s > b) {
            b = cells[i].per_s;
            *k = cells[i].clients;
            *batch = cells[i].batch;
        }
    }
    return b;
}

/* eb_report_goals prints the benchmark's goals, judged on durable state
 * (sync_full=true); returns 1 when both were met. */
int eb_report_goals(const eb_cell *cells, size_t n)
{
    int k1 = 0, k64 = 0, kf1 = 0, kf64 = 0, B1 = 0, B64 = 0, Bf = 0;
    double b1 = best(cells, n, 1, 1, &k1, &B1), b64 = best(cells, n, 1, 64, &k64, &B64);
    double f1 = best(cells, n, 0, 1, &kf1, &Bf), f64 = best(cells, n, 0, 64, &kf64, &Bf);

    printf("\ngoals (durable: sync_full=true):\n");
    printf("  1 bundle  > %.0f/s: best %.0f/s at %d clients, batch %d -> %s\n", GOAL_W1, b1, k1, B1,
           b1 > GOAL_W1 ? "MET" : "NOT MET");
    printf("  64 bundles > %.0f/s: best %.0f/s at %d clients, batch %d -> %s\n", GOAL_W64, b64, k64, B64,
           b64 > GOAL_W64 ? "MET" : "NOT MET");
    printf("  (Ray's published 818/s at 1 bundle and 10.6/s at 40 come from other machines: context only;\n"
           "   bench/e2e/ray_pg.py measures Ray on this one)\n");
    if (f1 > 0 || f64 > 0) {
        printf("  (sync_full=false, survives a crash of the head but not of the machine: %.0f/s at 1 bundle, "
               "%.0f/s at 64)\n",
               f1, f64);
    }
    return b1 > GOAL_W1 && b64 > GOAL_W64;
}

/* json_str writes s as a JSON string (notes quote error messages). */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') {
            fprintf(f, "\\%c", *s);
        } else if ((unsigned char)*s < 0x20) {
            fprintf(f, "\\u%04x", (unsigned char)*s);
        } else {
            fputc(*s, f);
        }
    }
    fputc('"', f);
}

int eb_report_json(const char *path, const char *settings, const eb_cell *cells, size_t n,
                   const eb_startup *s)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    fprintf(f, "{\n  \"bench\": \"e2e\",\n  \"settings\": %s,\n  \"cycles\": [\n", settings);
    for (size_t i = 0; i < n; i++) {
        const eb_cell *c = &cells[i];
        const char *ray;
        double ref = eb_ray_ref(c->workers, &ray);
        fprintf(
            f,
            "    {\"sync_full\": %s, \"workers\": %d, \"batch\": %d, \"clients\": %d, \"ran\": %s, "
            "\"cycles\": %llu, "
            "\"window_s\": %.3f, \"cycles_per_s\": %.1f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, "
            "\"place_p50_ms\": %.3f, \"release_p50_ms\": %.3f, \"rpcs_per_cycle\": %.2f, "
            "\"jobs_before\": %llu, \"errors\": %llu, \"head_cpu_ms_per_cycle\": %.4f, "
            "\"bench_cpu_ms_per_cycle\": %.4f, \"load1\": %.2f, \"ray_published_per_s\": %.1f, "
            "\"note\": ",
            c->sync_full ? "true" : "false", c->workers, c->batch, c->clients, c->ran ? "true" : "false",
            (unsigned long long)c->cycles, c->window_s, c->per_s, c->p50_ms, c->p99_ms, c->place_p50_ms,
            c->release_p50_ms, c->rpcs_per_cycle, (unsigned long long)c->jobs_before,
            (unsigned long long)c->errors, c->head_cpu_ms, c->bench_cpu_ms, c->load1, ref);
        json_str(f, c->note);
        fprintf(f, "}%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, "  ],\n  \"startup\": ");
    if (s == NULL) {
        fprintf(f, "null\n}\n");
    } else {
        fprintf(f,
                "{\"ran\": %s, \"nodes\": %d, \"gpus_per_node\": %d, \"workers\": %d, \"runs\": %d, "
                "\"median_ms\": %.2f, \"min_ms\": %.2f, \"release_median_ms\": %.2f, \"runs_ms\": [",
                s->ran ? "true" : "false", s->nodes, s->gpus_per_node, s->workers, s->done, s->median_ms,
                s->min_ms, s->release_median_ms);
        for (int i = 0; i < s->done; i++) {
            fprintf(f, "%s%.2f", i ? ", " : "", s->ms[i]);
        }
        fprintf(f, "], \"note\": ");
        json_str(f, s->note);
        fprintf(f, "}\n}\n");
    }
    return fclose(f) == 0 ? 0 : -1;
}
