/* test_rpc.c - unit.common.rpc: the RPC layer (common/rpc_server.c and
 * common/rpc_client.c) in one process over real ipc:// sockets, each test on
 * its own socket path in a fresh temp dir.
 *
 * The test service (svc below) has one method per behaviour under test: echo,
 * defer (answered later by the test's own thread, or never), fail with
 * UNAVAILABLE a set number of times, block, forget to reply, reply twice, and
 * echo as a quick method (TR_METHOD_QUICK).
 * cmocka asserts only on the main thread; helper threads record results that
 * the main thread checks after joining them. */
#include "test_helpers.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rpc.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

#define M_ECHO "test.v1.Svc/Echo"
#define M_DEFER "test.v1.Svc/Defer"
#define M_DEFER_EARLY "test.v1.Svc/DeferEarly"
#define M_FLAKY "test.v1.Svc/Flaky"
#define M_BLOCK "test.v1.Svc/Block"
#define M_NOREPLY "test.v1.Svc/NoReply"
#define M_TWICE "test.v1.Svc/Twice"
#define M_DEADLINE "test.v1.Svc/Deadline"
#define M_GROW "test.v1.Svc/Grow"
#define M_QUICK "test.v1.Svc/Quick"

#define QMAX 64

typedef struct svc {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tr_rpc_call *queue[QMAX]; /* deferred calls waiting for the test to answer */
    int qlen;
    int expired;         /* on_expire calls */
    int unblock;         /* releases M_BLOCK handlers */
    int blocking;        /* M_BLOCK handlers that started */
    int second_reply_rv; /* what M_TWICE's second reply returned */
    int early_not_answered;
    atomic_int flaky_left;
    atomic_int flaky_calls;
    char scratch_copy[64]; /* what h_scratch_defer copied out of its request */
} svc;

typedef struct fixture {
    char dir[256];
    char url[320];
    svc s;
    tr_rpc_server *srv;
    tr_rpc_client *cli;
} fixture;

/* ---- the service ------------------------------------------------------------- */

static void reply_data(tr_rpc_call *call, const char *data)
{
    Troupe__V1__PingReply rep = TROUPE__V1__PING_REPLY__INIT;
    rep.data.data = (uint8_t *)data;
    rep.data.len = strlen(data);
    tr_rpc_reply(call, &rep.base);
}

static void h_echo(tr_rpc_call *call, void *user)
{
    Troupe__V1__PingRequest *req =
        (Troupe__V1__PingRequest *)tr_rpc_unpack(call, &troupe__v1__ping_request__descriptor);
    Troupe__V1__PingReply rep = TROUPE__V1__PING_REPLY__INIT;

    if (req == NULL) {
        return; /* tr_rpc_unpack answered INVALID_ARGUMENT */
    }
    rep.data = req->data;
    tr_rpc_reply(call, &rep.base);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void on_expire(tr_rpc_call *call, void *arg)
{
    svc *s = arg;

    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->qlen; i++) {
        if (s->queue[i] == call) {
            s->queue[i] = s->queue[--s->qlen];
            break;
        }
    }
    s->expired++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    tr_rpc_call_release(call);
}

static void enqueue(svc *s, tr_rpc_call *call)
{
    pthread_mutex_lock(&s->mu);
    if (s->qlen < QMAX) {
        s->queue[s->qlen++] = call;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void h_defer(tr_rpc_call *call, void *user)
{
    svc *s = user;
    tr_rpc_defer(call, on_expire, s);
    enqueue(s, call);
}

/* h_defer_early defers, hands the call to the test's responder thread and only
 * returns once that thread has answered: the reply arrives while the handler
 * is still running (a rendezvous whose last member completes the group). */
static void h_defer_early(tr_rpc_call *call, void *user)
{
    svc *s = user;
    int64_t until = tr_now_ms() + 3000;

    tr_rpc_defer(call, on_expire, s);
    enqueue(s, call);
    while (!tr_rpc_call_answered(call) && tr_now_ms() < until) {
        tr_sleep_ms(1);
    }
    if (!tr_rpc_call_answered(call)) {
        pthread_mutex_lock(&s->mu);
        s->early_not_answered++;
        pthread_mutex_unlock(&s->mu);
    }
}

static void h_flaky(tr_rpc_call *call, void *user)
{
    svc *s = user;

    atomic_fetch_add(&s->flaky_calls, 1);
    if (atomic_fetch_sub(&s->flaky_left, 1) > 0) {
        tr_rpc_reply_error(call, TROUPE_UNAVAILABLE, "try again (flaky)");
        return;
    }
    reply_data(call, "finally");
}

static void h_block(tr_rpc_call *call, void *user)
{
    svc *s = user;
    int64_t until = tr_now_ms() + 10000;

    pthread_mutex_lock(&s->mu);
    s->blocking++;
    while (!s->unblock && tr_now_ms() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    reply_data(call, "unblocked");
}

static void h_noreply(tr_rpc_call *call, void *user)
{
}

/* h_grow answers with as many bytes as the request's data says ("4000"). */
static void h_grow(tr_rpc_call *call, void *user)
{
    Troupe__V1__PingRequest *req =
        (Troupe__V1__PingRequest *)tr_rpc_unpack(call, &troupe__v1__ping_request__descriptor);
    Troupe__V1__PingReply rep = TROUPE__V1__PING_REPLY__INIT;
    char num[16] = "";
    size_t n;

    (void)user;
    if (req == NULL) {
        return;
    }
    memcpy(num, req->data.data, req->data.len < sizeof(num) - 1 ? req->data.len : sizeof(num) - 1);
    n = strtoul(num, NULL, 10);
    rep.data.data = calloc(1, n + 1);
    rep.data.len = n;
    assert_non_null(rep.data.data);
    memset(rep.data.data, 'G', n);
    tr_rpc_reply(call, &rep.base);
    free(rep.data.data);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void h_twice(tr_rpc_call *call, void *user)
{
    svc *s = user;
    int rv;

    reply_data(call, "first");
    rv = tr_rpc_reply_error(call, TROUPE_INTERNAL, "second");
    pthread_mutex_lock(&s->mu);
    s->second_reply_rv = rv;
    pthread_mutex_unlock(&s->mu);
}

/* h_deadline answers with the milliseconds left before the call's deadline. */
static void h_deadline(tr_rpc_call *call, void *user)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%lld", (long long)(tr_rpc_call_deadline(call) - tr_now_ms()));
    reply_data(call, buf);
}

/* h_job answers OK when the caller may act on the job named by the data. */
static void h_job(tr_rpc_call *call, void *user)
{
    Troupe__V1__PingRequest *r =
        (Troupe__V1__PingRequest *)tr_rpc_unpack(call, &troupe__v1__ping_request__descriptor);
    char buf[32] = "";
    (void)user;
    if (r == NULL) {
        return;
    }
    memcpy(buf, r->data.data, r->data.len < sizeof(buf) - 1 ? r->data.len : sizeof(buf) - 1);
    if (tr_rpc_require_job(call, strtoull(buf, NULL, 10))) {
        reply_data(call, tr_rpc_scope_name(tr_rpc_call_principal(call)->scope));
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

/* h_scratch echoes a request decoded into the call's scratch memory. */
static void h_scratch(tr_rpc_call *call, void *user)
{
    const Troupe__V1__PingRequest *req =
        (const Troupe__V1__PingRequest *)tr_rpc_unpack_scratch(call, &troupe__v1__ping_request__descriptor);
    Troupe__V1__PingReply rep = TROUPE__V1__PING_REPLY__INIT;

    (void)user;
    if (req == NULL) {
        return; /* answered INVALID_ARGUMENT */
    }
    rep.data = req->data;
    tr_rpc_reply(call, &rep.base);
}

/* h_scratch_defer copies its data out of the scratch request (which is gone
 * once it returns) and defers: the test answers with that copy later. */
static void h_scratch_defer(tr_rpc_call *call, void *user)
{
    svc *s = user;
    const Troupe__V1__PingRequest *req =
        (const Troupe__V1__PingRequest *)tr_rpc_unpack_scratch(call, &troupe__v1__ping_request__descriptor);

    if (req == NULL) {
        return;
    }
    pthread_mutex_lock(&s->mu);
    snprintf(s->scratch_copy, sizeof(s->scratch_copy), "%.*s", (int)req->data.len, (const char *)req->data.data);
    pthread_mutex_unlock(&s->mu);
    tr_rpc_defer(call, on_expire, s);
    enqueue(s, call);
}

#define M_SCRATCH "test.v1.Svc/Scratch"
#define M_SCRATCH_DEFER "test.v1.Svc/ScratchDefer"
#define M_USER "test.v1.Svc/UserOnly"
#define M_JOB "test.v1.Svc/Job"
#define M_ADMIN "test.v1.Svc/AdminOnly"

static const tr_rpc_method methods[] = {
    {M_ECHO, h_echo, TR_SCOPES_ANY},
    {M_QUICK, h_echo, TR_SCOPES_ANY | TR_METHOD_QUICK},
    {M_DEFER, h_defer, TR_SCOPES_ANY},
    {M_DEFER_EARLY, h_defer_early, TR_SCOPES_ANY},
    {M_FLAKY, h_flaky, TR_SCOPES_ANY},
    {M_BLOCK, h_block, TR_SCOPES_ANY},
    {M_NOREPLY, h_noreply, TR_SCOPES_ANY},
    {M_TWICE, h_twice, TR_SCOPES_ANY},
    {M_DEADLINE, h_deadline, TR_SCOPES_ANY},
    {M_GROW, h_grow, TR_SCOPES_ANY},
    {M_USER, h_echo, TR_SCOPES_USER},
    {M_JOB, h_job, TR_SCOPES_WORKER_JOB},
    {M_ADMIN, h_echo, 0},
    {M_SCRATCH, h_scratch, TR_SCOPES_ANY},
    {M_SCRATCH_DEFER, h_scratch_defer, TR_SCOPES_ANY},
    {NULL, NULL, 0},
};

/* ---- fixture ------------------------------------------------------------------ */

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));

    if (f == NULL) {
        return -1;
    }
    tr_test_tmpdir(f->dir, sizeof(f->dir), "rpc");
    snprintf(f->url, sizeof(f->url), "ipc://%s/rpc.sock", f->dir);
    pthread_mutex_init(&f->s.mu, NULL);
    pthread_cond_init(&f->s.cv, NULL);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    char path[400];

    pthread_mutex_lock(&f->s.mu);
    f->s.unblock = 1;
    pthread_cond_broadcast(&f->s.cv);
    pthread_mutex_unlock(&f->s.mu);
    tr_rpc_client_close(f->cli);
    tr_rpc_server_stop(f->srv);
    snprintf(path, sizeof(path), "%s/rpc.sock", f->dir);
    unlink(path);
    rmdir(f->dir);
    pthread_mutex_destroy(&f->s.mu);
    pthread_cond_destroy(&f->s.cv);
    free(f);
    return 0;
}

/* start_server starts f->srv with opts (url, methods and user filled in here). */
static void start_server(fixture *f, tr_rpc_server_opts opts)
{
    tr_err err = {0};

    opts.url = f->url;
    opts.methods = methods;
    opts.user = &f->s;
    TR_ASSERT_OK(tr_rpc_server_start(&opts, &f->srv, &err), &err);
}

static tr_rpc_client *open_client(fixture *f, const char *token)
{
    tr_rpc_client_opts o = {.url = f->url, .token = token};
    tr_rpc_client *c = NULL;
    tr_err err = {0};

    TR_ASSERT_OK(tr_rpc_client_open(&o, &c, &err), &err);
    return c;
}

/* call_data calls method with a PingRequest carrying data and copies the
 * PingReply's data into out (when OK). Thread-safe; asserts nothing. */
static int call_data(tr_rpc_client *c, const char *method, const char *data, uint32_t timeout_ms, unsigned flags,
                     char *out, size_t outsz, tr_err *err)
{
    Troupe__V1__PingRequest req = TROUPE__V1__PING_REQUEST__INIT;
    ProtobufCMessage *rep = NULL;
    int rv;

    req.data.data = (uint8_t *)data;
    req.data.len = strlen(data);
    out[0] = '\0';
    rv = tr_rpc_client_call(c, method, &req.base, &troupe__v1__ping_reply__descriptor, &rep, timeout_ms, flags,
                            err);
    if (rv == TROUPE_OK) {
        Troupe__V1__PingReply *r = (Troupe__V1__PingReply *)rep;
        size_t n = r->data.len < outsz - 1 ? r->data.len : outsz - 1;
        if (n > 0) { /* data.data is NULL when empty */
            memcpy(out, r->data.data, n);
        }
        out[n] = '\0';
        protobuf_c_message_free_unpacked(rep, NULL);
    }
    return rv;
}

/* A call made on a helper thread. */
typedef struct job {
    tr_rpc_client *cli;
    const char *method;
    const char *data;
    uint32_t timeout_ms;
    unsigned flags;
    int rv;
    tr_err err;
    char out[128];
    int64_t elapsed_ms;
    pthread_t th;
} job;

static void *job_main(void *arg)
{
    job *j = arg;
    int64_t t0 = tr_now_ms();
    j->rv = call_data(j->cli, j->method, j->data, j->timeout_ms, j->flags, j->out, sizeof(j->out), &j->err);
    j->elapsed_ms = tr_now_ms() - t0;
    return NULL;
}

static void job_start(job *j)
{
    assert_int_equal(pthread_create(&j->th, NULL, job_main, j), 0);
}

static void job_join(job *j)
{
    assert_int_equal(pthread_join(j->th, NULL), 0);
}

/* wait_queued waits up to 5 s for n deferred calls to be queued. */
static void wait_queued(svc *s, int n)
{
    int64_t until = tr_now_ms() + 5000;

    pthread_mutex_lock(&s->mu);
    while (s->qlen < n && tr_now_ms() < until) {
        pthread_mutex_unlock(&s->mu);
        tr_sleep_ms(2);
        pthread_mutex_lock(&s->mu);
    }
    int got = s->qlen;
    pthread_mutex_unlock(&s->mu);
    if (got < n) {
        fail_msg("expected %d deferred call(s) queued, have %d", n, got);
    }
}

static tr_rpc_call *dequeue(svc *s)
{
    tr_rpc_call *c = NULL;

    pthread_mutex_lock(&s->mu);
    if (s->qlen > 0) {
        c = s->queue[0];
        memmove(&s->queue[0], &s->queue[1], (size_t)(s->qlen - 1) * sizeof(s->queue[0]));
        s->qlen--;
    }
    pthread_mutex_unlock(&s->mu);
    return c;
}

/* ---- tests ------------------------------------------------------------------- */

static void echo_ok(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    char out[64];
    uint64_t before;

    start_server(f, (tr_rpc_server_opts){0});
    f->cli = open_client(f, NULL);
    before = tr_rpc_server_served(f->srv);
    TR_ASSERT_OK(call_data(f->cli, M_ECHO, "hello", 2000, 0, out, sizeof(out), &err), &err);
    assert_string_equal(out, "hello");
    TR_ASSERT_OK(call_data(f->cli, M_ECHO, "second", 2000, 0, out, sizeof(out), &err), &err);
    assert_string_equal(out, "second");
    assert_true(tr_rpc_server_served(f->srv) == before + 2);
}

/* An OK reply with an empty payload (any reply message with all fields at
 * their defaults, e.g. an empty PingReply) has payload.data == NULL: the
 * client must not memcpy from it (UBSan checks this one). */
static void empty_reply_payload(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    char out[64];
    uint8_t *rp = NULL;
    size_t rn = 99;

    start_server(f, (tr_rpc_server_opts){0});
    f->cli = open_client(f, NULL);
    TR_ASSERT_OK(call_data(f->cli, M_ECHO, "", 2000, 0, out, sizeof(out), &err), &err);
    assert_string_equal(out, "");
    /* A NULL request is an empty payload, which is a valid default message. */
    TR_ASSERT_OK(tr_rpc_client_call_raw(f->cli, M_ECHO, NULL, 0, &rp, &rn, 2000, 0, &err), &err);
    assert_non_null(rp);
    assert_int_equal(rn, 0);
    free(rp);
}

static void unknown_method(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    char out[64];

    start_server(f, (tr_rpc_server_opts){0});
    f->cli = open_client(f, NULL);
    TR_ASSERT_FAILS(call_data(f->cli, "test.v1.Svc/Nope", "x", 2000, 0, out, sizeof(out), &err),
                    TROUPE_UNIMPLEMENTED, &err, "unknown method 'test.v1.Svc/Nope'");
    /* The server keeps serving. */
    TR_ASSERT_OK(call_data(f->cli, M_ECHO, "still", 2000, 0, out, sizeof(out), &err), &err);
    assert_string_equal(out, "still");
}

/* stats: answers are counted per method and status code, with their
 * latency in the histogram; frames refused before a method was known
 * (unknown method, unauthenticated) count under "other". */
static void stats(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    char out[64];
    tr_rpc_method_stats st[16];
    tr_rpc_client *wrong;
    size_t n, echo = 0;
    uint64_t in_buckets = 0;

    start_server(f, (tr_rpc_server_opts){.token = "tok"});
    f->cli = open_client(f, "tok");
    wrong = open_client(f, "nope");
    for (int i = 0; i < 3; i++) {
        TR_ASSERT_OK(call_data(f->cli, M_ECHO, "x", 2000, 0, out, sizeof(out), &err), &err);
    }
    TR_ASSERT_FAILS(call_data(f->cli, "test.v1.Svc/Nope", "x", 2000, 0, out, sizeof(out), &err),
                    TROUPE_UNIMPLEMENTED, &err, "unknown method");
    TR_ASSERT_FAILS(call_data(wrong, M_ECHO, "x", 2000, 0, out, sizeof(out), &err), TROUPE_UNAUTHENTICATED, &err,
                    "credential");
    n = tr_rpc_server_stats(f->srv, st, 16);
    assert_int_equal(n, sizeof(methods) / sizeof(methods[0])); /* the table's methods + "other" */
    while (strcmp(st[echo].method, M_ECHO) != 0) {
        echo++;
    }
    assert_int_equal(st[echo].by_code[TROUPE_OK], 3);
    for (int b = 0; b <= TR_RPC_LATENCY_BUCKETS; b++) {
        in_buckets += st[echo].buckets[b];
    }
    assert_int_equal(in_buckets, 3);
    assert_true(st[echo].sum_s > 0 && st[echo].sum_s < 6.0);
    assert_int_equal(st[echo].buckets[TR_RPC_LATENCY_BUCKETS], 0); /* none slower than the last bound */
    assert_string_equal(st[n - 1].method, "other");
    assert_int_equal(st[n - 1].by_code[TROUPE_UNIMPLEMENTED], 1);
    assert_int_equal(st[n - 1].by_code[TROUPE_UNAUTHENTICATED], 1);
    assert_int_equal(st[n - 1].by_code[TROUPE_OK], 0);
    tr_rpc_client_close(wrong);
}

static void auth_token(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    char out[64];
    tr_rpc_client *none, *wrong, *prefix, *longer, *right;

    start_server(f, (tr_rpc_server_opts){.token = "s3cret-token"});
    none = open_client(f, NULL);
    wrong = open_client(f, "s3cret-tokeN");
    prefix = open_client(f, "s3cret");
    longer = open_client(f, "s3cret-token2");
    right = open_client(f, "s3cret-token");

    TR_ASSERT_FAILS(call_data(none, M_ECHO, "x", 2000, 0, out, sizeof(out), &err), TROUPE_UNAUTHENTICATED, &err,
                    "missing, wrong or expired credential");
    TR_ASSERT_FAILS(call_data(wrong, M_ECHO, "x", 2000, 0, out, sizeof(out), &err), TROUPE_UNAUTHENTICATED, &err,
                    "missing, wrong or expired credential");
    TR_ASSERT_FAILS(call_data(prefix, M_ECHO, "x", 2000, 0, out, sizeof(out), &err), TROUPE_UNAUTHENTICATED,
                    &err, "missing, wrong or expired credential");
    TR_ASSERT_FAILS(call_data(longer, M_ECHO, "x", 2000, 0, out, sizeof(out), &err), TROUPE_UNAUTHENTICATED,
                    &err, "missing, wrong or expired credential");
    /* Authentication comes before method lookup: no probing of method names. */
    TR_ASSERT_STATUS(call_data(none, "test.v1.Svc/Nope", "x", 2000, 0, out, sizeof(out), &err),
                     TROUPE_UNAUTHENTICATED, &err);
    TR_ASSERT_OK(call_data(right, M_ECHO, "authed", 2000, 0, out, sizeof(out), &err), &err);
    assert_string_equal(out, "authed");

    tr_rpc_client_close(none);
    tr_rpc_client_close(wrong);
    tr_rpc_client_close(prefix);
    tr_rpc_client_close(longer);
    tr_rpc_client_close(right);
}

/* fake_auth knows "user-1" (user), "node-2" (node) and "worker-7" (worker of
 * job 7); everything else is refused. */
static int fake_auth(void *user, const char *token, tr_rpc_principal *out, tr_err *err)
{
    (void)user;
    memset(out, 0, sizeof(*out));
    if (strcmp(token, "user-1") == 0) {
        out->scope = TR_SCOPE_USER;
        out->cred_id = 1;
    } else if (strcmp(token, "node-2") == 0) {
        out->scope = TR_SCOPE_NODE;
        out->cred_id = 2;
    } else if (strcmp(token, "worker-7") == 0) {
        out->scope = TR_SCOPE_WORKER;
        out->job_id = 7;
    } else {
        return tr_err_set(err, TROUPE_UNAUTHENTICATED, "unknown");
    }
    return TROUPE_OK;
}

static void auth_scopes(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    char out[64];
    tr_rpc_client *admin, *user, *node, *worker, *bad;

    start_server(f, (tr_rpc_server_opts){.token = "adm", .auth = fake_auth});
    admin = open_client(f, "adm");
    user = open_client(f, "user-1");
    node = open_client(f, "node-2");
    worker = open_client(f, "worker-7");
    bad = open_client(f, "worker-8");

    TR_ASSERT_FAILS(call_data(bad, M_ECHO, "x", 2000, 0, out, sizeof(out), &err), TROUPE_UNAUTHENTICATED, &err,
                    "credential");
    /* Each scope reaches what its table entry allows and is told what it lacks. */
    TR_ASSERT_OK(call_data(user, M_USER, "x", 2000, 0, out, sizeof(out), &err), &err);
    TR_ASSERT_FAILS(call_data(node, M_USER, "x", 2000, 0, out, sizeof(out), &err), TROUPE_PERMISSION_DENIED,
                    &err, "test.v1.Svc/UserOnly needs scope user or admin; this credential has scope node");
    TR_ASSERT_FAILS(call_data(worker, M_USER, "x", 2000, 0, out, sizeof(out), &err), TROUPE_PERMISSION_DENIED,
                    &err, "has scope worker");
    TR_ASSERT_FAILS(call_data(user, M_ADMIN, "x", 2000, 0, out, sizeof(out), &err), TROUPE_PERMISSION_DENIED,
                    &err, "needs scope admin;");
    TR_ASSERT_OK(call_data(admin, M_ADMIN, "x", 2000, 0, out, sizeof(out), &err), &err);
    TR_ASSERT_OK(call_data(node, M_ECHO, "x", 2000, 0, out, sizeof(out), &err), &err);
    /* A worker reaches its own job only; others reach any job. */
    TR_ASSERT_OK(call_data(worker, M_JOB, "7", 2000, 0, out, sizeof(out), &err), &err);
    assert_string_equal(out, "worker");
    TR_ASSERT_FAILS(call_data(worker, M_JOB, "8", 2000, 0, out, sizeof(out), &err), TROUPE_PERMISSION_DENIED,
                    &err, "a worker credential of job 7 cannot act on job 8");
    TR_ASSERT_OK(call_data(user, M_JOB, "8", 2000, 0, out, sizeof(out), &err), &err);
    assert_string_equal(out, "user");
    TR_ASSERT_OK(call_data(admin, M_JOB, "8", 2000, 0, out, sizeof(out), &err), &err);
    assert_string_equal(out, "admin");

    tr_rpc_client_close(admin);
    tr_rpc_client_close(user);
    tr_rpc_client_close(node);
    tr_rpc_client_close(worker);
    tr_rpc_client_close(bad);
}

static void malformed_payload(void **state)
{
    static const uint8_t bad[] = {0x0a, 0x05, 'a'}; /* field 1, 5 bytes long, 1 present */
    fixture *f = *state;
    tr_err err = {0};
    uint8_t *rp = NULL;
    size_t rn = 0;
    char out[64];

    start_server(f, (tr_rpc_server_opts){0});
    f->cli = open_client(f, NULL);
    TR_ASSERT_FAILS(tr_rpc_client_call_raw(f->cli, M_ECHO, bad, sizeof(bad), &rp, &rn, 2000, 0, &err),
                    TROUPE_INVALID_ARGUMENT, &err, "malformed troupe.v1.PingRequest payload (3 bytes)");
    assert_null(rp);
    assert_int_equal(rn, 0);
    TR_ASSERT_OK(call_data(f->cli, M_ECHO, "ok", 2000, 0, out, sizeof(out), &err), &err);
}

/* raw_exchange sends bytes on a plain nng REQ socket and decodes the Reply. */
static Troupe__V1__Reply *raw_exchange(nng_socket s, const uint8_t *buf, size_t len)
{
    nng_msg *m = NULL;
    Troupe__V1__Reply *r;
    int rv;

    assert_int_equal(nng_msg_alloc(&m, 0), 0);
    assert_int_equal(nng_msg_append(m, buf, len), 0);
    rv = nng_sendmsg(s, m, 0);
    if (rv != 0) {
        nng_msg_free(m);
        fail_msg("nng_sendmsg: %s", nng_strerror(rv));
    }
    rv = nng_recvmsg(s, &m, 0);
    if (rv != 0) {
        fail_msg("no reply to a %zu-byte frame: %s (did the server stop serving?)", len, nng_strerror(rv));
    }
    r = troupe__v1__reply__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
    nng_msg_free(m);
    assert_non_null(r);
    return r;
}

/* raw_frame packs a PingRequest carrying data (len bytes) for method in an
 * envelope with the given request id; the caller frees *buf. */
static size_t raw_frame(const char *method, uint64_t id, const uint8_t *data, size_t len, uint8_t **buf)
{
    Troupe__V1__PingRequest req = TROUPE__V1__PING_REQUEST__INIT;
    tr_envelope env = {.method = method, .request_id = id, .timeout_ms = 5000};
    uint8_t *payload;
    size_t n = 0;
    tr_err err = {0};

    req.data.data = (uint8_t *)data;
    req.data.len = len;
    payload = malloc(troupe__v1__ping_request__get_packed_size(&req) + 1);
    env.payload = payload;
    env.payload_len = troupe__v1__ping_request__pack(&req, payload);
    TR_ASSERT_OK(tr_envelope_encode_request(&env, buf, &n, &err), &err);
    free(payload);
    return n;
}

/* scratch_requests: requests decoded into a call's scratch memory
 * (tr_rpc_unpack_scratch), of sizes that fit the block, outgrow it and go
 * far past what a reset keeps, on the same two contexts in turn: each echo
 * is its own data under its own request id. A deferred one copies what it
 * needs before its handler returns and is answered later, with its request
 * id and method intact (the scratch memory was given back at the return;
 * ASan reports any later use). */
static void scratch_requests(void **state)
{
    static const size_t sizes[] = {0, 10, 3000, 20000, 200000, 10, 3000, 20000, 64, 0};
    fixture *f = *state;
    nng_socket raw;
    Troupe__V1__Reply *r;
    Troupe__V1__PingReply *pr;
    tr_rpc_call *call;
    nng_msg *m = NULL;
    uint8_t *buf, *data;
    size_t n;

    start_server(f, (tr_rpc_server_opts){.contexts = 2});
    assert_int_equal(nng_req0_open(&raw), 0);
    assert_int_equal(nng_socket_set_ms(raw, NNG_OPT_RECVTIMEO, 5000), 0);
    assert_int_equal(nng_dial(raw, f->url, NULL, 0), 0);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        data = malloc(sizes[i] + 1);
        for (size_t k = 0; k < sizes[i]; k++) {
            data[k] = (uint8_t)(k * 7 + i);
        }
        n = raw_frame(M_SCRATCH, 1000 + i, data, sizes[i], &buf);
        r = raw_exchange(raw, buf, n);
        assert_int_equal(r->code, TROUPE_OK);
        assert_true(r->request_id == 1000 + i);
        pr = troupe__v1__ping_reply__unpack(NULL, r->payload.len, r->payload.data);
        assert_non_null(pr);
        assert_int_equal(pr->data.len, sizes[i]);
        if (sizes[i] > 0) {
            assert_memory_equal(pr->data.data, data, sizes[i]);
        }
        troupe__v1__ping_reply__free_unpacked(pr, NULL);
        troupe__v1__reply__free_unpacked(r, NULL);
        free(buf);
        free(data);
    }

    n = raw_frame(M_SCRATCH_DEFER, 4242, (const uint8_t *)"later", 5, &buf);
    assert_int_equal(nng_msg_alloc(&m, 0), 0);
    assert_int_equal(nng_msg_append(m, buf, n), 0);
    assert_int_equal(nng_sendmsg(raw, m, 0), 0);
    free(buf);
    wait_queued(&f->s, 1);
    call = dequeue(&f->s);
    assert_non_null(call);
    tr_sleep_ms(50); /* the handler has returned: its scratch memory is gone */
    assert_string_equal(tr_rpc_call_method(call), M_SCRATCH_DEFER);
    assert_true(tr_rpc_call_id(call) == 4242);
    pthread_mutex_lock(&f->s.mu);
    assert_string_equal(f->s.scratch_copy, "later");
    pthread_mutex_unlock(&f->s.mu);
    reply_data(call, "later");
    tr_rpc_call_release(call);
    assert_int_equal(nng_recvmsg(raw, &m, 0), 0);
    r = troupe__v1__reply__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
    nng_msg_free(m);
    assert_non_null(r);
    assert_int_equal(r->code, TROUPE_OK);
    assert_true(r->request_id == 4242);
    pr = troupe__v1__ping_reply__unpack(NULL, r->payload.len, r->payload.data);
    assert_non_null(pr);
    assert_int_equal(pr->data.len, 5);
    assert_memory_equal(pr->data.data, "later", 5);
    troupe__v1__ping_reply__free_unpacked(pr, NULL);
    troupe__v1__reply__free_unpacked(r, NULL);

    /* A malformed payload is refused by the scratch decoder too. */
    {
        static const uint8_t bad[] = {0x0a, 0x09, 'x'}; /* data says 9 bytes, has 1 */
        tr_envelope env = {.method = M_SCRATCH, .request_id = 9, .payload = bad, .payload_len = sizeof(bad)};
        tr_err err = {0};
        TR_ASSERT_OK(tr_envelope_encode_request(&env, &buf, &n, &err), &err);
        r = raw_exchange(raw, buf, n);
        assert_int_equal(r->code, TROUPE_INVALID_ARGUMENT);
        TR_ASSERT_CONTAINS(r->message, "malformed");
        troupe__v1__reply__free_unpacked(r, NULL);
        free(buf);
    }
    nng_close(raw);
}

static void garbage_envelope(void **state)
{
    static const uint8_t junk[] = {0xde, 0xad, 0xbe, 0xef, 0xff, 0xff, 0xff};
    static const uint8_t no_method[] = {0x10, 0x07, 0x18, 0x64}; /* request_id 7, timeout 100 */
    fixture *f = *state;
    nng_socket raw;
    Troupe__V1__Reply *r;
    tr_err err = {0};
    char out[64];

    start_server(f, (tr_rpc_server_opts){0});
    assert_int_equal(nng_req0_open(&raw), 0);
    assert_int_equal(nng_socket_set_ms(raw, NNG_OPT_RECVTIMEO, 3000), 0);
    assert_int_equal(nng_dial(raw, f->url, NULL, 0), 0);

    r = raw_exchange(raw, junk, sizeof(junk));
    assert_int_equal(r->code, TROUPE_INVALID_ARGUMENT);
    TR_ASSERT_CONTAINS(r->message, "malformed request envelope (7 bytes)");
    troupe__v1__reply__free_unpacked(r, NULL);

    r = raw_exchange(raw, junk, 0);
    assert_int_equal(r->code, TROUPE_INVALID_ARGUMENT);
    TR_ASSERT_CONTAINS(r->message, "empty request frame");
    troupe__v1__reply__free_unpacked(r, NULL);

    r = raw_exchange(raw, no_method, sizeof(no_method));
    assert_int_equal(r->code, TROUPE_INVALID_ARGUMENT);
    TR_ASSERT_CONTAINS(r->message, "no valid method name");
    troupe__v1__reply__free_unpacked(r, NULL);

    /* The same raw socket, then a regular client, are still served. */
    {
        tr_envelope env = {.method = M_ECHO, .request_id = 12345};
        uint8_t *buf = NULL;
        size_t n = 0;
        TR_ASSERT_OK(tr_envelope_encode_request(&env, &buf, &n, &err), &err);
        r = raw_exchange(raw, buf, n);
        free(buf);
        assert_int_equal(r->code, TROUPE_OK);
        assert_true(r->request_id == 12345); /* echoed */
        troupe__v1__reply__free_unpacked(r, NULL);
    }
    nng_close(raw);
    f->cli = open_client(f, NULL);
    TR_ASSERT_OK(call_data(f->cli, M_ECHO, "after garbage", 2000, 0, out, sizeof(out), &err), &err);
    assert_string_equal(out, "after garbage");
}

static void oversized_frame(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    char out[64];
    char *big = malloc(4097);
    tr_rpc_client *other;
    int rv;

    assert_non_null(big);
    memset(big, 'B', 4096);
    big[4096] = '\0';
    start_server(f, (tr_rpc_server_opts){.max_frame = 1024});
    f->cli = open_client(f, NULL);
    other = open_client(f, NULL);

    /* Over max_frame, within the slack: refused with a status code and counted. */
    big[1500] = '\0';
    rv = call_data(f->cli, M_ECHO, big, 2000, 0, out, sizeof(out), &err);
    assert_int_equal(rv, TROUPE_RESOURCE_EXHAUSTED);
    assert_true(strncmp(err.msg, "frame of 15", 11) == 0);
    TR_ASSERT_CONTAINS(err.msg, " bytes exceeds max_frame_bytes 1024");
    assert_int_equal(tr_rpc_server_oversized(f->srv), 1);
    /* Beyond the slack nng drops the frame (and the connection); the caller
     * sees only its deadline, and the server never saw it. */
    big[1500] = 'B';
    rv = call_data(f->cli, M_ECHO, big, 500, 0, out, sizeof(out), &err);
    free(big);
    if (rv != TROUPE_DEADLINE_EXCEEDED && rv != TROUPE_UNAVAILABLE) {
        fail_msg("oversized frame: expected DEADLINE_EXCEEDED or UNAVAILABLE, got %s (%s)", troupe_strerror(rv),
                 err.msg);
    }
    assert_int_equal(tr_rpc_server_oversized(f->srv), 1);
    /* Another client, and then the same one, are still served. */
    TR_ASSERT_OK(call_data(other, M_ECHO, "small", 2000, 0, out, sizeof(out), &err), &err);
    assert_string_equal(out, "small");
    TR_ASSERT_OK(call_data(f->cli, M_ECHO, "again", 3000, 0, out, sizeof(out), &err), &err);
    assert_string_equal(out, "again");
    tr_rpc_client_close(other);
}

/* A reply over max_frame is never sent (a peer with the same limit would
 * drop it and close its connection): the caller gets RESOURCE_EXHAUSTED with
 * the sizes, the server counts it, and the connection goes on serving. */
static void oversized_reply(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    char out[64];
    int rv;

    start_server(f, (tr_rpc_server_opts){.max_frame = 1024});
    f->cli = open_client(f, NULL);
    rv = call_data(f->cli, M_GROW, "4000", 2000, 0, out, sizeof(out), &err);
    assert_int_equal(rv, TROUPE_RESOURCE_EXHAUSTED);
    TR_ASSERT_CONTAINS(err.msg, "reply of 40");
    TR_ASSERT_CONTAINS(err.msg, " bytes exceeds max_frame_bytes 1024; not sent");
    assert_int_equal(tr_rpc_server_oversized_replies(f->srv), 1);
    TR_ASSERT_OK(call_data(f->cli, M_GROW, "100", 2000, 0, out, sizeof(out), &err), &err);
    assert_int_equal(strlen(out), 63); /* out holds 63 of the 100 */
    assert_int_equal(tr_rpc_server_oversized_replies(f->srv), 1);
}

/* A deferred call is answered later by another thread (here the test's main
 * thread); while it waits the server keeps serving, even with one context. */
static void deferred_from_thread(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    char out[64];
    job j = {0};
    tr_rpc_call *call;

    start_server(f, (tr_rpc_server_opts){.contexts = 1});
    f->cli = open_client(f, NULL);
    j = (job){.cli = f->cli, .method = M_DEFER, .data = "x", .timeout_ms = 10000};
    job_start(&j);
    wait_queued(&f->s, 1);

    TR_ASSERT_OK(call_data(f->cli, M_ECHO, "not stalled", 2000, 0, out, sizeof(out), &err), &err);
    assert_string_equal(out, "not stalled");

    call = dequeue(&f->s);
    assert_non_null(call);
    assert_string_equal(tr_rpc_call_method(call), M_DEFER);
    assert_false(tr_rpc_call_answered(call));
    tr_sleep_ms(100);
    reply_data(call, "late answer");
    assert_true(tr_rpc_call_answered(call));
    /* A second answer is refused. */
    assert_int_equal(tr_rpc_reply_error(call, TROUPE_INTERNAL, "again"), TROUPE_FAILED_PRECONDITION);
    tr_rpc_call_release(call);

    job_join(&j);
    TR_ASSERT_OK(j.rv, &j.err);
    assert_string_equal(j.out, "late answer");
    assert_true(j.elapsed_ms >= 100);
    assert_int_equal(f->s.expired, 0);
}

/* A deferred call nobody answers gets DEADLINE_EXCEEDED from the server at the
 * request's deadline (clamped by max_timeout_ms), well before the client's own. */
static void deferred_expires(void **state)
{
    fixture *f = *state;
    job j = {0};
    int64_t until = tr_now_ms() + 3000;

    start_server(f, (tr_rpc_server_opts){.max_timeout_ms = 300});
    f->cli = open_client(f, NULL);
    j = (job){.cli = f->cli, .method = M_DEFER, .data = "x", .timeout_ms = 10000};
    job_start(&j);
    job_join(&j);
    TR_ASSERT_FAILS(j.rv, TROUPE_DEADLINE_EXCEEDED, &j.err, "deadline exceeded while waiting");
    if (j.elapsed_ms < 250 || j.elapsed_ms > 5000) {
        fail_msg("server deadline of 300 ms answered after %lld ms", (long long)j.elapsed_ms);
    }
    /* on_expire ran (after the answer) and the owner dropped the call. */
    pthread_mutex_lock(&f->s.mu);
    while (f->s.expired == 0 && tr_now_ms() < until) {
        pthread_mutex_unlock(&f->s.mu);
        tr_sleep_ms(2);
        pthread_mutex_lock(&f->s.mu);
    }
    assert_int_equal(f->s.expired, 1);
    assert_int_equal(f->s.qlen, 0);
    pthread_mutex_unlock(&f->s.mu);
}

/* Many deferred calls (10,000 agents' long polls on a head): answering one
 * unlinks it in O(1) from anywhere in the list (here the middle, the end, the
 * front), and a call deferred with a near deadline after the sweeper last
 * walked a list of far ones still expires on time (the sweeper skips walks
 * until the earliest deadline, which each deferral may lower). */
static void deferred_many(void **state)
{
    fixture *f = *state;
    tr_rpc_client *cli[5] = {NULL};
    job j[5];
    tr_rpc_call *calls[4];
    static const int order[4] = {1, 3, 0, 2};
    char want[16];

    start_server(f, (tr_rpc_server_opts){0});
    for (int i = 0; i < 5; i++) {
        cli[i] = open_client(f, NULL);
    }
    for (int i = 0; i < 4; i++) {
        j[i] = (job){.cli = cli[i], .method = M_DEFER, .data = "x", .timeout_ms = 10000};
        job_start(&j[i]);
        wait_queued(&f->s, i + 1); /* queued in the order sent */
    }
    tr_sleep_ms(60); /* the sweeper walks the far deadlines (every 20 ms) */
    j[4] = (job){.cli = cli[4], .method = M_DEFER, .data = "x", .timeout_ms = 300};
    job_start(&j[4]);
    job_join(&j[4]);
    assert_int_equal(j[4].rv, TROUPE_DEADLINE_EXCEEDED); /* the client's deadline is the server's */
    /* The server expired it too (on_expire ran), not only its client: a
     * sweeper still waiting for the far deadlines would not have. */
    int64_t until = tr_now_ms() + 1000;
    pthread_mutex_lock(&f->s.mu);
    while (f->s.expired == 0 && tr_now_ms() < until) {
        pthread_mutex_unlock(&f->s.mu);
        tr_sleep_ms(2);
        pthread_mutex_lock(&f->s.mu);
    }
    if (f->s.expired != 1) {
        pthread_mutex_unlock(&f->s.mu);
        fail_msg("a 300 ms deadline deferred after far ones was not expired by the server within 1 s of it");
    }
    assert_int_equal(f->s.qlen, 4);
    for (int i = 0; i < 4; i++) {
        calls[i] = f->s.queue[i];
    }
    f->s.qlen = 0;
    pthread_mutex_unlock(&f->s.mu);
    for (int k = 0; k < 4; k++) {
        snprintf(want, sizeof(want), "answer %d", order[k]);
        reply_data(calls[order[k]], want);
        tr_rpc_call_release(calls[order[k]]);
        job_join(&j[order[k]]);
        TR_ASSERT_OK(j[order[k]].rv, &j[order[k]].err);
        assert_string_equal(j[order[k]].out, want);
    }
    assert_int_equal(f->s.expired, 1);
    for (int i = 0; i < 5; i++) {
        tr_rpc_client_close(cli[i]);
    }
}

/* The client gives up at its own deadline when the server does not answer. */
static void client_deadline(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    char out[64];
    int64_t t0, dt;

    start_server(f, (tr_rpc_server_opts){0});
    f->cli = open_client(f, NULL);
    t0 = tr_now_ms();
    TR_ASSERT_FAILS(call_data(f->cli, M_BLOCK, "x", 200, 0, out, sizeof(out), &err), TROUPE_DEADLINE_EXCEEDED,
                    &err, "before the deadline");
    TR_ASSERT_CONTAINS(err.msg, f->url);
    dt = tr_now_ms() - t0;
    if (dt < 190 || dt > 3000) {
        fail_msg("200 ms client deadline fired after %lld ms", (long long)dt);
    }
    pthread_mutex_lock(&f->s.mu);
    f->s.unblock = 1;
    pthread_cond_broadcast(&f->s.cv);
    pthread_mutex_unlock(&f->s.mu);
    TR_ASSERT_OK(call_data(f->cli, M_ECHO, "next", 2000, 0, out, sizeof(out), &err), &err);
}

static void deadline_propagates(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    char out[64];
    long left;

    start_server(f, (tr_rpc_server_opts){.max_timeout_ms = 300});
    f->cli = open_client(f, NULL);
    TR_ASSERT_OK(call_data(f->cli, M_DEADLINE, "", 2000, 0, out, sizeof(out), &err), &err);
    left = strtol(out, NULL, 10);
    if (left < 200 || left > 300) {
        fail_msg("2000 ms call clamped to 300 ms: handler saw %ld ms left", left);
    }
    tr_rpc_server_stop(f->srv);
    f->srv = NULL;
    tr_rpc_client_close(f->cli);
    f->cli = NULL;

    start_server(f, (tr_rpc_server_opts){0});
    f->cli = open_client(f, NULL);
    TR_ASSERT_OK(call_data(f->cli, M_DEADLINE, "", 1500, 0, out, sizeof(out), &err), &err);
    left = strtol(out, NULL, 10);
    if (left < 1000 || left > 1500) {
        fail_msg("1500 ms call: handler saw %ld ms left", left);
    }
}

/* Idempotent calls are retried on UNAVAILABLE within their deadline; others
 * are tried once. */
static void idempotent_retry(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    char out[64];
    int64_t t0, dt;
    int rv;

    start_server(f, (tr_rpc_server_opts){0});
    f->cli = open_client(f, NULL);

    atomic_store(&f->s.flaky_left, 2);
    atomic_store(&f->s.flaky_calls, 0);
    TR_ASSERT_OK(call_data(f->cli, M_FLAKY, "", 5000, TR_RPC_IDEMPOTENT, out, sizeof(out), &err), &err);
    assert_string_equal(out, "finally");
    assert_int_equal(atomic_load(&f->s.flaky_calls), 3);

    atomic_store(&f->s.flaky_left, 2);
    atomic_store(&f->s.flaky_calls, 0);
    TR_ASSERT_FAILS(call_data(f->cli, M_FLAKY, "", 5000, 0, out, sizeof(out), &err), TROUPE_UNAVAILABLE, &err,
                    "try again (flaky)");
    assert_int_equal(atomic_load(&f->s.flaky_calls), 1);

    /* Always UNAVAILABLE: retried with backoff, but given up within the
     * deadline. The loop stops when the next backoff would pass the deadline,
     * so it usually returns the server's UNAVAILABLE; when a sleep overshoots
     * (a loaded machine, sanitizers) the last attempt starts with no time left
     * and the call ends DEADLINE_EXCEEDED instead, as gRPC's would. */
    atomic_store(&f->s.flaky_left, 1000000);
    atomic_store(&f->s.flaky_calls, 0);
    t0 = tr_now_ms();
    rv = call_data(f->cli, M_FLAKY, "", 400, TR_RPC_IDEMPOTENT, out, sizeof(out), &err);
    dt = tr_now_ms() - t0;
    if (rv == TROUPE_UNAVAILABLE) {
        TR_ASSERT_CONTAINS(err.msg, "try again (flaky)");
    } else if (rv == TROUPE_DEADLINE_EXCEEDED) {
        TR_ASSERT_CONTAINS(err.msg, "deadline");
    } else {
        fail_msg("always-UNAVAILABLE idempotent call: got %s (%s)", troupe_strerror(rv), err.msg);
    }
    assert_true(atomic_load(&f->s.flaky_calls) >= 2);
    if (dt > 1500) {
        fail_msg("400 ms idempotent call kept retrying for %lld ms", (long long)dt);
    }
}

static void handler_without_reply(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    char out[64];

    start_server(f, (tr_rpc_server_opts){0});
    f->cli = open_client(f, NULL);
    TR_ASSERT_FAILS(call_data(f->cli, M_NOREPLY, "", 2000, 0, out, sizeof(out), &err), TROUPE_INTERNAL, &err,
                    "handler did not reply");
    TR_ASSERT_OK(call_data(f->cli, M_ECHO, "fine", 2000, 0, out, sizeof(out), &err), &err);
}

static void double_reply(void **state)
{
    fixture *f = *state;
    tr_err err = {0};
    char out[64];

    start_server(f, (tr_rpc_server_opts){0});
    f->cli = open_client(f, NULL);
    TR_ASSERT_OK(call_data(f->cli, M_TWICE, "", 2000, 0, out, sizeof(out), &err), &err);
    assert_string_equal(out, "first");
    pthread_mutex_lock(&f->s.mu);
    assert_int_equal(f->s.second_reply_rv, TROUPE_FAILED_PRECONDITION);
    pthread_mutex_unlock(&f->s.mu);
}

/* Stopping the server answers waiting deferred calls and tells their owners. */
static void stop_with_deferred(void **state)
{
    fixture *f = *state;
    job j = {0};

    start_server(f, (tr_rpc_server_opts){0});
    f->cli = open_client(f, NULL);
    j = (job){.cli = f->cli, .method = M_DEFER, .data = "x", .timeout_ms = 1500};
    job_start(&j);
    wait_queued(&f->s, 1);
    tr_rpc_server_stop(f->srv);
    f->srv = NULL;
    job_join(&j);
    /* The UNAVAILABLE answer races the socket close; the client reads it, or
     * sees the connection reset under it (UNAVAILABLE too), or runs into its
     * deadline. It never gets OK. */
    if (j.rv != TROUPE_UNAVAILABLE && j.rv != TROUPE_DEADLINE_EXCEEDED) {
        fail_msg("call deferred across stop: got %s (%s)", troupe_strerror(j.rv), j.err.msg);
    }
    if (j.rv == TROUPE_UNAVAILABLE && strstr(j.err.msg, "server shutting down") == NULL &&
        strstr(j.err.msg, "Connection reset") == NULL && strstr(j.err.msg, "closed") == NULL) {
        fail_msg("call deferred across stop: UNAVAILABLE for another reason: %s", j.err.msg);
    }
    assert_int_equal(f->s.expired, 1);
    assert_int_equal(f->s.qlen, 0);
}

typedef struct many {
    tr_rpc_client *cli; /* shared, or NULL to open one */
    const char *url;
    int id;
    int calls;
    int ok;
    int mismatched;
    int first_rv;
    tr_err first_err;
    pthread_t th;
} many;

static void *many_main(void *arg)
{
    many *m = arg;
    tr_rpc_client *c = m->cli;
    tr_err err = {0};

    if (c == NULL) {
        tr_rpc_client_opts o = {.url = m->url};
        if (tr_rpc_client_open(&o, &c, &m->first_err) != TROUPE_OK) {
            m->first_rv = m->first_err.code;
            return NULL;
        }
    }
    for (int i = 0; i < m->calls; i++) {
        char data[64], out[64];
        int rv;
        snprintf(data, sizeof(data), "thread %d call %d", m->id, i);
        rv = call_data(c, M_ECHO, data, 10000, 0, out, sizeof(out), &err);
        if (rv != TROUPE_OK) {
            if (m->first_rv == TROUPE_OK) {
                m->first_rv = rv;
                m->first_err = err;
            }
            continue;
        }
        m->ok++;
        m->mismatched += strcmp(out, data) != 0;
    }
    if (m->cli == NULL) {
        tr_rpc_client_close(c);
    }
    return NULL;
}

/* Many threads call at once, half through one shared client (calls on one
 * handle are thread-safe), half with a client each; every reply matches. */
/* shutdown_cancels_calls: tr_rpc_client_shutdown ends the calls other
 * threads have in flight at once with CANCELLED (not at their 20 s deadline)
 * and refuses new ones, without closing the socket under them: closing it
 * raced the callers' own context close in nng 1.5.2 and aborted a worker at
 * exit ("panic: pthread_mutex_unlock"). Repeated, as the race was. */
static void shutdown_cancels_calls(void **state)
{
    fixture *f = *state;
    enum { ROUNDS = 20, CALLS = 3 };
    char out[16];
    tr_err err = {0};

    start_server(f, (tr_rpc_server_opts){0});
    for (int r = 0; r < ROUNDS; r++) {
        job j[CALLS];
        tr_rpc_client *c = open_client(f, NULL);

        for (int i = 0; i < CALLS; i++) {
            j[i] = (job){.cli = c, .method = M_DEFER, .data = "x", .timeout_ms = 20000};
            job_start(&j[i]);
        }
        wait_queued(&f->s, CALLS);
        tr_rpc_client_shutdown(c);
        for (int i = 0; i < CALLS; i++) {
            job_join(&j[i]);
            if (j[i].rv != TROUPE_CANCELLED || j[i].elapsed_ms > 5000) {
                fail_msg("round %d call %d: %s after %lld ms (%s); want CANCELLED at once", r, i,
                         troupe_strerror(j[i].rv), (long long)j[i].elapsed_ms, j[i].err.msg);
            }
        }
        TR_ASSERT_FAILS(call_data(c, M_ECHO, "late", 2000, TR_RPC_IDEMPOTENT, out, sizeof(out), &err),
                        TROUPE_CANCELLED, &err, "shutting down");
        tr_rpc_client_close(c);
        /* The server answers the abandoned calls; nothing is waiting. */
        for (tr_rpc_call *call; (call = dequeue(&f->s)) != NULL;) {
            reply_data(call, "late");
            tr_rpc_call_release(call);
        }
    }
}

/* cancel_one_method: tr_rpc_client_cancel ends the calls of the method it
 * names at once (CANCELLED), leaves another method's call in flight alone,
 * and the client goes on serving calls made after it. */
static void cancel_one_method(void **state)
{
    fixture *f = *state;
    job poll, other;
    char out[16];
    tr_err err = {0};
    int64_t until = tr_now_ms() + 5000;

    start_server(f, (tr_rpc_server_opts){0});
    f->cli = open_client(f, NULL);
    poll = (job){.cli = f->cli, .method = M_DEFER, .data = "x", .timeout_ms = 20000};
    other = (job){.cli = f->cli, .method = M_BLOCK, .data = "x", .timeout_ms = 20000};
    job_start(&poll);
    job_start(&other);
    wait_queued(&f->s, 1);
    pthread_mutex_lock(&f->s.mu);
    while (f->s.blocking == 0 && tr_now_ms() < until) {
        pthread_mutex_unlock(&f->s.mu);
        tr_sleep_ms(2);
        pthread_mutex_lock(&f->s.mu);
    }
    pthread_mutex_unlock(&f->s.mu);
    tr_rpc_client_cancel(f->cli, M_DEFER);
    job_join(&poll);
    if (poll.rv != TROUPE_CANCELLED || poll.elapsed_ms > 5000) {
        fail_msg("cancelled call: %s after %lld ms (%s)", troupe_strerror(poll.rv), (long long)poll.elapsed_ms,
                 poll.err.msg);
    }
    TR_ASSERT_OK(call_data(f->cli, M_ECHO, "after", 2000, 0, out, sizeof(out), &err), &err);
    assert_string_equal(out, "after");
    pthread_mutex_lock(&f->s.mu);
    f->s.unblock = 1;
    pthread_cond_broadcast(&f->s.cv);
    pthread_mutex_unlock(&f->s.mu);
    job_join(&other);
    TR_ASSERT_OK(other.rv, &other.err);
    assert_string_equal(other.out, "unblocked");
}

static void concurrent_clients(void **state)
{
    enum { THREADS = 8, CALLS = 50 };
    fixture *f = *state;
    many m[THREADS];
    uint64_t before;
    int ok = 0;

    start_server(f, (tr_rpc_server_opts){.contexts = 4});
    f->cli = open_client(f, NULL);
    before = tr_rpc_server_served(f->srv);
    for (int i = 0; i < THREADS; i++) {
        m[i] = (many){.cli = (i % 2) ? f->cli : NULL, .url = f->url, .id = i, .calls = CALLS};
        assert_int_equal(pthread_create(&m[i].th, NULL, many_main, &m[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(m[i].th, NULL), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        if (m[i].first_rv != TROUPE_OK) {
            fail_msg("thread %d: %s: %s", i, troupe_strerror(m[i].first_rv), m[i].first_err.msg);
        }
        assert_int_equal(m[i].mismatched, 0);
        ok += m[i].ok;
    }
    assert_int_equal(ok, THREADS * CALLS);
    assert_true(tr_rpc_server_served(f->srv) - before == (uint64_t)(THREADS * CALLS));
}

/* The responder answers queued deferred calls as they arrive. */
typedef struct responder {
    svc *s;
    atomic_int stop;
    int answered;
    pthread_t th;
} responder;

static void *responder_main(void *arg)
{
    responder *r = arg;

    while (!atomic_load(&r->stop)) {
        tr_rpc_call *call = dequeue(r->s);
        if (call == NULL) {
            tr_sleep_ms(1);
            continue;
        }
        reply_data(call, "early");
        tr_rpc_call_release(call);
        r->answered++;
    }
    return NULL;
}

/* A deferred call answered while its handler is still running (another
 * thread replies between tr_rpc_defer and the handler's return) must still
 * leave a receiving context in its place: were one lost per such call, the
 * server would stop receiving after `contexts` of them (here the third call,
 * with contexts = 2, would time out). */
static void deferred_answered_before_return(void **state)
{
    fixture *f = *state;
    responder r = {.s = &f->s};
    tr_err err = {0};
    char out[64];
    int failed_at = -1, rv = TROUPE_OK;
    tr_err first = {0};

    start_server(f, (tr_rpc_server_opts){.contexts = 2});
    f->cli = open_client(f, NULL);
    assert_int_equal(pthread_create(&r.th, NULL, responder_main, &r), 0);
    for (int i = 0; i < 5; i++) {
        rv = call_data(f->cli, M_DEFER_EARLY, "", 1500, 0, out, sizeof(out), &err);
        if (rv != TROUPE_OK) {
            failed_at = i;
            first = err;
            break;
        }
        if (strcmp(out, "early") != 0) {
            failed_at = i;
            break;
        }
    }
    atomic_store(&r.stop, 1);
    assert_int_equal(pthread_join(r.th, NULL), 0);
    if (failed_at >= 0) {
        fail_msg("deferred call %d of 5 (server contexts = 2) failed: %s: %s -- receiving contexts leak when a "
                 "deferred call is answered before its handler returns",
                 failed_at + 1, troupe_strerror(rv), first.msg);
    }
    assert_int_equal(f->s.early_not_answered, 0);
}

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A deferred call whose reply has been sent but whose owner still holds its
 * reference stays in the graveyard; the sweeper must wait meanwhile, not spin
 * (lock, scan, unlock) at 100% of a core: an idle server uses next to no
 * CPU. */
static void sweeper_idle_while_ref_held(void **state)
{
    fixture *f = *state;
    job j = {0};
    tr_rpc_call *call;
    double c0, used;

    start_server(f, (tr_rpc_server_opts){0});
    f->cli = open_client(f, NULL);
    j = (job){.cli = f->cli, .method = M_DEFER, .data = "x", .timeout_ms = 5000};
    job_start(&j);
    wait_queued(&f->s, 1);
    call = dequeue(&f->s);
    reply_data(call, "done");
    job_join(&j);
    TR_ASSERT_OK(j.rv, &j.err);

    /* Hold the reference for a second while nothing else happens. */
    tr_sleep_ms(50);
    c0 = cpu_seconds();
    tr_sleep_ms(1000);
    used = cpu_seconds() - c0;
    tr_rpc_call_release(call);
    if (used > 0.2) {
        fail_msg("idle server used %.0f ms of CPU in 1000 ms while an answered deferred call was still "
                 "referenced (sweeper busy-loops on the graveyard)",
                 used * 1000);
    }
}

static void open_unreachable(void **state)
{
    fixture *f = *state;
    tr_rpc_client_opts o = {.url = f->url};
    tr_rpc_client_opts empty = {.url = ""};
    tr_rpc_client *c = (tr_rpc_client *)&o;
    tr_err err = {0};
    char want[400];

    snprintf(want, sizeof(want), "cannot reach %s: ", f->url);
    TR_ASSERT_FAILS(tr_rpc_client_open(&o, &c, &err), TROUPE_UNAVAILABLE, &err, want);
    assert_null(c);
    TR_ASSERT_FAILS(tr_rpc_client_open(&empty, &c, &err), TROUPE_INVALID_ARGUMENT, &err, "no server URL given");
    assert_null(c);
    tr_rpc_client_close(NULL);
    tr_rpc_server_stop(NULL);
}

typedef struct late_start {
    fixture *f;
    int rv;
    tr_err err;
} late_start;

static void *late_start_main(void *arg)
{
    late_start *ls = arg;
    tr_rpc_server_opts o = {.url = ls->f->url, .methods = methods, .user = &ls->f->s};
    tr_sleep_ms(300);
    ls->rv = tr_rpc_server_start(&o, &ls->f->srv, &ls->err);
    return NULL;
}

/* A client that waits for its server connects in the background and its call
 * goes through once the server is up. */
static void wait_for_server(void **state)
{
    fixture *f = *state;
    tr_rpc_client_opts o = {.url = f->url, .wait_for_server = 1};
    late_start ls = {.f = f};
    pthread_t th;
    tr_err err = {0};
    char out[64];

    TR_ASSERT_OK(tr_rpc_client_open(&o, &f->cli, &err), &err);
    assert_int_equal(pthread_create(&th, NULL, late_start_main, &ls), 0);
    TR_ASSERT_OK(call_data(f->cli, M_ECHO, "waited", 5000, TR_RPC_IDEMPOTENT, out, sizeof(out), &err), &err);
    assert_string_equal(out, "waited");
    assert_int_equal(pthread_join(th, NULL), 0);
    TR_ASSERT_OK(ls.rv, &ls.err);
}

static void listen_in_use(void **state)
{
    fixture *f = *state;
    tr_rpc_server_opts o = {.url = f->url, .methods = methods, .user = &f->s};
    tr_rpc_server *second = (tr_rpc_server *)&o;
    tr_err err = {0};
    char want[400];

    start_server(f, (tr_rpc_server_opts){0});
    snprintf(want, sizeof(want), "cannot listen: %s: ", f->url);
    TR_ASSERT_FAILS(tr_rpc_server_start(&o, &second, &err), TROUPE_UNAVAILABLE, &err, want);
    assert_null(second);
    o.url = "bogus://x";
    TR_ASSERT_STATUS(tr_rpc_server_start(&o, &second, &err), TROUPE_UNIMPLEMENTED, &err);
    TR_ASSERT_CONTAINS(err.msg, "cannot listen: bogus://x");
}

/* ---- handler threads ------------------------------------------------------- */

/* blocking_count reads how many M_BLOCK handlers have started. */
static int blocking_count(svc *s)
{
    int n;
    pthread_mutex_lock(&s->mu);
    n = s->blocking;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void wait_blocking(svc *s, int n)
{
    int64_t until = tr_now_ms() + 5000;
    while (blocking_count(s) < n && tr_now_ms() < until) {
        tr_sleep_ms(2);
    }
    if (blocking_count(s) < n) {
        fail_msg("expected %d blocked handler(s) within 5 s, have %d", n, blocking_count(s));
    }
}

static void unblock_all(svc *s)
{
    pthread_mutex_lock(&s->mu);
    s->unblock = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Handlers that block (on their owner's lock, on I/O) never hold up a quick
 * method: 24 blocked calls, more than nng's callback threads on any machine
 * these tests run on, and a quick call is still answered at once. When
 * handlers ran on nng's callback threads, the quick call waited for the
 * blocked ones (until its deadline). */
static void slow_handlers_leave_quick(void **state)
{
    enum { SLOW = 24 };
    fixture *f = *state;
    job slow[SLOW];
    tr_err err = {0};
    char out[64];
    int64_t t0, took;

    start_server(f, (tr_rpc_server_opts){0});
    f->cli = open_client(f, NULL);
    for (int i = 0; i < SLOW; i++) {
        slow[i] = (job){.cli = f->cli, .method = M_BLOCK, .data = "x", .timeout_ms = 10000};
        job_start(&slow[i]);
    }
    wait_blocking(&f->s, 3); /* every general handler thread is held */
    tr_sleep_ms(200);        /* and the rest of the slow calls have arrived */
    t0 = tr_now_ms();
    TR_ASSERT_OK(call_data(f->cli, M_QUICK, "ping", 2000, 0, out, sizeof(out), &err), &err);
    took = tr_now_ms() - t0;
    assert_string_equal(out, "ping");
    unblock_all(&f->s);
    for (int i = 0; i < SLOW; i++) {
        job_join(&slow[i]);
        TR_ASSERT_OK(slow[i].rv, &slow[i].err);
    }
    if (took > 1000) {
        fail_msg("a quick call took %lld ms behind %d blocked handlers (want < 1000 ms)", (long long)took, SLOW);
    }
}

/* With every general handler thread busy and opts.queue requests waiting,
 * one more is answered UNAVAILABLE at once, saying why; those that waited
 * run once the threads are free. */
static void busy_queue_full(void **state)
{
    enum { CALLS = 10, THREADS = 2, QUEUE = 3 };
    fixture *f = *state;
    job j[CALLS];
    int ok = 0, busy = 0;
    int64_t until;

    start_server(f, (tr_rpc_server_opts){.contexts = 16, .threads = THREADS, .queue = QUEUE});
    f->cli = open_client(f, NULL);
    for (int i = 0; i < CALLS; i++) {
        j[i] = (job){.cli = f->cli, .method = M_BLOCK, .data = "x", .timeout_ms = 8000};
        job_start(&j[i]);
    }
    /* One runs (THREADS - 1 general threads), QUEUE wait, the rest are refused. */
    until = tr_now_ms() + 5000;
    while (tr_rpc_server_busy(f->srv, NULL) < CALLS - 1 - QUEUE && tr_now_ms() < until) {
        tr_sleep_ms(5);
    }
    assert_int_equal(blocking_count(&f->s), 1);
    unblock_all(&f->s);
    for (int i = 0; i < CALLS; i++) {
        job_join(&j[i]);
        if (j[i].rv == TROUPE_OK) {
            ok++;
        } else if (j[i].rv == TROUPE_UNAVAILABLE && strstr(j[i].err.msg, "busy") != NULL) {
            busy++;
            if (j[i].elapsed_ms > 4000) {
                fail_msg("a refused call took %lld ms: refusals must be at once", (long long)j[i].elapsed_ms);
            }
        } else {
            fail_msg("call %d: %s: %s", i, troupe_strerror(j[i].rv), j[i].err.msg);
        }
    }
    assert_int_equal(ok, 1 + QUEUE);
    assert_int_equal(busy, CALLS - 1 - QUEUE);
    assert_int_equal(tr_rpc_server_busy(f->srv, NULL), CALLS - 1 - QUEUE);
}

/* A request whose deadline passed while it waited for a handler thread is
 * answered DEADLINE_EXCEEDED without running: its client gave up. */
static void waiting_past_deadline(void **state)
{
    fixture *f = *state;
    job first = {0}, late = {0};
    uint64_t expired = 0;
    int64_t until;

    start_server(f, (tr_rpc_server_opts){.threads = 2});
    f->cli = open_client(f, NULL);
    first = (job){.cli = f->cli, .method = M_BLOCK, .data = "x", .timeout_ms = 8000};
    job_start(&first);
    wait_blocking(&f->s, 1);
    late = (job){.cli = f->cli, .method = M_BLOCK, .data = "y", .timeout_ms = 300};
    job_start(&late);
    job_join(&late);
    assert_int_equal(late.rv, TROUPE_DEADLINE_EXCEEDED);
    tr_sleep_ms(200); /* past its deadline on the server's side too (it arrived a moment later) */
    unblock_all(&f->s);
    job_join(&first);
    TR_ASSERT_OK(first.rv, &first.err);
    until = tr_now_ms() + 3000;
    while (tr_rpc_server_busy(f->srv, &expired) == 0 && expired == 0 && tr_now_ms() < until) {
        tr_sleep_ms(5);
    }
    assert_int_equal(expired, 1);
    assert_int_equal(blocking_count(&f->s), 1); /* the late one never ran */
}

typedef struct unblocker {
    svc *s;
    int after_ms;
    pthread_t th;
} unblocker;

static void *unblocker_main(void *arg)
{
    unblocker *u = arg;
    tr_sleep_ms(u->after_ms);
    unblock_all(u->s);
    return NULL;
}

/* Stopping with requests in flight: the running handler finishes and its
 * reply goes out, requests still waiting for a thread are answered
 * UNAVAILABLE without running, a deferred call is told, and nothing is
 * leaked or touched after it is freed (the sanitizer build runs this). */
static void stop_with_requests_in_flight(void **state)
{
    enum { WAITING = 4 };
    fixture *f = *state;
    job running = {0}, waiting[WAITING], deferred = {0};
    unblocker u = {.s = &f->s, .after_ms = 300};
    int64_t until;

    start_server(f, (tr_rpc_server_opts){.contexts = 16, .threads = 2, .queue = 8});
    f->cli = open_client(f, NULL);
    deferred = (job){.cli = f->cli, .method = M_DEFER, .data = "d", .timeout_ms = 8000};
    job_start(&deferred);
    wait_queued(&f->s, 1);
    running = (job){.cli = f->cli, .method = M_BLOCK, .data = "x", .timeout_ms = 8000};
    job_start(&running);
    wait_blocking(&f->s, 1); /* the one general thread (threads = 2) is held */
    for (int i = 0; i < WAITING; i++) {
        waiting[i] = (job){.cli = f->cli, .method = M_BLOCK, .data = "w", .timeout_ms = 8000};
        job_start(&waiting[i]);
    }
    tr_sleep_ms(200); /* they arrive and wait behind the running one */
    assert_int_equal(pthread_create(&u.th, NULL, unblocker_main, &u), 0);
    until = tr_now_ms();
    tr_rpc_server_stop(f->srv);
    f->srv = NULL;
    if (tr_now_ms() - until > 5000) {
        fail_msg("stop took %lld ms with one handler blocked for 300 ms", (long long)(tr_now_ms() - until));
    }
    assert_int_equal(pthread_join(u.th, NULL), 0);
    job_join(&running);
    job_join(&deferred);
    for (int i = 0; i < WAITING; i++) {
        job_join(&waiting[i]);
        if (waiting[i].rv != TROUPE_UNAVAILABLE) {
            fail_msg("waiting call %d across stop: %s (%s), want UNAVAILABLE", i, troupe_strerror(waiting[i].rv),
                     waiting[i].err.msg);
        }
    }
    TR_ASSERT_OK(running.rv, &running.err);
    assert_string_equal(running.out, "unblocked");
    assert_int_equal(deferred.rv, TROUPE_UNAVAILABLE);
    assert_int_equal(f->s.expired, 1);
    assert_int_equal(blocking_count(&f->s), 1); /* the waiting ones never ran */
}

int main(int argc, char **argv)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(echo_ok),
        T(empty_reply_payload),
        T(unknown_method),
        T(auth_token),
        T(auth_scopes),
        T(malformed_payload),
        T(garbage_envelope),
        T(oversized_frame),
        T(oversized_reply),
        T(deferred_from_thread),
        T(deferred_expires),
        T(deferred_many),
        T(client_deadline),
        T(deadline_propagates),
        T(idempotent_retry),
        T(handler_without_reply),
        T(double_reply),
        T(stop_with_deferred),
        T(concurrent_clients),
        T(shutdown_cancels_calls),
        T(cancel_one_method),
        T(deferred_answered_before_return),
        T(sweeper_idle_while_ref_held),
        T(open_unreachable),
        T(wait_for_server),
        T(listen_in_use),
        T(stats),
        T(scratch_requests),
        T(slow_handlers_leave_quick),
        T(busy_queue_full),
        T(waiting_past_deadline),
        T(stop_with_requests_in_flight),
    };
#undef T
    return TR_TEST_MAIN("unit.common.rpc", tests, argc, argv);
}
