/* events.c - the core's events and the services' hooks (events.h). */
#include "events.h"
#include "head.h"
#include "jobs.h"

int tr_events_subscribe(tr_head *h, tr_event_kind kind, tr_event_fn fn, void *arg, tr_err *err)
{
    tr_events *e = &h->evbus;

    if ((unsigned)kind >= TR_EV_COUNT || fn == NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "no such event kind (%d)", (int)kind);
    }
    if (e->n[kind] == TR_EVENTS_MAX_SUBS) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "too many subscribers of event %d (%d)", (int)kind,
                          TR_EVENTS_MAX_SUBS);
    }
    e->subs[kind][e->n[kind]].fn = fn;
    e->subs[kind][e->n[kind]].arg = arg;
    e->n[kind]++;
    return TROUPE_OK;
}

/* services_hear calls the services' hook for an event, where they have one;
 * a service whose start failed (no state) hears nothing. */
static void services_hear(tr_head *h, tr_event_kind kind, tr_head_job *hj)
{
    for (size_t i = 0; i < h->n_svc; i++) {
        const tr_head_service *s = h->svc[i];
        void *st = h->svc_state[i];
        if (st == NULL) {
            continue;
        }
        if (kind == TR_EV_JOB_CHANGED && s->job_changed != NULL) {
            s->job_changed(h, hj, st);
        } else if (kind == TR_EV_JOB_SAVED && s->job_saved != NULL) {
            s->job_saved(h, hj, st);
        } else if (kind == TR_EV_JOB_DELETED && s->job_deleted != NULL) {
            s->job_deleted(h, hj->j->id, st);
        }
    }
}

static void subscribers_hear(tr_head *h, const tr_event *ev)
{
    const tr_events *e = &h->evbus;
    for (size_t i = 0; i < e->n[ev->kind]; i++) {
        e->subs[ev->kind][i].fn(h, ev, e->subs[ev->kind][i].arg);
    }
}

/* Services hear of a change before the parked calls are answered, so an
 * answer already reflects what they made of it (health drops an ended job's
 * trackers); a deleted job's parked calls get its final record, decorated by
 * the services, before the services drop their share of it. */
void tr_events_publish(tr_head *h, tr_event_kind kind, tr_head_job *hj, tr_head_node *hn)
{
    tr_event ev = {kind, hj, hn};

    if (kind == TR_EV_JOB_CHANGED || kind == TR_EV_JOB_SAVED) {
        services_hear(h, kind, hj);
    }
    subscribers_hear(h, &ev);
    if (kind == TR_EV_JOB_DELETED) {
        services_hear(h, kind, hj);
    }
}

void tr_head_list_fields(tr_head *h, tr_head_job *hj, Troupe__V1__Job *copy, int on)
{
    for (size_t i = 0; i < h->n_svc; i++) {
        if (h->svc[i]->list_fields != NULL && h->svc_state[i] != NULL) {
            h->svc[i]->list_fields(h, hj, copy, on, h->svc_state[i]);
        }
    }
}

void tr_head_decorate(tr_head *h, tr_head_job *hj, int on)
{
    for (size_t i = 0; i < h->n_svc; i++) {
        if (h->svc[i]->decorate != NULL && h->svc_state[i] != NULL) {
            h->svc[i]->decorate(h, hj, on, h->svc_state[i]);
        }
    }
}
