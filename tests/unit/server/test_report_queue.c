/* test_report_queue.c - unit.server.report_queue: the durable writer shared
 * by the metrics and trace services (server/report_queue.c).
 *
 * A real RPC server on an ipc:// socket whose one method queues its request
 * (weight = its points) with a tr_rq, and test callbacks that record what
 * the writer does and can hold it inside a write or the answerer inside an
 * answer. Each case checks one promise of report_queue.h: no answer before
 * its round was written, the bound and its refusal, a queued call that
 * expires is never written, a failed write answers the whole round with its
 * status, deletions run after the round taken with them is answered and
 * before close returns, and the writer writes the next round while the last
 * one is answered but never runs more than one round ahead, and both threads
 * run at the nice the options ask for. Every wait has a deadline (WAIT_MS). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dberr.h"
#include "report_queue.h"
#include "series.h"
#include "rpc.h"
#include "test_helpers.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

#define METHOD "troupe.v1.Head/ReportMetrics"
#define WAIT_MS 10000
#define MAX_EVENTS 64

/* entry: the service's own item, as metrics.c and trace.c have theirs. */
typedef struct entry {
    tr_rq_item base;
    int written; /* set by write: answer checks it */
} entry;

/* fixture: the queue, the server, and what the callbacks saw (under mu). */
typedef struct fixture {
    char dir[256], url[300];
    tr_rpc_server *srv;
    tr_rpc_client *cli;
    tr_rq *q;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int hold;                    /* write waits while set */
    int in_write;                /* write is running */
    int hold_answer;             /* answer waits while set */
    int in_answer;               /* answer is running */
    int fail_writes;             /* write fails while set: UNAVAILABLE "disk gone" */
    int answered_early;          /* answers of an item its round had not written */
    char events[MAX_EVENTS][32]; /* "w3" written report 3, "a3" answered, "d7" deleted job 7 */
    size_t n_events;
    int write_nice, answer_nice; /* the nice write and answer last ran at (their threads'); NO_NICE before */
    int hold_after_reply;        /* answer waits after its reply while set (before the queue releases the call) */
    int after_reply;             /* answer is waiting there */
    int answer_returned;         /* answers that returned (the queue releases the call next) */
} fixture;

#define NO_NICE (-100)

static fixture fx;

static void event(const char *fmt, unsigned long long v)
{
    pthread_mutex_lock(&fx.mu);
    if (fx.n_events < MAX_EVENTS) {
        snprintf(fx.events[fx.n_events++], sizeof(fx.events[0]), fmt, v);
    }
    pthread_cond_broadcast(&fx.cv);
    pthread_mutex_unlock(&fx.mu);
}

static uint64_t tag_of(const tr_rq_item *it)
{
    return ((const Troupe__V1__ReportMetricsRequest *)it->req)->reported;
}

/* ---- the callbacks --------------------------------------------------------------- */

static int test_write(void *arg, tr_rq_item *round, tr_err *err)
{
    struct timespec until;
    int rv = TROUPE_OK, rc = 0;

    (void)arg;
    tr_abstime_in(&until, WAIT_MS);
    pthread_mutex_lock(&fx.mu);
    fx.write_nice = getpriority(PRIO_PROCESS, 0); /* Linux: the calling thread's */
    fx.in_write = 1;
    pthread_cond_broadcast(&fx.cv);
    while (fx.hold && rc == 0) {
        rc = pthread_cond_timedwait(&fx.cv, &fx.mu, &until); /* the case fails on its own deadline first */
    }
    fx.in_write = 0;
    if (fx.fail_writes) {
        rv = tr_err_set(err, TROUPE_UNAVAILABLE, "disk gone");
    }
    pthread_mutex_unlock(&fx.mu);
    for (tr_rq_item *it = round; rv == TROUPE_OK && it != NULL; it = it->next) {
        ((entry *)it)->written = 1;
        event("w%llu", (unsigned long long)tag_of(it));
    }
    return rv;
}

static void test_answer(void *arg, tr_rq_item *it, int rv, const tr_err *err)
{
    Troupe__V1__ReportMetricsReply rep = TROUPE__V1__REPORT_METRICS_REPLY__INIT;

    struct timespec until;
    int rc = 0;

    (void)arg;
    tr_abstime_in(&until, WAIT_MS);
    pthread_mutex_lock(&fx.mu);
    fx.answer_nice = getpriority(PRIO_PROCESS, 0);
    fx.in_answer = 1;
    pthread_cond_broadcast(&fx.cv);
    while (fx.hold_answer && rc == 0) {
        rc = pthread_cond_timedwait(&fx.cv, &fx.mu, &until); /* the case fails on its own deadline first */
    }
    fx.in_answer = 0;
    pthread_mutex_unlock(&fx.mu);
    if (rv != TROUPE_OK) {
        tr_rpc_reply_error(it->call, rv, "could not save: %s", err->msg);
        return;
    }
    if (!((entry *)it)->written) {
        pthread_mutex_lock(&fx.mu);
        fx.answered_early++;
        pthread_mutex_unlock(&fx.mu);
    }
    event("a%llu", (unsigned long long)tag_of(it));
    rep.acked_seq = tag_of(it);
    tr_rpc_reply(it->call, &rep.base);
    /* The hook that widens the window between an answer and the queue's
     * release of the call: the caller already has its reply. */
    tr_abstime_in(&until, WAIT_MS);
    rc = 0;
    pthread_mutex_lock(&fx.mu);
    fx.after_reply = 1;
    pthread_cond_broadcast(&fx.cv);
    while (fx.hold_after_reply && rc == 0) {
        rc = pthread_cond_timedwait(&fx.cv, &fx.mu, &until);
    }
    fx.after_reply = 0;
    fx.answer_returned++;
    pthread_mutex_unlock(&fx.mu);
}

static void test_deleted(void *arg, const tr_ids *ids)
{
    (void)arg;
    for (size_t i = 0; i < ids->n; i++) {
        event("d%llu", (unsigned long long)ids->v[i]);
    }
}

static const tr_rq_ops test_ops = {
    .name = "test",
    .item_size = sizeof(entry),
    .max_weight = 10,
    .unit = "points",
    .full_code = TROUPE_RESOURCE_EXHAUSTED,
    .full_hint = ": try later",
    .write = test_write,
    .answer = test_answer,
    .deleted = test_deleted,
};

/* report: the method. Weight = the request's points, as in metrics.c. */
static void report(tr_rpc_call *call, void *user)
{
    Troupe__V1__ReportMetricsRequest *req = (Troupe__V1__ReportMetricsRequest *)tr_rpc_unpack(
        call, &troupe__v1__report_metrics_request__descriptor);
    tr_err err;
    int rv;

    if (req == NULL) {
        return;
    }
    rv = tr_rq_submit(user, call, &req->base, req->n_points, &err);
    if (rv != TROUPE_OK) {
        tr_rpc_reply_error(call, rv, "%s", err.msg);
        protobuf_c_message_free_unpacked(&req->base, NULL);
    }
}

static const tr_rpc_method methods[] = {
    {METHOD, report, TR_SCOPES_ANY},
    {NULL, NULL, 0},
};

/* ---- the fixture ----------------------------------------------------------------- */

static void fx_start_opts(const tr_rq_opts *opts)
{
    tr_rpc_server_opts so = {0};
    tr_rpc_client_opts co = {0};
    tr_err err;

    memset(&fx, 0, sizeof(fx));
    fx.write_nice = fx.answer_nice = NO_NICE;
    pthread_mutex_init(&fx.mu, NULL);
    pthread_cond_init(&fx.cv, NULL);
    tr_test_tmpdir(fx.dir, sizeof(fx.dir), "rq");
    snprintf(fx.url, sizeof(fx.url), "ipc://%s/rq.ipc", fx.dir);
    TR_ASSERT_OK(tr_rq_open(&fx.q, &test_ops, opts, NULL, &err), &err);
    so.url = fx.url;
    so.methods = methods;
    so.user = fx.q;
    TR_ASSERT_OK(tr_rpc_server_start(&so, &fx.srv, &err), &err);
    co.url = fx.url;
    TR_ASSERT_OK(tr_rpc_client_open(&co, &fx.cli, &err), &err);
}

static void fx_start(void)
{
    fx_start_opts(NULL);
}

/* fx_stop: in the services' order - the server first (deferred calls answered
 * and expired out of the queue), then the queue. */
static void fx_stop(void)
{
    char sock[320];

    tr_rpc_client_close(fx.cli);
    tr_rpc_server_stop(fx.srv);
    tr_rq_close(fx.q);
    pthread_cond_destroy(&fx.cv);
    pthread_mutex_destroy(&fx.mu);
    snprintf(sock, sizeof(sock), "%s/rq.ipc", fx.dir);
    unlink(sock); /* if the server left it */
    rmdir(fx.dir);
}

static void set_hold(int hold)
{
    pthread_mutex_lock(&fx.mu);
    fx.hold = hold;
    pthread_cond_broadcast(&fx.cv);
    pthread_mutex_unlock(&fx.mu);
}

/* wait_flag waits (at most WAIT_MS) until *flag is set (under fx.mu). */
static void wait_flag(const int *flag, const char *what)
{
    struct timespec until;
    int rc = 0, set;

    tr_abstime_in(&until, WAIT_MS);
    pthread_mutex_lock(&fx.mu);
    while (!*flag && rc == 0) {
        rc = pthread_cond_timedwait(&fx.cv, &fx.mu, &until);
    }
    set = *flag;
    pthread_mutex_unlock(&fx.mu);
    if (!set) {
        fail_msg("not within %d ms: %s", WAIT_MS, what);
    }
}

/* wait_in_write waits (at most WAIT_MS) until the writer is inside write. */
static void wait_in_write(void)
{
    wait_flag(&fx.in_write, "the writer started a round");
}

static void set_hold_answer(int hold)
{
    pthread_mutex_lock(&fx.mu);
    fx.hold_answer = hold;
    pthread_cond_broadcast(&fx.cv);
    pthread_mutex_unlock(&fx.mu);
}

/* wait_until polls cond (at most WAIT_MS). */
static void wait_until(int (*cond)(size_t), size_t arg, const char *what)
{
    int64_t end = tr_now_ms() + WAIT_MS;

    while (!cond(arg)) {
        if (tr_now_ms() > end) {
            fail_msg("not within %d ms: %s", WAIT_MS, what);
        }
        tr_sleep_ms(5);
    }
}

static int submitted_is(size_t n)
{
    return tr_rq_submitted(fx.q) == n;
}

static int weight_is(size_t w)
{
    return tr_rq_weight(fx.q) == w;
}

/* events_are compares the recorded events with want, joined by spaces. */
static void events_are(const char *want)
{
    char got[MAX_EVENTS * 4] = "";
    size_t off = 0;

    pthread_mutex_lock(&fx.mu);
    for (size_t i = 0; i < fx.n_events; i++) {
        off += (size_t)snprintf(got + off, sizeof(got) - off, "%s%s", i ? " " : "", fx.events[i]);
    }
    pthread_mutex_unlock(&fx.mu);
    assert_string_equal(got, want);
}

/* event_at: the index of event ev, or -1. */
static int event_at(const char *ev)
{
    int at = -1;

    pthread_mutex_lock(&fx.mu);
    for (size_t i = 0; i < fx.n_events && at < 0; i++) {
        if (strcmp(fx.events[i], ev) == 0) {
            at = (int)i;
        }
    }
    pthread_mutex_unlock(&fx.mu);
    return at;
}

/* events_match: writes and answers run on two threads, so their events
 * interleave; what is promised is checked: the writes, the answers and the
 * deletions each in this order (want_*: joined by spaces), every answer
 * after its own write, every deletion after every answer. */
static void events_match(const char *want_w, const char *want_a, const char *want_d)
{
    char got[3][MAX_EVENTS * 4] = {"", "", ""};
    size_t off[3] = {0, 0, 0};
    int last_a = -1, first_d = -1;

    pthread_mutex_lock(&fx.mu);
    for (size_t i = 0; i < fx.n_events; i++) {
        const char *ev = fx.events[i];
        int k = ev[0] == 'w' ? 0 : ev[0] == 'a' ? 1 : 2;
        off[k] += (size_t)snprintf(got[k] + off[k], sizeof(got[k]) - off[k], "%s%s", off[k] ? " " : "", ev);
        if (k == 1) {
            last_a = (int)i;
        } else if (k == 2 && first_d < 0) {
            first_d = (int)i;
        }
    }
    pthread_mutex_unlock(&fx.mu);
    assert_string_equal(got[0], want_w);
    assert_string_equal(got[1], want_a);
    assert_string_equal(got[2], want_d);
    for (const char *a = strchr(got[1], 'a'); a != NULL; a = strchr(a + 1, 'a')) {
        char w[32], an[32];
        size_t n = strcspn(a, " ");
        snprintf(an, sizeof(an), "%.*s", (int)n, a);
        snprintf(w, sizeof(w), "w%.*s", (int)n - 1, a + 1);
        if (event_at(w) >= 0 && event_at(an) < event_at(w)) {
            fail_msg("%s came before %s", an, w);
        }
    }
    if (first_d >= 0 && first_d < last_a) {
        fail_msg("a deletion came before an answer of the rounds before it");
    }
}

/* ---- calls from client threads ------------------------------------------------- */

typedef struct client_call {
    uint64_t tag;  /* the request's reported, echoed as acked_seq */
    size_t points; /* its weight */
    uint32_t timeout_ms;
    pthread_t thread;
    int rv;
    uint64_t acked;
    tr_err err;
} client_call;

static void *call_main(void *arg)
{
    client_call *c = arg;
    Troupe__V1__ReportMetricsRequest req = TROUPE__V1__REPORT_METRICS_REQUEST__INIT;
    Troupe__V1__MetricPoint pts[10], *pp[10];
    ProtobufCMessage *rep = NULL;

    for (size_t i = 0; i < c->points && i < 10; i++) {
        troupe__v1__metric_point__init(&pts[i]);
        pts[i].seq = i + 1;
        pts[i].name = "loss";
        pp[i] = &pts[i];
    }
    req.n_points = c->points;
    req.points = pp;
    req.reported = c->tag;
    c->rv = tr_rpc_client_call(fx.cli, METHOD, &req.base, &troupe__v1__report_metrics_reply__descriptor, &rep,
                               c->timeout_ms, 0, &c->err);
    if (c->rv == TROUPE_OK) {
        c->acked = ((Troupe__V1__ReportMetricsReply *)rep)->acked_seq;
        protobuf_c_message_free_unpacked(rep, NULL);
    }
    return NULL;
}

/* send_call starts a call and, unless it is to be refused, waits until the queue
 * took it, so that calls queue in the order sent. */
static void send_call(client_call *c, uint64_t tag, size_t points, uint32_t timeout_ms, int refused)
{
    size_t before = tr_rq_submitted(fx.q);

    memset(c, 0, sizeof(*c));
    c->tag = tag;
    c->points = points;
    c->timeout_ms = timeout_ms;
    assert_int_equal(pthread_create(&c->thread, NULL, call_main, c), 0);
    if (!refused) {
        wait_until(submitted_is, before + 1, "the call was queued");
    }
}

static void expect_ok(client_call *c)
{
    pthread_join(c->thread, NULL);
    TR_ASSERT_OK(c->rv, &c->err);
    assert_int_equal(c->acked, c->tag);
}

/* ---- the cases ------------------------------------------------------------------ */

/* A call is answered only after write returned for its round: while the
 * writer is held inside write, the call stays unanswered. */
static void answer_after_write(void **state)
{
    client_call a, b;

    (void)state;
    fx_start();
    set_hold(1);
    send_call(&a, 1, 2, 20000, 0);
    wait_in_write();
    send_call(&b, 2, 2, 20000, 0); /* the next round */
    tr_sleep_ms(200);              /* time enough for a wrong early answer to show */
    events_are("");
    set_hold(0);
    expect_ok(&a);
    expect_ok(&b);
    events_match("w1 w2", "a1 a2", "");
    assert_int_equal(fx.answered_early, 0);
    assert_int_equal(tr_rq_weight(fx.q), 0);
    assert_int_equal(tr_rq_submitted(fx.q), 2);
    fx_stop();
}

static void *let_answer_go(void *arg)
{
    (void)arg;
    tr_sleep_ms(300); /* stop is inside tr_rpc_server_stop by then */
    pthread_mutex_lock(&fx.mu);
    fx.hold_after_reply = 0;
    pthread_cond_broadcast(&fx.cv);
    pthread_mutex_unlock(&fx.mu);
    return NULL;
}

/* The server's stop waits for the queue's reference: the answerer answers a
 * call and releases it a moment later, and a stop that comes in between
 * (the caller already has its reply) must not free the call under it. The
 * answerer is held between the two; stop returns only after it went on. */
static void stop_waits_for_release(void **state)
{
    client_call a;
    pthread_t t;
    int returned;

    (void)state;
    fx_start();
    pthread_mutex_lock(&fx.mu);
    fx.hold_after_reply = 1;
    pthread_mutex_unlock(&fx.mu);
    send_call(&a, 1, 1, 20000, 0);
    expect_ok(&a);
    wait_flag(&fx.after_reply, "the answerer answered and waits before the release");
    assert_int_equal(pthread_create(&t, NULL, let_answer_go, NULL), 0);
    tr_rpc_client_close(fx.cli);
    fx.cli = NULL;
    tr_rpc_server_stop(fx.srv);
    fx.srv = NULL;
    pthread_mutex_lock(&fx.mu);
    returned = fx.answer_returned;
    pthread_mutex_unlock(&fx.mu);
    pthread_join(t, NULL);
    assert_int_equal(returned, 1); /* the call was released before stop freed it */
    fx_stop();
}

/* The queue holds at most max_weight: the call that does not fit is refused
 * with full_code and the message naming what waits; what fits exactly is
 * taken; a weightless call always fits. */
static void bound(void **state)
{
    client_call a, b, c, d, e, f;

    (void)state;
    fx_start();
    set_hold(1);
    send_call(&a, 1, 1, 20000, 0);
    wait_in_write(); /* a is taken: the queue is empty again */
    wait_until(weight_is, 0, "the round was taken");
    send_call(&b, 2, 4, 20000, 0);
    send_call(&c, 3, 4, 20000, 0);
    assert_int_equal(tr_rq_weight(fx.q), 8);
    send_call(&d, 4, 3, 20000, 1); /* 8 + 3 > 10 */
    pthread_join(d.thread, NULL);
    TR_ASSERT_FAILS(d.rv, TROUPE_RESOURCE_EXHAUSTED, &d.err,
                    "the head's test writer is behind (8 points queued): try later");
    send_call(&e, 5, 2, 20000, 0); /* 8 + 2 = 10 fits */
    assert_int_equal(tr_rq_weight(fx.q), 10);
    send_call(&f, 6, 0, 20000, 0);
    assert_int_equal(tr_rq_submitted(fx.q), 5); /* d was not counted */
    set_hold(0);
    expect_ok(&a);
    expect_ok(&b);
    expect_ok(&c);
    expect_ok(&e);
    expect_ok(&f);
    events_match("w1 w2 w3 w5 w6", "a1 a2 a3 a5 a6", "");
    assert_int_equal(tr_rq_weight(fx.q), 0);
    fx_stop();
}

/* A queued call whose deadline passes is answered DEADLINE_EXCEEDED, leaves
 * the queue (its weight with it) and is never written; one the writer has
 * taken is waited for, and answered after its write (the server ignores it). */
static void expiry(void **state)
{
    client_call a, b, c;

    (void)state;
    fx_start();
    set_hold(1);
    send_call(&a, 1, 1, 1500, 0); /* taken, then expires while written (after b) */
    wait_in_write();
    send_call(&b, 2, 3, 300, 0); /* queued, expires there */
    send_call(&c, 3, 2, 20000, 0);
    assert_int_equal(tr_rq_weight(fx.q), 5);
    pthread_join(b.thread, NULL);
    assert_int_equal(b.rv, TROUPE_DEADLINE_EXCEEDED);
    wait_until(weight_is, 2, "the expired call left the queue");
    pthread_join(a.thread, NULL);
    assert_int_equal(a.rv, TROUPE_DEADLINE_EXCEEDED);
    set_hold(0);
    expect_ok(&c);
    events_match("w1 w3", "a1 a3", ""); /* 2 never written */
    fx_stop();
}

/* A failed write answers every call of its round with its status. */
static void failed_round(void **state)
{
    client_call a, b, c;

    (void)state;
    fx_start();
    set_hold(1);
    send_call(&a, 1, 1, 20000, 0);
    wait_in_write();
    send_call(&b, 2, 1, 20000, 0);
    send_call(&c, 3, 1, 20000, 0);
    pthread_mutex_lock(&fx.mu);
    fx.fail_writes = 1;
    pthread_mutex_unlock(&fx.mu);
    set_hold(0);
    pthread_join(a.thread, NULL);
    pthread_join(b.thread, NULL);
    pthread_join(c.thread, NULL);
    TR_ASSERT_FAILS(a.rv, TROUPE_UNAVAILABLE, &a.err, "could not save: disk gone");
    TR_ASSERT_FAILS(b.rv, TROUPE_UNAVAILABLE, &b.err, "could not save: disk gone");
    TR_ASSERT_FAILS(c.rv, TROUPE_UNAVAILABLE, &c.err, "could not save: disk gone");
    events_are("");
    fx_stop();
}

/* Deletions go to the service after the round taken with them (a report
 * queued before a deletion is written first), once per job, and close runs
 * what is left before it returns. */
static void deletions(void **state)
{
    client_call a, b;

    (void)state;
    fx_start();
    set_hold(1);
    send_call(&a, 1, 1, 20000, 0);
    wait_in_write();
    send_call(&b, 2, 1, 20000, 0);
    assert_int_equal(tr_rq_delete(fx.q, 7), 0);
    assert_int_equal(tr_rq_delete(fx.q, 9), 0);
    assert_int_equal(tr_rq_delete(fx.q, 7), 0); /* once */
    set_hold(0);
    expect_ok(&a);
    expect_ok(&b);
    tr_rpc_client_close(fx.cli);
    fx.cli = NULL;
    tr_rpc_server_stop(fx.srv);
    fx.srv = NULL;
    assert_int_equal(tr_rq_delete(fx.q, 11), 0);
    tr_rq_close(fx.q); /* runs the deletion of 11 before it returns */
    fx.q = NULL;
    events_match("w1 w2", "a1 a2", "d7 d9 d11");
    fx_stop();
}

/* The writer writes the next round while the answerer answers the last
 * one, and runs at most one round ahead: with the answer of 1 held, 2 is
 * written, 3 is not taken until 1 is answered (2 waits for the answerer). */
static void pipelined(void **state)
{
    client_call a, b, c;

    (void)state;
    fx_start();
    set_hold_answer(1);
    send_call(&a, 1, 1, 20000, 0);
    wait_flag(&fx.in_answer, "the answerer started on round 1");
    send_call(&b, 2, 1, 20000, 0);
    wait_until(weight_is, 0, "round 2 was taken");
    for (int64_t end = tr_now_ms() + WAIT_MS; event_at("w2") < 0;) {
        if (tr_now_ms() > end) {
            fail_msg("round 2 was not written while round 1 was answered");
        }
        tr_sleep_ms(5);
    }
    send_call(&c, 3, 1, 20000, 0);
    tr_sleep_ms(200); /* time enough for a wrong third round to show */
    events_are("w1 w2");
    assert_int_equal(tr_rq_weight(fx.q), 1); /* 3 waits in the queue */
    set_hold_answer(0);
    expect_ok(&a);
    expect_ok(&b);
    expect_ok(&c);
    events_match("w1 w2 w3", "a1 a2 a3", "");
    assert_true(event_at("w3") > event_at("a1"));
    assert_int_equal(fx.answered_early, 0);
    fx_stop();
}

/* nice_is runs one report through a queue opened with opts.nice = add and
 * checks the nice its write and answer ran at. */
static void nice_is(int add, int want)
{
    client_call a;

    fx_start_opts(&(tr_rq_opts){.nice = add});
    send_call(&a, 1, 1, 20000, 0);
    expect_ok(&a);
    pthread_mutex_lock(&fx.mu);
    assert_int_equal(fx.write_nice, want);
    assert_int_equal(fx.answer_nice, want);
    pthread_mutex_unlock(&fx.mu);
    fx_stop();
}

/* opts.nice raises the writer's and the answerer's own nice by that much
 * (capped at 19) and no other thread's; 0 leaves them at the process's. */
static void thread_nice(void **state)
{
    int base;

    (void)state;
    errno = 0;
    base = getpriority(PRIO_PROCESS, 0);
    assert_int_equal(errno, 0);
    if (base + 3 > 19) {
        TR_SKIP("the test runs at nice %d: no room to raise its threads' nice by 3", base);
    }
    nice_is(3, base + 3);
    assert_int_equal(getpriority(PRIO_PROCESS, 0), base); /* this thread kept its own */
    nice_is(0, base);
    nice_is(19, 19);
    assert_int_equal(getpriority(PRIO_PROCESS, 0), base);
}

/* tr_ids: a set, zeroed is empty, fini empties it. */
static void ids(void **state)
{
    tr_ids s = {0};

    (void)state;
    assert_false(tr_ids_has(&s, 1));
    for (uint64_t i = 1; i <= 40; i++) { /* past the first allocation */
        assert_int_equal(tr_ids_add(&s, i), 0);
        assert_int_equal(tr_ids_add(&s, i), 0);
    }
    assert_int_equal(s.n, 40);
    assert_true(tr_ids_has(&s, 1) && tr_ids_has(&s, 40));
    assert_false(tr_ids_has(&s, 41));
    tr_ids_fini(&s);
    assert_int_equal(s.n, 0);
    assert_null(s.v);
    tr_rq_close(NULL); /* a no-op */
}

/* db_bound: a series store opened with a size bound stops at it, and the
 * write past it is RESOURCE_EXHAUSTED (as on a full disk), not UNAVAILABLE,
 * with what to do: the file, its bound's setting and value, troupe delete.
 * Before the series store, a full file met by a statement run whole (BEGIN,
 * COMMIT, an INSERT) said only "database or disk is full" (re-plant: map
 * tr_series_exec's errors with tr_db_status alone). */
static const char *const bounded_tables[] = {"t", NULL};
static const tr_series_def bounded_db = {
    .name = "bounded",
    .rows = "rows",
    .file = "bounded.db",
    .bound = "bounded_max_bytes",
    .schema = "CREATE TABLE IF NOT EXISTS t(job INTEGER, x BLOB);",
    .job_tables = bounded_tables,
};

static void db_bound(void **state)
{
    char dir[320];
    tr_series s;
    tr_err err = {0};
    struct stat st;
    int rv = TROUPE_OK, i;

    (void)state;
    tr_test_tmpdir(dir, sizeof(dir), "rqdb"); /* under $TMPDIR, removed at exit */
    TR_ASSERT_OK(tr_series_open(&s, &bounded_db, dir, 0, 65536, &err), &err);
    for (i = 0; i < 1000 && rv == TROUPE_OK; i++) {
        rv = tr_series_begin(&s, &err);
        if (rv == TROUPE_OK) {
            rv = tr_series_exec(&s, "INSERT INTO t VALUES(1, zeroblob(1024));", &err);
        }
        rv = tr_series_commit(&s, rv, &err);
    }
    assert_int_equal(rv, TROUPE_RESOURCE_EXHAUSTED);
    assert_true(i > 10); /* it took rows before the bound */
    if (strstr(err.msg, s.path) == NULL || strstr(err.msg, "bounded.db is bounded by bounded_max_bytes=65536") == NULL ||
        strstr(err.msg, "troupe delete") == NULL) {
        fail_msg("a full series store should name its file, its bound and what to do: %s", err.msg);
    }
    assert_int_equal(tr_series_exec(&s, "PRAGMA wal_checkpoint(TRUNCATE);", &err), TROUPE_OK);
    assert_int_equal(stat(s.path, &st), 0);
    assert_true(st.st_size <= 65536);
    tr_series_close(&s);
}

static int count_rows(tr_series *s, int job)
{
    sqlite3_stmt *q = NULL;
    int n = -1;
    char sql[64];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM t WHERE job = %d", job);
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW) {
        n = sqlite3_column_int(q, 0);
    }
    sqlite3_finalize(q);
    return n;
}

/* db_delete_jobs: a deleted job's rows go from every job table, in one
 * transaction, and only its. */
static void db_delete_jobs(void **state)
{
    char dir[320];
    tr_series s;
    tr_err err = {0};
    tr_ids ids = {0};

    (void)state;
    tr_test_tmpdir(dir, sizeof(dir), "rqdel");
    TR_ASSERT_OK(tr_series_open(&s, &bounded_db, dir, 0, 0, &err), &err);
    TR_ASSERT_OK(tr_series_exec(&s, "INSERT INTO t VALUES(1, 'a'), (2, 'b'), (1, 'c'), (3, 'd');", &err), &err);
    assert_int_equal(tr_ids_add(&ids, 1), 0);
    assert_int_equal(tr_ids_add(&ids, 3), 0);
    TR_ASSERT_OK(tr_series_delete_jobs(&s, &ids, &err), &err);
    assert_int_equal(count_rows(&s, 1), 0);
    assert_int_equal(count_rows(&s, 3), 0);
    assert_int_equal(count_rows(&s, 2), 1);
    tr_ids_fini(&ids);
    tr_series_close(&s);
}

/* db_status: one mapping of SQLite's codes for the head's three stores. */
static void db_status(void **state)
{
    (void)state;
    assert_int_equal(tr_db_status(SQLITE_FULL), TROUPE_RESOURCE_EXHAUSTED);
    assert_int_equal(tr_db_status(SQLITE_NOMEM), TROUPE_RESOURCE_EXHAUSTED);
    assert_int_equal(tr_db_status(SQLITE_BUSY_SNAPSHOT), TROUPE_UNAVAILABLE); /* extended codes too */
    assert_int_equal(tr_db_status(SQLITE_LOCKED), TROUPE_UNAVAILABLE);
    assert_int_equal(tr_db_status(SQLITE_CORRUPT), TROUPE_DATA_LOSS);
    assert_int_equal(tr_db_status(SQLITE_NOTADB), TROUPE_DATA_LOSS);
    assert_int_equal(tr_db_status(SQLITE_IOERR_WRITE), TROUPE_INTERNAL);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(answer_after_write), cmocka_unit_test(bound),     cmocka_unit_test(expiry),
        cmocka_unit_test(failed_round),       cmocka_unit_test(deletions), cmocka_unit_test(pipelined),
        cmocka_unit_test(thread_nice),        cmocka_unit_test(ids),       cmocka_unit_test(stop_waits_for_release),
        cmocka_unit_test(db_bound),           cmocka_unit_test(db_status),  cmocka_unit_test(db_delete_jobs),
    };
    return TR_TEST_MAIN("unit.server.report_queue", tests, argc, argv);
}
