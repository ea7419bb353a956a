/* cmd_trace.c - `troupe trace JOB [--output FILE]`: the job's built-in trace (the
 * spans its workers recorded in their profiled steps, on the head's clock) as
 * Chrome/Perfetto trace-event JSON: {"traceEvents": [...]} with one process
 * per worker (pid = its global rank, named after it), a thread per worker
 * thread, complete ("X") events in microseconds from the trace's first span,
 * sorted per thread by start (the enclosing span first), so they nest. It
 * opens in https://ui.perfetto.dev and chrome://tracing.
 *
 * The trace is always JSON (-o json is accepted, any other format refused by
 * main.c); --output FILE is opened here, once there is a trace to write, so
 * a job without one leaves no empty file. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "trace_json.h"

static const char trace_usage[] = "usage: troupe trace JOB [--output FILE]\n";

/* summary: "steps 2..3" from the spans. */
static void step_range(const troupe_trace *t, uint64_t *lo, uint64_t *hi)
{
    *lo = UINT64_MAX;
    *hi = 0;
    for (size_t i = 0; i < t->n_spans; i++) {
        *lo = t->spans[i].step < *lo ? t->spans[i].step : *lo;
        *hi = t->spans[i].step > *hi ? t->spans[i].step : *hi;
    }
}

int tr_cli_cmd_trace(tr_cli *cli, int argc, char **argv)
{
    const char *path = cli->output_file;
    troupe_trace *t = NULL;
    troupe_error err;
    uint64_t id = 0, lo, hi, dropped = 0;
    char *end = NULL;
    FILE *out = stdout;
    int have_id = 0, rv;

    for (int i = 1; i < argc; i++) {
        if (argv[i][0] != '-' && !have_id) {
            id = strtoull(argv[i], &end, 10);
            if (argv[i][0] == '\0' || *end != '\0') {
                fprintf(stderr, "troupe trace: '%s' is not a job id\n", argv[i]);
                return TR_EXIT_USAGE;
            }
            have_id = 1;
        } else {
            fprintf(stderr, "troupe trace: unexpected '%s'\n%s", argv[i], trace_usage);
            return TR_EXIT_USAGE;
        }
    }
    if (!have_id) {
        fputs(trace_usage, stderr);
        return TR_EXIT_USAGE;
    }
    if (tr_cli_connect(cli) != 0) {
        return TR_EXIT_FAILED;
    }
    rv = troupe_get_trace(cli->client, id, &t, &err);
    troupe_client_close(cli->client);
    if (rv != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        return TR_EXIT_FAILED;
    }
    if (t->n_spans == 0) {
        fprintf(stderr,
                "troupe trace: job %" PRIu64 " has no trace yet: no worker has sent spans of a profiled step "
                "(profile them with `profile:` in the spec or troupe profile; workers send spans when the profiled "
                "range ends and when they exit)\n",
                id);
        troupe_trace_free(t);
        return TR_EXIT_FAILED;
    }
    if (path != NULL && (out = fopen(path, "w")) == NULL) {
        fprintf(stderr, "troupe trace: cannot write %s: %m\n", path);
        troupe_trace_free(t);
        return TR_EXIT_FAILED;
    }
    rv = tr_cli_trace_json(out, id, t);
    if (path != NULL && fclose(out) != 0) {
        fprintf(stderr, "troupe trace: writing %s failed: %m\n", path);
        rv = -1;
    }
    if (rv == 0 && path != NULL) {
        step_range(t, &lo, &hi);
        for (size_t i = 0; i < t->n_workers; i++) {
            dropped += t->workers[i].dropped;
        }
        printf("job %" PRIu64 ": %zu spans of %zu worker%s (steps %" PRIu64 "..%" PRIu64 "%s) written to %s; open it "
               "in https://ui.perfetto.dev\n",
               id, t->n_spans, t->n_workers, tr_cli_plural((uint32_t)t->n_workers), lo, hi,
               dropped ? ", some spans dropped: see otherData.workers" : "", path);
    }
    troupe_trace_free(t);
    return rv == 0 ? TR_EXIT_OK : TR_EXIT_FAILED;
}
