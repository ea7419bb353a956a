/* report.c - the table, the goal check and the JSON of troupe-bench-rpc.
 *
 * Ratios compare cells of the same payload and concurrency: p50 as a multiple
 * of the reference's p50 (lower is better), calls/s as a multiple of the
 * reference's calls/s (higher is better). */
#include <stdio.h>
#include <string.h>

#include "rpc_bench.h"

/* The goals this benchmark is judged against (bench/RESULTS.md). */
#define GOAL_P50_CLIENTS 1
#define GOAL_P50_MAX_VS_NNG 1.2 /* troupe p50 at 1 client <= 1.2x raw nng */
#define GOAL_CPS_CLIENTS 64
#define GOAL_CPS_MIN_VS_NNG 0.8  /* troupe calls/s at 64 >= 80% of raw nng */
#define GOAL_CPS_MIN_VS_GRPC 3.0 /* ... and >= 3x gRPC */

typedef struct goals {
    size_t data_len;
    double p50_vs_nng, cps_vs_nng, cps_vs_grpc; /* < 0: a cell is missing */
    int p50_ok, cps_nng_ok, cps_grpc_ok;
} goals;

const char *rb_system_name(rb_system s)
{
    static const char *const names[RB_NSYSTEMS] = {"troupe", "troupe-shared", "nng", "grpc"};
    return (unsigned)s < RB_NSYSTEMS ? names[s] : "?";
}

static const rb_cell *find(const rb_cell *cells, size_t n, rb_system sys, int clients, size_t data_len)
{
    for (size_t i = 0; i < n; i++) {
        if (cells[i].sys == sys && cells[i].clients == clients && cells[i].data_len == data_len &&
            cells[i].ran) {
            return &cells[i];
        }
    }
    return NULL;
}

/* ratio is a/b of a field, or -1 when either cell is missing. */
static double ratio(const rb_cell *a, const rb_cell *b, int p50)
{
    if (a == NULL || b == NULL) {
        return -1.0;
    }
    if (p50) {
        return b->p50_us > 0 ? a->p50_us / b->p50_us : -1.0;
    }
    return b->calls_per_s > 0 ? a->calls_per_s / b->calls_per_s : -1.0;
}

static void put_ratio(FILE *out, double r)
{
    if (r < 0) {
        fprintf(out, " %9s", "-");
    } else {
        fprintf(out, " %8.2fx", r);
    }
}

void rb_report_table(const rb_cell *cells, size_t n, FILE *out)
{
    fprintf(out, "%-14s %5s %7s %9s %9s %10s %9s %9s %9s %9s\n", "system", "conc", "data B", "p50 us",
            "p99 us", "calls/s", "p50/nng", "p50/grpc", "cps/nng", "cps/grpc");
    for (size_t i = 0; i < n; i++) {
        const rb_cell *c = &cells[i];
        const rb_cell *nng = find(cells, n, RB_NNG, c->clients, c->data_len);
        const rb_cell *grpc = find(cells, n, RB_GRPC, c->clients, c->data_len);

        fprintf(out, "%-14s %5d %7zu ", rb_system_name(c->sys), c->clients, c->data_len);
        if (!c->ran) {
            fprintf(out, "(not run: %s)\n", c->note);
            continue;
        }
        fprintf(out, "%9.1f %9.1f %10.0f", c->p50_us, c->p99_us, c->calls_per_s);
        put_ratio(out, ratio(c, nng, 1));
        put_ratio(out, ratio(c, grpc, 1));
        put_ratio(out, ratio(c, nng, 0));
        put_ratio(out, ratio(c, grpc, 0));
        fprintf(out, c->errors ? "  errors=%llu\n" : "\n", (unsigned long long)c->errors);
    }
}

static void eval_goals(const rb_cell *cells, size_t n, size_t data_len, goals *g)
{
    const rb_cell *t1 = find(cells, n, RB_TROUPE, GOAL_P50_CLIENTS, data_len);
    const rb_cell *n1 = find(cells, n, RB_NNG, GOAL_P50_CLIENTS, data_len);
    const rb_cell *t64 = find(cells, n, RB_TROUPE, GOAL_CPS_CLIENTS, data_len);
    const rb_cell *n64 = find(cells, n, RB_NNG, GOAL_CPS_CLIENTS, data_len);
    const rb_cell *g64 = find(cells, n, RB_GRPC, GOAL_CPS_CLIENTS, data_len);

    g->data_len = data_len;
    g->p50_vs_nng = ratio(t1, n1, 1);
    g->cps_vs_nng = ratio(t64, n64, 0);
    g->cps_vs_grpc = ratio(t64, g64, 0);
    g->p50_ok = g->p50_vs_nng >= 0 && g->p50_vs_nng <= GOAL_P50_MAX_VS_NNG;
    g->cps_nng_ok = g->cps_vs_nng >= GOAL_CPS_MIN_VS_NNG;
    g->cps_grpc_ok = g->cps_vs_grpc >= GOAL_CPS_MIN_VS_GRPC;
}

/* data_sizes lists the distinct payload sizes in table order. */
static size_t data_sizes(const rb_cell *cells, size_t n, size_t *sizes, size_t max)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < k && sizes[j] != cells[i].data_len) {
            j++;
        }
        if (j == k && k < max) {
            sizes[k++] = cells[i].data_len;
        }
    }
    return k;
}

static const char *verdict(double r, int ok)
{
    return r < 0 ? "n/a" : ok ? "met" : "MISSED";
}

int rb_report_goals(const rb_cell *cells, size_t n, FILE *out)
{
    size_t sizes[16], k = data_sizes(cells, n, sizes, 16);
    int all = 1, missing = 0, want_grpc = 0;

    /* A peer that was not asked for (no gRPC in this build) leaves its ratio
     * n/a without making the troupe and nng cells a failed run. */
    for (size_t i = 0; i < n; i++) {
        want_grpc |= cells[i].sys == RB_GRPC;
    }

    for (size_t i = 0; i < k; i++) {
        goals g;
        eval_goals(cells, n, sizes[i], &g);
        fprintf(out, "goals, %zu-byte data:\n", sizes[i]);
        fprintf(out, "  troupe p50 at %d client / raw nng: ", GOAL_P50_CLIENTS);
        put_ratio(out, g.p50_vs_nng);
        fprintf(out, " (goal <= %.1fx): %s\n", GOAL_P50_MAX_VS_NNG, verdict(g.p50_vs_nng, g.p50_ok));
        fprintf(out, "  troupe calls/s at %d / raw nng:  ", GOAL_CPS_CLIENTS);
        put_ratio(out, g.cps_vs_nng);
        fprintf(out, " (goal >= %.1fx): %s\n", GOAL_CPS_MIN_VS_NNG, verdict(g.cps_vs_nng, g.cps_nng_ok));
        fprintf(out, "  troupe calls/s at %d / gRPC:     ", GOAL_CPS_CLIENTS);
        put_ratio(out, g.cps_vs_grpc);
        fprintf(out, " (goal >= %.1fx): %s\n", GOAL_CPS_MIN_VS_GRPC, verdict(g.cps_vs_grpc, g.cps_grpc_ok));
        missing |= g.p50_vs_nng < 0 || g.cps_vs_nng < 0 || (want_grpc && g.cps_vs_grpc < 0);
        all &= g.p50_ok && g.cps_nng_ok && g.cps_grpc_ok;
    }
    return missing ? -1 : all;
}

/* json_ratio writes a ratio, or null when a cell it needs is missing. */
static void json_ratio(FILE *f, const char *key, double r)
{
    if (r < 0) {
        fprintf(f, ", \"%s\": null", key);
    } else {
        fprintf(f, ", \"%s\": %.3f", key, r);
    }
}

static void json_cell(FILE *f, const rb_cell *c, const rb_cell *cells, size_t n)
{
    const rb_cell *nng = find(cells, n, RB_NNG, c->clients, c->data_len);
    const rb_cell *grpc = find(cells, n, RB_GRPC, c->clients, c->data_len);

    fprintf(f,
            "    {\"system\": \"%s\", \"clients\": %d, \"data_bytes\": %zu, \"frame_bytes\": %zu, "
            "\"ran\": %s",
            rb_system_name(c->sys), c->clients, c->data_len, c->frame_len, c->ran ? "true" : "false");
    if (c->ran) {
        fprintf(f,
                ", \"calls\": %llu, \"errors\": %llu, \"window_s\": %.3f, \"p50_us\": %.1f, "
                "\"p99_us\": %.1f, \"calls_per_s\": %.1f",
                (unsigned long long)c->calls, (unsigned long long)c->errors, c->window_s, c->p50_us,
                c->p99_us, c->calls_per_s);
        json_ratio(f, "p50_vs_nng", ratio(c, nng, 1));
        json_ratio(f, "p50_vs_grpc", ratio(c, grpc, 1));
        json_ratio(f, "cps_vs_nng", ratio(c, nng, 0));
        json_ratio(f, "cps_vs_grpc", ratio(c, grpc, 0));
    } else {
        fprintf(f, ", \"note\": \"%s\"", c->note); /* notes are ours: no quotes in them */
    }
    fprintf(f, "}");
}

static void json_goals(FILE *f, const rb_cell *cells, size_t n)
{
    size_t sizes[16], k = data_sizes(cells, n, sizes, 16);

    fprintf(f, "  \"goals\": [\n");
    for (size_t i = 0; i < k; i++) {
        goals g;
        eval_goals(cells, n, sizes[i], &g);
        fprintf(f, "    {\"data_bytes\": %zu", g.data_len);
        json_ratio(f, "p50_1_vs_nng", g.p50_vs_nng);
        json_ratio(f, "cps_64_vs_nng", g.cps_vs_nng);
        json_ratio(f, "cps_64_vs_grpc", g.cps_vs_grpc);
        fprintf(f, ", \"p50_1_met\": %s, \"cps_64_vs_nng_met\": %s, \"cps_64_vs_grpc_met\": %s}%s\n",
                g.p50_ok ? "true" : "false", g.cps_nng_ok ? "true" : "false",
                g.cps_grpc_ok ? "true" : "false", i + 1 < k ? "," : "");
    }
    fprintf(f, "  ]\n");
}

int rb_report_json(const char *path, const char *settings_json, const rb_cell *cells, size_t n)
{
    FILE *f = fopen(path, "w");

    if (f == NULL) {
        return -1;
    }
    fprintf(f, "{\n  \"benchmark\": \"bench/rpc\",\n  \"settings\": %s,\n  \"cells\": [\n", settings_json);
    for (size_t i = 0; i < n; i++) {
        json_cell(f, &cells[i], cells, n);
        fprintf(f, "%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, "  ],\n");
    json_goals(f, cells, n);
    fprintf(f, "}\n");
    return fclose(f) == 0 ? 0 : -1;
}
