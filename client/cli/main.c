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

/* options_list: the global options' names and aliases, space-separated. */
static void options_list(char *buf, size_t size)
{
    size_t off = 0;
    buf[0] = '\0';
    for (const tr_cli_opt *o = tr_cli_options; o->name != NULL && off < size; o++) {
        off += (size_t)snprintf(buf + off, size - off, "%s%s%s%s", off ? " " : "", o->name, o->alias ? " " : "",
                                o->alias ? o->alias : "");
    }
}

/* unknown_option says a word is no option, with the nearest one in list. */
static int unknown_option(const char *cmd, const char *a, const char *list)
{
    char near[64];
    const char *s = tr_cli_suggest(a, list, near, sizeof(near));
    fprintf(stderr, "troupe%s%s: unknown option '%s'%s%s%s (see troupe %s%s--help)\n", cmd ? " " : "",
            cmd ? cmd : "", a, s ? "; did you mean '" : "", s ? s : "", s ? "'?" : "", cmd ? cmd : "", cmd ? " " : "");
    return TR_EXIT_USAGE;
}

/* parse_args moves the global options out of argv into cli and leaves the
 * command and its arguments in rest/n_rest; the first *n_plain of them came
 * before a "--" (after it, words starting with '-' are arguments). *help is
 * set by -h/--help. */
static int parse_args(int argc, char **argv, tr_cli *cli, char **rest, int *n_rest, int *n_plain, int *help)
{
    int n = 0, literal = 0;
    *n_plain = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *value;
        const tr_cli_opt *o;
        if (literal || a[0] != '-' || a[1] == '\0') { /* "-" is an argument */
            rest[n++] = argv[i];
        } else if (strcmp(a, "--") == 0) {
            literal = 1;
            *n_plain = n;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            *help = 1;
        } else if (strcmp(a, "--version") == 0) {
            printf("troupe %s\n", TROUPE_VERSION);
            exit(TR_EXIT_OK);
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
            char list[512];
            options_list(list, sizeof(list));
            return unknown_option(NULL, a, list);
        } else {
            rest[n++] = argv[i]; /* the command's own option */
        }
    }
    *n_rest = n;
    *n_plain = *n_plain < 0 ? n : *n_plain;
    return 0;
}

/* check_command checks what every command shares before it runs: -o names a
 * format it prints, and each long option before a "--" is one of its own (the
 * global ones are already taken out). A mistyped one gets a "did you mean". */
static int check_command(const tr_cli *cli, const tr_cli_cmd *c, char **rest, int n_plain)
{
    if (cli->format != NULL && !tr_cli_word_in(cli->format, tr_cli_cmd_formats(c))) {
        fprintf(stderr, "troupe %s: no output format '%s' here (it prints: %s)\n", c->name, cli->format,
                tr_cli_cmd_formats(c));
        return TR_EXIT_USAGE;
    }
    for (int i = 1; i < n_plain; i++) {
        if (strncmp(rest[i], "--", 2) == 0 && !tr_cli_word_in(rest[i], c->flags)) {
            char list[512];
            options_list(list, sizeof(list));
            snprintf(list + strlen(list), sizeof(list) - strlen(list), " %s", c->flags);
            return unknown_option(c->name, rest[i], list);
        }
    }
    return 0;
}

/* find_command: the command named name, or NULL after saying so (with the
 * nearest command's name). */
static const tr_cli_cmd *find_command(const char *name)
{
    char list[512], near[32];
    size_t off = 0;
    for (const tr_cli_cmd *c = tr_cli_commands; c->name != NULL; c++) {
        if (strcmp(c->name, name) == 0) {
            return c;
        }
        off += (size_t)snprintf(list + off, off < sizeof(list) ? sizeof(list) - off : 0, "%s%s", off ? " " : "",
                                c->name);
    }
    if (tr_cli_suggest(name, list, near, sizeof(near)) != NULL) {
        fprintf(stderr, "troupe: unknown command '%s'; did you mean '%s'? (see troupe --help)\n", name, near);
    } else {
        fprintf(stderr, "troupe: unknown command '%s' (see troupe --help)\n", name);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    char **rest = calloc((size_t)argc + 1, sizeof(*rest));
    tr_cli cli = {0};
    const tr_cli_cmd *cmd;
    int n = 0, n_plain = 0, help = 0, rv;

    if (rest == NULL) {
        fprintf(stderr, "troupe: out of memory\n");
        return TR_EXIT_FAILED;
    }
    rv = parse_args(argc, argv, &cli, rest, &n, &n_plain, &help);
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
    if ((cmd = find_command(rest[0])) == NULL) {
        rv = TR_EXIT_USAGE;
        goto out;
    }
    if ((rv = check_command(&cli, cmd, rest, n_plain)) != 0) {
        goto out;
    }
    /* troupe trace writes its file itself (no empty file when there is no
     * trace); every other command's stdout goes to the file. */
    if (cli.output_file != NULL && strcmp(cmd->name, "trace") != 0 &&
        freopen(cli.output_file, "w", stdout) == NULL) {
        fprintf(stderr, "troupe: cannot write %s: %m\n", cli.output_file);
        rv = TR_EXIT_FAILED;
        goto out;
    }
    rv = cmd->fn(&cli, n, rest);
    if (cli.output_file != NULL && fflush(stdout) != 0) {
        fprintf(stderr, "troupe: writing %s failed: %m\n", cli.output_file);
        rv = TR_EXIT_FAILED;
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
