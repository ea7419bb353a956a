/* agent.c - registration and heartbeats.
 *
 * The agent outlives head restarts: its RPC client reconnects in the
 * background, a heartbeat that fails is retried on the next period, and a
 * change of the head's start time (or a "register again" answer) makes it
 * register again with the id it had. It never blocks longer than one RPC
 * deadline, so a stop signal is honoured within a heartbeat period. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "gpustats.h"
#include "node.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

/* parse_labels splits "k=v,k2=v2" into label messages (owned by the caller's
 * arrays, strings pointing into buf). */
static size_t parse_labels(char *buf, Troupe__V1__Label *labels, Troupe__V1__Label **ptrs, size_t max)
{
    size_t n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL && n < max;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        troupe__v1__label__init(&labels[n]);
        if (eq != NULL) {
            *eq = '\0';
            labels[n].value = eq + 1;
        }
        labels[n].key = tok;
        ptrs[n] = &labels[n];
        n++;
    }
    return n;
}

/* set_lease takes the head's lease, capped by the agent's own setting. */
static void set_lease(tr_node_agent *a, uint32_t granted)
{
    int64_t ms = granted;
    if (a->cfg.lease_ms > 0 && (ms == 0 || a->cfg.lease_ms < ms)) {
        ms = a->cfg.lease_ms;
    }
    a->lease_ms = ms;
}

int tr_node_register(tr_node_agent *a, tr_err *err)
{
    Troupe__V1__RegisterNodeRequest req = TROUPE__V1__REGISTER_NODE_REQUEST__INIT;
    Troupe__V1__RegisterNodeReply *rep = NULL;
    Troupe__V1__Gpu gpus[TR_MAX_GPUS], *gptr[TR_MAX_GPUS];
    Troupe__V1__Label labels[32], *lptr[32];
    char lbuf[1024] = "";
    int64_t sent;
    int rv;

    for (size_t i = 0; i < a->n_gpus; i++) {
        troupe__v1__gpu__init(&gpus[i]);
        gpus[i].index = a->gpus[i].index;
        gpus[i].model = a->gpus[i].model;
        gpus[i].memory_bytes = a->gpus[i].memory_bytes;
        gpus[i].uuid = a->gpus[i].uuid;
        gpus[i].simulated = a->gpus[i].simulated;
        gptr[i] = &gpus[i];
    }
    if (a->cfg.labels != NULL) {
        tr_strlcpy(lbuf, a->cfg.labels, sizeof(lbuf));
    }
    req.name = a->cfg.name;
    req.hostname = a->hostname;
    req.address = a->cfg.address;
    req.n_gpus = a->n_gpus;
    req.gpus = gptr;
    req.n_labels = parse_labels(lbuf, labels, lptr, 32);
    req.labels = lptr;
    req.pid = (uint32_t)getpid();
    pthread_mutex_lock(&a->id_mu);
    req.node_id = a->node_id;
    req.stop_grace_ms = (uint32_t)a->cfg.stop_grace_ms;
    req.running_workers = (uint32_t)a->running_now;
    pthread_mutex_unlock(&a->id_mu);
    req.instance = a->instance;
    req.isolation = a->isolation;
    req.cpus = (uint32_t)a->cfg.cpus;
    req.n_tools = a->nsys[0] != '\0' ? 1 : 0; /* the head refuses nsys jobs when no node has it */
    req.tools = (char *[]){(char *)"nsys"};
    sent = tr_now_ms();
    rv = tr_rpc_client_call(a->rpc, "troupe.v1.Head/RegisterNode", &req.base,
                            &troupe__v1__register_node_reply__descriptor, (ProtobufCMessage **)&rep, 5000, 0,
                            err);
    if (rv != TROUPE_OK) {
        return rv;
    }
    if (req.node_id != 0 && req.node_id != rep->node_id) {
        TR_LOG(TR_LOG_WARNING,
               "registered as a new node node=%llu old=%llu (the old one was declared DEAD); workers of the old "
               "node are stopped and their GPUs stay busy until they are gone",
               (unsigned long long)rep->node_id, (unsigned long long)req.node_id);
    }
    pthread_mutex_lock(&a->id_mu);
    if (req.node_id != rep->node_id) {
        a->lease_until = 0; /* a new lease file; the old node's is never renewed: its workers are fenced */
    }
    a->node_id = rep->node_id;
    a->heartbeat_ms = rep->heartbeat_ms ? rep->heartbeat_ms : 1000;
    a->head_epoch = rep->head_started_ms;
    set_lease(a, rep->lease_ms);
    tr_node_lease_renew_locked(a, sent);
    pthread_mutex_unlock(&a->id_mu);
    TR_LOG(TR_LOG_NOTICE, "registered node=%llu name=%s gpus=%zu head=%s heartbeat_ms=%lld",
           (unsigned long long)a->node_id, a->cfg.name, a->n_gpus, a->cfg.head, (long long)a->heartbeat_ms);
    troupe__v1__register_node_reply__free_unpacked(rep, NULL);
    return TROUPE_OK;
}

/* The live figures a heartbeat carries (gpustats.h), on the stack. */
typedef struct figures {
    tr_gpu_stats raw[TR_MAX_GPUS];
    Troupe__V1__GpuStats gpus[TR_MAX_GPUS];
    Troupe__V1__GpuStats *ptrs[TR_MAX_GPUS];
    Troupe__V1__NodeStats node;
} figures;

/* figures_fill measures the GPUs and the node now (a few NVML calls). */
static void figures_fill(tr_node_agent *a, figures *f)
{
    uint8_t busy[TR_MAX_GPUS];

    troupe__v1__node_stats__init(&f->node);
    pthread_mutex_lock(&a->mu);
    memcpy(busy, a->gpu_busy, sizeof(busy));
    pthread_mutex_unlock(&a->mu);
    if (a->gstats == NULL) {
        a->gstats = tr_gpustats_open(a->gpus, a->n_gpus); /* once; NULL again only when out of memory */
        if (a->gstats != NULL) {
            TR_LOG(TR_LOG_INFO, "gpu figures source=%s gpus=%zu", tr_gpustats_source(a->gstats), a->n_gpus);
        }
    }
    for (size_t i = 0; i < a->n_gpus; i++) {
        memset(&f->raw[i], 0, sizeof(f->raw[i]));
        f->raw[i].index = a->gpus[i].index;
    }
    if (a->gstats != NULL) {
        tr_gpustats_sample(a->gstats, busy, f->raw);
    }
    for (size_t i = 0; i < a->n_gpus; i++) {
        Troupe__V1__GpuStats *g = &f->gpus[i];
        troupe__v1__gpu_stats__init(g);
        g->index = f->raw[i].index;
        g->ok = f->raw[i].ok;
        g->memory_used_bytes = f->raw[i].memory_used_bytes;
        g->memory_total_bytes = f->raw[i].memory_total_bytes;
        g->utilization_pct = f->raw[i].utilization_pct;
        g->temperature_c = f->raw[i].temperature_c;
        g->power_mw = f->raw[i].power_mw;
        f->ptrs[i] = g;
    }
    f->node.at_ms = tr_wall_ms();
    f->node.gpu_source = (char *)(a->gstats != NULL ? tr_gpustats_source(a->gstats) : "none: out of memory");
    tr_node_figures(&f->node.load1, &f->node.mem_total_bytes, &f->node.mem_available_bytes);
}

/* heartbeat sends one heartbeat and reacts to what the head says. Its
 * deadline never outlasts the lease, so a lapse is noticed in time. */
static void heartbeat(tr_node_agent *a)
{
    Troupe__V1__HeartbeatRequest req = TROUPE__V1__HEARTBEAT_REQUEST__INIT;
    Troupe__V1__HeartbeatReply *rep = NULL;
    int64_t deadline, left = tr_node_lease_left(a);
    int64_t sent = tr_now_ms();
    int need_register = 0;
    figures fig;
    tr_err err;
    int rv;

    pthread_mutex_lock(&a->id_mu);
    /* Three periods (200 ms .. 2 s): a heartbeat lost to a head that died is
     * given up soon, so the next one finds the restarted head well within its
     * DEAD window. */
    deadline = 3 * a->heartbeat_ms < 200 ? 200 : 3 * a->heartbeat_ms > 2000 ? 2000 : 3 * a->heartbeat_ms;
    req.node_id = a->node_id;
    pthread_mutex_unlock(&a->id_mu);
    if (left > 0 && left < deadline) {
        deadline = left < 50 ? 50 : left;
    }
    figures_fill(a, &fig);
    req.gpu_stats = fig.ptrs;
    req.n_gpu_stats = a->n_gpus;
    req.stats = &fig.node;
    rv = tr_rpc_client_call(a->rpc, "troupe.v1.Head/Heartbeat", &req.base,
                            &troupe__v1__heartbeat_reply__descriptor, (ProtobufCMessage **)&rep,
                            (uint32_t)deadline, 0, &err);
    if (rv == TROUPE_OK) {
        pthread_mutex_lock(&a->id_mu);
        set_lease(a, rep->lease_ms);
        tr_node_lease_renew_locked(a, sent);
        need_register = rep->head_started_ms != a->head_epoch;
        int64_t was = a->heartbeat_ms;
        if (rep->heartbeat_ms) {
            a->heartbeat_ms = rep->heartbeat_ms;
        }
        pthread_mutex_unlock(&a->id_mu);
        if (rep->heartbeat_ms && (int64_t)rep->heartbeat_ms != was) {
            TR_LOG(TR_LOG_INFO, "heartbeat period now %lld ms (was %lld), as the head says",
                   (long long)rep->heartbeat_ms, (long long)was);
        }
        if (!a->head_reachable) {
            TR_LOG(TR_LOG_NOTICE, "head reachable again head=%s", a->cfg.head);
        }
        a->head_reachable = 1;
        if (need_register) {
            TR_LOG(TR_LOG_NOTICE, "head restarted; registering again node=%llu", (unsigned long long)req.node_id);
        }
        troupe__v1__heartbeat_reply__free_unpacked(rep, NULL);
    } else if (rv == TROUPE_FAILED_PRECONDITION) {
        TR_LOG(TR_LOG_WARNING, "head says: %s", err.msg);
        need_register = 1;
    } else {
        if (a->head_reachable) {
            TR_LOG(TR_LOG_WARNING, "heartbeat failed, will keep trying: %s: %s", troupe_strerror(rv),
                   err.msg);
        }
        a->head_reachable = 0;
    }
    if (need_register && tr_node_register(a, &err) != TROUPE_OK) {
        TR_LOG(TR_LOG_WARNING, "register again failed, will retry: %s", err.msg);
    }
}

/* heartbeat_main beats every period until the agent stops. */
static void *heartbeat_main(void *arg)
{
    tr_node_agent *a = arg;
    int64_t next = 0;

    while (!*a->stop) {
        int64_t now = tr_now_ms(), period;
        if (now >= next) {
            heartbeat(a);
            pthread_mutex_lock(&a->id_mu);
            period = a->heartbeat_ms;
            pthread_mutex_unlock(&a->id_mu);
            next = now + period;
        }
        tr_sleep_ms(10);
    }
    return NULL;
}

int tr_node_run(tr_node_agent *a, tr_err *err)
{
    int rv;

    a->head_reachable = 1;
    if ((rv = tr_node_workers_start(a, err)) != TROUPE_OK) {
        return rv;
    }
    if (pthread_create(&a->hb_thread, NULL, heartbeat_main, a) != 0) {
        *a->stop = 1;
        tr_node_workers_stop(a);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot start the heartbeat thread");
    }
    while (!*a->stop) {
        tr_node_workers_step(a);
        tr_node_lease_check(a);
        tr_sleep_ms(20);
    }
    pthread_join(a->hb_thread, NULL);
    tr_gpustats_close(a->gstats);
    a->gstats = NULL;
    TR_LOG(TR_LOG_NOTICE, "stopping workers (grace %lld ms)", (long long)a->cfg.stop_grace_ms);
    tr_node_workers_stop(a);
    return TROUPE_OK;
}
