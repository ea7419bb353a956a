/* nodes.c - the node registry: registration, heartbeats, liveness (the
 * methods that call it are rpc/nodes_rpc.c's).
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
#include "nodes.h"

#include <stdlib.h>
#include <string.h>

#include "head.h"
#include "auth.h"
#include "bound_names.h"
#include "jobs.h"
#include "log.h"
#include "names.h"
#include "sched/sched.h"
#include "util.h"

#define MAX_GPUS_PER_NODE 64
#define MAX_LABELS_PER_NODE 256

static const char *state_name(int s)
{
    switch (s) {
    case TROUPE__V1__NODE_STATE__NODE_ALIVE: return "ALIVE";
    case TROUPE__V1__NODE_STATE__NODE_SUSPECT: return "SUSPECT";
    case TROUPE__V1__NODE_STATE__NODE_DEAD: return "DEAD";
    case TROUPE__V1__NODE_STATE__NODE_LEFT: return "LEFT";
    default: return "UNKNOWN";
    }
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

/* nodes_count adds node n to (sign 1) or takes it from (-1) the counts that
 * GetCluster reads (head.h: nodes_by_state): every change of a node's state
 * or record goes through here. GPUs and CPU slots count for ALIVE and
 * SUSPECT nodes, as GetCluster always counted them; a state outside the enum
 * (an unreadable record) counts as UNSPECIFIED, which GetCluster shows as
 * dead. */
static void nodes_count(tr_head *h, const Troupe__V1__Node *n, int sign)
{
    unsigned s = (unsigned)n->state < 5 ? (unsigned)n->state : 0;
    int gpus = n->state == TROUPE__V1__NODE_STATE__NODE_ALIVE || n->state == TROUPE__V1__NODE_STATE__NODE_SUSPECT;

    if (sign > 0) {
        h->nodes_by_state[s]++;
        h->node_gpus_live += gpus ? n->n_gpus : 0;
        h->node_cpus_live += gpus ? n->cpus : 0;
    } else {
        h->nodes_by_state[s]--;
        h->node_gpus_live -= gpus ? n->n_gpus : 0;
        h->node_cpus_live -= gpus ? n->cpus : 0;
    }
}

void tr_head_node_transition(tr_head *h, tr_head_node *hn, int state, const char *reason)
{
    int old = (int)hn->n->state;

    if (!tr_head_node_gone(hn->n) &&
        (state == TROUPE__V1__NODE_STATE__NODE_LEFT || state == TROUPE__V1__NODE_STATE__NODE_DEAD)) {
        tr_jobs_node_gone(h, hn->n->name, state == TROUPE__V1__NODE_STATE__NODE_LEFT ? "LEFT" : "DEAD");
    }
    nodes_count(h, hn->n, -1);
    hn->n->state = (Troupe__V1__NodeState)state;
    nodes_count(h, hn->n, 1);
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
    h->nodes[h->n_nodes].name_hash = tr_head_name_hash(n->name);
    h->nodes[h->n_nodes].seen_mono = tr_now_ms();
    /* Versions carry the head's start time, so they only grow across restarts
     * and an agent's version from before a restart is always older. */
    h->nodes[h->n_nodes].version = (uint64_t)h->started_ms * 1000u;
    h->n_nodes++;
    nodes_count(h, n, 1);
    tr_head_names_bound(h, n, 1); /* a record recovered with its owner */
    return 0;
}

int64_t tr_head_heartbeat_period(tr_head *h)
{
    int64_t live = (int64_t)h->nodes_by_state[TROUPE__V1__NODE_STATE__NODE_ALIVE] +
                   h->nodes_by_state[TROUPE__V1__NODE_STATE__NODE_SUSPECT];
    int64_t p = tr_liveness_period_ms(&h->live, live);

    if (p != h->period_logged_ms && h->period_logged_ms != 0) {
        TR_LOG(TR_LOG_NOTICE, "heartbeat period now %lld ms (was %lld): %lld agents, at most %lld heartbeats/s",
               (long long)p, (long long)h->period_logged_ms, (long long)live, (long long)h->live.max_beats_per_s);
    }
    h->period_logged_ms = p;
    return p;
}

int64_t tr_head_node_told(tr_head *h, tr_head_node *hn)
{
    int64_t p = tr_head_heartbeat_period(h);

    hn->judged_ms = hn->told_ms > p ? hn->told_ms : p;
    hn->told_ms = p;
    return p;
}

void tr_head_nodes_reap(tr_head *h)
{
    int64_t now = tr_now_ms();

    for (size_t i = 0; i < h->n_nodes; i++) {
        tr_head_node *hn = &h->nodes[i];
        int64_t silent = now - hn->seen_mono;
        int next = tr_liveness_next(&h->live, (int)hn->n->state, silent, hn->judged_ms);
        char reason[160];

        /* Silence only ever demotes: a node becomes ALIVE by a heartbeat or
         * a registration, never by the clock (a node recovered from the store
         * has a fresh timer but no agent yet). */
        if (next == (int)hn->n->state || next == TROUPE__V1__NODE_STATE__NODE_ALIVE) {
            continue;
        }
        snprintf(reason, sizeof(reason), "no heartbeat for %lld ms (period %lld ms)", (long long)silent,
                 (long long)(hn->judged_ms > h->live.heartbeat_ms ? hn->judged_ms : h->live.heartbeat_ms));
        tr_head_node_transition(h, hn, next, reason);
    }
}

/* stats_clear drops a node's live figures (GpuStats, NodeStats). */
static void stats_clear(Troupe__V1__Node *n)
{
    for (size_t i = 0; i < n->n_gpu_stats; i++) {
        troupe__v1__gpu_stats__free_unpacked(n->gpu_stats[i], NULL);
    }
    free(n->gpu_stats);
    n->gpu_stats = NULL;
    n->n_gpu_stats = 0;
    if (n->stats != NULL) {
        troupe__v1__node_stats__free_unpacked(n->stats, NULL);
        n->stats = NULL;
    }
}

/* stats_ok: figures a node may keep — one per GPU it has at most, and a
 * source that is a short printable sentence (it is shown as is). */
static int stats_ok(const Troupe__V1__Node *n, const Troupe__V1__HeartbeatRequest *r)
{
    const char *src = r->stats != NULL ? r->stats->gpu_source : "";

    if (r->n_gpu_stats > n->n_gpus || r->n_gpu_stats > 64 || strlen(src) > 200) {
        return 0;
    }
    for (const char *p = src; *p != '\0'; p++) {
        if (*p < 0x20 || *p > 0x7e) {
            return 0;
        }
    }
    return 1;
}

/* stats_shape says whether the node's figures have the shape of this
 * heartbeat's (as many GPUs, node figures or none, the same source text):
 * then stats_copy overwrites them in place. */
static int stats_shape(const Troupe__V1__Node *n, const Troupe__V1__HeartbeatRequest *r)
{
    if (n->n_gpu_stats != r->n_gpu_stats || (n->stats != NULL) != (r->stats != NULL)) {
        return 0;
    }
    return r->stats == NULL || strcmp(n->stats->gpu_source, r->stats->gpu_source) == 0;
}

/* stats_make gives the node figures of this heartbeat's shape (values set by
 * stats_copy); -1 when out of memory (the node then has none). They are
 * allocated like an unpacked message's, so the record frees as one. */
static int stats_make(Troupe__V1__Node *n, const Troupe__V1__HeartbeatRequest *r)
{
    stats_clear(n);
    if (r->n_gpu_stats > 0 && (n->gpu_stats = calloc(r->n_gpu_stats, sizeof(*n->gpu_stats))) == NULL) {
        return -1;
    }
    for (size_t i = 0; i < r->n_gpu_stats; i++, n->n_gpu_stats++) {
        if ((n->gpu_stats[i] = malloc(sizeof(*n->gpu_stats[i]))) == NULL) {
            return -1;
        }
        troupe__v1__gpu_stats__init(n->gpu_stats[i]);
    }
    if (r->stats != NULL) {
        if ((n->stats = malloc(sizeof(*n->stats))) == NULL) {
            return -1;
        }
        troupe__v1__node_stats__init(n->stats);
        if ((n->stats->gpu_source = strdup(r->stats->gpu_source)) == NULL) {
            n->stats->gpu_source = (char *)protobuf_c_empty_string;
            return -1;
        }
    }
    return 0;
}

/* stats_copy copies a heartbeat's figures into the node record (memory only:
 * a restarted head clears them in recover_one). From one heartbeat to the
 * next they keep their shape, so they are overwritten in place: no
 * allocation per heartbeat (the request itself is in the call's scratch
 * memory and is gone when the handler returns). Out-of-bounds figures are
 * dropped, not refused: a heartbeat is about liveness first. Every field of
 * GpuStats and NodeStats is copied here: a new one in the proto needs a line. */
static void stats_copy(Troupe__V1__Node *n, const Troupe__V1__HeartbeatRequest *r)
{
    if (r->stats == NULL && r->n_gpu_stats == 0) {
        return; /* an older agent */
    }
    if (!stats_ok(n, r) || (!stats_shape(n, r) && stats_make(n, r) != 0)) {
        stats_clear(n);
        return;
    }
    for (size_t i = 0; i < r->n_gpu_stats; i++) {
        Troupe__V1__GpuStats *d = n->gpu_stats[i];
        const Troupe__V1__GpuStats *g = r->gpu_stats[i];
        d->index = g->index;
        d->ok = g->ok;
        d->memory_used_bytes = g->memory_used_bytes;
        d->memory_total_bytes = g->memory_total_bytes;
        d->utilization_pct = g->utilization_pct;
        d->temperature_c = g->temperature_c;
        d->power_mw = g->power_mw;
    }
    if (r->stats != NULL) {
        n->stats->at_ms = r->stats->at_ms;
        n->stats->load1 = r->stats->load1;
        n->stats->mem_total_bytes = r->stats->mem_total_bytes;
        n->stats->mem_available_bytes = r->stats->mem_available_bytes;
        /* gpu_source: equal, by stats_shape */
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
    tr_head_id_seen(h, TR_ID_NODES, id, "the nodes table");
    stats_clear(n); /* figures of the last life, if a record was saved with them */
    if (!tr_head_node_gone(n)) {
        n->state = TROUPE__V1__NODE_STATE__NODE_SUSPECT;
        node_set_reason(n, "head restarted; waiting for the agent to register again");
    }
    (void)state;
    if (nodes_append(h, n) != 0) {
        troupe__v1__node__free_unpacked(n, NULL);
        return TROUPE_RESOURCE_EXHAUSTED;
    }
    h->nodes[h->n_nodes - 1].awaiting_register = !tr_head_node_gone(n);
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

/* The node records' source for the group commit (commit.h). Nodes change
 * rarely, so their list is scanned to mark each once; a mark that found no
 * memory makes the next batch write every node. */
void tr_head_dirty_node(tr_head *h, uint64_t id)
{
    if (tr_commit_ids_push(&h->dirty_nodes, id, 1) != 0) {
        h->rescan_nodes = 1;
        TR_LOG(TR_LOG_ERR, "out of memory listing node=%llu for the store; the writer writes all nodes",
               (unsigned long long)id);
    }
    tr_commit_wake(h);
}

static size_t nodes_marked(const tr_head *h)
{
    return h->dirty_nodes.n + (h->rescan_nodes ? h->n_nodes : 0);
}

/* pack_node returns 0 when packed, 1 when the node is unknown, -1 when out
 * of memory. */
static int pack_node(tr_head *h, uint64_t id, tr_commit_rec *r)
{
    tr_head_node *hn = tr_head_node_find(h, id);
    if (hn == NULL) {
        return 1;
    }
    r->src = &tr_head_nodes_source;
    r->id = id;
    r->state = (int)hn->n->state;
    r->len = troupe__v1__node__get_packed_size(hn->n);
    if ((r->buf = tr_commit_alloc(1, r->len ? r->len : 1)) == NULL) {
        return -1;
    }
    troupe__v1__node__pack(hn->n, r->buf);
    return 0;
}

static int nodes_collect(tr_head *h, tr_commit_rec *out, size_t *n)
{
    size_t k = *n;
    int rv = 0;

    for (size_t i = 0; rv >= 0 && i < h->dirty_nodes.n; i++) {
        rv = pack_node(h, h->dirty_nodes.ids[i], &out[k]);
        k += rv == 0;
    }
    for (size_t i = 0; rv >= 0 && h->rescan_nodes && i < h->n_nodes; i++) {
        rv = pack_node(h, h->nodes[i].n->id, &out[k]);
        k += rv == 0;
    }
    if (rv < 0) {
        for (size_t i = *n; i < k; i++) { /* the marks are still where they were */
            free(out[i].buf);
            out[i].buf = NULL;
        }
        return -1;
    }
    h->dirty_nodes.n = 0;
    h->rescan_nodes = 0;
    *n = k;
    return 0;
}

static void nodes_requeue(tr_head *h, const tr_commit_rec *r)
{
    tr_head_dirty_node(h, r->id);
}

static void nodes_stop(tr_head *h)
{
    tr_commit_ids_free(&h->dirty_nodes);
}

const tr_commit_source tr_head_nodes_source = {
    .name = "nodes",
    .id_counter = TR_ID_NODES,
    .marked = nodes_marked,
    .collect = nodes_collect,
    .requeue = nodes_requeue,
    .stop = nodes_stop,
};

void tr_head_nodes_free(tr_head *h)
{
    for (size_t i = 0; i < h->n_nodes; i++) {
        troupe__v1__node__free_unpacked(h->nodes[i].n, NULL);
        free(h->nodes[i].placed);
    }
    free(h->nodes);
    h->nodes = NULL;
    h->n_nodes = h->cap_nodes = 0;
    tr_bound_names_free(h->bound_names);
    h->bound_names = NULL;
    memset(h->nodes_by_state, 0, sizeof(h->nodes_by_state));
    h->node_gpus_live = 0;
    h->node_cpus_live = 0;
}

/* validate_strings applies the name rules (names.h) to every string an
 * agent registers: the head stores and shows them, and workers get the
 * address as MASTER_ADDR. */
static int validate_strings(const Troupe__V1__RegisterNodeRequest *r, tr_err *err)
{
    int rv = TROUPE_OK;

    if (r->name != NULL && r->name[0] != '\0') {
        rv = tr_node_name_check("node name", r->name, err);
    } else {
        rv = tr_node_name_check("node name (the host name, as no name was given)", r->hostname, err);
    }
    if (rv == TROUPE_OK && r->hostname != NULL && r->hostname[0] != '\0') {
        rv = tr_node_name_check("host name", r->hostname, err);
    }
    if (rv == TROUPE_OK && r->address != NULL && r->address[0] != '\0') {
        rv = tr_address_check("address", r->address, err);
    }
    if (rv == TROUPE_OK && r->n_labels > MAX_LABELS_PER_NODE) {
        rv = tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%zu labels; at most %d per node", r->n_labels,
                        MAX_LABELS_PER_NODE);
    }
    for (size_t i = 0; rv == TROUPE_OK && i < r->n_labels; i++) {
        rv = tr_label_check(r->labels[i]->key, r->labels[i]->value, err);
    }
    for (size_t i = 0; rv == TROUPE_OK && i < r->n_gpus; i++) {
        if ((rv = tr_text_check("GPU model", r->gpus[i]->model, 96, err)) == TROUPE_OK) {
            rv = tr_text_check("GPU uuid", r->gpus[i]->uuid, 96, err);
        }
    }
    if (rv == TROUPE_OK) {
        rv = tr_text_check("instance id", r->instance, 96, err);
    }
    if (rv == TROUPE_OK) {
        rv = tr_text_check("isolation", r->isolation, 256, err);
    }
    if (rv == TROUPE_OK && r->n_tools > 8) {
        rv = tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%zu tools; at most 8", r->n_tools);
    }
    for (size_t i = 0; rv == TROUPE_OK && i < r->n_tools; i++) {
        rv = tr_node_name_check("tool name", r->tools[i], err); /* "nsys": a plain word */
    }
    if (rv != TROUPE_OK) {
        tr_err_prefix(err, "register");
    }
    return rv;
}

/* validate_registration checks what an agent claims before anything is
 * stored; the message names the field and the limit. */
int tr_head_node_validate(const Troupe__V1__RegisterNodeRequest *r, tr_err *err)
{
    uint64_t seen = 0;

    if ((r->name == NULL || r->name[0] == '\0') && (r->hostname == NULL || r->hostname[0] == '\0')) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "register: name and hostname are both empty");
    }
    if (r->n_gpus > MAX_GPUS_PER_NODE) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "register: %zu GPUs advertised; at most %d per node",
                          r->n_gpus, MAX_GPUS_PER_NODE);
    }
    if (r->cpus > TR_SCHED_MAX_NODE_CPUS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "register: %u CPUs advertised; at most %d per node",
                          r->cpus, TR_SCHED_MAX_NODE_CPUS);
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
    return validate_strings(r, err);
}

/* retire_namesakes marks other live nodes of the same name DEAD: the same
 * agent (by its instance id, check_identity) that restarted or came back
 * before its old self timed out replaces it. */
static void retire_namesakes(tr_head *h, const char *name, uint64_t keep)
{
    uint64_t hash = tr_head_name_hash(name);

    for (size_t i = 0; i < h->n_nodes; i++) {
        tr_head_node *hn = &h->nodes[i];
        char reason[160];
        if (hn->name_hash != hash || hn->n->id == keep || tr_head_node_gone(hn->n) ||
            strcmp(hn->n->name, name) != 0) {
            continue;
        }
        snprintf(reason, sizeof(reason), "replaced by node %llu (the same agent registered again)",
                 (unsigned long long)keep);
        tr_head_node_transition(h, hn, TROUPE__V1__NODE_STATE__NODE_DEAD, reason);
    }
}

/* other_agent says whether a live node belongs to an agent other than the one
 * registering: both carry instance ids and they differ. A node whose agent
 * gave none (recovered after a head restart, before its agent registered
 * again) is taken by the first agent that claims it. */
static int other_agent(const tr_head_node *hn, const char *instance)
{
    return !tr_head_node_gone(hn->n) && hn->instance[0] != '\0' && strcmp(hn->instance, instance) != 0;
}

/* check_identity refuses a registration that would take over a live node of
 * another agent, by name or by id: two agents started with one --name would
 * otherwise replace each other for ever. */
static int check_identity(tr_head *h, const Troupe__V1__RegisterNodeRequest *r, const char *name, tr_err *err)
{
    const char *inst = r->instance ? r->instance : "";
    const tr_head_node *by_id = r->node_id ? tr_head_node_find(h, r->node_id) : NULL;
    uint64_t hash = tr_head_name_hash(name);

    for (size_t i = 0; i < h->n_nodes; i++) {
        tr_head_node *hn = &h->nodes[i];
        int same_name;
        if (hn != by_id && hn->name_hash != hash) {
            continue; /* neither its id nor its name */
        }
        same_name = strcmp(hn->n->name, name) == 0;
        if ((!same_name && hn->n->id != r->node_id) || !other_agent(hn, inst)) {
            continue;
        }
        return tr_err_set(err, TROUPE_ALREADY_EXISTS,
                          "node %s (id %llu) is %s and registered by another agent (pid %u on %s); "
                          "stop that agent or start this one with another --name",
                          hn->n->name, (unsigned long long)hn->n->id,
                          hn->n->state == TROUPE__V1__NODE_STATE__NODE_ALIVE ? "ALIVE" : "SUSPECT", hn->n->pid,
                          hn->n->hostname);
    }
    return TROUPE_OK;
}

/* last_namesake returns the newest node of this name other than skip. */
static tr_head_node *last_namesake(tr_head *h, const char *name, uint64_t skip)
{
    uint64_t hash = tr_head_name_hash(name);

    for (size_t i = h->n_nodes; i-- > 0;) {
        if (h->nodes[i].name_hash == hash && h->nodes[i].n->id != skip &&
            strcmp(h->nodes[i].n->name, name) == 0) {
            return &h->nodes[i];
        }
    }
    return NULL;
}

int tr_head_node_register(tr_head *h, tr_rpc_call *call, const Troupe__V1__RegisterNodeRequest *r,
                          uint64_t *id_out, tr_err *err)
{
    Troupe__V1__Node tmpl = TROUPE__V1__NODE__INIT;
    tr_head_node *old = r->node_id ? tr_head_node_find(h, r->node_id) : NULL;
    tr_head_node *prev, *hn;
    char reason[200];
    Troupe__V1__Node *n;
    int rv;

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
    tmpl.stop_grace_ms = r->stop_grace_ms;
    tmpl.n_tools = r->n_tools;
    tmpl.tools = r->tools;
    tmpl.isolation = r->isolation;
    tmpl.cpus = r->cpus;
    if ((rv = check_identity(h, r, tmpl.name, err)) != TROUPE_OK) {
        return rv;
    }
    if (old != NULL && !tr_head_node_gone(old->n)) {
        tmpl.id = old->n->id;
        tmpl.registered_ms = old->n->registered_ms;
        tmpl.reason = "registered again";
        tmpl.draining = old->n->draining;
        tmpl.replaces = old->n->replaces;
    } else {
        tmpl.id = tr_head_new_id(h, TR_ID_NODES);
        /* A node that comes back under the same name says so; workers it
         * still runs belong to its old self: its GPUs stay busy until they
         * are reported gone (apply_reports recounts). */
        if ((prev = last_namesake(h, tmpl.name, 0)) != NULL) {
            tmpl.replaces = prev->n->id;
            snprintf(reason, sizeof(reason), "came back (was node %llu, %s)", (unsigned long long)prev->n->id,
                     state_name((int)prev->n->state));
            tmpl.reason = reason;
        }
        tmpl.fenced_workers = r->running_workers;
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
        nodes_count(h, old->n, -1);
        tr_head_names_bound(h, old->n, -1);
        troupe__v1__node__free_unpacked(old->n, NULL);
        old->n = n;
        nodes_count(h, n, 1);
        old->name_hash = tr_head_name_hash(n->name); /* an agent may come back under another --name */
        old->awaiting_register = 0;
        hn = old;
    } else if (nodes_append(h, n) != 0) {
        troupe__v1__node__free_unpacked(n, NULL);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    } else {
        hn = &h->nodes[h->n_nodes - 1];
    }
    tr_strlcpy(hn->instance, r->instance ? r->instance : "", sizeof(hn->instance));
    tr_head_node_seen(h, hn, call);
    retire_namesakes(h, n->name, n->id);
    tr_jobs_node_added(h, n);
    TR_LOG(TR_LOG_INFO,
           "node registered node=%llu name=%s gpus=%zu cpus=%u address=%s replaces=%llu fenced_workers=%u%s",
           (unsigned long long)n->id, n->name, n->n_gpus, n->cpus, n->address,
           (unsigned long long)n->replaces, n->fenced_workers,
           (old && tmpl.id == old->n->id) ? " again=1" : "");
    *id_out = n->id;
    return TROUPE_OK;
}

void tr_head_node_seen(tr_head *h, tr_head_node *hn, tr_rpc_call *call)
{
    hn->seen_mono = tr_now_ms();
    hn->pipe = tr_rpc_call_pipe(call);
    hn->dropped_mono = 0;
    (void)h;
}

int64_t tr_head_node_beat(tr_head *h, tr_head_node *hn, tr_rpc_call *call, const Troupe__V1__HeartbeatRequest *r)
{
    tr_head_node_seen(h, hn, call);
    hn->n->last_seen_ms = tr_wall_ms();
    stats_copy(hn->n, r);
    /* A node still waiting to re-register after a head restart stays SUSPECT
     * until it does; otherwise a heartbeat clears suspicion. */
    if (hn->n->state == TROUPE__V1__NODE_STATE__NODE_SUSPECT && !hn->awaiting_register) {
        tr_head_node_transition(h, hn, TROUPE__V1__NODE_STATE__NODE_ALIVE, "heartbeat received again");
    }
    return tr_head_node_told(h, hn);
}

const char *tr_head_node_state_name(int s)
{
    return state_name(s);
}
