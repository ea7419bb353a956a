/* client_int.h - libtroupe internals shared by its source files. Not API. */
#ifndef TR_CLIENT_INT_H
#define TR_CLIENT_INT_H

#include "err.h"
#include "rpc.h"
#include "troupe/client.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

struct troupe_client {
    tr_rpc_client *rpc;
    char url[512];
    uint32_t timeout_ms;
};

/* tr_client_finish copies an internal error into the caller's troupe_error
 * (which may be NULL) and returns the code. */
static inline troupe_status tr_client_finish(troupe_error *err, const tr_err *e, int rv)
{
    if (err != NULL) {
        err->code = rv;
        tr_strlcpy(err->message, rv == TROUPE_OK ? "" : e->msg, sizeof(err->message));
    }
    return (troupe_status)rv;
}

/* A troupe_job and what it points into: msg is owned unless NULL (a batch
 * keeps its jobs inside its own reply message). */
typedef struct job_impl {
    troupe_job pub; /* first: the public pointer is the impl pointer */
    Troupe__V1__Job *msg;
    troupe_worker *workers;
    troupe_group *groups;
    troupe_job_event *events;
    troupe_rdzv_wait *waits;
    troupe_profile profile;
    troupe_failure *failures;
    troupe_job_health *health;
    troupe_membership_change *membership;
} job_impl;

/* tr_client_job_view points ji->pub at m (arrays allocated here); -1 when out
 * of memory. tr_client_job_clear frees the arrays and an owned msg. */
int tr_client_job_view(job_impl *ji, const Troupe__V1__Job *m);
void tr_client_job_clear(job_impl *ji);
/* tr_client_job_runtime fills the worker-runtime parts (waits, profile);
 * worker_admin.c. */
int tr_client_job_runtime(job_impl *ji, const Troupe__V1__Job *m);
/* tr_client_health_new makes m's health public (HEALTH_NONE when m has
 * none): one allocation, free() it; strings borrowed from m. NULL when out of
 * memory (job_health.c). */
troupe_job_health *tr_client_health_new(const Troupe__V1__Job *m);

/* tr_client_submit_spec sends one SubmitJob. */
troupe_status tr_client_submit_spec(troupe_client *c, Troupe__V1__JobSpec *spec, uint64_t *job_id, tr_err *e);

#endif
