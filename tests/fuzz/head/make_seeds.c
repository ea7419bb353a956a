/* make_seeds.c - writes fuzz_head's seed corpus (committed under corpus/;
 * rerun after a schema change: make_seeds DIR). Each seed is one byte naming
 * the method (its index in troupe.v1.Head) and a typical payload: register a
 * node, heartbeat, submit (one and a batch), get, list, logs, sync, stop,
 * and the job store's set, get (a wait) and add as job 1's worker. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec.h"
#include "troupe/v1/troupe.pb-c.h"

static const char *dir;

static void seed(const char *file, const char *method, const ProtobufCMessage *msg)
{
    const ProtobufCServiceDescriptor *svc = &troupe__v1__head__descriptor;
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(n + 1);
    char path[1024];
    unsigned i;
    FILE *f;

    for (i = 0; i < svc->n_methods && strcmp(svc->methods[i].name, method) != 0; i++) {
    }
    if (i == svc->n_methods || buf == NULL) {
        fprintf(stderr, "make_seeds: no method %s\n", method);
        exit(1);
    }
    buf[0] = (uint8_t)i;
    protobuf_c_message_pack(msg, buf + 1);
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    if ((f = fopen(path, "wb")) == NULL || fwrite(buf, 1, n + 1, f) != n + 1 || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    free(buf);
}

int main(int argc, char **argv)
{
    static const char yaml[] = "name: s\ncluster: {nodes: [2]}\n"
                               "groups: [{name: g, workers: 2, resources: {gpu: 1}, command: [sleep, '1']}]\n";
    Troupe__V1__RegisterNodeRequest reg = TROUPE__V1__REGISTER_NODE_REQUEST__INIT;
    Troupe__V1__Gpu g[4], *gp[4];
    Troupe__V1__HeartbeatRequest hb = TROUPE__V1__HEARTBEAT_REQUEST__INIT;
    Troupe__V1__SubmitJobRequest sub = TROUPE__V1__SUBMIT_JOB_REQUEST__INIT;
    Troupe__V1__SubmitJobsRequest subs = TROUPE__V1__SUBMIT_JOBS_REQUEST__INIT;
    Troupe__V1__GetJobRequest get = TROUPE__V1__GET_JOB_REQUEST__INIT;
    Troupe__V1__ListJobsRequest list = TROUPE__V1__LIST_JOBS_REQUEST__INIT;
    Troupe__V1__StopJobRequest stop = TROUPE__V1__STOP_JOB_REQUEST__INIT;
    Troupe__V1__StopJobsRequest stops = TROUPE__V1__STOP_JOBS_REQUEST__INIT;
    Troupe__V1__GetLogsRequest logs = TROUPE__V1__GET_LOGS_REQUEST__INIT;
    Troupe__V1__NodeSyncRequest sync = TROUPE__V1__NODE_SYNC_REQUEST__INIT;
    Troupe__V1__WorkerReport rep = TROUPE__V1__WORKER_REPORT__INIT, *reps[] = {&rep};
    Troupe__V1__StoreRequest kv = TROUPE__V1__STORE_REQUEST__INIT;
    Troupe__V1__WorkerRef from = TROUPE__V1__WORKER_REF__INIT;
    char *keys[] = {"k"};
    Troupe__V1__JobSpec *spec = NULL, *specs[2];
    uint64_t ids[] = {1, 2};
    tr_err err;

    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    dir = argv[1];
    for (int i = 0; i < 4; i++) {
        troupe__v1__gpu__init(&g[i]);
        g[i].index = (uint32_t)i;
        g[i].model = "NVIDIA H200";
        g[i].memory_bytes = 141ull << 30;
        g[i].simulated = 1;
        gp[i] = &g[i];
    }
    reg.name = "fz";
    reg.hostname = "fz";
    reg.address = "127.0.0.1";
    reg.n_gpus = 4;
    reg.gpus = gp;
    reg.pid = 1;
    seed("register", "RegisterNode", &reg.base);
    hb.node_id = 1;
    seed("heartbeat", "Heartbeat", &hb.base);
    if (tr_jobspec_parse(yaml, sizeof(yaml) - 1, "s.yaml", "/", &spec, &err) != 0) {
        fprintf(stderr, "make_seeds: %s\n", err.msg);
        return 1;
    }
    sub.spec = spec;
    seed("submit", "SubmitJob", &sub.base);
    specs[0] = specs[1] = spec;
    subs.n_specs = 2;
    subs.specs = specs;
    subs.return_jobs = 1;
    seed("submit_batch", "SubmitJobs", &subs.base);
    get.job_id = 1;
    get.after_version = 1;
    get.wait_ms = 100;
    seed("get", "GetJob", &get.base);
    list.active_only = 1;
    seed("list", "ListJobs", &list.base);
    logs.job_id = 1;
    logs.wait_ms = 100;
    logs.worker = "job1-g-0";
    seed("logs", "GetLogs", &logs.base);
    rep.job_id = 1;
    rep.name = "job1-g-0";
    rep.state = TROUPE__V1__WORKER_STATE__WORKER_EXITED;
    rep.exit_code = 3;
    rep.pid = 42;
    rep.log.data = (uint8_t *)"hello\n";
    rep.log.len = 6;
    sync.node_id = 1;
    sync.n_reports = 1;
    sync.reports = reps;
    sync.wait_ms = 100;
    seed("sync", "NodeSync", &sync.base);
    stop.job_id = 1;
    seed("stop", "StopJob", &stop.base);
    stops.n_job_ids = 2;
    stops.job_ids = ids;
    seed("stop_batch", "StopJobs", &stops.base);
    from.job_id = 1;
    from.worker = "job1-g-0";
    kv.from = &from;
    kv.keys = keys;
    kv.n_keys = 1;
    kv.value.data = (uint8_t *)"7";
    kv.value.len = 1;
    seed("store_set", "StoreSet", &kv.base);
    kv.value.len = 0;
    kv.wait_ms = 100;
    seed("store_get", "StoreGet", &kv.base);
    kv.wait_ms = 0;
    kv.amount = 5;
    seed("store_add", "StoreAdd", &kv.base);
    tr_jobspec_free(spec);
    return 0;
}
