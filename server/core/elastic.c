/* elastic.c - elastic groups: a rank lost from a group with `elastic:
 * {min_workers: K}` shrinks the group instead of failing or restarting it,
 * as long as K members remain.
 *
 * Membership lives in the job record, so it is saved with the job and
 * survives a head restart: each worker is a member or removed (never both
 * again within an attempt), members carry a dense member_rank in the order
 * of their placed ranks, the group's record its size now and how many
 * membership changes it went through. The group's communicator epoch is the
 * highest attempt plus those changes (rdzv_view.c), so every change is a new
 * epoch: the survivors rendezvous again in it and can never meet the old
 * ring, and a removed worker is refused there. The survivors learn their
 * new rank and size from the control long poll (profile.c), which answers
 * when the epoch they know moves on.
 *
 * Below min_workers nothing here changes: the restart rules apply (a group
 * restart makes the group whole again, tr_elastic_reset).
 *
 * Growing back (tr_elastic_grow, each reaper tick): a removed worker runs
 * again in its own slot once it has ended, its node is ALIVE and takes work,
 * and its slot's crash-loop back-off passed since it ended, while the group
 * has fewer than max_workers members. It gets a new attempt (a new
 * credential, a new run for its agent) above every attempt the job issued;
 * the group moves to a new epoch with a GREW change. The survivors hear of
 * it through the control poll and meet the replacement in the new epoch at
 * their next step boundary, where it takes the state from one of them.
 * Replacements that fail again are a crash loop of the slot, capped like
 * restarts (give_up_check). A CPU-only slot whose node is gone (DEAD or
 * LEFT, its lease over) is placed on another node by the scheduler
 * (relocate); a GPU slot is not (its GPUs are part of the job's virtual
 * nodes, placed whole). */
#include "elastic.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "head_node.h"
#include "log.h"
#include "records.h"
#include "sched_restore.h"
#include "util.h"

#define MEMBERSHIP_MAX 64 /* changes kept on the record */

const Troupe__V1__ElasticSpec *tr_elastic_spec(const Troupe__V1__Job *j, const char *group)
{
    for (size_t g = 0; g < j->spec->n_groups; g++) {
        if (strcmp(j->spec->groups[g]->name, group) == 0) {
            return j->spec->groups[g]->elastic;
        }
    }
    return NULL;
}

Troupe__V1__GroupInfo *tr_elastic_group(const Troupe__V1__Job *j, const char *group)
{
    for (size_t g = 0; g < j->n_groups; g++) {
        if (strcmp(j->groups[g]->name, group) == 0) {
            return j->groups[g];
        }
    }
    return NULL;
}

uint32_t tr_elastic_epoch(const Troupe__V1__Job *j, const char *group)
{
    const Troupe__V1__GroupInfo *gi = tr_elastic_group(j, group);
    uint32_t epoch = 0;

    for (size_t i = 0; i < j->n_workers; i++) {
        if (strcmp(j->workers[i]->group, group) == 0 && j->workers[i]->attempt > epoch) {
            epoch = j->workers[i]->attempt;
        }
    }
    return epoch + (gi != NULL ? gi->membership_changes : 0);
}

/* failed: the worker will not take part any more (its end was not a clean
 * exit, or it was lost). A member that exited 0 is done, not failed. */
static int failed(const Troupe__V1__WorkerInfo *w)
{
    switch (w->state) {
    case TROUPE__V1__WORKER_STATE__WORKER_EXITED: return w->exit_code != 0 || w->signal != 0;
    case TROUPE__V1__WORKER_STATE__WORKER_FAILED_TO_START:
    case TROUPE__V1__WORKER_STATE__WORKER_LOST: return 1;
    default: return 0;
    }
}

/* survivors counts the group's members that still take part, leaving out
 * the workers skip says are leaving now. */
static uint32_t survivors(const Troupe__V1__Job *j, const char *group, int (*skip)(const Troupe__V1__WorkerInfo *, void *),
                          void *arg)
{
    uint32_t n = 0;
    for (size_t i = 0; i < j->n_workers; i++) {
        const Troupe__V1__WorkerInfo *w = j->workers[i];
        if (strcmp(w->group, group) == 0 && !w->removed && !failed(w) && !skip(w, arg)) {
            n++;
        }
    }
    return n;
}

static int is_worker(const Troupe__V1__WorkerInfo *w, void *arg)
{
    return w == arg;
}

static const char *signal_name(int sig)
{
    switch (sig) {
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGINT: return "SIGINT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGHUP: return "SIGHUP";
    default: return NULL;
    }
}

/* cause says what became of w, from its record, else why. */
static void cause(const Troupe__V1__WorkerInfo *w, const char *why, char *buf, size_t size)
{
    const char *sig = signal_name(w->signal);

    if (w->state == TROUPE__V1__WORKER_STATE__WORKER_EXITED && w->signal != 0) {
        if (sig != NULL) {
            snprintf(buf, size, "killed by %s", sig);
        } else {
            snprintf(buf, size, "killed by signal %d", w->signal);
        }
    } else if (w->state == TROUPE__V1__WORKER_STATE__WORKER_EXITED) {
        snprintf(buf, size, "exited with code %d", w->exit_code);
    } else if (w->state == TROUPE__V1__WORKER_STATE__WORKER_LOST) {
        snprintf(buf, size, "lost: %s", w->message);
    } else if (w->state == TROUPE__V1__WORKER_STATE__WORKER_FAILED_TO_START) {
        snprintf(buf, size, "failed to start: %s", w->message);
    } else {
        snprintf(buf, size, "%s", why != NULL ? why : "taken out");
    }
}

/* renumber gives the group's members dense ranks in placed-rank order and
 * returns how many there are. */
static uint32_t renumber(Troupe__V1__Job *j, const char *group)
{
    uint32_t n = 0;
    for (uint32_t r = 0; r < j->n_workers; r++) {
        for (size_t i = 0; i < j->n_workers; i++) {
            Troupe__V1__WorkerInfo *w = j->workers[i];
            if (strcmp(w->group, group) == 0 && w->rank == r && !w->removed) {
                w->member_rank = n++;
            }
        }
    }
    return n;
}

static void history_add(Troupe__V1__Job *j, Troupe__V1__MembershipChange *c)
{
    Troupe__V1__MembershipChange **grown;

    if (j->n_membership == MEMBERSHIP_MAX) {
        troupe__v1__membership_change__free_unpacked(j->membership[0], NULL);
        memmove(j->membership, j->membership + 1, (j->n_membership - 1) * sizeof(*j->membership));
        j->n_membership--;
    }
    grown = realloc(j->membership, (j->n_membership + 1) * sizeof(*grown));
    if (grown == NULL) {
        troupe__v1__membership_change__free_unpacked(c, NULL);
        return; /* the event below still says it */
    }
    j->membership = grown;
    j->membership[j->n_membership++] = c;
}

/* give_up_check: a replacement that fails continues its slot's crash loop.
 * The first grow-back answers the loss itself; each later one is a restart
 * of the slot and is counted like a group's restarts: once more replacements
 * failed in a row than restart.max_restarts, the slot is not grown back and
 * the group goes on at its smaller size. A replacement that ran well (as
 * long as the crash-loop back-off's reset asks) starts the count over. The
 * reason is added to what (the SHRUNK change's text). */
static void give_up_check(tr_head *h, const Troupe__V1__Job *j, Troupe__V1__WorkerInfo *w, char *what,
                          size_t size)
{
    uint32_t max = j->spec->max_restarts;
    size_t len = strlen(what);

    if (w->regrown == 0) {
        return; /* not a replacement */
    }
    if (tr_jobs_ran_well(h, w)) {
        w->regrown = 0;
        return;
    }
    if (w->regrown > max && len < size) {
        w->regrow_stopped = 1;
        snprintf(
            what + len, size - len,
            "; not grown back: %u replacement%s failed in a row (restart.max_restarts %u), the group goes on "
            "without this slot",
            w->regrown, w->regrown == 1 ? "" : "s", max);
    }
}

/* remove_one takes w out and records the change; the caller checked that
 * enough members remain. */
static void remove_one(tr_head *h, tr_head_job *hj, Troupe__V1__WorkerInfo *w, const char *why)
{
    Troupe__V1__Job *j = hj->j;
    Troupe__V1__GroupInfo *gi = tr_elastic_group(j, w->group);
    Troupe__V1__MembershipChange *c = calloc(1, sizeof(*c));
    uint32_t from = gi != NULL ? gi->world_size : 0, to, old_rank = w->member_rank;
    uint64_t step = h->group_step != NULL ? h->group_step(h, hj, w->group, h->group_step_arg) : 0;
    char what[600], text[1024], at[48] = "";

    cause(w, why, what, sizeof(what));
    give_up_check(h, j, w, what, sizeof(what));
    w->removed = 1;
    to = renumber(j, w->group);
    if (gi != NULL) {
        gi->world_size = to;
        gi->membership_changes++;
    }
    if (step > 0) {
        snprintf(at, sizeof(at), " at step %llu", (unsigned long long)step);
    }
    snprintf(text, sizeof(text), "SHRUNK %s %u -> %u%s: rank %u (%s on %s) %s; epoch %u", w->group, from, to, at,
             old_rank, w->name, w->node_name[0] ? w->node_name : "?", what, tr_elastic_epoch(j, w->group));
    if (c != NULL) {
        troupe__v1__membership_change__init(c);
        c->ts_ms = tr_wall_ms();
        tr_jobs_set_str(&c->group, w->group);
        tr_jobs_set_str(&c->kind, "SHRUNK");
        c->from_size = from;
        c->to_size = to;
        c->epoch = tr_elastic_epoch(j, w->group);
        c->step = step;
        tr_jobs_set_str(&c->worker, w->name);
        tr_jobs_set_str(&c->text, text);
        history_add(j, c);
    }
    /* Its node no longer runs it: one still running (judged stalled, or
     * fenced) is stopped by its agent. */
    tr_jobs_node_bump(h, w->node_id);
    tr_jobs_note(h, hj, "SHRUNK", text); /* saved with the record; wakes the control polls */
}

int tr_elastic_shrink(tr_head *h, tr_head_job *hj, size_t idx, const char *why)
{
    Troupe__V1__WorkerInfo *w = hj->j->workers[idx];
    const Troupe__V1__ElasticSpec *es = tr_elastic_spec(hj->j, w->group);

    if (es == NULL || tr_elastic_group(hj->j, w->group) == NULL) {
        return 0;
    }
    if (w->removed) {
        return 1; /* already out: its end changes nothing */
    }
    if (survivors(hj->j, w->group, is_worker, w) < es->min_workers) {
        TR_LOG(TR_LOG_INFO, "job=%llu group=%s worker=%s: %u members would remain, min_workers %u: restart rules apply",
               (unsigned long long)hj->j->id, w->group, w->name, survivors(hj->j, w->group, is_worker, w),
               es->min_workers);
        return 0;
    }
    remove_one(h, hj, w, why);
    return 1;
}

typedef struct lost_on {
    uint64_t node_id;
} lost_on;

static int lost_here(const Troupe__V1__WorkerInfo *w, void *arg)
{
    const lost_on *l = arg;
    return w->node_id == l->node_id && w->state == TROUPE__V1__WORKER_STATE__WORKER_LOST;
}

int tr_elastic_shrink_lost(tr_head *h, tr_head_job *hj, uint64_t node_id)
{
    Troupe__V1__Job *j = hj->j;
    lost_on l = {node_id};
    int any = 0;

    for (size_t i = 0; i < j->n_workers; i++) {
        const Troupe__V1__WorkerInfo *w = j->workers[i];
        const Troupe__V1__ElasticSpec *es;
        if (w->removed || !lost_here(w, &l)) {
            continue;
        }
        es = tr_elastic_spec(j, w->group);
        if (es == NULL || tr_elastic_group(j, w->group) == NULL || survivors(j, w->group, lost_here, &l) < es->min_workers) {
            return 0;
        }
        any = 1;
    }
    for (size_t i = 0; any && i < j->n_workers; i++) {
        if (!j->workers[i]->removed && lost_here(j->workers[i], &l)) {
            remove_one(h, hj, j->workers[i], NULL);
        }
    }
    return any;
}

uint32_t tr_elastic_next_attempt(const tr_head_job *hj)
{
    uint32_t a = hj->j->restarts;
    return hj->j->grow_attempt >= a && hj->j->grow_attempt > 0 ? hj->j->grow_attempt + 1 : a;
}

enum { GROW_NO, GROW_HERE, GROW_ELSEWHERE };

/* cpu_only: the group's workers take CPU slots, no GPUs. Only such a worker
 * is placed on another node: a GPU worker's GPUs belong to the job's virtual
 * nodes, which are placed whole. */
static int cpu_only(const Troupe__V1__Job *j, const char *group)
{
    for (size_t g = 0; g < j->spec->n_groups; g++) {
        if (strcmp(j->spec->groups[g]->name, group) == 0) {
            return j->spec->groups[g]->gpus == 0;
        }
    }
    return 0;
}

/* node_gone: w's node is DEAD or LEFT and its lease has run out, so none of
 * its workers can still run there (fencing): the slot may be placed on
 * another node. */
static int node_gone(tr_head *h, const tr_head_node *hn)
{
    return hn == NULL || ((hn->n->state == TROUPE__V1__NODE_STATE__NODE_DEAD ||
                           hn->n->state == TROUPE__V1__NODE_STATE__NODE_LEFT) &&
                          tr_now_ms() >= tr_head_node_fence_until(h, hn->n));
}

/* can_grow: whether removed worker w may run again now, in its own slot
 * (GROW_HERE) or, its node gone, on another node (GROW_ELSEWHERE). */
static int can_grow(tr_head *h, const tr_head_job *hj, const Troupe__V1__WorkerInfo *w, int64_t wall)
{
    const Troupe__V1__ElasticSpec *es = tr_elastic_spec(hj->j, w->group);
    const Troupe__V1__GroupInfo *gi = tr_elastic_group(hj->j, w->group);
    tr_head_node *hn;

    /* The crash-loop back-off of its slot: restart_backoff_ms after the
     * loss, doubled for each replacement that failed since. */
    if (!w->removed || w->regrow_stopped || es == NULL || gi == NULL || gi->world_size >= es->max_workers ||
        w->state == TROUPE__V1__WORKER_STATE__WORKER_RUNNING || w->state == TROUPE__V1__WORKER_STATE__WORKER_PENDING ||
        wall < w->ended_ms + tr_jobs_backoff_ms(h, w->regrown + 1)) {
        return 0;
    }
    for (size_t i = 0; i < hj->j->n_restart_groups; i++) {
        if (strcmp(hj->j->restart_groups[i], w->group) == 0) {
            return 0; /* the group restarts whole anyway */
        }
    }
    hn = tr_head_node_find(h, w->node_id);
    if (hn != NULL && hn->n->state == TROUPE__V1__NODE_STATE__NODE_ALIVE && !hn->n->draining &&
        hn->n->fenced_workers == 0) {
        return GROW_HERE;
    }
    return node_gone(h, hn) && cpu_only(hj->j, w->group) ? GROW_ELSEWHERE : GROW_NO;
}

/* relocate moves worker idx's slot to the node the scheduler places it on
 * (its own node is gone); the old node's name goes to from. 0 when it moved,
 * -1 when it cannot now (no node has room: tried again next tick). */
static int relocate(tr_head *h, tr_head_job *hj, size_t idx, char *from, size_t size)
{
    Troupe__V1__WorkerInfo *w = hj->j->workers[idx];
    tr_head_node *hn;
    uint64_t node_id = 0;
    uint32_t local = 0;
    tr_err err = {0};

    if (tr_sched_relocate(h->sched, hj->j->id, &hj->sspec, idx, &node_id, &err) != TROUPE_OK ||
        (hn = tr_head_node_find(h, node_id)) == NULL) {
        TR_LOG(TR_LOG_DEBUG, "job=%llu worker=%s: not grown back on another node yet: %s",
               (unsigned long long)hj->j->id, w->name, err.msg);
        return -1;
    }
    snprintf(from, size, "%s", w->node_name[0] ? w->node_name : "?");
    for (size_t i = 0; i < hj->j->n_workers; i++) {
        const Troupe__V1__WorkerInfo *o = hj->j->workers[i];
        local += i != idx && o->node_id == node_id && !o->removed && strcmp(o->group, w->group) == 0;
    }
    /* LOCAL_RANK after the group's members already there; the others keep
     * the values they started with. */
    w->node_id = node_id;
    tr_jobs_set_str(&w->node_name, hn->n->name);
    w->local_rank = local;
    w->local_world_size = local + 1;
    tr_jobs_index_add(h, hj); /* the new node's syncs see the job */
    return 0;
}

static void grow_one(tr_head *h, tr_head_job *hj, size_t idx, int elsewhere)
{
    Troupe__V1__Job *j = hj->j;
    Troupe__V1__WorkerInfo *w = j->workers[idx];
    Troupe__V1__GroupInfo *gi = tr_elastic_group(j, w->group);
    Troupe__V1__MembershipChange *c;
    uint64_t step = h->group_step != NULL ? h->group_step(h, hj, w->group, h->group_step_arg) : 0;
    uint32_t from = gi->world_size, attempt = 0;
    tr_head_node *hn;
    char text[1024], at[48] = "", moved[300] = "", old[256];

    if (elsewhere) {
        if (relocate(h, hj, idx, old, sizeof(old)) != 0) {
            return;
        }
        snprintf(moved, sizeof(moved), ", placed again away from %s (its node is gone)", old);
    }
    c = calloc(1, sizeof(*c));

    for (size_t i = 0; i < j->n_workers; i++) {
        attempt = j->workers[i]->attempt > attempt ? j->workers[i]->attempt : attempt;
    }
    attempt = (attempt > j->grow_attempt ? attempt : j->grow_attempt) + 1;
    j->grow_attempt = attempt;
    w->removed = 0;
    w->regrown++;
    w->attempt = attempt;
    w->state = TROUPE__V1__WORKER_STATE__WORKER_PENDING;
    w->exit_code = w->signal = 0;
    w->pid = 0;
    w->started_ms = w->ended_ms = 0;
    tr_jobs_set_str(&w->message, "");
    gi->world_size = renumber(j, w->group);
    gi->membership_changes++;
    if (step > 0) {
        snprintf(at, sizeof(at), " at step %llu", (unsigned long long)step);
    }
    snprintf(text, sizeof(text), "GREW %s %u -> %u%s: rank %u (%s on %s) started again%s, attempt %u; epoch %u",
             w->group, from, gi->world_size, at, w->member_rank, w->name, w->node_name[0] ? w->node_name : "?",
             moved, attempt, tr_elastic_epoch(j, w->group));
    if (c != NULL) {
        troupe__v1__membership_change__init(c);
        c->ts_ms = tr_wall_ms();
        tr_jobs_set_str(&c->group, w->group);
        tr_jobs_set_str(&c->kind, "GREW");
        c->from_size = from;
        c->to_size = gi->world_size;
        c->epoch = tr_elastic_epoch(j, w->group);
        c->step = step;
        tr_jobs_set_str(&c->worker, w->name);
        tr_jobs_set_str(&c->text, text);
        history_add(j, c);
    }
    /* Its node runs it again from the version that carries it. */
    tr_jobs_node_bump(h, w->node_id);
    if ((hn = tr_head_node_find(h, w->node_id)) != NULL && hj->issued != NULL) {
        hj->issued[idx] = hn->version;
    }
    tr_jobs_note(h, hj, "GREW", text);
}

void tr_elastic_grow(tr_head *h, tr_head_job *hj)
{
    int64_t wall = tr_wall_ms();

    if (hj->j->state != TROUPE__V1__JOB_STATE__JOB_RUNNING || hj->requeue || hj->j->stop_requested ||
        hj->pl == NULL || hj->j->n_membership == 0) {
        return;
    }
    for (size_t i = 0; i < hj->j->n_workers; i++) {
        int how = can_grow(h, hj, hj->j->workers[i], wall);
        if (how != GROW_NO) {
            grow_one(h, hj, i, how == GROW_ELSEWHERE);
        }
    }
}

void tr_elastic_reset(tr_head_job *hj, const char *group)
{
    Troupe__V1__GroupInfo *gi = tr_elastic_group(hj->j, group);
    uint32_t n = 0;

    for (size_t i = 0; i < hj->j->n_workers; i++) {
        Troupe__V1__WorkerInfo *w = hj->j->workers[i];
        if (strcmp(w->group, group) == 0) {
            w->removed = 0;
            w->regrown = 0;
            w->regrow_stopped = 0;
            w->member_rank = w->rank;
            n++;
        }
    }
    if (gi != NULL) {
        gi->world_size = n;
    }
}
