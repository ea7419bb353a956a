/* worker_admin.c - libtroupe's side of the worker runtime for users and
 * admins: a job's rendezvous waits, profiling setting and the failures its
 * workers reported in troupe_job, and
 * troupe_set_profile (`troupe profile`). */
#include <stdlib.h>
#include <string.h>

#include "client_int.h"

static const char *str(const char *s)
{
    return s ? s : "";
}

int tr_client_job_runtime(job_impl *ji, const Troupe__V1__Job *m)
{
    const Troupe__V1__ProfileControl *pc = m->profile_control;
    troupe_profile *p = &ji->profile;

    ji->waits = calloc(m->n_rendezvous + 1, sizeof(*ji->waits));
    if (ji->waits == NULL) {
        return -1;
    }
    for (size_t i = 0; i < m->n_rendezvous; i++) {
        const Troupe__V1__RdzvStatus *r = m->rendezvous[i];
        ji->waits[i] = (troupe_rdzv_wait){r->comm, r->epoch,      r->what, r->size, r->arrived,
                                          r->n_missing, (const char *const *)r->missing};
    }
    ji->pub.n_waits = m->n_rendezvous;
    ji->pub.waits = ji->waits;
    if ((ji->failures = calloc(m->n_failures + 1, sizeof(*ji->failures))) == NULL) {
        return -1;
    }
    for (size_t i = 0; i < m->n_failures; i++) {
        const Troupe__V1__WorkerFailure *f = m->failures[i];
        ji->failures[i] = (troupe_failure){str(f->worker), str(f->group), str(f->node), f->rank, f->attempt,
                                           str(f->code),   str(f->reason), f->ts_ms};
    }
    ji->pub.n_failures = m->n_failures;
    ji->pub.failures = ji->failures;
    ji->pub.failures_dropped = m->failures_dropped;
    if ((ji->membership = calloc(m->n_membership + 1, sizeof(*ji->membership))) == NULL) {
        return -1;
    }
    for (size_t i = 0; i < m->n_membership; i++) {
        const Troupe__V1__MembershipChange *c = m->membership[i];
        ji->membership[i] = (troupe_membership_change){c->ts_ms,      str(c->group), str(c->kind),   c->from_size,
                                                       c->to_size,    c->epoch,      c->step,        str(c->worker),
                                                       str(c->text)};
    }
    ji->pub.n_membership = m->n_membership;
    ji->pub.membership = ji->membership;
    memset(p, 0, sizeof(*p));
    p->spec_steps = m->spec && m->spec->profile ? str(m->spec->profile->steps) : "";
    p->spec_workers = m->spec && m->spec->profile ? str(m->spec->profile->workers) : "";
    p->steps = p->workers = "";
    if (pc != NULL) {
        p->version = pc->version;
        p->off = pc->off;
        p->steps = str(pc->steps);
        p->next = pc->next;
        p->align = pc->align;
        p->workers = str(pc->workers);
        p->set_ms = pc->set_ms;
    }
    ji->pub.profile = p;
    return 0;
}

TROUPE_API troupe_status troupe_set_profile(troupe_client *c, uint64_t job_id, const troupe_profile_req *req,
                                            uint64_t *version, troupe_error *err)
{
    Troupe__V1__SetProfileRequest r = TROUPE__V1__SET_PROFILE_REQUEST__INIT;
    Troupe__V1__ProfileControl pc = TROUPE__V1__PROFILE_CONTROL__INIT;
    Troupe__V1__SetProfileReply *rep = NULL;
    tr_err e;
    int rv;

    if (version != NULL) {
        *version = 0;
    }
    if (req == NULL) {
        return tr_client_finish(err, &e, tr_err_set(&e, TROUPE_INVALID_ARGUMENT, "no profile request"));
    }
    pc.off = req->off;
    pc.steps = (char *)str(req->steps);
    pc.next = req->next;
    pc.align = req->align;
    pc.workers = (char *)str(req->workers);
    r.job_id = job_id;
    r.control = &pc;
    rv = tr_rpc_client_call(c->rpc, "troupe.v1.Head/SetProfile", &r.base, &troupe__v1__set_profile_reply__descriptor,
                            (ProtobufCMessage **)&rep, c->timeout_ms, 0, &e);
    if (rv == TROUPE_OK) {
        if (version != NULL && rep->control != NULL) {
            *version = rep->control->version;
        }
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    return tr_client_finish(err, &e, rv);
}
