/* tokens_rpc.c - CreateToken and RevokeToken (admin): check the request,
 * mint or revoke through the credential store (core/auth.c), say what was
 * done. */
#include <inttypes.h>
#include <string.h>

#include "auth.h"
#include "handlers.h"
#include "log.h"
#include "names.h"
#include "troupe/v1/auth.pb-c.h"

void tr_head_create_token(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__CreateTokenRequest *r =
        (Troupe__V1__CreateTokenRequest *)tr_rpc_unpack(call, &troupe__v1__create_token_request__descriptor);
    Troupe__V1__CreateTokenReply rep = TROUPE__V1__CREATE_TOKEN_REPLY__INIT;
    char token[TR_AUTH_TOKEN_MAX];
    unsigned scope;
    tr_auth_minted c;
    tr_err err;

    if (r == NULL) {
        return;
    }
    scope = tr_auth_scope_of(r->scope);
    if (scope == 0) {
        tr_rpc_reply_error(call, TROUPE_INVALID_ARGUMENT, "scope must be user, node or admin");
    } else if (scope != TR_SCOPE_NODE && ((r->node != NULL && r->node[0] != '\0') || r->max_nodes != 0)) {
        tr_rpc_reply_error(call, TROUPE_INVALID_ARGUMENT, "node and max_nodes are for node credentials only");
    } else if (r->node != NULL && r->node[0] != '\0' &&
               tr_node_name_check("node", r->node, &err) != TROUPE_OK) {
        tr_rpc_reply_error(call, err.code, "%s", err.msg);
    } else if (r->node != NULL && r->node[0] != '\0' && r->max_nodes > 1) {
        tr_rpc_reply_error(call, TROUPE_INVALID_ARGUMENT,
                           "a credential bound to one node (node) has max_nodes 1");
    } else if (r->ttl_s > 10ull * 365 * 24 * 3600) {
        tr_rpc_reply_error(call, TROUPE_INVALID_ARGUMENT, "ttl of %" PRIu64 " s is over 10 years", r->ttl_s);
    } else if (h->auth == NULL) {
        tr_rpc_reply_error(call, TROUPE_FAILED_PRECONDITION,
                           "the head runs without auth (no token); minted credentials would mean nothing");
    } else if (tr_auth_mint(h->auth, scope, r->node, r->max_nodes, r->ttl_s, token, sizeof(token), &c, &err) !=
               TROUPE_OK) {
        tr_rpc_reply_error(call, err.code, "%s", err.msg);
    } else {
        TR_LOG(TR_LOG_NOTICE,
               "credential created id=%" PRIu64 " scope=%s expires_ms=%" PRId64 " node=%s max_nodes=%" PRIu32,
               c.id, tr_rpc_scope_name(scope), c.expires_ms, c.node[0] ? c.node : "-", c.max_nodes);
        rep.id = c.id;
        rep.token = token;
        rep.expires_ms = c.expires_ms;
        tr_rpc_reply(call, &rep.base);
    }
    memset(token, 0, sizeof(token));
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

void tr_head_revoke_token(tr_rpc_call *call, void *user)
{
    tr_head *h = user;
    Troupe__V1__RevokeTokenRequest *r =
        (Troupe__V1__RevokeTokenRequest *)tr_rpc_unpack(call, &troupe__v1__revoke_token_request__descriptor);
    Troupe__V1__RevokeTokenReply rep = TROUPE__V1__REVOKE_TOKEN_REPLY__INIT;
    tr_auth *a = h->auth;
    int rv;
    tr_err err;

    if (r == NULL) {
        return;
    }
    if (a == NULL) {
        tr_rpc_reply_error(call, TROUPE_FAILED_PRECONDITION, "the head runs without auth (no token)");
        goto out;
    }
    rv = tr_auth_revoke(a, r->id, &err);
    if (rv != TROUPE_OK) {
        tr_rpc_reply_error(call, rv, "%s", err.msg);
    } else {
        TR_LOG(TR_LOG_NOTICE, "credential revoked id=%" PRIu64, r->id);
        rep.revoked = 1;
        tr_rpc_reply(call, &rep.base);
    }
out:
    protobuf_c_message_free_unpacked(&r->base, NULL);
}
