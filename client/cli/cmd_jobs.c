/* cmd_jobs.c - troupe submit | jobs | job | logs | stop. */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "json.h"

static int parse_id(const char *s, uint64_t *id)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v == 0) {
        fprintf(stderr, "troupe: '%s' is not a job id (see troupe jobs)\n", s);
        return 2;
    }
    *id = v;
    return 0;
}

static double secs(int64_t from, int64_t to)
{
    return (from > 0 && to >= from) ? (double)(to - from) / 1000.0 : 0.0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void job_json(FILE *out, const troupe_job *j)
{
    fprintf(out, "{\"id\":%" PRIu64 ",\"name\":", j->id);
    tr_json_str(out, j->name);
    fprintf(out, ",\"state\":\"%s\",\"reason\":", troupe_job_state_name(j->state));
    tr_json_str(out, j->reason);
    fprintf(
        out,
        ",\"submitted_ms\":%lld,\"started_ms\":%lld,\"ended_ms\":%lld,\"restarts\":%u,\"max_restarts\":%u,"
        "\"workers_total\":%u,\"version\":%" PRIu64 ",\"groups\":[",
        (long long)j->submitted_ms, (long long)j->started_ms, (long long)j->ended_ms, j->restarts,
        j->max_restarts, j->workers_total, j->version);
    for (size_t g = 0; g < j->n_groups; g++) {
        fprintf(out, "%s{\"name\":", g ? "," : "");
        tr_json_str(out, j->groups[g].name);
        fputs(",\"master_addr\":", out);
        tr_json_str(out, j->groups[g].master_addr);
        fprintf(out, ",\"master_port\":%u,\"world_size\":%u}", j->groups[g].master_port,
                j->groups[g].world_size);
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
                "],\"state\":\"%s\",\"exit_code\":%d,\"signal\":%d,\"pid\":%u,\"attempt\":%u,\"message\":",
                troupe_worker_state_name(w->state), w->exit_code, w->signal, w->pid, w->attempt);
        tr_json_str(out, w->message);
        fputc('}', out);
    }
    fputs("]}", out);
}

static void gpus_str(const troupe_worker *w, char *buf, size_t size)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < w->n_gpus && off + 6 < size; k++) {
        off += (size_t)snprintf(buf + off, size - off, "%s%u", k ? "," : "", w->gpus[k]);
    }
}

static void job_table(const troupe_job *j)
{
    int64_t end = j->ended_ms ? j->ended_ms : now_ms();
    printf("job       %" PRIu64 " (%s)\n", j->id, j->name);
    printf("state     %s: %s\n", troupe_job_state_name(j->state), j->reason);
    printf("time      queued %.1f s, ran %.1f s\n",
           secs(j->submitted_ms, j->started_ms ? j->started_ms : end), secs(j->started_ms, end));
    printf("restarts  %u of %u\n", j->restarts, j->max_restarts);
    for (size_t g = 0; g < j->n_groups; g++) {
        printf("group     %s: %u workers, MASTER_ADDR=%s MASTER_PORT=%u\n", j->groups[g].name,
               j->groups[g].world_size, j->groups[g].master_addr, j->groups[g].master_port);
    }
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
    printf("\n%-24s %-10s %5s %5s %-12s %-10s %-16s %s\n", "WORKER", "GROUP", "RANK", "LOCAL", "NODE", "GPUS",
           "STATE", "EXIT");
    for (size_t i = 0; i < j->n_workers; i++) {
        const troupe_worker *w = &j->workers[i];
        char gpus[128], exitbuf[160];
        gpus_str(w, gpus, sizeof(gpus));
        if (w->state == TROUPE_WORKER_EXITED) {
            snprintf(exitbuf, sizeof(exitbuf), w->signal ? "signal %d" : "code %d",
                     w->signal ? w->signal : w->exit_code);
        } else {
            snprintf(exitbuf, sizeof(exitbuf), "%s", w->message);
        }
        printf("%-24s %-10s %5u %5u %-12s %-10s %-16s %s\n", w->name, w->group, w->rank, w->local_rank,
               w->node_name, gpus, troupe_worker_state_name(w->state), exitbuf);
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
        return 2;
    }
    if ((rv = parse_id(argv[1], &id)) != 0 || tr_cli_connect(cli) != 0) {
        return rv ? rv : 1;
    }
    if (troupe_get_job(cli->client, id, &j, &err) != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        troupe_client_close(cli->client);
        return 1;
    }
    if (cli->json) {
        job_json(stdout, j);
        fputc('\n', stdout);
    } else {
        job_table(j);
    }
    troupe_job_free(j);
    troupe_client_close(cli->client);
    return 0;
}

int tr_cli_cmd_jobs(tr_cli *cli, int argc, char **argv)
{
    troupe_job_list *l = NULL;
    troupe_error err;
    int active = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--active") == 0) {
            active = 1;
        } else {
            fprintf(stderr, "troupe jobs: unknown argument '%s' (usage: troupe jobs [--active])\n", argv[i]);
            return 2;
        }
    }
    if (tr_cli_connect(cli) != 0) {
        return 1;
    }
    if (troupe_list_jobs(cli->client, active, &l, &err) != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        troupe_client_close(cli->client);
        return 1;
    }
    if (cli->json) {
        printf("{\"count\":%zu,\"jobs\":[", l->count);
        for (size_t i = 0; i < l->count; i++) {
            fputs(i ? "," : "", stdout);
            job_json(stdout, &l->jobs[i]);
        }
        printf("]}\n");
    } else {
        printf("%-5s %-20s %-10s %7s %8s %8s  %s\n", "ID", "NAME", "STATE", "WORKERS", "RESTARTS", "TIME",
               "REASON");
        for (size_t i = 0; i < l->count; i++) {
            const troupe_job *j = &l->jobs[i];
            int64_t end = j->ended_ms ? j->ended_ms : now_ms();
            printf("%-5" PRIu64 " %-20s %-10s %7u %8u %7.1fs  %s\n", j->id, j->name,
                   troupe_job_state_name(j->state), j->workers_total, j->restarts,
                   secs(j->started_ms ? j->started_ms : j->submitted_ms, end), j->reason);
        }
    }
    troupe_job_list_free(l);
    troupe_client_close(cli->client);
    return 0;
}

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* print_events writes history entries the caller has not seen yet; *seen
 * counts entries since the job began (dropped ones included). */
static void print_events(const troupe_job *j, uint64_t id, size_t *seen)
{
    size_t total = j->events_dropped + j->n_events;
    for (size_t k = *seen; k < total; k++) {
        if (k >= j->events_dropped) {
            const troupe_job_event *e = &j->events[k - j->events_dropped];
            fprintf(stderr, "troupe: job %" PRIu64 " %s: %s\n", id, e->kind, e->message);
        }
    }
    *seen = total;
}

/* gave_up handles a lost head while following: says so once, retries for
 * 60 s, then says what may still be running and returns 1. */
static int gave_up(int64_t *lost_since, const troupe_error *err, const char *what)
{
    if (*lost_since == 0) {
        fprintf(stderr, "troupe: lost contact with the head (%s); retrying for 60 s\n", err->message);
        *lost_since = now_ms();
        return 0;
    }
    if (now_ms() - *lost_since > 60000) {
        fprintf(stderr, "troupe: head unreachable for 60 s; %s\n", what);
        return 1;
    }
    return 0;
}

static int terminal(int state)
{
    return state >= TROUPE_JOB_SUCCEEDED;
}

/* follow prints the job's log and state changes until it ends and its log
 * is drained. Contact lost with the head is retried for 60 s, saying so. */
static int follow(tr_cli *cli, uint64_t id, const char *worker)
{
    uint64_t offset = 0, version = 0;
    int state = -1, done = 0;
    char reason[512] = "";
    int64_t lost_since = 0;
    size_t seen = 0;
    troupe_error err;

    while (!interrupted) {
        troupe_job *j = NULL;
        char *data = NULL;
        size_t len = 0;
        int rv = troupe_read_logs(cli->client, id, worker, offset, 500, &data, &len, &offset, &done, &err);
        if (rv == TROUPE_OK) {
            fwrite(data, 1, len, stdout);
            fflush(stdout);
            troupe_free(data);
            rv = troupe_wait_job(cli->client, id, version, 0, &j, &err);
        }
        if (rv == TROUPE_UNAVAILABLE || rv == TROUPE_DEADLINE_EXCEEDED) {
            char what[64];
            snprintf(what, sizeof(what), "the job may still be running (troupe job %" PRIu64 ")", id);
            if (gave_up(&lost_since, &err, what)) {
                return 1;
            }
            continue;
        }
        if (rv != TROUPE_OK) {
            tr_cli_fail(cli, &err);
            return 1;
        }
        lost_since = 0;
        version = j->version;
        print_events(j, id, &seen);
        /* Why a job waits is not history, just its current reason. */
        if (j->state == TROUPE_JOB_PENDING && ((int)j->state != state || strcmp(reason, j->reason) != 0)) {
            fprintf(stderr, "troupe: job %" PRIu64 " PENDING: %s\n", id, j->reason);
        }
        state = (int)j->state;
        snprintf(reason, sizeof(reason), "%s", j->reason);
        if (terminal(j->state) && done) {
            int ok = j->state == TROUPE_JOB_SUCCEEDED;
            fprintf(stderr, "troupe: job %" PRIu64 " %s after %.1f s: %s\n", id,
                    troupe_job_state_name(j->state),
                    secs(j->started_ms ? j->started_ms : j->submitted_ms, j->ended_ms), j->reason);
            troupe_job_free(j);
            return ok ? 0 : 1;
        }
        troupe_job_free(j);
    }
    fprintf(stderr,
            "\ntroupe: detached; job %" PRIu64 " keeps running (troupe logs -f %" PRIu64
            ", troupe stop %" PRIu64 ")\n",
            id, id, id);
    return 130;
}

/* wait_all waits for every job to end, one line per job as it ends; 0 when
 * all SUCCEEDED. Lost contact with the head is retried for 60 s. */
static int wait_all(tr_cli *cli, const uint64_t *ids, size_t n)
{
    int failed = 0;
    for (size_t i = 0; i < n && !interrupted; i++) {
        uint64_t version = 0;
        int64_t lost_since = 0;
        while (!interrupted) {
            troupe_job *j = NULL;
            troupe_error err;
            int rv = troupe_wait_job(cli->client, ids[i], version, 1000, &j, &err);
            if (rv == TROUPE_UNAVAILABLE || rv == TROUPE_DEADLINE_EXCEEDED) {
                if (gave_up(&lost_since, &err, "jobs may still be running (troupe jobs)")) {
                    return 1;
                }
                continue;
            }
            if (rv != TROUPE_OK) {
                tr_cli_fail(cli, &err);
                return 1;
            }
            lost_since = 0;
            version = j->version;
            if (terminal(j->state)) {
                fprintf(stderr, "troupe: job %" PRIu64 " (%s) %s after %.1f s: %s\n", j->id, j->name,
                        troupe_job_state_name(j->state),
                        secs(j->started_ms ? j->started_ms : j->submitted_ms, j->ended_ms), j->reason);
                failed |= j->state != TROUPE_JOB_SUCCEEDED;
                troupe_job_free(j);
                break;
            }
            troupe_job_free(j);
        }
    }
    if (interrupted) {
        fprintf(stderr, "\ntroupe: detached; the jobs keep running (troupe jobs)\n");
        return 130;
    }
    return failed;
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
    rv = b->failed ? 1 : 0;
    if (!no_wait && n_ids > 0) {
        signal(SIGINT, on_sigint);
        fprintf(stderr, "troupe: waiting for %zu jobs to end (Ctrl-C detaches; they keep running)\n", n_ids);
        rv |= wait_all(cli, ids, n_ids);
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

    for (int i = 1; paths != NULL && i < argc; i++) {
        if (strcmp(argv[i], "--no-wait") == 0) {
            no_wait = 1;
        } else if (argv[i][0] != '-') {
            paths[n++] = argv[i];
        } else {
            n = 0;
            break;
        }
    }
    if (n == 0 || n > TROUPE_BATCH_MAX) {
        fprintf(stderr, "usage: troupe submit JOB.yaml [JOB.yaml ...] [--no-wait]%s\n",
                n > TROUPE_BATCH_MAX ? " (at most 4096 files)" : "");
        free(paths);
        return 2;
    }
    if (n > 1) {
        rv = submit_many(cli, paths, n, no_wait);
        free(paths);
        return rv;
    }
    path = paths[0];
    free(paths);
    if (tr_cli_connect(cli) != 0) {
        return 1;
    }
    if (troupe_submit_file(cli->client, path, &id, &err) != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        troupe_client_close(cli->client);
        return 1;
    }
    if (cli->json) {
        printf("{\"job_id\":%" PRIu64 "}\n", id);
    } else {
        printf("%" PRIu64 "\n", id);
    }
    fflush(stdout);
    rv = 0;
    if (!no_wait) {
        signal(SIGINT, on_sigint);
        fprintf(stderr, "troupe: following job %" PRIu64 " (Ctrl-C detaches; the job keeps running)\n", id);
        rv = follow(cli, id, NULL);
    }
    troupe_client_close(cli->client);
    return rv;
}

int tr_cli_cmd_logs(tr_cli *cli, int argc, char **argv)
{
    const char *worker = NULL;
    uint64_t id = 0, offset = 0;
    int follow_flag = 0, done = 0, rv;
    troupe_error err;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--follow") == 0) {
            follow_flag = 1;
        } else if (strcmp(argv[i], "--worker") == 0 && i + 1 < argc) {
            worker = argv[++i];
        } else if (id == 0 && argv[i][0] != '-') {
            if ((rv = parse_id(argv[i], &id)) != 0) {
                return rv;
            }
        } else {
            fprintf(stderr, "usage: troupe logs ID [-f] [--worker NAME]\n");
            return 2;
        }
    }
    if (id == 0) {
        fprintf(stderr, "usage: troupe logs ID [-f] [--worker NAME]\n");
        return 2;
    }
    if (tr_cli_connect(cli) != 0) {
        return 1;
    }
    if (follow_flag) {
        signal(SIGINT, on_sigint);
        rv = follow(cli, id, worker);
        troupe_client_close(cli->client);
        return rv == 130 ? 0 : rv;
    }
    for (;;) { /* everything written so far */
        char *data = NULL;
        size_t len = 0;
        uint64_t next = offset;
        if (troupe_read_logs(cli->client, id, worker, offset, 0, &data, &len, &next, &done, &err) !=
            TROUPE_OK) {
            tr_cli_fail(cli, &err);
            troupe_client_close(cli->client);
            return 1;
        }
        fwrite(data, 1, len, stdout);
        troupe_free(data);
        if (next == offset) {
            break;
        }
        offset = next;
    }
    troupe_client_close(cli->client);
    return 0;
}

static size_t count_active(const troupe_job *j)
{
    size_t n = 0;
    for (size_t i = 0; i < j->n_workers; i++) {
        n += j->workers[i].state == TROUPE_WORKER_RUNNING || j->workers[i].state == TROUPE_WORKER_PENDING;
    }
    return n;
}

/* wait_stopped waits (60 s) until no worker of any of the jobs runs. */
static int wait_stopped(tr_cli *cli, const uint64_t *ids, size_t n)
{
    int64_t until = now_ms() + 60000; /* covers the default 10 s grace period */
    for (size_t i = 0; i < n; i++) {
        uint64_t version = 0;
        for (;;) {
            troupe_job *j = NULL;
            troupe_error err;
            size_t left;
            if (now_ms() >= until) {
                fprintf(stderr,
                        "troupe: job %" PRIu64
                        " still has workers running after 60 s (see troupe job %" PRIu64 ")\n",
                        ids[i], ids[i]);
                return 1;
            }
            if (troupe_wait_job(cli->client, ids[i], version, 1000, &j, &err) != TROUPE_OK) {
                tr_cli_fail(cli, &err);
                return 1;
            }
            version = j->version;
            left = count_active(j);
            troupe_job_free(j);
            if (left == 0) {
                fprintf(stderr, "troupe: job %" PRIu64 " STOPPED; no worker left running\n", ids[i]);
                break;
            }
        }
    }
    return 0;
}

/* stop_ids stops one job (StopJob) or several (one StopJobs call). */
static int stop_ids(tr_cli *cli, const uint64_t *ids, size_t n, uint64_t *stopped, size_t *n_stopped)
{
    troupe_batch *b = NULL;
    troupe_error err;
    int rv = 0;

    *n_stopped = 0;
    if (n == 1) {
        if (troupe_stop_job(cli->client, ids[0], &err) != TROUPE_OK) {
            tr_cli_fail(cli, &err);
            return 1;
        }
        stopped[(*n_stopped)++] = ids[0];
        return 0;
    }
    troupe_stop_batch(cli->client, ids, n, &b, &err);
    if (b == NULL) {
        tr_cli_fail(cli, &err);
        return 1;
    }
    if (cli->json) {
        batch_json(b, NULL, "id");
    }
    for (size_t i = 0; i < b->count; i++) {
        if (b->items[i].code == TROUPE_OK) {
            stopped[(*n_stopped)++] = ids[i];
        } else {
            fprintf(stderr, "troupe: job %" PRIu64 ": %s: %s\n", ids[i], troupe_strerror(b->items[i].code),
                    b->items[i].message);
            rv = 1;
        }
    }
    troupe_batch_free(b);
    return rv;
}

int tr_cli_cmd_stop(tr_cli *cli, int argc, char **argv)
{
    uint64_t *ids = calloc((size_t)argc, sizeof(*ids)), *stopped = calloc((size_t)argc, sizeof(*ids));
    size_t n = 0, n_stopped = 0;
    int no_wait = 0, rv = 2;

    for (int i = 1; ids != NULL && stopped != NULL && i < argc; i++) {
        if (strcmp(argv[i], "--no-wait") == 0) {
            no_wait = 1;
        } else if (argv[i][0] != '-') {
            if (parse_id(argv[i], &ids[n++]) != 0) {
                goto out;
            }
        } else {
            n = 0;
            break;
        }
    }
    if (n == 0 || n > TROUPE_BATCH_MAX) {
        fprintf(stderr, "usage: troupe stop ID [ID ...] [--no-wait]\n");
        goto out;
    }
    if (tr_cli_connect(cli) != 0) {
        rv = 1;
        goto out;
    }
    rv = stop_ids(cli, ids, n, stopped, &n_stopped);
    for (size_t i = 0; i < n_stopped; i++) {
        fprintf(stderr,
                "troupe: job %" PRIu64 " stopping (SIGTERM, then SIGKILL after the node's grace period)\n",
                stopped[i]);
    }
    if (!no_wait && n_stopped > 0) {
        rv |= wait_stopped(cli, stopped, n_stopped);
    }
    troupe_client_close(cli->client);
out:
    free(ids);
    free(stopped);
    return rv;
}
