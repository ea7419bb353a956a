/* troupe - the command-line client. Uses only the public libtroupe API and
 * stateless helpers from common/ (json.h).
 *
 * Grammar: troupe [GLOBAL OPTIONS] COMMAND [ARGS] [GLOBAL OPTIONS]. Global
 * options (commands.c: tr_cli_options) are taken out of argv wherever they
 * appear, up to a "--", as kubectl and `ray job` users type them
 * (`troupe jobs -o json`); what is left is the command and its own
 * arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "troupe/client.h"

/* match_opt returns the global option arg names (or NULL), and where its
 * value is: inline after '=' or the alias, or NULL when it is the next word. */
static const tr_cli_opt *match_opt(const char *a, const char **inline_value)
{
    *inline_value = NULL;
    for (const tr_cli_opt *o = tr_cli_options; o->name != NULL; o++) {
        size_t n = strlen(o->name);
        if (strcmp(a, o->name) == 0) {
            return o;
        }
        if (strncmp(a, o->name, n) == 0 && a[n] == '=') {
            *inline_value = a + n + 1;
            return o;
        }
        if (o->alias != NULL && strcmp(a, o->alias) == 0) {
            return o;
        }
        if (o->alias != NULL && strncmp(a, o->alias, strlen(o->alias)) == 0 && a[1] != '-') {
            *inline_value = a + strlen(o->alias); /* -ojson */
            return o;
        }
    }
    return NULL;
}

/* parse_args moves the global options out of argv into cli and leaves the
 * command and its arguments in rest/n_rest. *help is set by -h/--help. */
static int parse_args(int argc, char **argv, tr_cli *cli, char **rest, int *n_rest, int *help)
{
    int n = 0, literal = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *value;
        const tr_cli_opt *o;
        if (literal || a[0] != '-' || a[1] == '\0') { /* "-" is an argument */
            rest[n++] = argv[i];
        } else if (strcmp(a, "--") == 0) {
            literal = 1;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            *help = 1;
        } else if (strcmp(a, "--version") == 0) {
            printf("troupe %s\n", TROUPE_VERSION);
            exit(TR_EXIT_OK);
        } else if (n > 0 && strcmp(rest[0], "trace") == 0 && strcmp(a, "-o") == 0) {
            rest[n++] = argv[i]; /* troupe trace: -o names the file (cmd_trace.c) */
        } else if ((o = match_opt(a, &value)) != NULL) {
            if (value == NULL && i + 1 >= argc) {
                fprintf(stderr, "troupe: %s needs a value (%s %s)\n", a, o->name, o->arg);
                return TR_EXIT_USAGE;
            }
            int rv = o->set(cli, value != NULL ? value : argv[++i]);
            if (rv != 0) {
                return rv;
            }
        } else if (n == 0) {
            fprintf(stderr, "troupe: unknown option '%s' (see troupe --help)\n", a);
            return TR_EXIT_USAGE;
        } else {
            rest[n++] = argv[i]; /* the command's own option */
        }
    }
    *n_rest = n;
    return 0;
}

int main(int argc, char **argv)
{
    char **rest = calloc((size_t)argc + 1, sizeof(*rest));
    tr_cli cli = {0};
    int n = 0, help = 0, rv;

    if (rest == NULL) {
        fprintf(stderr, "troupe: out of memory\n");
        return TR_EXIT_FAILED;
    }
    rv = parse_args(argc, argv, &cli, rest, &n, &help);
    if (rv != 0) {
        goto out;
    }
    if (help) {
        rv = n == 0 ? (tr_cli_usage(stdout), TR_EXIT_OK) : tr_cli_cmd_usage(stdout, rest[0]);
        goto out;
    }
    if (n == 0) {
        tr_cli_usage(stderr);
        rv = TR_EXIT_USAGE;
        goto out;
    }
    rv = -1;
    for (const tr_cli_cmd *c = tr_cli_commands; c->name != NULL && rv < 0; c++) {
        if (strcmp(c->name, rest[0]) == 0) {
            rv = c->fn(&cli, n, rest);
        }
    }
    if (rv < 0) {
        fprintf(stderr, "troupe: unknown command '%s' (see troupe --help)\n", rest[0]);
        rv = TR_EXIT_USAGE;
    }
out:
    free(rest);
    return rv;
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
    case TROUPE_UNAVAILABLE:
        /* Only when the head could not be reached: an UNAVAILABLE the head
         * itself sent (a store that cannot write, say) comes from a running
         * head, and a TLS explanation already says what to change. */
        hint = strncmp(err->message, "cannot reach", 12) != 0 || strstr(err->message, "tls") ||
                       strstr(err->message, "TLS")
                   ? ""
                   : " (is troupe-head running? set --head or TROUPE_HEAD)";
        break;
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

const char *tr_cli_plural(uint64_t n)
{
    return n == 1 ? "" : "s";
}
