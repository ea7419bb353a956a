/* train_hooks.h - step boundaries of the training loop, for the worker
 * runtime (kept out of train.h so the CUDA backend, which includes train.h,
 * does not rebuild when hooks change).
 *
 * begin runs before optimiser step `step` (1-based, as NeMo RL counts: the
 * first step of a run is 1, a resumed run goes on from the checkpoint's
 * step + 1) and end right after its forward, backward and optimiser update
 * with the step's figures (m; NULL when the step failed), before evaluation
 * and checkpoints. A non-OK status from begin stops training with that
 * error.
 *
 * span (may be NULL) records, for the built-in trace, a phase of the step in
 * progress that has just ended: forward and backward (per micro-batch),
 * "grad all-reduce" (data parallel) and optimizer, t0_ms/t1_ms on
 * CLOCK_MONOTONIC in milliseconds. It is called only for steps that traced
 * (may be NULL: every step) says are traced, asked right after begin, so an
 * untraced step costs a few clock reads and no event query or sync. On the GPU
 * the times are the device's (CUDA events, placed on the host clock by the
 * synchronisation that ends each phase anyway; see train.c). */
#ifndef TR_TRAIN_HOOKS_H
#define TR_TRAIN_HOOKS_H

#include "train.h"

typedef struct tr_train_hooks {
    int (*begin)(int64_t step, void *user, tr_err *err);
    void (*end)(int64_t step, const tr_train_metrics *m, void *user);
    void (*span)(const char *name, double t0_ms, double t1_ms, void *user);
    int (*traced)(void *user);
    void *user;
} tr_train_hooks;

/* tr_train_run_hooked is tr_train_run with step hooks (hooks may be NULL). */
int tr_train_run_hooked(const tr_train_config *cfg, const tr_train_hooks *hooks, tr_train_on_step cb,
                        void *user, tr_err *err);

#endif
