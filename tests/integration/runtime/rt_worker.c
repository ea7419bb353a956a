/* rt_worker - a small worker program on troupe/worker.h for the runtime
 * integration tests.
 *
 *   rt_worker run      the scenario: IDs on the group, a barrier, IDs on the
 *                      communicator $RT_COMM (when set), an all-gather of
 *                      worker names, then $RT_STEPS steps of $RT_STEP_MS ms.
 *                      $RT_HANG=WORKER makes that worker sleep instead of
 *                      meeting the others; $RT_FAIL_ATTEMPT0=WORKER makes it
 *                      exit 1 after the IDs in attempt 0. $RT_PUBLISH_DELAY_MS
 *                      delays rank 0's publish; $RT_LATE=WORKER waits
 *                      $RT_LATE_MS before asking for the IDs.
 *   rt_worker call OP ...   one call, printing "OK ..." or "ERR CODE message":
 *     info COMM | publish COMM BYTE - [COUNT] | publish-size COMM SIZE | wait COMM MS |
 *     barrier COMM NAME MS | gather COMM NAME DATA MS
 * Every line is prefixed "rt:" so tests can grep the job's log. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rpc.h"
#include "troupe/v1/troupe.pb-c.h"
#include "troupe/worker.h"

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long env_l(const char *k, long dflt)
{
    const char *v = getenv(k);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

static unsigned id_sum(const unsigned char *id)
{
    unsigned h = 2166136261u;
    for (int i = 0; i < TROUPE_NCCL_ID_BYTES; i++) {
        h = (h ^ id[i]) * 16777619u;
    }
    return h;
}

/* ids: rank 0 makes an ID from its pid and the time, the others wait. */
static int ids(troupe_worker_ctx *w, const char *comm, unsigned char *id)
{
    troupe_comm_info ci;
    troupe_error err;
    size_t n = 0;

    if (troupe_worker_comm_info(w, comm, &ci, &err) != TROUPE_OK) {
        printf("rt: comm_info %s: %s: %s\n", comm, troupe_strerror(err.code), err.message);
        return 1;
    }
    if (ci.rank == 0) {
        sleep_ms(env_l("RT_PUBLISH_DELAY_MS", 0));
        srand((unsigned)getpid() ^ (unsigned)time(NULL));
        for (int i = 0; i < TROUPE_NCCL_ID_BYTES; i++) {
            id[i] = (unsigned char)rand();
        }
        if (troupe_worker_publish_ids(w, comm, id, 1, &ci, &err) != TROUPE_OK) {
            printf("rt: publish %s: %s: %s\n", comm, troupe_strerror(err.code), err.message);
            return 1;
        }
    } else if ((getenv("RT_LATE") && strcmp(getenv("RT_LATE"), troupe_worker_self_info(w)->worker) == 0 &&
                (sleep_ms(env_l("RT_LATE_MS", 0)), 0)) ||
               troupe_worker_wait_ids(w, comm, id, 1, &n, (uint32_t)env_l("RT_WAIT_MS", 20000), &ci, &err) !=
               TROUPE_OK) {
        printf("rt: wait %s: %s: %s\n", comm, troupe_strerror(err.code), err.message);
        return 1;
    }
    printf("rt: comm %s epoch %u rank %u/%u id %08x\n", comm ? comm : troupe_worker_self_info(w)->group, ci.epoch, ci.rank, ci.size, id_sum(id));
    return 0;
}

/* traced_steps (RT_TRACE): steps with named phases, a head barrier and a CPU
 * all-reduce in each, so the built-in trace has every kind of span; the
 * barrier lines the ranks up step by step. */
static int traced_steps(troupe_worker_ctx *w, long steps, long step_ms)
{
    troupe_coll *c = NULL;
    troupe_error err;
    float g[1000];
    char note[1024] = ""; /* a refusal's whole message (troupe_worker_trace_note) */

    if (troupe_worker_coll_open(w, NULL, &c, NULL, &err) != TROUPE_OK) {
        printf("rt: coll open: %s: %s\n", troupe_strerror(err.code), err.message);
        return 1;
    }
    for (long s = 1; s <= steps && !troupe_worker_should_stop(w); s++) {
        int prof = 0;
        troupe_worker_step_begin(w, (uint64_t)s, &prof);
        if (prof) {
            printf("rt: profile step %ld (%s)\n", s, troupe_worker_profile_note(w));
            fflush(stdout);
        }
        troupe_worker_span_begin(w, "forward");
        sleep_ms(step_ms / 2);
        troupe_worker_span_end(w);
        troupe_worker_span_begin(w, "backward");
        for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++) {
            g[i] = 1.0f;
        }
        if (troupe_worker_barrier(w, NULL, "step", (uint32_t)env_l("RT_WAIT_MS", 20000), &err) != TROUPE_OK ||
            troupe_coll_allreduce(c, g, sizeof(g) / sizeof(g[0]), TROUPE_F32, TROUPE_SUM, &err) != TROUPE_OK) {
            printf("rt: step %ld: %s: %s\n", s, troupe_strerror(err.code), err.message);
            troupe_coll_close(c);
            return 1;
        }
        troupe_worker_span_end(w);
        troupe_worker_step_end(w, (uint64_t)s, NULL);
        if (strcmp(troupe_worker_trace_note(w), note) != 0) {
            snprintf(note, sizeof(note), "%s", troupe_worker_trace_note(w));
            printf("rt: step %ld: %s\n", s, note);
            fflush(stdout);
        }
    }
    troupe_coll_close(c);
    printf("rt: done\n");
    return 0;
}

static int run(troupe_worker_ctx *w)
{
    const troupe_worker_self *me = troupe_worker_self_info(w);
    const char *hang = getenv("RT_HANG"), *fail0 = getenv("RT_FAIL_ATTEMPT0"), *comm = getenv("RT_COMM");
    unsigned char id[TROUPE_NCCL_ID_BYTES];
    troupe_blobs *all = NULL;
    troupe_error err;
    long steps = env_l("RT_STEPS", 0), step_ms = env_l("RT_STEP_MS", 50);

    if (hang != NULL && strcmp(hang, me->worker) == 0) {
        printf("rt: %s hangs\n", me->worker);
        fflush(stdout);
        sleep_ms(600000);
    }
    if (ids(w, NULL, id) != 0) {
        return 1;
    }
    if (fail0 != NULL && strcmp(fail0, me->worker) == 0 && me->attempt == 0) {
        printf("rt: %s fails on purpose in attempt 0\n", me->worker);
        return 1;
    }
    if (troupe_worker_barrier(w, NULL, "ready", (uint32_t)env_l("RT_WAIT_MS", 20000), &err) != TROUPE_OK) {
        printf("rt: barrier: %s: %s\n", troupe_strerror(err.code), err.message);
        return 1;
    }
    if (comm != NULL && *comm && ids(w, comm, id) != 0) {
        return 1;
    }
    if (troupe_worker_allgather(w, comm && *comm ? comm : NULL, "names", me->worker, strlen(me->worker),
                                (uint32_t)env_l("RT_WAIT_MS", 20000), &all, &err) != TROUPE_OK) {
        printf("rt: allgather: %s: %s\n", troupe_strerror(err.code), err.message);
        return 1;
    }
    printf("rt: allgather %zu:", all->count);
    for (size_t r = 0; r < all->count; r++) {
        printf(" %.*s", (int)all->items[r].len, (const char *)all->items[r].data);
    }
    printf("\n");
    troupe_blobs_free(all);
    fflush(stdout);
    if (getenv("RT_TRACE") != NULL) {
        return traced_steps(w, steps, step_ms);
    }
    for (long s = 1; s <= steps && !troupe_worker_should_stop(w); s++) {
        int prof = 0;
        troupe_worker_step_begin(w, (uint64_t)s, &prof);
        if (prof) {
            printf("rt: profile step %ld (%s)\n", s, troupe_worker_profile_note(w));
            fflush(stdout);
        }
        sleep_ms(step_ms);
        troupe_worker_step_end(w, (uint64_t)s, NULL);
    }
    printf("rt: done\n");
    return 0;
}

static int report(int rv, const troupe_error *err, const char *ok)
{
    if (rv == TROUPE_OK) {
        printf("OK %s\n", ok);
        return 0;
    }
    printf("ERR %s %s\n", troupe_strerror(err->code), err->message);
    return 1;
}

/* publish_size sends one ID of size bytes straight over the wire, as the
 * worker from the environment (the API only sends 128-byte IDs). */
static int publish_size(const char *comm, size_t size)
{
    Troupe__V1__CommIdsRequest req = TROUPE__V1__COMM_IDS_REQUEST__INIT;
    Troupe__V1__WorkerRef ref = TROUPE__V1__WORKER_REF__INIT;
    tr_rpc_client_opts ro = {0};
    ProtobufCMessage *rep = NULL;
    ProtobufCBinaryData id;
    tr_rpc_client *c = NULL;
    uint8_t buf[1024] = {0};
    tr_err e;
    int rv;

    ro.url = getenv("TROUPE_HEAD");
    ro.token = getenv("TROUPE_TOKEN");
    if ((rv = tr_rpc_client_open(&ro, &c, &e)) == TROUPE_OK) {
        ref.job_id = strtoull(getenv("TROUPE_JOB"), NULL, 10);
        ref.worker = getenv("TROUPE_WORKER");
        ref.attempt = (uint32_t)atoi(getenv("TROUPE_ATTEMPT"));
        id.data = buf;
        id.len = size < sizeof(buf) ? size : sizeof(buf);
        req.from = &ref;
        req.comm = (char *)comm;
        req.ids = &id;
        req.n_ids = 1;
        rv = tr_rpc_client_call(c, "troupe.v1.Head/CommIds", &req.base, &troupe__v1__comm_ids_reply__descriptor,
                                &rep, 5000, 0, &e);
        if (rep != NULL) {
            protobuf_c_message_free_unpacked(rep, NULL);
        }
    }
    tr_rpc_client_close(c);
    if (rv == TROUPE_OK) {
        printf("OK\n");
        return 0;
    }
    printf("ERR %s %s\n", troupe_strerror(rv), e.msg);
    return 1;
}

/* trace_raw sends one ReportTrace of one span as given (NAME TS_US DUR_US),
 * or N spans named "s" with N given as "many:N": what the worker API would
 * never send, to see the head refuse it. */
static int trace_raw(const char *name, long long ts, long long dur)
{
    Troupe__V1__ReportTraceRequest req = TROUPE__V1__REPORT_TRACE_REQUEST__INIT;
    Troupe__V1__WorkerRef ref = TROUPE__V1__WORKER_REF__INIT;
    Troupe__V1__TraceSpan *spans, **ptrs;
    tr_rpc_client_opts ro = {0};
    ProtobufCMessage *rep = NULL;
    tr_rpc_client *c = NULL;
    size_t n = strncmp(name, "many:", 5) == 0 ? (size_t)atol(name + 5) : 1;
    tr_err e;
    int rv;

    spans = calloc(n, sizeof(*spans));
    ptrs = calloc(n, sizeof(*ptrs));
    for (size_t i = 0; i < n; i++) {
        troupe__v1__trace_span__init(&spans[i]);
        spans[i].name = n > 1 ? (char *)"s" : (char *)name;
        spans[i].cat = (char *)"phase";
        spans[i].ts_us = ts;
        spans[i].dur_us = dur;
        ptrs[i] = &spans[i];
    }
    ro.url = getenv("TROUPE_HEAD");
    ro.token = getenv("TROUPE_TOKEN");
    if ((rv = tr_rpc_client_open(&ro, &c, &e)) == TROUPE_OK) {
        ref.job_id = strtoull(getenv("TROUPE_JOB"), NULL, 10);
        ref.worker = getenv("TROUPE_WORKER");
        ref.attempt = (uint32_t)atoi(getenv("TROUPE_ATTEMPT"));
        req.from = &ref;
        req.spans = ptrs;
        req.n_spans = n;
        rv = tr_rpc_client_call(c, "troupe.v1.Head/ReportTrace", &req.base,
                                &troupe__v1__report_trace_reply__descriptor, &rep, 5000, 0, &e);
        if (rep != NULL) {
            protobuf_c_message_free_unpacked(rep, NULL);
        }
    }
    tr_rpc_client_close(c);
    free(spans);
    free(ptrs);
    if (rv == TROUPE_OK) {
        printf("OK\n");
        return 0;
    }
    printf("ERR %s %s\n", troupe_strerror(rv), e.msg);
    return 1;
}

static int call(troupe_worker_ctx *w, int argc, char **argv)
{
    const char *op = argv[0], *comm = argc > 1 ? argv[1] : "";
    unsigned char buf[TROUPE_NCCL_ID_BYTES * TROUPE_MAX_NCCL_IDS + 64];
    troupe_comm_info ci = {0};
    troupe_error err = {0};
    troupe_blobs *all = NULL;
    char ok[256] = "";
    size_t n = 0;
    int rv;

    if (strcmp(op, "trace-raw") == 0 && argc >= 4) {
        return trace_raw(argv[1], atoll(argv[2]), atoll(argv[3]));
    }
    if (strcmp(op, "publish-size") == 0 && argc >= 3) {
        return publish_size(comm, (size_t)atoi(argv[2]));
    }
    if (strcmp(op, "info") == 0) {
        rv = troupe_worker_comm_info(w, comm, &ci, &err);
    } else if (strcmp(op, "publish") == 0 && argc >= 4) {
        memset(buf, atoi(argv[2]), sizeof(buf));
        rv = troupe_worker_publish_ids(w, comm, buf, argc > 4 ? (size_t)atoi(argv[4]) : 1, &ci, &err);
    } else if (strcmp(op, "wait") == 0 && argc >= 3) {
        rv = troupe_worker_wait_ids(w, comm, buf, TROUPE_MAX_NCCL_IDS, &n, (uint32_t)atoi(argv[2]), &ci, &err);
        snprintf(ok, sizeof(ok), "ids %zu first %u", n, buf[0]);
    } else if (strcmp(op, "barrier") == 0 && argc >= 4) {
        rv = troupe_worker_barrier(w, comm, argv[2], (uint32_t)atoi(argv[3]), &err);
    } else if (strcmp(op, "gather") == 0 && argc >= 5) {
        rv = troupe_worker_allgather(w, comm, argv[2], argv[3], strlen(argv[3]), (uint32_t)atoi(argv[4]), &all, &err);
        troupe_blobs_free(all);
    } else if (strcmp(op, "fail") == 0 && argc >= 3) { /* fail CODE REASON (CODE a number) */
        rv = troupe_worker_fail(w, (troupe_status)atoi(argv[1]), argv[2], &err);
        snprintf(ok, sizeof(ok), "reported");
    } else {
        fprintf(stderr, "rt_worker call: unknown op or missing arguments: %s\n", op);
        return 2;
    }
    if (ok[0] == '\0') {
        snprintf(ok, sizeof(ok), "epoch %u rank %u size %u", ci.epoch, ci.rank, ci.size);
    }
    return report(rv, &err, ok);
}

int main(int argc, char **argv)
{
    troupe_worker_opts opts = {0};
    troupe_worker_ctx *w = NULL;
    troupe_error err;
    int rc;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: rt_worker run | rt_worker call OP ...\n");
        return 2;
    }
    opts.no_control = strcmp(argv[1], "call") == 0;
    if (troupe_worker_open(&w, &opts, &err) != TROUPE_OK) {
        printf("rt: open: %s: %s\n", troupe_strerror(err.code), err.message);
        return 3;
    }
    rc = strcmp(argv[1], "run") == 0 ? run(w) : argc > 2 ? call(w, argc - 2, argv + 2) : 2;
    troupe_worker_close(w);
    return rc;
}
