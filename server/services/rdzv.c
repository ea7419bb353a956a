/* rdzv.c - the head's rendezvous service: NCCL unique IDs, barriers and
 * small all-gathers between the ranks of a communicator (CommIds, Gather).
 *
 * A communicator is a worker group (its ranks are the group's ranks) or one
 * the job declares across groups (`communicators:` in the YAML; ranks are the
 * first group's, then the next group's...). Its epoch is the highest attempt
 * among its workers: every group restart (and every re-placement of the job)
 * starts a new attempt, so a restarted group always meets in a new epoch and
 * can never see the IDs of the old one. A worker whose attempt was superseded
 * is refused, and so is a call naming an epoch that is not the current one.
 *
 * State (rdzv_state.c) lives only for running jobs: one tr_rdzv_comm per
 * communicator that someone called about, dropped when its epoch moves on or
 * the job ends (waiters are then answered FAILED_PRECONDITION with the
 * reason). Published IDs are also written to the job record (Job.comm_ids),
 * and rank 0 is answered once that is on disk: a restarted head hands the
 * same IDs to ranks that retry, so they carry on instead of hanging. So are
 * the worker runtime's own all-gathers (the CPU collective's address
 * exchange, "gather:troupe.*", Job.gathers_done) once complete, and every
 * rank is answered once that is on disk: when the head dies after some
 * ranks got the answer, the others retry against the restarted head, which
 * answers from the record instead of waiting for peers that moved on.
 * Barriers and the user's all-gathers stay in memory (a step's barrier is
 * not worth a write of the job).
 *
 * Waits are deferred RPC calls with the rank's own deadline; a timer thread
 * answers them at that deadline naming the ranks that never arrived, before
 * the RPC layer's generic deadline would. Everything runs under h->mu. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bgw.h"
#include "jobs.h"
#include "log.h"
#include "rdzv.h"
#include "rdzv_int.h"
#include "util.h"

/* ---- answering ------------------------------------------------------------ */

static void reply_ids(tr_rpc_call *call, const tr_rdzv_result *res)
{
    Troupe__V1__CommIdsReply rep = TROUPE__V1__COMM_IDS_REPLY__INIT;
    ProtobufCBinaryData ids[TR_RDZV_MAX_IDS];

    for (uint32_t i = 0; i < res->n_ids && i < TR_RDZV_MAX_IDS; i++) {
        ids[i].data = (uint8_t *)res->ids + (size_t)i * TR_RDZV_ID_BYTES;
        ids[i].len = TR_RDZV_ID_BYTES;
    }
    rep.epoch = res->epoch;
    rep.rank = res->rank;
    rep.size = res->size;
    rep.n_ids = res->n_ids;
    rep.ids = ids;
    tr_rpc_reply(call, &rep.base);
}

/* answer_ids / answer_gather answer a parked call (the state's callback) and
 * drop the reference tr_rpc_defer gave. Errors come through either. */
static void answer_ids(void *token, int code, const char *msg, const tr_rdzv_result *res, void *ctx)
{
    tr_rpc_call *call = token;
    (void)ctx;
    if (code == TROUPE_OK && res != NULL) {
        reply_ids(call, res);
    } else {
        tr_rpc_reply_error(call, code, "%s", msg);
    }
    tr_rpc_call_release(call);
}

static void reply_gather(tr_rpc_call *call, const tr_rdzv_result *res)
{
    Troupe__V1__GatherReply rep = TROUPE__V1__GATHER_REPLY__INIT;
    ProtobufCBinaryData *d = calloc(res->size ? res->size : 1, sizeof(*d));

    if (d == NULL) {
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
        return;
    }
    for (uint32_t r = 0; r < res->size; r++) {
        d[r].data = res->data && res->data[r] ? (uint8_t *)res->data[r] : NULL;
        d[r].len = res->len ? res->len[r] : 0;
    }
    rep.epoch = res->epoch;
    rep.rank = res->rank;
    rep.n_data = res->size;
    rep.data = d;
    tr_rpc_reply(call, &rep.base);
    free(d);
}

static void answer_gather(void *token, int code, const char *msg, const tr_rdzv_result *res, void *ctx)
{
    tr_rpc_call *call = token;
    (void)ctx;
    if (code == TROUPE_OK && res != NULL) {
        reply_gather(call, res);
    } else {
        tr_rpc_reply_error(call, code, "%s", msg);
    }
    tr_rpc_call_release(call);
}

/* Kept all-gathers are answered once their record is on disk, from a copy
 * of the reply that the commit waiter owns. */
static Troupe__V1__GatherReply *reply_copy(uint32_t epoch, uint32_t rank, size_t n, const ProtobufCBinaryData *data)
{
    Troupe__V1__GatherReply rep = TROUPE__V1__GATHER_REPLY__INIT, *out = NULL;
    uint8_t *buf;
    size_t size;

    rep.epoch = epoch;
    rep.rank = rank;
    rep.n_data = n;
    rep.data = (ProtobufCBinaryData *)data;
    size = protobuf_c_message_get_packed_size(&rep.base);
    if ((buf = malloc(size ? size : 1)) != NULL) {
        protobuf_c_message_pack(&rep.base, buf);
        out = troupe__v1__gather_reply__unpack(NULL, size, buf);
        free(buf);
    }
    return out;
}

static Troupe__V1__GatherReply *reply_of(const tr_rdzv_result *res)
{
    ProtobufCBinaryData *d = calloc(res->size ? res->size : 1, sizeof(*d));
    Troupe__V1__GatherReply *out = NULL;

    if (d != NULL) {
        for (uint32_t r = 0; r < res->size; r++) {
            d[r].data = res->data && res->data[r] ? (uint8_t *)res->data[r] : NULL;
            d[r].len = res->len ? res->len[r] : 0;
        }
        out = reply_copy(res->epoch, res->rank, res->size, d);
        free(d);
    }
    return out;
}

/* exit_after_reply: TROUPE_TEST_EXIT_AFTER_GATHER_REPLY=EPOCH makes the head
 * die right after the first kept all-gather answer of that epoch, before
 * the other ranks' (tests: a head lost between the answers). */
static void exit_after_reply(const Troupe__V1__GatherReply *r)
{
    const char *at = getenv("TROUPE_TEST_EXIT_AFTER_GATHER_REPLY");

    if (at != NULL && at[0] != '\0' && strtoul(at, NULL, 10) == r->epoch) {
        TR_LOG(TR_LOG_WARNING, "rdzv: exiting after the first answer of a kept all-gather at epoch %u "
               "(TROUPE_TEST_EXIT_AFTER_GATHER_REPLY)", r->epoch);
        tr_sleep_ms(300); /* the answer reaches its rank */
        _exit(9);
    }
}

static void reply_saved(tr_head *h, tr_rpc_call *call, uint64_t arg)
{
    const Troupe__V1__GatherReply *r = (const Troupe__V1__GatherReply *)(uintptr_t)arg;
    (void)h;
    tr_rpc_reply(call, &r->base);
    exit_after_reply(r);
}

static void reply_drop(void *p)
{
    troupe__v1__gather_reply__free_unpacked(p, NULL);
}

static void after_saved(tr_rdzv_svc *s, tr_rpc_call *call, Troupe__V1__GatherReply *r)
{
    if (r == NULL) {
        tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
        return;
    }
    tr_head_after_commit_owned(s->h, call, reply_saved, (uint64_t)(uintptr_t)r, reply_drop);
}

/* answer_gather_saved answers a parked rank of a kept all-gather once the
 * record the completing call writes is on disk. */
static void answer_gather_saved(void *token, int code, const char *msg, const tr_rdzv_result *res, void *ctx)
{
    tr_rpc_call *call = token;
    if (code == TROUPE_OK && res != NULL) {
        after_saved(ctx, call, reply_of(res));
    } else {
        tr_rpc_reply_error(call, code, "%s", msg);
    }
    tr_rpc_call_release(call);
}

/* ---- jobs and communicators ------------------------------------------------ */

static tr_rdzv_job *job_find(tr_rdzv_svc *s, uint64_t id, size_t *pos)
{
    size_t lo = 0, hi = s->n_jobs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->jobs[mid]->id < id) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (pos != NULL) {
        *pos = lo;
    }
    return lo < s->n_jobs && s->jobs[lo]->id == id ? s->jobs[lo] : NULL;
}

static tr_rdzv_job *job_get(tr_rdzv_svc *s, uint64_t id)
{
    size_t pos;
    tr_rdzv_job *rj = job_find(s, id, &pos);

    if (rj != NULL) {
        return rj;
    }
    if (s->n_jobs == s->cap_jobs) {
        size_t cap = s->cap_jobs ? s->cap_jobs * 2 : 16;
        tr_rdzv_job **grown = realloc(s->jobs, cap * sizeof(*grown));
        if (grown == NULL) {
            return NULL;
        }
        s->jobs = grown;
        s->cap_jobs = cap;
    }
    if ((rj = calloc(1, sizeof(*rj))) == NULL) {
        return NULL;
    }
    rj->id = id;
    memmove(s->jobs + pos + 1, s->jobs + pos, (s->n_jobs - pos) * sizeof(*s->jobs));
    s->jobs[pos] = rj;
    s->n_jobs++;
    return rj;
}

static void job_drop(tr_rdzv_svc *s, tr_rdzv_job *rj, const char *why)
{
    size_t pos;

    for (size_t i = 0; i < rj->n_comms; i++) {
        tr_rdzv_comm_free(rj->comms[i], TROUPE_FAILED_PRECONDITION, why, answer_ids, s);
    }
    free(rj->comms);
    if (job_find(s, rj->id, &pos) == rj) {
        memmove(s->jobs + pos, s->jobs + pos + 1, (s->n_jobs - pos - 1) * sizeof(*s->jobs));
        s->n_jobs--;
    }
    free(rj);
}

/* comm_drop forgets one communicator epoch, answering its waiters. */
static void comm_drop(tr_rdzv_job *rj, size_t i, const char *why, tr_rdzv_svc *s)
{
    tr_rdzv_comm_free(rj->comms[i], TROUPE_FAILED_PRECONDITION, why, answer_ids, s);
    rj->comms[i] = rj->comms[--rj->n_comms];
}

/* ---- the job record's published IDs ----------------------------------------- */

static void comm_ids_free(Troupe__V1__CommIds *c)
{
    troupe__v1__comm_ids__free_unpacked(c, NULL);
}

/* record_drop removes comm's entries older than epoch (all when epoch is
 * UINT32_MAX); returns 1 when the record changed. */
static int record_drop(Troupe__V1__Job *j, const char *comm, uint32_t epoch)
{
    size_t k = 0;
    int changed = 0;

    for (size_t i = 0; i < j->n_comm_ids; i++) {
        Troupe__V1__CommIds *c = j->comm_ids[i];
        if ((comm == NULL || strcmp(c->comm, comm) == 0) && (epoch == UINT32_MAX || c->epoch < epoch)) {
            comm_ids_free(c);
            changed = 1;
        } else {
            j->comm_ids[k++] = c;
        }
    }
    j->n_comm_ids = k;
    if (k == 0) {
        free(j->comm_ids);
        j->comm_ids = NULL;
    }
    k = 0;
    for (size_t i = 0; i < j->n_gathers_done; i++) {
        Troupe__V1__GatherDone *g = j->gathers_done[i];
        if ((comm == NULL || strcmp(g->comm, comm) == 0) && (epoch == UINT32_MAX || g->epoch < epoch)) {
            troupe__v1__gather_done__free_unpacked(g, NULL);
            changed = 1;
        } else {
            j->gathers_done[k++] = g;
        }
    }
    j->n_gathers_done = k;
    if (k == 0) {
        free(j->gathers_done);
        j->gathers_done = NULL;
    }
    return changed;
}

/* ---- the job record's completed all-gathers --------------------------------- */

#define KEPT_PREFIX "gather:troupe."

static int kept_name(const char *name)
{
    return strncmp(name, KEPT_PREFIX, sizeof(KEPT_PREFIX) - 1) == 0;
}

static const Troupe__V1__GatherDone *kept_find(const Troupe__V1__Job *j, const char *comm, uint32_t epoch,
                                              const char *name, uint64_t seq)
{
    for (size_t i = 0; i < j->n_gathers_done; i++) {
        const Troupe__V1__GatherDone *g = j->gathers_done[i];
        if (g->epoch == epoch && g->seq == seq && strcmp(g->comm, comm) == 0 && strcmp(g->name, name) == 0) {
            return g;
        }
    }
    return NULL;
}

/* kept_put records a completed all-gather in place of comm's earlier one of
 * that name; -1 when out of memory (then it is answered from memory only). */
static int kept_put(Troupe__V1__Job *j, const char *comm, const char *name, uint64_t seq, const tr_rdzv_result *res)
{
    Troupe__V1__GatherDone *g = calloc(1, sizeof(*g)), **slot = NULL;
    int ok = g != NULL;

    if (ok) {
        troupe__v1__gather_done__init(g);
        g->comm = strdup(comm);
        g->name = strdup(name);
        g->epoch = res->epoch;
        g->seq = seq;
        g->data = calloc(res->size ? res->size : 1, sizeof(*g->data));
        ok = g->comm != NULL && g->name != NULL && g->data != NULL;
    }
    for (uint32_t r = 0; ok && r < res->size; r++) {
        uint32_t len = res->len ? res->len[r] : 0;
        g->data[r].data = malloc(len ? len : 1);
        if ((ok = g->data[r].data != NULL) != 0) {
            if (len > 0) {
                memcpy(g->data[r].data, res->data[r], len);
            }
            g->data[r].len = len;
            g->n_data++;
        }
    }
    for (size_t i = 0; ok && i < j->n_gathers_done; i++) {
        if (strcmp(j->gathers_done[i]->comm, comm) == 0 && strcmp(j->gathers_done[i]->name, name) == 0) {
            slot = &j->gathers_done[i];
        }
    }
    if (ok && slot == NULL) {
        Troupe__V1__GatherDone **grown = realloc(j->gathers_done, (j->n_gathers_done + 1) * sizeof(*grown));
        if ((ok = grown != NULL) != 0) {
            j->gathers_done = grown;
            slot = &j->gathers_done[j->n_gathers_done++];
            *slot = NULL;
        }
    }
    if (!ok) {
        if (g != NULL) {
            troupe__v1__gather_done__free_unpacked(g, NULL);
        }
        return -1;
    }
    if (*slot != NULL) {
        troupe__v1__gather_done__free_unpacked(*slot, NULL);
    }
    *slot = g;
    return 0;
}

static const Troupe__V1__CommIds *record_find(const Troupe__V1__Job *j, const char *comm, uint32_t epoch)
{
    for (size_t i = 0; i < j->n_comm_ids; i++) {
        if (strcmp(j->comm_ids[i]->comm, comm) == 0 && j->comm_ids[i]->epoch == epoch) {
            return j->comm_ids[i];
        }
    }
    return NULL;
}

static int record_add(Troupe__V1__Job *j, const char *comm, uint32_t epoch, ProtobufCBinaryData *ids, size_t n)
{
    Troupe__V1__CommIds *c = calloc(1, sizeof(*c));
    Troupe__V1__CommIds **grown = realloc(j->comm_ids, (j->n_comm_ids + 1) * sizeof(*grown));

    if (grown != NULL) {
        j->comm_ids = grown;
    }
    if (c == NULL || grown == NULL) {
        free(c);
        return -1;
    }
    troupe__v1__comm_ids__init(c);
    c->comm = strdup(comm);
    c->epoch = epoch;
    c->ids = calloc(n, sizeof(*c->ids));
    for (size_t i = 0; c->ids != NULL && i < n; i++) {
        if ((c->ids[i].data = malloc(ids[i].len)) == NULL) {
            break;
        }
        memcpy(c->ids[i].data, ids[i].data, ids[i].len);
        c->ids[i].len = ids[i].len;
        c->n_ids++;
    }
    if (c->comm == NULL || c->n_ids != n) {
        comm_ids_free(c);
        return -1;
    }
    j->comm_ids[j->n_comm_ids++] = c;
    return 0;
}

/* ---- keeping up with the jobs ----------------------------------------------- */

static int job_live(const tr_head_job *hj)
{
    return hj->j->state == TROUPE__V1__JOB_STATE__JOB_RUNNING && !hj->requeue && !hj->j->stop_requested;
}

static void job_changed(tr_head *h, tr_head_job *hj, void *state)
{
    tr_rdzv_svc *s = state;
    tr_rdzv_job *rj = job_find(s, hj->j->id, NULL);
    char why[600];

    if (!job_live(hj)) {
        if (rj != NULL) {
            snprintf(why, sizeof(why), "job %llu is no longer running (%s: %s)", (unsigned long long)hj->j->id,
                     tr_rdzv_job_state_name(hj->j->state), hj->j->reason);
            job_drop(s, rj, why);
        }
        if (tr_jobs_is_terminal(hj) && record_drop(hj->j, NULL, UINT32_MAX)) {
            tr_head_dirty_job(h, hj->j->id); /* forgotten when the job ends */
        }
        return;
    }
    for (size_t i = 0; rj != NULL && i < rj->n_comms;) {
        tr_rdzv_view v;
        const char *name = tr_rdzv_comm_name(rj->comms[i]);
        if (tr_rdzv_view_of(hj->j, name, NULL, &v, NULL) == TROUPE_OK &&
            v.epoch == tr_rdzv_comm_epoch(rj->comms[i])) {
            i++;
            continue;
        }
        snprintf(why, sizeof(why), "communicator %s moved from epoch %u to %u (a group restarted); "
                 "initialise again in the new epoch", name, tr_rdzv_comm_epoch(rj->comms[i]), v.epoch);
        if (record_drop(hj->j, name, v.epoch)) {
            tr_head_dirty_job(h, hj->j->id);
        }
        comm_drop(rj, i, why, s);
    }
}

/* ---- calls -------------------------------------------------------------------- */

/* comm_get returns the state of v's communicator at its current epoch. */
static tr_rdzv_comm *comm_get(tr_rdzv_svc *s, tr_head_job *hj, const tr_rdzv_view *v, tr_err *err)
{
    tr_rdzv_job *rj = job_get(s, hj->j->id);
    const Troupe__V1__CommIds *rec;
    tr_rdzv_comm *c = NULL;
    char **names = NULL;
    tr_rdzv_comm **grown;

    for (size_t i = 0; rj != NULL && i < rj->n_comms; i++) {
        if (strcmp(tr_rdzv_comm_name(rj->comms[i]), v->name) == 0) {
            if (tr_rdzv_comm_epoch(rj->comms[i]) == v->epoch) {
                return rj->comms[i];
            }
            comm_drop(rj, i, "communicator moved to a new epoch", s);
            break;
        }
    }
    grown = rj ? realloc(rj->comms, (rj->n_comms + 1) * sizeof(*grown)) : NULL;
    if (grown == NULL || (names = tr_rdzv_rank_names(hj->j, v)) == NULL) {
        if (grown != NULL) {
            rj->comms = grown;
        }
        tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
        return NULL;
    }
    rj->comms = grown;
    if (tr_rdzv_comm_new(v->name, v->epoch, v->size, (const char *const *)names, &c, err) == TROUPE_OK) {
        rj->comms[rj->n_comms++] = c;
        /* IDs published before a head restart are still good for this epoch. */
        rec = record_find(hj->j, v->name, v->epoch);
        if (rec != NULL) {
            const uint8_t *ids[TR_RDZV_MAX_IDS];
            size_t lens[TR_RDZV_MAX_IDS];
            for (size_t i = 0; i < rec->n_ids && i < TR_RDZV_MAX_IDS; i++) {
                ids[i] = rec->ids[i].data;
                lens[i] = rec->ids[i].len;
            }
            tr_rdzv_publish(c, 0, ids, lens, rec->n_ids, answer_ids, s, NULL);
        }
    }
    tr_rdzv_rank_names_free(names, v->size);
    return c;
}

/* enter resolves a worker call to its job, communicator and rank, or
 * answers the call with why not and returns NULL. Under h->mu. */
static tr_rdzv_comm *enter(tr_rdzv_svc *s, tr_rpc_call *call, const Troupe__V1__WorkerRef *from,
                           const char *comm, int check_epoch, uint32_t epoch, tr_rdzv_view *v)
{
    tr_head_job *hj;
    tr_rdzv_comm *c;
    tr_err err;
    int rv;

    if (!tr_rpc_require_worker(call, from ? from->job_id : 0, from ? from->worker : NULL)) {
        return NULL; /* answered: a worker credential of another job */
    }
    rv = tr_rdzv_resolve(s->h, from, comm, &hj, v, &err);

    if (rv == TROUPE_OK && check_epoch && epoch != v->epoch) {
        rv = tr_err_set(&err, TROUPE_FAILED_PRECONDITION,
                        "communicator %s is at epoch %u, not %u: initialise again with epoch %u", v->name, v->epoch,
                        epoch, v->epoch);
    }
    if (rv == TROUPE_OK && (c = comm_get(s, hj, v, &err)) != NULL) {
        return c;
    }
    if (rv == TROUPE_OK) {
        rv = err.code;
    }
    TR_LOG(TR_LOG_INFO, "rdzv refused method=%s job=%llu worker=%s comm=%s: %s", tr_rpc_call_method(call),
           (unsigned long long)(from ? from->job_id : 0), from && from->worker ? from->worker : "", comm, err.msg);
    tr_rpc_reply_error(call, rv, "%s", err.msg);
    return NULL;
}

static int64_t wait_until(tr_rpc_call *call, uint32_t wait_ms)
{
    int64_t until = tr_now_ms() + wait_ms;
    int64_t rpc = tr_rpc_call_deadline(call) - 20; /* answer before the RPC layer's generic expiry */
    return until < rpc ? until : rpc;
}

static void on_call_expire(tr_rpc_call *call, void *arg)
{
    tr_rdzv_svc *s = arg;
    pthread_mutex_lock(&s->h->mu);
    for (size_t k = 0; k < s->n_jobs; k++) {
        for (size_t i = 0; i < s->jobs[k]->n_comms; i++) {
            if (tr_rdzv_forget(s->jobs[k]->comms[i], call)) {
                tr_rpc_call_release(call);
                goto out;
            }
        }
    }
out:
    pthread_mutex_unlock(&s->h->mu);
}

/* parked: the call now waits in the state; arm the timer for its deadline. */
static void parked(tr_rdzv_svc *s, tr_rpc_call *call, int64_t until)
{
    tr_rpc_defer(call, on_call_expire, s);
    tr_bgw_poke(s->timer, until);
}

/* settle finishes a wait call: refused, parked (deferred until answered or
 * its deadline), or answered now with res. */
static void settle(tr_rdzv_svc *s, tr_rpc_call *call, int rv, const tr_err *err, int is_parked, int64_t until,
                   void (*reply)(tr_rpc_call *, const tr_rdzv_result *), const tr_rdzv_result *res)
{
    if (rv != TROUPE_OK) {
        tr_rpc_reply_error(call, err->code, "%s", err->msg);
    } else if (is_parked) {
        parked(s, call, until);
    } else {
        reply(call, res);
    }
}

static void reply_published(tr_head *h, tr_rpc_call *call, uint64_t arg)
{
    Troupe__V1__CommIdsReply rep = TROUPE__V1__COMM_IDS_REPLY__INIT;
    (void)h;
    rep.epoch = (uint32_t)(arg >> 32);
    rep.size = (uint32_t)arg;
    rep.rank = 0;
    tr_rpc_reply(call, &rep.base);
}

static void publish(tr_rdzv_svc *s, tr_rpc_call *call, tr_rdzv_comm *c, const tr_rdzv_view *v,
                    Troupe__V1__CommIdsRequest *req)
{
    const uint8_t *ids[TR_RDZV_MAX_IDS];
    size_t lens[TR_RDZV_MAX_IDS];
    tr_head_job *hj = tr_jobs_find(s->h, req->from->job_id);
    tr_err err;
    int rv;

    for (size_t i = 0; i < req->n_ids && i < TR_RDZV_MAX_IDS; i++) {
        ids[i] = req->ids[i].data;
        lens[i] = req->ids[i].len;
    }
    rv = tr_rdzv_publish(c, v->rank, ids, lens, req->n_ids, answer_ids, s, &err);
    if (rv != TROUPE_OK) {
        tr_rpc_reply_error(call, rv, "%s", err.msg);
        return;
    }
    if (record_find(hj->j, v->name, v->epoch) == NULL) {
        if (record_add(hj->j, v->name, v->epoch, req->ids, req->n_ids) != 0) {
            tr_rpc_reply_error(call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory");
            return;
        }
        tr_head_dirty_job(s->h, hj->j->id);
    }
    TR_LOG(TR_LOG_INFO, "rdzv job=%llu comm=%s epoch=%u published %zu IDs (%u ranks)",
           (unsigned long long)hj->j->id, v->name, v->epoch, req->n_ids, v->size);
    tr_head_after_commit(s->h, call, reply_published, ((uint64_t)v->epoch << 32) | v->size);
}

static void comm_ids(tr_rpc_call *call, void *user)
{
    tr_rdzv_svc *s = tr_rdzv_svc_of(user);
    Troupe__V1__CommIdsRequest *req =
        (Troupe__V1__CommIdsRequest *)tr_rpc_unpack(call, &troupe__v1__comm_ids_request__descriptor);
    tr_rdzv_result res;
    tr_rdzv_view v;
    tr_rdzv_comm *c;
    int64_t until;
    int is_parked = 0, rv;
    tr_err err;

    if (req == NULL) {
        return;
    }
    pthread_mutex_lock(&s->h->mu);
    c = enter(s, call, req->from, req->comm, req->check_epoch, req->epoch, &v);
    if (c == NULL) {
        /* answered */
    } else if (req->describe) {
        tr_head_job *hj = req->awaiting_membership ? tr_jobs_find(s->h, req->from->job_id) : NULL;
        if (hj != NULL) {
            tr_jobs_awaiting(hj, req->from->worker);
        }
        memset(&res, 0, sizeof(res));
        res.epoch = v.epoch;
        res.rank = v.rank;
        res.size = v.size;
        reply_ids(call, &res);
    } else if (req->n_ids > 0) {
        publish(s, call, c, &v, req);
    } else {
        until = wait_until(call, req->wait_ms);
        rv = tr_rdzv_ids_wait(c, v.rank, call, until, &res, &is_parked, &err);
        settle(s, call, rv, &err, is_parked, until, reply_ids, &res);
    }
    pthread_mutex_unlock(&s->h->mu);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void gather(tr_rpc_call *call, void *user)
{
    tr_rdzv_svc *s = tr_rdzv_svc_of(user);
    Troupe__V1__GatherRequest *req =
        (Troupe__V1__GatherRequest *)tr_rpc_unpack(call, &troupe__v1__gather_request__descriptor);
    const Troupe__V1__GatherDone *k;
    tr_head_job *hj;
    tr_rdzv_result res;
    tr_rdzv_view v;
    tr_rdzv_comm *c;
    const char *name;
    int64_t until;
    int is_parked = 0, rv;
    tr_err err;

    if (req == NULL) {
        return;
    }
    pthread_mutex_lock(&s->h->mu);
    c = enter(s, call, req->from, req->comm, req->check_epoch, req->epoch, &v);
    name = req->name ? req->name : "";
    hj = c != NULL && kept_name(name) ? tr_jobs_find(s->h, req->from->job_id) : NULL;
    if (hj != NULL && (k = kept_find(hj->j, v.name, v.epoch, name, req->seq)) != NULL) {
        /* completed already (before a head restart, or its answer to this
         * rank was lost): the same answer */
        after_saved(s, call, reply_copy(k->epoch, v.rank, k->n_data, k->data));
    } else if (c != NULL) {
        until = wait_until(call, req->wait_ms);
        rv = tr_rdzv_gather(c, v.rank, name, req->seq, req->data.data, req->data.len, call, until,
                            hj != NULL ? answer_gather_saved : answer_gather, s, &res, &is_parked, &err);
        if (hj != NULL && rv == TROUPE_OK && !is_parked) {
            if (kept_put(hj->j, v.name, name, req->seq, &res) == 0) {
                tr_head_dirty_job(s->h, hj->j->id);
            }
            after_saved(s, call, reply_of(&res));
        } else {
            settle(s, call, rv, &err, is_parked, until, reply_gather, &res);
        }
    }
    pthread_mutex_unlock(&s->h->mu);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* ---- deadlines -------------------------------------------------------------- */

/* The timer answers waits at their own deadline, naming the missing ranks; it
 * sleeps until the earliest one (parked() wakes it for an earlier one). */
/* tick (the timer, under h->mu): answers the waits whose deadline passed;
 * returns the next deadline. */
static int64_t tick(void *arg, int64_t now)
{
    tr_rdzv_svc *s = arg;
    int64_t next = INT64_MAX;

    for (size_t k = 0; k < s->n_jobs; k++) {
        for (size_t i = 0; i < s->jobs[k]->n_comms; i++) {
            int64_t n = tr_rdzv_expire(s->jobs[k]->comms[i], now, answer_ids, s);
            next = n < next ? n : next;
        }
    }
    return next;
}

/* ---- `troupe job`: waits in progress ---------------------------------------- */

static char *keep_string(tr_rdzv_svc *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *keep_string(tr_rdzv_svc *s, const char *fmt, ...)
{
    char **grown = realloc(s->status_strings, (s->n_strings + 1) * sizeof(*grown));
    char *str = NULL;
    va_list ap;

    if (grown == NULL) {
        return (char *)"";
    }
    s->status_strings = grown;
    va_start(ap, fmt);
    if (vasprintf(&str, fmt, ap) < 0) {
        str = NULL;
    }
    va_end(ap);
    if (str == NULL) {
        return (char *)"";
    }
    s->status_strings[s->n_strings++] = str;
    return str;
}

static void status_add(tr_rdzv_svc *s, const tr_rdzv_comm *c, const tr_rdzv_pending *p)
{
    Troupe__V1__RdzvStatus *st = calloc(1, sizeof(*st));
    Troupe__V1__RdzvStatus **grown = realloc(s->status, (s->n_status + 1) * sizeof(*grown));

    if (grown != NULL) {
        s->status = grown;
    }
    if (st == NULL || grown == NULL) {
        free(st);
        return;
    }
    troupe__v1__rdzv_status__init(st);
    if ((st->missing = calloc(p->n_missing + 1, sizeof(char *))) == NULL) {
        free(st);
        return;
    }
    st->comm = keep_string(s, "%s", tr_rdzv_comm_name(c));
    st->epoch = tr_rdzv_comm_epoch(c);
    st->what = keep_string(s, "%s", p->what);
    st->size = tr_rdzv_comm_size(c);
    st->arrived = p->arrived;
    for (uint32_t m = 0; m < p->n_missing; m++) {
        st->missing[st->n_missing++] = keep_string(s, "%u %s", p->missing_rank[m], p->missing[m]);
    }
    s->status[s->n_status++] = st;
}

static void decorate_clear(tr_rdzv_svc *s)
{
    for (size_t i = 0; i < s->n_status; i++) {
        free(s->status[i]->missing);
        free(s->status[i]);
    }
    for (size_t i = 0; i < s->n_strings; i++) {
        free(s->status_strings[i]);
    }
    free(s->status);
    free(s->status_strings);
    s->status = NULL;
    s->status_strings = NULL;
    s->n_status = s->n_strings = 0;
}

static void decorate(tr_head *h, tr_head_job *hj, int on, void *state)
{
    tr_rdzv_svc *s = state;
    tr_rdzv_job *rj = job_find(s, hj->j->id, NULL);
    (void)h;

    if (!on) {
        hj->j->rendezvous = NULL;
        hj->j->n_rendezvous = 0;
        decorate_clear(s);
        return;
    }
    for (size_t i = 0; rj != NULL && i < rj->n_comms; i++) {
        tr_rdzv_pending p[8];
        size_t n = tr_rdzv_pending_list(rj->comms[i], p, 8);
        for (size_t k = 0; k < n && k < 8; k++) {
            status_add(s, rj->comms[i], &p[k]);
        }
    }
    hj->j->rendezvous = s->status;
    hj->j->n_rendezvous = s->n_status;
}

/* ---- the service ------------------------------------------------------------ */

/* Worker calls about their own job (rpc.h: scopes); enter() checks the job. */
static const tr_rpc_method rdzv_methods[] = {
    {"troupe.v1.Head/CommIds", comm_ids, TR_SCOPES_WORKER_JOB},
    {"troupe.v1.Head/Gather", gather, TR_SCOPES_WORKER_JOB},
    {NULL, NULL, 0},
};

tr_rdzv_svc *tr_rdzv_svc_of(void *head)
{
    tr_head *h = head;
    for (size_t i = 0; i < h->n_svc; i++) {
        if (h->svc[i] == &tr_rdzv_service) {
            return h->svc_state[i];
        }
    }
    return NULL;
}

static int svc_start(tr_head *h, void **state, tr_err *err)
{
    tr_rdzv_svc *s = calloc(1, sizeof(*s));
    tr_bgw_opts to = {.name = "rendezvous timer", .mu = &h->mu, .tick = tick, .arg = s};
    int rv;

    if (s == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    s->h = h;
    /* A head that stopped while a job ended may still hold its IDs. */
    pthread_mutex_lock(&h->mu);
    for (size_t k = 0; k < h->n_jobs; k++) {
        if (tr_jobs_is_terminal(h->jobs[k]) && record_drop(h->jobs[k]->j, NULL, UINT32_MAX)) {
            tr_head_dirty_job(h, h->jobs[k]->j->id);
        }
    }
    pthread_mutex_unlock(&h->mu);
    if ((rv = tr_bgw_start(&s->timer, &to, err)) != TROUPE_OK) {
        free(s);
        return rv;
    }
    *state = s;
    return TROUPE_OK;
}

static void svc_stop(tr_head *h, void *state)
{
    tr_rdzv_svc *s = state;

    tr_bgw_stop(s->timer);
    pthread_mutex_lock(&h->mu);
    while (s->n_jobs > 0) {
        job_drop(s, s->jobs[s->n_jobs - 1], "the head is stopping");
    }
    pthread_mutex_unlock(&h->mu);
    decorate_clear(s);
    free(s->jobs);
    free(s);
}

const tr_head_service tr_rdzv_service = {
    .name = "rendezvous",
    .methods = rdzv_methods,
    .start = svc_start,
    .stop = svc_stop,
    .job_changed = job_changed,
    .decorate = decorate,
};
