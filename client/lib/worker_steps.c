/* worker_steps.c - the worker runtime's control thread and step path.
 *
 * One background thread keeps a long poll (WorkerControl) open to the head;
 * the head answers when the job's profile setting changes or it wants the
 * worker to stop. The thread stores what it got under w->mu and bumps
 * control_version; the step path only compares that number with the one it
 * resolved last, so step_begin/_end never touch the network.
 *
 * Profiling follows NeMo RL: at the start of each step, start the CUDA
 * profiler when the step is in range and it is off, stop it when the step is
 * out of range and it is on (so the capture ends where the next step
 * begins), and stop at close. libcudart and libnvToolsExt are loaded with
 * dlopen on first need: the library links neither. */
#include <ctype.h>
#include <dlfcn.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker_int.h"

#define POLL_MS 20000
#define POLL_MARGIN_MS 5000

/* parse_range reads "A:B" (validated by the head or at submit); 0:0 when
 * s is not a range. */
static void parse_range(const char *s, int *start, int *stop)
{
    int a = 0, b = 0;
    *start = *stop = 0;
    if (s != NULL && sscanf(s, "%d:%d", &a, &b) == 2 && a >= 1 && b > a) {
        *start = a;
        *stop = b;
    }
}

void tr_wk_control_init(troupe_worker_ctx *w)
{
    const char *steps = getenv("TROUPE_PROFILE_STEPS"), *workers = getenv("TROUPE_PROFILE_WORKERS");

    if (steps == NULL || steps[0] == '\0') {
        steps = getenv("NRL_NSYS_PROFILE_STEP_RANGE");
        workers = getenv("NRL_NSYS_WORKER_PATTERNS");
    }
    memset(&w->control, 0, sizeof(w->control));
    parse_range(steps, &w->control.start, &w->control.stop);
    tr_strlcpy(w->control.workers, workers ? workers : "", sizeof(w->control.workers));
    w->control.off = w->control.stop == 0;
    atomic_store(&w->control_version, 1);
}

/* apply stores a control the head sent; version 0 means "never set at run
 * time": the spec's setting (from the environment) stays. */
static void apply(troupe_worker_ctx *w, const Troupe__V1__WorkerControlReply *rep)
{
    const Troupe__V1__ProfileControl *pc = rep->control;

    if (rep->stop) {
        atomic_store(&w->stop_requested, 1);
    }
    if (rep->membership != NULL) {
        pthread_mutex_lock(&w->mu);
        w->member.epoch = rep->membership->epoch;
        w->member.rank = rep->membership->rank;
        w->member.size = rep->membership->size;
        w->member_removed = rep->membership->removed;
        w->member_known = 1;
        pthread_cond_broadcast(&w->member_cv);
        pthread_mutex_unlock(&w->mu);
    }
    if (rep->stop) {
        pthread_mutex_lock(&w->mu);
        pthread_cond_broadcast(&w->member_cv); /* an await_membership ends now */
        pthread_mutex_unlock(&w->mu);
    }
    if (pc == NULL || pc->version == 0) {
        return;
    }
    pthread_mutex_lock(&w->mu);
    if (pc->version != w->control.version) {
        memset(&w->control, 0, sizeof(w->control));
        w->control.version = pc->version;
        w->control.off = pc->off;
        parse_range(pc->steps, &w->control.start, &w->control.stop);
        w->control.next = pc->next;
        w->control.align = pc->align;
        tr_strlcpy(w->control.workers, pc->workers ? pc->workers : "", sizeof(w->control.workers));
        atomic_fetch_add(&w->control_version, 1);
    }
    pthread_mutex_unlock(&w->mu);
}

/* pause_ms waits between failed polls, returning early when close asks. */
static void pause_ms(troupe_worker_ctx *w, int ms)
{
    for (int t = 0; t < ms && !atomic_load(&w->quit); t += 50) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void *control_main(void *arg)
{
    troupe_worker_ctx *w = arg;
    uint64_t after = 0;
    int backoff = 50, first = 1;

    while (!atomic_load(&w->quit)) {
        Troupe__V1__WorkerControlRequest req = TROUPE__V1__WORKER_CONTROL_REQUEST__INIT;
        Troupe__V1__WorkerControlReply *rep = NULL;
        Troupe__V1__WorkerRef ref;
        tr_err e;
        int rv;

        tr_wk_ref(w, &ref);
        req.from = &ref;
        req.after_version = after;
        /* The first call is answered at once: an elastic group's member
         * learns its membership, and later polls name the epoch it knows. */
        req.wait_ms = first ? 0 : POLL_MS;
        pthread_mutex_lock(&w->mu);
        req.knows_membership = w->member_known;
        req.membership_epoch = w->member.epoch;
        pthread_mutex_unlock(&w->mu);
        rv = tr_rpc_client_call(w->rpc, "troupe.v1.Head/WorkerControl", &req.base,
                                &troupe__v1__worker_control_reply__descriptor, (ProtobufCMessage **)&rep,
                                POLL_MS + POLL_MARGIN_MS, 0, &e);
        if (rv == TROUPE_OK) {
            int stop = rep->stop;
            apply(w, rep);
            after = rep->version;
            first = 0;
            protobuf_c_message_free_unpacked(&rep->base, NULL);
            if (stop) {
                break; /* nothing more will come for this attempt */
            }
            backoff = 50;
            continue;
        }
        if (rv == TROUPE_FAILED_PRECONDITION || rv == TROUPE_NOT_FOUND || rv == TROUPE_PERMISSION_DENIED) {
            /* The job ended or this attempt was superseded: nothing more will
             * come; the worker should wind down. */
            atomic_store(&w->stop_requested, 1);
        }
        /* The head is away (or restarting). Retried here rather than by the
         * RPC layer, so that close (which shuts the socket) ends the loop at
         * once instead of after the poll's deadline. */
        pause_ms(w, backoff);
        backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
    }
    return NULL;
}

int tr_wk_control_start(troupe_worker_ctx *w, tr_err *e)
{
    if (pthread_create(&w->thread, NULL, control_main, w) != 0) {
        return tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "cannot start the worker's control thread");
    }
    w->thread_started = 1;
    return TROUPE_OK;
}

void tr_wk_control_stop(troupe_worker_ctx *w)
{
    if (!w->thread_started) {
        return;
    }
    atomic_store(&w->quit, 1);
    tr_rpc_client_shutdown(w->rpc); /* the long poll returns at once */
    pthread_join(w->thread, NULL);
    w->thread_started = 0;
}

TROUPE_API int troupe_worker_should_stop(const troupe_worker_ctx *w)
{
    return atomic_load(&((troupe_worker_ctx *)w)->stop_requested);
}

TROUPE_API const char *troupe_worker_profile_note(const troupe_worker_ctx *w)
{
    return w->note;
}

/* ---- CUDA profiler and NVTX, loaded at run time ------------------------------ */

static void *open_first(const char *env, const char *const *names)
{
    const char *forced = getenv(env);
    void *h = NULL;

    if (forced != NULL && forced[0] != '\0') {
        return dlopen(forced, RTLD_NOW | RTLD_LOCAL);
    }
    for (size_t i = 0; h == NULL && names[i] != NULL; i++) {
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    }
    return h;
}

static void load_libs(troupe_worker_ctx *w)
{
    static const char *const cudart[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                         NULL};
    static const char *const nvtx[] = {"libnvToolsExt.so.1", "libnvToolsExt.so", NULL};

    if (w->libs_tried) {
        return;
    }
    w->libs_tried = 1;
    if ((w->cudart = open_first("TROUPE_CUDART", cudart)) != NULL) {
        *(void **)&w->prof_start = dlsym(w->cudart, "cudaProfilerStart");
        *(void **)&w->prof_stop = dlsym(w->cudart, "cudaProfilerStop");
    }
    if ((w->nvtx = open_first("TROUPE_NVTX", nvtx)) != NULL) {
        *(void **)&w->nvtx_push = dlsym(w->nvtx, "nvtxRangePushA");
        *(void **)&w->nvtx_pop = dlsym(w->nvtx, "nvtxRangePop");
    }
}

static void profiler(troupe_worker_ctx *w, int on, uint64_t step)
{
    int (*fn)(void) = on ? w->prof_start : w->prof_stop;
    const char *what = on ? "cudaProfilerStart" : "cudaProfilerStop";

    w->profiling = on;
    if (fn == NULL) {
        snprintf(w->note, sizeof(w->note), "%s at step %llu skipped: libcudart not found", what,
                 (unsigned long long)step);
        return;
    }
    int rc = fn();
    snprintf(w->note, sizeof(w->note), "%s at step %llu%s", what, (unsigned long long)step,
             rc == 0 ? "" : " failed (CUDA error)");
}

void tr_wk_profiler_close(troupe_worker_ctx *w)
{
    if (w->nvtx_open && w->nvtx_pop != NULL) {
        w->nvtx_pop();
    }
    w->nvtx_open = 0;
    if (w->profiling && !w->caller_profiles) {
        profiler(w, 0, 0);
    }
    if (w->cudart != NULL) {
        dlclose(w->cudart);
    }
    if (w->nvtx != NULL) {
        dlclose(w->nvtx);
    }
    w->cudart = w->nvtx = NULL;
}

/* ---- the step path ------------------------------------------------------------ */

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}


/* matches: any comma-separated glob matches the group or the worker name. */
static int matches(const char *patterns, const char *group, const char *worker)
{
    char pat[1024];
    const char *p = patterns;

    while (*p != '\0') {
        size_t len = strcspn(p, ","), a = 0, b = len;
        while (a < b && isspace((unsigned char)p[a])) {
            a++;
        }
        while (b > a && isspace((unsigned char)p[b - 1])) {
            b--;
        }
        if (b > a && b - a < sizeof(pat)) {
            memcpy(pat, p + a, b - a);
            pat[b - a] = '\0';
            if (fnmatch(pat, group, 0) == 0 || fnmatch(pat, worker, 0) == 0) {
                return 1;
            }
        }
        p += len + (p[len] == ',');
    }
    return 0;
}

/* resolve turns the setting in force into this worker's range; relative
 * settings count from the step at which this worker first sees them. */
static void resolve(troupe_worker_ctx *w, uint64_t step)
{
    tr_wk_control c;

    pthread_mutex_lock(&w->mu);
    c = w->control;
    w->seen_version = atomic_load(&w->control_version);
    pthread_mutex_unlock(&w->mu);
    w->resolved = 1;
    w->match = !c.off && matches(c.workers, w->group, w->worker);
    w->start = c.start;
    w->stop = c.stop;
    if (c.next > 0) {
        uint64_t s = step;
        if (c.align > 0 && s % c.align != 0) {
            s += c.align - s % c.align;
        }
        w->start = (int)s;
        w->stop = (int)(s + c.next);
    }
}

TROUPE_API troupe_status troupe_worker_step_begin(troupe_worker_ctx *w, uint64_t step, int *profile)
{
    char name[48];
    int in;

    if (!w->resolved || atomic_load(&w->control_version) != w->seen_version) {
        resolve(w, step);
    }
    w->step_t0_ns = mono_ns();
    if (!w->caller_profiles) {
        load_libs(w); /* once */
    }
    in = w->match && (uint64_t)w->start <= step && step < (uint64_t)w->stop;
    if (in != w->profiling && w->caller_profiles) {
        w->profiling = in;
        snprintf(w->note, sizeof(w->note), "profiling %s at step %llu (by the caller)",
                 in ? "starts" : "stops", (unsigned long long)step);
    } else if (in != w->profiling) {
        profiler(w, in, step);
    }
    if (profile != NULL) {
        *profile = in;
    }
    tr_wk_trace_step_begin(w, step, in);
    if (w->nvtx_push != NULL) {
        snprintf(name, sizeof(name), "step %llu", (unsigned long long)step);
        w->nvtx_push(name);
        w->nvtx_open = 1;
    }
    return TROUPE_OK;
}

TROUPE_API void troupe_step_figures_init(troupe_step_figures *f)
{
    f->loss = f->tokens_per_s = f->mfu = f->step_ms = NAN;
    f->forward_ms = f->backward_ms = f->optimizer_ms = NAN;
    f->gpu_mem_in_use_bytes = f->gpu_mem_reserved_bytes = f->gpu_mem_peak_bytes = f->gpu_mem_total_bytes = NAN;
}

/* measured_ms: the step's own time when it was begun, else the time since the
 * previous end (a loop that only calls step_end); NaN the first time. */
static double measured_ms(const troupe_worker_ctx *w, int64_t now)
{
    int64_t from = w->step_t0_ns != 0 ? w->step_t0_ns : w->last_end_ns;
    return from != 0 ? (double)(now - from) / 1e6 : NAN;
}

/* report_figures hands every set figure to the metrics buffer; the first
 * refusal (a dropped point) is what step_end returns. */
static troupe_status report_figures(troupe_worker_ctx *w, uint64_t step, const troupe_step_figures *f,
                                    double step_ms)
{
    const struct {
        const char *name;
        double v;
    } figs[] = {
        {"step_ms", step_ms},
        {"loss", f ? f->loss : NAN},
        {"tokens_per_s", f ? f->tokens_per_s : NAN},
        {"mfu", f ? f->mfu : NAN},
        {"forward_ms", f ? f->forward_ms : NAN},
        {"backward_ms", f ? f->backward_ms : NAN},
        {"optimizer_ms", f ? f->optimizer_ms : NAN},
        {"gpu_mem_in_use_bytes", f ? f->gpu_mem_in_use_bytes : NAN},
        {"gpu_mem_reserved_bytes", f ? f->gpu_mem_reserved_bytes : NAN},
        {"gpu_mem_peak_bytes", f ? f->gpu_mem_peak_bytes : NAN},
        {"gpu_mem_total_bytes", f ? f->gpu_mem_total_bytes : NAN},
    };
    troupe_status first = TROUPE_OK;

    for (size_t i = 0; i < sizeof(figs) / sizeof(figs[0]); i++) {
        troupe_status st;
        if (isnan(figs[i].v)) {
            continue; /* unset */
        }
        st = troupe_worker_metric(w, step, figs[i].name, figs[i].v);
        if (first == TROUPE_OK) {
            first = st;
        }
    }
    return first;
}

TROUPE_API troupe_status troupe_worker_step_end(troupe_worker_ctx *w, uint64_t step, const troupe_step_figures *f)
{
    int64_t now = mono_ns();
    double step_ms = (f != NULL && !isnan(f->step_ms)) ? f->step_ms : measured_ms(w, now);

    tr_wk_trace_step_end(w, step);
    if (w->nvtx_open && w->nvtx_pop != NULL) {
        w->nvtx_pop();
    }
    w->nvtx_open = 0;
    w->step_t0_ns = 0;
    w->last_end_ns = now;
    return report_figures(w, step, f, step_ms);
}
