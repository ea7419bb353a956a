/* live.h - what `troupe submit` and `troupe logs -f` show while a job runs.
 *
 * The follow loop feeds the live view the job's output as it arrives and the
 * job itself at every change; the view keeps, per worker, the latest figures
 * of its step lines ("[jobN-GROUP-R] ... step=N[/M] loss=X ... tok_s=Y", the
 * format of troupe-train and of anything that prints the same keys), and
 * draws one line per group: workers running, latest step, loss, tokens/s of
 * the whole group, and its slowest rank. On a terminal the block is redrawn
 * in place; elsewhere (--live on a pipe) it is written as plain lines when it
 * changed, at most once per interval. The same figures make the run summary
 * printed once the job ended.
 *
 * Ownership: tr_live_new returns a view the caller frees with tr_live_free;
 * nothing passed in is kept (job figures are copied). Not thread-safe: one
 * follow loop owns it. */
#ifndef TR_CLI_LIVE_H
#define TR_CLI_LIVE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "troupe/client.h"

typedef struct tr_live tr_live;

/* tr_live_new: a view of job id writing to out; tty: redraw in place with
 * ANSI escapes, lines cut to width columns (0: unknown, not cut), else plain
 * lines at most every interval_ms. NULL on OOM. */
tr_live *tr_live_new(uint64_t id, FILE *out, int tty, int width, int64_t interval_ms);
void tr_live_free(tr_live *l);

/* tr_live_feed takes a chunk of the job's output (whole or partial lines,
 * each prefixed "[worker] "); step lines update their worker, other lines
 * are kept in a short tail shown if the job fails. */
void tr_live_feed(tr_live *l, const char *data, size_t len);

/* tr_live_job takes the job's current state: groups, workers and their
 * states, ranks and nodes. */
void tr_live_job(tr_live *l, const troupe_job *j);

/* tr_live_draw writes the status block if it changed (and, without a
 * terminal, the interval passed), or always with force. now_ms: wall clock. */
void tr_live_draw(tr_live *l, int64_t now_ms, int force);

/* tr_live_clear erases the block on a terminal so that a line can be written
 * above it (the next draw puts it back); a no-op elsewhere. */
void tr_live_clear(tr_live *l);

/* tr_live_summary writes, for each group that reported steps, its steps,
 * final loss and mean tokens/s per worker; after a failure, the last lines
 * of output the view had hidden. */
void tr_live_summary(tr_live *l, const troupe_job *j, int show_tail);

/* tr_live_group_line formats group k's line into buf (tests and -o json);
 * returns 0, or -1 when there is no such group. */
int tr_live_group_line(const tr_live *l, size_t k, char *buf, size_t size);

#endif
