/* cmd_metrics.c - `troupe metrics JOB`: the scalars a job's workers reported
 * (troupe_worker_metric), as a table, JSON or CSV; -f follows new points
 * until the job ends. Drops per worker are always shown: the head knows them
 * exactly from the workers' sequence numbers. */
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "json.h"

#define MAX_LIST 64
/* -f holds one long poll open at a time (GetMetrics' wait_ms): the head
 * answers it as soon as a point is stored, so a point is printed within
 * milliseconds of reaching the head, with no polling floor; the wait also
 * bounds how late the end of the job or ^C is noticed. */
#define FOLLOW_WAIT_MS 1000

typedef struct margs {
    uint64_t id;
    int follow;
    uint32_t last;
    const char *workers[MAX_LIST], *names[MAX_LIST];
    size_t n_workers, n_names;
    int matched[MAX_LIST]; /* names[i] matched a point */
    char *lists; /* owns the split --worker/--name strings */
} margs;

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static const char metrics_usage[] = "usage: troupe metrics JOB [-f] [--worker W[,W]] [--name N[,N]] [--last N] "
                                    "[-o table|json|csv]\n";

/* split appends the comma-separated words of v to list. */
static int split(char *v, const char **list, size_t *n)
{
    for (char *save = NULL, *t = strtok_r(v, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_LIST) {
            fprintf(stderr, "troupe metrics: at most %d workers or names\n", MAX_LIST);
            return -1;
        }
        list[(*n)++] = t;
    }
    return 0;
}

static int parse_args(int argc, char **argv, margs *a)
{
    int have_id = 0;
    char *end = NULL;
    size_t total = 0, off = 0;

    for (int i = 1; i < argc; i++) {
        total += strlen(argv[i]) + 1;
    }
    if ((a->lists = malloc(total + 1)) == NULL) {
        return -1;
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "-f") == 0 || strcmp(arg, "--follow") == 0) {
            a->follow = 1;
        } else if ((strcmp(arg, "--worker") == 0 || strcmp(arg, "--name") == 0) && v != NULL) {
            char *copy = strcpy(a->lists + off, v);
            off += strlen(v) + 1;
            if (split(copy, arg[2] == 'w' ? a->workers : a->names, arg[2] == 'w' ? &a->n_workers : &a->n_names)) {
                return -1;
            }
            i++;
        } else if (strcmp(arg, "--last") == 0 && v != NULL) {
            unsigned long n = strtoul(v, &end, 10);
            if (v[0] == '\0' || *end != '\0' || n == 0 || n > 1000000) {
                fprintf(stderr, "troupe metrics: --last takes a number from 1 to 1000000, not '%s'\n", v);
                return -1;
            }
            a->last = (uint32_t)n;
            i++;
        } else if (arg[0] != '-' && !have_id) {
            a->id = strtoull(arg, &end, 10);
            if (arg[0] == '\0' || *end != '\0') {
                fprintf(stderr, "troupe metrics: '%s' is not a job id\n", arg);
                return -1;
            }
            have_id = 1;
        } else {
            fprintf(stderr, "troupe metrics: unexpected '%s'\n%s", arg, metrics_usage);
            return -1;
        }
    }
    if (!have_id) {
        fputs(metrics_usage, stderr);
        return -1;
    }
    return 0;
}

/* ---- output ------------------------------------------------------------------- */

/* value_text: %.17g, with NaN and infinities spelt as Prometheus does. */
static const char *value_text(double v, char *buf, size_t size)
{
    if (isnan(v)) {
        return "NaN";
    }
    if (isinf(v)) {
        return v > 0 ? "+Inf" : "-Inf";
    }
    snprintf(buf, size, "%.17g", v);
    return buf;
}

static void point_json(const troupe_metric_point *p)
{
    char buf[64];
    printf("{\"id\":%" PRIu64 ",\"worker\":", p->id);
    tr_json_str(stdout, p->worker);
    printf(",\"attempt\":%u,\"seq\":%" PRIu64 ",\"step\":%" PRIu64 ",\"name\":", p->attempt, p->seq, p->step);
    tr_json_str(stdout, p->name);
    /* JSON has no NaN or infinity: those are strings, finite values numbers */
    if (isfinite(p->value)) {
        printf(",\"value\":%s", value_text(p->value, buf, sizeof(buf)));
    } else {
        printf(",\"value\":\"%s\"", value_text(p->value, buf, sizeof(buf)));
    }
    printf(",\"ts_ms\":%lld}", (long long)p->ts_ms);
}

static void point_row(int csv, const troupe_metric_point *p)
{
    char buf[64], when[32];
    if (csv) {
        printf("%" PRIu64 ",%s,%u,%" PRIu64 ",%" PRIu64 ",%s,%s,%lld\n", p->id, p->worker, p->attempt, p->seq, p->step,
               p->name, value_text(p->value, buf, sizeof(buf)), (long long)p->ts_ms);
        return;
    }
    tr_cli_time(when, sizeof(when), p->ts_ms);
    printf("%-24s %7u %8" PRIu64 "  %-16s %-24s %s\n", p->worker, p->attempt, p->step, p->name,
           value_text(p->value, buf, sizeof(buf)), when);
}

static void streams_json(const troupe_metrics_page *pg)
{
    printf("\"streams\":[");
    for (size_t i = 0; i < pg->n_streams; i++) {
        const troupe_metric_stream *s = &pg->streams[i];
        printf("%s{\"worker\":", i ? "," : "");
        tr_json_str(stdout, s->worker);
        printf(",\"attempt\":%u,\"stored\":%" PRIu64 ",\"dropped\":%" PRIu64 ",\"last_seq\":%" PRIu64
               ",\"reported\":%" PRIu64 ",\"worker_dropped\":%" PRIu64 "}",
               s->attempt, s->stored, s->dropped, s->last_seq, s->reported, s->worker_dropped);
    }
    printf("],\"kept\":%" PRIu64 ",\"trimmed\":%" PRIu64, pg->kept, pg->trimmed);
}

/* streams_table: one line per worker attempt on stderr (so stdout stays the
 * points: a table or CSV a script can read). */
static void streams_table(const troupe_metrics_page *pg)
{
    for (size_t i = 0; i < pg->n_streams; i++) {
        const troupe_metric_stream *s = &pg->streams[i];
        fprintf(stderr, "troupe: %s attempt %u: %" PRIu64 " point%s stored, %" PRIu64 " dropped by the worker%s\n",
                s->worker, s->attempt, s->stored, tr_cli_plural(s->stored), s->dropped,
                s->dropped ? " (its buffer was full while the head was slow or away)" : "");
    }
    if (pg->trimmed > 0) {
        fprintf(stderr, "troupe: %" PRIu64 " older point%s removed by the head's retention (metrics_keep)\n",
                pg->trimmed, tr_cli_plural(pg->trimmed));
    }
}

/* note_point marks the --name the point matched. */
static void note_point(margs *a, const troupe_metric_point *p)
{
    for (size_t k = 0; k < a->n_names; k++) {
        a->matched[k] |= strcmp(a->names[k], p->name) == 0;
    }
}

/* job_names lists the metric names among the job's newest points (one
 * page), space-separated, for the message about a name that matched none. */
static void job_names(tr_cli *cli, const margs *a, char *buf, size_t size)
{
    troupe_metrics_query q = {a->workers, a->n_workers, NULL, 0, 0, 20000, 20000, 0};
    troupe_metrics_page *pg = NULL;
    troupe_error err;
    size_t off = 0;

    buf[0] = '\0';
    if (troupe_get_metrics(cli->client, a->id, &q, &pg, &err) != TROUPE_OK) {
        return;
    }
    for (size_t i = 0; i < pg->n_points && off + 1 < size; i++) {
        if (!tr_cli_word_in(pg->points[i].name, buf)) {
            off += (size_t)snprintf(buf + off, size - off, "%s%s", off ? " " : "", pg->points[i].name);
        }
    }
    troupe_metrics_page_free(pg);
}

/* unmatched_names says which --name matched no point, with the job's names
 * and the nearest one; TR_EXIT_FAILED when none of them matched anything (a
 * name that is not there is an error, as for an unknown worker), else a
 * warning and TR_EXIT_OK. */
static int unmatched_names(tr_cli *cli, const margs *a)
{
    char names[2048], near[128], hint[200];
    size_t missing = 0;

    for (size_t k = 0; k < a->n_names; k++) {
        missing += !a->matched[k];
    }
    if (missing == 0) {
        return TR_EXIT_OK;
    }
    job_names(cli, a, names, sizeof(names));
    for (size_t k = 0; k < a->n_names; k++) {
        if (a->matched[k]) {
            continue;
        }
        hint[0] = '\0';
        if (tr_cli_suggest(a->names[k], names, near, sizeof(near)) != NULL) {
            snprintf(hint, sizeof(hint), "; did you mean '%s'?", near);
        }
        fprintf(stderr, "troupe metrics: %s: job %" PRIu64 " has no metric named '%s'%s (its names: %s)\n",
                missing == a->n_names ? "error" : "warning", a->id, a->names[k], hint,
                names[0] ? names : "none yet");
    }
    return missing == a->n_names ? TR_EXIT_FAILED : TR_EXIT_OK;
}

/* ---- reading --------------------------------------------------------------------- */

static int fetch(tr_cli *cli, const margs *a, uint64_t after, uint32_t last, uint32_t wait_ms,
                 troupe_metrics_page **pg)
{
    troupe_metrics_query q = {a->workers, a->n_workers, a->names, a->n_names, after, last, 0, wait_ms};
    troupe_error err;

    if (troupe_get_metrics(cli->client, a->id, &q, pg, &err) != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        return -1;
    }
    return 0;
}

static int job_ended(tr_cli *cli, uint64_t id)
{
    troupe_job *j = NULL;
    troupe_error err;
    int ended;

    if (troupe_get_job(cli->client, id, &j, &err) != TROUPE_OK) {
        return 0; /* asked again on the next round */
    }
    ended = j->state == TROUPE_JOB_SUCCEEDED || j->state == TROUPE_JOB_FAILED || j->state == TROUPE_JOB_STOPPED;
    troupe_job_free(j);
    return ended;
}

/* dump prints every page (or the --last tail) once; *pg_out keeps the last
 * page for the stream summary, *next where following goes on. */
static int dump(tr_cli *cli, margs *a, int csv, troupe_metrics_page **pg_out, uint64_t *next)
{
    troupe_metrics_page *pg = NULL;
    uint64_t after = 0;
    size_t printed = 0;

    for (;;) {
        if (fetch(cli, a, after, after == 0 ? a->last : 0, 0, &pg) != 0) {
            return -1;
        }
        for (size_t i = 0; i < pg->n_points; i++, printed++) {
            note_point(a, &pg->points[i]);
            if (cli->json && a->follow) { /* JSON lines while following */
                point_json(&pg->points[i]);
                putchar('\n');
            } else if (cli->json) {
                fputs(printed ? ",\n" : "", stdout);
                point_json(&pg->points[i]);
            } else {
                point_row(csv, &pg->points[i]);
            }
        }
        after = pg->next_id;
        if (!pg->more) {
            break;
        }
        troupe_metrics_page_free(pg);
    }
    *pg_out = pg;
    *next = after;
    return 0;
}

int tr_cli_cmd_metrics(tr_cli *cli, int argc, char **argv)
{
    margs a = {0};
    troupe_metrics_page *pg = NULL;
    uint64_t next = 0;
    int csv = cli->csv, rv = TR_EXIT_FAILED, ended = 0;

    if (parse_args(argc, argv, &a) != 0) {
        free(a.lists);
        return TR_EXIT_USAGE;
    }
    if (tr_cli_connect(cli) != 0) {
        free(a.lists);
        return TR_EXIT_FAILED;
    }
    if (cli->json && !a.follow) {
        printf("{\"job_id\":%" PRIu64 ",\"points\":[", a.id);
    } else if (csv) {
        printf("id,worker,attempt,seq,step,name,value,ts_ms\n");
    } else if (!cli->json) {
        printf("%-24s %7s %8s  %-16s %-24s %s\n", "WORKER", "ATTEMPT", "STEP", "NAME", "VALUE", "TIME");
    }
    if (a.follow) {
        signal(SIGINT, on_sigint);
    }
    if (dump(cli, &a, csv, &pg, &next) != 0) {
        goto out;
    }
    if (a.follow && pg->n_points == 0 && next == 0 && !job_ended(cli, a.id)) {
        /* nothing yet from a running job: say now when it has other names (a
         * typo), not only when it ends (an ended job gets the error below) */
        char names[2048];
        job_names(cli, &a, names, sizeof(names));
        for (size_t k = 0; k < a.n_names && names[0] != '\0'; k++) {
            fprintf(stderr, "troupe metrics: warning: job %" PRIu64 " has no metric named '%s' so far (its names: %s)\n",
                    a.id, a.names[k], names);
        }
    }
    while (a.follow && !interrupted && !ended) {
        ended = job_ended(cli, a.id); /* read once more after it ended (no wait): the workers' last flush */
        for (int more = 1, wait = !ended; more && !interrupted; wait = 0) {
            troupe_metrics_page_free(pg);
            if (fetch(cli, &a, next, 0, wait ? FOLLOW_WAIT_MS : 0, &pg) != 0) {
                goto out;
            }
            for (size_t i = 0; i < pg->n_points; i++) {
                note_point(&a, &pg->points[i]);
                if (cli->json) {
                    point_json(&pg->points[i]);
                    putchar('\n');
                } else {
                    point_row(csv, &pg->points[i]);
                }
            }
            fflush(stdout);
            next = pg->next_id;
            more = pg->more;
        }
    }
    if (cli->json && !a.follow) {
        printf("],");
        streams_json(pg);
        printf("}\n");
    } else if (!cli->json) {
        streams_table(pg);
    }
    rv = interrupted ? TR_EXIT_DETACHED : unmatched_names(cli, &a);
    if (interrupted) { /* like submit and logs -f: say the job goes on */
        fprintf(stderr, "\ntroupe: detached; job %" PRIu64 " keeps running (troupe metrics %" PRIu64 " -f)\n", a.id,
                a.id);
    }
out:
    troupe_metrics_page_free(pg);
    troupe_client_close(cli->client);
    free(a.lists);
    return rv;
}
