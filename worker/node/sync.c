/* sync.c - the agent side of NodeSync: run what the head assigns.
 *
 * A sync thread keeps one long poll open to the head and parks each new
 * assignment set in a->incoming. The main loop (tr_node_workers_step) applies
 * it: it starts assigned workers it does not know, stops known workers that
 * are no longer assigned, and then reports the complete list of its workers
 * with any new output. A (name, attempt) that the agent has seen is never
 * started again, so an exited worker is not resurrected by a set that was
 * computed before the head heard of the exit. Output that could not be
 * delivered stays queued and goes with the next report. */
#include <stdlib.h>
#include <string.h>

#include "gpus.h"
#include "log.h"
#include "node.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

#define LOG_BATCH (64u * 1024u)
#define POLL_MS 5000u

typedef struct tr_pending_log {
    uint64_t job_id;
    char name[128];
    uint32_t attempt;
    char *buf;
    size_t len;
    struct tr_pending_log *next;
} tr_pending_log;

static void *sync_main(void *arg)
{
    tr_node_agent *a = arg;

    while (!*a->stop) {
        Troupe__V1__NodeSyncRequest req = TROUPE__V1__NODE_SYNC_REQUEST__INIT;
        Troupe__V1__NodeSyncReply *rep = NULL;
        tr_err err;
        int rv;

        pthread_mutex_lock(&a->mu);
        req.node_id = a->sync_node_id;
        req.version = a->incoming ? a->incoming->version : a->applied_version;
        pthread_mutex_unlock(&a->mu);
        req.wait_ms = POLL_MS;
        rv = tr_rpc_client_call(a->rpc, "troupe.v1.Head/NodeSync", &req.base,
                                &troupe__v1__node_sync_reply__descriptor, (ProtobufCMessage **)&rep,
                                POLL_MS + 3000, 0, &err);
        if (rv != TROUPE_OK) {
            tr_sleep_ms(200); /* the heartbeat path reports and re-registers */
            continue;
        }
        pthread_mutex_lock(&a->mu);
        if (a->incoming != NULL) {
            troupe__v1__node_sync_reply__free_unpacked(a->incoming, NULL);
        }
        a->incoming = rep;
        pthread_mutex_unlock(&a->mu);
    }
    return NULL;
}

int tr_node_workers_start(tr_node_agent *a, tr_err *err)
{
    char dir[1024];
    int rv;

    snprintf(dir, sizeof(dir), "%s/logs", a->cfg.state_dir);
    if ((rv = tr_launcher_open(dir, "/proc/self/exe", a->cfg.stop_grace_ms, &a->launcher, err)) !=
        TROUPE_OK) {
        return rv;
    }
    pthread_mutex_init(&a->mu, NULL);
    a->sync_node_id = a->node_id;
    if (pthread_create(&a->sync_thread, NULL, sync_main, a) != 0) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot start the sync thread");
    }
    a->sync_started = 1;
    return TROUPE_OK;
}

static const Troupe__V1__WorkerAssignment *assigned(const Troupe__V1__NodeSyncReply *set, const char *name,
                                                    uint32_t attempt)
{
    for (size_t i = 0; set != NULL && i < set->n_workers; i++) {
        if (set->workers[i]->attempt == attempt && strcmp(set->workers[i]->name, name) == 0) {
            return set->workers[i];
        }
    }
    return NULL;
}

static void start_one(tr_node_agent *a, const Troupe__V1__WorkerAssignment *wa)
{
    const char **argv = calloc(wa->n_command + 1, sizeof(*argv));
    const char **env = calloc(wa->n_env + 4, sizeof(*env));
    char **owned = calloc(wa->n_env + 4, sizeof(*owned));
    tr_worker_spec ws = {0};
    size_t ne = 0;
    tr_err err;
    const char *real_visible = getenv("CUDA_VISIBLE_DEVICES");

    if (a->n_gpus == 0 || a->gpus[0].simulated || real_visible == NULL || real_visible[0] == '\0') {
        real_visible = NULL; /* simulated GPUs, or the agent sees every GPU */
    }

    if (argv == NULL || env == NULL || owned == NULL || wa->n_command == 0) {
        TR_LOG(TR_LOG_ERR, "cannot start worker=%s: %s", wa->name,
               wa->n_command ? "out of memory" : "no command");
        goto out;
    }
    for (size_t i = 0; i < wa->n_command; i++) {
        argv[i] = wa->command[i];
    }
    for (size_t i = 0; i < wa->n_env; i++) {
        const char *value = wa->env[i]->value;
        char mapped[1024];
        /* The head numbers GPUs as this agent discovered them; when the agent
         * itself sees only some GPUs (CUDA_VISIBLE_DEVICES=4,5,6,7 in a partial
         * allocation), index 0 is physical GPU 4: translate for the worker. */
        if (strcmp(wa->env[i]->key, "CUDA_VISIBLE_DEVICES") == 0 && real_visible != NULL) {
            if (tr_gpus_translate_visible(real_visible, value, mapped, sizeof(mapped), &err) != TROUPE_OK) {
                TR_LOG(TR_LOG_ERR, "worker=%s: %s", wa->name, err.msg);
            } else {
                value = mapped;
            }
        }
        if (asprintf(&owned[ne], "%s=%s", wa->env[i]->key, value) > 0) {
            env[ne] = owned[ne];
            ne++;
        }
    }
    if (asprintf(&owned[ne], "TROUPE_NODE=%s", a->cfg.name) > 0) {
        env[ne] = owned[ne];
        ne++;
    }
    if (a->cfg.token != NULL && a->cfg.token[0] &&
        asprintf(&owned[ne], "TROUPE_TOKEN=%s", a->cfg.token) > 0) {
        env[ne] = owned[ne];
        ne++;
    }
    ws.job_id = wa->job_id;
    ws.name = wa->name;
    ws.attempt = wa->attempt;
    ws.argv = argv;
    ws.env = env;
    ws.workdir = wa->workdir;
    if (tr_launcher_start(a->launcher, &ws, &err) != TROUPE_OK) {
        TR_LOG(TR_LOG_ERR, "cannot start worker=%s: %s", wa->name, err.msg);
    } else {
        TR_LOG(TR_LOG_INFO, "started worker=%s attempt=%u job=%llu gpus=%zu", wa->name, wa->attempt,
               (unsigned long long)wa->job_id, wa->n_gpus);
    }
out:
    for (size_t i = 0; owned != NULL && i < ne; i++) {
        free(owned[i]);
    }
    free(owned);
    free(argv);
    free(env);
}

/* apply makes the running workers match the newest set. */
static void apply(tr_node_agent *a)
{
    Troupe__V1__NodeSyncReply *set;
    tr_err err;

    pthread_mutex_lock(&a->mu);
    set = a->incoming;
    a->incoming = NULL;
    pthread_mutex_unlock(&a->mu);
    if (set == NULL) {
        return;
    }
    for (size_t i = 0; i < set->n_workers; i++) {
        if (tr_launcher_find(a->launcher, set->workers[i]->name, set->workers[i]->attempt) < 0) {
            start_one(a, set->workers[i]);
        }
    }
    for (size_t i = 0; i < tr_launcher_count(a->launcher); i++) {
        tr_worker_status st;
        if (tr_launcher_get(a->launcher, i, &st) != TROUPE_OK || assigned(set, st.name, st.attempt)) {
            continue;
        }
        if (st.phase == TR_WORKER_RUNNING) {
            TR_LOG(TR_LOG_INFO, "stopping worker=%s attempt=%u (no longer assigned)", st.name, st.attempt);
            tr_launcher_stop(a->launcher, st.name, st.attempt, &err);
        }
    }
    if (a->applied != NULL) {
        troupe__v1__node_sync_reply__free_unpacked(a->applied, NULL);
    }
    a->applied = set;
    pthread_mutex_lock(&a->mu);
    a->applied_version = set->version;
    pthread_mutex_unlock(&a->mu);
    a->need_report = 1;
}

static tr_pending_log *pending_for(tr_node_agent *a, const tr_worker_status *st)
{
    for (tr_pending_log *p = a->logs; p != NULL; p = p->next) {
        if (p->job_id == st->job_id && p->attempt == st->attempt && strcmp(p->name, st->name) == 0) {
            return p;
        }
    }
    tr_pending_log *p = calloc(1, sizeof(*p));
    if (p != NULL) {
        p->job_id = st->job_id;
        p->attempt = st->attempt;
        tr_strlcpy(p->name, st->name, sizeof(p->name));
        p->next = a->logs;
        a->logs = p;
    }
    return p;
}

/* collect_output moves new log lines of worker i into its pending buffer. */
static void collect_output(tr_node_agent *a, size_t i, const tr_worker_status *st)
{
    tr_pending_log *p = pending_for(a, st);
    char *buf = NULL;
    size_t len = 0;
    tr_err err;

    if (p == NULL || p->len >= LOG_BATCH ||
        tr_launcher_read_log(a->launcher, i, LOG_BATCH - p->len, &buf, &len, &err) != TROUPE_OK || len == 0) {
        free(buf);
        return;
    }
    char *grown = realloc(p->buf, p->len + len);
    if (grown != NULL) {
        memcpy(grown + p->len, buf, len);
        p->buf = grown;
        p->len += len;
    }
    free(buf);
}

static Troupe__V1__WorkerState report_state(tr_worker_phase ph)
{
    switch (ph) {
    case TR_WORKER_EXITED: return TROUPE__V1__WORKER_STATE__WORKER_EXITED;
    case TR_WORKER_FAILED_TO_START: return TROUPE__V1__WORKER_STATE__WORKER_FAILED_TO_START;
    default: return TROUPE__V1__WORKER_STATE__WORKER_RUNNING;
    }
}

static void forget_settled(tr_node_agent *a)
{
    tr_err err;
    for (size_t i = tr_launcher_count(a->launcher); i-- > 0;) {
        tr_worker_status st;
        if (tr_launcher_get(a->launcher, i, &st) != TROUPE_OK || st.phase == TR_WORKER_RUNNING ||
            st.phase == TR_WORKER_STOPPING || assigned(a->applied, st.name, st.attempt)) {
            continue;
        }
        /* Reported and no longer wanted: the head has it. Drop its queue too. */
        for (tr_pending_log **pp = &a->logs; *pp != NULL; pp = &(*pp)->next) {
            tr_pending_log *p = *pp;
            if (p->job_id == st.job_id && p->attempt == st.attempt && strcmp(p->name, st.name) == 0 &&
                p->len == 0) {
                *pp = p->next;
                free(p->buf);
                free(p);
                break;
            }
        }
        tr_launcher_forget(a->launcher, st.name, st.attempt, &err);
    }
}

/* report sends every worker's state and new output; on success the queued
 * output is dropped and settled workers are forgotten. */
static int report(tr_node_agent *a)
{
    Troupe__V1__NodeSyncRequest req = TROUPE__V1__NODE_SYNC_REQUEST__INIT;
    Troupe__V1__NodeSyncReply *rep = NULL;
    size_t n = tr_launcher_count(a->launcher);
    Troupe__V1__WorkerReport *r = calloc(n + 1, sizeof(*r));
    Troupe__V1__WorkerReport **rp = calloc(n + 1, sizeof(*rp));
    tr_pending_log **used = calloc(n + 1, sizeof(*used));
    tr_err err;
    int rv = TROUPE_RESOURCE_EXHAUSTED;

    if (r == NULL || rp == NULL || used == NULL) {
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        tr_worker_status st;
        if (tr_launcher_get(a->launcher, i, &st) != TROUPE_OK) {
            continue;
        }
        collect_output(a, i, &st);
        troupe__v1__worker_report__init(&r[req.n_reports]);
        r[req.n_reports].job_id = st.job_id;
        r[req.n_reports].name = (char *)st.name;
        r[req.n_reports].attempt = st.attempt;
        r[req.n_reports].state = report_state(st.phase);
        r[req.n_reports].exit_code = st.exit_code;
        r[req.n_reports].signal = st.signal;
        r[req.n_reports].pid = (uint32_t)st.pid;
        r[req.n_reports].message = (char *)(st.message ? st.message : "");
        used[req.n_reports] = pending_for(a, &st);
        if (used[req.n_reports] != NULL) {
            r[req.n_reports].log.data = (uint8_t *)used[req.n_reports]->buf;
            r[req.n_reports].log.len = used[req.n_reports]->len;
        }
        rp[req.n_reports] = &r[req.n_reports];
        req.n_reports++;
    }
    req.reports = rp;
    req.node_id = a->node_id;
    req.version = a->applied_version;
    req.wait_ms = 0;
    rv = tr_rpc_client_call(a->rpc, "troupe.v1.Head/NodeSync", &req.base,
                            &troupe__v1__node_sync_reply__descriptor, (ProtobufCMessage **)&rep, 3000, 0,
                            &err);
    if (rv == TROUPE_OK) {
        for (size_t i = 0; i < req.n_reports; i++) {
            if (used[i] != NULL) {
                free(used[i]->buf);
                used[i]->buf = NULL;
                used[i]->len = 0;
            }
        }
        troupe__v1__node_sync_reply__free_unpacked(rep, NULL);
        forget_settled(a);
    } else {
        TR_LOG(TR_LOG_DEBUG, "report not delivered, will retry: %s", err.msg);
    }
out:
    free(r);
    free(rp);
    free(used);
    return rv;
}

static int any_running(tr_node_agent *a)
{
    for (size_t i = 0; i < tr_launcher_count(a->launcher); i++) {
        tr_worker_status st;
        if (tr_launcher_get(a->launcher, i, &st) == TROUPE_OK &&
            (st.phase == TR_WORKER_RUNNING || st.phase == TR_WORKER_STOPPING)) {
            return 1;
        }
    }
    return 0;
}

void tr_node_workers_step(tr_node_agent *a)
{
    int64_t now = tr_now_ms();
    int64_t every;

    pthread_mutex_lock(&a->mu);
    a->sync_node_id = a->node_id;
    pthread_mutex_unlock(&a->mu);
    apply(a);
    if (tr_launcher_poll(a->launcher) > 0) {
        a->need_report = 1;
    }
    every = any_running(a) ? 250 : 2000;
    if (a->need_report || now - a->last_report >= every) {
        if (report(a) == TROUPE_OK) {
            a->need_report = 0;
        }
        a->last_report = now;
    }
}

void tr_node_workers_stop(tr_node_agent *a)
{
    int64_t until = tr_now_ms() + a->cfg.stop_grace_ms + 2000;
    tr_err err;

    if (a->launcher == NULL) {
        return;
    }
    for (size_t i = 0; i < tr_launcher_count(a->launcher); i++) {
        tr_worker_status st;
        if (tr_launcher_get(a->launcher, i, &st) == TROUPE_OK && st.phase == TR_WORKER_RUNNING) {
            tr_launcher_stop(a->launcher, st.name, st.attempt, &err);
        }
    }
    while (any_running(a) && tr_now_ms() < until) {
        tr_launcher_poll(a->launcher);
        tr_sleep_ms(20);
    }
    tr_launcher_poll(a->launcher);
    report(a); /* best effort: tell the head how they ended */
    tr_rpc_client_shutdown(a->rpc);
    if (a->sync_started) {
        pthread_join(a->sync_thread, NULL);
    }
    tr_launcher_close(a->launcher);
    a->launcher = NULL;
    if (a->incoming != NULL) {
        troupe__v1__node_sync_reply__free_unpacked(a->incoming, NULL);
    }
    if (a->applied != NULL) {
        troupe__v1__node_sync_reply__free_unpacked(a->applied, NULL);
    }
    while (a->logs != NULL) {
        tr_pending_log *p = a->logs;
        a->logs = p->next;
        free(p->buf);
        free(p);
    }
    pthread_mutex_destroy(&a->mu);
}
