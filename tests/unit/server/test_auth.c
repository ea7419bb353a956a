/* test_auth.c - unit.server.auth: minted credentials (server/auth.c).
 *
 * Each nng thread remembers the minted credential it verified last, so an
 * agent's calls skip the SHA-256; a revoke must still refuse that credential
 * at once on every thread. A real head in-process with an admin token; calls
 * from several connections at once, so that many of the head's threads have
 * verified (and remember) the credential before it is revoked. */
#include <pthread.h>

#include "head.h"
#include "head_fixture.h"
#include "rpc.h"
#include "test_helpers.h"

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

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(revoke_forgets_everywhere),
    };
    return TR_TEST_MAIN("unit.server.auth", tests, argc, argv);
}
