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

int tr_node_register(tr_node_agent *a, tr_err *err)
{
    Troupe__V1__RegisterNodeRequest req = TROUPE__V1__REGISTER_NODE_REQUEST__INIT;
    Troupe__V1__RegisterNodeReply *rep = NULL;
    Troupe__V1__Gpu gpus[TR_MAX_GPUS], *gptr[TR_MAX_GPUS];
    Troupe__V1__Label labels[32], *lptr[32];
    char lbuf[1024] = "";
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
    req.node_id = a->node_id;
    rv = tr_rpc_client_call(a->rpc, "troupe.v1.Head/RegisterNode", &req.base,
                            &troupe__v1__register_node_reply__descriptor, (ProtobufCMessage **)&rep, 5000, 0,
                            err);
    if (rv != TROUPE_OK) {
        return rv;
    }
    if (a->node_id != 0 && a->node_id != rep->node_id) {
        TR_LOG(TR_LOG_WARNING, "registered as a new node node=%llu old=%llu (the old one was declared DEAD)",
               (unsigned long long)rep->node_id, (unsigned long long)a->node_id);
    }
    a->node_id = rep->node_id;
    a->heartbeat_ms = rep->heartbeat_ms ? rep->heartbeat_ms : 1000;
    a->head_epoch = rep->head_started_ms;
    TR_LOG(TR_LOG_NOTICE, "registered node=%llu name=%s gpus=%zu head=%s heartbeat_ms=%lld",
           (unsigned long long)a->node_id, a->cfg.name, a->n_gpus, a->cfg.head, (long long)a->heartbeat_ms);
    troupe__v1__register_node_reply__free_unpacked(rep, NULL);
    return TROUPE_OK;
}

/* heartbeat sends one heartbeat and reacts to what the head says. */
static void heartbeat(tr_node_agent *a)
{
    Troupe__V1__HeartbeatRequest req = TROUPE__V1__HEARTBEAT_REQUEST__INIT;
    Troupe__V1__HeartbeatReply *rep = NULL;
    uint32_t deadline = (uint32_t)(a->heartbeat_ms < 2000 ? 2000 : a->heartbeat_ms);
    int need_register = 0;
    tr_err err;
    int rv;

    req.node_id = a->node_id;
    rv = tr_rpc_client_call(a->rpc, "troupe.v1.Head/Heartbeat", &req.base,
                            &troupe__v1__heartbeat_reply__descriptor, (ProtobufCMessage **)&rep, deadline, 0,
                            &err);
    if (rv == TROUPE_OK) {
        if (!a->head_reachable) {
            TR_LOG(TR_LOG_NOTICE, "head reachable again head=%s", a->cfg.head);
        }
        a->head_reachable = 1;
        need_register = rep->head_started_ms != a->head_epoch;
        if (need_register) {
            TR_LOG(TR_LOG_NOTICE, "head restarted; registering again node=%llu",
                   (unsigned long long)a->node_id);
        }
        if (rep->heartbeat_ms) {
            a->heartbeat_ms = rep->heartbeat_ms;
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

int tr_node_run(tr_node_agent *a, tr_err *err)
{
    int64_t next = 0;

    int rv;

    a->head_reachable = 1;
    if ((rv = tr_node_workers_start(a, err)) != TROUPE_OK) {
        return rv;
    }
    while (!*a->stop) {
        int64_t now = tr_now_ms();
        if (now >= next) {
            heartbeat(a);
            next = now + a->heartbeat_ms;
        }
        tr_node_workers_step(a);
        tr_sleep_ms(20);
    }
    TR_LOG(TR_LOG_NOTICE, "stopping workers (grace %lld ms)", (long long)a->cfg.stop_grace_ms);
    tr_node_workers_stop(a);
    return TROUPE_OK;
}
