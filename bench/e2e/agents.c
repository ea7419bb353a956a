/* agents.c - simulated node agents: registration and the NodeSync exchange.
 *
 * The bench plays 1,000 agents, each over an RPC connection of its own that
 * stays open for the run, as a real agent's does: the head reads a closed
 * agent connection as a dead agent process (SUSPECT at once, DEAD after
 * disconnect_ms) and places nothing on its node. The head's heartbeat
 * settings (head.c) keep the silent agents ALIVE otherwise. A real
 * agent (worker/node/sync.c) learns a new assignment set from its long poll,
 * starts and stops processes to match it, and reports the complete list of
 * its workers with the version it applied. eb_agent_sync does the same
 * exchange without processes: one NodeSync to read the set (what the long
 * poll's answer would carry) and one report, so it costs the head the same
 * two calls per node and change as a real agent. Syncs of one node are
 * serialised (a node has one agent); different nodes run in parallel. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "e2e_bench.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

#define NODE_SYNC "troupe.v1.Head/NodeSync"

typedef struct reg_job {
    const char *url;
    eb_cluster *c;
    size_t first, step;
    int rv;
    char why[300];
} reg_job;

/* node_gpus gives node i 4, 8 or 16 GPUs: the same shuffled mix, a third of
 * each, as bench/sched's cluster. */
static unsigned node_gpus(size_t i)
{
    static const unsigned sizes[] = {4, 8, 16};
    uint64_t x = 0x2545F4914F6CDD1DULL;
    for (size_t k = 0; k <= i; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    }
    return sizes[x % 3];
}

static int register_one(tr_rpc_client *rpc, size_t i, unsigned ngpus, uint64_t *id, tr_err *err)
{
    Troupe__V1__RegisterNodeRequest req = TROUPE__V1__REGISTER_NODE_REQUEST__INIT;
    Troupe__V1__RegisterNodeReply *rep = NULL;
    Troupe__V1__Gpu gpus[16], *gp[16];
    char name[32], addr[32], uuid[16][48];
    int rv;

    snprintf(name, sizeof(name), "sim-%04zu", i);
    for (unsigned g = 0; g < ngpus; g++) {
        troupe__v1__gpu__init(&gpus[g]);
        snprintf(uuid[g], sizeof(uuid[g]), "GPU-sim-%04zu-%02u", i, g);
        gpus[g].index = g;
        gpus[g].model = "SIM";
        gpus[g].memory_bytes = 80ull << 30;
        gpus[g].uuid = uuid[g];
        gpus[g].simulated = 1;
        gp[g] = &gpus[g];
    }
    req.name = name;
    req.hostname = name;
    /* A distinct (never dialled) address per simulated node, as on a real
     * cluster: master ports are allocated per host. */
    snprintf(addr, sizeof(addr), "10.%zu.%zu.%zu", (i >> 16) & 255, (i >> 8) & 255, i & 255);
    req.address = addr;
    req.gpus = gp;
    req.n_gpus = ngpus;
    req.pid = (uint32_t)getpid();
    rv = tr_rpc_client_call(rpc, "troupe.v1.Head/RegisterNode", &req.base,
                            &troupe__v1__register_node_reply__descriptor, (ProtobufCMessage **)&rep, 10000, 0,
                            err);
    if (rv == TROUPE_OK) {
        *id = rep->node_id;
        troupe__v1__register_node_reply__free_unpacked(rep, NULL);
    }
    return rv;
}

static void *reg_main(void *arg)
{
    reg_job *j = arg;
    tr_rpc_client_opts o = {.url = j->url};
    tr_err err;

    j->rv = TROUPE_OK;
    for (size_t i = j->first; j->rv == TROUPE_OK && i < j->c->n; i += j->step) {
        eb_node *nd = &j->c->nodes[i];
        j->rv = tr_rpc_client_open(&o, &nd->rpc, &err);
        if (j->rv == TROUPE_OK) {
            j->rv = register_one(nd->rpc, i, nd->gpus, &nd->id, &err);
        }
    }
    if (j->rv != TROUPE_OK) {
        snprintf(j->why, sizeof(j->why), "RegisterNode: %.200s", err.msg);
    }
    return NULL;
}

static int cmp_node(const void *a, const void *b)
{
    uint64_t x = ((const eb_node *)a)->id, y = ((const eb_node *)b)->id;
    return (x > y) - (x < y);
}

int eb_cluster_register(const char *url, size_t n, int threads, eb_cluster *c, double *seconds, char *why,
                        size_t why_size)
{
    pthread_t th[16];
    reg_job jobs[16];
    double t0 = eb_now_s();
    int rv = 0;

    memset(c, 0, sizeof(*c));
    threads = threads < 1 ? 1 : threads > 16 ? 16 : threads;
    if ((c->nodes = calloc(n, sizeof(*c->nodes))) == NULL) {
        snprintf(why, why_size, "out of memory");
        return -1;
    }
    c->n = n;
    for (size_t i = 0; i < n; i++) {
        c->nodes[i].gpus = node_gpus(i);
        c->gpus_total += c->nodes[i].gpus;
        pthread_mutex_init(&c->nodes[i].mu, NULL);
    }
    for (int t = 0; t < threads; t++) {
        jobs[t] = (reg_job){.url = url, .c = c, .first = (size_t)t, .step = (size_t)threads};
        pthread_create(&th[t], NULL, reg_main, &jobs[t]);
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        if (jobs[t].rv != TROUPE_OK && rv == 0) {
            snprintf(why, why_size, "%s", jobs[t].why);
            rv = -1;
        }
    }
    *seconds = eb_now_s() - t0;
    qsort(c->nodes, n, sizeof(*c->nodes), cmp_node);
    return rv;
}

int eb_cluster_check(const char *url, const eb_cluster *c, char *why, size_t why_size)
{
    troupe_client_opts co = {.head_url = url, .timeout_ms = 10000};
    troupe_client *tc = NULL;
    troupe_cluster cl;
    troupe_error e = {0};
    int rv = -1;

    if (troupe_client_open(&tc, &co, &e) != TROUPE_OK || troupe_get_cluster(tc, &cl, &e) != TROUPE_OK) {
        snprintf(why, why_size, "GetCluster: %.200s", e.message);
    } else if (cl.nodes_alive != c->n || cl.gpus_total != c->gpus_total) {
        snprintf(
            why, why_size,
            "the head counts %u of the %zu simulated nodes ALIVE (%u SUSPECT, %u DEAD, %u LEFT) and %u of "
            "their %u GPUs: it lost their agents",
            cl.nodes_alive, c->n, cl.nodes_suspect, cl.nodes_dead, cl.nodes_left, cl.gpus_total,
            c->gpus_total);
    } else {
        rv = 0;
    }
    troupe_client_close(tc);
    return rv;
}

void eb_cluster_free(eb_cluster *c)
{
    for (size_t i = 0; i < c->n; i++) {
        tr_rpc_client_close(c->nodes[i].rpc);
        pthread_mutex_destroy(&c->nodes[i].mu);
    }
    free(c->nodes);
    memset(c, 0, sizeof(*c));
}

eb_node *eb_cluster_find(eb_cluster *c, uint64_t id)
{
    eb_node key = {.id = id};
    return bsearch(&key, c->nodes, c->n, sizeof(*c->nodes), cmp_node);
}

/* report_set reports every worker of set as RUNNING under set's version. */
static int report_set(tr_rpc_client *rpc, eb_node *node, const Troupe__V1__NodeSyncReply *set,
                      uint32_t timeout_ms, tr_err *err)
{
    Troupe__V1__NodeSyncRequest req = TROUPE__V1__NODE_SYNC_REQUEST__INIT;
    Troupe__V1__NodeSyncReply *rep = NULL;
    Troupe__V1__WorkerReport *r = calloc(set->n_workers + 1, sizeof(*r));
    Troupe__V1__WorkerReport **rp = calloc(set->n_workers + 1, sizeof(*rp));
    int rv = TROUPE_RESOURCE_EXHAUSTED;

    if (r == NULL || rp == NULL) {
        tr_err_set(err, rv, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < set->n_workers; i++) {
        troupe__v1__worker_report__init(&r[i]);
        r[i].job_id = set->workers[i]->job_id;
        r[i].name = set->workers[i]->name;
        r[i].attempt = set->workers[i]->attempt;
        r[i].state = TROUPE__V1__WORKER_STATE__WORKER_RUNNING;
        r[i].pid = (uint32_t)getpid();
        rp[i] = &r[i];
    }
    req.node_id = node->id;
    req.version = set->version;
    req.reports = rp;
    req.n_reports = set->n_workers;
    req.wait_ms = 0; /* a report: the head settles what the list leaves out */
    rv = tr_rpc_client_call(rpc, NODE_SYNC, &req.base, &troupe__v1__node_sync_reply__descriptor,
                            (ProtobufCMessage **)&rep, timeout_ms, 0, err);
    if (rep != NULL) {
        troupe__v1__node_sync_reply__free_unpacked(rep, NULL);
    }
out:
    free(r);
    free(rp);
    return rv;
}

int eb_agent_sync(eb_node *node, uint32_t timeout_ms, unsigned *n_rpcs, tr_err *err)
{
    tr_rpc_client *rpc = node->rpc;
    Troupe__V1__NodeSyncRequest req = TROUPE__V1__NODE_SYNC_REQUEST__INIT;
    Troupe__V1__NodeSyncReply *set = NULL;
    int rv;

    pthread_mutex_lock(&node->mu);
    /* Version 0 is older than anything the head issued, so this read settles
     * no worker; it only returns the set and its version. */
    req.node_id = node->id;
    rv = tr_rpc_client_call(rpc, NODE_SYNC, &req.base, &troupe__v1__node_sync_reply__descriptor,
                            (ProtobufCMessage **)&set, timeout_ms, 0, err);
    (*n_rpcs)++;
    if (rv == TROUPE_OK) {
        rv = report_set(rpc, node, set, timeout_ms, err);
        (*n_rpcs)++;
        troupe__v1__node_sync_reply__free_unpacked(set, NULL);
    }
    pthread_mutex_unlock(&node->mu);
    return rv;
}
