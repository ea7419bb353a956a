/* methods.c - the head's method table and the RPC layer's subscriptions to
 * the core's events (handlers.h). */
#include "handlers.h"

#include "auth.h"
#include "events.h"

/* Who may call what (rpc.h: scopes). Handlers of TR_SCOPES_WORKER_JOB methods
 * check the job with tr_rpc_require_job; node methods check the node with
 * tr_head_node_allowed (auth.h). Services add their own tables (rdzv.c). */
static const tr_rpc_method head_methods[] = {
    /* Quick: answered while every other handler thread waits (health checks). */
    {"troupe.v1.Head/Ping", tr_head_ping, TR_SCOPES_ANY | TR_METHOD_QUICK},
    {"troupe.v1.Head/RegisterNode", tr_head_register_node, TR_SCOPES_NODE},
    {"troupe.v1.Head/Heartbeat", tr_head_heartbeat, TR_SCOPES_NODE},
    {"troupe.v1.Head/ListNodes", tr_head_list_nodes, TR_SCOPES_USER},
    {"troupe.v1.Head/GetCluster", tr_head_get_cluster, TR_SCOPES_USER},
    {"troupe.v1.Head/SubmitJob", tr_head_submit_job, TR_SCOPES_USER},
    {"troupe.v1.Head/GetJob", tr_head_get_job, TR_SCOPES_WORKER_JOB},
    {"troupe.v1.Head/ListJobs", tr_head_list_jobs, TR_SCOPES_USER},
    {"troupe.v1.Head/StopJob", tr_head_stop_job, TR_SCOPES_USER},
    {"troupe.v1.Head/GetLogs", tr_head_get_logs, TR_SCOPES_WORKER_JOB},
    {"troupe.v1.Head/NodeSync", tr_head_node_sync, TR_SCOPES_NODE},
    {"troupe.v1.Head/SubmitJobs", tr_head_submit_jobs, TR_SCOPES_USER},
    {"troupe.v1.Head/StopJobs", tr_head_stop_jobs, TR_SCOPES_USER},
    {"troupe.v1.Head/DeleteJob", tr_head_delete_job, TR_SCOPES_USER},
    {"troupe.v1.Head/CreateToken", tr_head_create_token, TR_SCOPE_ADMIN},
    {"troupe.v1.Head/RevokeToken", tr_head_revoke_token, TR_SCOPE_ADMIN},
    {"troupe.v1.Head/DeregisterNode", tr_head_deregister_node, TR_SCOPES_NODE},
    {"troupe.v1.Head/DrainNode", tr_head_drain_node, TR_SCOPE_ADMIN},
    {NULL, NULL, 0},
};

/* A job changed, or time passed for it: its GetJob polls see the new record
 * once saved. */
static void on_job_changed(tr_head *h, const tr_event *ev, void *arg)
{
    (void)arg;
    tr_jobs_answer_job_waiters(h, ev->hj, 0);
}

/* A job's batch is on disk: the GetJob polls it held back go out now, and
 * the end of a settled job's log is final. */
static void on_job_saved(tr_head *h, const tr_event *ev, void *arg)
{
    (void)arg;
    tr_jobs_answer_job_waiters(h, ev->hj, 0);
    if (ev->hj->log_waiters != NULL && tr_jobs_is_settled(ev->hj)) {
        tr_jobs_answer_log_waiters(h, ev->hj, 0);
    }
}

static void on_job_due(tr_head *h, const tr_event *ev, void *arg)
{
    (void)arg;
    tr_jobs_answer_job_waiters(h, ev->hj, 0);
    tr_jobs_answer_log_waiters(h, ev->hj, 0);
}

/* The job goes: every poll of it gets its final record now. */
static void on_job_deleted(tr_head *h, const tr_event *ev, void *arg)
{
    (void)arg;
    tr_jobs_answer_job_waiters(h, ev->hj, 1);
    tr_jobs_answer_log_waiters(h, ev->hj, 1);
}

static void on_log_grew(tr_head *h, const tr_event *ev, void *arg)
{
    (void)arg;
    tr_jobs_answer_log_waiters(h, ev->hj, 0);
}

static void on_node_sync_due(tr_head *h, const tr_event *ev, void *arg)
{
    (void)arg;
    tr_jobs_answer_sync(h, ev->hn);
}

static void on_batch_saved(tr_head *h, const tr_event *ev, void *arg)
{
    (void)ev;
    (void)arg;
    tr_jobs_sync_saved(h);
}

int tr_head_rpc_attach(tr_head *h, tr_err *err)
{
    static const struct {
        tr_event_kind kind;
        tr_event_fn fn;
    } subs[] = {
        {TR_EV_JOB_CHANGED, on_job_changed}, {TR_EV_JOB_SAVED, on_job_saved},
        {TR_EV_JOB_DUE, on_job_due},         {TR_EV_JOB_DELETED, on_job_deleted},
        {TR_EV_LOG_GREW, on_log_grew},       {TR_EV_NODE_SYNC_DUE, on_node_sync_due},
        {TR_EV_BATCH_SAVED, on_batch_saved},
    };
    int rv;

    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        if ((rv = tr_events_subscribe(h, subs[i].kind, subs[i].fn, NULL, err)) != TROUPE_OK) {
            return rv;
        }
    }
    h->core_methods = head_methods;
    h->spec_check = tr_jobs_sync_check;
    return TROUPE_OK;
}
