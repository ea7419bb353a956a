/* follow.c - following a job for `troupe submit` and `troupe logs -f`: its
 * lifecycle lines, its output (--raw) or a live status per group (live.c),
 * the final state once and a summary of the run. */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli.h"
#include "json.h"
#include "live.h"
#include "text.h"

volatile sig_atomic_t tr_cli_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    tr_cli_interrupted = 1;
}

void tr_cli_catch_sigint(void)
{
    signal(SIGINT, on_sigint);
}

int tr_cli_terminal(int state)
{
    return state >= TROUPE_JOB_SUCCEEDED;
}

int tr_cli_gave_up(int64_t *lost_since, const troupe_error *err, const char *what)
{
    if (*lost_since == 0) {
        fprintf(stderr, "troupe: lost contact with the head (%s); retrying for 60 s\n", err->message);
        *lost_since = tr_cli_now_ms();
        return 0;
    }
    if (tr_cli_now_ms() - *lost_since > 60000) {
        fprintf(stderr, "troupe: head unreachable for 60 s; %s\n", what);
        return TR_EXIT_FAILED;
    }
    return 0;
}

/* print_placement says which worker runs on which node and GPUs (the first
 * 16; troupe job has them all). */
static void print_placement(const troupe_job *j, uint64_t id)
{
    for (size_t i = 0; i < j->n_workers && i < 16; i++) {
        char gpus[128];
        tr_cli_gpus_str(&j->workers[i], gpus, sizeof(gpus));
        fprintf(stderr, "troupe: job %" PRIu64 "   %-24s rank %u on %s, GPUs %s\n", id, j->workers[i].name,
                j->workers[i].rank, j->workers[i].node_name, gpus[0] ? gpus : "none");
    }
    if (j->n_workers > 16) {
        fprintf(stderr, "troupe: job %" PRIu64 "   ... and %zu more (troupe job %" PRIu64 ")\n", id,
                j->n_workers - 16, id);
    }
}

/* print_events writes history entries the caller has not seen yet; *seen
 * counts entries since the job began (dropped ones included). */
static void print_events(const troupe_job *j, uint64_t id, size_t *seen)
{
    size_t total = j->events_dropped + j->n_events;
    for (size_t k = *seen; k < total; k++) {
        if (k < j->events_dropped) {
            continue;
        }
        const troupe_job_event *e = &j->events[k - j->events_dropped];
        if (strcmp(e->kind, "SUCCEEDED") == 0 || strcmp(e->kind, "FAILED") == 0 ||
            strcmp(e->kind, "STOPPED") == 0) {
            continue; /* the final state is said once, by follow, after the last output */
        }
        fprintf(stderr, "troupe: job %" PRIu64 " %s: %s\n", id, e->kind, e->message);
        if (strcmp(e->kind, "STARTED") == 0) {
            print_placement(j, id);
        }
    }
    *seen = total;
}

/* write_chunk writes worker output: as is, or with -o json as one
 * {"job_id":N,"text":"..."} object per chunk. */
static void write_chunk(const tr_cli *cli, uint64_t id, const char *data, size_t len)
{
    if (len == 0) {
        return;
    }
    if (cli->json) {
        printf("{\"job_id\":%" PRIu64 ",\"text\":", id);
        tr_json_strn(stdout, data, len);
        fputs("}\n", stdout);
    } else {
        fwrite(data, 1, len, stdout);
    }
    fflush(stdout);
}

/* The state a follow loop carries between polls. */
typedef struct follow_state {
    uint64_t offset, version;
    int state, done;
    char reason[512];
    size_t seen;
    tr_live *live;
    int show_live;
} follow_state;

/* said: lifecycle lines and the PENDING reason, above the live block. */
static void said(follow_state *f, const troupe_job *j, uint64_t id)
{
    size_t total = j->events_dropped + j->n_events;
    int pending_changed =
        j->state == TROUPE_JOB_PENDING && ((int)j->state != f->state || strcmp(f->reason, j->reason) != 0);
    if (f->show_live && (total != f->seen || pending_changed)) {
        tr_live_clear(f->live);
    }
    print_events(j, id, &f->seen);
    /* Why a job waits is not history, just its current reason. */
    if (pending_changed) {
        char shown[1024];
        fprintf(stderr, "troupe: job %" PRIu64 " PENDING: %s\n", id, tr_text_escape(shown, sizeof(shown), j->reason));
    }
    f->state = (int)j->state;
    snprintf(f->reason, sizeof(f->reason), "%s", j->reason);
}

/* finish says the final state once, the run's summary and, when the live
 * view hid the output of a failed job, its last lines. */
static int finish(tr_cli *cli, follow_state *f, const troupe_job *j, uint64_t id)
{
    int ok = j->state == TROUPE_JOB_SUCCEEDED;
    char shown[1024];
    if (f->show_live) {
        tr_live_clear(f->live);
    }
    fprintf(stderr, "troupe: job %" PRIu64 " %s after %.1f s: %s\n", id, troupe_job_state_name(j->state),
            tr_cli_secs(j->started_ms ? j->started_ms : j->submitted_ms, j->ended_ms),
            tr_text_escape(shown, sizeof(shown), j->reason));
    int stopping;
    int64_t run_end = tr_cli_job_end_ms(j, tr_cli_now_ms(), &stopping);
    fprintf(stderr, "troupe: job %" PRIu64 " time: queued %.1f s, ran %.1f s%s, %u restart%s\n", j->id,
            tr_cli_secs(j->submitted_ms, j->started_ms ? j->started_ms : j->ended_ms),
            tr_cli_secs(j->started_ms, run_end), stopping ? " (workers still stopping)" : "", j->restarts,
            tr_cli_plural(j->restarts));
    tr_live_summary(f->live, j, f->show_live && !ok);
    if (cli->json) {
        tr_cli_job_json(stdout, j);
        fputc('\n', stdout);
    }
    return ok ? TR_EXIT_OK : TR_EXIT_FAILED;
}

/* want_live: AUTO shows the live view on a terminal, for the whole job (one
 * worker's output asked for with --worker is shown as is). */
static int want_live(const tr_cli *cli, tr_follow_view view, const char *worker)
{
    if (view == TR_FOLLOW_AUTO) {
        return !cli->json && worker == NULL && isatty(STDOUT_FILENO) && isatty(STDERR_FILENO);
    }
    return view == TR_FOLLOW_LIVE;
}

/* poll_once reads new output and then the job (its events, STARTED and the
 * placement above all, are said before the output that followed them). */
static int poll_once(tr_cli *cli, follow_state *f, uint64_t id, const char *worker, troupe_job **j, char **data,
                     size_t *len, troupe_error *err)
{
    int rv = troupe_read_logs(cli->client, id, worker, f->offset, 500, data, len, &f->offset, &f->done, err);
    if (rv == TROUPE_OK) {
        rv = troupe_wait_job(cli->client, id, f->version, 0, j, err);
    }
    if (rv != TROUPE_OK) {
        troupe_free(*data);
        *data = NULL;
        *len = 0;
    }
    return rv;
}

int tr_cli_follow(tr_cli *cli, uint64_t id, const char *worker, tr_follow_view view)
{
    follow_state f = {.state = -1};
    int64_t lost_since = 0;
    int rv = TR_EXIT_DETACHED;
    troupe_error err;

    f.show_live = want_live(cli, view, worker);
    int tty = f.show_live && isatty(STDERR_FILENO);
    struct winsize ws = {0};
    if (tty && ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) != 0) {
        ws.ws_col = 0;
    }
    /* A terminal is redrawn every second (its clock moves); plain lines are
     * written when they changed, at most every 2 s. */
    f.live = tr_live_new(id, stderr, tty, ws.ws_col, tty ? 1000 : 2000);
    if (f.live == NULL) {
        fprintf(stderr, "troupe: out of memory\n");
        return TR_EXIT_FAILED;
    }
    while (!tr_cli_interrupted) {
        troupe_job *j = NULL;
        char *data = NULL;
        size_t len = 0;
        int prv = poll_once(cli, &f, id, worker, &j, &data, &len, &err);
        if (prv == TROUPE_UNAVAILABLE || prv == TROUPE_DEADLINE_EXCEEDED) {
            char what[64];
            snprintf(what, sizeof(what), "the job may still be running (troupe job %" PRIu64 ")", id);
            if (tr_cli_gave_up(&lost_since, &err, what)) {
                rv = TR_EXIT_FAILED;
                break;
            }
            continue;
        }
        if (prv != TROUPE_OK) {
            tr_live_clear(f.live);
            tr_cli_fail(cli, &err);
            rv = TR_EXIT_FAILED;
            break;
        }
        lost_since = 0;
        f.version = j->version;
        said(&f, j, id);
        if (!f.show_live) {
            write_chunk(cli, id, data, len);
        }
        tr_live_feed(f.live, data, len);
        tr_live_job(f.live, j);
        troupe_free(data);
        if (tr_cli_terminal(j->state) && f.done) {
            rv = finish(cli, &f, j, id);
            troupe_job_free(j);
            break;
        }
        if (f.show_live && j->state != TROUPE_JOB_PENDING) {
            tr_live_draw(f.live, tr_cli_now_ms(), 0);
        }
        troupe_job_free(j);
    }
    if (rv == TR_EXIT_DETACHED) {
        tr_live_clear(f.live);
        fprintf(stderr,
                "\ntroupe: detached; job %" PRIu64 " keeps running (troupe logs -f %" PRIu64
                ", troupe stop %" PRIu64 ")\n",
                id, id, id);
    }
    tr_live_free(f.live);
    return rv;
}

int tr_cli_follow_flag(const char *arg, tr_follow_view *view)
{
    if (strcmp(arg, "--raw") == 0) {
        *view = TR_FOLLOW_RAW;
    } else if (strcmp(arg, "--live") == 0) {
        *view = TR_FOLLOW_LIVE;
    } else {
        return 0;
    }
    return 1;
}
