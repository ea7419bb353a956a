/* http_api.c - /api/: the JSON the dashboard reads and scripts can use.
 *
 *   GET /api/cluster                 head, nodes (GPUs with live figures, state), totals
 *   GET /api/jobs                    every job the head holds, newest first (at most 500)
 *   GET /api/jobs/ID                 one job: groups (members now), workers, placement, health and
 *                                    an elastic group's membership changes
 *   GET /api/jobs/ID/metrics?name=loss,tok_s&worker=W&after=ID&last=N&limit=N
 *                                    its metric points (troupe metrics' query)
 *
 * Jobs are shown only as saved, as ListJobs and GetJob show them: a job whose
 * latest change is not on disk yet waits for that batch (at most
 * SAVE_WAIT_MS), and while the store cannot write the answer is 503 naming
 * the job, so a page never shows a state the head could still lose.
 *
 * State names are the CLI's (ALIVE, RUNNING, ...). Values that are NaN or
 * infinite are the strings "NaN", "+Inf", "-Inf", as `troupe metrics -o json`.
 * The core is read under h->mu and written to the response buffer (memory)
 * there; metric points are read without it (tr_metrics_query). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "http_api.h"

#include "http.h"
#include "jobs.h"
#include "json.h"
#include "metrics.h"

#define MAX_JOBS_LISTED 500
#define SAVE_WAIT_MS 2000 /* a batch is written in milliseconds; this is for a slow disk */

/* enum_name: the enum value's name without its prefix ("NODE_ALIVE" -> "ALIVE"). */
static const char *enum_name(const ProtobufCEnumDescriptor *d, int v, const char *prefix)
{
    const ProtobufCEnumValue *e = protobuf_c_enum_descriptor_get_value(d, v);
    size_t n = strlen(prefix);

    if (e == NULL) {
        return "UNKNOWN";
    }
    return strncmp(e->name, prefix, n) == 0 ? e->name + n : e->name;
}

static void json_num(FILE *out, double v)
{
    if (isnan(v)) {
        fputs("\"NaN\"", out);
    } else if (isinf(v)) {
        fputs(v > 0 ? "\"+Inf\"" : "\"-Inf\"", out);
    } else {
        fprintf(out, "%.17g", v);
    }
}

/* ---- cluster -------------------------------------------------------------- */

/* gpu_stats_json: the agent's last figures of GPU index (its heartbeats,
 * as `troupe nodes -o json` shows them), or null when it has none. */
static void gpu_stats_json(FILE *out, const Troupe__V1__Node *n, uint32_t index)
{
    for (size_t i = 0; i < n->n_gpu_stats; i++) {
        const Troupe__V1__GpuStats *g = n->gpu_stats[i];
        if (g->index == index && g->ok) {
            fprintf(out,
                    "{\"memory_used_bytes\":%llu,\"memory_total_bytes\":%llu,\"utilization_pct\":%u,"
                    "\"temperature_c\":%u,\"power_mw\":%u}",
                    (unsigned long long)g->memory_used_bytes, (unsigned long long)g->memory_total_bytes,
                    g->utilization_pct, g->temperature_c, g->power_mw);
            return;
        }
    }
    fputs("null", out);
}

static void node_stats_json(FILE *out, const Troupe__V1__NodeStats *s)
{
    if (s == NULL || s->at_ms == 0) {
        fputs("null", out);
        return;
    }
    fprintf(out, "{\"at_ms\":%lld,\"gpu_source\":", (long long)s->at_ms);
    tr_json_str(out, s->gpu_source);
    fprintf(out, ",\"load1\":%.2f,\"mem_total_bytes\":%llu,\"mem_available_bytes\":%llu}", s->load1,
            (unsigned long long)s->mem_total_bytes, (unsigned long long)s->mem_available_bytes);
}

static void node_json(tr_head *h, FILE *out, const Troupe__V1__Node *n)
{
    int live = n->state == TROUPE__V1__NODE_STATE__NODE_ALIVE || n->state == TROUPE__V1__NODE_STATE__NODE_SUSPECT;

    fprintf(out, "{\"id\":%llu,\"name\":", (unsigned long long)n->id);
    tr_json_str(out, n->name);
    fputs(",\"hostname\":", out);
    tr_json_str(out, n->hostname);
    fprintf(out, ",\"state\":\"%s\",\"reason\":", enum_name(&troupe__v1__node_state__descriptor, n->state, "NODE_"));
    tr_json_str(out, n->reason);
    fprintf(out,
            ",\"draining\":%s,\"last_seen_ms\":%lld,\"gpus_total\":%zu,\"gpus_free\":%u,\"cpus\":%u,"
            "\"cpus_free\":%.3f,\"labels\":{",
            n->draining ? "true" : "false", (long long)n->last_seen_ms, n->n_gpus,
            live ? tr_jobs_node_free_gpus(h, n->id) : 0, n->cpus,
            live ? tr_jobs_node_free_cpu_milli(h, n->id) / 1000.0 : 0.0);
    for (size_t i = 0; i < n->n_labels; i++) {
        fputs(i ? "," : "", out);
        tr_json_str(out, n->labels[i]->key);
        fputc(':', out);
        tr_json_str(out, n->labels[i]->value);
    }
    fputs("},\"gpus\":[", out);
    for (size_t i = 0; i < n->n_gpus; i++) {
        fprintf(out, "%s{\"index\":%u,\"model\":", i ? "," : "", n->gpus[i]->index);
        tr_json_str(out, n->gpus[i]->model);
        fprintf(out, ",\"memory_bytes\":%llu,\"simulated\":%s,\"stats\":",
                (unsigned long long)n->gpus[i]->memory_bytes, n->gpus[i]->simulated ? "true" : "false");
        gpu_stats_json(out, n, n->gpus[i]->index);
        fputc('}', out);
    }
    fputs("],\"stats\":", out);
    node_stats_json(out, n->stats);
    fputc('}', out);
}

static void cluster(tr_head *h, FILE *out)
{
    uint32_t jobs[6] = {0};

    pthread_mutex_lock(&h->mu);
    fprintf(out, "{\"head\":{\"version\":\"%s\",\"started_ms\":%lld,\"rpc\":", TROUPE_VERSION,
            (long long)h->started_ms);
    tr_json_str(out, h->cfg.listen);
    fputs(",\"http\":", out);
    tr_json_str(out, h->http_url);
    fprintf(out, ",\"store_failing\":%s},\"nodes\":[", h->store_failing ? "true" : "false");
    for (size_t i = 0; i < h->n_nodes; i++) {
        fputs(i ? "," : "", out);
        node_json(h, out, h->nodes[i].n);
    }
    for (size_t i = 0; i < h->n_jobs; i++) {
        jobs[h->jobs[i]->j->state < 6 ? h->jobs[i]->j->state : 0]++;
    }
    fprintf(out, "],\"jobs\":{\"pending\":%u,\"running\":%u,\"succeeded\":%u,\"failed\":%u,\"stopped\":%u}}\n",
            jobs[1], jobs[2], jobs[3], jobs[4], jobs[5]);
    pthread_mutex_unlock(&h->mu);
}

/* ---- jobs ------------------------------------------------------------------- */

static void worker_json(FILE *out, const Troupe__V1__WorkerInfo *w)
{
    fputs("{\"name\":", out);
    tr_json_str(out, w->name);
    fputs(",\"group\":", out);
    tr_json_str(out, w->group);
    fprintf(out, ",\"rank\":%u,\"node_id\":%llu,\"node\":", w->rank, (unsigned long long)w->node_id);
    tr_json_str(out, w->node_name);
    fprintf(out,
            ",\"state\":\"%s\",\"paused\":%s,\"attempt\":%u,\"pid\":%u,\"exit_code\":%d,\"removed\":%s,"
            "\"gpus\":[",
            w->paused ? "PAUSED" : enum_name(&troupe__v1__worker_state__descriptor, w->state, "WORKER_"),
            w->paused ? "true" : "false", w->attempt, w->pid, w->exit_code, w->removed ? "true" : "false");
    for (size_t i = 0; i < w->n_gpus; i++) {
        fprintf(out, "%s%u", i ? "," : "", w->gpus[i]);
    }
    fputs("]}", out);
}

static void health_rank_json(FILE *out, const Troupe__V1__HealthRank *r)
{
    fputs("{\"worker\":", out);
    tr_json_str(out, r->worker);
    fputs(",\"group\":", out);
    tr_json_str(out, r->group);
    fprintf(out, ",\"rank\":%u,\"node\":", r->rank);
    tr_json_str(out, r->node);
    fprintf(out, ",\"last_step\":%llu,\"since_ms\":%lld,\"step_ms\":", (unsigned long long)r->last_step,
            (long long)r->since_ms);
    json_num(out, r->step_ms);
    fputs(",\"group_step_ms\":", out);
    json_num(out, r->group_step_ms);
    fputs(",\"ratio\":", out);
    json_num(out, r->ratio);
    fputs(",\"memory_bytes\":", out);
    json_num(out, r->memory_bytes);
    fputs(",\"memory_slope\":", out);
    json_num(out, r->memory_slope);
    fputs(",\"memory_total\":", out);
    json_num(out, r->memory_total);
    fprintf(out, ",\"memory_growing\":%s,\"memory_near\":%s}", r->memory_growing ? "true" : "false",
            r->memory_near ? "true" : "false");
}

static void health_ranks_json(FILE *out, const char *key, Troupe__V1__HealthRank *const *r, size_t n)
{
    fprintf(out, ",\"%s\":[", key);
    for (size_t i = 0; i < n; i++) {
        fputs(i ? "," : "", out);
        health_rank_json(out, r[i]);
    }
    fputc(']', out);
}

/* health_json: the head's judgement of the job (Job.health, set by the health
 * service's decorate hook); state NONE when not judged. */
static void health_json(FILE *out, const Troupe__V1__JobHealth *h)
{
    if (h == NULL) {
        fputs(",\"health\":{\"state\":\"NONE\",\"stalled\":[],\"stragglers\":[],\"memory\":[]}", out);
        return;
    }
    fprintf(out,
            ",\"health\":{\"state\":\"%s\",\"stall_after_ms\":%lld,\"judged_ms\":%lld,\"on_stall_fail\":%s,"
            "\"ended\":%s",
            enum_name(&troupe__v1__health_state__descriptor, h->state, "HEALTH_"),
            (long long)h->stall_after_ms, (long long)h->judged_ms, h->on_stall_fail ? "true" : "false",
            h->ended ? "true" : "false");
    health_ranks_json(out, "stalled", h->stalled, h->n_stalled);
    health_ranks_json(out, "stragglers", h->stragglers, h->n_stragglers);
    health_ranks_json(out, "memory", h->memory, h->n_memory);
    fputc('}', out);
}

static void job_json(FILE *out, const Troupe__V1__Job *j, int full)
{
    const Troupe__V1__JobSpec *sp = j->spec;

    fprintf(out, "{\"id\":%llu,\"name\":", (unsigned long long)j->id);
    tr_json_str(out, sp ? sp->name : "");
    fprintf(out, ",\"state\":\"%s\",\"reason\":", enum_name(&troupe__v1__job_state__descriptor, j->state, "JOB_"));
    tr_json_str(out, j->reason);
    fprintf(out, ",\"submitted_ms\":%lld,\"started_ms\":%lld,\"ended_ms\":%lld,\"restarts\":%u,\"groups\":[",
            (long long)j->submitted_ms, (long long)j->started_ms, (long long)j->ended_ms, j->restarts);
    for (size_t i = 0; sp != NULL && i < sp->n_groups; i++) {
        fprintf(out, "%s{\"name\":", i ? "," : "");
        tr_json_str(out, sp->groups[i]->name);
        fprintf(out, ",\"workers\":%u,\"gpus_per_worker\":%u", sp->groups[i]->workers, sp->groups[i]->gpus);
        /* Members now: fewer than workers once an elastic group shrank. */
        fprintf(out, ",\"members\":%u", i < j->n_groups ? j->groups[i]->world_size : sp->groups[i]->workers);
        if (sp->groups[i]->elastic != NULL) {
            fprintf(out, ",\"min_workers\":%u,\"max_workers\":%u", sp->groups[i]->elastic->min_workers,
                    sp->groups[i]->elastic->max_workers);
        }
        fputc('}', out);
    }
    fputs("],\"workers\":[", out);
    for (size_t i = 0; full && i < j->n_workers; i++) {
        fputs(i ? "," : "", out);
        worker_json(out, j->workers[i]);
    }
    /* An elastic group's changes: all for one job, the latest in a listing. */
    fputs("],\"membership\":[", out);
    for (size_t i = full || j->n_membership == 0 ? 0 : j->n_membership - 1, first = i; i < j->n_membership; i++) {
        fprintf(out, "%s{\"ts_ms\":%lld,\"kind\":", i > first ? "," : "", (long long)j->membership[i]->ts_ms);
        tr_json_str(out, j->membership[i]->kind);
        fputs(",\"text\":", out);
        tr_json_str(out, j->membership[i]->text);
        fputc('}', out);
    }
    fputc(']', out);
    health_json(out, j->health);
    fprintf(out, ",\"n_workers\":%zu}", j->n_workers);
}

/* job_out writes hj with the services' transient fields set, as a GetJob
 * reply carries them (tr_head_decorate). Under h->mu. */
static void job_out(tr_head *h, tr_head_job *hj, FILE *out)
{
    tr_head_decorate(h, hj, 1);
    job_json(out, hj->j, 1);
    tr_head_decorate(h, hj, 0);
}

static void api_error(tr_http_res *res, int status, const char *msg)
{
    res->status = status;
    fputs("{\"error\":", res->body);
    tr_json_str(res->body, msg);
    fputs("}\n", res->body);
}

/* saved_or_refused waits until every job in hj[0..n) is saved; 0 when it
 * is, else 503 in res naming the first job that is not (under h->mu). */
static int saved_or_refused(tr_head *h, tr_head_job *const *hj, size_t n, tr_http_res *res)
{
    uint64_t seq = 0, unsaved = 0;
    char msg[1024];

    for (size_t i = 0; i < n; i++) {
        if (hj[i]->save_seq > seq) {
            seq = hj[i]->save_seq;
            unsaved = hj[i]->j->id;
        }
    }
    if (seq <= h->saved_seq || tr_head_wait_saved(h, seq, SAVE_WAIT_MS)) {
        return 0;
    }
    snprintf(msg, sizeof(msg),
             "job %llu has changes the head could not save yet (state store in %s: %s); retry once the "
             "store writes",
             (unsigned long long)unsaved, h->cfg.state_dir, h->store_failing ? h->store_error : "busy");
    api_error(res, 503, msg);
    return -1;
}

static void jobs(tr_head *h, tr_http_res *res)
{
    FILE *out = res->body;
    size_t listed = 0, n;

    pthread_mutex_lock(&h->mu);
    n = h->n_jobs < MAX_JOBS_LISTED ? h->n_jobs : MAX_JOBS_LISTED;
    if (n > 0 && saved_or_refused(h, h->jobs + (h->n_jobs - n), n, res) != 0) { /* no jobs: h->jobs may be NULL */
        pthread_mutex_unlock(&h->mu);
        return;
    }
    fputs("{\"jobs\":[", out);
    for (size_t i = h->n_jobs; i > 0 && listed < MAX_JOBS_LISTED; i--, listed++) {
        fputs(listed ? "," : "", out);
        job_out(h, h->jobs[i - 1], out);
    }
    fprintf(out, "],\"total\":%zu}\n", h->n_jobs);
    pthread_mutex_unlock(&h->mu);
}

/* job writes job id, or 404 / 503 in res. */
static void job(tr_head *h, uint64_t id, tr_http_res *res)
{
    tr_head_job *hj;
    char msg[64];

    pthread_mutex_lock(&h->mu);
    if ((hj = tr_jobs_find(h, id)) == NULL) {
        snprintf(msg, sizeof(msg), "no job %llu", (unsigned long long)id);
        api_error(res, 404, msg);
    } else if (saved_or_refused(h, &hj, 1, res) == 0 && (hj = tr_jobs_find(h, id)) != NULL) {
        job_out(h, hj, res->body);
        fputc('\n', res->body);
    } else if (hj == NULL) { /* deleted while waiting for the disk */
        snprintf(msg, sizeof(msg), "no job %llu", (unsigned long long)id);
        api_error(res, 404, msg);
    }
    pthread_mutex_unlock(&h->mu);
}

/* ---- metrics ----------------------------------------------------------------------- */

/* split_list splits a comma list in place into at most max entries. */
static size_t split_list(char *s, char **list, size_t max)
{
    size_t n = 0;
    for (char *save = NULL, *t = strtok_r(s, ",", &save); t != NULL && n < max; t = strtok_r(NULL, ",", &save)) {
        list[n++] = t;
    }
    return n;
}

static void points_json(FILE *out, const Troupe__V1__GetMetricsReply *rep)
{
    fputs("{\"points\":[", out);
    for (size_t i = 0; i < rep->n_points; i++) {
        const Troupe__V1__MetricPoint *p = rep->points[i];
        fprintf(out, "%s{\"id\":%llu,\"worker\":", i ? "," : "", (unsigned long long)p->id);
        tr_json_str(out, p->worker);
        fprintf(out, ",\"attempt\":%u,\"seq\":%llu,\"step\":%llu,\"name\":", p->attempt, (unsigned long long)p->seq,
                (unsigned long long)p->step);
        tr_json_str(out, p->name);
        fputs(",\"value\":", out);
        json_num(out, p->value);
        fprintf(out, ",\"ts_ms\":%lld}", (long long)p->ts_ms);
    }
    fprintf(out, "],\"next_id\":%llu,\"more\":%s,\"streams\":[", (unsigned long long)rep->next_id,
            rep->more ? "true" : "false");
    for (size_t i = 0; i < rep->n_streams; i++) {
        const Troupe__V1__MetricStream *m = rep->streams[i];
        fprintf(out, "%s{\"worker\":", i ? "," : "");
        tr_json_str(out, m->worker);
        fprintf(out, ",\"attempt\":%u,\"stored\":%llu,\"dropped\":%llu}", m->attempt, (unsigned long long)m->stored,
                (unsigned long long)m->dropped);
    }
    fprintf(out, "],\"kept\":%llu,\"trimmed\":%llu}\n", (unsigned long long)rep->kept,
            (unsigned long long)rep->trimmed);
}

static int job_metrics(tr_head *h, uint64_t id, const char *query, FILE *out, tr_err *err)
{
    Troupe__V1__GetMetricsRequest req = TROUPE__V1__GET_METRICS_REQUEST__INIT;
    Troupe__V1__GetMetricsReply rep;
    char names[2048] = "", workers[2048] = "", num[32];
    char *nl[64], *wl[64];
    int rv;

    req.job_id = id;
    if (tr_http_query_get(query, "name", names, sizeof(names))) {
        req.n_names = split_list(names, nl, 64);
        req.names = nl;
    }
    if (tr_http_query_get(query, "worker", workers, sizeof(workers))) {
        req.n_workers = split_list(workers, wl, 64);
        req.workers = wl;
    }
    if (tr_http_query_get(query, "after", num, sizeof(num))) {
        req.after_id = strtoull(num, NULL, 10);
    }
    if (tr_http_query_get(query, "last", num, sizeof(num))) {
        req.last = (uint32_t)strtoul(num, NULL, 10);
    }
    if (tr_http_query_get(query, "limit", num, sizeof(num))) {
        req.limit = (uint32_t)strtoul(num, NULL, 10);
    }
    rv = tr_metrics_query(h, &req, &rep, err);
    if (rv == TROUPE_OK) {
        points_json(out, &rep);
    }
    tr_metrics_reply_free(&rep);
    return rv;
}

/* ---- routing -------------------------------------------------------------------------- */


void tr_http_api(tr_head *h, const tr_http_req *req, tr_http_res *res)
{
    const char *p = req->path + 5; /* after "/api/" */
    char *end;
    uint64_t id;
    tr_err err;

    res->ctype = "application/json";
    if (strcmp(p, "cluster") == 0) {
        cluster(h, res->body);
        return;
    }
    if (strcmp(p, "jobs") == 0) {
        jobs(h, res);
        return;
    }
    if (strncmp(p, "jobs/", 5) != 0 || (id = strtoull(p + 5, &end, 10)) == 0 || end == p + 5) {
        api_error(res, 404, "no such API path (see /api/cluster, /api/jobs, /api/jobs/ID, /api/jobs/ID/metrics)");
        return;
    }
    if (*end == '\0') {
        job(h, id, res);
    } else if (strcmp(end, "/metrics") == 0) {
        int rv = job_metrics(h, id, req->query, res->body, &err);
        if (rv != TROUPE_OK) {
            api_error(res, rv == TROUPE_NOT_FOUND ? 404 : rv == TROUPE_INVALID_ARGUMENT ? 400 : 503, err.msg);
        }
    } else {
        api_error(res, 404, "no such API path (see /api/cluster, /api/jobs, /api/jobs/ID, /api/jobs/ID/metrics)");
    }
}
