/* sched_validate.c - the two "no"s that do not depend on free GPUs: a spec
 * that is wrong on its own (INVALID_ARGUMENT) and a job the alive cluster
 * could never hold, even empty (FAILED_PRECONDITION). Each message names the
 * numbers, so a user can fix the YAML without reading scheduler code. */
#include <stdio.h>
#include <string.h>

#include "sched_int.h"

void tr_sched_format_selector(const tr_sched_job_spec *spec, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < spec->nselector && off < len; i++) {
        int n = snprintf(buf + off, len - off, "%s%s=%s", i == 0 ? " with labels " : ",",
                         spec->selector[i].key, spec->selector[i].value);
        off += n > 0 ? (size_t)n : 0;
    }
}

static int validate_vnodes(const tr_sched_job_spec *spec, int *largest, long long *total, tr_err *err)
{
    bool gpu_groups = false;

    *largest = 0;
    *total = 0;
    for (size_t i = 0; spec->groups != NULL && i < spec->ngroups; i++) {
        gpu_groups |= spec->groups[i].gpus_per_worker != 0;
    }
    if (spec->nvnodes == 0 && !gpu_groups) {
        return TROUPE_OK; /* CPU-only groups need no virtual cluster */
    }
    if (spec->nvnodes == 0 || spec->vnodes == NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "the virtual cluster has no nodes; groups with GPUs are placed inside it");
    }
    if (spec->nvnodes > TR_SCHED_MAX_VNODES) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "the virtual cluster has %zu nodes; the limit is %d",
                          spec->nvnodes, TR_SCHED_MAX_VNODES);
    }
    for (size_t i = 0; i < spec->nvnodes; i++) {
        int g = spec->vnodes[i];
        if (g < 1 || g > TR_SCHED_MAX_NODE_GPUS) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                              "virtual node %zu asks for %d GPUs; a node has 1 to %d", i, g,
                              TR_SCHED_MAX_NODE_GPUS);
        }
        *largest = g > *largest ? g : *largest;
        *total += g;
    }
    for (size_t i = 0; i < spec->nselector; i++) {
        const tr_sched_label *l = &spec->selector[i];
        if (l->key == NULL || l->key[0] == '\0' || l->value == NULL) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "node selector entry %zu has no key or value", i);
        }
    }
    return TROUPE_OK;
}

/* How many workers of gw GPUs the vnodes can hold, each inside one vnode. */
static long long vnode_slots(const tr_sched_job_spec *spec, int gw, size_t *fitting)
{
    long long slots = 0;
    *fitting = 0;
    for (size_t i = 0; i < spec->nvnodes; i++) {
        slots += spec->vnodes[i] / gw;
        *fitting += spec->vnodes[i] >= gw;
    }
    return slots;
}

static int validate_group_name(const tr_sched_job_spec *spec, size_t gi, tr_err *err)
{
    if (spec->groups[gi].name == NULL || spec->groups[gi].name[0] == '\0') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "group %zu has no name", gi);
    }
    for (size_t j = 0; j < gi; j++) {
        if (strcmp(spec->groups[j].name, spec->groups[gi].name) == 0) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                              "group name '%s' is used twice (groups %zu and %zu)", spec->groups[gi].name, j,
                              gi);
        }
    }
    return TROUPE_OK;
}

static int validate_group(const tr_sched_job_spec *spec, size_t gi, int largest, tr_err *err)
{
    const tr_sched_group_spec *g = &spec->groups[gi];
    size_t fitting;

    int rv = validate_group_name(spec, gi, err);
    if (rv != TROUPE_OK) {
        return rv;
    }
    if (g->workers < 1 || g->workers > TR_SCHED_MAX_WORKERS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "group %s has %d workers; it needs 1 to %d", g->name,
                          g->workers, TR_SCHED_MAX_WORKERS);
    }
    if (g->gpus_per_worker < 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "group %s has %d GPUs per worker; it needs 0 (CPU-only) or more", g->name,
                          g->gpus_per_worker);
    }
    if (g->strategy < TR_SCHED_PACK || g->strategy > TR_SCHED_STRICT_SPREAD) {
        return tr_err_set(
            err, TROUPE_INVALID_ARGUMENT,
            "group %s has unknown strategy %d; expected PACK, SPREAD, STRICT_PACK or STRICT_SPREAD", g->name,
            g->strategy);
    }
    if (!(g->cpus >= 0 && g->cpus <= TR_SCHED_MAX_WORKER_CPUS)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "group %s wants %g CPUs per worker; 0 to %d", g->name,
                          g->cpus, TR_SCHED_MAX_WORKER_CPUS);
    }
    if (g->gpus_per_worker == 0) {
        return TROUPE_OK; /* placed on CPU slots, outside the virtual cluster */
    }
    if (g->gpus_per_worker > largest) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "group %s wants %d GPUs per worker; the largest virtual node has %d", g->name,
                          g->gpus_per_worker, largest);
    }
    long long slots = vnode_slots(spec, g->gpus_per_worker, &fitting);
    long long need = (long long)g->workers * g->gpus_per_worker;
    if (g->strategy == TR_SCHED_STRICT_PACK && need > largest) {
        return tr_err_set(
            err, TROUPE_INVALID_ARGUMENT,
            "STRICT_PACK group %s needs %dx%d = %lld GPUs on one node; the largest virtual node has %d",
            g->name, g->workers, g->gpus_per_worker, need, largest);
    }
    if (g->strategy == TR_SCHED_STRICT_SPREAD && (size_t)g->workers > fitting) {
        return tr_err_set(
            err, TROUPE_INVALID_ARGUMENT,
            "STRICT_SPREAD group %s needs %d distinct nodes; the virtual cluster has %zu with %d GPUs",
            g->name, g->workers, fitting, g->gpus_per_worker);
    }
    if (slots < g->workers) {
        return tr_err_set(
            err, TROUPE_INVALID_ARGUMENT,
            "group %s needs %d workers x %d GPUs, each inside one virtual node; the virtual nodes hold "
            "at most %lld such workers",
            g->name, g->workers, g->gpus_per_worker, slots);
    }
    return TROUPE_OK;
}

/* Sum over groups, with the groups named, against the virtual cluster's total. */
static int validate_total(const tr_sched_job_spec *spec, long long vc_total, tr_err *err)
{
    char list[256] = "";
    size_t off = 0;
    long long need = 0, workers = 0;

    for (size_t i = 0; i < spec->ngroups; i++) {
        const tr_sched_group_spec *g = &spec->groups[i];
        need += (long long)g->workers * g->gpus_per_worker;
        workers += g->workers;
        if (off < sizeof(list)) {
            int n = snprintf(list + off, sizeof(list) - off, "%s%s %dx%d", i == 0 ? "" : ", ", g->name,
                             g->workers, g->gpus_per_worker);
            off += n > 0 ? (size_t)n : 0;
        }
    }
    if (workers > TR_SCHED_MAX_WORKERS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "the job has %lld workers; the limit is %d", workers,
                          TR_SCHED_MAX_WORKERS);
    }
    if (need > vc_total) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "groups need %lld GPUs (%s) but the virtual cluster has %lld in total", need, list,
                          vc_total);
    }
    return TROUPE_OK;
}

int tr_sched_validate(const tr_sched_job_spec *spec, tr_err *err)
{
    int largest;
    long long total;
    int rv;

    if (spec == NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "no job spec");
    }
    rv = validate_vnodes(spec, &largest, &total, err);
    if (rv != TROUPE_OK) {
        return rv;
    }
    if (spec->ngroups == 0 || spec->groups == NULL || spec->ngroups > TR_SCHED_MAX_GROUPS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "the job has %zu worker groups; it needs 1 to %d",
                          spec->ngroups, TR_SCHED_MAX_GROUPS);
    }
    for (size_t i = 0; i < spec->ngroups; i++) {
        rv = validate_group(spec, i, largest, err);
        if (rv != TROUPE_OK) {
            return rv;
        }
    }
    return validate_total(spec, total, err);
}

/* What the nodes that count (ALIVE, and SUSPECT with with_suspect) matching
 * the selector offer, ignoring what is in use. */
typedef struct cluster_shape {
    bool with_suspect;
    bool suspect_seen; /* a SUSPECT node was counted: messages say "alive or suspect" */
    const char *word;  /* "alive" or "alive or suspect", for messages */
    unsigned matching; /* counted matching nodes */
    unsigned largest;  /* GPUs of the largest of them */
    uint64_t total;    /* their GPUs */
} cluster_shape;

static bool counts(const cluster_shape *cs, const tr_sched_node *n)
{
    return n->state == TR_SCHED_ALIVE || (cs->with_suspect && n->state == TR_SCHED_SUSPECT);
}

static void cluster_shape_of(const tr_sched *s, const tr_sched_job_spec *spec, cluster_shape *cs)
{
    for (uint32_t i = 0; i < s->nnodes; i++) {
        const tr_sched_node *n = &s->nodes[i];
        if (!counts(cs, n) || !tr_sched_node_matches(n, spec->selector, spec->nselector)) {
            continue;
        }
        cs->matching++;
        cs->suspect_seen |= n->state == TR_SCHED_SUSPECT;
        cs->total += n->gpus;
        cs->largest = n->gpus > cs->largest ? n->gpus : cs->largest;
    }
}

static unsigned nodes_with(const tr_sched *s, const tr_sched_job_spec *spec, const cluster_shape *cs,
                           unsigned gpus)
{
    unsigned count = 0;
    for (uint32_t i = 0; i < s->nnodes; i++) {
        const tr_sched_node *n = &s->nodes[i];
        count += counts(cs, n) && n->gpus >= gpus && tr_sched_node_matches(n, spec->selector, spec->nselector);
    }
    return count;
}

static int precheck_groups(const tr_sched *s, const tr_sched_job_spec *spec, const cluster_shape *cs,
                           tr_err *err)
{
    for (size_t i = 0; i < spec->ngroups; i++) {
        const tr_sched_group_spec *g = &spec->groups[i];
        if (g->gpus_per_worker == 0) {
            continue; /* CPU slots: the placement on the empty view words it */
        }
        long long one_node = g->strategy == TR_SCHED_STRICT_PACK ? (long long)g->workers * g->gpus_per_worker
                                                                 : g->gpus_per_worker;
        if (one_node > (long long)cs->largest) {
            return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                              "group %s needs 1 node with %lld free GPUs; largest%s node has %u", g->name,
                              one_node, cs->suspect_seen ? " alive or suspect" : "", cs->largest);
        }
        if (g->strategy == TR_SCHED_STRICT_SPREAD) {
            unsigned have = nodes_with(s, spec, cs, (unsigned)g->gpus_per_worker);
            if (have < (unsigned)g->workers) {
                return tr_err_set(
                    err, TROUPE_FAILED_PRECONDITION,
                    "STRICT_SPREAD group %s needs %d distinct nodes; cluster has %u%s with %d GPUs", g->name,
                    g->workers, have, cs->suspect_seen ? " alive or suspect node(s)" : "", g->gpus_per_worker);
            }
        }
    }
    return TROUPE_OK;
}

static int feasible_precheck(const tr_sched *s, const tr_sched_job_spec *spec, bool with_suspect, tr_err *err)
{
    char sel[256];
    cluster_shape cs = {.with_suspect = with_suspect};

    tr_sched_format_selector(spec, sel, sizeof(sel));
    cluster_shape_of(s, spec, &cs);
    cs.word = cs.suspect_seen ? "alive or suspect" : "alive";
    if (cs.matching == 0) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "no %s node%s; the job cannot be placed", cs.word,
                          sel[0] != '\0' ? sel : " at all");
    }
    int rv = precheck_groups(s, spec, &cs, err);
    if (rv != TROUPE_OK) {
        return rv;
    }
    for (size_t i = 0; i < spec->nvnodes; i++) {
        if ((unsigned)spec->vnodes[i] > cs.largest) {
            return tr_err_set(
                err, TROUPE_FAILED_PRECONDITION,
                "virtual node %zu needs %d GPUs%s; no such node (largest such %s node has %u)", i,
                spec->vnodes[i], sel, cs.word, cs.largest);
        }
    }
    long long want = 0;
    for (size_t i = 0; i < spec->nvnodes; i++) {
        want += spec->vnodes[i];
    }
    if ((uint64_t)want > cs.total) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "the virtual cluster needs %lld GPUs; %s nodes%s have %llu in total", want, cs.word,
                          sel, (unsigned long long)cs.total);
    }
    return TROUPE_OK;
}

int tr_sched_feasible_in(tr_sched *s, const tr_sched_job_spec *spec, bool with_suspect, tr_err *err)
{
    tr_sched_placement *p = NULL;
    bool oom;
    int rv = tr_sched_validate(spec, err);

    if (rv == TROUPE_OK) {
        rv = feasible_precheck(s, spec, with_suspect, err);
    }
    if (rv == TROUPE_OK) {
        rv = tr_sched_view_empty_of(&s->tmp[3], s, with_suspect);
        if (rv != TROUPE_OK) {
            return tr_err_set(err, rv, "scheduler: out of memory");
        }
        rv = tr_sched_place_on(s, &s->tmp[3], TR_SCHED_VIEW_EMPTY, spec, &p, &oom, err);
        if (rv != TROUPE_OK && !oom) {
            rv = TROUPE_FAILED_PRECONDITION;
            if (err != NULL) {
                err->code = rv;
            }
        }
        tr_sched_placement_free(p);
    }
    return rv;
}

int tr_sched_feasible(tr_sched *s, const tr_sched_job_spec *spec, tr_err *err)
{
    return tr_sched_feasible_in(s, spec, false, err);
}

int tr_sched_check(tr_sched *s, const tr_sched_job_spec *spec, tr_err *err)
{
    tr_err_clear(err);
    return tr_sched_feasible_in(s, spec, true, err);
}

int tr_sched_place(tr_sched *s, uint64_t job_id, const tr_sched_job_spec *spec, tr_sched_placement **out,
                   tr_err *err)
{
    tr_sched_placement *p = NULL;
    bool oom;
    int rv;

    *out = NULL;
    tr_err_clear(err);
    rv = tr_sched_validate(spec, err);
    if (rv != TROUPE_OK) {
        return rv;
    }
    if (tr_sched_find(s, job_id) != NULL) {
        return tr_err_set(err, TROUPE_ALREADY_EXISTS, "job %llu is already placed",
                          (unsigned long long)job_id);
    }
    rv = tr_sched_place_on(s, &s->live, TR_SCHED_VIEW_LIVE, spec, &p, &oom, err);
    if (rv == TROUPE_OK) {
        p->job = job_id;
        if (tr_sched_placement_link(s, p) == TROUPE_OK) {
            *out = p;
            return TROUPE_OK;
        }
        tr_sched_view_give_placement(s, &s->live, p);
        tr_sched_placement_free(p);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "scheduler: out of memory");
    }
    if (oom) {
        return rv;
    }
    /* No room now: is it "wait" or "never"? Keep the live reason for waiting. */
    tr_err why;
    int frv = tr_sched_feasible(s, spec, &why);
    if (frv != TROUPE_OK && err != NULL) {
        *err = why;
    }
    if (frv != TROUPE_OK) {
        return frv;
    }
    return TROUPE_RESOURCE_EXHAUSTED;
}
