/* under_troupe.c - troupe-train under troupe (see under_troupe.h). */
#include "under_troupe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "troupe/worker.h"

struct tr_troupe {
    troupe_worker_ctx *w;
    char note[256]; /* the profiler note logged last */
    int traced;     /* the step begun last is profiled: its phases go into the trace */
};

int tr_troupe_open(tr_troupe **out, tr_err *err)
{
    troupe_error e = {0};
    tr_troupe *t;

    *out = NULL;
    if (getenv("TROUPE_JOB") == NULL) {
        return TROUPE_OK;
    }
    if ((t = calloc(1, sizeof(*t))) == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot allocate the worker runtime");
    }
    if (troupe_worker_open(&t->w, NULL, &e) != TROUPE_OK) {
        free(t);
        return tr_err_set(err, e.code, "worker runtime: %s", e.message);
    }
    const troupe_worker_self *s = troupe_worker_self_info(t->w);
    TR_LOG(TR_LOG_NOTICE, "under troupe: job %llu worker %s group %s rank %u of %u attempt %u",
           (unsigned long long)s->job_id, s->worker, s->group, s->rank, s->world_size, s->attempt);
    *out = t;
    return TROUPE_OK;
}

static int step_begin(int64_t step, void *user, tr_err *err)
{
    tr_troupe *t = user;
    int profile = 0;
    troupe_status st = troupe_worker_step_begin(t->w, (uint64_t)step, &profile);

    if (st != TROUPE_OK) {
        return tr_err_set(err, st, "troupe_worker_step_begin(%lld): %s", (long long)step,
                          troupe_strerror(st));
    }
    const char *note = troupe_worker_profile_note(t->w);
    if (strcmp(note, t->note) != 0) {
        snprintf(t->note, sizeof(t->note), "%s", note);
        TR_LOG(TR_LOG_NOTICE, "profiler: %s", note);
    }
    if (profile) {
        TR_LOG(TR_LOG_NOTICE, "profiling step %lld", (long long)step);
    }
    t->traced = profile;
    return TROUPE_OK;
}

static int traced(void *user)
{
    return ((tr_troupe *)user)->traced;
}

/* us truncates like the runtime's own clock reads (ns / 1000), so a span
 * that encloses a runtime span (grad all-reduce around the collective's
 * all-reduce) still does after both are cut to microseconds; the added
 * nanosecond absorbs the double's rounding of ms * 1e3. */
static int64_t us(double ms)
{
    return (int64_t)floor(ms * 1e3 + 1e-3);
}

/* span: a phase troupe-train timed (train.c), into the built-in trace. */
static void span(const char *name, double t0_ms, double t1_ms, void *user)
{
    tr_troupe *t = user;
    troupe_worker_span_record(t->w, name, us(t0_ms), us(t1_ms));
}

/* figures_of maps troupe-train's step figures onto the worker API's
 * standard ones (the names of its JSON lines). Memory is the GPU's only on a
 * GPU backend; on the CPU it is host memory, reported under its own names. */
static void figures_of(const tr_train_metrics *m, troupe_step_figures *f)
{
    int gpu = m->backend != NULL && strcmp(m->backend, "cpu") != 0;

    troupe_step_figures_init(f);
    f->loss = m->loss;
    f->tokens_per_s = m->tokens_per_s;
    f->mfu = m->mfu; /* NaN on the CPU: not reported */
    f->step_ms = m->step_ms;
    f->forward_ms = m->phase.forward_ms;
    f->backward_ms = m->phase.backward_ms;
    f->optimizer_ms = m->phase.optimizer_ms;
    if (gpu) {
        f->gpu_mem_in_use_bytes = (double)m->mem.in_use_bytes;
        f->gpu_mem_peak_bytes = (double)m->mem.peak_bytes;
        f->gpu_mem_total_bytes = m->mem.total_bytes > 0 ? (double)m->mem.total_bytes : NAN;
    }
}

/* step_end ends the step in the worker API with its figures, and reports
 * the rest of what troupe-train prints per step as named metrics. A point
 * the full buffer dropped is counted by the runtime (troupe metrics shows
 * it); training goes on either way. */
static void step_end(int64_t step, const tr_train_metrics *m, void *user)
{
    tr_troupe *t = user;
    troupe_step_figures f;

    if (m == NULL) {
        troupe_worker_step_end(t->w, (uint64_t)step, NULL);
        return;
    }
    figures_of(m, &f);
    troupe_worker_step_end(t->w, (uint64_t)step, &f);
    troupe_worker_metric(t->w, (uint64_t)step, "grad_norm", m->grad_norm);
    troupe_worker_metric(t->w, (uint64_t)step, "lr", m->lr);
    troupe_worker_metric(t->w, (uint64_t)step, "tokens", (double)m->tokens);
    if (!isnan(m->mfu_gemm)) {
        troupe_worker_metric(t->w, (uint64_t)step, "mfu_gemm", m->mfu_gemm);
    }
    if (isnan(f.gpu_mem_in_use_bytes)) { /* the CPU backend: host memory */
        troupe_worker_metric(t->w, (uint64_t)step, "mem_in_use_bytes", (double)m->mem.in_use_bytes);
        troupe_worker_metric(t->w, (uint64_t)step, "mem_peak_bytes", (double)m->mem.peak_bytes);
    }
}

void tr_troupe_report_eval(tr_troupe *t, const tr_train_metrics *m)
{
    if (t != NULL && !isnan(m->val_loss)) {
        troupe_worker_metric(t->w, (uint64_t)m->step, "val_loss", m->val_loss);
    }
}

void tr_troupe_hooks(tr_troupe *t, tr_train_hooks *h)
{
    *h = (tr_train_hooks){.begin = step_begin, .end = step_end, .span = span, .traced = traced, .user = t};
}

int tr_troupe_should_stop(const tr_troupe *t)
{
    return t != NULL && troupe_worker_should_stop(t->w);
}

troupe_worker_ctx *tr_troupe_worker(tr_troupe *t)
{
    return t->w;
}

void tr_troupe_close(tr_troupe *t)
{
    if (t == NULL) {
        return;
    }
    troupe_worker_close(t->w);
    free(t);
}
