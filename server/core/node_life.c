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
 * (fenced_workers, recounted from every report in jobs_sync.c). The methods
 * themselves (DeregisterNode, DrainNode) are rpc/nodes_rpc.c's; the fence's
 * end is records.c's (tr_head_node_fence_until). */
#include "node_life.h"

#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "bgw.h"
#include "head.h"
#include "jobs.h"
#include "log.h"
#include "util.h"


void tr_head_pipe_closed(uint32_t pipe, void *user)
{
    tr_head *h = user;

    pthread_mutex_lock(&h->pipe_mu);
    if (h->n_closed_pipes < sizeof(h->closed_pipes) / sizeof(h->closed_pipes[0])) {
        h->closed_pipes[h->n_closed_pipes++] = pipe;
    } else {
        h->closed_overflow = 1;
    }
    if (h->reaper != NULL) {
        tr_bgw_wake(h->reaper); /* now, not at its next tick; under pipe_mu, so not while it stops */
    }
    pthread_mutex_unlock(&h->pipe_mu);
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
