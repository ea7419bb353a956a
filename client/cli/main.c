/* troupe - the command-line client. Uses only the public libtroupe API and
 * stateless helpers from common/ (json.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "troupe/client.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: troupe [--head URL] [--token T] [-o table|json] [--timeout MS] COMMAND [ARGS]\n"
                 "\n"
                 "Commands:\n");
    for (const tr_cli_cmd *c = tr_cli_commands; c->name != NULL; c++) {
        fprintf(out, "  %-36s %s\n", c->usage, c->help);
    }
    fprintf(out,
            "\n"
            "Options:\n"
            "  --head URL      troupe-head address [$TROUPE_HEAD, else %s]\n"
            "  --token T       auth token [$TROUPE_TOKEN]\n"
            "  -o, --output F  table (default) or json\n"
            "  --timeout MS    deadline for each call [10000]\n"
            "  -h, --help      this text; --version\n"
            "\n"
            "Exit status: 0 on success, 1 when the command failed, 2 on bad usage.\n",
            TROUPE_DEFAULT_HEAD);
}

static int parse_global(int argc, char **argv, tr_cli *cli, int *first_cmd)
{
    int i;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = (i + 1 < argc) ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--version") == 0) {
            printf("troupe %s\n", TROUPE_VERSION);
            exit(0);
        } else if ((strcmp(a, "--head") == 0 || strcmp(a, "--token") == 0 || strcmp(a, "-o") == 0 ||
                    strcmp(a, "--output") == 0 || strcmp(a, "--timeout") == 0) &&
                   next == NULL) {
            fprintf(stderr, "troupe: %s needs a value\n", a);
            return 2;
        } else if (strcmp(a, "--head") == 0) {
            cli->opts.head_url = argv[++i];
        } else if (strcmp(a, "--token") == 0) {
            cli->opts.token = argv[++i];
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            const char *f = argv[++i];
            if (strcmp(f, "json") != 0 && strcmp(f, "table") != 0) {
                fprintf(stderr, "troupe: unknown output format '%s' (use table or json)\n", f);
                return 2;
            }
            cli->json = strcmp(f, "json") == 0;
        } else if (strcmp(a, "--timeout") == 0) {
            char *end;
            long t = strtol(argv[++i], &end, 10);
            if (*end != '\0' || t <= 0 || t > 86400000L) {
                fprintf(stderr, "troupe: --timeout wants milliseconds between 1 and 86400000\n");
                return 2;
            }
            cli->opts.timeout_ms = (uint32_t)t;
        } else if (a[0] == '-') {
            fprintf(stderr, "troupe: unknown option '%s' (see troupe --help)\n", a);
            return 2;
        } else {
            break;
        }
    }
    *first_cmd = i;
    return 0;
}

int main(int argc, char **argv)
{
    tr_cli cli = {0};
    int first = 0, rv;

    if ((rv = parse_global(argc, argv, &cli, &first)) != 0) {
        return rv;
    }
    if (first >= argc) {
        usage(stderr);
        return 2;
    }
    for (const tr_cli_cmd *c = tr_cli_commands; c->name != NULL; c++) {
        if (strcmp(c->name, argv[first]) == 0) {
            return c->fn(&cli, argc - first, argv + first);
        }
    }
    fprintf(stderr, "troupe: unknown command '%s' (see troupe --help)\n", argv[first]);
    return 2;
}

int tr_cli_connect(tr_cli *cli)
{
    troupe_error err;
    if (troupe_client_open(&cli->client, &cli->opts, &err) != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        return 1;
    }
    return 0;
}

void tr_cli_fail(tr_cli *cli, const troupe_error *err)
{
    const char *hint = "";
    switch (err->code) {
    case TROUPE_UNAVAILABLE: hint = " (is troupe-head running? set --head or TROUPE_HEAD)"; break;
    case TROUPE_UNAUTHENTICATED: hint = ""; break;
    case TROUPE_DEADLINE_EXCEEDED: hint = " (raise --timeout if the head is busy)"; break;
    default: break;
    }
    (void)cli;
    fprintf(stderr, "troupe: %s: %s%s\n", troupe_strerror(err->code), err->message, hint);
}

void tr_cli_time(char *buf, size_t size, int64_t unix_ms)
{
    time_t t = (time_t)(unix_ms / 1000);
    struct tm tm;
    if (unix_ms <= 0) {
        snprintf(buf, size, "-");
        return;
    }
    localtime_r(&t, &tm);
    strftime(buf, size, "%H:%M:%S", &tm);
}
