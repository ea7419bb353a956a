/* client.c - libtroupe: the public client API over the internal RPC layer.
 *
 * Results keep the decoded reply message alive and point into it, so a list
 * is one allocation family freed by one call. */
#include <stdlib.h>
#include <string.h>

#include "client_int.h"
#include "rpc.h"
#include "troupe/client.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

TROUPE_API troupe_status troupe_client_open(troupe_client **out, const troupe_client_opts *opts,
                                            troupe_error *err)
{
    troupe_client_opts o = {0};
    tr_rpc_client_opts ro = {0};
    troupe_client *c;
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
    if (o.token == NULL) {
        o.token = getenv("TROUPE_TOKEN");
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return tr_client_finish(err, &e, tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory"));
    }
    tr_strlcpy(c->url, o.head_url, sizeof(c->url));
    c->timeout_ms = o.timeout_ms ? o.timeout_ms : 10000;
    ro.url = c->url;
    ro.token = o.token;
    rv = tr_rpc_client_open(&ro, &c->rpc, &e);
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
    Troupe__V1__ListNodesReply *msg;
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
    if (l->msg != NULL) {
        troupe__v1__list_nodes_reply__free_unpacked(l->msg, NULL);
    }
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
    d->registered_ms = s->registered_ms;
    d->last_seen_ms = s->last_seen_ms;
    d->pid = s->pid;
    d->gpus_free = s->gpus_free;
    d->n_gpus = s->n_gpus;
    d->gpus = gpus;
    for (size_t g = 0; g < s->n_gpus; g++) {
        gpus[g].index = s->gpus[g]->index;
        gpus[g].model = s->gpus[g]->model;
        gpus[g].memory_bytes = s->gpus[g]->memory_bytes;
        gpus[g].uuid = s->gpus[g]->uuid;
        gpus[g].simulated = s->gpus[g]->simulated;
    }
    d->n_labels = s->n_labels;
    d->labels = labels;
    for (size_t k = 0; k < s->n_labels; k++) {
        labels[k].key = s->labels[k]->key;
        labels[k].value = s->labels[k]->value;
    }
}

TROUPE_API troupe_status troupe_list_nodes(troupe_client *c, int include_dead, troupe_node_list **out,
                                           troupe_error *err)
{
    Troupe__V1__ListNodesRequest req = TROUPE__V1__LIST_NODES_REQUEST__INIT;
    node_list_impl *l;
    size_t ng = 0, nl = 0, gi = 0, li = 0;
    tr_err e;
    int rv;

    *out = NULL;
    l = calloc(1, sizeof(*l));
    if (l == NULL) {
        return tr_client_finish(err, &e, tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory"));
    }
    req.include_dead = include_dead != 0;
    rv = tr_rpc_client_call(c->rpc, "troupe.v1.Head/ListNodes", &req.base,
                            &troupe__v1__list_nodes_reply__descriptor, (ProtobufCMessage **)&l->msg,
                            c->timeout_ms, TR_RPC_IDEMPOTENT, &e);
    if (rv != TROUPE_OK) {
        troupe_node_list_free(&l->pub);
        return tr_client_finish(err, &e, rv);
    }
    for (size_t i = 0; i < l->msg->n_nodes; i++) {
        ng += l->msg->nodes[i]->n_gpus;
        nl += l->msg->nodes[i]->n_labels;
    }
    l->nodes = calloc(l->msg->n_nodes + 1, sizeof(*l->nodes));
    l->gpus = calloc(ng + 1, sizeof(*l->gpus));
    l->labels = calloc(nl + 1, sizeof(*l->labels));
    if (l->nodes == NULL || l->gpus == NULL || l->labels == NULL) {
        troupe_node_list_free(&l->pub);
        return tr_client_finish(err, &e, tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory"));
    }
    for (size_t i = 0; i < l->msg->n_nodes; i++) {
        fill_node(&l->nodes[i], l->msg->nodes[i], l->gpus + gi, l->labels + li);
        gi += l->msg->nodes[i]->n_gpus;
        li += l->msg->nodes[i]->n_labels;
    }
    l->pub.count = l->msg->n_nodes;
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
    out->gpus_total = rep->gpus_total;
    out->gpus_free = rep->gpus_free;
    tr_strlcpy(out->head_version, rep->head_version, sizeof(out->head_version));
    out->head_started_ms = rep->head_started_ms;
    out->requests_served = rep->requests_served;
    troupe__v1__get_cluster_reply__free_unpacked(rep, NULL);
    return tr_client_finish(err, &e, TROUPE_OK);
}
