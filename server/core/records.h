/* records.h - finding the head's job and node records and reading their
 * plain facts (records.c). These call nothing of the head, so any file of
 * any layer may use them without tying files into a circle. Under h->mu. */
#ifndef TR_RECORDS_H
#define TR_RECORDS_H

#include <stdint.h>

#include "troupe/v1/troupe.pb-c.h"

/* Defined in head.h, head_node.h and jobs.h; named here so this header
 * stands alone (C11 allows the typedef twice). */
typedef struct tr_head tr_head;
typedef struct tr_head_node tr_head_node;
typedef struct tr_head_job tr_head_job;

/* tr_jobs_find: job id's record, or NULL (deleted, or never was). */
tr_head_job *tr_jobs_find(tr_head *h, uint64_t id);
/* tr_jobs_is_terminal: SUCCEEDED, FAILED or STOPPED. */
int tr_jobs_is_terminal(const tr_head_job *hj);
/* Settled: ended and holding no GPUs; nothing about it can change again. */
int tr_jobs_is_settled(const tr_head_job *hj);
/* tr_jobs_saved: is everything about hj on disk? Only then may its state
 * leave the head (GetJob, job long polls). */
int tr_jobs_saved(const tr_head *h, const tr_head_job *hj);

/* tr_head_node_find: node id's record, or NULL. */
tr_head_node *tr_head_node_find(tr_head *h, uint64_t id);
/* tr_head_node_gone: DEAD or LEFT, final. */
int tr_head_node_gone(const Troupe__V1__Node *n);
/* tr_head_name_hash returns a 64-bit hash of a node name (FNV-1a). */
uint64_t tr_head_name_hash(const char *name);
/* tr_head_node_fence_until: tr_now_ms() by which every worker of a lost node
 * has been killed by its agent's lease; work from it is placed again only
 * after (0 = nothing to wait for). */
int64_t tr_head_node_fence_until(tr_head *h, const Troupe__V1__Node *n);

#endif
