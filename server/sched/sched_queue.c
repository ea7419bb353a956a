/* sched_queue.c - one scheduling pass over the pending queue.
 *
 * FIFO with conservative backfill and no runtime estimates (the rule is in
 * sched.h, tr_sched_schedule). Four views carry the pass:
 *
 *   F   what a job may start on: the live free GPUs minus every shadow so far.
 *   Ca  what a waiting job may claim for its shadow: all alive GPUs minus jobs
 *       started in this pass minus earlier shadows. GPUs of jobs that were
 *       already running count as claimable, since they will come back.
 *   Cb  Ca without the shadows (shadows may overlap when Ca is too full).
 *   E   all alive GPUs (last resort: the shadow may overlap starters too).
 *
 * A started job's placement is computed on F, so it is valid on the live view
 * (F is a subset) and touches no earlier shadow: it cannot delay an earlier
 * job beyond the placement computed for that job. A shadow is only a fence for
 * later jobs and is dropped at the end of the pass. */
#include <stdio.h>
#include <string.h>

#include "sched_int.h"

enum { V_F = 0, V_CA = 1, V_CB = 2, V_E = 3 };

typedef struct qpass {
    tr_sched *s;
    const tr_sched_pending *pending;
    tr_sched_decision *out;
    bool claim_ready; /* Ca and Cb are built */
    bool have_waiting;
    uint64_t first_waiting; /* job id of the oldest waiting job */
} qpass;

/* Build Ca and Cb on first need, replaying the jobs started before it. */
static int claim_views(qpass *q, size_t upto)
{
    tr_sched *s = q->s;
    if (q->claim_ready) {
        return TROUPE_OK;
    }
    if (tr_sched_view_empty_of(&s->tmp[V_CA], s, false) != TROUPE_OK ||
        tr_sched_view_copy(&s->tmp[V_CB], &s->tmp[V_CA]) != TROUPE_OK) {
        return TROUPE_RESOURCE_EXHAUSTED;
    }
    for (size_t i = 0; i < upto; i++) {
        if (q->out[i].placement != NULL) {
            tr_sched_view_take_placement(s, &s->tmp[V_CA], q->out[i].placement);
            tr_sched_view_take_placement(s, &s->tmp[V_CB], q->out[i].placement);
        }
    }
    q->claim_ready = true;
    return TROUPE_OK;
}

/* Start job i on F: reserve on the live view and in the claim views. */
static int start_job(qpass *q, size_t i, tr_sched_placement *p)
{
    tr_sched *s = q->s;
    p->job = q->pending[i].job_id;
    if (tr_sched_placement_link(s, p) != TROUPE_OK) {
        tr_sched_view_give_placement(s, &s->tmp[V_F], p);
        tr_sched_placement_free(p);
        return TROUPE_RESOURCE_EXHAUSTED;
    }
    tr_sched_view_take_placement(s, &s->live, p);
    if (q->claim_ready) {
        tr_sched_view_take_placement(s, &s->tmp[V_CA], p);
        tr_sched_view_take_placement(s, &s->tmp[V_CB], p);
    }
    q->out[i].status = TROUPE_OK;
    q->out[i].placement = p;
    return TROUPE_OK;
}

/* Compute job i's shadow on Ca, else Cb, else E, and fence it off in F and Ca.
 * A job that only fits once SUSPECT nodes report again (with_suspect) takes
 * its shadow on an E that counts them, so the GPUs it will need on the alive
 * nodes stay fenced too. */
static int take_shadow(qpass *q, const tr_sched_job_spec *spec, bool with_suspect)
{
    tr_sched *s = q->s;
    tr_sched_placement *p = NULL;
    bool oom = false;
    int rv;

    rv = tr_sched_place_on(s, &s->tmp[V_CA], TR_SCHED_VIEW_EMPTY, spec, &p, &oom, NULL);
    if (rv != TROUPE_OK && !oom) {
        rv = tr_sched_place_on(s, &s->tmp[V_CB], TR_SCHED_VIEW_EMPTY, spec, &p, &oom, NULL);
        if (rv == TROUPE_OK) {
            tr_sched_view_give_placement(s, &s->tmp[V_CB], p);
        }
    }
    if (rv != TROUPE_OK && !oom) {
        if (tr_sched_view_empty_of(&s->tmp[V_E], s, with_suspect) != TROUPE_OK) {
            return TROUPE_RESOURCE_EXHAUSTED;
        }
        rv = tr_sched_place_on(s, &s->tmp[V_E], TR_SCHED_VIEW_EMPTY, spec, &p, &oom, NULL);
    }
    if (rv == TROUPE_OK) {
        tr_sched_view_take_placement(s, &s->tmp[V_F], p);
        tr_sched_view_take_placement(s, &s->tmp[V_CA], p);
        tr_sched_placement_free(p);
    }
    /* A feasible job always fits E; failing here without OOM means the spec
     * is infeasible, which the caller has ruled out, so only OOM is an error. */
    return oom ? TROUPE_RESOURCE_EXHAUSTED : TROUPE_OK;
}

/* Why job i waits: its own need (live view), or an earlier job's fence. */
static void wait_reason(qpass *q, size_t i, const tr_sched_job_spec *spec)
{
    tr_sched *s = q->s;
    tr_sched_placement *p = NULL;
    bool oom;
    tr_err *why = &q->out[i].why;

    if (tr_sched_place_on(s, &s->live, TR_SCHED_VIEW_LIVE, spec, &p, &oom, why) == TROUPE_OK) {
        tr_sched_view_give_placement(s, &s->live, p);
        tr_sched_placement_free(p);
        tr_err_set(
            why, TROUPE_RESOURCE_EXHAUSTED,
            "queued behind earlier pending job %llu: the free GPUs this job could use now are held for "
            "earlier jobs (FIFO; backfill may not delay them)",
            (unsigned long long)q->first_waiting);
    }
    q->out[i].status = TROUPE_RESOURCE_EXHAUSTED;
}

/* held_nodes describes the matching nodes that take no new work now, by why
 * ("n1 DRAINING (troupe undrain n1 gives it work again); n2 SUSPECT (...)"),
 * and says whether any matching node takes work at all. */
static bool held_nodes(const tr_sched *s, const tr_sched_job_spec *spec, char *buf, size_t size)
{
    size_t off = 0;
    bool any_alive = false;

    buf[0] = '\0';
    for (uint32_t i = 0; i < s->nnodes; i++) {
        const tr_sched_node *n = &s->nodes[i];
        char why[160];
        if (!tr_sched_node_matches(n, spec->selector, spec->nselector)) {
            continue;
        }
        any_alive |= n->state == TR_SCHED_ALIVE;
        if (n->state != TR_SCHED_SUSPECT || off + 1 >= size) {
            continue;
        }
        if (n->hold == TR_SCHED_HOLD_DRAINING) {
            snprintf(why, sizeof(why), "DRAINING: `troupe undrain %s` gives it work again", n->name);
        } else if (n->hold == TR_SCHED_HOLD_FENCED) {
            snprintf(why, sizeof(why), "FENCED: still running workers of its earlier self");
        } else {
            snprintf(why, sizeof(why), "SUSPECT: waiting for it to report again");
        }
        off += (size_t)snprintf(buf + off, size - off, "%s%s (%s)", off ? "; " : "", n->name, why);
    }
    return any_alive;
}

/* A job that cannot fit the ALIVE nodes may still fit once SUSPECT ones
 * report again (a head restart loads every node SUSPECT until its agent
 * registers; a missed heartbeat or two makes one SUSPECT): it waits for them,
 * saying so. Only a job that no ALIVE or SUSPECT node could ever hold is
 * infeasible (the head decides when to give up on it). */
static int wait_job(qpass *q, size_t i, const tr_sched_job_spec *spec)
{
    tr_err ferr, serr;
    bool with_suspect = false;
    int rv = tr_sched_feasible(q->s, spec, &ferr);

    if (rv == TROUPE_FAILED_PRECONDITION) {
        rv = tr_sched_feasible_in(q->s, spec, true, &serr);
        with_suspect = rv == TROUPE_OK;
        if (rv != TROUPE_OK) {
            ferr = serr;
        }
    }
    if (rv != TROUPE_OK) {
        /* Bad or infeasible: the head fails the job; it holds no shadow. */
        q->out[i].status = rv;
        q->out[i].why = ferr;
        return rv == TROUPE_RESOURCE_EXHAUSTED ? rv : TROUPE_OK;
    }
    if (with_suspect) {
        char held[512];
        if (held_nodes(q->s, spec, held, sizeof(held))) {
            q->out[i].status = tr_err_set(&q->out[i].why, TROUPE_RESOURCE_EXHAUSTED,
                                          "waiting for nodes that take no new work now: %s; the nodes that do "
                                          "cannot hold it alone (%s)",
                                          held, ferr.msg);
        } else {
            q->out[i].status = tr_err_set(&q->out[i].why, TROUPE_RESOURCE_EXHAUSTED,
                                          "waiting: no node takes new work now: %s", held);
        }
    } else {
        wait_reason(q, i, spec);
    }
    rv = claim_views(q, i);
    if (rv == TROUPE_OK) {
        rv = take_shadow(q, spec, with_suspect);
    }
    if (!q->have_waiting) {
        q->have_waiting = true;
        q->first_waiting = q->pending[i].job_id;
    }
    return rv;
}

static int one_job(qpass *q, size_t i)
{
    tr_sched *s = q->s;
    const tr_sched_job_spec *spec = q->pending[i].spec;
    tr_sched_decision *d = &q->out[i];
    tr_sched_placement *p = NULL;
    bool oom = false;

    d->status = tr_sched_validate(spec, &d->why);
    if (d->status != TROUPE_OK) {
        return TROUPE_OK;
    }
    if (tr_sched_find(s, q->pending[i].job_id) != NULL) {
        d->status = tr_err_set(&d->why, TROUPE_ALREADY_EXISTS, "job %llu is already placed",
                               (unsigned long long)q->pending[i].job_id);
        return TROUPE_OK;
    }
    if (tr_sched_place_on(s, &s->tmp[V_F], TR_SCHED_VIEW_LIVE, spec, &p, &oom, &d->why) == TROUPE_OK) {
        tr_err_clear(&d->why);
        return start_job(q, i, p);
    }
    return oom ? TROUPE_RESOURCE_EXHAUSTED : wait_job(q, i, spec);
}

int tr_sched_schedule(tr_sched *s, const tr_sched_pending *pending, size_t n, tr_sched_decision *out,
                      tr_err *err)
{
    qpass q = {.s = s, .pending = pending, .out = out};
    int rv = TROUPE_OK;
    size_t i;

    tr_err_clear(err);
    for (i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof(out[i]));
    }
    if (tr_sched_view_copy(&s->tmp[V_F], &s->live) != TROUPE_OK) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "scheduler: out of memory");
    }
    for (i = 0; i < n && rv == TROUPE_OK; i++) {
        rv = one_job(&q, i);
    }
    if (rv != TROUPE_OK) {
        /* Out of memory: undo the pass so that the head can simply retry. */
        for (size_t j = 0; j < n; j++) {
            tr_sched_release(s, out[j].placement);
            out[j].placement = NULL;
            out[j].status = tr_err_set(&out[j].why, TROUPE_RESOURCE_EXHAUSTED, "scheduler: out of memory");
        }
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "scheduler: out of memory");
    }
    return TROUPE_OK;
}
