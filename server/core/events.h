/* events.h - what the core tells the layers above it (events.c).
 *
 * The core never calls an RPC handler or a service: when a job or a node
 * changes, it publishes an event, and whoever keeps calls or state about it
 * (the RPC layer's parked GetJob/GetLogs/NodeSync polls, the services)
 * subscribes before the head starts. Every call therefore points down:
 * rpc/ -> services/ -> core/. Events are published and delivered under h->mu,
 * on the thread that made the change; a subscriber must not block, must not
 * take h->mu (a leaf lock of its own is fine), and may answer calls (the RPC server sends replies without
 * taking the head's lock).
 *
 *   event                  published by                 subscribers
 *   TR_EV_JOB_CHANGED      jobs.c (tr_jobs_touch, notes) services' job_changed, then
 *                                                        rpc: GetJob polls, auth: its
 *                                                        copy of the workers
 *   TR_EV_JOB_SAVED        commit.c (per saved job)      services' job_saved, then rpc:
 *                                                        GetJob polls, GetLogs of a settled job
 *   TR_EV_JOB_DUE          jobs.c (reaper tick)          rpc: GetJob and GetLogs polls
 *   TR_EV_JOB_DELETED      jobs_retain.c (before free)   rpc: every poll of the job (final
 *                                                        record), auth: drops the job's
 *                                                        workers, then services' job_deleted
 *   TR_EV_LOG_GREW         joblog.c, jobs.c              rpc: GetLogs polls
 *   TR_EV_NODE_SYNC_DUE    jobs.c (reaper tick)          rpc: the node's NodeSync poll
 *   TR_EV_BATCH_SAVED      commit.c (after each batch)   rpc: NodeSync polls now on disk
 */
#ifndef TR_EVENTS_H
#define TR_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "troupe/v1/troupe.pb-c.h"

struct tr_head;
struct tr_head_job;
struct tr_head_node;

typedef enum tr_event_kind {
    TR_EV_JOB_CHANGED = 0,
    TR_EV_JOB_SAVED,
    TR_EV_JOB_DUE,
    TR_EV_JOB_DELETED,
    TR_EV_LOG_GREW,
    TR_EV_NODE_SYNC_DUE,
    TR_EV_BATCH_SAVED,
    TR_EV_COUNT
} tr_event_kind;

/* tr_event: what changed. hj is set for the job events, hn for the node
 * ones; both are borrowed for the call only. all (TR_EV_JOB_DELETED) asks
 * that every parked call be answered, whatever it waits for. */
typedef struct tr_event {
    tr_event_kind kind;
    struct tr_head_job *hj;
    struct tr_head_node *hn;
} tr_event;

typedef void (*tr_event_fn)(struct tr_head *h, const tr_event *ev, void *arg);

#define TR_EVENTS_MAX_SUBS 4

/* tr_events: the subscribers, per kind, in the order they subscribed. Part of
 * the head (head.h); zero-initialised with it. */
typedef struct tr_events {
    struct {
        tr_event_fn fn;
        void *arg;
    } subs[TR_EV_COUNT][TR_EVENTS_MAX_SUBS];
    size_t n[TR_EV_COUNT];
} tr_events;

/* tr_events_subscribe adds fn (with arg, borrowed for the head's life) to the
 * subscribers of kind; before tr_head_start, on the thread that starts the
 * head. RESOURCE_EXHAUSTED past TR_EVENTS_MAX_SUBS per kind. */
int tr_events_subscribe(struct tr_head *h, tr_event_kind kind, tr_event_fn fn, void *arg, tr_err *err);

/* tr_events_publish delivers an event to the services' hooks and the
 * subscribers, in the order the table above gives; under h->mu. */
void tr_events_publish(struct tr_head *h, tr_event_kind kind, struct tr_head_job *hj, struct tr_head_node *hn);

/* The services' read hooks (head.h: tr_head_service), for whoever packs a
 * job message: tr_head_decorate sets (on = 1) and clears (on = 0) transient
 * fields of hj's own message, tr_head_list_fields those of a listing's
 * shallow copy. Under h->mu. */
void tr_head_decorate(struct tr_head *h, struct tr_head_job *hj, int on);
void tr_head_list_fields(struct tr_head *h, struct tr_head_job *hj, Troupe__V1__Job *copy, int on);

#endif
