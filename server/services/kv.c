/* kv.c - the head's key-value store for a job's workers (StoreSet, StoreGet,
 * StoreAdd, StoreCompareSet, StoreWait, StoreCheck, StoreDelete,
 * StoreNumKeys): torch.distributed's TCPStore semantics (kv_state.h), served
 * over each worker's one connection to the head instead of a TCPStore of its
 * own, so a process group needs no MASTER_PORT and no extra listener.
 *
 * Scope. A space of keys belongs to a communicator of a running job (a
 * worker group, or one the job declares) at its epoch, as rendezvous does
 * (rdzv.c): a worker names the communicator ("" = its group), the head
 * resolves it with tr_rdzv_resolve (the worker is of this job at its current
 * attempt), and a group restart moves the epoch, so the restarted group meets
 * an empty space and never reads the old attempt's keys. The old space is
 * dropped then, its waiters answered FAILED_PRECONDITION; every space of a
 * job goes when the job stops running.
 *
 * Bounds: per job, store_max_keys keys and store_max_bytes bytes (keys and
 * values) over all its spaces, from the head's config.
 *
 * Memory only, as TCPStore is: a head restart loses the keys. Waiters get
 * UNAVAILABLE when the head stops and the client's retry takes them to the
 * new head, where the keys must be set again (a torch process group whose
 * store restarted initialises again, as it would after losing its TCPStore).
 *
 * get and wait are long polls: the call is deferred until its keys are set
 * (answered at once by the set) or its deadline, when a timer thread answers
 * DEADLINE_EXCEEDED naming the keys still missing, before the RPC layer's
 * generic expiry would. Everything runs under h->mu. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bgw.h"
#include "jobs.h"
#include "kv.h"
#include "kv_state.h"
#include "log.h"
#include "rdzv_int.h"
#include "util.h"

typedef struct kv_job {
    uint64_t id;
    tr_kv_usage usage;
    tr_kv_space **spaces; /* one per communicator, at its current epoch */
    size_t n_spaces;
} kv_job;

typedef struct kv_svc {
    tr_head *h;
    kv_job **jobs;
    size_t n_jobs;
    tr_bgw *timer; /* answers waits at their deadline (under h->mu) */
} kv_svc;

static kv_svc *svc_of(void *head)
{
    tr_head *h = head;
    for (size_t i = 0; i < h->n_svc; i++) {
        if (h->svc[i] == &tr_kv_service) {
            return h->svc_state[i];
        }
    }
    return NULL;
}

/* ---- answering ---------------------------------------------------------------- */

static void reply_values(tr_rpc_call *call, uint32_t epoch, const uint8_t *const *vals, const size_t *lens,
                         size_t n)
{
    Troupe__V1__StoreReply rep = TROUPE__V1__STORE_REPLY__INIT;
    ProtobufCBinaryData bins[TR_KV_MAX_WAIT_KEYS];

    for (size_t i = 0; i < n && i < TR_KV_MAX_WAIT_KEYS; i++) {
        bins[i].data = (uint8_t *)vals[i];
        bins[i].len = lens[i];
    }
    rep.epoch = epoch;
    rep.values = bins;
    rep.n_values = n;
    rep.present = 1;
    tr_rpc_reply(call, &rep.base);
}

/* answer is the state's callback for a parked call; ctx is its space's epoch
 * (as a pointer-sized integer), which the reply carries. */
static void answer(void *token, int code, const char *msg, const uint8_t *const *vals, const size_t *lens,
                   size_t n, void *ctx)
{
    tr_rpc_call *call = token;

    if (code == TROUPE_OK) {
        reply_values(call, (uint32_t)(uintptr_t)ctx, vals, lens, n);
    } else {
        tr_rpc_reply_error(call, code, "%s", msg);
    }
    tr_rpc_call_release(call);
}

static void *epoch_ctx(const tr_kv_space *sp)
{
    return (void *)(uintptr_t)tr_kv_space_epoch(sp);
}

/* ---- jobs and spaces ------------------------------------------------------------ */

static kv_job *job_find(kv_svc *s, uint64_t id, size_t *pos)
{
    for (size_t i = 0; i < s->n_jobs; i++) {
        if (s->jobs[i]->id == id) {
            if (pos != NULL) {
                *pos = i;
            }
            return s->jobs[i];
        }
    }
    return NULL;
}

static kv_job *job_get(kv_svc *s, uint64_t id)
{
    kv_job *kj = job_find(s, id, NULL), **grown;

    if (kj != NULL) {
        return kj;
    }
    if ((grown = realloc(s->jobs, (s->n_jobs + 1) * sizeof(*grown))) == NULL) {
        return NULL;
    }
    s->jobs = grown;
    if ((kj = calloc(1, sizeof(*kj))) == NULL) {
        return NULL;
    }
    kj->id = id;
    kj->usage.max_keys = (uint64_t)s->h->cfg.store_max_keys;
    kj->usage.max_bytes = (uint64_t)s->h->cfg.store_max_bytes;
    s->jobs[s->n_jobs++] = kj;
    return kj;
}

static void space_drop(kv_job *kj, size_t i, const char *why)
{
    tr_kv_space *sp = kj->spaces[i];
    tr_kv_space_free(sp, TROUPE_FAILED_PRECONDITION, why, answer, epoch_ctx(sp));
    kj->spaces[i] = kj->spaces[--kj->n_spaces];
}

static void job_drop(kv_svc *s, uint64_t id, const char *why)
{
    size_t pos;
    kv_job *kj = job_find(s, id, &pos);

    if (kj == NULL) {
        return;
    }
    while (kj->n_spaces > 0) {
        space_drop(kj, kj->n_spaces - 1, why);
    }
    free(kj->spaces);
    free(kj);
    s->jobs[pos] = s->jobs[--s->n_jobs];
}

/* space_get returns v's space at its current epoch, replacing an older one. */
static tr_kv_space *space_get(kv_svc *s, const tr_head_job *hj, const tr_rdzv_view *v, tr_err *err)
{
    kv_job *kj = job_get(s, hj->j->id);
    tr_kv_space *sp = NULL, **grown;
    char why[200], **names;
    int rv;

    if (kj == NULL) {
        tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
        return NULL;
    }
    for (size_t i = 0; i < kj->n_spaces; i++) {
        if (strcmp(tr_kv_space_comm(kj->spaces[i]), v->name) == 0) {
            if (tr_kv_space_epoch(kj->spaces[i]) == v->epoch) {
                return kj->spaces[i];
            }
            snprintf(why, sizeof(why),
                     "communicator %s moved to epoch %u (a group restarted): its store starts "
                     "empty there",
                     v->name, v->epoch);
            space_drop(kj, i, why);
            break;
        }
    }
    if ((grown = realloc(kj->spaces, (kj->n_spaces + 1) * sizeof(*grown))) == NULL) {
        tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
        return NULL;
    }
    kj->spaces = grown;
    if ((names = tr_rdzv_rank_names(hj->j, v)) == NULL) {
        tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
        return NULL;
    }
    rv = tr_kv_space_new(v->name, v->epoch, v->size, (const char *const *)names, &kj->usage, &sp, err);
    tr_rdzv_rank_names_free(names, v->size);
    if (rv != TROUPE_OK) {
        return NULL;
    }
    kj->spaces[kj->n_spaces++] = sp;
    return sp;
}

static int job_live(const tr_head_job *hj)
{
    return hj->j->state == TROUPE__V1__JOB_STATE__JOB_RUNNING && !hj->requeue && !hj->j->stop_requested;
}

static void job_changed(tr_head *h, tr_head_job *hj, void *state)
{
    kv_svc *s = state;
    kv_job *kj = job_find(s, hj->j->id, NULL);
    char why[600];
    (void)h;

    if (kj == NULL) {
        return;
    }
    if (!job_live(hj)) {
        snprintf(why, sizeof(why), "job %llu is no longer running (%s: %s): its store is gone",
                 (unsigned long long)hj->j->id, tr_rdzv_job_state_name(hj->j->state), hj->j->reason);
        job_drop(s, hj->j->id, why);
        return;
    }
    for (size_t i = 0; i < kj->n_spaces;) {
        tr_rdzv_view v = {.epoch = 0};
        const char *name = tr_kv_space_comm(kj->spaces[i]);
        if (tr_rdzv_view_of(hj->j, name, NULL, &v, NULL) == TROUPE_OK &&
            v.epoch == tr_kv_space_epoch(kj->spaces[i])) {
            i++;
            continue;
        }
        snprintf(why, sizeof(why),
                 "communicator %s moved from epoch %u to %u (a group restarted): its store "
                 "starts empty there; initialise again",
                 name, tr_kv_space_epoch(kj->spaces[i]), v.epoch);
        space_drop(kj, i, why);
    }
}

static void job_deleted(tr_head *h, uint64_t job_id, void *state)
{
    (void)h;
    job_drop(state, job_id, "the job was deleted");
}

/* ---- calls ---------------------------------------------------------------------- */

/* enter unpacks a Store* request and resolves its space, or answers the call
 * and returns NULL. On success the caller holds h->mu and frees *req. */
static tr_kv_space *enter(kv_svc *s, tr_rpc_call *call, Troupe__V1__StoreRequest **req, size_t min_keys)
{
    tr_head_job *hj;
    tr_rdzv_view v;
    tr_kv_space *sp = NULL;
    tr_err err;
    int rv;

    *req = (Troupe__V1__StoreRequest *)tr_rpc_unpack(call, &troupe__v1__store_request__descriptor);
    if (*req == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&s->h->mu);
    if (!tr_rpc_require_job(call, (*req)->from ? (*req)->from->job_id : 0)) {
        goto refused; /* answered: a worker credential of another job */
    }
    if ((*req)->n_keys < min_keys) {
        rv = tr_err_set(&err, TROUPE_INVALID_ARGUMENT, "%s needs %s key", tr_rpc_call_method(call),
                        min_keys > 1 ? "more than one" : "a");
    } else {
        rv = tr_rdzv_resolve(s->h, (*req)->from, (*req)->comm, &hj, &v, &err);
    }
    if (rv == TROUPE_OK && (sp = space_get(s, hj, &v, &err)) != NULL) {
        tr_kv_touch(sp, v.rank);
        return sp;
    }
    TR_LOG(TR_LOG_INFO, "store refused method=%s job=%llu worker=%s comm=%s: %s", tr_rpc_call_method(call),
           (unsigned long long)((*req)->from ? (*req)->from->job_id : 0),
           (*req)->from && (*req)->from->worker ? (*req)->from->worker : "", (*req)->comm, err.msg);
    tr_rpc_reply_error(call, err.code, "%s", err.msg);
refused:
    pthread_mutex_unlock(&s->h->mu);
    protobuf_c_message_free_unpacked(&(*req)->base, NULL);
    *req = NULL;
    return NULL;
}

static void leave(kv_svc *s, Troupe__V1__StoreRequest *req)
{
    pthread_mutex_unlock(&s->h->mu);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void reply_simple(tr_rpc_call *call, const tr_kv_space *sp, int64_t number, int present)
{
    Troupe__V1__StoreReply rep = TROUPE__V1__STORE_REPLY__INIT;
    rep.epoch = tr_kv_space_epoch(sp);
    rep.number = number;
    rep.present = present;
    tr_rpc_reply(call, &rep.base);
}

static void on_call_expire(tr_rpc_call *call, void *arg)
{
    kv_svc *s = arg;
    pthread_mutex_lock(&s->h->mu);
    for (size_t k = 0; k < s->n_jobs; k++) {
        for (size_t i = 0; i < s->jobs[k]->n_spaces; i++) {
            if (tr_kv_forget(s->jobs[k]->spaces[i], call)) {
                tr_rpc_call_release(call);
                goto out;
            }
        }
    }
out:
    pthread_mutex_unlock(&s->h->mu);
}

/* wait_keys serves StoreGet (one key, its value) and StoreWait (every key,
 * no values): answered now when set, else parked until they are or until
 * wait_ms. wait_ms 0 does not wait: NOT_FOUND naming the key. */
static void wait_keys(kv_svc *s, tr_rpc_call *call, tr_kv_space *sp, Troupe__V1__StoreRequest *req, int get)
{
    const char *const *keys = (const char *const *)req->keys;
    size_t n = get ? 1 : req->n_keys;
    int64_t now = tr_now_ms(), until = now + req->wait_ms, rpc = tr_rpc_call_deadline(call) - 20;
    const uint8_t *vals[TR_KV_MAX_WAIT_KEYS];
    size_t lens[TR_KV_MAX_WAIT_KEYS];
    int parked = 0, rv;
    tr_err err;

    until = until < rpc ? until : rpc;
    rv = tr_kv_wait(sp, keys, n, get, call, now, until, &parked, &err);
    if (rv == TROUPE_OK && parked && req->wait_ms == 0) {
        tr_kv_forget(sp, call);
        rv = tr_err_set(&err, TROUPE_NOT_FOUND, "store of %s (epoch %u): key '%.128s' is not set",
                        tr_kv_space_comm(sp), tr_kv_space_epoch(sp), keys[0]);
    }
    if (rv != TROUPE_OK) {
        tr_rpc_reply_error(call, rv, "%s", err.msg);
    } else if (parked) {
        tr_rpc_defer(call, on_call_expire, s);
        tr_bgw_poke(s->timer, until);
    } else {
        for (size_t i = 0; get && i < n; i++) {
            (void)tr_kv_get(sp, keys[i], &vals[i], &lens[i]);
        }
        reply_values(call, tr_kv_space_epoch(sp), vals, lens, get ? n : 0);
    }
}

/* handle is every Store* method: which one is the call's method name. */
static void handle(tr_rpc_call *call, void *user)
{
    kv_svc *s = svc_of(user);
    const char *m = strchr(tr_rpc_call_method(call), '/') + 1;
    int needs_key = strcmp(m, "StoreNumKeys") != 0;
    Troupe__V1__StoreRequest *req;
    tr_kv_space *sp = enter(s, call, &req, needs_key ? 1 : 0);
    const uint8_t *cur;
    size_t len;
    int64_t sum;
    tr_err err;
    int rv = TROUPE_OK;

    if (sp == NULL) {
        return; /* answered */
    }
    if (strcmp(m, "StoreSet") == 0) {
        rv = tr_kv_set(sp, req->keys[0], req->value.data, req->value.len, answer, epoch_ctx(sp), &err);
        if (rv == TROUPE_OK) {
            reply_simple(call, sp, 0, 1);
        }
    } else if (strcmp(m, "StoreGet") == 0 || strcmp(m, "StoreWait") == 0) {
        wait_keys(s, call, sp, req, m[5] == 'G');
    } else if (strcmp(m, "StoreAdd") == 0) {
        rv = tr_kv_add(sp, req->keys[0], req->amount, &sum, answer, epoch_ctx(sp), &err);
        if (rv == TROUPE_OK) {
            reply_simple(call, sp, sum, 1);
        }
    } else if (strcmp(m, "StoreCompareSet") == 0) {
        rv = tr_kv_compare_set(sp, req->keys[0], req->expected.data, req->expected.len, req->value.data,
                               req->value.len, &cur, &len, answer, epoch_ctx(sp), &err);
        if (rv == TROUPE_OK) {
            reply_values(call, tr_kv_space_epoch(sp), &cur, &len, 1);
        }
    } else if (strcmp(m, "StoreCheck") == 0) {
        int all = 1;
        for (size_t i = 0; i < req->n_keys && all; i++) {
            all = tr_kv_get(sp, req->keys[i], &cur, &len);
        }
        reply_simple(call, sp, 0, all);
    } else if (strcmp(m, "StoreDelete") == 0) {
        reply_simple(call, sp, 0, tr_kv_delete(sp, req->keys[0]));
    } else {
        reply_simple(call, sp, (int64_t)tr_kv_num_keys(sp), 1);
    }
    if (rv != TROUPE_OK) {
        tr_rpc_reply_error(call, rv, "%s", err.msg);
    }
    leave(s, req);
}

/* ---- deadlines -------------------------------------------------------------------- */

/* tick (the timer, under h->mu): answers the waits whose deadline passed;
 * returns the next deadline. */
static int64_t tick(void *arg, int64_t now)
{
    kv_svc *s = arg;
    int64_t next = INT64_MAX;

    for (size_t k = 0; k < s->n_jobs; k++) {
        for (size_t i = 0; i < s->jobs[k]->n_spaces; i++) {
            tr_kv_space *sp = s->jobs[k]->spaces[i];
            int64_t n = tr_kv_expire(sp, now, answer, epoch_ctx(sp));
            next = n < next ? n : next;
        }
    }
    return next;
}

/* ---- the service -------------------------------------------------------------------- */

/* Worker calls about their own job (rpc.h: scopes); enter() checks the job. */
static const tr_rpc_method kv_methods[] = {
    {"troupe.v1.Head/StoreSet", handle, TR_SCOPES_WORKER_JOB},
    {"troupe.v1.Head/StoreGet", handle, TR_SCOPES_WORKER_JOB},
    {"troupe.v1.Head/StoreAdd", handle, TR_SCOPES_WORKER_JOB},
    {"troupe.v1.Head/StoreCompareSet", handle, TR_SCOPES_WORKER_JOB},
    {"troupe.v1.Head/StoreWait", handle, TR_SCOPES_WORKER_JOB},
    {"troupe.v1.Head/StoreCheck", handle, TR_SCOPES_WORKER_JOB},
    {"troupe.v1.Head/StoreDelete", handle, TR_SCOPES_WORKER_JOB},
    {"troupe.v1.Head/StoreNumKeys", handle, TR_SCOPES_WORKER_JOB},
    {NULL, NULL, 0},
};

static int svc_start(tr_head *h, void **state, tr_err *err)
{
    kv_svc *s = calloc(1, sizeof(*s));
    tr_bgw_opts to = {.name = "store timer", .mu = &h->mu, .tick = tick, .arg = s};
    int rv;

    if (s == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    s->h = h;
    if ((rv = tr_bgw_start(&s->timer, &to, err)) != TROUPE_OK) {
        free(s);
        return rv;
    }
    *state = s;
    return TROUPE_OK;
}

static void svc_stop(tr_head *h, void *state)
{
    kv_svc *s = state;

    tr_bgw_stop(s->timer);
    pthread_mutex_lock(&h->mu);
    while (s->n_jobs > 0) {
        job_drop(s, s->jobs[s->n_jobs - 1]->id, "the head is stopping");
    }
    pthread_mutex_unlock(&h->mu);
    free(s->jobs);
    free(s);
}

const tr_head_service tr_kv_service = {
    .name = "store",
    .methods = kv_methods,
    .start = svc_start,
    .stop = svc_stop,
    .job_changed = job_changed,
    .job_deleted = job_deleted,
};
