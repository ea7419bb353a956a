/* job_health.c - a job's health (Job.health, judged by the head) as the
 * public troupe_job_health, for troupe_get_job and listings. */
#include <stdlib.h>
#include <string.h>

#include "client_int.h"

TROUPE_API const char *troupe_health_state_name(int state)
{
    switch (state) {
    case TROUPE_HEALTH_OK:
        return "OK";
    case TROUPE_HEALTH_STALLED:
        return "STALLED";
    default:
        return "NONE";
    }
}

static const char *str(const char *s)
{
    return s ? s : "";
}

static void rank_of(troupe_health_rank *d, const Troupe__V1__HealthRank *m)
{
    *d = (troupe_health_rank){
        .worker = str(m->worker),
        .group = str(m->group),
        .node = str(m->node),
        .rank = m->rank,
        .n_gpus = m->n_gpus,
        .gpus = m->gpus,
        .last_step = m->last_step,
        .since_ms = m->since_ms,
        .step_ms = m->step_ms,
        .group_step_ms = m->group_step_ms,
        .ratio = m->ratio,
        .memory_bytes = m->memory_bytes,
        .memory_slope = m->memory_slope,
        .memory_total = m->memory_total,
        .memory_growing = m->memory_growing,
        .memory_near = m->memory_near,
        .by_compute = m->by_compute,
    };
}

troupe_job_health *tr_client_health_new(const Troupe__V1__Job *m)
{
    const Troupe__V1__JobHealth *jh = m->health;
    size_t n = jh ? jh->n_stalled + jh->n_stragglers + jh->n_memory : 0;
    troupe_job_health *h = calloc(1, sizeof(*h) + (n + 1) * sizeof(troupe_health_rank));
    troupe_health_rank *r;

    if (h == NULL || jh == NULL) {
        return h; /* no health in the reply: HEALTH_NONE */
    }
    r = (troupe_health_rank *)(h + 1); /* the ranks follow, in the same allocation */
    h->state = (troupe_health_state)jh->state;
    h->stall_after_ms = jh->stall_after_ms;
    h->judged_ms = jh->judged_ms;
    h->on_stall_fail = jh->on_stall_fail;
    h->ended = jh->ended;
    h->stalled = r;
    for (size_t i = 0; i < jh->n_stalled; i++) {
        rank_of(r++, jh->stalled[i]);
    }
    h->stragglers = r;
    for (size_t i = 0; i < jh->n_stragglers; i++) {
        rank_of(r++, jh->stragglers[i]);
    }
    h->memory = r;
    for (size_t i = 0; i < jh->n_memory; i++) {
        rank_of(r++, jh->memory[i]);
    }
    h->n_stalled = jh->n_stalled;
    h->n_stragglers = jh->n_stragglers;
    h->n_memory = jh->n_memory;
    return h;
}
