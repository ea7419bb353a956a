/* under_troupe.h - troupe-train as a troupe worker: the worker API around
 * each step (profiling control). The group's communicator is comm_troupe.h's. Standalone (TROUPE_JOB unset)
 * none of this happens. */
#ifndef TR_TRAIN_UNDER_TROUPE_H
#define TR_TRAIN_UNDER_TROUPE_H

#include "err.h"
#include "train_hooks.h"
#include "troupe/worker.h"

typedef struct tr_troupe tr_troupe;

/* tr_troupe_open opens the worker API when the worker environment is there
 * (TROUPE_JOB set); *out stays NULL when it is not (a standalone run). A
 * worker environment that does not open (a variable missing, the head
 * unreachable) is an error: training would run unseen by troupe. */
int tr_troupe_open(tr_troupe **out, tr_err *err);

/* tr_troupe_hooks fills h with step_begin/_end calls of the worker API that
 * log each profiled step and each profiler action; step_end reports the
 * step's figures (troupe_worker_step_end) and its other printed metrics. */
void tr_troupe_hooks(tr_troupe *t, tr_train_hooks *h);

/* tr_troupe_report_eval reports the step's val_loss (when it was evaluated)
 * as a metric; the other figures go out at the step's end (hooks). NULL t:
 * nothing. */
void tr_troupe_report_eval(tr_troupe *t, const tr_train_metrics *m);

/* tr_troupe_should_stop: the head asked this worker to stop. */
int tr_troupe_should_stop(const tr_troupe *t);

/* tr_troupe_worker: the worker API handle (for the group's communicator,
 * comm_troupe.h); borrowed, lives until tr_troupe_close. */
troupe_worker_ctx *tr_troupe_worker(tr_troupe *t);

/* tr_troupe_close releases the worker API; NULL is a no-op. Close the
 * communicator first. */
void tr_troupe_close(tr_troupe *t);

#endif
