/* health.c - the head's job health service (see health.h).
 *
 * State: per job that sent step figures, one tracker per worker
 * (tr_hj_rank: its last step, step times, memory points for its current
 * attempt), fed by metrics.c as reports arrive, and the latest judgement,
 * kept packed (a JobHealth message) so that replies and tr_health_job copy
 * it without looking at the trackers.
 *
 * The judge (a background worker, bgw.h) runs every health_tick_ms under
 * h->mu, takes s->mu, and for every RUNNING job with trackers judges each
 * group's RUNNING workers (health_judge.c). What changed since the last tick (a rank stalled or
 * stepping again, a new straggler, a new memory warning) becomes an event in
 * the job's history; a stall in a job with on_stall: fail fails the stalled
 * rank once per epoch of its group (tr_jobs_worker_failed: an elastic group
 * shrinks it away, else the restart rules apply), naming a stalled rank that
 * is not waiting on its peers for a new membership (culprit). The
 * events and failures are applied after s->mu is released, because they
 * call back into job_changed, which takes it.
 *
 * Locks: h->mu before s->mu, always. The feed takes s->mu only, so a
 * report never waits for h->mu here. */
#include "health.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgw.h"
#include "elastic.h"
#include "health_judge.h"
#include "jobs.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

#define NAME_MAX_LEN 128
#define MAX_ACTIONS 64
#define TEXT_LEN 1500
#define REPEAT_MS 60000 /* a rank that flaps around a threshold is said once a minute at most */
/* A member waiting for a new membership asks the head every 500 ms
 * (worker_elastic.c); one that asked this recently is still waiting. */
#define AWAIT_FRESH_MS 2000

typedef struct hworker {
    char name[NAME_MAX_LEN];
    tr_hj_rank r;
    int stalled_noted, straggler_noted, memory_noted; /* the condition is in the history */
    int64_t straggler_ms, memory_ms; /* tr_now_ms() of the last such event: one a minute at most */
} hworker;

typedef struct fired {
    char group[NAME_MAX_LEN];
    uint32_t epoch; /* the group communicator's epoch (attempt + membership changes) */
} fired;

typedef struct hjob {
    uint64_t id;
    hworker **w;
    size_t n_w, cap_w;
    hworker **index; /* open addressing by name (a report names its worker): size idx_cap, at most half full */
    size_t idx_cap;
    uint8_t *verdict; /* packed JobHealth; NULL = none yet */
    size_t verdict_len;
    fired *fired; /* groups failed for a stall, by epoch */
    size_t n_fired;
    int ended; /* the job ended: verdict is its last judgement, kept (no trackers) */
    struct hjob *next;
} hjob;

/* A message decorated with a judgement (decorate, list_fields), freed when
 * the hook is called again with on = 0. Only under h->mu. */
typedef struct decorated {
    Troupe__V1__Job *msg;
    Troupe__V1__JobHealth *health;
} decorated;

/* Something to do once s->mu is released: an event, or a stall failure. */
typedef struct action {
    uint64_t job;
    int fail; /* tr_jobs_worker_failed(worker idx) */
    size_t idx;
    char kind[16];
    char text[TEXT_LEN];
} action;

typedef struct health_svc {
    tr_head *h;
    pthread_mutex_t mu; /* after h->mu */
    tr_bgw *judge;      /* judges every health_tick_ms, under h->mu */
    int64_t judge_at;   /* tr_now_ms() of its next judgement (under h->mu) */
    hjob *jobs;
    decorated *dec;
    size_t n_dec, cap_dec;
    action actions[MAX_ACTIONS];
    size_t n_actions;
} health_svc;

static health_svc *svc_of(tr_head *h)
{
    for (size_t i = 0; i < h->n_svc; i++) {
        if (h->svc[i] == &tr_health_service) {
            return h->svc_state[i];
        }
    }
    return NULL;
}

/* ---- trackers ------------------------------------------------------------------ */

static hjob *job_get(health_svc *s, uint64_t id, int create)
{
    hjob *j;
    for (j = s->jobs; j != NULL; j = j->next) {
        if (j->id == id) {
            return j;
        }
    }
    if (!create || (j = calloc(1, sizeof(*j))) == NULL) {
        return NULL;
    }
    j->id = id;
    j->next = s->jobs;
    s->jobs = j;
    return j;
}

static void job_free(hjob *j)
{
    for (size_t i = 0; i < j->n_w; i++) {
        free(j->w[i]);
    }
    free(j->w);
    free(j->index);
    free(j->verdict);
    free(j->fired);
    free(j);
}

/* An ended job keeps its last judgement, so that what was wrong when it
 * ended (a stall that failed it, a straggler) stays on `troupe job` and the
 * dashboard; the trackers go. At most MAX_ENDED such judgements are kept,
 * the oldest jobs' dropped first; a deleted job's goes at the next tick. */
#define MAX_ENDED 4096

static void job_drop(health_svc *s, uint64_t id);

static void job_end(health_svc *s, hjob *j)
{
    Troupe__V1__JobHealth *jh =
        j->verdict ? troupe__v1__job_health__unpack(NULL, j->verdict_len, j->verdict) : NULL;
    size_t n_ended = 0;
    hjob *oldest = NULL;

    for (size_t i = 0; i < j->n_w; i++) {
        free(j->w[i]);
    }
    free(j->w);
    free(j->index);
    j->w = NULL;
    j->index = NULL;
    j->n_w = j->cap_w = j->idx_cap = 0;
    j->ended = 1;
    if (jh != NULL) {
        jh->ended = 1;
        size_t len = troupe__v1__job_health__get_packed_size(jh);
        uint8_t *buf = malloc(len + 1);
        if (buf != NULL) {
            troupe__v1__job_health__pack(jh, buf);
            free(j->verdict);
            j->verdict = buf;
            j->verdict_len = len;
        }
        troupe__v1__job_health__free_unpacked(jh, NULL);
    }
    for (hjob *k = s->jobs; k != NULL; k = k->next) {
        n_ended += k->ended;
        oldest = k->ended && (oldest == NULL || k->id < oldest->id) ? k : oldest;
    }
    if (n_ended > MAX_ENDED && oldest != NULL && oldest != j) {
        job_drop(s, oldest->id);
    }
}

static void job_drop(health_svc *s, uint64_t id)
{
    for (hjob **pp = &s->jobs; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->id == id) {
            hjob *j = *pp;
            *pp = j->next;
            job_free(j);
            return;
        }
    }
}

static size_t name_hash(const char *s)
{
    size_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s != '\0'; s++) {
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    }
    return h;
}

/* index_put places w in an index of cap slots (a power of two). */
static void index_put(hworker **index, size_t cap, hworker *w)
{
    size_t k = name_hash(w->name) & (cap - 1);
    while (index[k] != NULL) {
        k = (k + 1) & (cap - 1);
    }
    index[k] = w;
}

/* index_grow keeps the index at most half full: every report looks its
 * worker up by name, and a job may have thousands. */
static int index_grow(hjob *j)
{
    size_t cap = j->idx_cap ? 2 * j->idx_cap : 16;
    hworker **index;

    if (2 * (j->n_w + 1) <= j->idx_cap) {
        return 0;
    }
    if ((index = calloc(cap, sizeof(*index))) == NULL) {
        return -1;
    }
    for (size_t i = 0; i < j->n_w; i++) {
        index_put(index, cap, j->w[i]);
    }
    free(j->index);
    j->index = index;
    j->idx_cap = cap;
    return 0;
}

/* worker_get finds (or makes, at attempt) a worker's tracker. */
static hworker *worker_get(hjob *j, const char *name, uint32_t attempt, int create)
{
    hworker *w;

    for (size_t k = j->idx_cap ? name_hash(name) & (j->idx_cap - 1) : 0; j->idx_cap && j->index[k] != NULL;
         k = (k + 1) & (j->idx_cap - 1)) {
        if (strcmp(j->index[k]->name, name) == 0) {
            return j->index[k];
        }
    }
    if (!create || strlen(name) >= NAME_MAX_LEN || index_grow(j) != 0) {
        return NULL;
    }
    if (j->n_w == j->cap_w) {
        size_t cap = j->cap_w ? 2 * j->cap_w : 8;
        hworker **grown = realloc(j->w, cap * sizeof(*grown));
        if (grown == NULL) {
            return NULL;
        }
        j->w = grown;
        j->cap_w = cap;
    }
    if ((w = calloc(1, sizeof(*w))) == NULL) {
        return NULL;
    }
    tr_strlcpy(w->name, name, sizeof(w->name));
    tr_hj_reset(&w->r, attempt);
    j->w[j->n_w++] = w;
    index_put(j->index, j->idx_cap, w);
    return w;
}

/* worker_attempt moves w to attempt (a restarted group starts over). */
static void worker_attempt(hworker *w, uint32_t attempt)
{
    if (attempt > w->r.attempt) {
        tr_hj_reset(&w->r, attempt);
        w->stalled_noted = w->straggler_noted = w->memory_noted = 0;
        w->straggler_ms = w->memory_ms = 0;
    }
}

/* health_feed hears the points of an accepted ReportMetrics (the metrics
 * service calls it once the worker is known to be the job's:
 * tr_metrics_on_report). Takes only the service's own lock. */
static void health_feed(void *arg, const Troupe__V1__ReportMetricsRequest *req)
{
    health_svc *s = arg;
    int64_t now = tr_now_ms();
    hjob *j;
    hworker *w = NULL;

    if (s == NULL || req->from == NULL || req->from->worker == NULL) {
        return;
    }
    pthread_mutex_lock(&s->mu);
    /* a late report of an ended job is kept out: its last judgement stays as it was */
    if ((j = job_get(s, req->from->job_id, 1)) != NULL && !j->ended) {
        w = worker_get(j, req->from->worker, req->from->attempt, 1);
    }
    if (w != NULL) {
        worker_attempt(w, req->from->attempt);
    }
    for (size_t i = 0; w != NULL && w->r.attempt == req->from->attempt && i < req->n_points; i++) {
        const Troupe__V1__MetricPoint *p = req->points[i];
        if (strchr("sgfbo", p->name[0]) != NULL) { /* step_ms, gpu_mem_*, the phases: the only names read */
            tr_hj_feed(&w->r, p->step, p->name, p->value, now);
        }
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---- thresholds ------------------------------------------------------------------ */

int tr_health_check_config(const tr_head_config *c, tr_err *err)
{
    if (c->health_on_stall == NULL ||
        (strcmp(c->health_on_stall, "warn") != 0 && strcmp(c->health_on_stall, "fail") != 0)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "health_on_stall '%s': use warn or fail",
                          c->health_on_stall ? c->health_on_stall : "");
    }
    return TROUPE_OK;
}

/* cfg_for: the job's `health:` over the head's defaults. */
static void cfg_for(const tr_head *h, const Troupe__V1__HealthSpec *hs, tr_hj_cfg *c, int *on_stall_fail)
{
    const tr_head_config *d = &h->cfg;

    c->stall_after_ms = hs != NULL ? hs->stall_after_ms : 0;
    c->stall_min_ms = d->health_stall_min_ms;
    c->stall_factor = d->health_stall_factor;
    c->straggler_factor = hs != NULL && hs->straggler_factor > 0 ? hs->straggler_factor : d->health_straggler_factor;
    c->straggler_window =
        (uint32_t)(hs != NULL && hs->straggler_window > 0 ? hs->straggler_window : d->health_straggler_window);
    c->memory_window = (uint32_t)(hs != NULL && hs->memory_window > 0 ? hs->memory_window : d->health_memory_window);
    c->memory_slope_bytes =
        1048576.0 * (hs != NULL && hs->memory_slope_mb > 0 ? hs->memory_slope_mb : d->health_memory_slope_mb);
    c->memory_near = hs != NULL && hs->memory_near > 0 ? hs->memory_near : d->health_memory_near;
    *on_stall_fail = hs != NULL && hs->on_stall_set ? hs->on_stall_fail : strcmp(d->health_on_stall, "fail") == 0;
}

/* ---- judging ------------------------------------------------------------------- */

/* act queues an event (or, with fail, a failure of worker idx) for after the
 * tick; past MAX_ACTIONS in one tick the rest waits for the next one (the
 * conditions are still there, their noted flags not yet set). */
static int act(health_svc *s, uint64_t job, const char *kind, int fail, size_t idx, const char *text)
{
    action *a;
    if (s->n_actions == MAX_ACTIONS) {
        return -1;
    }
    a = &s->actions[s->n_actions++];
    a->job = job;
    a->fail = fail;
    a->idx = idx;
    tr_strlcpy(a->kind, kind, sizeof(a->kind));
    tr_strlcpy(a->text, text, sizeof(a->text));
    return 0;
}

/* who names a worker for people: "rank 1 (job3-policy-1 on na, GPU 1)". */
static void who(const Troupe__V1__WorkerInfo *w, char *buf, size_t size)
{
    size_t off = (size_t)snprintf(buf, size, "rank %u (%s on %s", w->rank, w->name, w->node_name);
    for (size_t k = 0; k < w->n_gpus && off < size; k++) {
        off += (size_t)snprintf(buf + off, size - off, "%s%u", k ? "," : w->n_gpus > 1 ? ", GPUs " : ", GPU ",
                                w->gpus[k]);
    }
    if (off < size) {
        snprintf(buf + off, size - off, ")");
    }
}

static Troupe__V1__HealthRank *rank_msg(const Troupe__V1__WorkerInfo *w, const tr_hj_rank *r,
                                        const tr_hj_rank_verdict *v, int64_t mono, int64_t wall)
{
    Troupe__V1__HealthRank *m = calloc(1, sizeof(*m));

    if (m == NULL) {
        return NULL;
    }
    troupe__v1__health_rank__init(m);
    m->worker = strdup(w->name);
    m->group = strdup(w->group);
    m->node = strdup(w->node_name);
    m->gpus = calloc(w->n_gpus + 1, sizeof(*m->gpus));
    if (m->worker == NULL || m->group == NULL || m->node == NULL || m->gpus == NULL) {
        troupe__v1__health_rank__free_unpacked(m, NULL);
        return NULL;
    }
    if (w->n_gpus > 0) { /* a CPU-only worker has none, and gpus may be NULL */
        memcpy(m->gpus, w->gpus, w->n_gpus * sizeof(*m->gpus));
    }
    m->n_gpus = w->n_gpus;
    m->rank = w->rank;
    m->last_step = r->last_step;
    m->since_ms = v->stalled ? wall - (mono - v->stalled_since) : 0;
    m->step_ms = v->step_ms;
    m->group_step_ms = v->group_step_ms;
    m->ratio = v->ratio;
    m->by_compute = v->by_compute;
    m->memory_bytes = v->memory_bytes;
    m->memory_slope = v->memory_slope;
    m->memory_total = v->memory_total;
    m->memory_growing = v->memory_growing;
    m->memory_near = v->memory_near;
    return m;
}

static int add_rank(Troupe__V1__HealthRank ***list, size_t *n, Troupe__V1__HealthRank *m)
{
    Troupe__V1__HealthRank **grown = m ? realloc(*list, (*n + 1) * sizeof(*grown)) : NULL;
    if (grown == NULL) {
        if (m != NULL) {
            troupe__v1__health_rank__free_unpacked(m, NULL);
        }
        return -1;
    }
    *list = grown;
    grown[(*n)++] = m;
    return 0;
}

/* A group being judged: its RUNNING workers and their trackers. */
typedef struct gjudge {
    const tr_hj_cfg *cfg;
    int on_stall_fail;
    tr_head_job *hj;
    hjob *job;
    size_t *idx; /* worker indexes in hj->j->workers */
    hworker **hw;
    const tr_hj_rank **ranks;
    tr_hj_rank_verdict *v;
    size_t n;
    int64_t mono, wall;
} gjudge;

/* culprit: which stalled rank a stall failure names (and an elastic group
 * takes out), SIZE_MAX for none. In synchronous training every rank stops
 * stepping when one does; the others fail their collective at its deadline
 * and then wait for a new membership, asking the head, so the first stalled
 * rank that is not waiting is the one that stopped. When every stalled rank
 * waits (the head shrank the group and the survivors have not stepped in the
 * new epoch yet), the head's membership is what they wait for: no stall of
 * theirs. Ranks that never ask (groups that are not elastic) are judged as
 * before. */
static size_t culprit(const gjudge *g)
{
    for (size_t i = 0; i < g->n; i++) {
        int64_t asked = tr_jobs_awaited_ms(g->hj, g->idx[i]);
        if (g->v[i].stalled && (asked == 0 || g->mono - asked > AWAIT_FRESH_MS)) {
            return i;
        }
    }
    return SIZE_MAX;
}

static void note_stalls(health_svc *s, gjudge *g, const tr_hj_group_verdict *gv)
{
    char text[TEXT_LEN], name[300];
    size_t off = 0, first = SIZE_MAX, fresh = 0;

    for (size_t i = 0; i < g->n; i++) {
        const Troupe__V1__WorkerInfo *w = g->hj->j->workers[g->idx[i]];
        if (g->v[i].stalled && !g->hw[i]->stalled_noted) {
            who(w, name, sizeof(name));
            if (off < sizeof(text)) {
                off += (size_t)snprintf(text + off, sizeof(text) - off, "%s%s made no step for %.1f s (last step %llu)",
                                        fresh ? "; " : "", name, (double)(g->mono - g->v[i].stalled_since) / 1000.0,
                                        (unsigned long long)g->hw[i]->r.last_step);
            }
            g->hw[i]->stalled_noted = 1;
            fresh++;
        } else if (!g->v[i].stalled && g->hw[i]->stalled_noted) {
            who(w, name, sizeof(name));
            snprintf(text, sizeof(text), "%s steps again (step %llu)", name, (unsigned long long)g->hw[i]->r.last_step);
            g->hw[i]->stalled_noted = act(s, g->job->id, "PROGRESS", 0, 0, text) != 0;
        }
        if (g->v[i].stalled && first == SIZE_MAX) {
            first = i;
        }
    }
    if (fresh > 0) {
        char full[TEXT_LEN + 200];
        snprintf(full, sizeof(full), "%s%s (stall_after %.1f s)",
                 gv->stalled == g->n ? "no rank of the group made progress: " : "", text,
                 (double)gv->stall_after_ms / 1000.0);
        if (act(s, g->job->id, "STALLED", 0, 0, full) != 0) {
            for (size_t i = 0; i < g->n; i++) {
                g->hw[i]->stalled_noted = g->v[i].stalled ? 0 : g->hw[i]->stalled_noted; /* next tick */
            }
        }
    }
    if (first != SIZE_MAX && g->on_stall_fail && (first = culprit(g)) != SIZE_MAX) {
        const Troupe__V1__WorkerInfo *w = g->hj->j->workers[g->idx[first]];
        uint32_t epoch;
        /* Once per epoch of the group: a restart or a shrink moves it on, so
         * an elastic group that shrank away one stalled rank can fail the
         * next one. */
        epoch = tr_elastic_epoch(g->hj->j, w->group);
        for (size_t f = 0; f < g->job->n_fired; f++) {
            if (strcmp(g->job->fired[f].group, w->group) == 0 && g->job->fired[f].epoch == epoch) {
                return; /* failed already; the restart, the shrink or the end is on its way */
            }
        }
        fired *grown = realloc(g->job->fired, (g->job->n_fired + 1) * sizeof(*grown));
        if (grown == NULL) {
            return; /* tried again next tick */
        }
        g->job->fired = grown;
        tr_strlcpy(grown[g->job->n_fired].group, w->group, sizeof(grown->group));
        grown[g->job->n_fired++].epoch = epoch;
        who(w, name, sizeof(name));
        snprintf(text, sizeof(text), "health: %s made no step for %.1f s (stall_after %.1f s, health.on_stall: fail)",
                 name, (double)(g->mono - g->v[first].stalled_since) / 1000.0, (double)gv->stall_after_ms / 1000.0);
        act(s, g->job->id, "", 1, g->idx[first], text);
    }
}

static void note_findings(health_svc *s, gjudge *g)
{
    char text[TEXT_LEN], name[300];

    for (size_t i = 0; i < g->n; i++) {
        const Troupe__V1__WorkerInfo *w = g->hj->j->workers[g->idx[i]];
        const tr_hj_rank_verdict *v = &g->v[i];
        hworker *hw = g->hw[i];
        if (v->straggler && !hw->straggler_noted && (hw->straggler_ms == 0 || g->mono - hw->straggler_ms >= REPEAT_MS)) {
            who(w, name, sizeof(name));
            snprintf(text, sizeof(text), "%s: median %s %.0f ms over the last %u steps, %.2fx the group's %.0f ms",
                     name, v->by_compute ? "compute (forward+backward+optimizer)" : "step", v->step_ms,
                     g->cfg->straggler_window, v->ratio, v->group_step_ms);
            hw->straggler_noted = act(s, g->job->id, "STRAGGLER", 0, 0, text) == 0;
            hw->straggler_ms = hw->straggler_noted ? g->mono : hw->straggler_ms;
        } else if (!v->straggler && !v->stalled) {
            hw->straggler_noted = 0;
        }
        int mem = v->memory_growing || v->memory_near;
        if (mem && !hw->memory_noted && (hw->memory_ms == 0 || g->mono - hw->memory_ms >= REPEAT_MS)) {
            who(w, name, sizeof(name));
            if (v->memory_growing) {
                snprintf(text, sizeof(text),
                         "%s: allocated GPU memory grows %.2f MiB per step over the last %u steps (%.2f GiB now)",
                         name, v->memory_slope / 1048576.0, g->cfg->memory_window, v->memory_bytes / 1073741824.0);
            } else {
                snprintf(text, sizeof(text), "%s: allocated GPU memory at %.0f%% of the GPU's %.2f GiB", name,
                         100.0 * v->memory_bytes / v->memory_total, v->memory_total / 1073741824.0);
            }
            hw->memory_noted = act(s, g->job->id, "MEMORY", 0, 0, text) == 0;
            hw->memory_ms = hw->memory_noted ? g->mono : hw->memory_ms;
        } else if (!mem) {
            hw->memory_noted = 0;
        }
    }
}

/* add_findings puts every named rank of the group into the verdict. */
static int add_findings(gjudge *g, Troupe__V1__JobHealth *jh)
{
    int rv = 0;
    for (size_t i = 0; i < g->n && rv == 0; i++) {
        const Troupe__V1__WorkerInfo *w = g->hj->j->workers[g->idx[i]];
        const tr_hj_rank_verdict *v = &g->v[i];
        if (v->stalled) {
            rv |= add_rank(&jh->stalled, &jh->n_stalled, rank_msg(w, &g->hw[i]->r, v, g->mono, g->wall));
        }
        if (v->straggler) {
            rv |= add_rank(&jh->stragglers, &jh->n_stragglers, rank_msg(w, &g->hw[i]->r, v, g->mono, g->wall));
        }
        if (v->memory_growing || v->memory_near) {
            rv |= add_rank(&jh->memory, &jh->n_memory, rank_msg(w, &g->hw[i]->r, v, g->mono, g->wall));
        }
    }
    return rv;
}

/* gather fills g with the group's RUNNING workers; 0 when it has none. */
static size_t gather(gjudge *g, const char *group)
{
    const Troupe__V1__Job *j = g->hj->j;

    g->n = 0;
    for (size_t i = 0; i < j->n_workers; i++) {
        const Troupe__V1__WorkerInfo *w = j->workers[i];
        hworker *hw;
        if (w->state != TROUPE__V1__WORKER_STATE__WORKER_RUNNING || w->removed || strcmp(w->group, group) != 0 ||
            (hw = worker_get(g->job, w->name, w->attempt, 1)) == NULL) {
            continue;
        }
        worker_attempt(hw, w->attempt);
        if (hw->r.attempt != w->attempt) {
            continue; /* reports of a later attempt than the record: not judged against it */
        }
        g->idx[g->n] = i;
        g->hw[g->n] = hw;
        g->ranks[g->n] = &hw->r;
        g->n++;
    }
    return g->n;
}

/* judge_job judges every group of a RUNNING job into jh; events and a stall
 * failure are queued. -1 when out of memory. */
static int judge_job(health_svc *s, tr_head_job *hj, hjob *job, int64_t mono, Troupe__V1__JobHealth *jh)
{
    const Troupe__V1__JobSpec *spec = hj->j->spec;
    size_t n = hj->j->n_workers;
    tr_hj_cfg cfg;
    gjudge g = {.cfg = &cfg, .hj = hj, .job = job, .mono = mono, .wall = tr_wall_ms()};
    int active = 0, rv = 0;

    cfg_for(s->h, spec->health, &cfg, &g.on_stall_fail);
    g.idx = calloc(n + 1, sizeof(*g.idx));
    g.hw = calloc(n + 1, sizeof(*g.hw));
    g.ranks = calloc(n + 1, sizeof(*g.ranks));
    g.v = calloc(n + 1, sizeof(*g.v));
    if (g.idx == NULL || g.hw == NULL || g.ranks == NULL || g.v == NULL) {
        rv = -1;
    }
    jh->on_stall_fail = g.on_stall_fail;
    jh->judged_ms = g.wall;
    for (size_t k = 0; rv == 0 && k < spec->n_groups; k++) {
        tr_hj_group_verdict gv;
        if (gather(&g, spec->groups[k]->name) == 0) {
            continue;
        }
        tr_hj_judge_group(&cfg, g.ranks, g.n, mono, g.v, &gv);
        if (!gv.active) {
            continue;
        }
        if (!active || gv.stall_after_ms < jh->stall_after_ms) {
            jh->stall_after_ms = gv.stall_after_ms;
        }
        active = 1;
        note_stalls(s, &g, &gv);
        note_findings(s, &g);
        rv = add_findings(&g, jh);
    }
    jh->state = jh->n_stalled > 0 ? TROUPE__V1__HEALTH_STATE__HEALTH_STALLED
                : active          ? TROUPE__V1__HEALTH_STATE__HEALTH_OK
                                  : TROUPE__V1__HEALTH_STATE__HEALTH_NONE;
    free(g.idx);
    free(g.hw);
    free(g.ranks);
    free(g.v);
    return rv;
}

/* verdict_clear frees what judge_job put into a JobHealth on the stack. */
static void verdict_clear(Troupe__V1__JobHealth *jh)
{
    Troupe__V1__HealthRank **lists[3] = {jh->stalled, jh->stragglers, jh->memory};
    size_t ns[3] = {jh->n_stalled, jh->n_stragglers, jh->n_memory};

    for (int l = 0; l < 3; l++) {
        for (size_t i = 0; i < ns[l]; i++) {
            troupe__v1__health_rank__free_unpacked(lists[l][i], NULL);
        }
        free(lists[l]);
    }
}

/* keep_verdict stores jh packed as the job's latest judgement. */
static void keep_verdict(hjob *job, const Troupe__V1__JobHealth *jh)
{
    size_t len = troupe__v1__job_health__get_packed_size(jh);
    uint8_t *buf = malloc(len + 1);

    if (buf == NULL) {
        return; /* the previous judgement stays */
    }
    troupe__v1__job_health__pack(jh, buf);
    free(job->verdict);
    job->verdict = buf;
    job->verdict_len = len;
}

/* apply_actions runs what the tick queued (h->mu held, s->mu not). */
static void apply_actions(health_svc *s, action *acts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        tr_head_job *hj = tr_jobs_find(s->h, acts[i].job);
        if (hj == NULL || hj->j->state != TROUPE__V1__JOB_STATE__JOB_RUNNING) {
            continue;
        }
        if (acts[i].fail) {
            TR_LOG(TR_LOG_WARNING, "job=%llu %s", (unsigned long long)acts[i].job, acts[i].text);
            tr_jobs_worker_failed(s->h, hj, acts[i].idx, acts[i].text);
        } else {
            TR_LOG(TR_LOG_WARNING, "job=%llu health %s: %s", (unsigned long long)acts[i].job, acts[i].kind,
                   acts[i].text);
            tr_jobs_note(s->h, hj, acts[i].kind, acts[i].text);
        }
    }
}

static void judge(health_svc *s)
{
    tr_head *h = s->h;
    action *acts = NULL;
    size_t n = 0;
    int64_t mono = tr_now_ms();

    pthread_mutex_lock(&s->mu);
    s->n_actions = 0;
    for (hjob **pp = &s->jobs; *pp != NULL;) {
        hjob *job = *pp;
        tr_head_job *hj = tr_jobs_find(h, job->id);
        Troupe__V1__JobHealth jh = TROUPE__V1__JOB_HEALTH__INIT;
        if (hj == NULL) {
            *pp = job->next; /* deleted */
            job_free(job);
            continue;
        }
        if (hj->j->state != TROUPE__V1__JOB_STATE__JOB_RUNNING) {
            if (!job->ended) {
                job_end(s, job); /* its last judgement stays; nothing more to judge */
            }
            pp = &job->next;
            continue;
        }
        job->ended = 0; /* running again (requeued, then placed): judged afresh */
        if (judge_job(s, hj, job, mono, &jh) == 0) {
            keep_verdict(job, &jh);
        }
        verdict_clear(&jh);
        pp = &job->next;
    }
    if (s->n_actions > 0 && (acts = malloc(s->n_actions * sizeof(*acts))) != NULL) {
        memcpy(acts, s->actions, s->n_actions * sizeof(*acts));
        n = s->n_actions;
    }
    pthread_mutex_unlock(&s->mu);
    apply_actions(s, acts, n);
    free(acts);
}

/* judge_tick (the judge, h->mu held): a judgement every health_tick_ms,
 * the first one period after the start. */
static int64_t judge_tick(void *arg, int64_t now)
{
    health_svc *s = arg;

    if (now >= s->judge_at) {
        judge(s); /* takes s->mu */
        s->judge_at = now + s->h->cfg.health_tick_ms;
    }
    return s->judge_at;
}

/* ---- what replies and readers see --------------------------------------------- */

/* copy_verdict unpacks job id's judgement (s->mu held); NULL when there is
 * none or no memory. */
static Troupe__V1__JobHealth *copy_verdict(health_svc *s, uint64_t id)
{
    hjob *j = job_get(s, id, 0);
    if (j == NULL || j->verdict == NULL) {
        return NULL;
    }
    return troupe__v1__job_health__unpack(NULL, j->verdict_len, j->verdict);
}

int tr_health_job(tr_head *h, uint64_t job_id, Troupe__V1__JobHealth **out)
{
    health_svc *s = svc_of(h);

    *out = NULL;
    if (s == NULL) {
        return TROUPE_FAILED_PRECONDITION;
    }
    pthread_mutex_lock(&s->mu);
    *out = copy_verdict(s, job_id);
    pthread_mutex_unlock(&s->mu);
    if (*out == NULL && (*out = malloc(sizeof(**out))) != NULL) {
        troupe__v1__job_health__init(*out); /* HEALTH_NONE */
    }
    return *out != NULL ? TROUPE_OK : TROUPE_RESOURCE_EXHAUSTED;
}

/* set_health gives msg (a job's record, or a listing's copy of it) its
 * judgement (on), or takes it back (off). Under h->mu. */
static void set_health(health_svc *s, Troupe__V1__Job *msg, uint64_t id, int on)
{
    for (size_t i = 0; i < s->n_dec; i++) {
        if (s->dec[i].msg == msg) {
            troupe__v1__job_health__free_unpacked(s->dec[i].health, NULL);
            s->dec[i] = s->dec[--s->n_dec];
            msg->health = NULL;
            break;
        }
    }
    if (!on) {
        return;
    }
    if (s->n_dec == s->cap_dec) {
        size_t cap = s->cap_dec ? 2 * s->cap_dec : 16;
        decorated *grown = realloc(s->dec, cap * sizeof(*grown));
        if (grown == NULL) {
            return; /* the reply goes without it */
        }
        s->dec = grown;
        s->cap_dec = cap;
    }
    pthread_mutex_lock(&s->mu);
    msg->health = copy_verdict(s, id);
    pthread_mutex_unlock(&s->mu);
    if (msg->health != NULL) {
        s->dec[s->n_dec++] = (decorated){msg, msg->health};
    }
}

static void decorate(tr_head *h, tr_head_job *hj, int on, void *state)
{
    (void)h;
    set_health(state, hj->j, hj->j->id, on);
}

static void list_fields(tr_head *h, tr_head_job *hj, Troupe__V1__Job *copy, int on, void *state)
{
    (void)h;
    set_health(state, copy, hj != NULL ? hj->j->id : copy->id, on);
}

/* job_changed: an ended job's trackers go at once, its last judgement stays
 * (job_end); a restarted group starts over at its next report or tick. */
static void job_changed(tr_head *h, tr_head_job *hj, void *state)
{
    health_svc *s = state;
    hjob *j;
    (void)h;
    if (hj->j->state != TROUPE__V1__JOB_STATE__JOB_RUNNING) {
        pthread_mutex_lock(&s->mu);
        if ((j = job_get(s, hj->j->id, 0)) != NULL && !j->ended) {
            job_end(s, j);
        }
        pthread_mutex_unlock(&s->mu);
    }
}

/* ---- after a head restart --------------------------------------------------------
 * The trackers live in memory. So that a stall spanning a restart is still
 * seen (a stopped worker reports nothing more), the RUNNING jobs' workers
 * are seeded with their last stored step: their stall clock starts at this
 * start, and a worker that steps on simply reports over it. */

typedef struct seed_ctx {
    health_svc *s;
    hjob *job;
    int64_t now;
    size_t seeded;
} seed_ctx;

static void seed_one(void *arg, const char *worker, uint32_t attempt, uint64_t step)
{
    seed_ctx *c = arg;
    hworker *w = worker_get(c->job, worker, attempt, 1);

    if (w != NULL && w->r.attempt == attempt) {
        tr_hj_seed(&w->r, step, c->now);
        c->seeded++;
    }
}

static void seed_running(health_svc *s)
{
    uint64_t *ids = NULL;
    size_t n = 0;
    seed_ctx c = {.s = s, .now = tr_now_ms()};

    pthread_mutex_lock(&s->h->mu);
    ids = calloc(s->h->n_jobs + 1, sizeof(*ids));
    for (size_t k = 0; ids != NULL && k < s->h->n_jobs; k++) {
        if (s->h->jobs[k]->j->state == TROUPE__V1__JOB_STATE__JOB_RUNNING) {
            ids[n++] = s->h->jobs[k]->j->id;
        }
    }
    pthread_mutex_unlock(&s->h->mu);
    for (size_t i = 0; i < n; i++) { /* the metrics store's lock, never with h->mu */
        pthread_mutex_lock(&s->mu);
        c.job = job_get(s, ids[i], 1);
        pthread_mutex_unlock(&s->mu);
        if (c.job != NULL) {
            tr_metrics_last_steps(s->h, ids[i], seed_one, &c); /* the judge is not running yet */
        }
    }
    if (c.seeded > 0) {
        TR_LOG(TR_LOG_INFO, "health: %zu workers of %zu running jobs resume from their last stored step",
               c.seeded, n);
    }
    free(ids);
}

/* ---- the service ------------------------------------------------------------- */

/* group_step is the core's h->group_step (an elastic group's membership
 * change names the step it happened at): the highest step a current member
 * of the group reported. Under h->mu, like every hook; takes s->mu. */
static uint64_t group_step(tr_head *h, const tr_head_job *hj, const char *group, void *arg)
{
    health_svc *s = arg;
    uint64_t best = 0;
    hjob *job;

    (void)h;
    pthread_mutex_lock(&s->mu);
    if ((job = job_get(s, hj->j->id, 0)) != NULL) {
        for (size_t i = 0; i < hj->j->n_workers; i++) {
            const Troupe__V1__WorkerInfo *w = hj->j->workers[i];
            hworker *hw = strcmp(w->group, group) == 0 ? worker_get(job, w->name, w->attempt, 0) : NULL;
            if (hw != NULL && hw->r.attempt == w->attempt && hw->r.last_step > best) {
                best = hw->r.last_step;
            }
        }
    }
    pthread_mutex_unlock(&s->mu);
    return best;
}

static int svc_start(tr_head *h, void **state, tr_err *err)
{
    health_svc *s = calloc(1, sizeof(*s));
    tr_bgw_opts jo = {.name = "health judge", .mu = &h->mu, .tick = judge_tick, .arg = s,
                      .max_wait_ms = h->cfg.health_tick_ms};
    int rv = tr_health_check_config(&h->cfg, err);

    if (rv != TROUPE_OK || s == NULL) {
        free(s);
        return rv != TROUPE_OK ? rv : tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    s->h = h;
    pthread_mutex_init(&s->mu, NULL);
    s->judge_at = tr_now_ms() + h->cfg.health_tick_ms;
    seed_running(s);
    /* Without the metrics service (a head built for tests) nothing reports
     * steps, and every job stays unjudged. */
    (void)tr_metrics_on_report(h, health_feed, s);
    if ((rv = tr_bgw_start(&s->judge, &jo, err)) != TROUPE_OK) {
        tr_metrics_on_report(h, NULL, NULL);
        while (s->jobs != NULL) {
            hjob *j = s->jobs;
            s->jobs = j->next;
            job_free(j);
        }
        pthread_mutex_destroy(&s->mu);
        free(s);
        return rv;
    }
    *state = s;
    pthread_mutex_lock(&h->mu);
    h->group_step = group_step;
    h->group_step_arg = s;
    pthread_mutex_unlock(&h->mu);
    return TROUPE_OK;
}

static void svc_stop(tr_head *h, void *state)
{
    health_svc *s = state;

    tr_metrics_on_report(h, NULL, NULL);
    pthread_mutex_lock(&h->mu);
    h->group_step = NULL;
    h->group_step_arg = NULL;
    pthread_mutex_unlock(&h->mu);
    tr_bgw_stop(s->judge);
    while (s->jobs != NULL) {
        hjob *j = s->jobs;
        s->jobs = j->next;
        job_free(j);
    }
    for (size_t i = 0; i < s->n_dec; i++) {
        s->dec[i].msg->health = NULL;
        troupe__v1__job_health__free_unpacked(s->dec[i].health, NULL);
    }
    free(s->dec);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

const tr_head_service tr_health_service = {
    .name = "health",
    .methods = NULL,
    .start = svc_start,
    .stop = svc_stop,
    .job_changed = job_changed,
    .decorate = decorate,
    .list_fields = list_fields,
};
