/* rdzv_int.h - the rendezvous service's state (rdzv.c), and the view of
 * communicators it shares with the job store (rdzv_view.h). */
#ifndef TR_RDZV_INT_H
#define TR_RDZV_INT_H

#include <pthread.h>
#include <stdint.h>

#include "head.h"
#include "jobs.h"
#include "rdzv_state.h"
#include "rdzv_view.h"

typedef struct tr_rdzv_job {
    uint64_t id;
    tr_rdzv_comm **comms; /* communicators called about, at their current epoch */
    size_t n_comms;
} tr_rdzv_job;

typedef struct tr_rdzv_svc {
    tr_head *h;
    tr_rdzv_job **jobs; /* by id */
    size_t n_jobs, cap_jobs;
    struct tr_bgw *timer; /* answers waits at their deadline (under h->mu) */
    /* decorate: the RdzvStatus messages lent to a reply (freed at on = 0) */
    Troupe__V1__RdzvStatus **status;
    size_t n_status;
    char **status_strings;
    size_t n_strings;
} tr_rdzv_svc;

/* tr_rdzv_svc_of finds the service's state from the head (handlers' user). */
tr_rdzv_svc *tr_rdzv_svc_of(void *head);

#endif
