/* records.c - finding the head's job and node records and reading their
 * plain facts. Every layer and most core files look records up; these
 * functions call nothing of the head, so they sit at the bottom of the core
 * and looking something up never ties two files into a circle. */
#include "records.h"

#include "head.h"
#include "jobs.h"
#include "liveness.h"

/* Slack after a lease ends for the worker supervisor to notice (it checks
 * every 100 ms) and for SIGKILL to land (liveness.h). */
#define FENCE_SLACK_MS TR_LEASE_MARGIN_MS

int tr_jobs_is_terminal(const tr_head_job *hj)
{
    return hj->j->state >= TROUPE__V1__JOB_STATE__JOB_SUCCEEDED;
}

int tr_jobs_is_settled(const tr_head_job *hj)
{
    return tr_jobs_is_terminal(hj) && hj->pl == NULL;
}

tr_head_job *tr_jobs_find(tr_head *h, uint64_t id)
{
    size_t lo = 0, hi = h->n_jobs;
    while (lo < hi) { /* jobs are appended in id order */
        size_t mid = (lo + hi) / 2;
        if (h->jobs[mid]->j->id < id) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return (lo < h->n_jobs && h->jobs[lo]->j->id == id) ? h->jobs[lo] : NULL;
}

/* Nodes are kept in id order (ids only grow and records are never removed;
 * recovery loads them sorted), so lookups are a binary search: they run
 * several times per placement and per NodeSync. A miss falls back to a scan,
 * which keeps the answer right even if that order were ever broken. */
tr_head_node *tr_head_node_find(tr_head *h, uint64_t id)
{
    size_t lo = 0, hi = h->n_nodes;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (h->nodes[mid].n->id < id) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo < h->n_nodes && h->nodes[lo].n->id == id) {
        return &h->nodes[lo];
    }
    for (size_t i = 0; i < h->n_nodes; i++) {
        if (h->nodes[i].n->id == id) {
            return &h->nodes[i];
        }
    }
    return NULL;
}

int tr_head_node_gone(const Troupe__V1__Node *n)
{
    return n->state == TROUPE__V1__NODE_STATE__NODE_DEAD || n->state == TROUPE__V1__NODE_STATE__NODE_LEFT;
}

uint64_t tr_head_name_hash(const char *name)
{
    uint64_t x = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        x = (x ^ *p) * 0x100000001b3ull;
    }
    return x;
}

int64_t tr_head_node_fence_until(tr_head *h, const Troupe__V1__Node *n)
{
    tr_head_node *hn = tr_head_node_find(h, n->id);
    if (hn == NULL || n->state == TROUPE__V1__NODE_STATE__NODE_LEFT) {
        return 0; /* a deregistered agent stopped its workers first */
    }
    return hn->seen_mono + tr_liveness_lease_ms(&h->live) + FENCE_SLACK_MS;
}

int tr_jobs_saved(const tr_head *h, const tr_head_job *hj)
{
    return hj->save_seq <= h->saved_seq;
}
