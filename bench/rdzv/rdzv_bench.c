/* rdzv_bench - NCCL unique-ID rendezvous through troupe-head: the time from
 * rank 0's publish until the last rank holds the ID, for N ranks each on its
 * own connection (its own thread and nng socket), as the worker runtime does.
 *
 *   rdzv_bench [--control | --store [--connect seq|burst]] --head URL [--token-file F]
 *              [--ranks 2,16,128,...] [--json FILE]
 *
 * --store measures the job store (StoreSet/StoreGet, what troupe.torch's
 * Store does for torch.distributed) the way tcpstore.py measures TCPStore:
 * every rank but 0 blocks in a get of one 128-byte key, rank 0 sets it; the
 * figure is from the set until the last get is answered. Before that each
 * rank connects as the worker runtime does and makes its first call
 * (StoreCheck): "connect ms" is that, one rank after the other (seq, the
 * default, as TCPStore's constructors in tcpstore.py) or every rank's thread
 * at once (burst). --token-file: the credential every connection presents.
 *
 * --control measures instead how long a run-time profile change (SetProfile,
 * as `troupe profile` sends it) takes to reach N waiting workers: each
 * thread keeps the worker runtime's control long poll (WorkerControl) open;
 * the figure is from the SetProfile call until the last poll is answered
 * with the new setting.
 *
 * The head must run with a long heartbeat (run.sh starts it): the bench
 * registers simulated nodes of 64 GPUs itself (no agents, so the workers never
 * start) and submits one job of N one-GPU workers per size; its threads then
 * call CommIds as those workers. Every waiter is parked at the head before
 * rank 0 publishes (the harness polls `troupe job`'s arrival count), so the
 * figure is the fan-out of one publish to N-1 long polls, not connection
 * set-up. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rpc.h"
#include "safefile.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

#define GPUS_PER_NODE 64

typedef struct rank_ctx {
    const char *url;
    const char *token; /* the credential every rank presents (--token-file), or NULL */
    uint64_t job_id;
    char worker[64];
    tr_rpc_client *rpc;
    int64_t got_ns;
    int64_t ready_ns; /* --store: its connection is up and its first call answered */
    int rv;
    char why[256];
    void *(*fn)(void *); /* what the rank does (rank_main runs it) */
    atomic_int done;     /* fn returned: rv and why are final */
} rank_ctx;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int register_nodes(tr_rpc_client *rpc, size_t n, tr_err *err)
{
    Troupe__V1__Gpu gpus[GPUS_PER_NODE], *gp[GPUS_PER_NODE];
    int rv = TROUPE_OK;

    for (size_t i = 0; i < n && rv == TROUPE_OK; i++) {
        Troupe__V1__RegisterNodeRequest req = TROUPE__V1__REGISTER_NODE_REQUEST__INIT;
        char name[32], addr[32];
        for (unsigned g = 0; g < GPUS_PER_NODE; g++) {
            troupe__v1__gpu__init(&gpus[g]);
            gpus[g].index = g;
            gpus[g].model = "SIM";
            gpus[g].simulated = 1;
            gp[g] = &gpus[g];
        }
        snprintf(name, sizeof(name), "rdzv-sim-%03zu", i);
        snprintf(addr, sizeof(addr), "10.77.%zu.%zu", i >> 8, i & 255);
        req.name = req.hostname = name;
        req.address = addr;
        req.gpus = gp;
        req.n_gpus = GPUS_PER_NODE;
        rv = tr_rpc_client_call(rpc, "troupe.v1.Head/RegisterNode", &req.base,
                                &troupe__v1__register_node_reply__descriptor, NULL, 10000, 0, err);
    }
    return rv;
}

static int submit(tr_rpc_client *rpc, uint32_t n, uint64_t *id, tr_err *err)
{
    Troupe__V1__SubmitJobRequest req = TROUPE__V1__SUBMIT_JOB_REQUEST__INIT;
    Troupe__V1__JobSpec spec = TROUPE__V1__JOB_SPEC__INIT;
    Troupe__V1__GroupSpec g = TROUPE__V1__GROUP_SPEC__INIT, *gp = &g;
    Troupe__V1__SubmitJobReply *rep = NULL;
    char *cmd[] = {"sleep", "1"}, name[32];
    uint32_t vn = (n + GPUS_PER_NODE - 1) / GPUS_PER_NODE, nodes[128];
    int rv;

    for (uint32_t v = 0; v < vn; v++) {
        nodes[v] = v + 1 < vn ? GPUS_PER_NODE : n - v * GPUS_PER_NODE;
    }
    snprintf(name, sizeof(name), "rdzv-%u", n);
    g.name = "g";
    g.workers = n;
    g.gpus = 1;
    g.strategy = "PACK";
    g.command = cmd;
    g.n_command = 2;
    spec.name = name;
    spec.cluster_nodes = nodes;
    spec.n_cluster_nodes = vn;
    spec.groups = &gp;
    spec.n_groups = 1;
    spec.workdir = "/";
    req.spec = &spec;
    rv = tr_rpc_client_call(rpc, "troupe.v1.Head/SubmitJob", &req.base, &troupe__v1__submit_job_reply__descriptor,
                            (ProtobufCMessage **)&rep, 30000, 0, err);
    if (rv == TROUPE_OK) {
        *id = rep->job_id;
        if (rep->state != TROUPE__V1__JOB_STATE__JOB_RUNNING) {
            rv = tr_err_set(err, TROUPE_FAILED_PRECONDITION, "job of %u ranks not placed: %s", n, rep->reason);
        }
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    return rv;
}

static void ref_of(const rank_ctx *r, Troupe__V1__WorkerRef *ref)
{
    troupe__v1__worker_ref__init(ref);
    ref->job_id = r->job_id;
    ref->worker = (char *)r->worker;
}

static void *waiter_main(void *arg)
{
    rank_ctx *r = arg;
    Troupe__V1__CommIdsRequest req = TROUPE__V1__COMM_IDS_REQUEST__INIT;
    Troupe__V1__CommIdsReply *rep = NULL;
    Troupe__V1__WorkerRef ref;
    tr_err err;

    ref_of(r, &ref);
    req.from = &ref;
    req.wait_ms = 120000;
    r->rv = tr_rpc_client_call(r->rpc, "troupe.v1.Head/CommIds", &req.base, &troupe__v1__comm_ids_reply__descriptor,
                               (ProtobufCMessage **)&rep, 125000, 0, &err);
    r->got_ns = now_ns();
    if (r->rv == TROUPE_OK) {
        if (rep->n_ids != 1 || rep->ids[0].len != 128 || rep->ids[0].data[5] != 0x5a) {
            r->rv = TROUPE_INTERNAL;
            snprintf(r->why, sizeof(r->why), "wrong ID bytes");
        }
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    } else {
        snprintf(r->why, sizeof(r->why), "%.200s", err.msg);
    }
    return NULL;
}

static void *rank_main(void *arg)
{
    rank_ctx *r = arg;
    r->fn(r);
    atomic_store(&r->done, 1);
    return NULL;
}

/* rank_failed: a rank whose call already ended in an error, else NULL. */
static const rank_ctx *rank_failed(const rank_ctx *r, uint32_t n, uint32_t *which)
{
    for (uint32_t k = 1; k < n; k++) {
        if (atomic_load(&r[k].done) && r[k].rv != TROUPE_OK) {
            *which = k;
            return &r[k];
        }
    }
    return NULL;
}

/* arrived polls the job until the n - 1 ranks r[1..] wait for IDs (the
 * harness's own wait, with a deadline); a rank whose call failed meanwhile
 * ends the wait with its error. */
static int wait_arrived(tr_rpc_client *rpc, uint64_t id, const rank_ctx *r, uint32_t n, tr_err *err)
{
    int64_t end = tr_now_ms() + 120000;
    const rank_ctx *bad;
    uint32_t k = 0;

    while (tr_now_ms() < end) {
        if ((bad = rank_failed(r, n, &k)) != NULL) {
            return tr_err_set(err, bad->rv, "rank %u failed before every rank arrived: %s", k, bad->why);
        }
        Troupe__V1__GetJobRequest req = TROUPE__V1__GET_JOB_REQUEST__INIT;
        Troupe__V1__GetJobReply *rep = NULL;
        uint32_t got = 0;
        req.job_id = id;
        if (tr_rpc_client_call(rpc, "troupe.v1.Head/GetJob", &req.base, &troupe__v1__get_job_reply__descriptor,
                               (ProtobufCMessage **)&rep, 30000, 0, err) != TROUPE_OK) {
            return err->code;
        }
        for (size_t i = 0; i < rep->job->n_rendezvous; i++) {
            got = rep->job->rendezvous[i]->arrived;
        }
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        if (got >= n - 1) {
            return TROUPE_OK;
        }
        tr_sleep_ms(20);
    }
    return tr_err_set(err, TROUPE_DEADLINE_EXCEEDED, "only some of %u ranks reached the head in 120 s",
                      n - 1);
}

static int publish(tr_rpc_client *rpc, uint64_t id, tr_err *err)
{
    Troupe__V1__CommIdsRequest req = TROUPE__V1__COMM_IDS_REQUEST__INIT;
    rank_ctx r0 = {.job_id = id};
    Troupe__V1__WorkerRef ref;
    uint8_t bytes[128];
    ProtobufCBinaryData b = {sizeof(bytes), bytes};

    memset(bytes, 0x5a, sizeof(bytes));
    snprintf(r0.worker, sizeof(r0.worker), "job%" PRIu64 "-g-0", id);
    ref_of(&r0, &ref);
    req.from = &ref;
    req.ids = &b;
    req.n_ids = 1;
    return tr_rpc_client_call(rpc, "troupe.v1.Head/CommIds", &req.base, &troupe__v1__comm_ids_reply__descriptor,
                              NULL, 30000, 0, err);
}

/* ---- --control: a run-time profile change reaching N waiting workers ---- */

static atomic_uint ctl_ready;
static const char *g_token; /* --token-file's credential */
static int g_burst;         /* --connect burst */

/* control_main is one worker runtime's control thread: one immediate poll
 * (its connection is up, it knows the version), then the long poll that the
 * change must answer. */
static void *control_main(void *arg)
{
    rank_ctx *r = arg;
    Troupe__V1__WorkerControlRequest req = TROUPE__V1__WORKER_CONTROL_REQUEST__INIT;
    Troupe__V1__WorkerControlReply *rep = NULL;
    Troupe__V1__WorkerRef ref;
    uint64_t after;
    tr_err err;

    ref_of(r, &ref);
    req.from = &ref;
    r->rv = tr_rpc_client_call(r->rpc, "troupe.v1.Head/WorkerControl", &req.base,
                               &troupe__v1__worker_control_reply__descriptor, (ProtobufCMessage **)&rep, 60000, 0, &err);
    if (r->rv != TROUPE_OK) {
        snprintf(r->why, sizeof(r->why), "%.200s", err.msg);
        atomic_fetch_add(&ctl_ready, 1);
        return NULL;
    }
    after = rep->version;
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    req.after_version = after;
    req.wait_ms = 120000;
    atomic_fetch_add(&ctl_ready, 1);
    r->rv = tr_rpc_client_call(r->rpc, "troupe.v1.Head/WorkerControl", &req.base,
                               &troupe__v1__worker_control_reply__descriptor, (ProtobufCMessage **)&rep, 125000, 0, &err);
    r->got_ns = now_ns();
    if (r->rv == TROUPE_OK) {
        if (rep->version != after + 1 || rep->control == NULL || strcmp(rep->control->steps, "7:9") != 0) {
            r->rv = TROUPE_INTERNAL;
            snprintf(r->why, sizeof(r->why), "not the change (version %" PRIu64 ")", rep->version);
        }
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    } else {
        snprintf(r->why, sizeof(r->why), "%.200s", err.msg);
    }
    return NULL;
}

static int set_profile(tr_rpc_client *rpc, uint64_t id, tr_err *err)
{
    Troupe__V1__SetProfileRequest req = TROUPE__V1__SET_PROFILE_REQUEST__INIT;
    Troupe__V1__ProfileControl pc = TROUPE__V1__PROFILE_CONTROL__INIT;

    pc.steps = "7:9";
    pc.workers = "*";
    req.job_id = id;
    req.control = &pc;
    return tr_rpc_client_call(rpc, "troupe.v1.Head/SetProfile", &req.base, &troupe__v1__set_profile_reply__descriptor,
                              NULL, 30000, 0, err);
}

/* ---- --store: the job store's set -> N blocked gets ---- */

static int store_call(tr_rpc_client *rpc, const rank_ctx *r, const char *method, const char *key,
                      const uint8_t *val, size_t len, uint32_t wait_ms, Troupe__V1__StoreReply **rep, tr_err *err)
{
    Troupe__V1__StoreRequest req = TROUPE__V1__STORE_REQUEST__INIT;
    Troupe__V1__WorkerRef ref;
    char *keys[1] = {(char *)key};

    ref_of(r, &ref);
    req.from = &ref;
    req.keys = keys;
    req.n_keys = 1;
    req.value.data = (uint8_t *)val;
    req.value.len = len;
    req.wait_ms = wait_ms;
    /* Idempotent, as libtroupe's worker_store.c makes StoreCheck, StoreGet
     * and StoreSet: a call whose connection was reset before an answer is
     * tried again within its deadline. */
    return tr_rpc_client_call(rpc, method, &req.base, &troupe__v1__store_reply__descriptor, (ProtobufCMessage **)rep,
                              wait_ms + 5000, TR_RPC_IDEMPOTENT, err);
}

/* rank_connect opens r's connection and makes its first call (StoreCheck,
 * what troupe.torch's Store does first): the connection set-up measured,
 * TCPStore's constructor (connect, then its first round trip) on our side. */
static int rank_connect(rank_ctx *r, tr_err *err)
{
    /* As the worker runtime opens its connection (libtroupe's worker.c): the
     * dial goes on in the background and the first call waits for it. */
    tr_rpc_client_opts o = {.url = r->url, .token = r->token, .wait_for_server = 1};
    Troupe__V1__StoreReply *rep = NULL;
    int rv;

    if ((rv = tr_rpc_client_open(&o, &r->rpc, err)) != TROUPE_OK) {
        snprintf(r->why, sizeof(r->why), "connect: %.200s", err->msg);
        return rv;
    }
    rv = store_call(r->rpc, r, "troupe.v1.Head/StoreCheck", "nccl_id", NULL, 0, 0, &rep, err);
    if (rep != NULL) {
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    if (rv != TROUPE_OK) {
        snprintf(r->why, sizeof(r->why), "first call: %.200s", err->msg);
    }
    return rv;
}

/* store_main is one rank of a torch process group's rendezvous: its
 * connection (already made by the harness, or made here in a burst), then the
 * get that rank 0's set must answer. */
static void *store_main(void *arg)
{
    rank_ctx *r = arg;
    Troupe__V1__StoreReply *rep = NULL;
    tr_err err;

    if (r->rpc == NULL) { /* --connect burst: the rank opens its own connection, as a process would */
        r->rv = rank_connect(r, &err);
    }
    r->ready_ns = now_ns();
    atomic_fetch_add(&ctl_ready, 1);
    if (r->rv == TROUPE_OK) {
        r->rv = store_call(r->rpc, r, "troupe.v1.Head/StoreGet", "nccl_id", NULL, 0, 120000, &rep, &err);
    }
    r->got_ns = now_ns();
    if (r->rv == TROUPE_OK) {
        if (rep->n_values != 1 || rep->values[0].len != 128 || rep->values[0].data[5] != 0x5a) {
            r->rv = TROUPE_INTERNAL;
            snprintf(r->why, sizeof(r->why), "wrong value bytes");
        }
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    } else {
        snprintf(r->why, sizeof(r->why), "%.200s", err.msg);
    }
    return NULL;
}

static int store_set(tr_rpc_client *rpc, uint64_t id, tr_err *err)
{
    rank_ctx r0 = {.job_id = id};
    Troupe__V1__StoreReply *rep = NULL;
    uint8_t bytes[128];
    int rv;

    memset(bytes, 0x5a, sizeof(bytes));
    snprintf(r0.worker, sizeof(r0.worker), "job%" PRIu64 "-g-0", id);
    rv = store_call(rpc, &r0, "troupe.v1.Head/StoreSet", "nccl_id", bytes, sizeof(bytes), 0, &rep, err);
    if (rep != NULL) {
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    return rv;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct result {
    uint32_t ranks;
    double last_ms, median_ms, connect_ms;
} result;

/* one_size runs the rendezvous (control 0), the profile change (1) or the
 * store's set and gets (2) for n ranks and fills res. */
static int one_size(const char *url, tr_rpc_client *ctl, uint32_t n, int control, result *res, tr_err *err)
{
    rank_ctx *r = calloc(n, sizeof(*r));
    pthread_t *th = calloc(n, sizeof(*th));
    int64_t *lat = calloc(n, sizeof(*lat)), t0, tc;
    pthread_attr_t attr;
    uint64_t id = 0;
    size_t started = 0;
    int rv;

    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    rv = (r && th && lat) ? submit(ctl, n, &id, err) : tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    tc = now_ns();
    for (uint32_t k = 1; rv == TROUPE_OK && k < n; k++) {
        tr_rpc_client_opts o = {.url = url, .token = g_token};
        r[k].job_id = id;
        r[k].url = url;
        r[k].token = g_token;
        snprintf(r[k].worker, sizeof(r[k].worker), "job%" PRIu64 "-g-%u", id, k);
        if (control != 2) {
            rv = tr_rpc_client_open(&o, &r[k].rpc, err);
        } else if (!g_burst && (rv = rank_connect(&r[k], err)) != TROUPE_OK) {
            rv = tr_err_set(err, rv, "rank %u: %s", k, r[k].why);
        }
    }
    res->connect_ms = (double)(now_ns() - tc) / 1e6;
    tc = g_burst && control == 2 ? now_ns() : tc;
    atomic_store(&ctl_ready, 0);
    for (uint32_t k = 1; rv == TROUPE_OK && k < n; k++) {
        r[k].fn = control == 2 ? store_main : control ? control_main : waiter_main;
        if (pthread_create(&th[k], &attr, rank_main, &r[k]) != 0) {
            rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot start thread %u", k);
            break;
        }
        started = k;
    }
    if (rv == TROUPE_OK && !control) {
        rv = wait_arrived(ctl, id, r, n, err);
    }
    if (rv == TROUPE_OK && control) {
        /* The head does not count control waiters: every thread has had its
         * first answer and is sending the long poll; give the polls time to
         * park (a late one is answered on arrival: the figure only grows). */
        int64_t end = tr_now_ms() + 120000;
        while (atomic_load(&ctl_ready) < n - 1 && tr_now_ms() < end) { /* control and store alike */
            tr_sleep_ms(10);
        }
        if (atomic_load(&ctl_ready) < n - 1) {
            rv = tr_err_set(err, TROUPE_DEADLINE_EXCEEDED, "only %u of %u control threads ready in 120 s",
                            atomic_load(&ctl_ready), n - 1);
        }
        if (rv == TROUPE_OK && control == 2 && g_burst) {
            int64_t last = tc;
            for (uint32_t k = 1; k < n; k++) {
                last = r[k].ready_ns > last ? r[k].ready_ns : last;
            }
            res->connect_ms = (double)(last - tc) / 1e6;
        }
        tr_sleep_ms(500 + n / 2);
    }
    t0 = now_ns();
    if (rv == TROUPE_OK) {
        rv = control == 2 ? store_set(ctl, id, err) : control ? set_profile(ctl, id, err) : publish(ctl, id, err);
    }
    if (rv != TROUPE_OK) {
        /* Nothing will answer the ranks still waiting: end their calls. */
        for (size_t k = 1; k <= started; k++) {
            tr_rpc_client_shutdown(r[k].rpc);
        }
    }
    for (size_t k = 1; k <= started; k++) {
        pthread_join(th[k], NULL);
        if (rv == TROUPE_OK && r[k].rv != TROUPE_OK) {
            rv = tr_err_set(err, r[k].rv, "rank %zu: %s", k, r[k].why);
        }
        lat[k - 1] = r[k].got_ns - t0;
    }
    for (uint32_t k = 1; k < n; k++) {
        tr_rpc_client_close(r[k].rpc);
    }
    if (rv == TROUPE_OK) {
        qsort(lat, n - 1, sizeof(*lat), cmp_i64);
        res->ranks = n;
        res->last_ms = (double)lat[n - 2] / 1e6;
        res->median_ms = (double)lat[(n - 1) / 2] / 1e6;
    }
    pthread_attr_destroy(&attr);
    free(r);
    free(th);
    free(lat);
    return rv;
}

int main(int argc, char **argv)
{
    const char *url = NULL, *ranks = "2,16,128,512,1024,2048,4096", *json = NULL, *token_file = NULL;
    char *token = NULL;
    int control = 0;
    tr_rpc_client_opts o = {0};
    tr_rpc_client *ctl = NULL;
    result res[32];
    size_t nres = 0, total = 0;
    FILE *jf = NULL;
    tr_err err;
    int rv;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--control") == 0) {
            control = 1;
        } else if (strcmp(argv[i], "--store") == 0) {
            control = 2;
        } else if (strcmp(argv[i], "--head") == 0 && i + 1 < argc) {
            url = argv[++i];
        } else if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
            ranks = argv[++i];
        } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            json = argv[++i];
        } else if (strcmp(argv[i], "--token-file") == 0 && i + 1 < argc) {
            token_file = argv[++i];
        } else if (strcmp(argv[i], "--connect") == 0 && i + 1 < argc) {
            g_burst = strcmp(argv[++i], "burst") == 0;
        }
    }
    if (token_file != NULL) {
        int loose = 0;
        if (tr_secret_file_read(token_file, &token, &loose, &err) != TROUPE_OK) {
            fprintf(stderr, "rdzv_bench: %s\n", err.msg);
            return 2;
        }
        g_token = token;
    }
    if (url == NULL) {
        fprintf(stderr, "usage: rdzv_bench [--control | --store [--connect seq|burst]] --head URL [--token-file F] "
                        "[--ranks 2,16,...] [--json FILE]\n");
        return 2;
    }
    for (const char *p = ranks; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
        total += strtoul(p, NULL, 10);
    }
    o.url = url;
    o.token = g_token;
    if ((rv = tr_rpc_client_open(&o, &ctl, &err)) != TROUPE_OK ||
        (rv = register_nodes(ctl, (total + GPUS_PER_NODE - 1) / GPUS_PER_NODE + 1, &err)) != TROUPE_OK) {
        fprintf(stderr, "rdzv_bench: %s\n", err.msg);
        return 1;
    }
    printf("%s\n%8s %14s %14s %12s\n",
           control == 2 ? "job store: rank 0 sets a 128-byte key (StoreSet) -> last rank's StoreGet answered"
           : control    ? "troupe profile change (SetProfile) -> last waiting worker's control poll answered"
                        : "rank 0 publishes the NCCL ID -> last rank holds it",
           "ranks", "last rank ms", "median ms", "connect ms");
    for (const char *p = ranks; *p && nres < 32; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
        uint32_t n = (uint32_t)strtoul(p, NULL, 10);
        if ((rv = one_size(url, ctl, n, control, &res[nres], &err)) != TROUPE_OK) {
            fprintf(stderr, "rdzv_bench: %u ranks: %s: %s\n", n, troupe_strerror(rv), err.msg);
            return 1;
        }
        printf("%8u %14.2f %14.2f %12.1f\n", n, res[nres].last_ms, res[nres].median_ms, res[nres].connect_ms);
        fflush(stdout);
        nres++;
    }
    if (json != NULL && (jf = fopen(json, "w")) != NULL) {
        fprintf(jf, "{\"bench\":\"rdzv\",\"what\":\"%s\",\"results\":[",
                control == 2 ? "store set -> last blocked get answered"
                : control    ? "profile change -> last waiting worker has it"
                             : "rank 0 publish -> last rank holds the ID");
        for (size_t i = 0; i < nres; i++) {
            fprintf(jf, "%s{\"ranks\":%u,\"last_ms\":%.3f,\"median_ms\":%.3f,\"connect_ms\":%.1f,\"total_ms\":%.1f}",
                    i ? "," : "", res[i].ranks, res[i].last_ms, res[i].median_ms, res[i].connect_ms,
                    res[i].connect_ms + res[i].last_ms);
        }
        fprintf(jf, "]}\n");
        fclose(jf);
    }
    tr_rpc_client_close(ctl);
    free(token);
    return 0;
}
