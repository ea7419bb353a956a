/* node_life.c - how a node ends and what it may take meanwhile.
 *
 * Heartbeats alone find a dead agent only after the DEAD timeout. Two faster
 * signals come first:
 *
 *   - An agent that stops on purpose deregisters (DeregisterNode): its node
 *     is LEFT at once, after it stopped its workers and reported how they
 *     ended.
 *   - An agent whose process dies closes its connection; the RPC server's pipe
 *     event names the connection and the node that last called on it becomes
 *     SUSPECT at once, DEAD when no call came on a new connection within
 *     disconnect_ms (a head-side blip or an agent reconnecting is not a death).
 *
 * Fencing. An agent holds a lease (liveness.h): with no answered heartbeat for
 * lease_ms it kills its workers. A node declared DEAD by the heartbeat timeout
 * is past that already; one declared DEAD sooner (connection closed) may
 * still run workers until its lease ends, so work from a lost node is placed
 * again only after tr_head_node_fence_until. No rank runs twice.
 *
 * Draining (DrainNode) keeps a node's jobs running and gives it nothing new;
 * so does a node that came back while workers of its earlier self still run
 * (fenced_workers, recounted from every report in jobs_sync.c). */
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "head.h"
#include "handlers.h" /* its handlers move to rpc/ */
#include "jobs.h"
#include "log.h"
#include "util.h"

/* Slack after a lease ends for the worker supervisor to notice (it checks
 * every 100 ms) and for SIGKILL to land (liveness.h). */
#define FENCE_SLACK_MS TR_LEASE_MARGIN_MS

void tr_head_node_seen(tr_head *h, tr_head_node *hn, tr_rpc_call *call)
{
    hn->seen_mono = tr_now_ms();
    hn->pipe = tr_rpc_call_pipe(call);
    hn->dropped_mono = 0;
    (void)h;
}

void tr_head_pipe_closed(uint32_t pipe, void *user)
{
    tr_head *h = user;

    pthread_mutex_lock(&h->pipe_mu);
    if (h->n_closed_pipes < sizeof(h->closed_pipes) / sizeof(h->closed_pipes[0])) {
        h->closed_pipes[h->n_closed_pipes++] = pipe;
    } else {
        h->closed_overflow = 1;
    }
    pthread_mutex_unlock(&h->pipe_mu);
    pthread_cond_signal(&h->cv); /* wake the reaper now */
}

static int pipe_listed(const uint32_t *pipes, size_t n, uint32_t pipe)
{
    for (size_t i = 0; i < n; i++) {
        if (pipes[i] == pipe) {
            return 1;
        }
    }
    return 0;
}

/* note_drops marks the nodes whose connection closed. On overflow the ids
 * are lost; the heartbeat timeout still finds those nodes. */
static void note_drops(tr_head *h, int64_t now)
{
    uint32_t pipes[64];
    size_t n;
    char reason[160];

    pthread_mutex_lock(&h->pipe_mu);
    n = h->n_closed_pipes;
    memcpy(pipes, h->closed_pipes, n * sizeof(pipes[0]));
    h->n_closed_pipes = 0;
    h->closed_overflow = 0;
    pthread_mutex_unlock(&h->pipe_mu);
    for (size_t i = 0; n > 0 && i < h->n_nodes; i++) {
        tr_head_node *hn = &h->nodes[i];
        if (hn->pipe == 0 || tr_head_node_gone(hn->n) || !pipe_listed(pipes, n, hn->pipe)) {
            continue;
        }
        hn->pipe = 0;
        hn->dropped_mono = now;
        snprintf(reason, sizeof(reason), "connection to its agent closed; DEAD in %lld ms unless it reconnects",
                 (long long)h->live.disconnect_ms);
        if (hn->n->state == TROUPE__V1__NODE_STATE__NODE_ALIVE) {
            tr_head_node_transition(h, hn, TROUPE__V1__NODE_STATE__NODE_SUSPECT, reason);
        } else {
            TR_LOG(TR_LOG_WARNING, "node connection closed node=%llu name=%s", (unsigned long long)hn->n->id,
                   hn->n->name);
        }
    }
}

void tr_head_nodes_check_pipes(tr_head *h)
{
    int64_t now = tr_now_ms();
    char reason[200];

    note_drops(h, now);
    for (size_t i = 0; i < h->n_nodes; i++) {
        tr_head_node *hn = &h->nodes[i];
        if (hn->dropped_mono == 0 || tr_head_node_gone(hn->n) || now - hn->dropped_mono < h->live.disconnect_ms) {
            continue;
        }
        snprintf(reason, sizeof(reason),
                 "connection to its agent closed %lld ms ago and was not re-established (agent process gone?)",
                 (long long)(now - hn->dropped_mono));
        hn->dropped_mono = 0;
        tr_head_node_transition(h, hn, TROUPE__V1__NODE_STATE__NODE_DEAD, reason);
    }
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
