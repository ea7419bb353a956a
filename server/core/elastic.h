/* elastic.h - elastic groups on the head: a lost rank shrinks its group
 * instead of failing it while enough ranks remain (elastic.c). Under h->mu. */
#ifndef TR_ELASTIC_H
#define TR_ELASTIC_H

#include "jobs.h"

/* tr_elastic_spec: the group's elastic settings, NULL when it is not elastic. */
const Troupe__V1__ElasticSpec *tr_elastic_spec(const Troupe__V1__Job *j, const char *group);

/* tr_elastic_group: the placed group's record, NULL when not placed. */
Troupe__V1__GroupInfo *tr_elastic_group(const Troupe__V1__Job *j, const char *group);

/* tr_elastic_epoch: the epoch of an elastic group's communicator: the
 * highest attempt among its workers plus its membership changes. */
uint32_t tr_elastic_epoch(const Troupe__V1__Job *j, const char *group);

/* tr_elastic_shrink takes worker idx (failed: ended, judged, lost) out of
 * its elastic group when at least min_workers other members remain: a new
 * epoch with the survivors ranked densely, a SHRUNK change in the job's
 * membership history and events, the worker's node told to stop it. why
 * says what happened when the worker's own record does not (a judgement).
 * Returns 1 when the group shrank (the failure is handled), 0 when the
 * restart rules apply (not elastic, or too few would remain). */
int tr_elastic_shrink(tr_head *h, tr_head_job *hj, size_t idx, const char *why);

/* tr_elastic_shrink_lost: the same for every worker of hj lost with node
 * node_id, all or none: 1 when every one was taken out, 0 when one of their
 * groups is not elastic or would fall below min_workers (nothing changed). */
int tr_elastic_shrink_lost(tr_head *h, tr_head_job *hj, uint64_t node_id);

/* tr_elastic_next_attempt: the attempt of a restart or re-placement: the
 * restart count, unless a replacement already had that (then one above it). */
uint32_t tr_elastic_next_attempt(const tr_head_job *hj);

/* tr_elastic_grow starts replacements for workers its elastic groups shrank
 * away (from the reaper tick): a removed worker that has ended, whose node is
 * ALIVE and takes work, its slot's crash-loop back-off after it ended (unless
 * its replacements failed more often than max_restarts), while its group
 * has fewer than max_workers members, runs again in its own slot (its GPUs
 * and CPU share are still the job's), or, a CPU-only worker whose node is
 * gone and fenced, on another node the scheduler picks, at a new attempt; the group grows (a
 * new epoch, a GREW change) and the replacement takes the state from a
 * survivor at the next step boundary. */
void tr_elastic_grow(tr_head *h, tr_head_job *hj);

/* tr_elastic_reset makes a restarted group whole again (every worker a
 * member at its placed rank); its membership changes are kept, so its
 * epochs never repeat. */
void tr_elastic_reset(tr_head_job *hj, const char *group);

#endif
