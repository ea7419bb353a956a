/* cmd_nodes.c - troupe nodes | status | ping. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "json.h"

const tr_cli_cmd tr_cli_commands[] = {
    {"nodes", tr_cli_cmd_nodes, "nodes [--alive]", "list nodes with their GPUs and state"},
    {"status", tr_cli_cmd_status, "status", "cluster totals: nodes by state, GPUs total/free"},
    {"ping", tr_cli_cmd_ping, "ping [-n COUNT]", "round-trip to the head and print the latency"},
    {"submit", tr_cli_cmd_submit, "submit JOB.yaml [--no-wait]",
     "submit a job, print its id, follow its logs until it ends (exit 0 on SUCCEEDED)"},
    {"submit", tr_cli_cmd_submit, "submit A.yaml B.yaml... [--no-wait]",
     "submit several jobs in one call (all files checked first), print their ids, wait for all to end"},
    {"jobs", tr_cli_cmd_jobs, "jobs [--active]", "list jobs"},
    {"job", tr_cli_cmd_job, "job ID", "one job: state, reason, groups, per-worker placement and exit codes"},
    {"logs", tr_cli_cmd_logs, "logs ID [-f] [--worker NAME]", "print a job's logs; -f follows until it ends"},
    {"stop", tr_cli_cmd_stop, "stop ID [ID ...] [--no-wait]",
     "stop jobs (several in one call) and wait until none of their workers runs"},
    {NULL, NULL, NULL, NULL},
};

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
    fprintf(out, ",\"registered_ms\":%lld,\"last_seen_ms\":%lld,\"pid\":%u,\"gpus_free\":%u,\"labels\":{",
            (long long)n->registered_ms, (long long)n->last_seen_ms, n->pid, n->gpus_free);
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
        fprintf(out, ",\"simulated\":%s}", n->gpus[g].simulated ? "true" : "false");
    }
    fputs("]}", out);
}

static void nodes_table(const troupe_node_list *l)
{
    printf("%-4s %-16s %-8s %5s %5s %-22s %-9s %s\n", "ID", "NAME", "STATE", "GPUS", "FREE", "MODEL", "SEEN",
           "REASON");
    for (size_t i = 0; i < l->count; i++) {
        const troupe_node *n = &l->nodes[i];
        char model[64] = "-", seen[16];
        if (n->n_gpus > 0) {
            snprintf(model, sizeof(model), "%s %.0fGB", n->gpus[0].model,
                     (double)n->gpus[0].memory_bytes / 1e9);
        }
        tr_cli_time(seen, sizeof(seen), n->last_seen_ms);
        printf("%-4llu %-16s %-8s %5zu %5u %-22s %-9s %s\n", (unsigned long long)n->id, n->name,
               troupe_node_state_name(n->state), n->n_gpus, n->gpus_free, model, seen, n->reason);
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
            return 2;
        }
    }
    if (tr_cli_connect(cli) != 0) {
        return 1;
    }
    if (troupe_list_nodes(cli->client, !alive_only, &l, &err) != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        troupe_client_close(cli->client);
        return 1;
    }
    for (size_t i = 0; i < l->count; i++) {
        gpus += l->nodes[i].state == TROUPE_NODE_DEAD ? 0 : l->nodes[i].n_gpus;
    }
    if (cli->json) {
        printf("{\"count\":%zu,\"gpus_total\":%zu,\"nodes\":[", l->count, gpus);
        for (size_t i = 0; i < l->count; i++) {
            fputs(i ? "," : "", stdout);
            node_json(stdout, &l->nodes[i]);
        }
        printf("]}\n");
    } else {
        nodes_table(l);
    }
    troupe_node_list_free(l);
    troupe_client_close(cli->client);
    return 0;
}

int tr_cli_cmd_status(tr_cli *cli, int argc, char **argv)
{
    troupe_cluster cl;
    troupe_error err;
    char started[16];

    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "troupe status: takes no arguments\n");
        return 2;
    }
    if (tr_cli_connect(cli) != 0) {
        return 1;
    }
    if (troupe_get_cluster(cli->client, &cl, &err) != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        troupe_client_close(cli->client);
        return 1;
    }
    if (cli->json) {
        printf("{\"head\":");
        tr_json_str(stdout, troupe_client_url(cli->client));
        printf(",\"version\":\"%s\",\"started_ms\":%lld,\"requests_served\":%llu,"
               "\"nodes\":{\"alive\":%u,\"suspect\":%u,\"dead\":%u},\"gpus\":{\"total\":%u,\"free\":%u}}\n",
               cl.head_version, (long long)cl.head_started_ms, (unsigned long long)cl.requests_served,
               cl.nodes_alive, cl.nodes_suspect, cl.nodes_dead, cl.gpus_total, cl.gpus_free);
    } else {
        tr_cli_time(started, sizeof(started), cl.head_started_ms);
        printf("head      %s (troupe-head %s, up since %s, %llu requests)\n", troupe_client_url(cli->client),
               cl.head_version, started, (unsigned long long)cl.requests_served);
        printf("nodes     %u alive, %u suspect, %u dead\n", cl.nodes_alive, cl.nodes_suspect, cl.nodes_dead);
        printf("gpus      %u total, %u free\n", cl.gpus_total, cl.gpus_free);
    }
    troupe_client_close(cli->client);
    return 0;
}

int tr_cli_cmd_ping(tr_cli *cli, int argc, char **argv)
{
    troupe_error err;
    long count = 1;
    struct timespec a, b;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            count = strtol(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "troupe ping: unknown argument '%s' (usage: troupe ping [-n COUNT])\n", argv[i]);
            return 2;
        }
    }
    if (count < 1) {
        fprintf(stderr, "troupe ping: -n wants a positive count\n");
        return 2;
    }
    if (tr_cli_connect(cli) != 0) {
        return 1;
    }
    for (long i = 0; i < count; i++) {
        clock_gettime(CLOCK_MONOTONIC, &a);
        if (troupe_ping(cli->client, "ping", 4, &err) != TROUPE_OK) {
            tr_cli_fail(cli, &err);
            troupe_client_close(cli->client);
            return 1;
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
    return 0;
}
