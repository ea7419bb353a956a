/* nodes.c - the node registry: registration, heartbeats, liveness, listing.
 *
 * Each node is kept as an unpacked troupe.v1.Node (deep-copied by packing and
 * unpacking), which is also exactly what goes to SQLite. A node id comes from
 * the store's never-reused counter. Heartbeats only touch memory; state
 * changes (registered, SUSPECT, ALIVE again, DEAD) are committed to the store
 * and the event history before anyone is told.
 *
 * After a head restart, every node that was not DEAD is loaded as SUSPECT
 * with a fresh timer: its agent notices the new head epoch in its next
 * heartbeat and registers again with its old id, which it keeps. An agent that
 * died meanwhile never comes back and its node goes DEAD on the normal
 * schedule. */
#include <stdlib.h>
#include <string.h>

#include "head.h"
#include "jobs.h"
#include "log.h"
#include "util.h"

#define MAX_GPUS_PER_NODE 64

static const char *state_name(int s)
{
    switch (s) {
    case TROUPE__V1__NODE_STATE__NODE_ALIVE: return "ALIVE";
    case TROUPE__V1__NODE_STATE__NODE_SUSPECT: return "SUSPECT";
    case TROUPE__V1__NODE_STATE__NODE_DEAD: return "DEAD";
    default: return "UNKNOWN";
    }
}

/* Nodes are kept in id order (ids only grow and records are never removed;
 * recovery loads them sorted), so lookups are a binary search: they run
 * several times per placement and per NodeSync. A miss falls back to a scan,
 * which keeps the answer right even if that order were ever broken. */
tr_head_node *tr_head_node_find(tr_head *h, uint64_t id)
{
    size_t lo = 0, hi = h->n_nodes;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (h->nodes[mid].n->id < id) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo < h->n_nodes && h->nodes[lo].n->id == id) {
        return &h->nodes[lo];
    }
    for (size_t i = 0; i < h->n_nodes; i++) {
        if (h->nodes[i].n->id == id) {
            return &h->nodes[i];
        }
    }
    return NULL;
}

/* node_copy deep-copies a Node through its wire form. */
static Troupe__V1__Node *node_copy(const Troupe__V1__Node *src)
{
    size_t n = troupe__v1__node__get_packed_size(src);
    uint8_t *buf = malloc(n ? n : 1);
    Troupe__V1__Node *dst;

    if (buf == NULL) {
        return NULL;
    }
    troupe__v1__node__pack(src, buf);
    dst = troupe__v1__node__unpack(NULL, n, buf);
    free(buf);
    return dst;
}

static void node_set_reason(Troupe__V1__Node *n, const char *reason)
{
    char *copy = strdup(reason);
    if (copy == NULL) {
        return; /* keep the old reason rather than lose the record */
    }
    /* protobuf-c's default allocator is malloc, so free() matches. */
    if (n->reason != NULL && n->reason != protobuf_c_empty_string) {
        free(n->reason);
    }
    n->reason = copy;
}

/* node_transition moves a node to a new state, commits it, logs it. */
static void node_transition(tr_head *h, tr_head_node *hn, int state, const char *reason)
{
    int old = (int)hn->n->state;

    hn->n->state = (Troupe__V1__NodeState)state;
    node_set_reason(hn->n, reason);
    tr_head_dirty_node(h, hn->n->id);
    tr_head_event(h, state_name(state), hn->n->id, 0, reason);
    TR_LOG(state == TROUPE__V1__NODE_STATE__NODE_ALIVE ? TR_LOG_INFO : TR_LOG_WARNING,
           "node state node=%llu name=%s from=%s to=%s reason=\"%s\"", (unsigned long long)hn->n->id,
           hn->n->name, state_name(old), state_name(state), reason);
    if (h->sched != NULL) {
        tr_jobs_node_state(h, hn->n);
    }
}

static int nodes_append(tr_head *h, Troupe__V1__Node *n)
{
    if (h->n_nodes == h->cap_nodes) {
        size_t cap = h->cap_nodes ? h->cap_nodes * 2 : 16;
        tr_head_node *p = realloc(h->nodes, cap * sizeof(*p));
        if (p == NULL) {
            return -1;
        }
        h->nodes = p;
        h->cap_nodes = cap;
    }
    memset(&h->nodes[h->n_nodes], 0, sizeof(h->nodes[0]));
    h->nodes[h->n_nodes].n = n;
    h->nodes[h->n_nodes].seen_mono = tr_now_ms();
    /* Versions carry the head's start time, so they only grow across restarts
     * and an agent's version from before a restart is always older. */
    h->nodes[h->n_nodes].version = (uint64_t)h->started_ms * 1000u;
    h->n_nodes++;
    return 0;
}

void tr_head_nodes_reap(tr_head *h)
{
    int64_t now = tr_now_ms();

    for (size_t i = 0; i < h->n_nodes; i++) {
        tr_head_node *hn = &h->nodes[i];
        int64_t silent = now - hn->seen_mono;
        int next = tr_liveness_next(&h->live, (int)hn->n->state, silent);
        char reason[160];

        if (next == (int)hn->n->state) {
            continue;
        }
        snprintf(reason, sizeof(reason), "no heartbeat for %lld ms (period %lld ms)", (long long)silent,
                 (long long)h->live.heartbeat_ms);
        node_transition(h, hn, next, reason);
    }
}

static int recover_one(void *arg, uint64_t id, int state, const uint8_t *data, size_t len)
{
    tr_head *h = arg;
    Troupe__V1__Node *n = troupe__v1__node__unpack(NULL, len, data);

    if (n == NULL) {
        TR_LOG(TR_LOG_ERR, "store: node record %llu is unreadable; skipped", (unsigned long long)id);
        return TROUPE_OK;
    }
    if (n->state != TROUPE__V1__NODE_STATE__NODE_DEAD) {
        n->state = TROUPE__V1__NODE_STATE__NODE_SUSPECT;
        node_set_reason(n, "head restarted; waiting for the agent to register again");
    }
    (void)state;
    if (nodes_append(h, n) != 0) {
        troupe__v1__node__free_unpacked(n, NULL);
        return TROUPE_RESOURCE_EXHAUSTED;
    }
    return TROUPE_OK;
}

int tr_head_nodes_recover(tr_head *h, tr_err *err)
{
    int rv = tr_store_scan(h->store, "nodes", recover_one, h, err);
    if (rv == TROUPE_OK && h->n_nodes > 0) {
        TR_LOG(TR_LOG_NOTICE, "recovered nodes=%zu from the state dir", h->n_nodes);
    }
    return rv;
}

void tr_head_nodes_free(tr_head *h)
{
    for (size_t i = 0; i < h->n_nodes; i++) {
        troupe__v1__node__free_unpacked(h->nodes[i].n, NULL);
        free(h->nodes[i].placed);
    }
    free(h->nodes);
    h->nodes = NULL;
    h->n_nodes = h->cap_nodes = 0;
}

/* validate_registration checks what an agent claims before anything is
 * stored; the message names the field and the limit. */
static int validate_registration(const Troupe__V1__RegisterNodeRequest *r, tr_err *err)
{
    uint64_t seen = 0;

    if ((r->name == NULL || r->name[0] == '\0') && (r->hostname == NULL || r->hostname[0] == '\0')) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "register: name and hostname are both empty");
    }
    if (r->n_gpus > MAX_GPUS_PER_NODE) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "register: %zu GPUs advertised; at most %d per node",
                          r->n_gpus, MAX_GPUS_PER_NODE);
    }
    for (size_t i = 0; i < r->n_gpus; i++) {
        uint32_t idx = r->gpus[i]->index;
        if (idx >= MAX_GPUS_PER_NODE || (seen & (1ull << idx))) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                              "register: GPU index %u is out of range or repeated", idx);
        }
        seen |= 1ull << idx;
    }
    for (size_t i = 0; i < r->n_labels; i++) {
        if (r->labels[i]->key == NULL || r->labels[i]->key[0] == '\0') {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "register: label %zu has an empty key", i);
        }
    }
    return TROUPE_OK;
}

/* retire_namesakes marks other live nodes of the same name DEAD: an agent that
 * restarts before its old self timed out replaces it. */
static void retire_namesakes(tr_head *h, const char *name, uint64_t keep)
{
    for (size_t i = 0; i < h->n_nodes; i++) {
        tr_head_node *hn = &h->nodes[i];
        char reason[160];
        if (hn->n->id == keep || hn->n->state == TROUPE__V1__NODE_STATE__NODE_DEAD ||
            strcmp(hn->n->name, name) != 0) {
            continue;
        }
        snprintf(reason, sizeof(reason), "replaced by node %llu (agent of the same name registered)",
                 (unsigned long long)keep);
        node_transition(h, hn, TROUPE__V1__NODE_STATE__NODE_DEAD, reason);
    }
}

static int do_register(tr_head *h, const Troupe__V1__RegisterNodeRequest *r, uint64_t *id_out, tr_err *err)
{
    Troupe__V1__Node tmpl = TROUPE__V1__NODE__INIT;
    tr_head_node *old = r->node_id ? tr_head_node_find(h, r->node_id) : NULL;
    Troupe__V1__Node *n;

    tmpl.name = (char *)((r->name && r->name[0]) ? r->name : r->hostname);
    tmpl.hostname = r->hostname;
    tmpl.address = r->address;
    tmpl.n_labels = r->n_labels;
    tmpl.labels = r->labels;
    tmpl.n_gpus = r->n_gpus;
    tmpl.gpus = r->gpus;
    tmpl.state = TROUPE__V1__NODE_STATE__NODE_ALIVE;
    tmpl.registered_ms = tr_wall_ms();
    tmpl.last_seen_ms = tmpl.registered_ms;
    tmpl.reason = "registered";
    tmpl.pid = r->pid;
    if (old != NULL && old->n->state != TROUPE__V1__NODE_STATE__NODE_DEAD) {
        tmpl.id = old->n->id;
        tmpl.registered_ms = old->n->registered_ms;
        tmpl.reason = "registered again";
    } else {
        tmpl.id = tr_head_new_id(h, TR_ID_NODES);
    }
    n = node_copy(&tmpl);
    if (n == NULL) {
        /* Out of memory, or unknown fields protobuf-c cannot write back. */
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "registration could not be stored (malformed fields?)");
    }
    tr_head_dirty_node(h, n->id);
    tr_head_event(h, "REGISTERED", n->id, 0, tmpl.reason);
    if (old != NULL && tmpl.id == old->n->id) {
        troupe__v1__node__free_unpacked(old->n, NULL);
        old->n = n;
        old->seen_mono = tr_now_ms();
    } else if (nodes_append(h, n) != 0) {
        troupe__v1__node__free_unpacked(n, NULL);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    retire_namesakes(h, n->name, n->id);
    tr_jobs_node_added(h, n);
    TR_LOG(TR_LOG_INFO, "node registered node=%llu name=%s gpus=%zu address=%s%s", (unsigned long long)n->id,
           n->name, n->n_gpus, n->address, (old && tmpl.id == old->n->id) ? " again=1" : "");
    *id_out = n->id;
    return TROUPE_OK;
}

/* reply_registered answers a registration once it is on disk. */
static void reply_registered(tr_head *h, tr_rpc_call *call, uint64_t node_id)
{
    Troupe__V1__RegisterNodeReply rep = TROUPE__V1__REGISTER_NODE_REPLY__INIT;
    rep.node_id = node_id;
    rep.heartbeat_ms = (uint32_t)h->cfg.heartbeat_ms;
    rep.head_started_ms = h->started_ms;
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
    if ((rv = validate_registration(r, &err)) != TROUPE_OK) {
        TR_LOG(TR_LOG_WARNING, "refused registration: %s", err.msg);
        tr_rpc_reply_error(call, rv, "%s", err.msg);
        goto out;
    }
    pthread_mutex_lock(&h->mu);
    rv = do_register(h, r, &node_id, &err);
    if (rv == TROUPE_OK) {
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
    Troupe__V1__HeartbeatRequest *r =
        (Troupe__V1__HeartbeatRequest *)tr_rpc_unpack(call, &troupe__v1__heartbeat_request__descriptor);
    Troupe__V1__HeartbeatReply rep = TROUPE__V1__HEARTBEAT_REPLY__INIT;
    tr_head_node *hn;

    if (r == NULL) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    hn = tr_head_node_find(h, r->node_id);
    if (hn == NULL || hn->n->state == TROUPE__V1__NODE_STATE__NODE_DEAD) {
        pthread_mutex_unlock(&h->mu);
        tr_rpc_reply_error(call, TROUPE_FAILED_PRECONDITION, "node %llu is %s; register again",
                           (unsigned long long)r->node_id, hn ? "DEAD" : "unknown");
        goto out;
    }
    hn->seen_mono = tr_now_ms();
    hn->n->last_seen_ms = tr_wall_ms();
    /* A node still waiting to re-register after a head restart stays SUSPECT
     * until it does; otherwise a heartbeat clears suspicion. */
    if (hn->n->state == TROUPE__V1__NODE_STATE__NODE_SUSPECT &&
        strncmp(hn->n->reason, "head restarted", 14) != 0) {
        node_transition(h, hn, TROUPE__V1__NODE_STATE__NODE_ALIVE, "heartbeat received again");
    }
    pthread_mutex_unlock(&h->mu);
    rep.heartbeat_ms = (uint32_t)h->cfg.heartbeat_ms;
    rep.head_started_ms = h->started_ms;
    tr_rpc_reply(call, &rep.base);
out:
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

void tr_head_list_nodes(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__ListNodesRequest *r =
        (Troupe__V1__ListNodesRequest *)tr_rpc_unpack(call, &troupe__v1__list_nodes_request__descriptor);
    Troupe__V1__ListNodesReply rep = TROUPE__V1__LIST_NODES_REPLY__INIT;

    if (r == NULL) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    rep.nodes = calloc(h->n_nodes ? h->n_nodes : 1, sizeof(*rep.nodes));
    if (rep.nodes == NULL) {
        pthread_mutex_unlock(&h->mu);
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < h->n_nodes; i++) {
        Troupe__V1__Node *n = h->nodes[i].n;
        if (!r->include_dead && n->state == TROUPE__V1__NODE_STATE__NODE_DEAD) {
            continue;
        }
        n->gpus_free = n->state == TROUPE__V1__NODE_STATE__NODE_DEAD ? 0 : tr_jobs_node_free_gpus(h, n->id);
        rep.nodes[rep.n_nodes++] = n;
    }
    /* Packed under the lock: the messages are borrowed from the registry. */
    tr_rpc_reply(call, &rep.base);
    pthread_mutex_unlock(&h->mu);
    free(rep.nodes);
out:
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

void tr_head_get_cluster(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__GetClusterReply rep = TROUPE__V1__GET_CLUSTER_REPLY__INIT;
    ProtobufCMessage *r = tr_rpc_unpack(call, &troupe__v1__get_cluster_request__descriptor);

    if (r == NULL) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i < h->n_nodes; i++) {
        Troupe__V1__Node *n = h->nodes[i].n;
        switch (n->state) {
        case TROUPE__V1__NODE_STATE__NODE_ALIVE: rep.nodes_alive++; break;
        case TROUPE__V1__NODE_STATE__NODE_SUSPECT: rep.nodes_suspect++; break;
        default: rep.nodes_dead++; continue;
        }
        rep.gpus_total += (uint32_t)n->n_gpus;
        rep.gpus_free += tr_jobs_node_free_gpus(h, n->id);
    }
    pthread_mutex_unlock(&h->mu);
    rep.head_version = TROUPE_VERSION;
    rep.head_started_ms = h->started_ms;
    rep.requests_served = tr_rpc_server_served(h->srv);
    tr_rpc_reply(call, &rep.base);
    protobuf_c_message_free_unpacked(r, NULL);
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
