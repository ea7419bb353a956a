/* test_nodes.c - unit.server.nodes: a node's live figures from its
 * heartbeats (server/nodes.c, stats_copy).
 *
 * A real head in-process (ipc:// socket, temp state dir), a node of 4 GPUs
 * registered over RPC, and heartbeats sent by hand. The heartbeat request is
 * decoded into the call's scratch memory, gone when the handler returns, so
 * the head must copy the figures; while their shape stays (as many GPUs, the
 * same source) it overwrites the node's own in place, with no allocation. */
#include <unistd.h>

#include "head.h"
#include "head_fixture.h"
#include "jobs.h"
#include "rpc.h"
#include "sched/sched.h"
#include "test_helpers.h"
#include "troupe/client.h"
#include "util.h"

typedef struct beat {
    size_t gpus;     /* GpuStats sent */
    uint32_t util;   /* GPU i reports util + i */
    const char *src; /* NodeStats.gpu_source; NULL = no NodeStats */
} beat;

static void heartbeat(tr_rpc_client *c, uint64_t node_id, beat b)
{
    Troupe__V1__HeartbeatRequest req = TROUPE__V1__HEARTBEAT_REQUEST__INIT;
    Troupe__V1__GpuStats g[8], *gp[8];
    Troupe__V1__NodeStats ns = TROUPE__V1__NODE_STATS__INIT;
    ProtobufCMessage *rep = NULL;
    tr_err err;

    for (size_t i = 0; i < b.gpus; i++) {
        troupe__v1__gpu_stats__init(&g[i]);
        g[i].index = (uint32_t)i;
        g[i].ok = 1;
        g[i].memory_used_bytes = (uint64_t)(b.util + i) << 20;
        g[i].memory_total_bytes = 80ull << 30;
        g[i].utilization_pct = b.util + (uint32_t)i;
        g[i].temperature_c = 30 + b.util;
        g[i].power_mw = 1000 * b.util;
        gp[i] = &g[i];
    }
    ns.at_ms = b.util;
    ns.gpu_source = (char *)(b.src ? b.src : "");
    ns.load1 = b.util / 100.0;
    ns.mem_total_bytes = 64ull << 30;
    ns.mem_available_bytes = (uint64_t)b.util << 30;
    req.node_id = node_id;
    req.gpu_stats = gp;
    req.n_gpu_stats = b.gpus;
    req.stats = b.src ? &ns : NULL;
    TR_ASSERT_OK(tr_rpc_client_call(c, "troupe.v1.Head/Heartbeat", &req.base, &troupe__v1__heartbeat_reply__descriptor,
                                    &rep, 10000, 0, &err),
                 &err);
    protobuf_c_message_free_unpacked(rep, NULL);
}

/* expect checks the node's figures against what beat b sent. Under h->mu. */
static void expect(const Troupe__V1__Node *n, beat b)
{
    assert_int_equal(n->n_gpu_stats, b.gpus);
    for (size_t i = 0; i < b.gpus; i++) {
        const Troupe__V1__GpuStats *g = n->gpu_stats[i];
        assert_int_equal(g->index, i);
        assert_true(g->ok);
        assert_true(g->memory_used_bytes == (uint64_t)(b.util + i) << 20);
        assert_true(g->memory_total_bytes == 80ull << 30);
        assert_int_equal(g->utilization_pct, b.util + i);
        assert_int_equal(g->temperature_c, 30 + b.util);
        assert_int_equal(g->power_mw, 1000 * b.util);
    }
    if (b.src == NULL) {
        assert_null(n->stats);
        return;
    }
    assert_non_null(n->stats);
    assert_string_equal(n->stats->gpu_source, b.src);
    assert_true(n->stats->at_ms == b.util);
    assert_true(n->stats->load1 == b.util / 100.0);
    assert_true(n->stats->mem_total_bytes == 64ull << 30);
    assert_true(n->stats->mem_available_bytes == (uint64_t)b.util << 30);
}

static void figures_in_place(void **state)
{
    char dir[256], url[300];
    tr_head h;
    tr_rpc_client *agent;
    Troupe__V1__GpuStats **arr, *g0;
    Troupe__V1__NodeStats *st;
    Troupe__V1__Node *n;
    uint64_t id;

    (void)state;
    tr_fixture_head_start(&h, dir, sizeof(dir), url, sizeof(url), "nodes");
    agent = tr_fixture_register_node(url);
    pthread_mutex_lock(&h.mu);
    assert_int_equal(h.n_nodes, 1);
    id = h.nodes[0].n->id;
    assert_null(h.nodes[0].n->stats); /* no figures before the first heartbeat */
    pthread_mutex_unlock(&h.mu);

    heartbeat(agent, id, (beat){4, 10, "simulated"});
    pthread_mutex_lock(&h.mu);
    n = h.nodes[0].n;
    expect(n, (beat){4, 10, "simulated"});
    arr = n->gpu_stats;
    g0 = n->gpu_stats[0];
    st = n->stats;
    pthread_mutex_unlock(&h.mu);

    /* New values, same shape: overwritten where they are. */
    heartbeat(agent, id, (beat){4, 55, "simulated"});
    pthread_mutex_lock(&h.mu);
    n = h.nodes[0].n;
    expect(n, (beat){4, 55, "simulated"});
    assert_ptr_equal(n->gpu_stats, arr);
    assert_ptr_equal(n->gpu_stats[0], g0);
    assert_ptr_equal(n->stats, st);
    pthread_mutex_unlock(&h.mu);

    /* Another shape: fewer GPUs reported, another source. */
    heartbeat(agent, id, (beat){2, 70, "nvml"});
    pthread_mutex_lock(&h.mu);
    expect(h.nodes[0].n, (beat){2, 70, "nvml"});
    pthread_mutex_unlock(&h.mu);

    /* Figures without NodeStats, then an older agent that sends none: the
     * last ones stay. */
    heartbeat(agent, id, (beat){4, 20, NULL});
    heartbeat(agent, id, (beat){0, 0, NULL});
    pthread_mutex_lock(&h.mu);
    expect(h.nodes[0].n, (beat){4, 20, NULL});
    pthread_mutex_unlock(&h.mu);

    /* More GPUs than the node has: dropped, not kept from before. */
    heartbeat(agent, id, (beat){5, 30, "simulated"});
    pthread_mutex_lock(&h.mu);
    expect(h.nodes[0].n, (beat){0, 0, NULL});
    pthread_mutex_unlock(&h.mu);

    heartbeat(agent, id, (beat){4, 40, "simulated"});
    pthread_mutex_lock(&h.mu);
    expect(h.nodes[0].n, (beat){4, 40, "simulated"});
    assert_int_equal(h.nodes[0].n->state, TROUPE__V1__NODE_STATE__NODE_ALIVE);
    pthread_mutex_unlock(&h.mu);

    tr_rpc_client_close(agent);
    tr_head_stop(&h);
    tr_cfg_free(tr_head_config_table, &h.cfg);
}

/* register_as registers a node NAME with gpus GPUs (again, as node_id, when
 * not 0) over c, or a new connection when c is NULL; returns the node id. */
static uint64_t register_as(const char *url, tr_rpc_client **c, const char *name, size_t gpus, uint64_t node_id)
{
    Troupe__V1__RegisterNodeRequest req = TROUPE__V1__REGISTER_NODE_REQUEST__INIT;
    Troupe__V1__Gpu g[8], *gp[8];
    tr_rpc_client_opts o = {.url = url};
    ProtobufCMessage *rep = NULL;
    uint64_t id;
    tr_err err;

    for (size_t i = 0; i < gpus; i++) {
        troupe__v1__gpu__init(&g[i]);
        g[i].index = (uint32_t)i;
        g[i].model = "H100";
        gp[i] = &g[i];
    }
    req.name = (char *)name;
    req.hostname = (char *)name;
    req.address = "127.0.0.1";
    req.gpus = gp;
    req.n_gpus = gpus;
    req.cpus = (uint32_t)gpus + 1; /* CPU slots counted apart from the GPUs */
    req.node_id = node_id;
    if (*c == NULL) {
        TR_ASSERT_OK(tr_rpc_client_open(&o, c, &err), &err);
    }
    TR_ASSERT_OK(tr_rpc_client_call(*c, "troupe.v1.Head/RegisterNode", &req.base,
                                    &troupe__v1__register_node_reply__descriptor, &rep, 10000, 0, &err),
                 &err);
    id = ((Troupe__V1__RegisterNodeReply *)rep)->node_id;
    protobuf_c_message_free_unpacked(rep, NULL);
    return id;
}

/* counts_match: the counts GetCluster reads (h->nodes_by_state,
 * node_gpus_live, the scheduler's free GPUs) equal a walk over every node as
 * GetCluster used to make it. Under h->mu. */
static void counts_match(tr_head *h, const char *when)
{
    uint32_t by_state[5] = {0}, gpus = 0, free_gpus = 0, cpus = 0;
    uint64_t free_cpu = 0;

    for (size_t i = 0; i < h->n_nodes; i++) {
        const Troupe__V1__Node *n = h->nodes[i].n;
        by_state[(unsigned)n->state < 5 ? n->state : 0]++;
        if (n->state == TROUPE__V1__NODE_STATE__NODE_ALIVE || n->state == TROUPE__V1__NODE_STATE__NODE_SUSPECT) {
            gpus += (uint32_t)n->n_gpus;
            free_gpus += tr_jobs_node_free_gpus(h, n->id);
            cpus += n->cpus;
            free_cpu += tr_jobs_node_free_cpu_milli(h, n->id);
        }
    }
    for (int s = 0; s < 5; s++) {
        if (by_state[s] != h->nodes_by_state[s]) {
            fail_msg("%s: %u nodes in state %d, counted %u", when, by_state[s], s, h->nodes_by_state[s]);
        }
    }
    if (gpus != h->node_gpus_live || free_gpus != tr_sched_free_gpus_live(h->sched)) {
        fail_msg("%s: GPUs %u (counted %llu), free %u (scheduler %llu)", when, gpus,
                 (unsigned long long)h->node_gpus_live, free_gpus,
                 (unsigned long long)tr_sched_free_gpus_live(h->sched));
    }
    if (cpus != h->node_cpus_live || free_cpu != tr_sched_free_cpu_milli_live(h->sched)) {
        fail_msg("%s: CPU slots %u (counted %llu), free %llu/1000 (scheduler %llu)", when, cpus,
                 (unsigned long long)h->node_cpus_live, (unsigned long long)free_cpu,
                 (unsigned long long)tr_sched_free_cpu_milli_live(h->sched));
    }
}

/* wait_state waits up to 5 s for node id to reach state, under h->mu on return. */
static void wait_state(tr_head *h, uint64_t id, int state)
{
    int64_t until = tr_now_ms() + 5000;

    pthread_mutex_lock(&h->mu);
    while ((int)tr_head_node_find(h, id)->n->state != state && tr_now_ms() < until) {
        pthread_mutex_unlock(&h->mu);
        tr_sleep_ms(20);
        pthread_mutex_lock(&h->mu);
    }
    assert_int_equal(tr_head_node_find(h, id)->n->state, state);
}

/* cluster_counts: GetCluster's node and GPU counts are kept as nodes
 * register, take GPUs, leave, lose their connection, die and register
 * again, and always equal a walk over every node. */
static void cluster_counts(void **state)
{
    static const char yaml[] = "name: j\ncluster: {nodes: [2]}\n"
                               "groups: [{name: g, workers: 1, resources: {gpu: 2}, command: [sleep, '60']}]\n";
    char dir[256], url[300];
    tr_head h;
    tr_rpc_client *c1 = NULL, *c2 = NULL, *c3 = NULL, *c4 = NULL;
    uint64_t n1, n2, n4, job = 0;
    troupe_client_opts co = {0};
    troupe_client *tc = NULL;
    troupe_error terr;
    Troupe__V1__DeregisterNodeRequest dr = TROUPE__V1__DEREGISTER_NODE_REQUEST__INIT;
    Troupe__V1__GetClusterRequest gr = TROUPE__V1__GET_CLUSTER_REQUEST__INIT;
    Troupe__V1__GetClusterReply *gc;
    ProtobufCMessage *rep = NULL;
    int64_t until;
    tr_err err;

    (void)state;
    tr_fixture_head_start(&h, dir, sizeof(dir), url, sizeof(url), "nodes");
    n1 = register_as(url, &c1, "n1", 4, 0);
    n2 = register_as(url, &c2, "n2", 2, 0);
    (void)register_as(url, &c3, "n3", 0, 0);
    n4 = register_as(url, &c4, "n4", 4, 0);
    pthread_mutex_lock(&h.mu);
    counts_match(&h, "four registered");
    assert_int_equal(h.nodes_by_state[TROUPE__V1__NODE_STATE__NODE_ALIVE], 4);
    assert_true(h.node_gpus_live == 10);
    assert_true(h.node_cpus_live == 14);
    pthread_mutex_unlock(&h.mu);

    co.head_url = url;
    co.timeout_ms = 20000;
    assert_int_equal(troupe_client_open(&tc, &co, &terr), TROUPE_OK);
    if (troupe_submit_yaml(tc, yaml, sizeof(yaml) - 1, "j.yaml", NULL, &job, &terr) != TROUPE_OK) {
        fail_msg("submit: %s: %s", troupe_strerror(terr.code), terr.message);
    }
    until = tr_now_ms() + 5000;
    pthread_mutex_lock(&h.mu);
    while (tr_sched_free_gpus_live(h.sched) != 8 && tr_now_ms() < until) {
        pthread_mutex_unlock(&h.mu);
        tr_sleep_ms(20);
        pthread_mutex_lock(&h.mu);
    }
    assert_true(tr_sched_free_gpus_live(h.sched) == 8); /* the job holds 2 */
    counts_match(&h, "a job placed");
    pthread_mutex_unlock(&h.mu);

    dr.node_id = n2;
    dr.reason = "test";
    TR_ASSERT_OK(tr_rpc_client_call(c2, "troupe.v1.Head/DeregisterNode", &dr.base,
                                    &troupe__v1__deregister_node_reply__descriptor, &rep, 10000, 0, &err),
                 &err);
    protobuf_c_message_free_unpacked(rep, NULL);
    pthread_mutex_lock(&h.mu);
    assert_int_equal(tr_head_node_find(&h, n2)->n->state, TROUPE__V1__NODE_STATE__NODE_LEFT);
    counts_match(&h, "n2 left");
    pthread_mutex_unlock(&h.mu);

    tr_rpc_client_close(c4); /* its agent's connection drops: SUSPECT, then DEAD */
    c4 = NULL;
    wait_state(&h, n4, TROUPE__V1__NODE_STATE__NODE_SUSPECT);
    counts_match(&h, "n4 suspect");
    pthread_mutex_unlock(&h.mu);
    wait_state(&h, n4, TROUPE__V1__NODE_STATE__NODE_DEAD);
    counts_match(&h, "n4 dead");
    pthread_mutex_unlock(&h.mu);

    assert_true(register_as(url, &c1, "n1", 4, n1) == n1); /* the same agent again: its record replaced */
    (void)register_as(url, &c4, "n4", 2, 0);                /* n4 comes back as a new node of 2 GPUs */
    pthread_mutex_lock(&h.mu);
    counts_match(&h, "n1 again, n4 back");
    /* n3 sends no heartbeats here: it may be SUSPECT by now */
    assert_int_equal(h.nodes_by_state[TROUPE__V1__NODE_STATE__NODE_ALIVE] +
                         h.nodes_by_state[TROUPE__V1__NODE_STATE__NODE_SUSPECT],
                     3);
    assert_int_equal(h.nodes_by_state[TROUPE__V1__NODE_STATE__NODE_DEAD], 1);
    assert_int_equal(h.nodes_by_state[TROUPE__V1__NODE_STATE__NODE_LEFT], 1);
    pthread_mutex_unlock(&h.mu);

    /* What `troupe status` shows. */
    TR_ASSERT_OK(tr_rpc_client_call(c1, "troupe.v1.Head/GetCluster", &gr.base,
                                    &troupe__v1__get_cluster_reply__descriptor, &rep, 10000, 0, &err),
                 &err);
    gc = (Troupe__V1__GetClusterReply *)rep;
    assert_int_equal(gc->nodes_alive + gc->nodes_suspect, 3);
    assert_int_equal(gc->nodes_dead, 1);
    assert_int_equal(gc->nodes_left, 1);
    assert_int_equal(gc->gpus_total, 6);
    assert_int_equal(gc->cpus_total, 9); /* n1 5, n3 1, n4 3; n2 left */
    pthread_mutex_lock(&h.mu);
    assert_int_equal(gc->gpus_free, tr_sched_free_gpus_live(h.sched));
    assert_int_equal(gc->cpu_milli_free, 9000); /* the job's GPU worker takes no CPU slot */
    pthread_mutex_unlock(&h.mu);
    protobuf_c_message_free_unpacked(rep, NULL);

    troupe_client_close(tc);
    tr_rpc_client_close(c1);
    tr_rpc_client_close(c2);
    tr_rpc_client_close(c3);
    tr_rpc_client_close(c4);
    tr_head_stop(&h);
    tr_cfg_free(tr_head_config_table, &h.cfg);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(figures_in_place),
        cmocka_unit_test(cluster_counts),
    };
    return TR_TEST_MAIN("unit.server.nodes", tests, argc, argv);
}
