/* cli.h - shared by the troupe CLI's command files. */
#ifndef TR_CLI_H
#define TR_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/client.h"

typedef struct tr_cli {
    troupe_client_opts opts;
    int json;
    troupe_client *client;
} tr_cli;

typedef struct tr_cli_cmd {
    const char *name;
    int (*fn)(tr_cli *cli, int argc, char **argv); /* argv[0] is the command */
    const char *usage;
    const char *help;
} tr_cli_cmd;

extern const tr_cli_cmd tr_cli_commands[];

/* tr_cli_connect opens cli->client, printing the error on failure (returns 1). */
int tr_cli_connect(tr_cli *cli);

/* tr_cli_fail prints "troupe: CODE: message (hint)" to stderr. */
void tr_cli_fail(tr_cli *cli, const troupe_error *err);

/* tr_cli_time formats unix ms as local HH:MM:SS. */
void tr_cli_time(char *buf, size_t size, int64_t unix_ms);

int tr_cli_cmd_nodes(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_status(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_ping(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_submit(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_jobs(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_job(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_logs(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_stop(tr_cli *cli, int argc, char **argv);

#endif
