/* sched_test_util.c - cluster and job builders, rendering, property checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_test.h"

static void add_node(tr_sched *s, uint64_t id, const char *tok)
{
    char label[32] = "", name[16];
    char *end;
    tr_sched_label l = {"gpu", label};
    tr_sched_node_spec ns = {.id = id, .name = name};
    tr_err err;

    ns.gpus = (unsigned)strtoul(tok, &end, 10);
    if (*end == 'c') { /* "0c4": no GPU, 4 CPU slots */
        ns.cpus = (unsigned)strtoul(end + 1, &end, 10);
    }
    if (*end == '@') {
        size_t k = strcspn(end + 1, "!?,");
        memcpy(label, end + 1, k);
        label[k] = '\0';
        end += 1 + k;
        ns.labels = &l;
        ns.nlabels = 1;
    }
    snprintf(name, sizeof(name), "n%llu", (unsigned long long)id);
    assert_status(tr_sched_node_add(s, &ns, &err), TROUPE_OK, &err);
    if (*end == '!' || *end == '?') {
        int st = *end == '!' ? TR_SCHED_DEAD : TR_SCHED_SUSPECT;
        assert_status(tr_sched_node_set_state(s, id, st, &err), TROUPE_OK, &err);
    }
}

tr_sched *t_cluster(const char *shape)
{
    tr_sched *s = NULL;
    tr_err err;
    char buf[256];
    uint64_t id = 1;

    assert_status(tr_sched_open(&s, &err), TROUPE_OK, &err);
    snprintf(buf, sizeof(buf), "%s", shape);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        char *star = strchr(tok, '*');
        int reps = star != NULL ? atoi(tok) : 1;
        for (int r = 0; r < reps; r++) {
            add_node(s, id++, star != NULL ? star + 1 : tok);
        }
    }
    return s;
}

static int parse_strategy(const char *s)
{
    tr_sched_strategy st;
    if (tr_sched_strategy_parse(s, &st, NULL) == TROUPE_OK) {
        return st;
    }
    return atoi(s); /* numbers reach the validator as they are, e.g. "7" */
}

static void parse_groups(tjob *j, const char *groups)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", groups);
    for (char *save = NULL, *tok = strtok_r(buf, ";", &save); tok != NULL; tok = strtok_r(NULL, ";", &save)) {
        size_t g = j->spec.ngroups++;
        char strat[32] = "";
        int w = 0, gw = 0;
        double cpus = 0;
        char *c1 = strchr(tok, ':'), *end;
        assert_non_null(c1);
        *c1 = '\0';
        snprintf(j->names[g], sizeof(j->names[g]), "%s", tok);
        w = (int)strtol(c1 + 1, &end, 10);
        assert_true(*end == 'x');
        gw = (int)strtol(end + 1, &end, 10);
        if (*end == 'c') { /* "3x0c0.5": CPU-only workers of half a CPU */
            cpus = strtod(end + 1, &end);
        }
        assert_int_equal(sscanf(end, ":%31s", strat), 1);
        j->groups[g] = (tr_sched_group_spec){.name = j->names[g],
                                             .workers = w,
                                             .gpus_per_worker = gw,
                                             .strategy = parse_strategy(strat),
                                             .cpus = cpus};
    }
}

void t_job(tjob *j, const char *vnodes, const char *groups, const char *selector)
{
    memset(j, 0, sizeof(*j));
    j->spec.name = "test";
    j->spec.vnodes = j->vnodes;
    j->spec.groups = j->groups;
    j->spec.selector = j->sel;
    for (const char *p = vnodes; *p != '\0';) {
        char *end;
        long v = strtol(p, &end, 10);
        if (*end == '*') { /* "4*2" = four vnodes of 2 */
            long g = strtol(end + 1, &end, 10);
            for (long k = 0; k < v; k++) {
                j->vnodes[j->spec.nvnodes++] = (int)g;
            }
        } else {
            j->vnodes[j->spec.nvnodes++] = (int)v;
        }
        p = *end == ',' ? end + 1 : end;
    }
    parse_groups(j, groups);
    if (selector != NULL) {
        const char *eq = strchr(selector, '=');
        snprintf(j->selbuf[0][0], 32, "%.*s", (int)(eq - selector), selector);
        snprintf(j->selbuf[0][1], 32, "%s", eq + 1);
        j->sel[0] = (tr_sched_label){j->selbuf[0][0], j->selbuf[0][1]};
        j->spec.nselector = 1;
    }
}

static size_t render_gpus(const uint8_t *g, uint32_t n, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0'; /* a CPU-only worker has none */
    for (uint32_t i = 0; i < n && off < len;) {
        uint32_t k = i;
        while (k + 1 < n && g[k + 1] == g[k] + 1) {
            k++;
        }
        int w = k == i ? snprintf(buf + off, len - off, "%s%u", i ? "," : "", g[i])
                       : snprintf(buf + off, len - off, "%s%u-%u", i ? "," : "", g[i], g[k]);
        off += (size_t)w;
        i = k + 1;
    }
    return off;
}

void t_render(const tr_sched_placement *p, const tr_sched_job_spec *spec, char *buf, size_t len)
{
    size_t off = (size_t)snprintf(buf, len, "v=");
    const tr_sched_vnode *vn = tr_sched_placement_vnodes(p);
    char gp[256];

    for (size_t v = 0; v < tr_sched_placement_nvnodes(p); v++) {
        render_gpus(vn[v].gpus, vn[v].ngpus, gp, sizeof(gp));
        off += (size_t)snprintf(buf + off, len - off, "%sn%llu[%s]", v ? " " : "",
                                (unsigned long long)vn[v].node_id, gp);
    }
    for (size_t g = 0; g < spec->ngroups; g++) {
        size_t n;
        const tr_sched_worker *w = tr_sched_placement_group(p, g, &n);
        off += (size_t)snprintf(buf + off, len - off, " | %s=", spec->groups[g].name);
        for (size_t i = 0; i < n; i++) {
            render_gpus(w[i].gpus, w[i].ngpus, gp, sizeof(gp));
            off += (size_t)snprintf(buf + off, len - off, "%sn%llu[%s]L%uN%u", i ? " " : "",
                                    (unsigned long long)w[i].node_id, gp, w[i].local_rank, w[i].node_rank);
        }
    }
}

static void check_worker(const tr_sched_job_spec *spec, const tr_sched_placement *p, const tr_sched_worker *w,
                         size_t g, size_t r)
{
    assert_int_equal(w->group, g);
    assert_int_equal(w->rank, r);
    assert_int_equal(w->ngpus, spec->groups[g].gpus_per_worker);
    if (spec->groups[g].gpus_per_worker == 0) { /* CPU-only: slots, no vnode, no GPU */
        assert_int_equal(w->vnode, TR_SCHED_NO_VNODE);
        assert_true(w->gpu_mask == 0 && w->cpu_milli > 0);
        return;
    }
    assert_int_equal(w->cpu_milli, 0);
    const tr_sched_vnode *vn = &tr_sched_placement_vnodes(p)[w->vnode];
    assert_int_equal(w->node_id, vn->node_id);
    assert_true((w->gpu_mask & ~vn->gpu_mask) == 0);
    uint64_t m = 0;
    for (uint32_t k = 0; k < w->ngpus; k++) {
        assert_true(k == 0 || w->gpus[k] > w->gpus[k - 1]);
        m |= UINT64_C(1) << w->gpus[k];
    }
    assert_true(m == w->gpu_mask);
}

/* Ranks: node blocks contiguous, LOCAL_RANK in GPU order, sizes right. */
static void check_ranks(const tr_sched_worker *w, size_t n, int strategy)
{
    for (size_t i = 0; i < n; i++) {
        bool new_node = i == 0 || w[i].node_rank != w[i - 1].node_rank;
        assert_int_equal(w[i].nnodes, w[n - 1].node_rank + 1);
        if (new_node) {
            assert_int_equal(w[i].node_rank, i == 0 ? 0 : w[i - 1].node_rank + 1);
            assert_int_equal(w[i].local_rank, 0);
        } else {
            assert_int_equal(w[i].node_id, w[i - 1].node_id);
            assert_int_equal(w[i].local_rank, w[i - 1].local_rank + 1);
            assert_true(w[i].ngpus == 0 || w[i].gpus[0] > w[i - 1].gpus[0]);
        }
        for (size_t k = 0; k < i; k++) { /* a node appears in one block only */
            assert_true(w[k].node_id != w[i].node_id || w[k].node_rank == w[i].node_rank);
        }
        assert_true(w[i].local_rank < w[i].local_world_size);
    }
    if (strategy == TR_SCHED_STRICT_PACK) {
        assert_int_equal(w[0].nnodes, 1);
    }
    if (strategy == TR_SCHED_STRICT_SPREAD) {
        assert_int_equal(w[0].nnodes, n);
    }
}

void t_check_props(const tr_sched *s, const tr_sched_job_spec *spec, const tr_sched_placement *p)
{
    const tr_sched_worker *all = tr_sched_placement_workers(p);
    size_t total = 0;

    assert_int_equal(tr_sched_placement_nvnodes(p), spec->nvnodes);
    for (size_t v = 0; v < spec->nvnodes; v++) {
        const tr_sched_vnode *vn = &tr_sched_placement_vnodes(p)[v];
        assert_int_equal(vn->ngpus, spec->vnodes[v]);
        assert_int_equal(__builtin_popcountll(vn->gpu_mask), spec->vnodes[v]);
    }
    for (size_t g = 0; g < spec->ngroups; g++) {
        size_t n;
        const tr_sched_worker *w = tr_sched_placement_group(p, g, &n);
        assert_int_equal(n, spec->groups[g].workers);
        for (size_t r = 0; r < n; r++) {
            check_worker(spec, p, &w[r], g, r);
        }
        check_ranks(w, n, spec->groups[g].strategy);
        total += n;
    }
    assert_int_equal(total, tr_sched_placement_nworkers(p));
    for (size_t i = 0; i < total; i++) { /* no GPU given to two workers */
        for (size_t k = 0; k < i; k++) {
            assert_true(all[i].node_id != all[k].node_id || (all[i].gpu_mask & all[k].gpu_mask) == 0);
        }
    }
    (void)s;
}

uint64_t t_free_cpu_milli(const tr_sched *s, uint64_t node)
{
    tr_sched_node_info info;
    tr_err err;
    assert_status(tr_sched_node_get(s, node, &info, &err), TROUPE_OK, &err);
    return info.free_cpu_milli;
}

void t_check_invariants(const tr_sched *s)
{
    tr_err err;
    assert_status(tr_sched_check_invariants(s, &err), TROUPE_OK, &err);
}

uint64_t t_free_gpus(const tr_sched *s)
{
    tr_sched_stats st;
    tr_sched_stats_get(s, &st);
    return st.free_gpus;
}
