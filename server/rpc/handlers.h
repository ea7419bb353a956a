/* handlers.h - troupe-head's RPC layer: the method handlers of the head's
 * own service (troupe.v1.Head) and what they keep between calls (parked
 * GetJob, GetLogs and NodeSync polls).
 *
 * The layer sits on top: it calls the services and the core, and the core
 * reaches it only through the events it subscribes to (events.h) and the
 * hooks it sets in the head, all set by tr_head_rpc_attach before the head
 * starts. Handlers run on the RPC server's threads and take h->mu
 * themselves. */
#ifndef TR_HANDLERS_H
#define TR_HANDLERS_H

#include "head.h"
#include "jobs.h"

/* tr_head_rpc_attach gives h the head's method table and subscribes the
 * parked polls to the core's events; call once, before tr_head_start.
 * RESOURCE_EXHAUSTED when the events table is full. */
int tr_head_rpc_attach(tr_head *h, tr_err *err);

/* Jobs (jobs_rpc.c, jobs_batch.c, jobs_list.c). */
void tr_head_submit_job(tr_rpc_call *call, void *user);
void tr_head_get_job(tr_rpc_call *call, void *user);
void tr_head_list_jobs(tr_rpc_call *call, void *user);
void tr_head_stop_job(tr_rpc_call *call, void *user);
void tr_head_submit_jobs(tr_rpc_call *call, void *user);
void tr_head_stop_jobs(tr_rpc_call *call, void *user);
void tr_head_delete_job(tr_rpc_call *call, void *user);
void tr_head_get_logs(tr_rpc_call *call, void *user);
/* The parked GetJob and GetLogs polls of hj (jobs_rpc.c), under h->mu:
 * answered when what they wait for is saved, or all of them (all = 1) with
 * what there is. */
void tr_jobs_answer_job_waiters(tr_head *h, tr_head_job *hj, int all);
void tr_jobs_answer_log_waiters(tr_head *h, tr_head_job *hj, int all);

/* NodeSync (jobs_sync.c). tr_jobs_answer_sync answers hn's parked poll with
 * its saved assignments; tr_jobs_sync_saved does so for every node whose
 * newest saved version its poll has not seen. tr_jobs_sync_budget: the most
 * bytes of assignments one reply carries (max_frame_bytes, at most the
 * agents' 4 MiB, less the envelope); tr_jobs_sync_check refuses
 * (INVALID_ARGUMENT, with the numbers) a spec one of whose workers would not
 * fit one reply with its job's and group's common part (h->spec_check). */
void tr_head_node_sync(tr_rpc_call *call, void *user);
void tr_jobs_answer_sync(tr_head *h, tr_head_node *hn);
void tr_jobs_sync_saved(tr_head *h);
size_t tr_jobs_sync_budget(const tr_head *h);
int tr_jobs_sync_check(tr_head *h, const Troupe__V1__JobSpec *spec, tr_err *err);

/* Credentials, admin only (tokens_rpc.c). */
void tr_head_create_token(tr_rpc_call *call, void *user);
void tr_head_revoke_token(tr_rpc_call *call, void *user);

/* Nodes (nodes_rpc.c). */
void tr_head_ping(tr_rpc_call *call, void *user);
void tr_head_register_node(tr_rpc_call *call, void *user);
void tr_head_heartbeat(tr_rpc_call *call, void *user);
void tr_head_list_nodes(tr_rpc_call *call, void *user);
void tr_head_get_cluster(tr_rpc_call *call, void *user);
void tr_head_deregister_node(tr_rpc_call *call, void *user);
void tr_head_drain_node(tr_rpc_call *call, void *user);

#endif
