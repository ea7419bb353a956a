/* http_prom.c - /metrics: the head's state in the Prometheus text format
 * (exposition format 0.0.4), checked by `promtool check metrics` in
 * integration.http.prometheus.
 *
 * Names: troupe_ prefix, base units (_seconds, _bytes), counters end in
 * _total, one family per quantity with labels for its parts (state, method,
 * code, job_id/group/worker). A job is job_id, never job: Prometheus sets job
 * (and instance) on every series it scrapes, so a target's own job label
 * would come out renamed exported_job, or with honor_labels overwrite the
 * scrape job. The process_* families are the ones every exporter has. What comes from the core is copied under h->mu
 * and written after it is released; worker metrics come from the metrics
 * service's snapshot (never its store), so a scrape costs no disk I/O.
 *
 * Per-worker training gauges: the newest value each worker reported under
 * the conventional names below (troupe_worker_metric; README "Metrics"), and
 * every other reported name as troupe_worker_metric_value{name=...} (the
 * conventional ones are not repeated there). */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "http_prom.h"

#include "http.h"
#include "jobs.h"
#include "metrics.h"
#include "rpc.h"
#include "util.h"

/* ---- format helpers ------------------------------------------------------ */

static void family(FILE *out, const char *name, const char *type, const char *help)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* label writes a label value escaped as the format wants (\\, \", \n). */
static void label(FILE *out, const char *v)
{
    for (; *v != '\0'; v++) {
        if (*v == '\\' || *v == '"') {
            fputc('\\', out);
            fputc(*v, out);
        } else if (*v == '\n') {
            fputs("\\n", out);
        } else {
            fputc(*v, out);
        }
    }
}

static void value(FILE *out, double v)
{
    if (isnan(v)) {
        fputs("NaN\n", out);
    } else if (isinf(v)) {
        fputs(v > 0 ? "+Inf\n" : "-Inf\n", out);
    } else {
        fprintf(out, "%.17g\n", v);
    }
}

/* ---- the core's state, copied under h->mu ------------------------------------ */

typedef struct wref {
    uint64_t job;
    uint32_t attempt;     /* the worker's current attempt */
    char *worker, *group; /* copies, freed with the snapshot */
} wref;

/* A running job's health (Job.health through the services' decorate hook). */
typedef struct job_health {
    uint64_t job;
    int state; /* HealthState */
    uint32_t stalled, stragglers, memory;
} job_health;

/* A rank the health judge named. */
typedef struct rank_flag {
    uint64_t job;
    char *worker, *group;
    int kind;     /* 0 stalled, 1 straggler, 2 memory */
    double value; /* stalled: seconds since its last step; straggler: ratio; memory: bytes per step */
} rank_flag;

typedef struct core_snap {
    uint32_t nodes[5]; /* by NodeState */
    uint32_t gpus, gpus_free;
    uint32_t jobs[6]; /* by JobState */
    uint32_t pending_groups;
    int64_t heartbeat_ms, dead_ms; /* the period told now, the DEAD timeout */
    uint64_t store_failed_writes, store_unsaved;
    int store_failing;
    int64_t started_ms;
    wref *w; /* workers of unsettled jobs, sorted by (job, worker) */
    size_t n_w;
    job_health *jh; /* running jobs */
    size_t n_jh;
    rank_flag *rf;
    size_t n_rf, cap_rf;
} core_snap;

static int wref_cmp(const void *a, const void *b)
{
    const wref *x = a, *y = b;
    if (x->job != y->job) {
        return x->job < y->job ? -1 : 1;
    }
    return strcmp(x->worker, y->worker);
}

static void snap_workers(tr_head *h, core_snap *cs)
{
    size_t n = 0, first = tr_jobs_first_unsettled(h);

    for (size_t i = first; i < h->n_jobs; i++) {
        n += h->jobs[i]->j->n_workers;
    }
    if (n == 0 || (cs->w = calloc(n, sizeof(*cs->w))) == NULL) {
        return;
    }
    for (size_t i = first; i < h->n_jobs; i++) {
        const Troupe__V1__Job *j = h->jobs[i]->j;
        for (size_t k = 0; k < j->n_workers; k++) {
            wref *r = &cs->w[cs->n_w];
            r->job = j->id;
            r->attempt = j->workers[k]->attempt;
            r->worker = strdup(j->workers[k]->name);
            r->group = strdup(j->workers[k]->group ? j->workers[k]->group : "");
            if (r->worker == NULL || r->group == NULL) {
                free(r->worker);
                free(r->group);
                continue;
            }
            cs->n_w++;
        }
    }
    qsort(cs->w, cs->n_w, sizeof(*cs->w), wref_cmp);
}

static void flag_rank(core_snap *cs, uint64_t job, const Troupe__V1__HealthRank *r, int kind, double value)
{
    rank_flag *f;
    if (cs->n_rf == cs->cap_rf) {
        size_t cap = cs->cap_rf ? cs->cap_rf * 2 : 16;
        rank_flag *n = realloc(cs->rf, cap * sizeof(*n));
        if (n == NULL) {
            return;
        }
        cs->rf = n;
        cs->cap_rf = cap;
    }
    f = &cs->rf[cs->n_rf];
    f->job = job;
    f->kind = kind;
    f->value = value;
    f->worker = strdup(r->worker ? r->worker : "");
    f->group = strdup(r->group ? r->group : "");
    if (f->worker == NULL || f->group == NULL) {
        free(f->worker);
        free(f->group);
        return;
    }
    cs->n_rf++;
}

/* snap_health copies the health of running jobs (under h->mu). */
static void snap_health(tr_head *h, core_snap *cs)
{
    size_t n = 0, first = tr_jobs_first_unsettled(h);
    int64_t now = tr_wall_ms();

    for (size_t i = first; i < h->n_jobs; i++) {
        n += h->jobs[i]->j->state == TROUPE__V1__JOB_STATE__JOB_RUNNING;
    }
    if (n == 0 || (cs->jh = calloc(n, sizeof(*cs->jh))) == NULL) {
        return;
    }
    for (size_t i = first; i < h->n_jobs; i++) {
        tr_head_job *hj = h->jobs[i];
        const Troupe__V1__JobHealth *jh;
        if (hj->j->state != TROUPE__V1__JOB_STATE__JOB_RUNNING) {
            continue;
        }
        tr_head_decorate(h, hj, 1);
        jh = hj->j->health;
        cs->jh[cs->n_jh] = (job_health){hj->j->id, jh ? (int)jh->state : 0, jh ? (uint32_t)jh->n_stalled : 0,
                                        jh ? (uint32_t)jh->n_stragglers : 0, jh ? (uint32_t)jh->n_memory : 0};
        cs->n_jh++;
        for (size_t k = 0; jh != NULL && k < jh->n_stalled; k++) {
            flag_rank(cs, hj->j->id, jh->stalled[k], 0, (double)(now - jh->stalled[k]->since_ms) / 1000.0);
        }
        for (size_t k = 0; jh != NULL && k < jh->n_stragglers; k++) {
            flag_rank(cs, hj->j->id, jh->stragglers[k], 1, jh->stragglers[k]->ratio);
        }
        for (size_t k = 0; jh != NULL && k < jh->n_memory; k++) {
            flag_rank(cs, hj->j->id, jh->memory[k], 2, jh->memory[k]->memory_slope);
        }
        tr_head_decorate(h, hj, 0);
    }
}

static void snap_core(tr_head *h, core_snap *cs)
{
    memset(cs, 0, sizeof(*cs));
    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i < h->n_nodes; i++) {
        const Troupe__V1__Node *n = h->nodes[i].n;
        cs->nodes[n->state < 5 ? n->state : 0]++;
        if (n->state == TROUPE__V1__NODE_STATE__NODE_ALIVE || n->state == TROUPE__V1__NODE_STATE__NODE_SUSPECT) {
            cs->gpus += (uint32_t)n->n_gpus;
            cs->gpus_free += tr_jobs_node_free_gpus(h, n->id);
        }
    }
    for (size_t i = 0; i < h->n_jobs; i++) {
        const Troupe__V1__Job *j = h->jobs[i]->j;
        cs->jobs[j->state < 6 ? j->state : 0]++;
        if (j->state == TROUPE__V1__JOB_STATE__JOB_PENDING && j->spec != NULL) {
            cs->pending_groups += (uint32_t)j->spec->n_groups;
        }
    }
    cs->heartbeat_ms = tr_head_heartbeat_period(h);
    cs->dead_ms = tr_liveness_dead_ms(&h->live);
    cs->store_failing = h->store_failing;
    cs->store_failed_writes = h->store_failed_writes;
    cs->store_unsaved = tr_head_store_unsaved(h);
    cs->started_ms = h->started_ms;
    snap_workers(h, cs);
    snap_health(h, cs);
    pthread_mutex_unlock(&h->mu);
}

static void snap_free(core_snap *cs)
{
    for (size_t i = 0; i < cs->n_w; i++) {
        free(cs->w[i].worker);
        free(cs->w[i].group);
    }
    free(cs->w);
    for (size_t i = 0; i < cs->n_rf; i++) {
        free(cs->rf[i].worker);
        free(cs->rf[i].group);
    }
    free(cs->rf);
    free(cs->jh);
}

/* ---- cluster, jobs, store --------------------------------------------------------- */

static void write_core(FILE *out, const core_snap *cs)
{
    static const char *const node_states[] = {"unspecified", "alive", "suspect", "dead", "left"};
    static const char *const job_states[] = {"unspecified", "pending", "running", "succeeded", "failed", "stopped"};

    family(out, "troupe_build_info", "gauge", "The head's version (always 1).");
    fprintf(out, "troupe_build_info{version=\"%s\"} 1\n", TROUPE_VERSION);
    family(out, "troupe_head_start_time_seconds", "gauge", "When the head started, unix time.");
    fprintf(out, "troupe_head_start_time_seconds %.3f\n", (double)cs->started_ms / 1000.0);
    family(out, "troupe_nodes", "gauge", "Nodes by state.");
    for (int s = 1; s < 5; s++) {
        fprintf(out, "troupe_nodes{state=\"%s\"} %u\n", node_states[s], cs->nodes[s]);
    }
    family(out, "troupe_heartbeat_period_seconds", "gauge",
           "Heartbeat period the agents are told now (grows beyond max_heartbeats_per_s).");
    fprintf(out, "troupe_heartbeat_period_seconds %.3f\n", (double)cs->heartbeat_ms / 1000.0);
    family(out, "troupe_node_dead_timeout_seconds", "gauge", "Silence after which a node is DEAD.");
    fprintf(out, "troupe_node_dead_timeout_seconds %.3f\n", (double)cs->dead_ms / 1000.0);
    family(out, "troupe_gpus", "gauge", "GPUs of alive and suspect nodes.");
    fprintf(out, "troupe_gpus %u\n", cs->gpus);
    family(out, "troupe_gpus_allocated", "gauge", "GPUs held by placed workers.");
    fprintf(out, "troupe_gpus_allocated %u\n", cs->gpus - cs->gpus_free);
    family(out, "troupe_jobs", "gauge", "Jobs the head holds, by state.");
    for (int s = 1; s < 6; s++) {
        fprintf(out, "troupe_jobs{state=\"%s\"} %u\n", job_states[s], cs->jobs[s]);
    }
    family(out, "troupe_pending_groups", "gauge", "Worker groups of pending jobs, waiting to be placed.");
    fprintf(out, "troupe_pending_groups %u\n", cs->pending_groups);
    family(out, "troupe_store_failing", "gauge", "1 while the state store cannot write (the head refuses new work).");
    fprintf(out, "troupe_store_failing %d\n", cs->store_failing ? 1 : 0);
    family(out, "troupe_store_failed_writes_total", "counter", "State store batches that could not be written.");
    fprintf(out, "troupe_store_failed_writes_total %llu\n", (unsigned long long)cs->store_failed_writes);
    family(out, "troupe_store_unsaved_changes", "gauge", "Changes waiting for the disk.");
    fprintf(out, "troupe_store_unsaved_changes %llu\n", (unsigned long long)cs->store_unsaved);
}

/* ---- job health ------------------------------------------------------------------ */

static void write_health(FILE *out, const core_snap *cs)
{
    static const char *const states[] = {"none", "ok", "stalled"};
    static const struct {
        const char *family, *help;
    } ranks[] = {
        {"troupe_worker_stalled_seconds", "A stalled rank: seconds since its last step (health judge)."},
        {"troupe_worker_straggler_ratio", "A straggling rank: its median step time over its group's."},
        {"troupe_worker_memory_growth_bytes_per_step", "A rank whose GPU memory grows: bytes per step."},
    };

    family(out, "troupe_job_health", "gauge", "A running job's health as the head judges it: 1 for its state.");
    for (size_t i = 0; i < cs->n_jh; i++) {
        for (int s = 0; s < 3; s++) {
            fprintf(out, "troupe_job_health{job_id=\"%llu\",state=\"%s\"} %d\n", (unsigned long long)cs->jh[i].job,
                    states[s], cs->jh[i].state == s);
        }
    }
    family(out, "troupe_job_stalled_ranks", "gauge", "Ranks of a running job that stopped reporting steps.");
    for (size_t i = 0; i < cs->n_jh; i++) {
        fprintf(out, "troupe_job_stalled_ranks{job_id=\"%llu\"} %u\n", (unsigned long long)cs->jh[i].job,
                cs->jh[i].stalled);
    }
    family(out, "troupe_job_straggler_ranks", "gauge", "Ranks of a running job slower than its group.");
    for (size_t i = 0; i < cs->n_jh; i++) {
        fprintf(out, "troupe_job_straggler_ranks{job_id=\"%llu\"} %u\n", (unsigned long long)cs->jh[i].job,
                cs->jh[i].stragglers);
    }
    family(out, "troupe_job_memory_warnings", "gauge", "Ranks of a running job warned about GPU memory.");
    for (size_t i = 0; i < cs->n_jh; i++) {
        fprintf(out, "troupe_job_memory_warnings{job_id=\"%llu\"} %u\n", (unsigned long long)cs->jh[i].job,
                cs->jh[i].memory);
    }
    for (int k = 0; k < 3; k++) {
        family(out, ranks[k].family, "gauge", ranks[k].help);
        for (size_t i = 0; i < cs->n_rf; i++) {
            if (cs->rf[i].kind != k) {
                continue;
            }
            fprintf(out, "%s{job_id=\"%llu\",group=\"", ranks[k].family, (unsigned long long)cs->rf[i].job);
            label(out, cs->rf[i].group);
            fputs("\",worker=\"", out);
            label(out, cs->rf[i].worker);
            fputs("\"} ", out);
            value(out, cs->rf[i].value);
        }
    }
}

/* ---- RPC ------------------------------------------------------------------------- */

static void write_rpc(FILE *out, tr_rpc_server *srv)
{
    tr_rpc_method_stats *st;
    size_t n;

    if (srv == NULL) {
        return;
    }
    n = tr_rpc_server_stats(srv, NULL, 0);
    if ((st = calloc(n, sizeof(*st))) == NULL) {
        return;
    }
    tr_rpc_server_stats(srv, st, n);
    family(out, "troupe_rpc_requests_total", "counter", "RPC requests answered, by method and status code.");
    for (size_t i = 0; i < n; i++) {
        for (int c = 0; c < TR_RPC_CODES; c++) {
            if (st[i].by_code[c] > 0) {
                fprintf(out, "troupe_rpc_requests_total{method=\"");
                label(out, st[i].method);
                fprintf(out, "\",code=\"%s\"} %llu\n", troupe_strerror(c), (unsigned long long)st[i].by_code[c]);
            }
        }
    }
    family(out, "troupe_rpc_request_duration_seconds", "histogram",
           "Time from a request's arrival to its answer (long polls count the time they were held).");
    for (size_t i = 0; i < n; i++) {
        uint64_t cum = 0;
        for (int b = 0; b <= TR_RPC_LATENCY_BUCKETS; b++) {
            cum += st[i].buckets[b];
            fprintf(out, "troupe_rpc_request_duration_seconds_bucket{method=\"");
            label(out, st[i].method);
            if (b < TR_RPC_LATENCY_BUCKETS) {
                fprintf(out, "\",le=\"%g\"} %llu\n", tr_rpc_latency_bounds[b], (unsigned long long)cum);
            } else {
                fprintf(out, "\",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
            }
        }
        fprintf(out, "troupe_rpc_request_duration_seconds_sum{method=\"");
        label(out, st[i].method);
        fprintf(out, "\"} %.6f\n", st[i].sum_s);
        fprintf(out, "troupe_rpc_request_duration_seconds_count{method=\"");
        label(out, st[i].method);
        fprintf(out, "\"} %llu\n", (unsigned long long)cum);
    }
    free(st);
    family(out, "troupe_rpc_oversized_frames_total", "counter", "RPC frames refused for their size.");
    fprintf(out, "troupe_rpc_oversized_frames_total %llu\n", (unsigned long long)tr_rpc_server_oversized(srv));
    family(out, "troupe_rpc_oversized_replies_total", "counter",
           "RPC replies over max_frame_bytes, answered RESOURCE_EXHAUSTED instead.");
    fprintf(out, "troupe_rpc_oversized_replies_total %llu\n",
            (unsigned long long)tr_rpc_server_oversized_replies(srv));
}

/* ---- metric ingest and the workers' own figures --------------------------------------- */

static void write_ingest(FILE *out, tr_head *h)
{
    tr_metrics_ingest in;

    tr_metrics_ingest_get(h, &in);
    family(out, "troupe_metric_reports_total", "counter", "ReportMetrics calls queued for the metrics writer.");
    fprintf(out, "troupe_metric_reports_total %llu\n", (unsigned long long)in.reports);
    family(out, "troupe_metric_reports_refused_total", "counter",
           "ReportMetrics calls refused (invalid, another job's, or the writer behind; workers resend the last).");
    fprintf(out, "troupe_metric_reports_refused_total %llu\n", (unsigned long long)in.refused);
    family(out, "troupe_metric_points_stored_total", "counter", "Metric points committed since the head started.");
    fprintf(out, "troupe_metric_points_stored_total %llu\n", (unsigned long long)in.points_stored);
    family(out, "troupe_metric_points_dropped_total", "counter",
           "Metric points workers dropped (full buffer), seen since the head started.");
    fprintf(out, "troupe_metric_points_dropped_total %llu\n", (unsigned long long)in.points_dropped);
    family(out, "troupe_metric_writes_total", "counter", "Metrics writer transactions.");
    fprintf(out, "troupe_metric_writes_total %llu\n", (unsigned long long)in.rounds);
    family(out, "troupe_metric_writes_failed_total", "counter", "Metrics writer transactions that failed.");
    fprintf(out, "troupe_metric_writes_failed_total %llu\n", (unsigned long long)in.rounds_failed);
    family(out, "troupe_metric_points_queued", "gauge", "Metric points waiting for the writer.");
    fprintf(out, "troupe_metric_points_queued %llu\n", (unsigned long long)in.queued_points);
}

/* The standard step figures (troupe_worker_step_end's names, README
 * "Metrics") and the gauge each becomes; scale converts to base units. */
static const struct {
    const char *name, *family, *help;
    double scale;
} known[] = {
    {"loss", "troupe_train_loss", "Newest loss a worker reported.", 1},
    {"tokens_per_s", "troupe_train_tokens_per_second", "Newest tokens/s a worker reported.", 1},
    {"mfu", "troupe_train_mfu_ratio", "Newest model FLOPs utilisation a worker reported (fraction of peak).", 1},
    {"step_ms", "troupe_train_step_duration_seconds", "Newest step time a worker reported.", 1e-3},
    {"gpu_mem_in_use_bytes", "troupe_train_gpu_memory_in_use_bytes", "GPU memory a worker's process has allocated.",
     1},
    {"gpu_mem_reserved_bytes", "troupe_train_gpu_memory_reserved_bytes", "GPU memory held by a worker's allocator.",
     1},
    {"gpu_mem_peak_bytes", "troupe_train_gpu_memory_peak_bytes", "Most GPU memory a worker has allocated so far.", 1},
    {"gpu_mem_total_bytes", "troupe_train_gpu_memory_total_bytes", "Capacity of a worker's GPU.", 1},
};
#define N_KNOWN (sizeof(known) / sizeof(known[0]))

static int known_name(const char *name)
{
    for (size_t i = 0; i < N_KNOWN; i++) {
        if (strcmp(known[i].name, name) == 0) {
            return 1;
        }
    }
    return 0;
}

/* One pass over the streams per family: the format wants a family's
 * samples together. */
typedef struct prom_pass {
    FILE *out;
    const core_snap *cs;
    int what; /* 0..N_KNOWN-1: a known gauge; N_KNOWN: step; +1: every name; +2 stored; +3 dropped */
} prom_pass;

static const wref *find_worker(const core_snap *cs, uint64_t job, const char *worker)
{
    wref key = {job, 0, (char *)worker, NULL};
    return cs->n_w ? bsearch(&key, cs->w, cs->n_w, sizeof(*cs->w), wref_cmp) : NULL;
}

static void labels(FILE *out, const tr_metrics_stream_view *v, const wref *w)
{
    fprintf(out, "{job_id=\"%llu\",group=\"", (unsigned long long)v->job);
    label(out, w ? w->group : "");
    fprintf(out, "\",worker=\"");
    label(out, v->worker);
    fputc('"', out);
}

static void stream_pass(void *arg, const tr_metrics_stream_view *v)
{
    prom_pass *p = arg;
    const wref *w = find_worker(p->cs, v->job, v->worker);
    int what = p->what;

    if ((w == NULL || w->attempt != v->attempt) && what < (int)N_KNOWN + 2) {
        return; /* gauges: the current attempt of workers of unsettled jobs; counters: all */
    }
    if (what < (int)N_KNOWN) {
        for (size_t i = 0; i < v->n_last; i++) {
            if (strcmp(v->last[i].name, known[what].name) == 0) {
                fputs(known[what].family, p->out);
                labels(p->out, v, w);
                fputs("} ", p->out);
                value(p->out, v->last[i].value * known[what].scale);
            }
        }
    } else if (what == (int)N_KNOWN) {
        uint64_t step = 0;
        for (size_t i = 0; i < v->n_last; i++) {
            step = v->last[i].step > step ? v->last[i].step : step;
        }
        fputs("troupe_train_step", p->out);
        labels(p->out, v, w);
        fprintf(p->out, "} %llu\n", (unsigned long long)step);
    } else if (what == (int)N_KNOWN + 1) {
        for (size_t i = 0; i < v->n_last; i++) {
            if (known_name(v->last[i].name)) {
                continue; /* already its own family, in base units */
            }
            fputs("troupe_worker_metric_value", p->out);
            labels(p->out, v, w);
            fputs(",name=\"", p->out);
            label(p->out, v->last[i].name);
            fputs("\"} ", p->out);
            value(p->out, v->last[i].value);
        }
    } else {
        fputs(what == (int)N_KNOWN + 2 ? "troupe_worker_metric_points_stored_total"
                                        : "troupe_worker_metric_points_dropped_total",
              p->out);
        /* no group here: counters outlive the job's record in memory, and a
         * label that changed when it settles would start a new series */
        fprintf(p->out, "{job_id=\"%llu\",worker=\"", (unsigned long long)v->job);
        label(p->out, v->worker);
        fprintf(p->out, "\",attempt=\"%u\"} %llu\n", v->attempt, (unsigned long long)(what == (int)N_KNOWN + 2 ? v->stored : v->dropped));
    }
}

static void write_workers(FILE *out, tr_head *h, const core_snap *cs)
{
    prom_pass p = {out, cs, 0};

    for (size_t i = 0; i < N_KNOWN; i++) {
        family(out, known[i].family, "gauge", known[i].help);
        p.what = (int)i;
        tr_metrics_each_stream(h, stream_pass, &p);
    }
    family(out, "troupe_train_step", "gauge", "Newest step a worker reported a metric for.");
    p.what = N_KNOWN;
    tr_metrics_each_stream(h, stream_pass, &p);
    family(out, "troupe_worker_metric_value", "gauge",
           "Newest value of every other metric name a worker reported (the ones above are not repeated).");
    p.what = N_KNOWN + 1;
    tr_metrics_each_stream(h, stream_pass, &p);
    family(out, "troupe_worker_metric_points_stored_total", "counter", "Metric points stored, per worker.");
    p.what = N_KNOWN + 2;
    tr_metrics_each_stream(h, stream_pass, &p);
    family(out, "troupe_worker_metric_points_dropped_total", "counter",
           "Metric points a worker dropped (its buffer was full), as the head counted from gaps.");
    p.what = N_KNOWN + 3;
    tr_metrics_each_stream(h, stream_pass, &p);
}

/* ---- the process, as every exporter reports it ------------------------------------ */

/* proc_stat reads utime+stime (clock ticks), the virtual size (bytes) and
 * the resident set (pages) from /proc/self/stat; 0 when it cannot. */
static int proc_stat(double *cpu_s, double *vsize, double *rss)
{
    char buf[1024], *p;
    unsigned long utime, stime, vs;
    long rs;
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n;

    if (f == NULL) {
        return 0;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* the command name in parentheses may hold spaces: count fields after its ')' */
    if ((p = strrchr(buf, ')')) == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %*d %*d %*d %*d %*d %*d %*u %lu %ld", &utime,
               &stime, &vs, &rs) != 4) {
        return 0;
    }
    *cpu_s = (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
    *vsize = (double)vs;
    *rss = (double)rs * (double)sysconf(_SC_PAGESIZE);
    return 1;
}

static long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    long n = 0;

    if (d == NULL) {
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        n += e->d_name[0] != '.';
    }
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

static void write_process(FILE *out, const core_snap *cs)
{
    double cpu, vsize, rss;
    struct rlimit rl;
    long fds = open_fds();

    if (proc_stat(&cpu, &vsize, &rss)) {
        family(out, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
        fprintf(out, "process_cpu_seconds_total %.2f\n", cpu);
        family(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
        fprintf(out, "process_resident_memory_bytes %.0f\n", rss);
        family(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
        fprintf(out, "process_virtual_memory_bytes %.0f\n", vsize);
    }
    if (fds >= 0) {
        family(out, "process_open_fds", "gauge", "Number of open file descriptors.");
        fprintf(out, "process_open_fds %ld\n", fds);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        family(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
        fprintf(out, "process_max_fds %.0f\n", rl.rlim_cur == RLIM_INFINITY ? -1.0 : (double)rl.rlim_cur);
    }
    family(out, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
    fprintf(out, "process_start_time_seconds %.3f\n", (double)cs->started_ms / 1000.0);
}

void tr_http_prom(tr_head *h, FILE *out)
{
    core_snap cs;

    snap_core(h, &cs);
    write_process(out, &cs);
    write_core(out, &cs);
    write_health(out, &cs);
    write_rpc(out, h->srv);
    write_ingest(out, h);
    write_workers(out, h, &cs);
    snap_free(&cs);
}
