/* cmd_drain.c - troupe drain NODE | troupe undrain NODE.
 *
 * Draining is kubectl's cordon + drain without eviction: the node takes no
 * new placements at once, its running jobs go on, and `drain` waits (with a
 * deadline) until none of them has a worker there any more. The node stays
 * draining until `troupe undrain`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "json.h"

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void result_json(const troupe_drain_result *r, int drained)
{
    printf("{\"id\":%llu,\"name\":", (unsigned long long)r->node_id);
    tr_json_str(stdout, r->name);
    printf(",\"state\":\"%s\",\"draining\":%s,\"running_jobs\":%u,\"drained\":%s}\n",
           troupe_node_state_name(r->state), r->draining ? "true" : "false", r->running_jobs,
           drained ? "true" : "false");
}

/* wait_drained polls until the node runs no job or the deadline passes;
 * returns 0 when drained. */
static int wait_drained(tr_cli *cli, const char *node, troupe_drain_result *r, int64_t timeout_s)
{
    int64_t until = mono_ms() + timeout_s * 1000;
    uint32_t said = (uint32_t)-1;
    troupe_error err;

    while (r->running_jobs > 0) {
        if (r->running_jobs != said && !cli->json) {
            fprintf(stderr, "troupe: node %s is draining: %u job%s still running there\n", r->name,
                    r->running_jobs, r->running_jobs == 1 ? "" : "s");
            said = r->running_jobs;
        }
        if (mono_ms() >= until) {
            fprintf(stderr,
                    "troupe: node %s still runs %u job%s after %lld s; it stays draining (troupe undrain %s "
                    "to take work again, troupe stop JOB to end them)\n",
                    r->name, r->running_jobs, r->running_jobs == 1 ? "" : "s", (long long)timeout_s, node);
            return 1;
        }
        struct timespec ts = {0, 250 * 1000000L};
        nanosleep(&ts, NULL);
        if (troupe_drain_node(cli->client, node, 0, r, &err) != TROUPE_OK) {
            tr_cli_fail(cli, &err);
            return 1;
        }
    }
    return 0;
}

static int drain_main(tr_cli *cli, int argc, char **argv, int undrain)
{
    const char *node = NULL;
    int64_t timeout_s = 3600;
    int wait = !undrain, rc = 0;
    troupe_drain_result r;
    troupe_error err;

    for (int i = 1; i < argc; i++) {
        if (!undrain && strcmp(argv[i], "--no-wait") == 0) {
            wait = 0;
        } else if (!undrain && strcmp(argv[i], "--max-wait") == 0 && i + 1 < argc && atoll(argv[i + 1]) > 0) {
            timeout_s = atoll(argv[++i]);
        } else if (argv[i][0] != '-' && node == NULL) {
            node = argv[i];
        } else {
            fprintf(stderr, "troupe %s: unexpected '%s' (usage: %s)\n", argv[0], argv[i],
                    undrain ? "troupe undrain NODE" : "troupe drain NODE [--no-wait] [--max-wait SECONDS]");
            return 2;
        }
    }
    if (node == NULL) {
        fprintf(stderr, "troupe %s: which node? (a name or id from troupe nodes)\n", argv[0]);
        return 2;
    }
    if (tr_cli_connect(cli) != 0) {
        return 1;
    }
    if (troupe_drain_node(cli->client, node, undrain, &r, &err) != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        troupe_client_close(cli->client);
        return 1;
    }
    if (wait) {
        rc = wait_drained(cli, node, &r, timeout_s);
    }
    if (cli->json) {
        result_json(&r, !undrain && r.running_jobs == 0);
    } else if (undrain) {
        printf("node %s (id %llu): takes new work again\n", r.name, (unsigned long long)r.node_id);
    } else if (r.running_jobs == 0) {
        printf("node %s (id %llu): drained; no job runs there and it takes no new work (troupe undrain %s to "
               "undo)\n",
               r.name, (unsigned long long)r.node_id, node);
    } else if (rc == 0) {
        printf("node %s (id %llu): draining; %u job%s still running there\n", r.name,
               (unsigned long long)r.node_id, r.running_jobs, r.running_jobs == 1 ? "" : "s");
    }
    troupe_client_close(cli->client);
    return rc;
}

int tr_cli_cmd_drain(tr_cli *cli, int argc, char **argv)
{
    return drain_main(cli, argc, argv, 0);
}

int tr_cli_cmd_undrain(tr_cli *cli, int argc, char **argv)
{
    return drain_main(cli, argc, argv, 1);
}
