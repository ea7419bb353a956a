/* cmd_nodes.c - troupe nodes | status | ping. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "json.h"

static void node_json(FILE *out, const troupe_node *n)
{
    fprintf(out, "{\"id\":%llu,\"name\":", (unsigned long long)n->id);
    tr_json_str(out, n->name);
    fputs(",\"hostname\":", out);
    tr_json_str(out, n->hostname);
    fputs(",\"address\":", out);
    tr_json_str(out, n->address);
    fprintf(out, ",\"state\":\"%s\",\"reason\":", troupe_node_state_name(n->state));
    tr_json_str(out, n->reason);
    fputs(",\"sync_error\":", out);
    tr_json_str(out, n->sync_error);
    fprintf(out, ",\"draining\":%s,\"replaces\":%llu,\"fenced_workers\":%u,\"nsys\":%s",
            n->draining ? "true" : "false", (unsigned long long)n->replaces, n->fenced_workers,
            n->has_nsys ? "true" : "false");
    fputs(",\"isolation\":", out);
    tr_json_str(out, n->isolation);
    fprintf(out,
            ",\"registered_ms\":%lld,\"last_seen_ms\":%lld,\"pid\":%u,\"gpus_free\":%u,\"cpus\":%u,"
            "\"cpus_free\":%.3f,\"labels\":{",
            (long long)n->registered_ms, (long long)n->last_seen_ms, n->pid, n->gpus_free, n->cpus,
            n->cpus_free);
    for (size_t k = 0; k < n->n_labels; k++) {
        fputs(k ? "," : "", out);
        tr_json_str(out, n->labels[k].key);
        fputc(':', out);
        tr_json_str(out, n->labels[k].value);
    }
    fputs("},\"gpus\":[", out);
    for (size_t g = 0; g < n->n_gpus; g++) {
        fprintf(out, "%s{\"index\":%u,\"model\":", g ? "," : "", n->gpus[g].index);
        tr_json_str(out, n->gpus[g].model);
        fprintf(out, ",\"memory_bytes\":%llu,\"uuid\":", (unsigned long long)n->gpus[g].memory_bytes);
        tr_json_str(out, n->gpus[g].uuid);
        fprintf(out, ",\"simulated\":%s,\"stats\":", n->gpus[g].simulated ? "true" : "false");
        if (n->gpus[g].stats) {
            fprintf(out, "{\"memory_used_bytes\":%llu,\"utilization_pct\":%u,\"temperature_c\":%u,\"power_mw\":%u}}",
                    (unsigned long long)n->gpus[g].memory_used_bytes, n->gpus[g].utilization_pct,
                    n->gpus[g].temperature_c, n->gpus[g].power_mw);
        } else {
            fputs("null}", out);
        }
    }
    fputs("],\"stats\":", out);
    if (n->stats_ms == 0) {
        fputs("null}", out);
        return;
    }
    fprintf(out, "{\"at_ms\":%lld,\"gpu_source\":", (long long)n->stats_ms);
    tr_json_str(out, n->gpu_source);
    fprintf(out, ",\"load1\":%.2f,\"mem_total_bytes\":%llu,\"mem_available_bytes\":%llu}}", n->load1,
            (unsigned long long)n->mem_total_bytes, (unsigned long long)n->mem_available_bytes);
}

/* gpu_figures: "UTIL" (mean over the GPUs read) and "GPU MEM" (used/total
 * GB) columns from the latest heartbeat; "-" without figures. */
static void gpu_figures(const troupe_node *n, char *util, size_t us, char *mem, size_t ms)
{
    uint64_t used = 0, total = 0, pct = 0;
    size_t k = 0;

    for (size_t g = 0; g < n->n_gpus; g++) {
        if (n->gpus[g].stats) {
            pct += n->gpus[g].utilization_pct;
            used += n->gpus[g].memory_used_bytes;
            total += n->gpus[g].memory_bytes;
            k++;
        }
    }
    if (k == 0) {
        snprintf(util, us, "-");
        snprintf(mem, ms, "-");
        return;
    }
    snprintf(util, us, "%llu%%", (unsigned long long)(pct / k));
    snprintf(mem, ms, "%.0f/%.0fG", (double)used / 1e9, (double)total / 1e9);
}

/* A node that found no GPU registers with none, and only CPU-only workers can
 * be placed there: said in REASON, as the agent says at start. */
#define NO_GPU_REASON                                                                                        \
    "no GPU found: only CPU-only workers (resources: {gpu: 0}) run here (troupe-node --fake-gpus N "         \
    "simulates "                                                                                             \
    "GPUs)"

/* nodes_table: one line per node; AGE is the time since it registered. CPUS
 * is free/total CPU slots, what CPU-only workers (gpu: 0) take.
 * wide adds where it is (hostname, address, the agent's pid) and its labels.
 * A live node with no GPU says so in REASON. */
static void nodes_table(const troupe_node_list *l, int wide)
{
    int64_t now = tr_cli_now_ms();
    printf("%-4s %-16s %-8s %5s %5s %9s %-26s %5s %-11s %5s %-9s %5s", "ID", "NAME", "STATE", "GPUS", "FREE",
           "CPUS", "MODEL", "UTIL", "GPU MEM", "LOAD", "SEEN", "AGE");
    if (wide) {
        printf("  %-20s %-24s %7s %-20s", "HOSTNAME", "ADDRESS", "PID", "LABELS");
    }
    printf("  %s\n", "REASON");
    for (size_t i = 0; i < l->count; i++) {
        const troupe_node *n = &l->nodes[i];
        char model[64] = "-", seen[16], state[48], util[8], mem[24], load[16] = "-", age[16], reason[768];
        char cpus[32];
        snprintf(cpus, sizeof(cpus), "%g/%u", n->cpus_free, n->cpus);
        snprintf(reason, sizeof(reason), "%s", n->reason);
        gpu_figures(n, util, sizeof(util), mem, sizeof(mem));
        if (n->stats_ms != 0) {
            snprintf(load, sizeof(load), "%.2f", n->load1);
        }
        if (n->n_gpus > 0) { /* simulated GPUs (--fake-gpus) say so: no CUDA behind them */
            snprintf(model, sizeof(model), "%s %.0fGB%s", n->gpus[0].model,
                     (double)n->gpus[0].memory_bytes / 1e9, n->gpus[0].simulated ? " (sim)" : "");
        } else if (n->state != TROUPE_NODE_DEAD && n->state != TROUPE_NODE_LEFT) {
            snprintf(reason, sizeof(reason), "%s%s%s", NO_GPU_REASON, n->reason[0] ? "; " : "", n->reason);
        }
        tr_cli_time(seen, sizeof(seen), n->last_seen_ms);
        tr_cli_age(age, sizeof(age), n->registered_ms, now);
        /* kubectl's "Ready,SchedulingDisabled": the state, and why no new work. */
        /* An agent without root that refuses jobs says so (NOROOT); one run
         * with --shared-uid was the operator's choice: -o json's isolation. */
        snprintf(state, sizeof(state), "%s%s%s%s%s", troupe_node_state_name(n->state),
                 n->draining ? ",DRAINING" : "", n->fenced_workers ? ",FENCED" : "",
                 strncmp(n->isolation, "none", 4) == 0 ? ",NOROOT" : "", n->sync_error[0] ? ",UNSYNCED" : "");
        printf("%-4llu %-16s %-8s %5zu %5u %9s %-26s %5s %-11s %5s %-9s %5s", (unsigned long long)n->id,
               n->name, state, n->n_gpus, n->gpus_free, cpus, model, util, mem, load, seen, age);
        if (wide) {
            char labels[256] = "";
            size_t off = 0;
            for (size_t k = 0; k < n->n_labels && off < sizeof(labels); k++) {
                off += (size_t)snprintf(labels + off, sizeof(labels) - off, "%s%s=%s", k ? "," : "",
                                        n->labels[k].key, n->labels[k].value);
            }
            printf("  %-20s %-24s %7u %-20s", n->hostname[0] ? n->hostname : "-", n->address[0] ? n->address : "-",
                   n->pid, off ? labels : "-");
        }
        printf("  %s%s%s\n", reason, reason[0] && n->sync_error[0] ? "; " : "", n->sync_error);
    }
}

int tr_cli_cmd_nodes(tr_cli *cli, int argc, char **argv)
{
    troupe_node_list *l = NULL;
    troupe_error err;
    int alive_only = 0;
    size_t gpus = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--alive") == 0) {
            alive_only = 1;
        } else {
            fprintf(stderr, "troupe nodes: unknown argument '%s' (usage: troupe nodes [--alive])\n", argv[i]);
            return TR_EXIT_USAGE;
        }
    }
    if (tr_cli_connect(cli) != 0) {
        return TR_EXIT_FAILED;
    }
    if (troupe_list_nodes(cli->client, !alive_only, &l, &err) != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        troupe_client_close(cli->client);
        return TR_EXIT_FAILED;
    }
    for (size_t i = 0; i < l->count; i++) {
        gpus += l->nodes[i].state == TROUPE_NODE_DEAD || l->nodes[i].state == TROUPE_NODE_LEFT ? 0 : l->nodes[i].n_gpus;
    }
    if (cli->json) {
        printf("{\"count\":%zu,\"gpus_total\":%zu,\"nodes\":[", l->count, gpus);
        for (size_t i = 0; i < l->count; i++) {
            fputs(i ? "," : "", stdout);
            node_json(stdout, &l->nodes[i]);
        }
        printf("]}\n");
    } else {
        nodes_table(l, cli->wide);
    }
    troupe_node_list_free(l);
    troupe_client_close(cli->client);
    return TR_EXIT_OK;
}

/* print_store: one line, and a loud one while the head cannot save. */
static void print_store(const troupe_cluster *cl)
{
    char since[16];

    if (!cl->store_failing) {
        printf("store     ok (%llu failed writes since start)\n",
               (unsigned long long)cl->store_failed_writes);
        return;
    }
    tr_cli_time(since, sizeof(since), cl->store_failing_since_ms);
    printf("store     FAILING since %s, %llu changes unsaved: %s\n"
           "          new work is refused until the head can write again (it retries by itself)\n",
           since, (unsigned long long)cl->store_unsaved, cl->store_error);
}

int tr_cli_cmd_status(tr_cli *cli, int argc, char **argv)
{
    troupe_cluster cl;
    troupe_error err;
    char started[16];

    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "troupe status: takes no arguments\n");
        return TR_EXIT_USAGE;
    }
    if (tr_cli_connect(cli) != 0) {
        return TR_EXIT_FAILED;
    }
    if (troupe_get_cluster(cli->client, &cl, &err) != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        troupe_client_close(cli->client);
        return TR_EXIT_FAILED;
    }
    if (cli->json) {
        printf("{\"head\":");
        tr_json_str(stdout, troupe_client_url(cli->client));
        printf(",\"version\":\"%s\",\"started_ms\":%lld,\"requests_served\":%llu,"
               "\"nodes\":{\"alive\":%u,\"suspect\":%u,\"dead\":%u,\"left\":%u,\"heartbeat_ms\":%u,\"dead_ms\":%u},"
               "\"gpus\":{\"total\":%u,\"free\":%u},\"cpus\":{\"total\":%u,\"free\":%.3f},"
               "\"jobs\":{\"pending\":%u,\"running\":%u,\"succeeded\":%u,\"failed\":%u,\"stopped\":%u,"
               "\"unsaved\":%u}",
               cl.head_version, (long long)cl.head_started_ms, (unsigned long long)cl.requests_served,
               cl.nodes_alive, cl.nodes_suspect, cl.nodes_dead, cl.nodes_left, cl.heartbeat_ms, cl.dead_ms,
               cl.gpus_total, cl.gpus_free, cl.cpus_total, cl.cpus_free, cl.jobs_pending, cl.jobs_running,
               cl.jobs_succeeded, cl.jobs_failed, cl.jobs_stopped, cl.jobs_unsaved);
        printf(",\"http\":");
        tr_json_str(stdout, cl.http_url);
        printf(",\"store\":{\"ok\":%s,\"error\":", cl.store_failing ? "false" : "true");
        tr_json_str(stdout, cl.store_error);
        printf(",\"failing_since_ms\":%lld,\"failed_writes\":%llu,\"unsaved\":%llu}",
               (long long)cl.store_failing_since_ms, (unsigned long long)cl.store_failed_writes,
               (unsigned long long)cl.store_unsaved);
        printf(",\"connections\":{\"open\":%llu,\"unauthenticated\":%llu,\"max\":%llu,\"refused\":%llu,"
               "\"displaced\":%llu,\"closed_idle\":%llu,\"frames_oversized\":%llu,\"frame_limit_bytes\":%llu}}\n",
               (unsigned long long)cl.connections_open, (unsigned long long)cl.connections_unauthenticated,
               (unsigned long long)cl.connections_max, (unsigned long long)cl.connections_refused,
               (unsigned long long)cl.connections_displaced, (unsigned long long)cl.connections_closed_idle,
               (unsigned long long)cl.frames_oversized, (unsigned long long)cl.frame_limit_bytes);
    } else {
        tr_cli_time(started, sizeof(started), cl.head_started_ms);
        printf("head      %s (troupe-head %s, up since %s, %llu requests)\n", troupe_client_url(cli->client),
               cl.head_version, started, (unsigned long long)cl.requests_served);
        printf("nodes     %u alive, %u suspect, %u dead, %u left; heartbeat every %u ms, DEAD after %u ms silent\n",
               cl.nodes_alive, cl.nodes_suspect, cl.nodes_dead, cl.nodes_left, cl.heartbeat_ms, cl.dead_ms);
        printf("http      %s\n", cl.http_url[0] ? cl.http_url : "off");
        printf("gpus      %u total, %u free\n", cl.gpus_total, cl.gpus_free);
        printf("cpus      %u total, %g free (slots for CPU-only workers, resources: {gpu: 0})\n", cl.cpus_total,
               cl.cpus_free);
        printf("jobs      %u pending, %u running, %u succeeded, %u failed, %u stopped", cl.jobs_pending,
               cl.jobs_running, cl.jobs_succeeded, cl.jobs_failed, cl.jobs_stopped);
        if (cl.jobs_unsaved > 0) {
            printf(", %u with changes not saved yet", cl.jobs_unsaved);
        }
        printf("\n");
        print_store(&cl);
        printf("conns     %llu open (%llu unauthenticated) of %llu; refused %llu, displaced %llu, closed idle %llu; "
               "%llu oversized frames; frames up to %llu bytes now\n",
               (unsigned long long)cl.connections_open, (unsigned long long)cl.connections_unauthenticated,
               (unsigned long long)cl.connections_max, (unsigned long long)cl.connections_refused,
               (unsigned long long)cl.connections_displaced, (unsigned long long)cl.connections_closed_idle,
               (unsigned long long)cl.frames_oversized, (unsigned long long)cl.frame_limit_bytes);
    }
    troupe_client_close(cli->client);
    return TR_EXIT_OK;
}

int tr_cli_cmd_ping(tr_cli *cli, int argc, char **argv)
{
    troupe_error err;
    long count = 1;
    struct timespec a, b;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            char *end;
            count = strtol(argv[++i], &end, 10);
            count = *end == '\0' ? count : 0;
        } else {
            fprintf(stderr, "troupe ping: unknown argument '%s' (usage: troupe ping [-n COUNT])\n", argv[i]);
            return TR_EXIT_USAGE;
        }
    }
    if (count < 1) {
        fprintf(stderr, "troupe ping: -n wants a positive count\n");
        return TR_EXIT_USAGE;
    }
    if (tr_cli_connect(cli) != 0) {
        return TR_EXIT_FAILED;
    }
    for (long i = 0; i < count; i++) {
        clock_gettime(CLOCK_MONOTONIC, &a);
        if (troupe_ping(cli->client, "ping", 4, &err) != TROUPE_OK) {
            tr_cli_fail(cli, &err);
            troupe_client_close(cli->client);
            return TR_EXIT_FAILED;
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        double us = (double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3;
        if (cli->json) {
            printf("{\"seq\":%ld,\"rtt_us\":%.1f}\n", i, us);
        } else {
            printf("reply from %s: seq=%ld time=%.1f us\n", troupe_client_url(cli->client), i, us);
        }
    }
    troupe_client_close(cli->client);
    return TR_EXIT_OK;
}
