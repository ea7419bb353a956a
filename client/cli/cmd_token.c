/* cmd_token.c - `troupe token create|revoke`: minted credentials (admin). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"

/* parse_ttl reads "90", "90s", "15m", "12h" or "30d" as seconds; -1 if bad. */
static int64_t parse_ttl(const char *s)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    int64_t unit = 1;

    if (end == s || v <= 0) {
        return -1;
    }
    switch (*end) {
    case '\0':
    case 's': break;
    case 'm': unit = 60; break;
    case 'h': unit = 3600; break;
    case 'd': unit = 86400; break;
    default: return -1;
    }
    if (*end != '\0' && end[1] != '\0') {
        return -1;
    }
    return v > INT64_MAX / unit ? -1 : (int64_t)v * unit;
}

static int token_create(tr_cli *cli, int argc, char **argv)
{
    const char *scope = NULL;
    troupe_token_spec spec = {0};
    int64_t ttl = 0, expires = 0;
    uint64_t id = 0;
    char *token = NULL;
    troupe_error err;

    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--scope") == 0 && i + 1 < argc) {
            scope = argv[++i];
        } else if (strcmp(argv[i], "--node") == 0 && i + 1 < argc) {
            spec.node = argv[++i];
        } else if (strcmp(argv[i], "--max-nodes") == 0 && i + 1 < argc) {
            char *end;
            unsigned long n = strtoul(argv[++i], &end, 10);
            if (*end != '\0' || n == 0 || n > 1000000) {
                fprintf(stderr, "troupe: --max-nodes wants a number from 1 to 1000000\n");
                return 2;
            }
            spec.max_nodes = (uint32_t)n;
        } else if (strcmp(argv[i], "--ttl") == 0 && i + 1 < argc) {
            if ((ttl = parse_ttl(argv[++i])) < 0) {
                fprintf(stderr, "troupe: --ttl wants a duration such as 3600, 90m, 12h or 30d\n");
                return 2;
            }
        } else {
            scope = NULL; /* anything else: print the usage */
            break;
        }
    }
    if (scope == NULL ||
        (strcmp(scope, "user") != 0 && strcmp(scope, "node") != 0 && strcmp(scope, "admin") != 0) ||
        ((spec.node != NULL || spec.max_nodes != 0) && strcmp(scope, "node") != 0)) {
        fprintf(stderr,
                "usage: troupe token create --scope user|admin [--ttl DURATION]\n"
                "       troupe token create --scope node [--node NAME | --max-nodes N] [--ttl DURATION]\n");
        return 2;
    }
    spec.scope = scope;
    spec.ttl_s = (uint64_t)ttl;
    if (tr_cli_connect(cli) != 0) {
        return 1;
    }
    if (troupe_token_create_spec(cli->client, &spec, &token, &id, &expires, &err) != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        troupe_client_close(cli->client);
        return 1;
    }
    if (cli->json) {
        printf("{\"id\":%" PRIu64 ",\"scope\":\"%s\",\"expires_ms\":%" PRId64 ",\"token\":", id, scope, expires);
        tr_json_str(stdout, token);
        printf("}\n");
    } else {
        /* The credential alone on stdout, so `troupe token create ... > file`
         * makes a token file; what it is goes to stderr. */
        printf("%s\n", token);
        fprintf(stderr, "troupe: credential %" PRIu64 " (scope %s, %s); shown once, keep it in a 0600 file\n",
                id, scope, expires ? "expires" : "never expires");
    }
    memset(token, 0, strlen(token));
    troupe_free(token);
    troupe_client_close(cli->client);
    return 0;
}

static int token_revoke(tr_cli *cli, int argc, char **argv)
{
    char *end = NULL;
    uint64_t id = argc == 3 ? strtoull(argv[2], &end, 10) : 0;
    troupe_error err;
    int rv = 0;

    if (id == 0 || end == NULL || *end != '\0') {
        fprintf(stderr, "usage: troupe token revoke ID\n");
        return 2;
    }
    if (tr_cli_connect(cli) != 0) {
        return 1;
    }
    if (troupe_token_revoke(cli->client, id, &err) != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        rv = 1;
    } else if (cli->json) {
        printf("{\"id\":%" PRIu64 ",\"revoked\":true}\n", id);
    } else {
        printf("credential %" PRIu64 " revoked\n", id);
    }
    troupe_client_close(cli->client);
    return rv;
}

int tr_cli_cmd_token(tr_cli *cli, int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "create") == 0) {
        return token_create(cli, argc, argv);
    }
    if (argc >= 2 && strcmp(argv[1], "revoke") == 0) {
        return token_revoke(cli, argc, argv);
    }
    fprintf(stderr,
            "usage: troupe token create --scope user|admin|node [--node NAME|--max-nodes N] [--ttl DURATION]"
            " | troupe token revoke ID\n");
    return 2;
}
