/* worker.c - the worker runtime (troupe/worker.h): identity from the
 * environment, and the rendezvous calls (IDs, barriers, all-gathers).
 *
 * Every wait is one long poll: the head holds the call until the answer
 * exists or the rank's deadline passes, then says which ranks never came.
 * The RPC deadline is the wait plus a margin, so the head's answer (with its
 * names) always arrives before the transport would give up; calls are
 * idempotent (same bytes, same sequence number), so the RPC layer may resend
 * them to a head that restarted. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "worker_int.h"

#define RPC_MARGIN_MS 5000
#define DEFAULT_WAIT_MS 300000

static troupe_status finish(troupe_error *err, const tr_err *e, int rv)
{
    return tr_client_finish(err, e, rv);
}

/* need reads a required variable, or says which one is missing. */
static int need(const char *name, const char **out, tr_err *e)
{
    *out = getenv(name);
    if (*out == NULL || (*out)[0] == '\0') {
        return tr_err_set(e, TROUPE_FAILED_PRECONDITION,
                          "%s is not set: this program expects to run as a troupe worker (started by troupe-node "
                          "for a job: troupe submit JOB.yaml)",
                          name);
    }
    return TROUPE_OK;
}

static int need_u32(const char *name, uint32_t *out, tr_err *e)
{
    const char *s;
    char *end = NULL;
    unsigned long long v;
    int rv = need(name, &s, e);

    if (rv != TROUPE_OK) {
        return rv;
    }
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v > UINT32_MAX) {
        return tr_err_set(e, TROUPE_FAILED_PRECONDITION, "%s='%s' is not a number", name, s);
    }
    *out = (uint32_t)v;
    return TROUPE_OK;
}

static int read_env(troupe_worker_ctx *w, tr_err *e)
{
    const char *head, *job, *group, *worker, *jn = getenv("TROUPE_JOB_NAME"), *lr = getenv("LOCAL_RANK");
    uint32_t job_id = 0;
    int rv;

    if ((rv = need("TROUPE_HEAD", &head, e)) != TROUPE_OK || (rv = need("TROUPE_JOB", &job, e)) != TROUPE_OK ||
        (rv = need_u32("TROUPE_JOB", &job_id, e)) != TROUPE_OK ||
        (rv = need("TROUPE_GROUP", &group, e)) != TROUPE_OK ||
        (rv = need("TROUPE_WORKER", &worker, e)) != TROUPE_OK ||
        (rv = need_u32("TROUPE_ATTEMPT", &w->self.attempt, e)) != TROUPE_OK ||
        (rv = need_u32("RANK", &w->self.rank, e)) != TROUPE_OK ||
        (rv = need_u32("WORLD_SIZE", &w->self.world_size, e)) != TROUPE_OK) {
        return rv;
    }
    (void)job;
    w->self.job_id = job_id;
    w->self.local_rank = lr ? (uint32_t)strtoul(lr, NULL, 10) : 0;
    tr_strlcpy(w->url, head, sizeof(w->url));
    tr_strlcpy(w->group, group, sizeof(w->group));
    tr_strlcpy(w->worker, worker, sizeof(w->worker));
    tr_strlcpy(w->job_name, jn ? jn : "", sizeof(w->job_name));
    w->self.group = w->group;
    w->self.worker = w->worker;
    w->self.job_name = w->job_name;
    return TROUPE_OK;
}

/* read_credential: the file named by TROUPE_CREDENTIALS (whole content, one
 * trailing newline dropped), else TROUPE_TOKEN, else none. *out is malloc'ed. */
static int read_credential(char **out, tr_err *e)
{
    const char *path = getenv("TROUPE_CREDENTIALS"), *tok = getenv("TROUPE_TOKEN");
    char buf[4097];
    size_t n;
    FILE *f;

    *out = NULL;
    if (path == NULL || path[0] == '\0') {
        *out = tok ? strdup(tok) : NULL;
        return TROUPE_OK;
    }
    if ((f = fopen(path, "r")) == NULL) {
        return tr_err_set(e, TROUPE_FAILED_PRECONDITION, "TROUPE_CREDENTIALS=%s: cannot open: %s", path,
                          strerror(errno));
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) {
        buf[--n] = '\0';
    }
    *out = strdup(buf);
    return *out ? TROUPE_OK : tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
}

TROUPE_API troupe_status troupe_worker_open(troupe_worker_ctx **out, const troupe_worker_opts *opts,
                                            troupe_error *err)
{
    tr_rpc_client_opts ro = {0};
    troupe_worker_ctx *w;
    char *cred = NULL;
    tr_err e;
    int rv;

    *out = NULL;
    if ((w = calloc(1, sizeof(*w))) == NULL) {
        return finish(err, &e, tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory"));
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->member_cv, NULL);
    rv = read_env(w, &e);
    if (rv == TROUPE_OK) {
        rv = read_credential(&cred, &e);
    }
    if (rv == TROUPE_OK) {
        if (opts != NULL && opts->head_url != NULL && opts->head_url[0] != '\0') {
            tr_strlcpy(w->url, opts->head_url, sizeof(w->url));
        }
        w->wait_ms = opts != NULL && opts->wait_ms ? opts->wait_ms : DEFAULT_WAIT_MS;
        ro.url = w->url;
        ro.token = cred;
        ro.wait_for_server = 1; /* the head may be restarting; calls wait within their deadlines */
        rv = tr_rpc_client_open(&ro, &w->rpc, &e);
        if (rv == TROUPE_OK) {
            rv = tr_wk_metrics_start(w, &ro, &e);
        }
        if (rv == TROUPE_OK && tr_wk_trace_init(w) != 0) {
            rv = tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        }
    }
    free(cred);
    if (rv == TROUPE_OK) {
        tr_wk_control_init(w);
        w->caller_profiles = opts != NULL && opts->caller_profiles;
        if (opts == NULL || !opts->no_control) {
            rv = tr_wk_control_start(w, &e);
        }
    }
    if (rv != TROUPE_OK) {
        troupe_worker_close(w);
        return finish(err, &e, rv);
    }
    *out = w;
    return finish(err, &e, TROUPE_OK);
}

TROUPE_API void troupe_worker_close(troupe_worker_ctx *w)
{
    if (w == NULL) {
        return;
    }
    tr_wk_trace_close(w);  /* ships the last spans, while the head is still reachable */
    if (tr_coll_nng_wedged()) {
        /* A CPU collective's sockets would not close (nng 1.5.2, coll.c): any
         * nng_close now hangs for good, and stopping the metrics sender and
         * the control thread means closing their sockets. Flush what was
         * reported, then leave the threads and sockets to the process's exit
         * (w stays allocated for them). */
        (void)troupe_worker_metrics_flush(w, 10000, NULL);
        atomic_store(&w->quit, 1);
        return;
    }
    tr_wk_metrics_stop(w); /* flushes first, while the head is still reachable */
    tr_wk_control_stop(w);
    tr_wk_profiler_close(w);
    tr_rpc_client_close(w->rpc);
    for (size_t i = 0; i < w->n_comms; i++) {
        free(w->comms[i].seqs);
    }
    pthread_cond_destroy(&w->member_cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

TROUPE_API const troupe_worker_self *troupe_worker_self_info(const troupe_worker_ctx *w)
{
    return &w->self;
}

void tr_wk_ref(const troupe_worker_ctx *w, Troupe__V1__WorkerRef *ref)
{
    troupe__v1__worker_ref__init(ref);
    ref->job_id = w->self.job_id;
    ref->worker = (char *)w->worker;
    ref->attempt = w->self.attempt;
}

/* ---- what the handle knows of its communicators ---------------------------- */

static const char *comm_name(const troupe_worker_ctx *w, const char *comm)
{
    return comm != NULL && comm[0] != '\0' ? comm : w->group;
}

/* comm_slot finds or adds comm (under w->mu); NULL when the table is full. */
static tr_wk_comm *comm_slot(troupe_worker_ctx *w, const char *comm)
{
    for (size_t i = 0; i < w->n_comms; i++) {
        if (strcmp(w->comms[i].name, comm) == 0) {
            return &w->comms[i];
        }
    }
    if (w->n_comms == TR_WK_MAX_COMMS) {
        return NULL;
    }
    tr_strlcpy(w->comms[w->n_comms].name, comm, sizeof(w->comms[0].name));
    return &w->comms[w->n_comms++];
}

/* learn_epoch records the epoch a reply named; a new epoch starts the
 * barrier/gather counts again (the head's state for it is new too). */
static void learn_epoch(troupe_worker_ctx *w, const char *comm, uint32_t epoch)
{
    tr_wk_comm *c;

    pthread_mutex_lock(&w->mu);
    c = comm_slot(w, comm);
    if (c != NULL && (!c->known || c->epoch != epoch)) {
        c->known = 1;
        c->epoch = epoch;
        c->n_seqs = 0;
    }
    pthread_mutex_unlock(&w->mu);
}

static int next_seq(troupe_worker_ctx *w, const char *comm, const char *name, uint64_t *seq, int *check,
                    uint32_t *epoch, tr_err *e)
{
    tr_wk_comm *c;
    int rv = TROUPE_OK;

    pthread_mutex_lock(&w->mu);
    c = comm_slot(w, comm);
    if (c == NULL) {
        rv = tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "more than %d communicators", TR_WK_MAX_COMMS);
        goto out;
    }
    *check = c->known;
    *epoch = c->epoch;
    for (size_t i = 0; i < c->n_seqs; i++) {
        if (strcmp(c->seqs[i].name, name) == 0) {
            *seq = c->seqs[i].seq + 1;
            goto out;
        }
    }
    *seq = 1;
out:
    pthread_mutex_unlock(&w->mu);
    return rv;
}

/* done_seq records that gather name number seq completed. */
static void done_seq(troupe_worker_ctx *w, const char *comm, const char *name, uint64_t seq)
{
    tr_wk_comm *c;

    pthread_mutex_lock(&w->mu);
    c = comm_slot(w, comm);
    for (size_t i = 0; c != NULL && i < c->n_seqs; i++) {
        if (strcmp(c->seqs[i].name, name) == 0) {
            c->seqs[i].seq = seq;
            goto out;
        }
    }
    if (c != NULL && c->n_seqs < TR_WK_MAX_SEQS) {
        tr_wk_seq *grown = realloc(c->seqs, (c->n_seqs + 1) * sizeof(*grown));
        if (grown != NULL) {
            c->seqs = grown;
            tr_strlcpy(c->seqs[c->n_seqs].name, name, sizeof(c->seqs[0].name));
            c->seqs[c->n_seqs++].seq = seq;
        }
    }
out:
    pthread_mutex_unlock(&w->mu);
}

/* ---- IDs -------------------------------------------------------------------- */

static int call_ids(troupe_worker_ctx *w, Troupe__V1__CommIdsRequest *req, uint32_t wait_ms,
                    Troupe__V1__CommIdsReply **rep, tr_err *e)
{
    Troupe__V1__WorkerRef ref;
    int64_t t0 = req->describe ? 0 : tr_wk_trace_now(w);
    char span[96];
    int rv;

    tr_wk_ref(w, &ref);
    req->from = &ref;
    req->wait_ms = wait_ms;
    rv = tr_rpc_client_call(w->rpc, "troupe.v1.Head/CommIds", &req->base, &troupe__v1__comm_ids_reply__descriptor,
                            (ProtobufCMessage **)rep, wait_ms + RPC_MARGIN_MS, TR_RPC_IDEMPOTENT, e);
    snprintf(span, sizeof(span), "%s IDs %s", req->n_ids > 0 ? "publish" : "wait for", req->comm);
    tr_wk_trace_span(w, span, "rdzv", t0);
    if (rv == TROUPE_OK) {
        learn_epoch(w, req->comm, (*rep)->epoch);
    }
    return rv;
}

static void fill_info(troupe_comm_info *info, const Troupe__V1__CommIdsReply *rep)
{
    if (info != NULL) {
        info->epoch = rep->epoch;
        info->rank = rep->rank;
        info->size = rep->size;
    }
}

int tr_wk_describe(troupe_worker_ctx *w, const char *comm, int awaiting, troupe_comm_info *info, tr_err *e)
{
    Troupe__V1__CommIdsRequest req = TROUPE__V1__COMM_IDS_REQUEST__INIT;
    Troupe__V1__CommIdsReply *rep = NULL;
    int rv;

    memset(info, 0, sizeof(*info));
    req.comm = (char *)comm_name(w, comm);
    req.describe = 1;
    req.awaiting_membership = awaiting != 0;
    rv = call_ids(w, &req, 0, &rep, e);
    if (rv == TROUPE_OK) {
        fill_info(info, rep);
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    return rv;
}

TROUPE_API troupe_status troupe_worker_comm_info(troupe_worker_ctx *w, const char *comm, troupe_comm_info *info,
                                                 troupe_error *err)
{
    tr_err e;
    int rv = tr_wk_describe(w, comm, 0, info, &e);
    return finish(err, &e, rv);
}

TROUPE_API troupe_status troupe_worker_publish_ids(troupe_worker_ctx *w, const char *comm, const void *ids,
                                                   size_t n_ids, troupe_comm_info *info, troupe_error *err)
{
    Troupe__V1__CommIdsRequest req = TROUPE__V1__COMM_IDS_REQUEST__INIT;
    Troupe__V1__CommIdsReply *rep = NULL;
    ProtobufCBinaryData bins[TROUPE_MAX_NCCL_IDS];
    tr_err e;
    int rv;

    if (info != NULL) {
        memset(info, 0, sizeof(*info));
    }
    if (ids == NULL || n_ids == 0 || n_ids > TROUPE_MAX_NCCL_IDS) {
        return finish(err, &e, tr_err_set(&e, TROUPE_INVALID_ARGUMENT, "publish 1 to %d IDs, not %zu",
                                           TROUPE_MAX_NCCL_IDS, ids ? n_ids : 0));
    }
    for (size_t i = 0; i < n_ids; i++) {
        bins[i].data = (uint8_t *)ids + i * TROUPE_NCCL_ID_BYTES;
        bins[i].len = TROUPE_NCCL_ID_BYTES;
    }
    req.comm = (char *)comm_name(w, comm);
    req.ids = bins;
    req.n_ids = n_ids;
    rv = call_ids(w, &req, 0, &rep, &e);
    if (rv == TROUPE_OK) {
        fill_info(info, rep);
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    return finish(err, &e, rv);
}

TROUPE_API troupe_status troupe_worker_wait_ids(troupe_worker_ctx *w, const char *comm, void *ids, size_t max_ids,
                                                size_t *n_ids, uint32_t wait_ms, troupe_comm_info *info,
                                                troupe_error *err)
{
    Troupe__V1__CommIdsRequest req = TROUPE__V1__COMM_IDS_REQUEST__INIT;
    Troupe__V1__CommIdsReply *rep = NULL;
    tr_err e;
    int rv;

    *n_ids = 0;
    if (info != NULL) {
        memset(info, 0, sizeof(*info));
    }
    req.comm = (char *)comm_name(w, comm);
    rv = call_ids(w, &req, wait_ms ? wait_ms : w->wait_ms, &rep, &e);
    if (rv != TROUPE_OK) {
        return finish(err, &e, rv);
    }
    if (rep->n_ids > max_ids) {
        rv = tr_err_set(&e, TROUPE_OUT_OF_RANGE, "communicator %s has %zu IDs; room for %zu", req.comm,
                        rep->n_ids, max_ids);
    }
    for (size_t i = 0; rv == TROUPE_OK && i < rep->n_ids; i++) {
        if (rep->ids[i].len != TROUPE_NCCL_ID_BYTES) {
            rv = tr_err_set(&e, TROUPE_INTERNAL, "the head sent an ID of %zu bytes", rep->ids[i].len);
            break;
        }
        memcpy((uint8_t *)ids + i * TROUPE_NCCL_ID_BYTES, rep->ids[i].data, TROUPE_NCCL_ID_BYTES);
    }
    if (rv == TROUPE_OK) {
        *n_ids = rep->n_ids;
        fill_info(info, rep);
    }
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return finish(err, &e, rv);
}

/* ---- barriers and all-gathers -------------------------------------------------- */

static int gather(troupe_worker_ctx *w, const char *comm, const char *kind, const char *name, const void *data,
                  size_t len, uint32_t wait_ms, Troupe__V1__GatherReply **rep, tr_err *e)
{
    Troupe__V1__GatherRequest req = TROUPE__V1__GATHER_REQUEST__INIT;
    Troupe__V1__WorkerRef ref;
    char full[72], span[80];
    int check = 0, rv;
    uint32_t epoch = 0;
    uint64_t seq = 0;
    int64_t t0;

    if (name == NULL || name[0] == '\0' || strlen(name) > 60) {
        return tr_err_set(e, TROUPE_INVALID_ARGUMENT, "%s name must be 1 to 60 bytes", kind);
    }
    if (len > TROUPE_MAX_BLOB || (len > 0 && data == NULL)) {
        return tr_err_set(e, TROUPE_INVALID_ARGUMENT, "all-gather data must be at most %d bytes, not %zu",
                          TROUPE_MAX_BLOB, len);
    }
    comm = comm_name(w, comm);
    snprintf(full, sizeof(full), "%s:%s", kind, name);
    if ((rv = next_seq(w, comm, full, &seq, &check, &epoch, e)) != TROUPE_OK) {
        return rv;
    }
    tr_wk_ref(w, &ref);
    req.from = &ref;
    req.comm = (char *)comm;
    req.name = full;
    req.seq = seq;
    req.data.data = (uint8_t *)data;
    req.data.len = len;
    req.wait_ms = wait_ms ? wait_ms : w->wait_ms;
    req.check_epoch = check;
    req.epoch = epoch;
    t0 = tr_wk_trace_now(w);
    rv = tr_rpc_client_call(w->rpc, "troupe.v1.Head/Gather", &req.base, &troupe__v1__gather_reply__descriptor,
                            (ProtobufCMessage **)rep, req.wait_ms + RPC_MARGIN_MS, TR_RPC_IDEMPOTENT, e);
    snprintf(span, sizeof(span), "%s %s", strcmp(kind, "gather") == 0 ? "all-gather" : kind, name);
    tr_wk_trace_span(w, span, "rdzv", t0); /* the wait for the other ranks, in a profiled step */
    if (rv == TROUPE_OK) {
        if (!check) {
            learn_epoch(w, comm, (*rep)->epoch);
        }
        done_seq(w, comm, full, seq);
    }
    return rv;
}

TROUPE_API troupe_status troupe_worker_barrier(troupe_worker_ctx *w, const char *comm, const char *name,
                                               uint32_t wait_ms, troupe_error *err)
{
    Troupe__V1__GatherReply *rep = NULL;
    tr_err e;
    int rv = gather(w, comm, "barrier", name, NULL, 0, wait_ms, &rep, &e);

    if (rep != NULL) {
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    return finish(err, &e, rv);
}

/* One allocation: the public struct, the items, then the bytes. */
static troupe_blobs *blobs_copy(const Troupe__V1__GatherReply *rep)
{
    size_t total = sizeof(troupe_blobs) + rep->n_data * sizeof(troupe_blob);
    troupe_blobs *b;
    troupe_blob *items;
    uint8_t *p;

    for (size_t r = 0; r < rep->n_data; r++) {
        total += rep->data[r].len;
    }
    if ((b = malloc(total)) == NULL) {
        return NULL;
    }
    items = (troupe_blob *)(b + 1);
    p = (uint8_t *)(items + rep->n_data);
    for (size_t r = 0; r < rep->n_data; r++) {
        items[r].len = rep->data[r].len;
        items[r].data = rep->data[r].len ? p : NULL;
        if (rep->data[r].len) {
            memcpy(p, rep->data[r].data, rep->data[r].len);
        }
        p += rep->data[r].len;
    }
    b->count = rep->n_data;
    b->items = items;
    return b;
}

TROUPE_API troupe_status troupe_worker_allgather(troupe_worker_ctx *w, const char *comm, const char *name,
                                                 const void *data, size_t len, uint32_t wait_ms,
                                                 troupe_blobs **out, troupe_error *err)
{
    Troupe__V1__GatherReply *rep = NULL;
    tr_err e;
    int rv;

    *out = NULL;
    rv = gather(w, comm, "gather", name, data, len, wait_ms, &rep, &e);
    if (rv == TROUPE_OK && (*out = blobs_copy(rep)) == NULL) {
        rv = tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    if (rep != NULL) {
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    return finish(err, &e, rv);
}

TROUPE_API void troupe_blobs_free(troupe_blobs *b)
{
    free(b);
}
