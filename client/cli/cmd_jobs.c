/* cmd_jobs.c - troupe submit | jobs | job | logs | stop. */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "json.h"
#include "text.h"

static int parse_id(const char *s, uint64_t *id)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v == 0) {
        fprintf(stderr, "troupe: '%s' is not a job id (see troupe jobs)\n", s);
        return TR_EXIT_USAGE;
    }
    *id = v;
    return 0;
}

double tr_cli_secs(int64_t from, int64_t to)
{
    return (from > 0 && to >= from) ? (double)(to - from) / 1000.0 : 0.0;
}

/* shown_state: a RUNNING worker stopped by a signal (SIGSTOP) shows PAUSED. */
static const char *shown_state(const troupe_worker *w)
{
    return w->state == TROUPE_WORKER_RUNNING && w->paused ? "PAUSED" : troupe_worker_state_name(w->state);
}

int64_t tr_cli_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* job_times_json: the times the tables show, in seconds: run_s is TIME
 * (running for, or ran for; null when it never started), queued_s the time
 * from submit to start (or to now, or to its end without a start). Written
 * as the members just before "groups". */
static void job_times_json(FILE *out, const troupe_job *j)
{
    int64_t now = tr_cli_now_ms();
    int64_t queued_to = j->started_ms ? j->started_ms : j->ended_ms ? j->ended_ms : now;
    double run = tr_cli_run_secs(j, now);

    fputs("\"run_s\":", out);
    if (run < 0) {
        fputs("null", out);
    } else {
        fprintf(out, "%.3f", run);
    }
    fprintf(out, ",\"queued_s\":%.3f,\"groups\":[", tr_cli_secs(j->submitted_ms, queued_to));
}

void tr_cli_job_json(FILE *out, const troupe_job *j)
{
    fprintf(out, "{\"id\":%" PRIu64 ",\"name\":", j->id);
    tr_json_str(out, j->name);
    fprintf(out, ",\"state\":\"%s\",\"reason\":", troupe_job_state_name(j->state));
    tr_json_str(out, j->reason);
    fputs(",\"owner\":", out);
    tr_json_str(out, j->owner);
    fprintf(
        out,
        ",\"submitted_ms\":%lld,\"started_ms\":%lld,\"ended_ms\":%lld,\"restarts\":%u,\"max_restarts\":%u,"
        "\"workers_total\":%u,\"version\":%" PRIu64 ",\"next_restart_ms\":%lld,",
        (long long)j->submitted_ms, (long long)j->started_ms, (long long)j->ended_ms, j->restarts,
        j->max_restarts, j->workers_total, j->version, (long long)j->next_restart_ms);
    job_times_json(out, j);
    for (size_t g = 0; g < j->n_groups; g++) {
        fprintf(out, "%s{\"name\":", g ? "," : "");
        tr_json_str(out, j->groups[g].name);
        fputs(",\"master_addr\":", out);
        tr_json_str(out, j->groups[g].master_addr);
        fprintf(out, ",\"master_port\":%u,\"world_size\":%u", j->groups[g].master_port,
                j->groups[g].world_size);
        if (j->groups[g].min_workers > 0) {
            fprintf(out, ",\"elastic\":{\"min_workers\":%u,\"max_workers\":%u,\"placed\":%u,\"epoch\":%u}",
                    j->groups[g].min_workers, j->groups[g].max_workers, j->groups[g].placed_size,
                    j->groups[g].epoch);
        }
        fputc('}', out);
    }
    fputs("],\"membership\":[", out);
    for (size_t m = 0; m < j->n_membership; m++) {
        const troupe_membership_change *c = &j->membership[m];
        fprintf(out, "%s{\"ts_ms\":%lld,\"group\":", m ? "," : "", (long long)c->ts_ms);
        tr_json_str(out, c->group);
        fputs(",\"kind\":", out);
        tr_json_str(out, c->kind);
        fprintf(out, ",\"from\":%u,\"to\":%u,\"epoch\":%u,\"step\":%" PRIu64 ",\"worker\":", c->from_size,
                c->to_size, c->epoch, c->step);
        tr_json_str(out, c->worker);
        fputs(",\"text\":", out);
        tr_json_str(out, c->text);
        fputc('}', out);
    }
    fputs("],\"events\":[", out);
    for (size_t e = 0; e < j->n_events; e++) {
        fprintf(out, "%s{\"ts_ms\":%lld,\"kind\":", e ? "," : "", (long long)j->events[e].ts_ms);
        tr_json_str(out, j->events[e].kind);
        fputs(",\"message\":", out);
        tr_json_str(out, j->events[e].message);
        fputc('}', out);
    }
    fputs("],\"workers\":[", out);
    for (size_t i = 0; i < j->n_workers; i++) {
        const troupe_worker *w = &j->workers[i];
        fprintf(out, "%s{\"name\":", i ? "," : "");
        tr_json_str(out, w->name);
        fputs(",\"group\":", out);
        tr_json_str(out, w->group);
        fprintf(out,
                ",\"rank\":%u,\"local_rank\":%u,\"node_rank\":%u,\"node_id\":%" PRIu64 ",\"node\":", w->rank,
                w->local_rank, w->node_rank, w->node_id);
        tr_json_str(out, w->node_name);
        fputs(",\"gpus\":[", out);
        for (size_t k = 0; k < w->n_gpus; k++) {
            fprintf(out, "%s%u", k ? "," : "", w->gpus[k]);
        }
        fprintf(out,
                "],\"state\":\"%s\",\"paused\":%s,\"exit_code\":%d,\"signal\":%d,\"pid\":%u,\"attempt\":%u,"
                "\"started_ms\":%lld,\"ended_ms\":%lld,\"message\":",
                shown_state(w), w->paused ? "true" : "false", w->exit_code, w->signal, w->pid, w->attempt,
                (long long)w->started_ms, (long long)w->ended_ms);
        tr_json_str(out, w->message);
        fputs(",\"nsys_report\":", out);
        tr_json_str(out, w->nsys_report);
        fprintf(out, ",\"removed\":%s,\"member_rank\":%u,\"regrown\":%u,\"regrow_stopped\":%s}",
                w->removed ? "true" : "false", w->member_rank, w->regrown, w->regrow_stopped ? "true" : "false");
    }
    fputc(']', out);
    tr_cli_runtime_json(out, j);
    tr_cli_health_json(out, j);
    fputc('}', out);
}

void tr_cli_gpus_str(const troupe_worker *w, char *buf, size_t size)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < w->n_gpus && off + 6 < size; k++) {
        off += (size_t)snprintf(buf + off, size - off, "%s%u", k ? "," : "", w->gpus[k]);
    }
}

static void job_table(const troupe_job *j)
{
    int64_t end = j->ended_ms ? j->ended_ms : tr_cli_now_ms();
    char reason[4200];
    int stopping;
    int64_t run_end = tr_cli_job_end_ms(j, tr_cli_now_ms(), &stopping);
    printf("job       %" PRIu64 " (%s)\n", j->id, j->name);
    printf("state     %s: %s\n", troupe_job_state_name(j->state), tr_text_escape(reason, sizeof(reason), j->reason));
    if (j->owner != NULL && j->owner[0] != '\0') {
        printf("owner     %s\n", j->owner);
    }
    /* ran: until its last worker was gone, a stop's grace period included */
    printf("time      queued %.1f s, ran %.1f s%s\n",
           tr_cli_secs(j->submitted_ms, j->started_ms ? j->started_ms : end), tr_cli_secs(j->started_ms, run_end),
           stopping ? " (workers still stopping)" : "");
    printf("restarts  %u of %u\n", j->restarts, j->max_restarts);
    tr_cli_health_table(j);
    if (j->next_restart_ms > 0) {
        time_t t = (time_t)(j->next_restart_ms / 1000);
        struct tm tm;
        char when[32];
        localtime_r(&t, &tm);
        strftime(when, sizeof(when), "%H:%M:%S", &tm);
        printf("next      restart at %s (in %.1f s, crash-loop back-off)\n", when,
               (double)(j->next_restart_ms - tr_cli_now_ms()) / 1000.0);
    }
    for (size_t g = 0; g < j->n_groups; g++) {
        const troupe_group *gr = &j->groups[g];
        printf("group     %s: %u worker%s, MASTER_ADDR=%s MASTER_PORT=%u\n", gr->name, gr->world_size,
               tr_cli_plural(gr->world_size), gr->master_addr, gr->master_port);
        if (gr->min_workers > 0) {
            printf("elastic   %s: members %u/%u, epoch %u (min_workers %u, max_workers %u)\n", gr->name,
                   gr->world_size, gr->placed_size, gr->epoch, gr->min_workers, gr->max_workers);
        }
    }
    if (j->n_membership > 0) {
        printf("\nmembership\n");
        for (size_t m = 0; m < j->n_membership; m++) {
            char when[16], text[1200];
            tr_cli_time(when, sizeof(when), j->membership[m].ts_ms);
            printf("  %s  %s\n", when, tr_text_escape(text, sizeof(text), j->membership[m].text));
        }
    }
    tr_cli_runtime_table(j);
    if (j->n_events > 0) {
        printf("\nhistory%s\n", j->events_dropped ? " (latest entries)" : "");
        for (size_t e = 0; e < j->n_events; e++) {
            char when[16];
            tr_cli_time(when, sizeof(when), j->events[e].ts_ms);
            printf("  %s  %-10s %s\n", when, j->events[e].kind, j->events[e].message);
        }
    }
    if (j->n_workers == 0) {
        return;
    }
    printf("\n%-24s %-10s %5s %5s %-12s %-10s %-16s %8s  %s\n", "WORKER", "GROUP", "RANK", "LOCAL", "NODE",
           "GPUS", "STATE", "TIME", "EXIT");
    for (size_t i = 0; i < j->n_workers; i++) {
        const troupe_worker *w = &j->workers[i];
        char gpus[128], exitbuf[160];
        tr_cli_gpus_str(w, gpus, sizeof(gpus));
        const char *left = !w->removed         ? ""
                           : w->regrow_stopped ? " (left its elastic group; not grown back: its replacements failed)"
                                               : " (left its elastic group)";
        if (w->state == TROUPE_WORKER_EXITED) {
            snprintf(exitbuf, sizeof(exitbuf), w->signal ? "signal %d%s" : "code %d%s",
                     w->signal ? w->signal : w->exit_code, left);
        } else {
            snprintf(exitbuf, sizeof(exitbuf), "%s%s", w->message, left);
        }
        /* Run time until the process was gone: a stop's grace period counts. */
        double ran = tr_cli_secs(w->started_ms, w->ended_ms ? w->ended_ms : tr_cli_now_ms());
        printf("%-24s %-10s %5u %5u %-12s %-10s %-16s %7.1fs  %s\n", w->name, w->group, w->rank, w->local_rank,
               w->node_name, gpus, shown_state(w), ran,
               w->paused && !w->message[0] ? "stopped by a signal (SIGSTOP)" : exitbuf);
    }
    for (size_t i = 0, shown = 0; i < j->n_workers; i++) { /* profile: {nsys: true} reports */
        if (j->workers[i].nsys_report[0] != '\0') {
            printf("%snsys      %s: %s (on node %s)\n", shown++ ? "" : "\n", j->workers[i].name,
                   j->workers[i].nsys_report, j->workers[i].node_name);
        }
    }
}

int tr_cli_cmd_job(tr_cli *cli, int argc, char **argv)
{
    troupe_job *j = NULL;
    troupe_error err;
    uint64_t id;
    int rv;

    if (argc != 2) {
        fprintf(stderr, "usage: troupe job ID\n");
        return TR_EXIT_USAGE;
    }
    if ((rv = parse_id(argv[1], &id)) != 0 || tr_cli_connect(cli) != 0) {
        return rv ? rv : TR_EXIT_FAILED;
    }
    if (troupe_get_job(cli->client, id, &j, &err) != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        troupe_client_close(cli->client);
        return TR_EXIT_FAILED;
    }
    if (cli->json) {
        tr_cli_job_json(stdout, j);
        fputc('\n', stdout);
    } else {
        job_table(j);
    }
    troupe_job_free(j);
    troupe_client_close(cli->client);
    return 0;
}

/* jobs_table: one line per job; AGE is the time since it was submitted and
 * TIME how long it has been running, or ran (until its last worker was gone,
 * as `troupe job` says; "-" while it never started). wide adds the times of
 * day it was submitted, started and ended, and how long it queued. */
static void jobs_table(const troupe_job_list *l, int reverse, int wide)
{
    int64_t now = tr_cli_now_ms();
    printf("%-5s %-20s %-10s %7s %8s %8s %5s", "ID", "NAME", "STATE", "WORKERS", "RESTARTS", "TIME", "AGE");
    if (wide) {
        printf("  %-9s %-9s %-9s %8s", "SUBMITTED", "STARTED", "ENDED", "QUEUED");
    }
    printf("  %s\n", "REASON");
    for (size_t i = 0; i < l->count; i++) {
        const troupe_job *j = &l->jobs[reverse ? l->count - 1 - i : i];
        int64_t end = j->ended_ms ? j->ended_ms : now;
        char reason[1024], age[16], ran[24];
        tr_cli_health_reason(j, reason, sizeof(reason));
        tr_cli_age(age, sizeof(age), j->submitted_ms, now);
        tr_cli_duration(ran, sizeof(ran), tr_cli_run_secs(j, now));
        printf("%-5" PRIu64 " %-20s %-10s %7u %8u %8s %5s", j->id, j->name, tr_cli_health_state(j),
               j->workers_total, j->restarts, ran, age);
        if (wide) {
            char sub[16], start[16], ended[16];
            tr_cli_time(sub, sizeof(sub), j->submitted_ms);
            tr_cli_time(start, sizeof(start), j->started_ms);
            tr_cli_time(ended, sizeof(ended), j->ended_ms);
            printf("  %-9s %-9s %-9s %7.1fs", sub, start, ended,
                   tr_cli_secs(j->submitted_ms, j->started_ms ? j->started_ms : end));
        }
        printf("  %s\n", reason);
    }
}

int tr_cli_cmd_jobs(tr_cli *cli, int argc, char **argv)
{
    troupe_list_opts o = {0};
    troupe_job_list *l = NULL;
    troupe_error err;
    int all = 0, rv;

    if ((rv = tr_cli_list_args(argc, argv, &o, &all)) != TR_EXIT_OK) {
        return rv;
    }
    if (tr_cli_connect(cli) != 0) {
        return TR_EXIT_FAILED;
    }
    if ((all ? troupe_list_jobs(cli->client, o.active_only, &l, &err)
             : troupe_list_jobs_page(cli->client, &o, &l, &err)) != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        troupe_client_close(cli->client);
        return TR_EXIT_FAILED;
    }
    /* --all: the head sends every job in id order; newest first, as a page lists them */
    int reverse = all && !o.oldest_first;
    if (cli->json) {
        printf("{\"count\":%zu,\"jobs\":[", l->count);
        for (size_t i = 0; i < l->count; i++) {
            fputs(i ? "," : "", stdout);
            tr_cli_job_json(stdout, &l->jobs[reverse ? l->count - 1 - i : i]);
        }
        printf("],\"next_cursor\":%" PRIu64 "}\n", l->next_cursor);
    } else {
        jobs_table(l, reverse, cli->wide);
        if (l->next_cursor != 0) {
            fprintf(stderr,
                    "troupe: more jobs; the next page: troupe jobs --cursor %" PRIu64 " (same filters)\n",
                    l->next_cursor);
        }
    }
    troupe_job_list_free(l);
    troupe_client_close(cli->client);
    return 0;
}

/* wait_all waits for every job to end, one line per job as it ends; 0 when
 * all SUCCEEDED. Lost contact with the head is retried for 60 s. */
static int wait_all(tr_cli *cli, const uint64_t *ids, size_t n)
{
    int failed = 0;
    for (size_t i = 0; i < n && !tr_cli_interrupted; i++) {
        uint64_t version = 0;
        int64_t lost_since = 0;
        while (!tr_cli_interrupted) {
            troupe_job *j = NULL;
            troupe_error err;
            int rv = troupe_wait_job(cli->client, ids[i], version, 1000, &j, &err);
            if (rv == TROUPE_UNAVAILABLE || rv == TROUPE_DEADLINE_EXCEEDED) {
                if (tr_cli_gave_up(&lost_since, &err, "jobs may still be running (troupe jobs)")) {
                    return TR_EXIT_FAILED;
                }
                continue;
            }
            if (rv != TROUPE_OK) {
                tr_cli_fail(cli, &err);
                return TR_EXIT_FAILED;
            }
            lost_since = 0;
            version = j->version;
            if (tr_cli_terminal(j->state)) {
                char shown[1024];
                fprintf(stderr, "troupe: job %" PRIu64 " (%s) %s after %.1f s: %s\n", j->id, j->name,
                        troupe_job_state_name(j->state),
                        tr_cli_secs(j->started_ms ? j->started_ms : j->submitted_ms, j->ended_ms),
                        tr_text_escape(shown, sizeof(shown), j->reason));
                failed |= j->state != TROUPE_JOB_SUCCEEDED;
                if (cli->json) {
                    tr_cli_job_json(stdout, j);
                    fputc('\n', stdout);
                    fflush(stdout);
                }
                troupe_job_free(j);
                break;
            }
            troupe_job_free(j);
        }
    }
    if (tr_cli_interrupted) {
        fprintf(stderr, "\ntroupe: detached; the jobs keep running (troupe jobs)\n");
        return TR_EXIT_DETACHED;
    }
    return failed ? TR_EXIT_FAILED : TR_EXIT_OK;
}

static void batch_json(const troupe_batch *b, char **names, const char *key)
{
    printf("{\"jobs\":[");
    for (size_t i = 0; i < b->count; i++) {
        const troupe_batch_item *it = &b->items[i];
        printf("%s{\"%s\":", i ? "," : "", key);
        if (names != NULL) {
            tr_json_str(stdout, names[i]);
        } else {
            printf("%" PRIu64, it->job_id);
        }
        printf(",\"job_id\":%" PRIu64 ",\"code\":\"%s\",\"state\":\"%s\",\"message\":", it->job_id,
               troupe_strerror(it->code), troupe_job_state_name(it->state));
        tr_json_str(stdout, it->message);
        putchar('}');
    }
    printf("]}\n");
}

/* submit_many parses every file first (nothing is submitted if one is bad),
 * then submits them in one SubmitJobs call. */
static int submit_many(tr_cli *cli, char **paths, size_t n, int no_wait)
{
    troupe_spec **specs = calloc(n, sizeof(*specs));
    uint64_t *ids = calloc(n, sizeof(*ids));
    troupe_batch *b = NULL;
    size_t n_ids = 0;
    troupe_error err;
    int rv = 1;

    if (specs == NULL || ids == NULL) {
        fprintf(stderr, "troupe: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (troupe_spec_load(paths[i], &specs[i], &err) != TROUPE_OK) {
            fprintf(stderr, "troupe: %s (nothing submitted)\n", err.message);
            goto out;
        }
    }
    if (tr_cli_connect(cli) != 0) {
        goto out;
    }
    troupe_submit_batch(cli->client, (const troupe_spec *const *)specs, n, 0, &b, &err);
    if (b == NULL) {
        tr_cli_fail(cli, &err);
        goto close;
    }
    if (cli->json) {
        batch_json(b, paths, "file");
    }
    for (size_t i = 0; i < b->count; i++) {
        const troupe_batch_item *it = &b->items[i];
        if (it->code != TROUPE_OK) {
            fprintf(stderr, "troupe: %s refused: %s: %s\n", paths[i], troupe_strerror(it->code), it->message);
            continue;
        }
        ids[n_ids++] = it->job_id;
        if (!cli->json) {
            printf("%" PRIu64 "\n", it->job_id);
        }
    }
    fflush(stdout);
    rv = b->failed ? TR_EXIT_FAILED : TR_EXIT_OK;
    if (!no_wait && n_ids > 0) {
        tr_cli_catch_sigint();
        fprintf(stderr, "troupe: waiting for %zu job%s to end (Ctrl-C detaches; they keep running)\n", n_ids,
                tr_cli_plural(n_ids));
        int w = wait_all(cli, ids, n_ids);
        rv = w == TR_EXIT_DETACHED ? w : (rv | w);
    }
close:
    troupe_client_close(cli->client);
out:
    for (size_t i = 0; specs != NULL && i < n; i++) {
        troupe_spec_free(specs[i]);
    }
    troupe_batch_free(b);
    free(specs);
    free(ids);
    return rv;
}

int tr_cli_cmd_submit(tr_cli *cli, int argc, char **argv)
{
    char **paths = calloc((size_t)argc, sizeof(*paths));
    const char *path;
    size_t n = 0;
    int no_wait = 0, rv;
    troupe_error err;
    uint64_t id = 0;
    tr_follow_view view = TR_FOLLOW_AUTO;

    for (int i = 1; paths != NULL && i < argc; i++) {
        if (strcmp(argv[i], "--no-wait") == 0) {
            no_wait = 1;
        } else if (tr_cli_follow_flag(argv[i], &view)) {
            continue;
        } else if (argv[i][0] != '-') {
            paths[n++] = argv[i];
        } else {
            n = 0;
            break;
        }
    }
    if (n == 0 || n > TROUPE_BATCH_MAX) {
        fprintf(stderr, "usage: troupe submit JOB.yaml [JOB.yaml ...] [--no-wait] [--raw|--live]%s\n",
                n > TROUPE_BATCH_MAX ? " (at most 4096 files)" : "");
        free(paths);
        return TR_EXIT_USAGE;
    }
    if (n > 1) {
        rv = submit_many(cli, paths, n, no_wait);
        free(paths);
        return rv;
    }
    path = paths[0];
    free(paths);
    if (tr_cli_connect(cli) != 0) {
        return TR_EXIT_FAILED;
    }
    if (troupe_submit_file(cli->client, path, &id, &err) != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        troupe_client_close(cli->client);
        return TR_EXIT_FAILED;
    }
    if (cli->json) {
        printf("{\"job_id\":%" PRIu64 "}\n", id);
    } else {
        printf("%" PRIu64 "\n", id);
    }
    fflush(stdout);
    rv = 0;
    if (!no_wait) {
        tr_cli_catch_sigint();
        fprintf(stderr, "troupe: following job %" PRIu64 " (Ctrl-C detaches; the job keeps running)\n", id);
        rv = tr_cli_follow(cli, id, NULL, view);
    }
    troupe_client_close(cli->client);
    return rv;
}

/* print_logs prints everything written so far: as is, or with -o json as
 * one {"job_id","worker","text","next_offset","done"} object. */
static int print_logs(tr_cli *cli, uint64_t id, const char *worker)
{
    char *all = NULL;
    size_t all_len = 0;
    uint64_t offset = 0;
    int done = 0, rv = TR_EXIT_OK;
    troupe_error err;
    FILE *out = cli->json ? open_memstream(&all, &all_len) : stdout;

    if (out == NULL) {
        fprintf(stderr, "troupe: out of memory\n");
        return TR_EXIT_FAILED;
    }
    for (;;) {
        char *data = NULL;
        size_t len = 0;
        uint64_t next = offset;
        if (troupe_read_logs(cli->client, id, worker, offset, 0, &data, &len, &next, &done, &err) !=
            TROUPE_OK) {
            tr_cli_fail(cli, &err);
            rv = TR_EXIT_FAILED;
            break;
        }
        fwrite(data, 1, len, out);
        troupe_free(data);
        if (next == offset) {
            break;
        }
        offset = next;
    }
    if (cli->json) {
        fclose(out);
        if (rv == TR_EXIT_OK) {
            printf("{\"job_id\":%" PRIu64 ",\"worker\":", id);
            tr_json_str(stdout, worker);
            fputs(",\"text\":", stdout);
            tr_json_strn(stdout, all, all_len);
            printf(",\"next_offset\":%" PRIu64 ",\"done\":%s}\n", offset, done ? "true" : "false");
        }
        free(all);
    }
    return rv;
}

int tr_cli_cmd_logs(tr_cli *cli, int argc, char **argv)
{
    const char *worker = NULL;
    uint64_t id = 0;
    int follow_flag = 0, rv;
    tr_follow_view view = TR_FOLLOW_AUTO;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--follow") == 0) {
            follow_flag = 1;
        } else if (tr_cli_follow_flag(argv[i], &view)) {
            continue;
        } else if (strcmp(argv[i], "--worker") == 0 && i + 1 < argc) {
            worker = argv[++i];
        } else if (id == 0 && argv[i][0] != '-') {
            if ((rv = parse_id(argv[i], &id)) != 0) {
                return rv;
            }
        } else {
            fprintf(stderr, "usage: troupe logs ID [-f [--raw|--live]] [--worker NAME]\n");
            return TR_EXIT_USAGE;
        }
    }
    if (id == 0) {
        fprintf(stderr, "usage: troupe logs ID [-f [--raw|--live]] [--worker NAME]\n");
        return TR_EXIT_USAGE;
    }
    if (tr_cli_connect(cli) != 0) {
        return TR_EXIT_FAILED;
    }
    if (follow_flag) {
        tr_cli_catch_sigint();
        rv = tr_cli_follow(cli, id, worker, view);
        troupe_client_close(cli->client);
        return rv;
    }
    rv = print_logs(cli, id, worker);
    troupe_client_close(cli->client);
    return rv;
}

static size_t count_active(const troupe_job *j)
{
    size_t n = 0;
    for (size_t i = 0; i < j->n_workers; i++) {
        n += j->workers[i].state == TROUPE_WORKER_RUNNING || j->workers[i].state == TROUPE_WORKER_PENDING;
    }
    return n;
}

/* One id given to `troupe stop` and what became of it. */
typedef struct stop_item {
    uint64_t id;
    troupe_status code;
    char message[512];
    troupe_job_state state;
} stop_item;

/* kill_in_ms: how long until the agents SIGKILL what is left of a stopping
 * job: its STOPPED event plus the longest grace among the nodes its live
 * workers are on; -1 when not known (no node list, or older agents). */
static int64_t kill_in_ms(const troupe_job *j, const troupe_node_list *nodes)
{
    int64_t stopped = 0, grace = -1;
    for (size_t e = 0; e < j->n_events; e++) {
        stopped = strcmp(j->events[e].kind, "STOPPED") == 0 ? j->events[e].ts_ms : stopped;
    }
    for (size_t i = 0; nodes != NULL && i < j->n_workers; i++) {
        const troupe_worker *w = &j->workers[i];
        if (w->state != TROUPE_WORKER_RUNNING && w->state != TROUPE_WORKER_PENDING) {
            continue;
        }
        for (size_t k = 0; k < nodes->count; k++) {
            if (nodes->nodes[k].id == w->node_id && nodes->nodes[k].stop_grace_ms > 0 &&
                (int64_t)nodes->nodes[k].stop_grace_ms > grace) {
                grace = nodes->nodes[k].stop_grace_ms;
            }
        }
    }
    if (stopped == 0 || grace < 0) {
        return -1;
    }
    return stopped + grace > tr_cli_now_ms() ? stopped + grace - tr_cli_now_ms() : 0;
}

/* stop_progress says how many workers the stop still waits for and when
 * they get SIGKILL: on every change, and each second on a terminal. */
static void stop_progress(const stop_item *it, const troupe_job *j, const troupe_node_list *nodes,
                          size_t left, size_t *last)
{
    int64_t kill_ms = kill_in_ms(j, nodes);
    char when[64] = "";
    if (left == *last && !isatty(STDERR_FILENO)) {
        return;
    }
    if (kill_ms > 0) {
        snprintf(when, sizeof(when), ", SIGKILL in %.0f s", (double)kill_ms / 1000.0 + 0.499);
    } else if (kill_ms == 0) {
        snprintf(when, sizeof(when), ", SIGKILL sent");
    }
    fprintf(stderr, "troupe: job %" PRIu64 ": waiting for %zu worker%s to exit%s\n", it->id, left,
            tr_cli_plural(left), when);
    *last = left;
}

/* wait_stopped waits (60 s) until no worker of the job runs, saying how
 * many it still waits for (stop_progress). */
static int wait_stopped(tr_cli *cli, stop_item *it, const troupe_node_list *nodes, int64_t until)
{
    uint64_t version = 0;
    size_t last = (size_t)-1;
    while (!tr_cli_interrupted) {
        troupe_job *j = NULL;
        troupe_error err;
        size_t left;
        if (tr_cli_now_ms() >= until) {
            fprintf(stderr,
                    "troupe: job %" PRIu64 " still has workers running after 60 s (see troupe job %" PRIu64
                    ")\n",
                    it->id, it->id);
            return TR_EXIT_FAILED;
        }
        if (troupe_wait_job(cli->client, it->id, version, 1000, &j, &err) != TROUPE_OK) {
            tr_cli_fail(cli, &err);
            return TR_EXIT_FAILED;
        }
        version = j->version;
        left = count_active(j);
        it->state = j->state;
        if (left == 0) {
            fprintf(stderr, "troupe: job %" PRIu64 " %s; no worker left running\n", it->id,
                    troupe_job_state_name(it->state));
            troupe_job_free(j);
            return TR_EXIT_OK;
        }
        stop_progress(it, j, nodes, left, &last);
        troupe_job_free(j);
    }
    return TR_EXIT_DETACHED;
}

/* stop_ids stops one job (StopJob) or several (one StopJobs call), filling
 * each item's outcome; TR_EXIT_FAILED when the call itself failed. */
static int stop_ids(tr_cli *cli, stop_item *items, const uint64_t *ids, size_t n)
{
    troupe_batch *b = NULL;
    troupe_error err;

    if (n == 1) {
        items[0].code = troupe_stop_job(cli->client, ids[0], &err);
        if (items[0].code == TROUPE_UNAVAILABLE || items[0].code == TROUPE_DEADLINE_EXCEEDED ||
            items[0].code == TROUPE_UNAUTHENTICATED) {
            tr_cli_fail(cli, &err);
            return TR_EXIT_FAILED;
        }
        snprintf(items[0].message, sizeof(items[0].message), "%s", items[0].code ? err.message : "");
        if (items[0].code == TROUPE_OK) { /* the state as acknowledged, as StopJobs gives it */
            troupe_job *j = NULL;
            if (troupe_get_job(cli->client, ids[0], &j, &err) == TROUPE_OK) {
                items[0].state = j->state;
                troupe_job_free(j);
            }
        }
        return TR_EXIT_OK;
    }
    troupe_stop_batch(cli->client, ids, n, &b, &err);
    if (b == NULL) {
        tr_cli_fail(cli, &err);
        return TR_EXIT_FAILED;
    }
    for (size_t i = 0; i < b->count && i < n; i++) {
        items[i].code = b->items[i].code;
        items[i].state = b->items[i].state;
        snprintf(items[i].message, sizeof(items[i].message), "%s", b->items[i].message);
    }
    troupe_batch_free(b);
    return TR_EXIT_OK;
}

static void stop_json(const stop_item *items, size_t n)
{
    printf("{\"jobs\":[");
    for (size_t i = 0; i < n; i++) {
        printf("%s{\"id\":%" PRIu64 ",\"code\":\"%s\",\"state\":\"%s\",\"message\":", i ? "," : "",
               items[i].id, troupe_strerror(items[i].code), troupe_job_state_name(items[i].state));
        tr_json_str(stdout, items[i].message);
        putchar('}');
    }
    printf("]}\n");
}

/* parse_stop_args fills ids (n of them) and *no_wait; TR_EXIT_USAGE on bad usage. */
static int parse_stop_args(int argc, char **argv, uint64_t *ids, size_t *n, int *no_wait)
{
    *n = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-wait") == 0) {
            *no_wait = 1;
        } else if (argv[i][0] != '-') {
            if (parse_id(argv[i], &ids[(*n)++]) != 0) {
                return TR_EXIT_USAGE;
            }
        } else {
            *n = 0;
            break;
        }
    }
    if (*n == 0 || *n > TROUPE_BATCH_MAX) {
        fprintf(stderr, "usage: troupe stop ID [ID ...] [--no-wait]\n");
        return TR_EXIT_USAGE;
    }
    return TR_EXIT_OK;
}

int tr_cli_cmd_stop(tr_cli *cli, int argc, char **argv)
{
    uint64_t *ids = calloc((size_t)argc, sizeof(*ids));
    stop_item *items = calloc((size_t)argc, sizeof(*items));
    troupe_node_list *nodes = NULL;
    troupe_error err;
    int64_t until = tr_cli_now_ms() + 60000; /* covers the default 10 s grace period */
    size_t n = 0;
    int no_wait = 0, rv = TR_EXIT_FAILED;

    if (ids == NULL || items == NULL) {
        fprintf(stderr, "troupe: out of memory\n");
        goto out;
    }
    if ((rv = parse_stop_args(argc, argv, ids, &n, &no_wait)) != TR_EXIT_OK) {
        goto out;
    }
    if (tr_cli_connect(cli) != 0) {
        rv = TR_EXIT_FAILED;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        items[i].id = ids[i];
    }
    if ((rv = stop_ids(cli, items, ids, n)) != TR_EXIT_OK) {
        goto close;
    }
    tr_cli_catch_sigint();
    if (!no_wait && troupe_list_nodes(cli->client, 1, &nodes, &err) != TROUPE_OK) {
        nodes = NULL; /* progress without the SIGKILL countdown */
    }
    for (size_t i = 0; i < n && rv != TR_EXIT_DETACHED; i++) {
        if (items[i].code != TROUPE_OK) {
            fprintf(stderr, "troupe: job %" PRIu64 ": %s: %s\n", items[i].id, troupe_strerror(items[i].code),
                    items[i].message);
            rv = TR_EXIT_FAILED;
            continue;
        }
        fprintf(stderr,
                "troupe: job %" PRIu64 " stopping (SIGTERM, then SIGKILL after the node's grace period)\n",
                items[i].id);
        if (!no_wait) {
            int w = wait_stopped(cli, &items[i], nodes, until);
            rv = w == TR_EXIT_DETACHED ? w : (rv | w);
        }
    }
    if (rv == TR_EXIT_DETACHED) {
        fprintf(stderr, "\ntroupe: detached; the jobs keep stopping (troupe jobs)\n");
    }
    if (cli->json) {
        stop_json(items, n);
    }
close:
    troupe_node_list_free(nodes);
    troupe_client_close(cli->client);
out:
    free(ids);
    free(items);
    return rv;
}
