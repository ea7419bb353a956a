/* client.c - libtroupe: the public client API over the internal RPC layer.
 *
 * Results keep the decoded reply message alive and point into it, so a list
 * is one allocation family freed by one call. */
#include <stdlib.h>
#include <string.h>

#include "client_int.h"
#include "rpc.h"
#include "safefile.h"
#include "troupe/client.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

/* resolve_token picks the credential: opts->token, opts->token_file,
 * $TROUPE_TOKEN, $TROUPE_TOKEN_FILE, $TROUPE_CREDENTIALS (a worker's own
 * credential file, written by troupe-node), in that order. A file's content
 * goes to *owned (free it). */
static int resolve_token(troupe_client_opts *o, char **owned, tr_err *e)
{
    const char *file = o->token_file;
    int warn = 0, rv;

    *owned = NULL;
    if (o->token != NULL) {
        return TROUPE_OK;
    }
    if (file == NULL && (o->token = getenv("TROUPE_TOKEN")) != NULL) {
        return TROUPE_OK;
    }
    if (file == NULL) {
        file = getenv("TROUPE_TOKEN_FILE");
    }
    if (file == NULL || file[0] == '\0') {
        file = getenv("TROUPE_CREDENTIALS");
    }
    if (file == NULL || file[0] == '\0') {
        return TROUPE_OK;
    }
    if ((rv = tr_secret_file_read(file, owned, &warn, e)) != TROUPE_OK) {
        return rv;
    }
    o->token = *owned;
    return TROUPE_OK;
}

TROUPE_API troupe_status troupe_client_open(troupe_client **out, const troupe_client_opts *opts,
                                            troupe_error *err)
{
    troupe_client_opts o = {0};
    tr_rpc_client_opts ro = {0};
    troupe_client *c;
    char *owned_token = NULL;
    tr_err e;
    int rv;

    *out = NULL;
    if (opts != NULL) {
        o = *opts;
    }
    if (o.head_url == NULL || o.head_url[0] == '\0') {
        o.head_url = getenv("TROUPE_HEAD");
    }
    if (o.head_url == NULL || o.head_url[0] == '\0') {
        o.head_url = TROUPE_DEFAULT_HEAD;
    }
    if ((rv = resolve_token(&o, &owned_token, &e)) != TROUPE_OK) {
        return tr_client_finish(err, &e, rv);
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        free(owned_token);
        return tr_client_finish(err, &e, tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory"));
    }
    tr_strlcpy(c->url, o.head_url, sizeof(c->url));
    c->timeout_ms = o.timeout_ms ? o.timeout_ms : 10000;
    ro.url = c->url;
    ro.token = o.token;
    ro.tls.ca_file = o.tls_ca ? o.tls_ca : getenv("TROUPE_TLS_CA");
    ro.tls.cert_file = o.tls_cert ? o.tls_cert : getenv("TROUPE_TLS_CERT");
    ro.tls.key_file = o.tls_key ? o.tls_key : getenv("TROUPE_TLS_KEY");
    ro.tls.server_name = o.tls_server_name ? o.tls_server_name : getenv("TROUPE_TLS_SERVER_NAME");
    rv = tr_rpc_client_open(&ro, &c->rpc, &e);
    free(owned_token); /* the RPC client keeps its own copy */
    if (rv != TROUPE_OK) {
        free(c);
        return tr_client_finish(err, &e, rv);
    }
    *out = c;
    return tr_client_finish(err, &e, TROUPE_OK);
}

TROUPE_API void troupe_client_close(troupe_client *c)
{
    if (c == NULL) {
        return;
    }
    tr_rpc_client_close(c->rpc);
    free(c);
}

TROUPE_API const char *troupe_client_url(const troupe_client *c)
{
    return c->url;
}

TROUPE_API const char *troupe_node_state_name(int state)
{
    switch (state) {
    case TROUPE_NODE_ALIVE: return "ALIVE";
    case TROUPE_NODE_SUSPECT: return "SUSPECT";
    case TROUPE_NODE_DEAD: return "DEAD";
    case TROUPE_NODE_LEFT: return "LEFT";
    default: return "UNKNOWN";
    }
}

TROUPE_API troupe_status troupe_ping(troupe_client *c, const void *data, size_t len, troupe_error *err)
{
    Troupe__V1__PingRequest req = TROUPE__V1__PING_REQUEST__INIT;
    ProtobufCMessage *rep = NULL;
    tr_err e;
    int rv;

    req.data.data = (uint8_t *)data;
    req.data.len = len;
    rv = tr_rpc_client_call(c->rpc, "troupe.v1.Head/Ping", &req.base, &troupe__v1__ping_reply__descriptor,
                            &rep, c->timeout_ms, TR_RPC_IDEMPOTENT, &e);
    if (rep != NULL) {
        protobuf_c_message_free_unpacked(rep, NULL);
    }
    return tr_client_finish(err, &e, rv);
}

typedef struct node_list_impl {
    troupe_node_list pub; /* first: the public pointer is the impl pointer */
    Troupe__V1__ListNodesReply **msgs; /* one per page; the nodes borrow from them */
    size_t n_msgs;
    troupe_node *nodes;
    troupe_gpu *gpus;
    troupe_label *labels;
} node_list_impl;

TROUPE_API void troupe_node_list_free(troupe_node_list *list)
{
    node_list_impl *l = (node_list_impl *)list;
    if (l == NULL) {
        return;
    }
    for (size_t i = 0; i < l->n_msgs; i++) {
        troupe__v1__list_nodes_reply__free_unpacked(l->msgs[i], NULL);
    }
    free(l->msgs);
    free(l->nodes);
    free(l->gpus);
    free(l->labels);
    free(l);
}

/* fill_node points a public node at the strings of its message. */
static void fill_node(troupe_node *d, const Troupe__V1__Node *s, troupe_gpu *gpus, troupe_label *labels)
{
    d->id = s->id;
    d->name = s->name;
    d->hostname = s->hostname;
    d->address = s->address;
    d->state = (troupe_node_state)s->state;
    d->reason = s->reason;
    d->sync_error = s->sync_error;
    d->registered_ms = s->registered_ms;
    d->last_seen_ms = s->last_seen_ms;
    d->pid = s->pid;
    d->stop_grace_ms = s->stop_grace_ms;
    d->gpus_free = s->gpus_free;
    d->cpus = s->cpus;
    d->cpus_free = s->cpu_milli_free / 1000.0;
    d->draining = s->draining;
    d->replaces = s->replaces;
    d->fenced_workers = s->fenced_workers;
    d->isolation = s->isolation;
    d->has_nsys = 0;
    for (size_t t = 0; t < s->n_tools; t++) {
        d->has_nsys |= strcmp(s->tools[t], "nsys") == 0;
    }
    d->n_gpus = s->n_gpus;
    d->gpus = gpus;
    for (size_t g = 0; g < s->n_gpus; g++) {
        gpus[g].index = s->gpus[g]->index;
        gpus[g].model = s->gpus[g]->model;
        gpus[g].memory_bytes = s->gpus[g]->memory_bytes;
        gpus[g].uuid = s->gpus[g]->uuid;
        gpus[g].simulated = s->gpus[g]->simulated;
        for (size_t k = 0; k < s->n_gpu_stats; k++) { /* the heartbeat's figures, by index */
            const Troupe__V1__GpuStats *st = s->gpu_stats[k];
            if (st->index == s->gpus[g]->index && st->ok) {
                gpus[g].stats = 1;
                gpus[g].memory_used_bytes = st->memory_used_bytes;
                gpus[g].utilization_pct = st->utilization_pct;
                gpus[g].temperature_c = st->temperature_c;
                gpus[g].power_mw = st->power_mw;
            }
        }
    }
    d->gpu_source = "";
    if (s->stats != NULL) {
        d->stats_ms = s->stats->at_ms;
        d->gpu_source = s->stats->gpu_source;
        d->load1 = s->stats->load1;
        d->mem_total_bytes = s->stats->mem_total_bytes;
        d->mem_available_bytes = s->stats->mem_available_bytes;
    }
    d->n_labels = s->n_labels;
    d->labels = labels;
    for (size_t k = 0; k < s->n_labels; k++) {
        labels[k].key = s->labels[k]->key;
        labels[k].value = s->labels[k]->value;
    }
}

/* troupe_list_nodes pages through ListNodes (the head answers a page that
 * fits in a frame) and returns every node. */
TROUPE_API troupe_status troupe_list_nodes(troupe_client *c, int include_dead, troupe_node_list **out,
                                           troupe_error *err)
{
    Troupe__V1__ListNodesRequest req = TROUPE__V1__LIST_NODES_REQUEST__INIT;
    node_list_impl *l;
    size_t nn = 0, ng = 0, nl = 0, gi = 0, li = 0, k = 0, cap = 0;
    tr_err e;
    int rv;

    *out = NULL;
    l = calloc(1, sizeof(*l));
    if (l == NULL) {
        return tr_client_finish(err, &e, tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory"));
    }
    req.include_dead = include_dead != 0;
    do {
        Troupe__V1__ListNodesReply *page = NULL;
        if (l->n_msgs == cap) {
            Troupe__V1__ListNodesReply **m = realloc(l->msgs, (cap ? 2 * cap : 4) * sizeof(*m));
            if (m == NULL) {
                troupe_node_list_free(&l->pub);
                return tr_client_finish(err, &e, tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory"));
            }
            l->msgs = m;
            cap = cap ? 2 * cap : 4;
        }
        rv = tr_rpc_client_call(c->rpc, "troupe.v1.Head/ListNodes", &req.base,
                                &troupe__v1__list_nodes_reply__descriptor, (ProtobufCMessage **)&page,
                                c->timeout_ms, TR_RPC_IDEMPOTENT, &e);
        if (rv != TROUPE_OK) {
            troupe_node_list_free(&l->pub);
            return tr_client_finish(err, &e, rv);
        }
        l->msgs[l->n_msgs++] = page;
        if (page->next_cursor != 0 && page->next_cursor <= req.cursor) {
            troupe_node_list_free(&l->pub); /* a head that does not move on would loop for ever */
            return tr_client_finish(err, &e,
                                    tr_err_set(&e, TROUPE_INTERNAL, "ListNodes: the head's cursor went back"));
        }
        req.cursor = page->next_cursor;
    } while (req.cursor != 0);
    for (size_t p = 0; p < l->n_msgs; p++) {
        for (size_t i = 0; i < l->msgs[p]->n_nodes; i++) {
            nn++;
            ng += l->msgs[p]->nodes[i]->n_gpus;
            nl += l->msgs[p]->nodes[i]->n_labels;
        }
    }
    l->nodes = calloc(nn + 1, sizeof(*l->nodes));
    l->gpus = calloc(ng + 1, sizeof(*l->gpus));
    l->labels = calloc(nl + 1, sizeof(*l->labels));
    if (l->nodes == NULL || l->gpus == NULL || l->labels == NULL) {
        troupe_node_list_free(&l->pub);
        return tr_client_finish(err, &e, tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory"));
    }
    for (size_t p = 0; p < l->n_msgs; p++) {
        for (size_t i = 0; i < l->msgs[p]->n_nodes; i++) {
            const Troupe__V1__Node *n = l->msgs[p]->nodes[i];
            fill_node(&l->nodes[k++], n, l->gpus + gi, l->labels + li);
            gi += n->n_gpus;
            li += n->n_labels;
        }
    }
    l->pub.count = nn;
    l->pub.nodes = l->nodes;
    *out = &l->pub;
    return tr_client_finish(err, &e, TROUPE_OK);
}

TROUPE_API troupe_status troupe_get_cluster(troupe_client *c, troupe_cluster *out, troupe_error *err)
{
    Troupe__V1__GetClusterRequest req = TROUPE__V1__GET_CLUSTER_REQUEST__INIT;
    Troupe__V1__GetClusterReply *rep = NULL;
    tr_err e;
    int rv;

    memset(out, 0, sizeof(*out));
    rv = tr_rpc_client_call(c->rpc, "troupe.v1.Head/GetCluster", &req.base,
                            &troupe__v1__get_cluster_reply__descriptor, (ProtobufCMessage **)&rep,
                            c->timeout_ms, TR_RPC_IDEMPOTENT, &e);
    if (rv != TROUPE_OK) {
        return tr_client_finish(err, &e, rv);
    }
    out->nodes_alive = rep->nodes_alive;
    out->nodes_suspect = rep->nodes_suspect;
    out->nodes_dead = rep->nodes_dead;
    out->nodes_left = rep->nodes_left;
    out->gpus_total = rep->gpus_total;
    out->gpus_free = rep->gpus_free;
    tr_strlcpy(out->head_version, rep->head_version, sizeof(out->head_version));
    out->head_started_ms = rep->head_started_ms;
    out->requests_served = rep->requests_served;
    out->jobs_pending = rep->jobs_pending;
    out->jobs_running = rep->jobs_running;
    out->jobs_succeeded = rep->jobs_succeeded;
    out->jobs_failed = rep->jobs_failed;
    out->jobs_stopped = rep->jobs_stopped;
    out->store_failing = rep->store_failing;
    tr_strlcpy(out->store_error, rep->store_error, sizeof(out->store_error));
    out->store_failing_since_ms = rep->store_failing_since_ms;
    out->store_failed_writes = rep->store_failed_writes;
    out->store_unsaved = rep->store_unsaved;
    tr_strlcpy(out->http_url, rep->http_url ? rep->http_url : "", sizeof(out->http_url));
    out->connections_open = rep->connections_open;
    out->connections_unauthenticated = rep->connections_unauthenticated;
    out->connections_max = rep->connections_max;
    out->connections_refused = rep->connections_refused;
    out->connections_displaced = rep->connections_displaced;
    out->connections_closed_idle = rep->connections_closed_idle;
    out->frames_oversized = rep->frames_oversized;
    out->frame_limit_bytes = rep->frame_limit_bytes;
    out->jobs_unsaved = rep->jobs_unsaved;
    out->heartbeat_ms = rep->heartbeat_ms;
    out->dead_ms = rep->dead_ms;
    out->cpus_total = rep->cpus_total;
    out->cpus_free = (double)rep->cpu_milli_free / 1000.0;
    troupe__v1__get_cluster_reply__free_unpacked(rep, NULL);
    return tr_client_finish(err, &e, TROUPE_OK);
}

TROUPE_API troupe_status troupe_token_create(troupe_client *c, const char *scope, uint64_t ttl_s, char **token,
                                             uint64_t *id, int64_t *expires_ms, troupe_error *err)
{
    troupe_token_spec spec = {scope, ttl_s, NULL, 0};
    return troupe_token_create_spec(c, &spec, token, id, expires_ms, err);
}

TROUPE_API troupe_status troupe_token_create_spec(troupe_client *c, const troupe_token_spec *spec,
                                                  char **token, uint64_t *id, int64_t *expires_ms,
                                                  troupe_error *err)
{
    Troupe__V1__CreateTokenRequest req = TROUPE__V1__CREATE_TOKEN_REQUEST__INIT;
    Troupe__V1__CreateTokenReply *rep = NULL;
    tr_err e;
    int rv;

    *token = NULL;
    *id = 0;
    *expires_ms = 0;
    req.scope = (char *)spec->scope;
    req.ttl_s = spec->ttl_s;
    req.node = (char *)(spec->node != NULL ? spec->node : "");
    req.max_nodes = spec->max_nodes;
    rv = tr_rpc_client_call(c->rpc, "troupe.v1.Head/CreateToken", &req.base,
                            &troupe__v1__create_token_reply__descriptor, (ProtobufCMessage **)&rep, c->timeout_ms,
                            0, &e);
    if (rv == TROUPE_OK) {
        if ((*token = strdup(rep->token)) == NULL) {
            rv = tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        }
        *id = rep->id;
        *expires_ms = rep->expires_ms;
        memset(rep->token, 0, strlen(rep->token));
        troupe__v1__create_token_reply__free_unpacked(rep, NULL);
    }
    return tr_client_finish(err, &e, rv);
}

TROUPE_API troupe_status troupe_token_revoke(troupe_client *c, uint64_t id, troupe_error *err)
{
    Troupe__V1__RevokeTokenRequest req = TROUPE__V1__REVOKE_TOKEN_REQUEST__INIT;
    ProtobufCMessage *rep = NULL;
    tr_err e;
    int rv;

    req.id = id;
    rv = tr_rpc_client_call(c->rpc, "troupe.v1.Head/RevokeToken", &req.base,
                            &troupe__v1__revoke_token_reply__descriptor, &rep, c->timeout_ms, TR_RPC_IDEMPOTENT,
                            &e);
    if (rep != NULL) {
        protobuf_c_message_free_unpacked(rep, NULL);
    }
    return tr_client_finish(err, &e, rv);
}

TROUPE_API troupe_status troupe_drain_node(troupe_client *c, const char *node, int undrain,
                                           troupe_drain_result *out, troupe_error *err)
{
    Troupe__V1__DrainNodeRequest req = TROUPE__V1__DRAIN_NODE_REQUEST__INIT;
    Troupe__V1__DrainNodeReply *rep = NULL;
    tr_err e;
    int rv;

    memset(out, 0, sizeof(*out));
    req.node = (char *)(node ? node : "");
    req.undrain = undrain != 0;
    rv = tr_rpc_client_call(c->rpc, "troupe.v1.Head/DrainNode", &req.base, &troupe__v1__drain_node_reply__descriptor,
                            (ProtobufCMessage **)&rep, c->timeout_ms, TR_RPC_IDEMPOTENT, &e);
    if (rv == TROUPE_OK && rep->node != NULL) {
        out->node_id = rep->node->id;
        tr_strlcpy(out->name, rep->node->name, sizeof(out->name));
        out->state = (troupe_node_state)rep->node->state;
        out->draining = rep->node->draining;
        out->running_jobs = rep->running_jobs;
    }
    if (rep != NULL) {
        troupe__v1__drain_node_reply__free_unpacked(rep, NULL);
    }
    return tr_client_finish(err, &e, rv);
}
