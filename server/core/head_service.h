/* head_service.h - how a service (services/) joins the head: a table of
 * its methods and hooks, registered before the head starts. */
#ifndef TR_HEAD_SERVICE_H
#define TR_HEAD_SERVICE_H

#include "err.h"
#include "rpc.h"
#include "troupe/v1/troupe.pb-c.h"

/* Defined in head.h; named here so this header stands alone (C11 allows
 * the typedef twice). */
typedef struct tr_head tr_head;
struct tr_head_job;

/* A head service built on the core (rendezvous, profile control): the head
 * knows services only through this table, so they depend on the core and
 * never the other way round. Register with tr_head_add_service before
 * tr_head_start. All hooks but start/stop run under h->mu. */
typedef struct tr_head_service {
    const char *name;
    const tr_rpc_method *methods; /* NULL-terminated; joins the head's table */
    /* start: after recovery, before the RPC server listens (h->mu not held). */
    int (*start)(struct tr_head *h, void **state, tr_err *err);
    /* stop: after the RPC server stopped (deferred calls already answered). */
    void (*stop)(struct tr_head *h, void *state);
    /* job_changed: a job's record changed (state, workers, attempts). */
    void (*job_changed)(struct tr_head *h, struct tr_head_job *hj, void *state);
    /* job_saved: every change of the job made so far is on disk (commit.c,
     * through TR_EV_JOB_SAVED): what may only show saved state answers. */
    void (*job_saved)(struct tr_head *h, struct tr_head_job *hj, void *state);
    /* decorate: on = 1 before a job message is packed for a reply, to set
     * transient fields; on = 0 right after, to clear them. */
    void (*decorate)(struct tr_head *h, struct tr_head_job *hj, int on, void *state);
    /* list_fields: like decorate, for a listing's shallow copy of hj's
     * message (ListJobs sets many before one reply is packed, so what it
     * sets must belong to that copy alone); on = 0 clears them after. */
    void (*list_fields)(struct tr_head *h, struct tr_head_job *hj, Troupe__V1__Job *copy, int on, void *state);
    /* job_deleted: the job's record is gone (DeleteJob, retention); the
     * service drops what it keeps of it. Under h->mu: no I/O here. */
    void (*job_deleted)(struct tr_head *h, uint64_t job_id, void *state);
} tr_head_service;

#define TR_HEAD_MAX_SERVICES 8

/* tr_head_add_service registers s (borrowed for the head's life) before
 * tr_head_start; RESOURCE_EXHAUSTED past TR_HEAD_MAX_SERVICES. */
int tr_head_add_service(tr_head *h, const tr_head_service *s, tr_err *err);

#endif
