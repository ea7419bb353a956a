/* commands.c - the troupe CLI's grammar in two tables: the global options
 * (accepted before or after the command) and the commands. Dispatch,
 * `troupe --help`, `troupe help CMD` and the generated bash completion all
 * read these tables, so a command or option added here appears everywhere.
 *
 * To add a command: write its tr_cli_cmd_* function in a cmd_*.c file,
 * declare it in cli.h and add one line to tr_cli_commands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Every output format some command prints. */
#define TR_CLI_FORMATS "table json wide csv"

const tr_cli_cmd tr_cli_commands[] = {
    {"nodes", tr_cli_cmd_nodes, "nodes [--alive]",
     "list nodes with their GPUs, CPU slots (free/total, for CPU-only workers), state and age (-o wide: "
     "hostname, address, pid, labels)",
     "--alive", NULL, "table json wide"},
    {"status", tr_cli_cmd_status, "status", "cluster totals: nodes and jobs by state, GPUs and CPU slots total/free", "",
     NULL, NULL},
    {"ping", tr_cli_cmd_ping, "ping [-n COUNT]", "round-trip to the head and print the latency", "-n", NULL, NULL},
    {"submit", tr_cli_cmd_submit, "submit JOB.yaml [--no-wait] [--raw|--live]",
     "submit a job, print its id, follow it until it ends (exit 0 on SUCCEEDED); on a terminal a live line "
     "per group (workers running, step, loss, tokens/s, slowest rank), --raw: the workers' output instead",
     "--no-wait --raw --live", "@files", NULL},
    {"submit", tr_cli_cmd_submit, "submit A.yaml B.yaml... [--no-wait]",
     "submit several jobs in one call (all files checked first), print their ids, wait for all to end",
     "--no-wait", "@files", NULL},
    {"jobs", tr_cli_cmd_jobs,
     "jobs [--active] [--state S[,S]] [--name GLOB] [--limit N] [--cursor C] [--oldest-first] [--all]",
     "list jobs, newest first, 100 a page, with TIME (how long it has run, or ran) and AGE (since "
     "submitted) (--cursor goes on where a page ended; --all: every job; "
     "-o wide: when it was submitted, started and ended, how long it queued)",
     "--active --state --name --limit --cursor --oldest-first --all", NULL, "table json wide"},
    {"job", tr_cli_cmd_job, "job ID", "one job: state, reason, groups (an elastic group's members and membership history), per-worker placement and exit codes",
     "", "@jobs", NULL},
    {"logs", tr_cli_cmd_logs, "logs ID [-f [--raw|--live]] [--worker NAME]",
     "print a job's logs; -f follows until it ends (on a terminal the live view of submit; --raw the output)",
     "-f --follow --worker --raw --live", "@jobs", NULL},
    {"stop", tr_cli_cmd_stop, "stop ID [ID ...] [--no-wait]",
     "stop jobs (several in one call) and wait until none of their workers runs", "--no-wait", "@jobs", NULL},
    {"profile", tr_cli_cmd_profile, "profile ID (--steps A:B | --next N [--align K] | --off) [--workers GLOBS]",
     "profile steps of a running job's matching workers (cudaProfilerStart/Stop, NVTX)",
     "--steps --next --align --off --workers", "@jobs", NULL},
    {"trace", tr_cli_cmd_trace, "trace ID [--output FILE]",
     "the job's built-in trace of its profiled steps as Chrome/Perfetto JSON (to stdout, or --output FILE)", "",
     "@jobs", "json"},
    {"metrics", tr_cli_cmd_metrics, "metrics ID [-f] [--worker W[,W]] [--name N[,N]] [--last N]",
     "the scalars a job's workers reported (troupe_worker_metric), with drops per worker; -o csv too",
     "-f --follow --worker --name --last", "@jobs", "table json csv"},
    {"delete", tr_cli_cmd_delete, "delete ID [ID ...]",
     "delete finished jobs with their events and logs (an active job: stop it first)", "", "@jobs", NULL},
    {"drain", tr_cli_cmd_drain, "drain NODE [--no-wait] [--max-wait S]",
     "no new placements on NODE; wait (default up to 3600 s) until its jobs have ended", "--no-wait --max-wait",
     "@nodes", NULL},
    {"undrain", tr_cli_cmd_undrain, "undrain NODE", "let a drained node take new work again", "", "@nodes", NULL},
    {"help", tr_cli_cmd_help, "help [COMMAND]", "this text, or one command's usage", "", "@commands", "table"},
    {"completion", tr_cli_cmd_completion, "completion bash",
     "print the bash completion script: source <(troupe completion bash)", "", "bash", "table"},
    {"token", tr_cli_cmd_token,
     "token create --scope user|admin|node [--node NAME|--max-nodes N] [--ttl D] | token revoke ID",
     "mint a credential (admin; printed once) or make one stop working; a user stops and deletes only its "
     "own jobs, a node credential registers one node (or --max-nodes)",
     "--scope --ttl --node --max-nodes", "create revoke", NULL},
    {NULL, NULL, NULL, NULL, NULL, NULL, NULL},
};

const char *tr_cli_cmd_formats(const tr_cli_cmd *c)
{
    return c->formats != NULL ? c->formats : "table json";
}

static int set_head(tr_cli *cli, const char *v)
{
    cli->opts.head_url = v;
    return 0;
}

static int set_token(tr_cli *cli, const char *v)
{
    cli->opts.token = v;
    fprintf(stderr, "troupe: warning: --token is visible to other users in ps; use --token-file or TROUPE_TOKEN\n");
    return 0;
}

static int set_token_file(tr_cli *cli, const char *v)
{
    cli->opts.token_file = v;
    return 0;
}

static int set_tls_ca(tr_cli *cli, const char *v)
{
    cli->opts.tls_ca = v;
    return 0;
}

static int set_tls_cert(tr_cli *cli, const char *v)
{
    cli->opts.tls_cert = v;
    return 0;
}

static int set_tls_key(tr_cli *cli, const char *v)
{
    cli->opts.tls_key = v;
    return 0;
}

static int set_tls_server_name(tr_cli *cli, const char *v)
{
    cli->opts.tls_server_name = v;
    return 0;
}

/* -o is the output format on every command; which formats a command has is
 * checked once the command is known (main.c), so `troupe jobs -o csv` is an
 * error that names the ones it has. */
static int set_format(tr_cli *cli, const char *v)
{
    char near[16], hint[48] = "";
    if (!tr_cli_word_in(v, TR_CLI_FORMATS)) {
        if (tr_cli_suggest(v, TR_CLI_FORMATS, near, sizeof(near)) != NULL) {
            snprintf(hint, sizeof(hint), "; did you mean '%s'?", near);
        }
        fprintf(stderr, "troupe: unknown output format '%s'%s (-o takes %s; --output FILE writes a file)\n", v, hint,
                TR_CLI_FORMATS);
        return TR_EXIT_USAGE;
    }
    cli->format = v;
    cli->json = strcmp(v, "json") == 0;
    cli->csv = strcmp(v, "csv") == 0;
    cli->wide = strcmp(v, "wide") == 0;
    return 0;
}

/* --output names a file, never a format: a value that is a format name is
 * refused, since it is almost always `-o FORMAT` typed the kubectl way. */
static int set_output_file(tr_cli *cli, const char *v)
{
    if (tr_cli_word_in(v, TR_CLI_FORMATS)) {
        fprintf(stderr,
                "troupe: --output %s would write a file named '%s': --output FILE names a file; the output format "
                "is -o %s (a file of that name: --output ./%s)\n",
                v, v, v, v);
        return TR_EXIT_USAGE;
    }
    cli->output_file = v;
    return 0;
}

static int set_timeout(tr_cli *cli, const char *v)
{
    char *end;
    long t = strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || t <= 0 || t > 86400000L) {
        fprintf(stderr, "troupe: --timeout wants milliseconds between 1 and 86400000\n");
        return TR_EXIT_USAGE;
    }
    cli->opts.timeout_ms = (uint32_t)t;
    return 0;
}

const tr_cli_opt tr_cli_options[] = {
    {"--head", NULL, "URL", "troupe-head address [$TROUPE_HEAD, else " TROUPE_DEFAULT_HEAD "]", set_head},
    {"--token-file", NULL, "F",
     "file holding the credential [$TROUPE_TOKEN, else $TROUPE_TOKEN_FILE, else $TROUPE_CREDENTIALS]",
     set_token_file},
    {"--token", NULL, "T", "the credential itself (visible in ps: prefer --token-file)", set_token},
    {"--tls-ca", NULL, "F", "CA that signed the head's certificate, for tls+tcp:// [$TROUPE_TLS_CA]", set_tls_ca},
    {"--tls-cert", NULL, "F", "client certificate, where the head asks for one [$TROUPE_TLS_CERT]", set_tls_cert},
    {"--tls-key", NULL, "F", "its private key [$TROUPE_TLS_KEY]", set_tls_key},
    {"--tls-server-name", NULL, "N", "name the head's certificate must carry [host of --head]", set_tls_server_name},
    {"--format", "-o", "FORMAT", "table (default), json; wide (jobs, nodes), csv (metrics)", set_format},
    {"--output", NULL, "FILE", "write what the command prints to FILE instead of stdout", set_output_file},
    {"--timeout", NULL, "MS", "deadline for each call [10000]", set_timeout},
    {NULL, NULL, NULL, NULL, NULL},
};
