/* worker_store.c - the job's key-value store from a worker (troupe/worker.h:
 * troupe_worker_store_*), one Store* call to the head each (server/kv.c).
 *
 * A wait is one long poll whose RPC deadline is the wait plus a margin, so
 * the head's DEADLINE_EXCEEDED naming the keys arrives before the transport
 * would give up. Calls whose repetition changes nothing are marked
 * idempotent and so are resent to a head that restarted; add and
 * compare_set are not: a reply lost on the way would apply them twice. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker_int.h"

#define RPC_MARGIN_MS 5000
#define CALL_MS 30000 /* calls that do not wait */

static const char *space(const troupe_worker_ctx *w, const char *comm)
{
    return comm != NULL && comm[0] != '\0' ? comm : w->group;
}

/* call sends one Store* request for keys (n of them) and returns the reply
 * in *rep (free with protobuf_c_message_free_unpacked). */
static int call(troupe_worker_ctx *w, const char *method, Troupe__V1__StoreRequest *req, const char *comm,
                const char *const *keys, size_t n, uint32_t wait_ms, unsigned flags,
                Troupe__V1__StoreReply **rep, tr_err *e)
{
    Troupe__V1__WorkerRef ref;
    char full[64];

    *rep = NULL;
    for (size_t i = 0; i < n; i++) {
        if (keys == NULL || keys[i] == NULL) {
            return tr_err_set(e, TROUPE_INVALID_ARGUMENT, "store key %zu is NULL", i);
        }
    }
    tr_wk_ref(w, &ref);
    req->from = &ref;
    req->comm = (char *)space(w, comm);
    req->keys = (char **)keys;
    req->n_keys = n;
    req->wait_ms = wait_ms;
    snprintf(full, sizeof(full), "troupe.v1.Head/%s", method);
    return tr_rpc_client_call(w->rpc, full, &req->base, &troupe__v1__store_reply__descriptor,
                              (ProtobufCMessage **)rep, wait_ms ? wait_ms + RPC_MARGIN_MS : CALL_MS, flags,
                              e);
}

/* copy_value hands out the reply's first value as a malloc'ed buffer. */
static int copy_value(const Troupe__V1__StoreReply *rep, void **value, size_t *len, tr_err *e)
{
    if (rep->n_values < 1) {
        return tr_err_set(e, TROUPE_INTERNAL, "the head's store reply carries no value");
    }
    if ((*value = malloc(rep->values[0].len ? rep->values[0].len : 1)) == NULL) {
        return tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "out of memory for a value of %zu bytes",
                          rep->values[0].len);
    }
    if (rep->values[0].len > 0) {
        memcpy(*value, rep->values[0].data, rep->values[0].len);
    }
    *len = rep->values[0].len;
    return TROUPE_OK;
}

static troupe_status done(troupe_error *err, tr_err *e, int rv, Troupe__V1__StoreReply *rep)
{
    if (rep != NULL) {
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    return tr_client_finish(err, e, rv);
}

TROUPE_API troupe_status troupe_worker_store_set(troupe_worker_ctx *w, const char *comm, const char *key,
                                                 const void *value, size_t len, troupe_error *err)
{
    Troupe__V1__StoreRequest req = TROUPE__V1__STORE_REQUEST__INIT;
    Troupe__V1__StoreReply *rep;
    tr_err e;
    int rv;

    if (value == NULL && len > 0) {
        return done(err, &e,
                    tr_err_set(&e, TROUPE_INVALID_ARGUMENT, "store set: value is NULL, len %zu", len), NULL);
    }
    req.value.data = (uint8_t *)value;
    req.value.len = len;
    rv = call(w, "StoreSet", &req, comm, &key, 1, 0, TR_RPC_IDEMPOTENT, &rep, &e);
    return done(err, &e, rv, rep);
}

TROUPE_API troupe_status troupe_worker_store_get(troupe_worker_ctx *w, const char *comm, const char *key,
                                                 uint32_t wait_ms, void **value, size_t *len,
                                                 troupe_error *err)
{
    Troupe__V1__StoreRequest req = TROUPE__V1__STORE_REQUEST__INIT;
    Troupe__V1__StoreReply *rep;
    tr_err e;
    int rv;

    *value = NULL;
    *len = 0;
    rv =
        call(w, "StoreGet", &req, comm, &key, 1, wait_ms ? wait_ms : w->wait_ms, TR_RPC_IDEMPOTENT, &rep, &e);
    if (rv == TROUPE_OK) {
        rv = copy_value(rep, value, len, &e);
    }
    return done(err, &e, rv, rep);
}

TROUPE_API troupe_status troupe_worker_store_add(troupe_worker_ctx *w, const char *comm, const char *key,
                                                 int64_t amount, int64_t *value, troupe_error *err)
{
    Troupe__V1__StoreRequest req = TROUPE__V1__STORE_REQUEST__INIT;
    Troupe__V1__StoreReply *rep;
    tr_err e;
    int rv;

    if (value != NULL) {
        *value = 0;
    }
    req.amount = amount;
    rv = call(w, "StoreAdd", &req, comm, &key, 1, 0, 0, &rep, &e);
    if (rv == TROUPE_OK && value != NULL) {
        *value = rep->number;
    }
    return done(err, &e, rv, rep);
}

TROUPE_API troupe_status troupe_worker_store_compare_set(troupe_worker_ctx *w, const char *comm,
                                                         const char *key, const void *expected,
                                                         size_t exp_len, const void *desired, size_t des_len,
                                                         void **value, size_t *len, troupe_error *err)
{
    Troupe__V1__StoreRequest req = TROUPE__V1__STORE_REQUEST__INIT;
    Troupe__V1__StoreReply *rep;
    tr_err e;
    int rv;

    if (value != NULL) {
        *value = NULL;
    }
    if (len != NULL) {
        *len = 0;
    }
    if ((expected == NULL && exp_len > 0) || (desired == NULL && des_len > 0)) {
        return done(err, &e, tr_err_set(&e, TROUPE_INVALID_ARGUMENT, "store compare_set: NULL bytes"), NULL);
    }
    req.expected.data = (uint8_t *)expected;
    req.expected.len = exp_len;
    req.value.data = (uint8_t *)desired;
    req.value.len = des_len;
    rv = call(w, "StoreCompareSet", &req, comm, &key, 1, 0, 0, &rep, &e);
    if (rv == TROUPE_OK && value != NULL) {
        size_t n;
        rv = copy_value(rep, value, len != NULL ? len : &n, &e);
    }
    return done(err, &e, rv, rep);
}

TROUPE_API troupe_status troupe_worker_store_wait(troupe_worker_ctx *w, const char *comm,
                                                  const char *const *keys, size_t n, uint32_t wait_ms,
                                                  troupe_error *err)
{
    Troupe__V1__StoreRequest req = TROUPE__V1__STORE_REQUEST__INIT;
    Troupe__V1__StoreReply *rep;
    tr_err e;
    int rv = call(w, "StoreWait", &req, comm, keys, n, wait_ms ? wait_ms : w->wait_ms, TR_RPC_IDEMPOTENT,
                  &rep, &e);
    return done(err, &e, rv, rep);
}

TROUPE_API troupe_status troupe_worker_store_check(troupe_worker_ctx *w, const char *comm,
                                                   const char *const *keys, size_t n, int *present,
                                                   troupe_error *err)
{
    Troupe__V1__StoreRequest req = TROUPE__V1__STORE_REQUEST__INIT;
    Troupe__V1__StoreReply *rep;
    tr_err e;
    int rv;

    *present = 0;
    rv = call(w, "StoreCheck", &req, comm, keys, n, 0, TR_RPC_IDEMPOTENT, &rep, &e);
    if (rv == TROUPE_OK) {
        *present = rep->present;
    }
    return done(err, &e, rv, rep);
}

TROUPE_API troupe_status troupe_worker_store_delete(troupe_worker_ctx *w, const char *comm, const char *key,
                                                    int *deleted, troupe_error *err)
{
    Troupe__V1__StoreRequest req = TROUPE__V1__STORE_REQUEST__INIT;
    Troupe__V1__StoreReply *rep;
    tr_err e;
    int rv;

    if (deleted != NULL) {
        *deleted = 0;
    }
    rv = call(w, "StoreDelete", &req, comm, &key, 1, 0, TR_RPC_IDEMPOTENT, &rep, &e);
    if (rv == TROUPE_OK && deleted != NULL) {
        *deleted = rep->present;
    }
    return done(err, &e, rv, rep);
}

TROUPE_API troupe_status troupe_worker_store_num_keys(troupe_worker_ctx *w, const char *comm, uint64_t *n,
                                                      troupe_error *err)
{
    Troupe__V1__StoreRequest req = TROUPE__V1__STORE_REQUEST__INIT;
    Troupe__V1__StoreReply *rep;
    tr_err e;
    int rv;

    *n = 0;
    rv = call(w, "StoreNumKeys", &req, comm, NULL, 0, 0, TR_RPC_IDEMPOTENT, &rep, &e);
    if (rv == TROUPE_OK) {
        *n = (uint64_t)rep->number;
    }
    return done(err, &e, rv, rep);
}
