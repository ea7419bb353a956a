/* batch.c - libtroupe's parsed specs and batch calls (SubmitJobs, StopJobs).
 *
 * A troupe_batch owns the decoded reply; its items' strings and jobs point
 * into it, so troupe_batch_free releases everything at once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_int.h"
#include "jobspec.h"
#include "troupe/client.h"

struct troupe_spec {
    Troupe__V1__JobSpec *msg; /* from tr_jobspec_parse/load */
};

typedef struct batch_impl {
    troupe_batch pub; /* first: the public pointer is the impl pointer */
    ProtobufCMessage *reply;
    troupe_batch_item *items;
    job_impl *jobs; /* one per item when jobs were asked for */
} batch_impl;

static troupe_status spec_wrap(Troupe__V1__JobSpec *msg, int rv, troupe_spec **out, tr_err *e)
{
    if (rv == TROUPE_OK && (*out = calloc(1, sizeof(**out))) == NULL) {
        rv = tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    if (rv != TROUPE_OK) {
        tr_jobspec_free(msg);
        return (troupe_status)rv;
    }
    (*out)->msg = msg;
    return TROUPE_OK;
}

TROUPE_API troupe_status troupe_spec_parse(const char *text, size_t len, const char *name,
                                           const char *base_dir, troupe_spec **out, troupe_error *err)
{
    Troupe__V1__JobSpec *msg = NULL;
    tr_err e;
    int rv;

    *out = NULL;
    rv = tr_jobspec_parse(text, len, name ? name : "job", base_dir, &msg, &e);
    return tr_client_finish(err, &e, spec_wrap(msg, rv, out, &e));
}

TROUPE_API troupe_status troupe_spec_load(const char *path, troupe_spec **out, troupe_error *err)
{
    Troupe__V1__JobSpec *msg = NULL;
    tr_err e;
    int rv;

    *out = NULL;
    rv = tr_jobspec_load(path, &msg, &e);
    return tr_client_finish(err, &e, spec_wrap(msg, rv, out, &e));
}

TROUPE_API void troupe_spec_free(troupe_spec *spec)
{
    if (spec != NULL) {
        tr_jobspec_free(spec->msg);
        free(spec);
    }
}

TROUPE_API troupe_status troupe_submit_spec(troupe_client *c, const troupe_spec *spec, uint64_t *job_id,
                                            troupe_error *err)
{
    tr_err e;
    *job_id = 0;
    return tr_client_finish(err, &e, tr_client_submit_spec(c, spec->msg, job_id, &e));
}

TROUPE_API void troupe_batch_free(troupe_batch *batch)
{
    batch_impl *b = (batch_impl *)batch;
    if (b == NULL) {
        return;
    }
    for (size_t i = 0; b->jobs != NULL && i < b->pub.count; i++) {
        tr_client_job_clear(&b->jobs[i]); /* msg is NULL: the reply owns it */
    }
    if (b->reply != NULL) {
        protobuf_c_message_free_unpacked(b->reply, NULL);
    }
    free(b->jobs);
    free(b->items);
    free(b);
}

/* fill_items builds the public items over the reply's results; -1 on OOM. */
static int fill_items(batch_impl *b, Troupe__V1__JobResult **res, size_t n, int with_jobs)
{
    b->items = calloc(n + 1, sizeof(*b->items));
    b->jobs = with_jobs ? calloc(n + 1, sizeof(*b->jobs)) : NULL;
    if (b->items == NULL || (with_jobs && b->jobs == NULL)) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        troupe_batch_item *it = &b->items[i];
        it->job_id = res[i]->job_id;
        it->code = (troupe_status)res[i]->code;
        it->message = res[i]->message;
        it->state = (troupe_job_state)res[i]->state;
        it->reason = res[i]->reason;
        b->pub.failed += it->code != TROUPE_OK;
        if (with_jobs && res[i]->job != NULL) {
            if (tr_client_job_view(&b->jobs[i], res[i]->job) != 0) {
                return -1;
            }
            it->job = &b->jobs[i].pub;
        }
    }
    b->pub.count = n;
    b->pub.items = b->items;
    return 0;
}

/* finish_batch checks the reply against the request and turns the first
 * failed item into the call's status. */
static troupe_status finish_batch(batch_impl *b, Troupe__V1__JobResult **res, size_t n_res, size_t n_req,
                                  int with_jobs, troupe_batch **out, troupe_error *err)
{
    tr_err e;
    int rv = TROUPE_OK;

    if (n_res != n_req) {
        rv = tr_err_set(&e, TROUPE_DATA_LOSS, "head answered %zu items for a batch of %zu", n_res, n_req);
    } else if (fill_items(b, res, n_res, with_jobs) != 0) {
        rv = tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    if (rv != TROUPE_OK) {
        troupe_batch_free(&b->pub);
        return tr_client_finish(err, &e, rv);
    }
    for (size_t i = 0; i < n_res && rv == TROUPE_OK; i++) {
        const troupe_batch_item *it = &b->items[i];
        if (it->code != TROUPE_OK) {
            char job[48] = "";
            if (it->job_id != 0) {
                snprintf(job, sizeof(job), " (job %llu)", (unsigned long long)it->job_id);
            }
            rv = tr_err_set(&e, it->code, "item %zu of %zu%s: %s (%zu of %zu failed)", i + 1, n_res, job,
                            it->message, b->pub.failed, n_res);
        }
    }
    *out = &b->pub;
    return tr_client_finish(err, &e, rv);
}

static troupe_status batch_call(troupe_client *c, const char *method, const ProtobufCMessage *req,
                                const ProtobufCMessageDescriptor *rep_desc, batch_impl **out, tr_err *e)
{
    batch_impl *b = calloc(1, sizeof(*b));
    int rv;

    *out = NULL;
    if (b == NULL) {
        return (troupe_status)tr_err_set(e, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    rv = tr_rpc_client_call(c->rpc, method, req, rep_desc, &b->reply, c->timeout_ms, 0, e);
    if (rv != TROUPE_OK) {
        troupe_batch_free(&b->pub);
        return (troupe_status)rv;
    }
    *out = b;
    return TROUPE_OK;
}

static troupe_status check_count(size_t n, tr_err *e)
{
    if (n > TROUPE_BATCH_MAX) {
        return (troupe_status)tr_err_set(e, TROUPE_INVALID_ARGUMENT, "%zu items in one batch; at most %d", n,
                                         TROUPE_BATCH_MAX);
    }
    return TROUPE_OK;
}

TROUPE_API troupe_status troupe_submit_batch(troupe_client *c, const troupe_spec *const *specs, size_t n,
                                             unsigned flags, troupe_batch **out, troupe_error *err)
{
    Troupe__V1__SubmitJobsRequest req = TROUPE__V1__SUBMIT_JOBS_REQUEST__INIT;
    Troupe__V1__SubmitJobsReply *rep;
    batch_impl *b = NULL;
    tr_err e;
    int rv;

    *out = NULL;
    if ((rv = check_count(n, &e)) != TROUPE_OK) {
        return tr_client_finish(err, &e, rv);
    }
    req.specs = calloc(n + 1, sizeof(*req.specs));
    if (req.specs == NULL) {
        return tr_client_finish(err, &e, tr_err_set(&e, TROUPE_RESOURCE_EXHAUSTED, "out of memory"));
    }
    for (size_t i = 0; i < n; i++) {
        if (specs[i] == NULL) {
            free(req.specs);
            return tr_client_finish(
                err, &e, tr_err_set(&e, TROUPE_INVALID_ARGUMENT, "spec %zu of %zu is NULL", i + 1, n));
        }
        req.specs[i] = specs[i]->msg; /* borrowed for packing */
    }
    req.n_specs = n;
    req.return_jobs = (flags & TROUPE_BATCH_JOBS) != 0;
    rv = batch_call(c, "troupe.v1.Head/SubmitJobs", &req.base, &troupe__v1__submit_jobs_reply__descriptor, &b,
                    &e);
    free(req.specs);
    if (rv != TROUPE_OK) {
        return tr_client_finish(err, &e, rv);
    }
    rep = (Troupe__V1__SubmitJobsReply *)b->reply;
    return finish_batch(b, rep->results, rep->n_results, n, req.return_jobs, out, err);
}

TROUPE_API troupe_status troupe_stop_batch(troupe_client *c, const uint64_t *job_ids, size_t n,
                                           troupe_batch **out, troupe_error *err)
{
    Troupe__V1__StopJobsRequest req = TROUPE__V1__STOP_JOBS_REQUEST__INIT;
    Troupe__V1__StopJobsReply *rep;
    batch_impl *b = NULL;
    tr_err e;
    int rv;

    *out = NULL;
    if ((rv = check_count(n, &e)) != TROUPE_OK) {
        return tr_client_finish(err, &e, rv);
    }
    req.job_ids = (uint64_t *)job_ids; /* borrowed for packing */
    req.n_job_ids = n;
    rv =
        batch_call(c, "troupe.v1.Head/StopJobs", &req.base, &troupe__v1__stop_jobs_reply__descriptor, &b, &e);
    if (rv != TROUPE_OK) {
        return tr_client_finish(err, &e, rv);
    }
    rep = (Troupe__V1__StopJobsReply *)b->reply;
    return finish_batch(b, rep->results, rep->n_results, n, 0, out, err);
}
