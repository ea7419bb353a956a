/* nodes_rpc.c - the node methods: RegisterNode, Heartbeat, ListNodes,
 * GetCluster, Ping, DeregisterNode and DrainNode. They decode, check who
 * calls, apply the change through the node registry (nodes.c, node_life.c)
 * and answer once it is on disk; the registry's rules live there. */
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "handlers.h"
#include "log.h"
#include "sched/sched.h"
#include "util.h"

#define LIST_NODES_MARGIN (64u * 1024u) /* a ListNodes page: envelope, status, length prefixes */

/* reply_registered answers a registration once it is on disk. */
static void reply_registered(tr_head *h, tr_rpc_call *call, uint64_t node_id)
{
    Troupe__V1__RegisterNodeReply rep = TROUPE__V1__REGISTER_NODE_REPLY__INIT;
    tr_head_node *hn = tr_head_node_find(h, node_id);

    rep.node_id = node_id;
    rep.heartbeat_ms = (uint32_t)(hn != NULL ? tr_head_node_told(h, hn) : tr_head_heartbeat_period(h));
    rep.head_started_ms = h->started_ms;
    rep.lease_ms = (uint32_t)tr_liveness_lease_ms(&h->live);
    tr_rpc_reply(call, &rep.base);
}

void tr_head_register_node(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__RegisterNodeRequest *r = (Troupe__V1__RegisterNodeRequest *)tr_rpc_unpack(
        call, &troupe__v1__register_node_request__descriptor);
    uint64_t node_id = 0;
    tr_err err;
    int rv;

    if (r == NULL) {
        return;
    }
    if ((rv = tr_head_node_validate(r, &err)) != TROUPE_OK) {
        TR_LOG(TR_LOG_WARNING, "refused registration: %s", err.msg);
        tr_rpc_reply_error(call, rv, "%s", err.msg);
        goto out;
    }
    pthread_mutex_lock(&h->mu);
    if (tr_head_store_refuse(h, call)) { /* the agent retries */
        pthread_mutex_unlock(&h->mu);
        goto out;
    }
    if (!tr_head_node_may_register(call, h, (r->name && r->name[0]) ? r->name : r->hostname, r->node_id)) {
        pthread_mutex_unlock(&h->mu);
        goto out; /* answered */
    }
    rv = tr_head_node_register(h, call, r, &node_id, &err);
    if (rv == TROUPE_OK) {
        tr_head_node_bind(call, h, tr_head_node_find(h, node_id));
        tr_head_after_commit(h, call, reply_registered, node_id);
    }
    pthread_mutex_unlock(&h->mu);
    if (rv != TROUPE_OK) {
        tr_rpc_reply_error(call, rv, "%s", err.msg);
    }
out:
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

void tr_head_heartbeat(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    /* In the call's scratch memory (tr_rpc_unpack_scratch): nothing to free,
     * and tr_head_node_beat keeps none of it. */
    const Troupe__V1__HeartbeatRequest *r = (const Troupe__V1__HeartbeatRequest *)tr_rpc_unpack_scratch(
        call, &troupe__v1__heartbeat_request__descriptor);
    Troupe__V1__HeartbeatReply rep = TROUPE__V1__HEARTBEAT_REPLY__INIT;
    tr_head_node *hn;
    int64_t period;

    if (r == NULL) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    hn = tr_head_node_find(h, r->node_id);
    if (hn == NULL || tr_head_node_gone(hn->n)) {
        pthread_mutex_unlock(&h->mu);
        tr_rpc_reply_error(call, TROUPE_FAILED_PRECONDITION, "node %llu is %s; register again",
                           (unsigned long long)r->node_id, hn ? tr_head_node_state_name((int)hn->n->state) : "unknown");
        return;
    }
    if (!tr_head_node_allowed(call, hn)) {
        pthread_mutex_unlock(&h->mu);
        return; /* answered */
    }
    period = tr_head_node_beat(h, hn, call, r);
    pthread_mutex_unlock(&h->mu);
    rep.heartbeat_ms = (uint32_t)period;
    rep.head_started_ms = h->started_ms;
    rep.lease_ms = (uint32_t)tr_liveness_lease_ms(&h->live);
    tr_rpc_reply(call, &rep.base);
}

/* ListNodes answers a page: nodes in id order (h->nodes is, ids only grow)
 * after the cursor, at most limit of them, and never more than fits in the
 * smaller of the head's and a default client's frame (each node's packed
 * size is counted as it is added, as ListJobs does). */
void tr_head_list_nodes(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__ListNodesRequest *r =
        (Troupe__V1__ListNodesRequest *)tr_rpc_unpack(call, &troupe__v1__list_nodes_request__descriptor);
    Troupe__V1__ListNodesReply rep = TROUPE__V1__LIST_NODES_REPLY__INIT;
    size_t budget, used = 0;
    uint64_t last = 0;

    if (r == NULL) {
        return;
    }
    budget = (size_t)h->cfg.max_frame_bytes < TR_RPC_DEFAULT_MAX_FRAME ? (size_t)h->cfg.max_frame_bytes
                                                                       : TR_RPC_DEFAULT_MAX_FRAME;
    budget = budget > 2 * LIST_NODES_MARGIN ? budget - LIST_NODES_MARGIN : budget / 2;
    pthread_mutex_lock(&h->mu);
    rep.nodes = calloc(h->n_nodes ? h->n_nodes : 1, sizeof(*rep.nodes));
    if (rep.nodes == NULL) {
        pthread_mutex_unlock(&h->mu);
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < h->n_nodes; i++) {
        Troupe__V1__Node *n = h->nodes[i].n;
        size_t sz;
        if (n->id <= r->cursor || (!r->include_dead && tr_head_node_gone(n))) {
            continue;
        }
        if (r->limit != 0 && rep.n_nodes == r->limit) {
            rep.next_cursor = last; /* a further match exists */
            break;
        }
        n->gpus_free = tr_head_node_gone(n) ? 0 : tr_jobs_node_free_gpus(h, n->id);
        n->cpu_milli_free = tr_head_node_gone(n) ? 0 : tr_jobs_node_free_cpu_milli(h, n->id);
        sz = troupe__v1__node__get_packed_size(n) + 16;
        if (rep.n_nodes > 0 && used + sz > budget) {
            rep.next_cursor = last; /* the frame is full */
            break;
        }
        used += sz;
        rep.nodes[rep.n_nodes++] = n;
        last = n->id;
    }
    /* Packed under the lock: the messages are borrowed from the registry. */
    tr_rpc_reply(call, &rep.base);
    pthread_mutex_unlock(&h->mu);
    free(rep.nodes);
out:
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

static int cluster_answer(tr_head *h, tr_rpc_call *call, int waited);

static void cluster_after_save(tr_head *h, tr_rpc_call *call, uint64_t arg)
{
    (void)arg;
    cluster_answer(h, call, 1);
}

/* count_jobs counts jobs by saved state, as GetJob and ListJobs show them:
 * returns how many have a latest change that is not on disk yet (those are
 * counted in jobs_unsaved instead, so that no count shows a state a head
 * crash could take back). Under h->mu. */
static uint32_t count_jobs(tr_head *h, Troupe__V1__GetClusterReply *rep)
{
    uint32_t unsaved = 0;

    for (size_t i = 0; i < h->n_jobs; i++) {
        if (!tr_jobs_saved(h, h->jobs[i])) {
            unsaved++;
            continue;
        }
        switch (h->jobs[i]->j->state) {
        case TROUPE__V1__JOB_STATE__JOB_PENDING: rep->jobs_pending++; break;
        case TROUPE__V1__JOB_STATE__JOB_RUNNING: rep->jobs_running++; break;
        case TROUPE__V1__JOB_STATE__JOB_SUCCEEDED: rep->jobs_succeeded++; break;
        case TROUPE__V1__JOB_STATE__JOB_FAILED: rep->jobs_failed++; break;
        case TROUPE__V1__JOB_STATE__JOB_STOPPED: rep->jobs_stopped++; break;
        default: break;
        }
    }
    return unsaved;
}

/* cluster_answer answers GetCluster under h->mu. While the store writes, a
 * job with unsaved changes (a batch in flight: milliseconds) makes the call
 * wait for that batch once, then it is answered as it stands; while the
 * store cannot write, it is answered at once (status must work then) with
 * those jobs in jobs_unsaved. Returns 0 when the call was parked. */
static int cluster_answer(tr_head *h, tr_rpc_call *call, int waited)
{
    Troupe__V1__GetClusterReply rep = TROUPE__V1__GET_CLUSTER_REPLY__INIT;
    char store_error[sizeof(h->store_error)], http_url[sizeof(h->http_url)];
    tr_rpc_conn_stats cs;

    rep.jobs_unsaved = count_jobs(h, &rep);
    if (rep.jobs_unsaved > 0 && !waited && !h->store_failing) {
        tr_head_after_batch(h, call, cluster_after_save, 0, NULL);
        return 0;
    }
    /* Kept as nodes change (nodes_count), not walked: see head.h. */
    rep.nodes_alive = h->nodes_by_state[TROUPE__V1__NODE_STATE__NODE_ALIVE];
    rep.nodes_suspect = h->nodes_by_state[TROUPE__V1__NODE_STATE__NODE_SUSPECT];
    rep.nodes_left = h->nodes_by_state[TROUPE__V1__NODE_STATE__NODE_LEFT];
    rep.nodes_dead = h->nodes_by_state[TROUPE__V1__NODE_STATE__NODE_DEAD] +
                     h->nodes_by_state[TROUPE__V1__NODE_STATE__NODE_STATE_UNSPECIFIED];
    rep.gpus_total = (uint32_t)h->node_gpus_live;
    rep.heartbeat_ms = (uint32_t)tr_head_heartbeat_period(h);
    rep.dead_ms = (uint32_t)tr_liveness_dead_ms(&h->live);
    /* The scheduler's slot of a node is DEAD exactly when the node is gone
     * (jobs.c: sched_state), so this is the free GPUs of every node that is
     * not: what a lookup per ALIVE or SUSPECT node added up. */
    rep.gpus_free = h->sched != NULL ? (uint32_t)tr_sched_free_gpus_live(h->sched) : 0;
    rep.cpus_total = (uint32_t)h->node_cpus_live;
    rep.cpu_milli_free = h->sched != NULL ? tr_sched_free_cpu_milli_live(h->sched) : 0;
    rep.store_failing = h->store_failing != 0;
    snprintf(store_error, sizeof(store_error), "%s", h->store_failing ? h->store_error : "");
    rep.store_error = store_error;
    rep.store_failing_since_ms = h->store_failing ? h->store_failing_since_ms : 0;
    rep.store_failed_writes = h->store_failed_writes;
    rep.store_unsaved = tr_head_store_unsaved(h);
    snprintf(http_url, sizeof(http_url), "%s", h->http_url);
    rep.http_url = http_url;
    rep.head_version = TROUPE_VERSION;
    rep.head_started_ms = h->started_ms;
    rep.requests_served = tr_rpc_server_served(tr_rpc_call_server(call));
    rep.frames_oversized = tr_rpc_server_oversized(tr_rpc_call_server(call));
    tr_rpc_server_conn_stats(tr_rpc_call_server(call), &cs);
    rep.connections_open = cs.open;
    rep.connections_unauthenticated = cs.unauthenticated;
    rep.connections_max = cs.max;
    rep.connections_refused = cs.refused;
    rep.connections_displaced = cs.displaced;
    rep.connections_closed_idle = cs.closed_idle;
    rep.frame_limit_bytes = cs.frame_limit;
    tr_rpc_reply(call, &rep.base);
    return 1;
}

void tr_head_get_cluster(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    ProtobufCMessage *r = tr_rpc_unpack(call, &troupe__v1__get_cluster_request__descriptor);

    if (r == NULL) {
        return;
    }
    protobuf_c_message_free_unpacked(r, NULL);
    pthread_mutex_lock(&h->mu);
    cluster_answer(h, call, 0);
    pthread_mutex_unlock(&h->mu);
}

void tr_head_ping(tr_rpc_call *call, void *user)
{
    Troupe__V1__PingRequest *r =
        (Troupe__V1__PingRequest *)tr_rpc_unpack(call, &troupe__v1__ping_request__descriptor);
    Troupe__V1__PingReply rep = TROUPE__V1__PING_REPLY__INIT;

    (void)user;
    if (r == NULL) {
        return;
    }
    rep.data = r->data;
    tr_rpc_reply(call, &rep.base);
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

/* ---- DeregisterNode ------------------------------------------------------ */

static void reply_empty(tr_head *h, tr_rpc_call *call, uint64_t arg)
{
    Troupe__V1__DeregisterNodeReply rep = TROUPE__V1__DEREGISTER_NODE_REPLY__INIT;
    (void)h;
    (void)arg;
    tr_rpc_reply(call, &rep.base);
}

void tr_head_deregister_node(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__DeregisterNodeRequest *r = (Troupe__V1__DeregisterNodeRequest *)tr_rpc_unpack(
        call, &troupe__v1__deregister_node_request__descriptor);
    const char *inst;
    tr_head_node *hn;
    char reason[300];

    if (r == NULL) {
        return;
    }
    inst = r->instance ? r->instance : "";
    pthread_mutex_lock(&h->mu);
    hn = tr_head_node_find(h, r->node_id);
    if (hn == NULL) {
        pthread_mutex_unlock(&h->mu);
        tr_rpc_reply_error(call, TROUPE_NOT_FOUND, "node %llu is unknown", (unsigned long long)r->node_id);
        goto out;
    }
    if (!tr_head_node_allowed(call, hn)) { /* a node credential: its own node only */
        pthread_mutex_unlock(&h->mu);
        goto out; /* answered */
    }
    if (hn->instance[0] != '\0' && strcmp(hn->instance, inst) != 0) {
        pthread_mutex_unlock(&h->mu);
        tr_rpc_reply_error(call, TROUPE_PERMISSION_DENIED, "node %llu belongs to another agent",
                           (unsigned long long)r->node_id);
        goto out;
    }
    if (!tr_head_node_gone(hn->n)) {
        snprintf(reason, sizeof(reason), "agent stopped%s: %s", r->restarting ? " for a restart" : "",
                 (r->reason && r->reason[0]) ? r->reason : "deregistered");
        hn->dropped_mono = 0;
        tr_head_node_transition(h, hn, TROUPE__V1__NODE_STATE__NODE_LEFT, reason);
    }
    tr_head_after_commit(h, call, reply_empty, 0);
    pthread_mutex_unlock(&h->mu);
out:
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

/* ---- DrainNode ----------------------------------------------------------- */

/* find_named returns the node of this id or, by name, the newest one not
 * gone (else the newest of that name). */
static tr_head_node *find_named(tr_head *h, const char *what)
{
    char *end = NULL;
    unsigned long long id = strtoull(what, &end, 10);
    tr_head_node *any = NULL;

    if (what[0] != '\0' && end != NULL && *end == '\0') {
        return tr_head_node_find(h, id);
    }
    for (size_t i = h->n_nodes; i-- > 0;) {
        if (strcmp(h->nodes[i].n->name, what) != 0) {
            continue;
        }
        if (!tr_head_node_gone(h->nodes[i].n)) {
            return &h->nodes[i];
        }
        any = any ? any : &h->nodes[i];
    }
    return any;
}

/* running_jobs counts jobs with a worker that may still run on the node. */
static uint32_t running_jobs(tr_head_node *hn)
{
    uint32_t n = 0;
    for (size_t k = 0; k < hn->n_placed; k++) {
        const Troupe__V1__Job *j = hn->placed[k]->j;
        for (size_t i = 0; i < j->n_workers; i++) {
            int s = j->workers[i]->state;
            if (j->workers[i]->node_id == hn->n->id &&
                (s == TROUPE__V1__WORKER_STATE__WORKER_RUNNING || s == TROUPE__V1__WORKER_STATE__WORKER_PENDING)) {
                n++;
                break;
            }
        }
    }
    return n;
}

static void reply_drain(tr_head *h, tr_rpc_call *call, uint64_t node_id)
{
    Troupe__V1__DrainNodeReply rep = TROUPE__V1__DRAIN_NODE_REPLY__INIT;
    tr_head_node *hn = tr_head_node_find(h, node_id);

    if (hn == NULL) {
        tr_rpc_reply_error(call, TROUPE_NOT_FOUND, "node %llu is unknown", (unsigned long long)node_id);
        return;
    }
    hn->n->gpus_free = tr_head_node_gone(hn->n) ? 0 : tr_jobs_node_free_gpus(h, hn->n->id);
    hn->n->cpu_milli_free = tr_head_node_gone(hn->n) ? 0 : tr_jobs_node_free_cpu_milli(h, hn->n->id);
    rep.node = hn->n;
    rep.running_jobs = running_jobs(hn);
    TR_LOG(TR_LOG_DEBUG, "drain answered node=%llu name=%s running_jobs=%u", (unsigned long long)hn->n->id,
           hn->n->name, rep.running_jobs);
    tr_rpc_reply(call, &rep.base);
}

void tr_head_drain_node(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__DrainNodeRequest *r =
        (Troupe__V1__DrainNodeRequest *)tr_rpc_unpack(call, &troupe__v1__drain_node_request__descriptor);
    tr_head_node *hn;

    if (r == NULL) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    if (tr_head_store_refuse(h, call)) { /* a change like any other: not while nothing can be saved */
        pthread_mutex_unlock(&h->mu);
        goto out;
    }
    hn = find_named(h, r->node ? r->node : "");
    if (hn == NULL) {
        pthread_mutex_unlock(&h->mu);
        tr_rpc_reply_error(call, TROUPE_NOT_FOUND, "no node named or numbered '%s' (see troupe nodes)",
                           r->node ? r->node : "");
        goto out;
    }
    if (hn->n->draining != !r->undrain) {
        hn->n->draining = !r->undrain;
        tr_head_dirty_node(h, hn->n->id);
        tr_head_event(h, r->undrain ? "UNDRAINED" : "DRAINING", hn->n->id, 0,
                      r->undrain ? "placements allowed again" : "no new placements; running jobs go on");
        TR_LOG(TR_LOG_NOTICE, "node %s node=%llu name=%s", r->undrain ? "undrained" : "draining",
               (unsigned long long)hn->n->id, hn->n->name);
        tr_jobs_node_state(h, hn->n);
    }
    tr_head_after_commit(h, call, reply_drain, hn->n->id);
    pthread_mutex_unlock(&h->mu);
out:
    protobuf_c_message_free_unpacked(&r->base, NULL);
}
