/* cycles.c - place + release cycles through libtroupe, K client threads.
 *
 * One cycle, as a user and the agents would see it:
 *   1. troupe_submit_yaml: one group of W workers x 1 GPU on W one-GPU
 *      virtual nodes (PACK) - the analogue of a Ray placement group of W
 *      bundles. The head places it before it answers.
 *   2. troupe_wait_job until the job is RUNNING (placed; the head stored the
 *      placement before answering). The reply lists the workers and nodes.
 *   3. troupe_stop_job.
 *   4. The agents of the job's nodes sync (agents.c): each reads its set,
 *      which no longer holds the job, and reports its complete worker list.
 *   5. troupe_wait_job until no worker of the job is RUNNING or PENDING: the
 *      head has then returned the job's GPUs to the scheduler.
 * With a batch size B > 1 a thread does the same for B groups at a time
 * through troupe_submit_batch / troupe_stop_batch, the way Ray's ray_perf
 * measures placement groups (create 100, wait, remove them): one SubmitJobs
 * (the reply holds every job as placed, acknowledged once on disk), one
 * StopJobs, one sync of each node the B jobs used, and a check that the
 * batch's last job has no RUNNING/PENDING worker left. Each group is one
 * cycle; latencies are per batch.
 * A cycle that takes longer than the cycle deadline is an error, reported in
 * the cell, never a hang. Throughput counts cycles that ended inside the
 * measured window; latencies are those cycles'. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e_bench.h"
#include "util.h"

enum { PH_WARMUP, PH_MEASURE, PH_DONE };

typedef struct thr {
    const eb_cycle_opts *o;
    const char *yaml;
    size_t yaml_len;
    int batch;
    troupe_spec **specs; /* batch > 1: the parsed spec, batch times */
    uint64_t *ids, *node_ids;
    atomic_int *phase;
    double t_begin, t_end; /* window, set by the driver */
    double *lat, *place, *release;
    size_t n, cap;
    uint64_t errors, rpcs, completed;
    uint64_t first_job;
    char note[256];
} thr;

static int live(const troupe_worker *w)
{
    return w->state == TROUPE_WORKER_RUNNING || w->state == TROUPE_WORKER_PENDING;
}

static size_t live_count(const troupe_job *j)
{
    size_t n = 0;
    for (size_t i = 0; i < j->n_workers; i++) {
        n += live(&j->workers[i]);
    }
    return n;
}

static uint32_t left_ms(int64_t until)
{
    int64_t l = until - tr_now_ms();
    return l > 0 ? (uint32_t)l : 0;
}

/* wait_placed returns the job once RUNNING; *out is the caller's to free. */
static int wait_placed(troupe_client *c, uint64_t id, int64_t until, thr *t, troupe_job **out,
                       troupe_error *e)
{
    troupe_job *j = NULL;
    int rv = troupe_wait_job(c, id, 0, 0, &j, e); /* version 0: answers at once */

    t->rpcs++;
    while (rv == TROUPE_OK && j->state == TROUPE_JOB_PENDING && left_ms(until) > 0) {
        uint64_t v = j->version;
        troupe_job_free(j);
        j = NULL;
        rv = troupe_wait_job(c, id, v, left_ms(until), &j, e);
        t->rpcs++;
    }
    if (rv == TROUPE_OK && j->state != TROUPE_JOB_RUNNING) {
        snprintf(e->message, sizeof(e->message), "job %llu is %s, not RUNNING: %.200s",
                 (unsigned long long)id, troupe_job_state_name(j->state), j->reason);
        rv = TROUPE_DEADLINE_EXCEEDED;
        troupe_job_free(j);
        j = NULL;
    }
    *out = j;
    return rv;
}

/* sync_nodes has the agent of every node the job used sync once. */
static int sync_nodes(const troupe_job *j, int64_t until, thr *t, troupe_error *e)
{
    for (size_t i = 0; i < j->n_workers; i++) {
        uint64_t id = j->workers[i].node_id;
        unsigned n = 0;
        tr_err err;
        int seen = 0, rv;
        for (size_t k = 0; k < i && !seen; k++) {
            seen = j->workers[k].node_id == id;
        }
        if (seen) {
            continue;
        }
        eb_node *node = eb_cluster_find(t->o->cluster, id);
        if (node == NULL) {
            snprintf(e->message, sizeof(e->message), "job placed a worker on unknown node %llu",
                     (unsigned long long)id);
            return TROUPE_INTERNAL;
        }
        rv = eb_agent_sync(node, left_ms(until) + 1, &n, &err);
        t->rpcs += n;
        if (rv != TROUPE_OK) {
            snprintf(e->message, sizeof(e->message), "NodeSync node=%llu: %.200s", (unsigned long long)id,
                     err.msg);
            return rv;
        }
    }
    return TROUPE_OK;
}

/* wait_released waits until no worker of the job is RUNNING or PENDING. */
static int wait_released(troupe_client *c, uint64_t id, int64_t until, thr *t, troupe_error *e)
{
    troupe_job *j = NULL;
    int rv = troupe_wait_job(c, id, 0, 0, &j, e);

    t->rpcs++;
    while (rv == TROUPE_OK && live_count(j) > 0 && left_ms(until) > 0) {
        uint64_t v = j->version;
        troupe_job_free(j);
        j = NULL;
        rv = troupe_wait_job(c, id, v, left_ms(until), &j, e);
        t->rpcs++;
    }
    if (rv == TROUPE_OK && live_count(j) > 0) {
        snprintf(e->message, sizeof(e->message),
                 "job %llu: %zu workers still RUNNING/PENDING after the agents' reports",
                 (unsigned long long)id, live_count(j));
        rv = TROUPE_DEADLINE_EXCEEDED;
    }
    troupe_job_free(j);
    return rv;
}

static int record(thr *t, double lat, double place, double release)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 4096;
        double *a = realloc(t->lat, cap * sizeof(double));
        double *b = a ? realloc(t->place, cap * sizeof(double)) : NULL;
        double *c = b ? realloc(t->release, cap * sizeof(double)) : NULL;
        t->lat = a ? a : t->lat;
        t->place = b ? b : t->place;
        t->release = c ? c : t->release;
        if (c == NULL) {
            return -1;
        }
        t->cap = cap;
    }
    t->lat[t->n] = lat;
    t->place[t->n] = place;
    t->release[t->n] = release;
    t->n++;
    return 0;
}

/* one_cycle runs steps 1-5; returns a troupe_status with e filled. */
static int one_cycle(troupe_client *c, thr *t, troupe_error *e)
{
    int64_t until = tr_now_ms() + t->o->cycle_deadline_ms;
    double t0 = eb_now_s(), t1;
    troupe_job *j = NULL;
    uint64_t id = 0;
    int rv;

    rv = troupe_submit_yaml(c, t->yaml, t->yaml_len, "e2e.yaml", NULL, &id, e);
    t->rpcs++;
    if (rv == TROUPE_OK && t->first_job == 0) {
        t->first_job = id;
    }
    if (rv == TROUPE_OK) {
        rv = wait_placed(c, id, until, t, &j, e);
    }
    t1 = eb_now_s();
    if (rv == TROUPE_OK) {
        rv = troupe_stop_job(c, id, e);
        t->rpcs++;
    }
    if (rv == TROUPE_OK) {
        rv = sync_nodes(j, until, t, e);
    }
    if (rv == TROUPE_OK) {
        rv = wait_released(c, id, until, t, e);
    }
    troupe_job_free(j);
    if (rv == TROUPE_OK) {
        double t2 = eb_now_s();
        t->completed++;
        /* phase first: its load orders the read of t_begin after the store. */
        if (atomic_load(t->phase) == PH_MEASURE && t2 >= t->t_begin) {
            if (record(t, t2 - t0, t1 - t0, t2 - t1) != 0) {
                snprintf(e->message, sizeof(e->message), "out of memory");
                return TROUPE_RESOURCE_EXHAUSTED;
            }
        }
    }
    return rv;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* check_placed: every item of the submit batch must be a RUNNING job with
 * its workers listed; collects the ids and the distinct nodes used. */
static int check_placed(const troupe_batch *b, thr *t, size_t *n_nodes, troupe_error *e)
{
    size_t nn = 0;

    for (size_t i = 0; i < b->count; i++) {
        const troupe_batch_item *it = &b->items[i];
        if (it->state != TROUPE_JOB_RUNNING || it->job == NULL || it->job->n_workers == 0) {
            snprintf(e->message, sizeof(e->message), "job %llu of the batch is %s, not placed: %.200s",
                     (unsigned long long)it->job_id, troupe_job_state_name(it->state), it->reason);
            return TROUPE_FAILED_PRECONDITION;
        }
        t->ids[i] = it->job_id;
        for (size_t w = 0; w < it->job->n_workers; w++) {
            t->node_ids[nn++] = it->job->workers[w].node_id;
        }
    }
    qsort(t->node_ids, nn, sizeof(uint64_t), cmp_u64);
    *n_nodes = 0;
    for (size_t i = 0; i < nn; i++) {
        if (*n_nodes == 0 || t->node_ids[*n_nodes - 1] != t->node_ids[i]) {
            t->node_ids[(*n_nodes)++] = t->node_ids[i];
        }
    }
    return TROUPE_OK;
}

static int sync_node_ids(const uint64_t *ids, size_t n, int64_t until, thr *t, troupe_error *e)
{
    for (size_t i = 0; i < n; i++) {
        eb_node *node = eb_cluster_find(t->o->cluster, ids[i]);
        unsigned calls = 0;
        tr_err err;
        int rv;
        if (node == NULL) {
            snprintf(e->message, sizeof(e->message), "job placed a worker on unknown node %llu",
                     (unsigned long long)ids[i]);
            return TROUPE_INTERNAL;
        }
        rv = eb_agent_sync(node, left_ms(until) + 1, &calls, &err);
        t->rpcs += calls;
        if (rv != TROUPE_OK) {
            snprintf(e->message, sizeof(e->message), "NodeSync node=%llu: %.200s", (unsigned long long)ids[i],
                     err.msg);
            return rv;
        }
    }
    return TROUPE_OK;
}

/* one_batch places and releases t->batch groups with batch calls. */
static int one_batch(troupe_client *c, thr *t, troupe_error *e)
{
    int64_t until = tr_now_ms() + t->o->cycle_deadline_ms;
    double t0 = eb_now_s(), t1;
    troupe_batch *sub = NULL, *stop = NULL;
    size_t n = (size_t)t->batch, n_nodes = 0;
    int rv;

    rv = troupe_submit_batch(c, (const troupe_spec *const *)t->specs, n, TROUPE_BATCH_JOBS, &sub, e);
    t->rpcs++;
    if (rv == TROUPE_OK) {
        rv = check_placed(sub, t, &n_nodes, e);
    }
    if (rv == TROUPE_OK && t->first_job == 0) {
        t->first_job = t->ids[0];
    }
    t1 = eb_now_s();
    if (rv == TROUPE_OK) {
        rv = troupe_stop_batch(c, t->ids, n, &stop, e);
        t->rpcs++;
    }
    if (rv == TROUPE_OK) {
        rv = sync_node_ids(t->node_ids, n_nodes, until, t, e);
    }
    if (rv == TROUPE_OK) {
        /* The agents' reports were acknowledged after the head applied them,
         * so every job of the batch is released by now: check the last one. */
        rv = wait_released(c, t->ids[n - 1], tr_now_ms(), t, e);
    }
    troupe_batch_free(sub);
    troupe_batch_free(stop);
    if (rv == TROUPE_OK) {
        double t2 = eb_now_s();
        t->completed += n;
        if (atomic_load(t->phase) == PH_MEASURE && t2 >= t->t_begin) {
            if (record(t, t2 - t0, t1 - t0, t2 - t1) != 0) {
                snprintf(e->message, sizeof(e->message), "out of memory");
                return TROUPE_RESOURCE_EXHAUSTED;
            }
        }
    }
    return rv;
}

/* batch_prepare parses the spec once and sizes the per-batch arrays. */
static int batch_prepare(thr *t, troupe_error *e)
{
    troupe_spec *spec = NULL;
    int w = 0, rv = troupe_spec_parse(t->yaml, t->yaml_len, "e2e.yaml", NULL, &spec, e);

    if (rv != TROUPE_OK) {
        return rv;
    }
    sscanf(t->yaml, "name: e2e-w%d", &w);
    t->specs = calloc((size_t)t->batch, sizeof(*t->specs));
    t->ids = calloc((size_t)t->batch, sizeof(*t->ids));
    t->node_ids = calloc((size_t)t->batch * (size_t)(w > 0 ? w : 1), sizeof(*t->node_ids));
    if (t->specs == NULL || t->ids == NULL || t->node_ids == NULL) {
        troupe_spec_free(spec);
        snprintf(e->message, sizeof(e->message), "out of memory");
        return TROUPE_RESOURCE_EXHAUSTED;
    }
    for (int i = 0; i < t->batch; i++) {
        t->specs[i] = spec; /* the same spec B times; specs[0] owns it */
    }
    return TROUPE_OK;
}

static void batch_release(thr *t)
{
    if (t->specs != NULL) {
        troupe_spec_free(t->specs[0]);
    }
    free(t->specs);
    free(t->ids);
    free(t->node_ids);
}

static void *thr_main(void *arg)
{
    thr *t = arg;
    troupe_client_opts co = {.head_url = t->o->url, .timeout_ms = t->o->cycle_deadline_ms};
    troupe_client *c = NULL;
    troupe_error e = {0};
    int rv;

    if ((rv = troupe_client_open(&c, &co, &e)) != TROUPE_OK) {
        snprintf(t->note, sizeof(t->note), "connect: %.200s", e.message);
        t->errors++;
        goto out;
    }
    if (t->batch > 1 && (rv = batch_prepare(t, &e)) != TROUPE_OK) {
        snprintf(t->note, sizeof(t->note), "%s: %.200s", troupe_strerror(rv), e.message);
        t->errors++;
        goto out;
    }
    while (atomic_load(t->phase) != PH_DONE) {
        rv = t->batch > 1 ? one_batch(c, t, &e) : one_cycle(c, t, &e);
        if (rv != TROUPE_OK) {
            /* Stop this thread: a broken cycle may have left GPUs held, and
             * going on would measure a different cluster. */
            t->errors++;
            snprintf(t->note, sizeof(t->note), "%s: %.200s", troupe_strerror(rv), e.message);
            break;
        }
    }
out:
    batch_release(t);
    troupe_client_close(c);
    return NULL;
}

/* make_yaml writes the job: W one-GPU virtual nodes, one PACK group of W. */
static char *make_yaml(int w, size_t *len)
{
    size_t cap = 256 + (size_t)w * 4;
    char *s = malloc(cap);
    size_t off = 0;

    if (s == NULL) {
        return NULL;
    }
    off += (size_t)snprintf(s + off, cap - off, "name: e2e-w%d\ncluster: {nodes: [", w);
    for (int i = 0; i < w; i++) {
        off += (size_t)snprintf(s + off, cap - off, "%s1", i ? ", " : "");
    }
    off += (size_t)snprintf(s + off, cap - off,
                            "]}\ngroups: [{name: g, workers: %d, resources: {gpu: 1}, strategy: PACK, "
                            "command: [\"true\"]}]\n",
                            w);
    *len = off;
    return s;
}

static void summarize(thr *ts, int k, eb_cell *cell)
{
    size_t n = 0;
    double *lat, *pl, *rel;
    uint64_t rpcs = 0, first = 0;

    for (int i = 0; i < k; i++) {
        n += ts[i].n;
        cell->errors += ts[i].errors;
        rpcs += ts[i].rpcs;
        if (ts[i].first_job && (first == 0 || ts[i].first_job < first)) {
            first = ts[i].first_job;
        }
        if (ts[i].note[0] && cell->note[0] == '\0') {
            snprintf(cell->note, sizeof(cell->note), "%s", ts[i].note);
        }
    }
    cell->jobs_before = first ? first - 1 : 0;
    lat = calloc(n + 1, sizeof(double));
    pl = calloc(n + 1, sizeof(double));
    rel = calloc(n + 1, sizeof(double));
    for (int i = 0, off = 0; lat && pl && rel && i < k; off += (int)ts[i].n, i++) {
        memcpy(lat + off, ts[i].lat, ts[i].n * sizeof(double));
        memcpy(pl + off, ts[i].place, ts[i].n * sizeof(double));
        memcpy(rel + off, ts[i].release, ts[i].n * sizeof(double));
    }
    if (lat && pl && rel && n > 0) {
        qsort(lat, n, sizeof(double), eb_cmp_double);
        qsort(pl, n, sizeof(double), eb_cmp_double);
        qsort(rel, n, sizeof(double), eb_cmp_double);
        cell->cycles = n * (uint64_t)(cell->batch > 1 ? cell->batch : 1);
        cell->per_s = (double)cell->cycles / cell->window_s;
        cell->p50_ms = eb_pct(lat, n, 0.50) * 1e3;
        cell->p99_ms = eb_pct(lat, n, 0.99) * 1e3;
        cell->place_p50_ms = eb_pct(pl, n, 0.50) * 1e3;
        cell->release_p50_ms = eb_pct(rel, n, 0.50) * 1e3;
    }
    /* Calls per cycle over every completed cycle, warm-up included. */
    uint64_t all = 0;
    for (int i = 0; i < k; i++) {
        all += ts[i].completed;
    }
    cell->rpcs_per_cycle = all ? (double)rpcs / (double)all : 0;
    free(lat);
    free(pl);
    free(rel);
}

/* note_add appends to the cell's note, so that the first cause (a thread's
 * failed call) stays in front of what it led to. */
static void note_add(eb_cell *cell, const char *fmt, ...)
{
    size_t off = strlen(cell->note);
    va_list ap;

    if (off > 0 && off + 2 < sizeof(cell->note)) {
        memcpy(cell->note + off, "; ", 3);
        off += 2;
    }
    va_start(ap, fmt);
    vsnprintf(cell->note + off, sizeof(cell->note) - off, fmt, ap);
    va_end(ap);
}

/* check_all_released: once every thread stopped, the head must show every
 * GPU free and no job PENDING or RUNNING, or the cell's cycles did not
 * really release what they placed. */
static void check_all_released(const eb_cycle_opts *o, eb_cell *cell)
{
    troupe_client_opts co = {.head_url = o->url, .timeout_ms = 10000};
    troupe_client *c = NULL;
    troupe_cluster cl;
    troupe_job_list *active = NULL;
    troupe_error e = {0};

    if (troupe_client_open(&c, &co, &e) != TROUPE_OK || troupe_get_cluster(c, &cl, &e) != TROUPE_OK ||
        troupe_list_jobs(c, 1, &active, &e) != TROUPE_OK) {
        note_add(cell, "end-of-cell check: %.200s", e.message);
        cell->errors++;
    } else if (cl.gpus_free != cl.gpus_total || active->count != 0) {
        note_add(cell, "after the cell: %u of %u GPUs free, %zu jobs active", cl.gpus_free, cl.gpus_total,
                 active->count);
        cell->errors++;
    }
    troupe_job_list_free(active);
    troupe_client_close(c);
}

int eb_cycles_run(const eb_cycle_opts *o, eb_cell *cell)
{
    pthread_t th[256];
    thr ts[256];
    atomic_int phase = PH_WARMUP;
    size_t len = 0;
    char *yaml = make_yaml(cell->workers, &len);
    int k = cell->clients > 256 ? 256 : cell->clients;

    if (yaml == NULL) {
        snprintf(cell->note, sizeof(cell->note), "out of memory");
        return -1;
    }
    memset(ts, 0, sizeof(ts));
    cell->load1 = eb_load1();
    for (int i = 0; i < k; i++) {
        ts[i] = (thr){
            .o = o, .yaml = yaml, .yaml_len = len, .batch = cell->batch, .phase = &phase, .t_begin = 1e300};
        pthread_create(&th[i], NULL, thr_main, &ts[i]);
    }
    tr_sleep_ms(o->warmup_ms);
    double head0 = eb_proc_cpu_s(o->head_pid), self0 = eb_proc_cpu_s(0);
    double t_begin = eb_now_s();
    for (int i = 0; i < k; i++) {
        ts[i].t_begin = t_begin;
    }
    atomic_store(&phase, PH_MEASURE);
    tr_sleep_ms(o->duration_ms);
    atomic_store(&phase, PH_DONE);
    cell->window_s = eb_now_s() - t_begin;
    double head_cpu = eb_proc_cpu_s(o->head_pid) - head0, self_cpu = eb_proc_cpu_s(0) - self0;
    for (int i = 0; i < k; i++) {
        pthread_join(th[i], NULL);
    }
    summarize(ts, k, cell);
    if (cell->cycles == 0) {
        /* A harness that places nothing must not pass for a slow head. */
        note_add(cell, "no cycle completed in the %.1f s window (see %s)", cell->window_s,
                 o->head_log ? o->head_log : "the head's log");
        cell->errors++;
    }
    check_all_released(o, cell);
    if (cell->cycles > 0) {
        cell->head_cpu_ms = head_cpu * 1e3 / (double)cell->cycles;
        cell->bench_cpu_ms = self_cpu * 1e3 / (double)cell->cycles;
    }
    for (int i = 0; i < k; i++) {
        free(ts[i].lat);
        free(ts[i].place);
        free(ts[i].release);
    }
    free(yaml);
    cell->ran = 1;
    return cell->errors ? -1 : 0;
}
