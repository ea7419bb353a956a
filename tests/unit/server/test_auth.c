/* test_auth.c - unit.server.auth: minted and worker credentials
 * (server/auth.c).
 *
 * Each nng thread remembers the minted credential it verified last, so an
 * agent's calls skip the SHA-256; a revoke must still refuse that credential
 * at once on every thread. A real head in-process with an admin token; calls
 * from several connections at once, so that many of the head's threads have
 * verified (and remember) the credential before it is revoked. */
#include <pthread.h>
#include <unistd.h>

#include "auth.h"
#include "head.h"
#include "head_fixture.h"
#include "jobs.h"
#include "records.h"
#include "rpc.h"
#include "test_helpers.h"
#include "troupe/client.h"
#include "util.h"

#define ADMIN "unit-admin-secret"
#define CLIENTS 8
#define CALLS 25

typedef struct pinger {
    const char *url, *token;
    int ok, unauthenticated, other;
} pinger;

static void head_start(tr_head *h, char *dir, size_t size, char *url, size_t url_size)
{
    tr_err err;
    tr_fixture_head_config(h, dir, size, url, url_size, "auth");
    h->cfg.token = strdup(ADMIN);
    TR_ASSERT_OK(tr_head_start(h, &err), &err);
}

/* ping_many: CALLS pings on a connection of its own; counts the outcomes
 * (asserts nothing: it runs on a helper thread). */
static void *ping_many(void *arg)
{
    pinger *p = arg;
    tr_rpc_client_opts o = {.url = p->url, .token = p->token};
    tr_rpc_client *c = NULL;
    tr_err err;

    if (tr_rpc_client_open(&o, &c, &err) != TROUPE_OK) {
        p->other = CALLS;
        return NULL;
    }
    for (int i = 0; i < CALLS; i++) {
        Troupe__V1__PingRequest req = TROUPE__V1__PING_REQUEST__INIT;
        ProtobufCMessage *rep = NULL;
        int rv = tr_rpc_client_call(c, "troupe.v1.Head/Ping", &req.base, &troupe__v1__ping_reply__descriptor, &rep,
                                    5000, 0, &err);
        protobuf_c_message_free_unpacked(rep, NULL);
        rv == TROUPE_OK ? p->ok++ : rv == TROUPE_UNAUTHENTICATED ? p->unauthenticated++ : p->other++;
    }
    tr_rpc_client_close(c);
    return NULL;
}

/* ping_all runs CLIENTS pingers at once with token; returns how many calls
 * came back OK and UNAUTHENTICATED (none may end otherwise). */
static void ping_all(const char *url, const char *token, int *ok, int *unauthenticated)
{
    pthread_t t[CLIENTS];
    pinger p[CLIENTS];

    for (int i = 0; i < CLIENTS; i++) {
        p[i] = (pinger){.url = url, .token = token};
        assert_int_equal(pthread_create(&t[i], NULL, ping_many, &p[i]), 0);
    }
    *ok = *unauthenticated = 0;
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(p[i].other, 0);
        *ok += p[i].ok;
        *unauthenticated += p[i].unauthenticated;
    }
}

static Troupe__V1__CreateTokenReply *mint(tr_rpc_client *admin, const char *scope)
{
    Troupe__V1__CreateTokenRequest req = TROUPE__V1__CREATE_TOKEN_REQUEST__INIT;
    ProtobufCMessage *rep = NULL;
    tr_err err;

    req.scope = (char *)scope;
    TR_ASSERT_OK(tr_rpc_client_call(admin, "troupe.v1.Head/CreateToken", &req.base,
                                    &troupe__v1__create_token_reply__descriptor, &rep, 10000, 0, &err),
                 &err);
    return (Troupe__V1__CreateTokenReply *)rep;
}

static void revoke_forgets_everywhere(void **state)
{
    char dir[256], url[300];
    tr_head h;
    tr_rpc_client_opts ao;
    tr_rpc_client *admin = NULL;
    Troupe__V1__CreateTokenReply *u, *n;
    Troupe__V1__RevokeTokenRequest rq = TROUPE__V1__REVOKE_TOKEN_REQUEST__INIT;
    ProtobufCMessage *rep = NULL;
    int ok, unauth;
    tr_err err;

    (void)state;
    head_start(&h, dir, sizeof(dir), url, sizeof(url));
    ao = (tr_rpc_client_opts){.url = url, .token = ADMIN};
    TR_ASSERT_OK(tr_rpc_client_open(&ao, &admin, &err), &err);
    u = mint(admin, "user");
    n = mint(admin, "node");

    ping_all(url, u->token, &ok, &unauth);
    assert_int_equal(ok, CLIENTS * CALLS);
    ping_all(url, "tr1.u.1.0000000000000000000000000000000000000000000000000000000000000000", &ok, &unauth);
    assert_int_equal(unauth, CLIENTS * CALLS); /* a wrong secret for a live id */

    rq.id = u->id;
    TR_ASSERT_OK(tr_rpc_client_call(admin, "troupe.v1.Head/RevokeToken", &rq.base,
                                    &troupe__v1__revoke_token_reply__descriptor, &rep, 10000, 0, &err),
                 &err);
    protobuf_c_message_free_unpacked(rep, NULL);
    ping_all(url, u->token, &ok, &unauth);
    if (ok != 0) {
        fail_msg("%d of %d calls with a revoked credential were let in", ok, CLIENTS * CALLS);
    }
    /* Another credential is unaffected (checked in full again, then remembered). */
    ping_all(url, n->token, &ok, &unauth);
    assert_int_equal(ok, CLIENTS * CALLS);

    troupe__v1__create_token_reply__free_unpacked(u, NULL);
    troupe__v1__create_token_reply__free_unpacked(n, NULL);
    tr_rpc_client_close(admin);
    tr_head_stop(&h);
    tr_cfg_free(tr_head_config_table, &h.cfg);
}

/* ---- worker credentials ------------------------------------------------- */

/* head_config_token: the fixture's head with the admin token, in dir (a
 * fresh one when fresh, else the one given: a restart on the same state). */
static void head_start_in(tr_head *h, char *dir, size_t size, char *url, size_t url_size, int fresh)
{
    tr_err err;
    if (fresh) {
        tr_fixture_head_config(h, dir, size, url, url_size, "auth");
    } else {
        memset(h, 0, sizeof(*h));
        TR_ASSERT_OK(tr_cfg_defaults(tr_head_config_table, &h->cfg, &err), &err);
        free(h->cfg.listen);
        free(h->cfg.state_dir);
        h->cfg.listen = strdup(url);
        h->cfg.state_dir = strdup(dir);
        TR_ASSERT_OK(tr_head_rpc_attach(h, &err), &err);
    }
    h->cfg.token = strdup(ADMIN);
    TR_ASSERT_OK(tr_head_start(h, &err), &err);
}

static tr_rpc_client *register_node(const char *url)
{
    Troupe__V1__RegisterNodeRequest req = TROUPE__V1__REGISTER_NODE_REQUEST__INIT;
    Troupe__V1__Gpu g, *gp = &g;
    tr_rpc_client_opts o = {.url = url, .token = ADMIN};
    tr_rpc_client *c = NULL;
    ProtobufCMessage *rep = NULL;
    tr_err err;

    troupe__v1__gpu__init(&g);
    g.model = "H100";
    req.name = req.hostname = "n1";
    req.address = "127.0.0.1";
    req.gpus = &gp;
    req.n_gpus = 1;
    TR_ASSERT_OK(tr_rpc_client_open(&o, &c, &err), &err);
    TR_ASSERT_OK(tr_rpc_client_call(c, "troupe.v1.Head/RegisterNode", &req.base,
                                    &troupe__v1__register_node_reply__descriptor, &rep, 10000, 0, &err),
                 &err);
    protobuf_c_message_free_unpacked(rep, NULL);
    return c;
}

/* An authentication on a thread of its own, so the test can hold h->mu. */
typedef struct authcall {
    tr_head *h;
    const char *token;
    tr_rpc_principal who;
    tr_err err;
    int rv, done;
} authcall;

static void *auth_main(void *arg)
{
    authcall *a = arg;
    a->rv = tr_head_authenticate(a->h, a->token, &a->who, &a->err);
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* auth_locked authenticates token on another thread while this one holds
 * h->mu; fails the test unless the check ends within 2 s, lock still held. */
static int auth_locked(tr_head *h, const char *token, tr_rpc_principal *who, char *msg, size_t size)
{
    authcall a = {.h = h, .token = token};
    pthread_t t;
    int done = 0;

    pthread_mutex_lock(&h->mu);
    assert_int_equal(pthread_create(&t, NULL, auth_main, &a), 0);
    for (int i = 0; i < 200 && !(done = __atomic_load_n(&a.done, __ATOMIC_ACQUIRE)); i++) {
        usleep(10000);
    }
    pthread_mutex_unlock(&h->mu);
    pthread_join(t, NULL);
    if (!done) {
        fail_msg("a worker credential's check waited for h->mu (held 2 s by another thread)");
    }
    *who = a.who;
    snprintf(msg, size, "%s", a.rv == TROUPE_OK ? "" : a.err.msg);
    return a.rv;
}

/* worker_cred writes the credential of job id's worker 0 at its attempt now
 * (plus bump) and returns that attempt. */
static uint32_t worker_cred(tr_head *h, uint64_t id, uint32_t bump, char *buf)
{
    tr_head_job *hj;
    uint32_t attempt;

    pthread_mutex_lock(&h->mu);
    hj = tr_jobs_find(h, id);
    assert_non_null(hj);
    assert_true(hj->j->n_workers == 1);
    attempt = hj->j->workers[0]->attempt + bump;
    tr_auth_worker_credential(h->auth, id, attempt, 0, buf, TR_AUTH_TOKEN_MAX);
    pthread_mutex_unlock(&h->mu);
    return attempt;
}

/* worker_check_without_head_lock: a worker credential is checked without
 * h->mu (its handler takes it; authenticating took it a second time), and
 * the check still follows the job: a group restart (a new attempt) makes
 * the old credential invalid and the new one valid, an ended job ends them
 * all, and after a head restart a recovered job's workers are known again.
 * Re-plant: look the job up under h->mu in check_worker (auth.c), as before:
 * the first check waits for the lock and fails. */
static void worker_check_without_head_lock(void **state)
{
    static const char yaml[] = "name: j\ncluster: {nodes: [1]}\n"
                               "groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sleep, '60']}]\n";
    char dir[256], url[300], cred[TR_AUTH_TOKEN_MAX], old[TR_AUTH_TOKEN_MAX], msg[512];
    tr_head h;
    troupe_client_opts co = {0};
    troupe_client *c = NULL;
    troupe_error terr;
    tr_rpc_client *agent;
    tr_rpc_principal who;
    tr_head_job *hj;
    uint64_t id = 0;
    uint32_t attempt;
    int placed = 0;

    (void)state;
    head_start_in(&h, dir, sizeof(dir), url, sizeof(url), 1);
    agent = register_node(url);
    co.head_url = url;
    co.token = ADMIN;
    co.timeout_ms = 10000;
    assert_int_equal(troupe_client_open(&c, &co, &terr), TROUPE_OK);
    if (troupe_submit_yaml(c, yaml, sizeof(yaml) - 1, "j.yaml", NULL, &id, &terr) != TROUPE_OK) {
        fail_msg("submit: %s: %s", troupe_strerror(terr.code), terr.message);
    }
    for (int i = 0; i < 500 && !placed; i++) {
        pthread_mutex_lock(&h.mu);
        placed = (hj = tr_jobs_find(&h, id)) != NULL && hj->j->n_workers == 1;
        pthread_mutex_unlock(&h.mu);
        usleep(placed ? 0 : 10000);
    }
    if (!placed) {
        fail_msg("job %llu was not placed within 5 s", (unsigned long long)id);
    }

    attempt = worker_cred(&h, id, 0, cred);
    if (auth_locked(&h, cred, &who, msg, sizeof(msg)) != TROUPE_OK) {
        fail_msg("the worker's own credential: %s", msg);
    }
    assert_int_equal(who.scope, TR_SCOPE_WORKER);
    assert_true(who.job_id == id && who.attempt == attempt);
    assert_true(strlen(who.worker) > 0);

    /* A group restart, as the core makes it: a new attempt, the job touched. */
    memcpy(old, cred, sizeof(old));
    pthread_mutex_lock(&h.mu);
    hj = tr_jobs_find(&h, id);
    hj->j->workers[0]->attempt++;
    tr_jobs_touch(&h, hj);
    pthread_mutex_unlock(&h.mu);
    assert_int_equal(auth_locked(&h, old, &who, msg, sizeof(msg)), TROUPE_UNAUTHENTICATED);
    worker_cred(&h, id, 0, cred);
    if (auth_locked(&h, cred, &who, msg, sizeof(msg)) != TROUPE_OK) {
        fail_msg("the worker's credential of its new attempt: %s", msg);
    }

    /* A head restart on the same state: the job is recovered, not changed;
     * its worker's credential is valid (read once under h->mu), then checked
     * without it. */
    troupe_client_close(c);
    tr_rpc_client_close(agent);
    tr_head_stop(&h);
    tr_cfg_free(tr_head_config_table, &h.cfg);
    head_start_in(&h, dir, sizeof(dir), url, sizeof(url), 0);
    {
        tr_rpc_principal p;
        tr_err err;
        TR_ASSERT_OK(tr_head_authenticate(&h, cred, &p, &err), &err);
    }
    if (auth_locked(&h, cred, &who, msg, sizeof(msg)) != TROUPE_OK) {
        fail_msg("the recovered job's worker credential: %s", msg);
    }
    assert_int_equal(auth_locked(&h, old, &who, msg, sizeof(msg)), TROUPE_UNAUTHENTICATED);

    /* The job ends (its state, touched): no credential of it is valid. */
    pthread_mutex_lock(&h.mu);
    hj = tr_jobs_find(&h, id);
    assert_non_null(hj);
    hj->j->state = TROUPE__V1__JOB_STATE__JOB_FAILED;
    tr_jobs_touch(&h, hj);
    pthread_mutex_unlock(&h.mu);
    assert_int_equal(auth_locked(&h, cred, &who, msg, sizeof(msg)), TROUPE_UNAUTHENTICATED);
    assert_non_null(strstr(msg, "no longer valid"));

    tr_head_stop(&h);
    tr_cfg_free(tr_head_config_table, &h.cfg);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(revoke_forgets_everywhere),
        cmocka_unit_test(worker_check_without_head_lock),
    };
    return TR_TEST_MAIN("unit.server.auth", tests, argc, argv);
}
