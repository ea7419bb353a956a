/* cli.h - shared by the troupe CLI's command files. */
#ifndef TR_CLI_H
#define TR_CLI_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "troupe/client.h"

/* Exit status of every command (documented in `troupe --help` and README). */
enum {
    TR_EXIT_OK = 0,        /* the command (and the job it waited for) succeeded */
    TR_EXIT_FAILED = 1,    /* the call or the job failed; a one-line reason on stderr */
    TR_EXIT_USAGE = 2,     /* bad usage: unknown command, option or argument */
    TR_EXIT_DETACHED = 130 /* Ctrl-C while following: detached, the job keeps going */
};

typedef struct tr_cli {
    troupe_client_opts opts;
    int json;
    int csv;                 /* -o csv (troupe metrics) */
    int wide;                /* -o wide: the table with more columns (jobs, nodes) */
    const char *format;      /* -o as given, NULL for the default (table) */
    const char *output_file; /* --output FILE: stdout goes there (troupe trace: the trace) */
    troupe_client *client;
} tr_cli;

typedef struct tr_cli_cmd {
    const char *name;
    int (*fn)(tr_cli *cli, int argc, char **argv); /* argv[0] is the command */
    const char *usage;                             /* after "troupe " */
    const char *help;                              /* one line */
    const char *flags;                             /* the command's own flags, space-separated (completion) */
    const char *complete; /* its arguments: "@files", "@jobs", "@nodes", "@commands", words, or NULL */
    const char *formats;  /* the -o formats it prints, space-separated; NULL: "table json" */
} tr_cli_cmd;

/* A global option: accepted before or after the command, as --name V,
 * --name=V, or (with a short alias) -o V / -oV. */
typedef struct tr_cli_opt {
    const char *name;
    const char *alias; /* or NULL */
    const char *arg;   /* the value's name in --help */
    const char *help;
    int (*set)(tr_cli *cli, const char *value); /* 0, or TR_EXIT_USAGE after saying why */
} tr_cli_opt;

extern const tr_cli_cmd tr_cli_commands[];
extern const tr_cli_opt tr_cli_options[];

/* tr_cli_cmd_formats: the -o formats command c prints ("table json" when
 * its table leaves formats NULL). */
const char *tr_cli_cmd_formats(const tr_cli_cmd *c);

/* tr_cli_word_in: 1 when word is one of the space-separated words of list. */
int tr_cli_word_in(const char *word, const char *list);

/* tr_cli_suggest returns the word of the space-separated list closest to
 * word (edit distance at most 2, or a prefix), copied into buf, else NULL:
 * the "did you mean" of a mistyped command or option. */
const char *tr_cli_suggest(const char *word, const char *list, char *buf, size_t size);

/* tr_cli_age formats the time since unix_ms the way kubectl's AGE column
 * does: 45s, 12m, 3h, 2d ("-" when unknown). */
void tr_cli_age(char *buf, size_t size, int64_t unix_ms, int64_t now_ms);

/* tr_cli_connect opens cli->client, printing the error on failure (returns 1). */
int tr_cli_connect(tr_cli *cli);

/* tr_cli_fail prints "troupe: CODE: message (hint)" to stderr. */
void tr_cli_fail(tr_cli *cli, const troupe_error *err);

/* tr_cli_time formats unix ms as local HH:MM:SS. */
void tr_cli_time(char *buf, size_t size, int64_t unix_ms);

/* tr_cli_plural returns "" for 1 and "s" otherwise ("1 worker", "2 workers"). */
const char *tr_cli_plural(uint64_t n);

/* tr_cli_usage prints the whole --help text; tr_cli_cmd_usage one command's. */
void tr_cli_usage(FILE *out);
int tr_cli_cmd_usage(FILE *out, const char *name);

/* Small helpers shared by the command files (cmd_jobs.c). */
int64_t tr_cli_now_ms(void);                  /* wall clock, unix ms */
double tr_cli_secs(int64_t from, int64_t to); /* seconds between two unix ms, 0 when unknown */
void tr_cli_job_json(FILE *out, const troupe_job *j);
/* tr_cli_job_end_ms: when the job's run ended for the time it "ran": the
 * later of its end and its last worker's (a stopped job's workers run on
 * through the stop's grace period); now while it or a worker still runs,
 * then *stopping is set when the job has ended but a worker has not. */
int64_t tr_cli_job_end_ms(const troupe_job *j, int64_t now, int *stopping);
void tr_cli_gpus_str(const troupe_worker *w, char *buf, size_t size); /* "0,1,2" */
/* tr_cli_run_secs: how long the job has been running, or ran (until its
 * last worker was gone, as tr_cli_job_end_ms); -1 when it never started. */
double tr_cli_run_secs(const troupe_job *j, int64_t now);
/* tr_cli_duration: "12.3s", "5m03s", "3h05m", "2d03h"; "-" for secs < 0. */
void tr_cli_duration(char *buf, size_t size, double secs);

/* Following a job (follow.c). Ctrl-C sets tr_cli_interrupted once
 * tr_cli_catch_sigint ran; following commands then detach (TR_EXIT_DETACHED). */
extern volatile sig_atomic_t tr_cli_interrupted;
void tr_cli_catch_sigint(void);
int tr_cli_terminal(int state); /* SUCCEEDED, FAILED or STOPPED */
/* tr_cli_gave_up handles a lost head while waiting: says so once, retries for
 * 60 s, then says `what` may still be running and returns TR_EXIT_FAILED. */
int tr_cli_gave_up(int64_t *lost_since, const troupe_error *err, const char *what);
/* What following shows: AUTO is the live status per group when stdout and
 * stderr are terminals (not with -o json or --worker), else the raw output. */
typedef enum { TR_FOLLOW_AUTO, TR_FOLLOW_RAW, TR_FOLLOW_LIVE } tr_follow_view;
/* tr_cli_follow follows job id until it ended and its output is drained;
 * worker: only that worker's output (NULL: all). Returns an exit status. */
int tr_cli_follow(tr_cli *cli, uint64_t id, const char *worker, tr_follow_view view);
/* tr_cli_follow_flag: 1 when arg is --raw or --live (setting *view). */
int tr_cli_follow_flag(const char *arg, tr_follow_view *view);

int tr_cli_cmd_nodes(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_status(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_ping(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_submit(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_jobs(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_job(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_logs(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_stop(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_delete(tr_cli *cli, int argc, char **argv); /* cmd_history.c */
/* tr_cli_list_args parses `troupe jobs` flags into o (and --all). */
int tr_cli_list_args(int argc, char **argv, troupe_list_opts *o, int *all);
int tr_cli_cmd_help(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_completion(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_profile(tr_cli *cli, int argc, char **argv);
int tr_cli_cmd_trace(tr_cli *cli, int argc, char **argv); /* cmd_trace.c */
int tr_cli_cmd_metrics(tr_cli *cli, int argc, char **argv); /* cmd_metrics.c */

/* The worker-runtime parts of `troupe job` (cmd_profile.c). */
void tr_cli_runtime_json(FILE *out, const troupe_job *j);
void tr_cli_runtime_table(const troupe_job *j);
/* health.c: the head's judgement of a job's health. tr_cli_health_state is
 * the job's state, or STALLED for a stalled RUNNING job; _reason the listing's
 * REASON (the stalled ranks, stragglers, memory warnings, else the job's
 * reason). */
void tr_cli_health_json(FILE *out, const troupe_job *j);
void tr_cli_health_table(const troupe_job *j);
const char *tr_cli_health_state(const troupe_job *j);
void tr_cli_health_reason(const troupe_job *j, char *buf, size_t size);
int tr_cli_cmd_token(tr_cli *cli, int argc, char **argv); /* cmd_token.c */
int tr_cli_cmd_drain(tr_cli *cli, int argc, char **argv);   /* cmd_drain.c */
int tr_cli_cmd_undrain(tr_cli *cli, int argc, char **argv);

#endif
