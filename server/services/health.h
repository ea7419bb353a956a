/* health.h - job health judged by the head: stalls, stragglers
 * and GPU-memory trends of running jobs, from the step figures workers send
 * with troupe_worker_step_end (the metrics path). The rules are
 * health_judge.h's; this service feeds them, judges every health_tick_ms,
 * records events on changes, fails a stalled group when the job says
 * `health: {on_stall: fail}`, and puts the judgement into job replies
 * (Job.health: troupe job, troupe jobs, -o json). Register with
 * tr_head_add_service, after tr_metrics_service. */
#ifndef TR_HEALTH_H
#define TR_HEALTH_H

#include "head.h"

extern const tr_head_service tr_health_service;

/* tr_health_job returns in *out a copy of job_id's latest judgement (state
 * HEALTH_NONE when no worker reported a step yet; for an ended job its last
 * judgement while it ran, with ended set, kept in memory only;
 * the same message `troupe job` gets as Job.health). The caller frees it with
 * troupe__v1__job_health__free_unpacked(*out, NULL). Read-only; any thread,
 * with or without h->mu held (it takes only the service's own lock, which
 * always comes after h->mu). RESOURCE_EXHAUSTED when out of memory,
 * FAILED_PRECONDITION when the service is not running. */
int tr_health_job(tr_head *h, uint64_t job_id, Troupe__V1__JobHealth **out);

/* tr_health_check_config checks the head's health_* settings together
 * (health_on_stall is warn or fail). */
int tr_health_check_config(const tr_head_config *c, tr_err *err);

#endif
