/* live.c - the live status view of a followed job (live.h). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "live.h"

enum { TAIL_LINES = 20, LINE_MAX_LEN = 512, BLOCK_MAX = 8192 };

typedef struct live_worker {
    char name[96], group[64], node[64];
    uint32_t rank;
    int state; /* troupe_worker_state, or -1 before the job said */
    int has_step;
    long step, total;
    double loss, tok_s;
    double tok_s_sum; /* every step line's tok_s, for the summary's mean */
    long tok_s_n;
} live_worker;

struct tr_live {
    uint64_t id;
    FILE *out;
    int tty, width; /* width: the terminal's columns; lines are cut to fit */
    int64_t interval_ms, last_draw_ms;
    live_worker *w;
    size_t nw, capw;
    char **groups; /* in the job's order, then in order of first output */
    size_t ng, capg;
    char partial[LINE_MAX_LEN];
    size_t partial_len;
    int partial_overflow;
    char tail[TAIL_LINES][LINE_MAX_LEN];
    size_t tail_next, tail_n;
    char drawn[BLOCK_MAX]; /* the group lines last written */
    int drawn_lines;       /* lines on the terminal to erase before a redraw */
    char state[24];
    int64_t started_ms;
};

tr_live *tr_live_new(uint64_t id, FILE *out, int tty, int width, int64_t interval_ms)
{
    tr_live *l = calloc(1, sizeof(*l));
    if (l != NULL) {
        l->id = id;
        l->out = out;
        l->tty = tty;
        l->width = width > 20 ? width : 0;
        l->interval_ms = interval_ms;
        snprintf(l->state, sizeof(l->state), "PENDING");
    }
    return l;
}

void tr_live_free(tr_live *l)
{
    if (l == NULL) {
        return;
    }
    for (size_t k = 0; k < l->ng; k++) {
        free(l->groups[k]);
    }
    free(l->groups);
    free(l->w);
    free(l);
}

static int add_group(tr_live *l, const char *name)
{
    for (size_t k = 0; k < l->ng; k++) {
        if (strcmp(l->groups[k], name) == 0) {
            return 0;
        }
    }
    if (l->ng == l->capg) {
        size_t cap = l->capg ? 2 * l->capg : 8;
        char **g = realloc(l->groups, cap * sizeof(*g));
        if (g == NULL) {
            return -1;
        }
        l->groups = g;
        l->capg = cap;
    }
    if ((l->groups[l->ng] = strdup(name)) == NULL) {
        return -1;
    }
    l->ng++;
    return 0;
}

/* worker_named finds or adds the worker called name ("job7-policy-3"), its
 * group and rank read from the name until the job says otherwise. */
static live_worker *worker_named(tr_live *l, const char *name)
{
    for (size_t i = 0; i < l->nw; i++) {
        if (strcmp(l->w[i].name, name) == 0) {
            return &l->w[i];
        }
    }
    const char *g0 = strchr(name, '-'), *g1 = strrchr(name, '-');
    if (g0 == NULL || g1 <= g0 || (size_t)(g1 - g0 - 1) >= sizeof(l->w[0].group) ||
        strlen(name) >= sizeof(l->w[0].name)) {
        return NULL;
    }
    if (l->nw == l->capw) {
        size_t cap = l->capw ? 2 * l->capw : 16;
        live_worker *w = realloc(l->w, cap * sizeof(*w));
        if (w == NULL) {
            return NULL;
        }
        l->w = w;
        l->capw = cap;
    }
    live_worker *w = &l->w[l->nw];
    memset(w, 0, sizeof(*w));
    snprintf(w->name, sizeof(w->name), "%s", name);
    snprintf(w->group, sizeof(w->group), "%.*s", (int)(g1 - g0 - 1), g0 + 1);
    w->rank = (uint32_t)strtoul(g1 + 1, NULL, 10);
    w->state = -1;
    if (add_group(l, w->group) != 0) {
        return NULL;
    }
    l->nw++;
    return w;
}

/* value_of: the number after " key=" in s, or 0 without one. */
static int value_of(const char *s, const char *key, double *v, long *total)
{
    char pat[32];
    snprintf(pat, sizeof(pat), " %s=", key);
    const char *p = strstr(s, pat);
    char *end;
    if (p == NULL) {
        return 0;
    }
    p += strlen(pat);
    *v = strtod(p, &end);
    if (end == p) {
        return 0;
    }
    if (total != NULL) {
        *total = *end == '/' ? strtol(end + 1, NULL, 10) : 0;
    }
    return 1;
}

static void keep_tail(tr_live *l, const char *line, size_t len)
{
    snprintf(l->tail[l->tail_next], LINE_MAX_LEN, "%.*s", (int)len, line);
    l->tail_next = (l->tail_next + 1) % TAIL_LINES;
    if (l->tail_n < TAIL_LINES) {
        l->tail_n++;
    }
}

/* one_line takes one whole output line "[worker] text". */
static void one_line(tr_live *l, const char *line, size_t len)
{
    char buf[LINE_MAX_LEN], name[96];
    const char *end;
    double step, v;
    long total = 0;

    if (len == 0) {
        return;
    }
    snprintf(buf, sizeof(buf), "%.*s", (int)len, line);
    if (buf[0] != '[' || (end = strchr(buf, ']')) == NULL || (size_t)(end - buf - 1) >= sizeof(name)) {
        keep_tail(l, line, len);
        return;
    }
    snprintf(name, sizeof(name), "%.*s", (int)(end - buf - 1), buf + 1);
    live_worker *w = worker_named(l, name);
    if (w == NULL || !value_of(end, "step", &step, &total) || !value_of(end, "loss", &v, NULL)) {
        keep_tail(l, line, len);
        return;
    }
    if (!w->has_step || (long)step >= w->step) {
        w->has_step = 1;
        w->step = (long)step;
        w->total = total;
        w->loss = v;
    }
    if (value_of(end, "tok_s", &v, NULL)) {
        w->tok_s = v;
        w->tok_s_sum += v;
        w->tok_s_n++;
    }
}

void tr_live_feed(tr_live *l, const char *data, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (data[i] == '\n') {
            if (!l->partial_overflow) {
                one_line(l, l->partial, l->partial_len);
            }
            l->partial_len = 0;
            l->partial_overflow = 0;
        } else if (l->partial_len + 1 < sizeof(l->partial)) {
            l->partial[l->partial_len++] = data[i];
        } else {
            l->partial_overflow = 1; /* a line this long is no step line */
        }
    }
}

void tr_live_job(tr_live *l, const troupe_job *j)
{
    snprintf(l->state, sizeof(l->state), "%s", troupe_job_state_name(j->state));
    l->started_ms = j->started_ms;
    for (size_t k = 0; k < j->n_groups; k++) {
        (void)add_group(l, j->groups[k].name);
    }
    for (size_t i = 0; i < j->n_workers; i++) {
        const troupe_worker *tw = &j->workers[i];
        live_worker *w = worker_named(l, tw->name);
        if (w == NULL) {
            continue;
        }
        snprintf(w->group, sizeof(w->group), "%s", tw->group);
        snprintf(w->node, sizeof(w->node), "%s", tw->node_name ? tw->node_name : "");
        w->rank = tw->rank;
        w->state = (int)tw->state;
        (void)add_group(l, w->group);
    }
}

/* tokens formats a rate: 812, 51.2k, 1.31M. */
static void tokens(char *buf, size_t size, double v)
{
    if (v >= 1e6) {
        snprintf(buf, size, "%.2fM", v / 1e6);
    } else if (v >= 1e3) {
        snprintf(buf, size, "%.1fk", v / 1e3);
    } else {
        snprintf(buf, size, "%.0f", v);
    }
}

typedef struct group_view {
    size_t workers, running, stepping, active; /* active: stepping and still running */
    const live_worker *lead, *slowest; /* lowest rank with steps; slowest rank */
    long max_step, total;
    double tok_s;
} group_view;

static void view_of(const tr_live *l, const char *group, group_view *g)
{
    memset(g, 0, sizeof(*g));
    for (size_t i = 0; i < l->nw; i++) {
        const live_worker *w = &l->w[i];
        if (strcmp(w->group, group) != 0) {
            continue;
        }
        g->workers++;
        g->running += w->state == TROUPE_WORKER_RUNNING;
        if (!w->has_step) {
            continue;
        }
        g->stepping++;
        /* The group's rate and its slowest rank: of the ranks still running
         * (one that finished no longer holds the others back). */
        int active = w->state == TROUPE_WORKER_RUNNING || w->state < 0;
        g->tok_s += active ? w->tok_s : 0.0;
        if (w->step > g->max_step) {
            g->max_step = w->step;
        }
        if (w->total > g->total) {
            g->total = w->total;
        }
        if (g->lead == NULL || w->rank < g->lead->rank) {
            g->lead = w;
        }
        /* Behind in steps first; at the same step, the lower rate. */
        if (active && (g->slowest == NULL || w->step < g->slowest->step ||
                       (w->step == g->slowest->step && w->tok_s < g->slowest->tok_s))) {
            g->slowest = w;
        }
        g->active += active;
    }
}

int tr_live_group_line(const tr_live *l, size_t k, char *buf, size_t size)
{
    group_view g;
    char rate[32], slow_rate[32];
    int n;

    if (k >= l->ng) {
        return -1;
    }
    view_of(l, l->groups[k], &g);
    n = snprintf(buf, size, "%s: %zu/%zu running", l->groups[k], g.running, g.workers);
    if (g.stepping == 0) {
        snprintf(buf + n, size > (size_t)n ? size - (size_t)n : 0, ", no step reported yet");
        return 0;
    }
    tokens(rate, sizeof(rate), g.tok_s);
    n += snprintf(buf + n, size > (size_t)n ? size - (size_t)n : 0, ", step %ld", g.max_step);
    if (g.total > 0) {
        n += snprintf(buf + n, size > (size_t)n ? size - (size_t)n : 0, "/%ld", g.total);
    }
    n += snprintf(buf + n, size > (size_t)n ? size - (size_t)n : 0, ", loss %.4f, %s tokens/s", g.lead->loss, rate);
    if (g.active >= 2 && g.slowest != NULL) {
        tokens(slow_rate, sizeof(slow_rate), g.slowest->tok_s);
        snprintf(buf + n, size > (size_t)n ? size - (size_t)n : 0, ", slowest rank %u (step %ld, %s tokens/s%s%s)",
                 g.slowest->rank, g.slowest->step, slow_rate, g.slowest->node[0] ? " on " : "", g.slowest->node);
    }
    return 0;
}

/* block renders every group's line, each ending in '\n'; returns the count. */
static int block(const tr_live *l, char *buf, size_t size)
{
    char line[LINE_MAX_LEN];
    size_t off = 0;
    int n = 0;

    buf[0] = '\0';
    for (size_t k = 0; k < l->ng; k++) {
        if (tr_live_group_line(l, k, line, sizeof(line)) != 0) {
            continue;
        }
        /* A line wider than the terminal wraps, and the redraw would then
         * erase too few lines: cut it to fit. */
        int cut = l->tty && l->width > 0 ? l->width - 3 : (int)sizeof(line);
        int w = snprintf(buf + off, size - off, "%s%.*s\n", l->tty ? "  " : "", cut, line);
        if (w < 0 || (size_t)w >= size - off) {
            break;
        }
        off += (size_t)w;
        n++;
    }
    return n;
}

void tr_live_clear(tr_live *l)
{
    if (l->tty && l->drawn_lines > 0) {
        fprintf(l->out, "\033[%dA\033[J", l->drawn_lines);
        l->drawn_lines = 0;
        fflush(l->out);
    }
}

void tr_live_draw(tr_live *l, int64_t now_ms, int force)
{
    char buf[BLOCK_MAX];
    int n = block(l, buf, sizeof(buf));

    if (l->tty) {
        /* The header's clock moves: redraw at the interval even unchanged. */
        if (!force && l->drawn_lines > 0 && now_ms - l->last_draw_ms < l->interval_ms) {
            return;
        }
        tr_live_clear(l);
        char head[LINE_MAX_LEN];
        int n0 = snprintf(head, sizeof(head), "troupe: job %" PRIu64 " %s", l->id, l->state);
        if (l->started_ms > 0 && now_ms > l->started_ms) {
            n0 += snprintf(head + n0, sizeof(head) - (size_t)n0, " for %.0f s",
                           (double)(now_ms - l->started_ms) / 1000.0);
        }
        snprintf(head + n0, sizeof(head) - (size_t)n0, " (worker output: troupe logs %" PRIu64 "; --raw shows it here)",
                 l->id);
        fprintf(l->out, "%.*s\n%s", l->width > 0 ? l->width - 1 : (int)sizeof(head), head, buf);
        l->drawn_lines = n + 1;
    } else {
        if (n == 0 || strcmp(buf, l->drawn) == 0 || (!force && now_ms - l->last_draw_ms < l->interval_ms)) {
            return;
        }
        for (const char *p = buf; *p != '\0';) {
            const char *nl = strchr(p, '\n');
            fprintf(l->out, "troupe: job %" PRIu64 " %.*s\n", l->id, (int)(nl - p), p);
            p = nl + 1;
        }
    }
    snprintf(l->drawn, sizeof(l->drawn), "%s", buf);
    l->last_draw_ms = now_ms;
    fflush(l->out);
}

void tr_live_summary(tr_live *l, const troupe_job *j, int show_tail)
{
    tr_live_clear(l);
    for (size_t k = 0; k < l->ng; k++) {
        long steps = 0, n = 0;
        double loss = 0, sum = 0;
        const live_worker *lead = NULL;
        for (size_t i = 0; i < l->nw; i++) {
            const live_worker *w = &l->w[i];
            if (strcmp(w->group, l->groups[k]) != 0 || !w->has_step) {
                continue;
            }
            if (w->step > steps) {
                steps = w->step;
            }
            if (lead == NULL || w->rank < lead->rank) {
                lead = w;
            }
            sum += w->tok_s_sum;
            n += w->tok_s_n;
        }
        if (lead == NULL) {
            continue;
        }
        loss = lead->loss;
        fprintf(l->out,
                "troupe: job %" PRIu64 " group %s: %ld step%s, final loss %.4f, mean %.0f tokens/s per worker\n",
                j->id, l->groups[k], steps, tr_cli_plural((uint64_t)steps), loss, n ? sum / (double)n : 0.0);
    }
    if (show_tail && l->tail_n > 0) {
        fprintf(l->out, "troupe: job %" PRIu64 ": the last %zu line%s of output (all: troupe logs %" PRIu64 "):\n",
                j->id, l->tail_n, tr_cli_plural(l->tail_n), j->id);
        for (size_t i = 0; i < l->tail_n; i++) {
            size_t at = (l->tail_next + TAIL_LINES - l->tail_n + i) % TAIL_LINES;
            fprintf(l->out, "  %s\n", l->tail[at]);
        }
    }
    fflush(l->out);
}
