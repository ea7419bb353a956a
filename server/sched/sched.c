/* sched.c - scheduler lifetime, node registry, placement books. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sched_int.h"

static const char *const strategy_names[] = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"};

const char *tr_sched_strategy_name(int strategy)
{
    if (strategy < 0 || strategy > TR_SCHED_STRICT_SPREAD) {
        return "?";
    }
    return strategy_names[strategy];
}

int tr_sched_strategy_parse(const char *name, tr_sched_strategy *out, tr_err *err)
{
    for (int i = 0; name != NULL && i <= TR_SCHED_STRICT_SPREAD; i++) {
        if (strcasecmp(name, strategy_names[i]) == 0) {
            *out = (tr_sched_strategy)i;
            return TROUPE_OK;
        }
    }
    return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                      "unknown strategy '%s'; expected PACK, SPREAD, STRICT_PACK or STRICT_SPREAD",
                      name != NULL ? name : "");
}

int tr_sched_open(tr_sched **out, tr_err *err)
{
    *out = NULL;
    tr_sched *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "scheduler: out of memory");
    }
    *out = s;
    return TROUPE_OK;
}

static void node_fini(tr_sched_node *n)
{
    for (size_t i = 0; i < n->nlabels; i++) {
        free(n->lkeys[i]);
        free(n->lvals[i]);
    }
    free(n->lkeys);
    free(n->lvals);
    free(n->name);
}

void tr_sched_close(tr_sched *s)
{
    if (s == NULL) {
        return;
    }
    while (s->plist != NULL) {
        tr_sched_release(s, s->plist);
    }
    for (uint32_t i = 0; i < s->nnodes; i++) {
        node_fini(&s->nodes[i]);
    }
    free(s->nodes);
    free(s->idmap);
    free(s->phash);
    free(s->sel_stamp);
    free(s->sel_ok);
    free(s->use_stamp);
    free(s->vc_of);
    free(s->scratch);
    tr_sched_view_fini(&s->live);
    for (size_t i = 0; i < sizeof(s->tmp) / sizeof(s->tmp[0]); i++) {
        tr_sched_view_fini(&s->tmp[i]);
    }
    free(s);
}

static void idmap_put(tr_sched *s, uint32_t slot)
{
    uint32_t h = (uint32_t)tr_sched_mix64(s->nodes[slot].id) & (s->idmap_cap - 1);
    while (s->idmap[h] != 0) {
        h = (h + 1) & (s->idmap_cap - 1);
    }
    s->idmap[h] = slot + 1;
}

/* grow_array reallocs *p to bytes, leaving *p alone on failure. */
static bool grow_array(void *pp, size_t bytes)
{
    void **p = pp;
    void *np = realloc(*p, bytes);
    if (np == NULL) {
        return false;
    }
    *p = np;
    return true;
}

/* Grow every per-slot array together; the id map is rebuilt at half load. */
static int grow_nodes(tr_sched *s)
{
    uint32_t cap = s->cap == 0 ? 64 : s->cap * 2;
    uint32_t *idmap = NULL;
    bool ok =
        grow_array(&s->nodes, cap * sizeof(*s->nodes)) && grow_array(&s->sel_stamp, cap * sizeof(uint32_t)) &&
        grow_array(&s->sel_ok, cap) && grow_array(&s->use_stamp, cap * sizeof(uint32_t)) &&
        grow_array(&s->vc_of, cap * sizeof(uint32_t)) && tr_sched_view_reserve(&s->live, cap) == TROUPE_OK;

    if (ok) {
        idmap = calloc((size_t)cap * 2, sizeof(uint32_t));
    }
    if (idmap == NULL) {
        return TROUPE_RESOURCE_EXHAUSTED;
    }
    memset(s->sel_stamp + s->cap, 0, (cap - s->cap) * sizeof(uint32_t));
    memset(s->use_stamp + s->cap, 0, (cap - s->cap) * sizeof(uint32_t));
    free(s->idmap);
    s->idmap = idmap;
    s->idmap_cap = cap * 2;
    s->cap = cap;
    for (uint32_t i = 0; i < s->nnodes; i++) {
        idmap_put(s, i);
    }
    return TROUPE_OK;
}

static int copy_labels(tr_sched_node *n, const tr_sched_node_spec *spec, tr_err *err)
{
    if (spec->nlabels == 0) {
        return TROUPE_OK;
    }
    n->lkeys = calloc(spec->nlabels, sizeof(char *));
    n->lvals = calloc(spec->nlabels, sizeof(char *));
    if (n->lkeys == NULL || n->lvals == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "scheduler: out of memory");
    }
    for (size_t i = 0; i < spec->nlabels; i++) {
        const tr_sched_label *l = &spec->labels[i];
        if (l->key == NULL || l->key[0] == '\0' || l->value == NULL) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "node %llu: label %zu has no key or value",
                              (unsigned long long)spec->id, i);
        }
        n->nlabels = i + 1;
        n->lkeys[i] = strdup(l->key);
        n->lvals[i] = strdup(l->value);
        if (n->lkeys[i] == NULL || n->lvals[i] == NULL) {
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "scheduler: out of memory");
        }
    }
    return TROUPE_OK;
}

int tr_sched_node_add(tr_sched *s, const tr_sched_node_spec *spec, tr_err *err)
{
    tr_sched_node n = {0};
    int rv;

    if (spec->gpus > TR_SCHED_MAX_NODE_GPUS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "node %llu: %u GPUs; a node has 0 to %d",
                          (unsigned long long)spec->id, spec->gpus, TR_SCHED_MAX_NODE_GPUS);
    }
    if (spec->cpus > TR_SCHED_MAX_NODE_CPUS) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "node %llu: %u CPUs; a node has 0 to %d",
                          (unsigned long long)spec->id, spec->cpus, TR_SCHED_MAX_NODE_CPUS);
    }
    if (tr_sched_slot_of(s, spec->id) >= 0) {
        return tr_err_set(err, TROUPE_ALREADY_EXISTS, "node %llu is already registered",
                          (unsigned long long)spec->id);
    }
    if (s->nnodes == s->cap && grow_nodes(s) != TROUPE_OK) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "scheduler: out of memory");
    }
    n.id = spec->id;
    n.gpus = spec->gpus;
    n.full = spec->gpus == 64 ? ~UINT64_C(0) : (UINT64_C(1) << spec->gpus) - 1;
    n.cpu_milli = (int64_t)spec->cpus * 1000;
    n.state = TR_SCHED_ALIVE;
    n.name = strdup(spec->name != NULL ? spec->name : "");
    rv = n.name == NULL ? tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "scheduler: out of memory")
                        : copy_labels(&n, spec, err);
    if (rv != TROUPE_OK) {
        node_fini(&n);
        return rv;
    }
    s->nodes[s->nnodes] = n;
    idmap_put(s, s->nnodes);
    tr_sched_view_add(&s->live, s->nnodes, n.full, n.cpu_milli, true);
    s->nnodes++;
    return TROUPE_OK;
}

int tr_sched_node_set_state(tr_sched *s, uint64_t id, int state, tr_err *err)
{
    int64_t slot = tr_sched_slot_of(s, id);
    if (slot < 0) {
        return tr_err_set(err, TROUPE_NOT_FOUND, "node %llu is not registered", (unsigned long long)id);
    }
    if (state < TR_SCHED_ALIVE || state > TR_SCHED_DEAD) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "node %llu: unknown state %d", (unsigned long long)id,
                          state);
    }
    tr_sched_node *n = &s->nodes[slot];
    if (n->state == TR_SCHED_DEAD && state != TR_SCHED_DEAD) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "node %llu is dead; a dead node never comes back (register a new id)",
                          (unsigned long long)id);
    }
    n->state = state;
    tr_sched_view_set_alive(&s->live, (uint32_t)slot, state == TR_SCHED_ALIVE);
    return TROUPE_OK;
}

void tr_sched_node_set_hold(tr_sched *s, uint64_t id, tr_sched_hold hold)
{
    int64_t slot = tr_sched_slot_of(s, id);
    if (slot >= 0) {
        s->nodes[slot].hold = (int)hold;
    }
}

int tr_sched_node_get(const tr_sched *s, uint64_t id, tr_sched_node_info *out, tr_err *err)
{
    memset(out, 0, sizeof(*out));
    int64_t slot = tr_sched_slot_of(s, id);
    if (slot < 0) {
        return tr_err_set(err, TROUPE_NOT_FOUND, "node %llu is not registered", (unsigned long long)id);
    }
    const tr_sched_node *n = &s->nodes[slot];
    out->id = n->id;
    out->name = n->name;
    out->gpus = n->gpus;
    out->free_mask = s->live.free[slot];
    out->free_gpus = (unsigned)__builtin_popcountll(out->free_mask);
    out->cpus = (unsigned)(n->cpu_milli / 1000);
    out->free_cpu_milli = s->live.cpu_free[slot] > 0 ? (uint64_t)s->live.cpu_free[slot] : 0;
    out->state = (tr_sched_node_state)n->state;
    return TROUPE_OK;
}

uint64_t tr_sched_free_gpus_live(const tr_sched *s)
{
    uint64_t n = 0;

    for (uint32_t i = 0; i < s->nnodes; i++) {
        if (s->nodes[i].state != TR_SCHED_DEAD) {
            n += (uint64_t)__builtin_popcountll(s->live.free[i]);
        }
    }
    return n;
}

uint64_t tr_sched_free_cpu_milli_live(const tr_sched *s)
{
    uint64_t n = 0;

    for (uint32_t i = 0; i < s->nnodes; i++) {
        if (s->nodes[i].state != TR_SCHED_DEAD && s->live.cpu_free[i] > 0) {
            n += (uint64_t)s->live.cpu_free[i];
        }
    }
    return n;
}

void tr_sched_stats_get(const tr_sched *s, tr_sched_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->nodes = s->nnodes;
    out->placements = s->nplace;
    for (uint32_t i = 0; i < s->nnodes; i++) {
        if (s->nodes[i].state != TR_SCHED_ALIVE) {
            continue;
        }
        out->alive_nodes++;
        out->alive_gpus += s->nodes[i].gpus;
        out->free_gpus += (uint64_t)__builtin_popcountll(s->live.free[i]);
    }
}

bool tr_sched_node_matches(const tr_sched_node *n, const tr_sched_label *sel, size_t nsel)
{
    for (size_t i = 0; i < nsel; i++) {
        bool found = false;
        for (size_t j = 0; j < n->nlabels && !found; j++) {
            found = strcmp(n->lkeys[j], sel[i].key) == 0 && strcmp(n->lvals[j], sel[i].value) == 0;
        }
        if (!found) {
            return false;
        }
    }
    return true;
}
