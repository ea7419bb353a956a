/* cmd_history.c - the CLI side of bounded history: `troupe jobs` paging and
 * filter flags, and `troupe delete`. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define JOBS_USAGE                                                                                           \
    "usage: troupe jobs [--active] [--state S[,S...]] [--name GLOB] [--limit N] [--cursor C] "               \
    "[--oldest-first] "                                                                                      \
    "[--all]\n"

static int parse_u64(const char *flag, const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s == '\0' || *s == '-' || *end != '\0') {
        fprintf(stderr, "troupe jobs: %s wants a number, not '%s'\n" JOBS_USAGE, flag, s);
        return TR_EXIT_USAGE;
    }
    *out = v;
    return TR_EXIT_OK;
}

/* parse_states turns "RUNNING,failed" into a troupe_list_opts.states mask. */
static int parse_states(const char *list, uint32_t *mask)
{
    static const char *const names[] = {"", "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"};
    const char *p = list;

    while (*p != '\0') {
        size_t n = strcspn(p, ","), s;
        for (s = 1; s < 6 && !(strlen(names[s]) == n && strncasecmp(p, names[s], n) == 0); s++) {
        }
        if (s == 6) {
            fprintf(stderr,
                    "troupe jobs: unknown state '%.*s' (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED)\n",
                    (int)n, p);
            return TR_EXIT_USAGE;
        }
        *mask |= 1u << s;
        p += n + (p[n] == ',');
    }
    return TR_EXIT_OK;
}

int tr_cli_list_args(int argc, char **argv, troupe_list_opts *o, int *all)
{
    uint64_t v;
    int rv = TR_EXIT_OK;

    for (int i = 1; i < argc && rv == TR_EXIT_OK; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = strcmp(a, "--state") == 0 || strcmp(a, "--name") == 0 || strcmp(a, "--limit") == 0 ||
                    strcmp(a, "--cursor") == 0;
        if (takes && val == NULL) {
            fprintf(stderr, "troupe jobs: %s needs a value\n" JOBS_USAGE, a);
            return TR_EXIT_USAGE;
        }
        if (strcmp(a, "--active") == 0) {
            o->active_only = 1;
        } else if (strcmp(a, "--oldest-first") == 0) {
            o->oldest_first = 1;
        } else if (strcmp(a, "--all") == 0) {
            *all = 1;
        } else if (strcmp(a, "--state") == 0) {
            rv = parse_states(val, &o->states);
        } else if (strcmp(a, "--name") == 0) {
            o->name = val;
        } else if (strcmp(a, "--limit") == 0) {
            if ((rv = parse_u64(a, val, &v)) == TR_EXIT_OK && (v == 0 || v > 1000)) {
                fprintf(stderr, "troupe jobs: --limit takes 1 to 1000 (use --all for every job)\n");
                rv = TR_EXIT_USAGE;
            }
            o->limit = (uint32_t)v;
        } else if (strcmp(a, "--cursor") == 0) {
            rv = parse_u64(a, val, &o->cursor);
        } else {
            fprintf(stderr, "troupe jobs: unknown argument '%s'\n" JOBS_USAGE, a);
            return TR_EXIT_USAGE;
        }
        i += takes;
    }
    if (rv == TR_EXIT_OK && *all && (o->states || o->name || o->limit || o->cursor)) {
        fprintf(stderr, "troupe jobs: --all lists every job (newest first, or --oldest-first); it takes only --active and --oldest-first\n");
        rv = TR_EXIT_USAGE;
    }
    return rv;
}

int tr_cli_cmd_delete(tr_cli *cli, int argc, char **argv)
{
    int rv = TR_EXIT_OK;
    size_t done = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: troupe delete ID [ID ...]\n");
        return TR_EXIT_USAGE;
    }
    for (int i = 1; i < argc; i++) {
        char *end;
        if (strtoull(argv[i], &end, 10) == 0 || *end != '\0' || argv[i][0] == '-') {
            fprintf(stderr,
                    "troupe: '%s' is not a job id (see troupe jobs)\nusage: troupe delete ID [ID ...]\n",
                    argv[i]);
            return TR_EXIT_USAGE;
        }
    }
    if (tr_cli_connect(cli) != 0) {
        return TR_EXIT_FAILED;
    }
    if (cli->json) {
        printf("{\"deleted\":[");
    }
    for (int i = 1; i < argc; i++) {
        uint64_t id = strtoull(argv[i], NULL, 10);
        troupe_error err;
        if (troupe_delete_job(cli->client, id, &err) != TROUPE_OK) {
            tr_cli_fail(cli, &err);
            rv = TR_EXIT_FAILED;
            continue;
        }
        if (cli->json) {
            printf("%s%" PRIu64, done ? "," : "", id);
        } else {
            printf("deleted job %" PRIu64 "\n", id);
        }
        done++;
    }
    if (cli->json) {
        printf("]}\n");
    }
    troupe_client_close(cli->client);
    return rv;
}
