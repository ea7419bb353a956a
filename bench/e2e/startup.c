/* startup.c - submit -> all 64 workers RUNNING, with real agents.
 *
 * A head (defaults: sync_full on, heartbeats every second) and 4 real
 * troupe-node agents with 16 fake GPUs each, all on this machine. Each
 * repetition submits a 64 x 1-GPU job running `sleep 30`, follows it with
 * troupe_wait_job long polls until all 64 workers are RUNNING (the agents
 * have spawned them and reported so), then stops it and waits until the
 * cluster shows all 64 GPUs free again. The job's processes are real: the
 * time includes the agents' long poll, 64 posix_spawns and their reports. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e_bench.h"
#include "util.h"

#define NODES 4
#define GPUS 16
#define WORKERS 64

static size_t running(const troupe_job *j)
{
    size_t n = 0;
    for (size_t i = 0; i < j->n_workers; i++) {
        n += j->workers[i].state == TROUPE_WORKER_RUNNING;
    }
    return n;
}

static size_t live(const troupe_job *j)
{
    size_t n = 0;
    for (size_t i = 0; i < j->n_workers; i++) {
        n += j->workers[i].state == TROUPE_WORKER_RUNNING || j->workers[i].state == TROUPE_WORKER_PENDING;
    }
    return n;
}

/* follow long-polls job id until done(job) or until; 0 when done. */
static int follow(troupe_client *c, uint64_t id, int64_t until, int want_running, char *why, size_t why_size)
{
    troupe_job *j = NULL;
    troupe_error e;
    uint64_t v = 0;

    for (;;) {
        int64_t left = until - tr_now_ms();
        int rv = troupe_wait_job(c, id, v, v == 0 ? 0 : (uint32_t)(left > 0 ? left : 0), &j, &e);
        if (rv != TROUPE_OK) {
            snprintf(why, why_size, "GetJob %llu: %.200s", (unsigned long long)id, e.message);
            return -1;
        }
        int done = want_running ? running(j) == WORKERS : live(j) == 0;
        int ended = want_running && j->state >= TROUPE_JOB_SUCCEEDED;
        if (done || ended || left <= 0) {
            if (!done) {
                snprintf(why, why_size, "job %llu: %s, %zu of %d workers RUNNING, %zu live (%.150s)",
                         (unsigned long long)id, troupe_job_state_name(j->state), running(j), WORKERS,
                         live(j), j->reason);
            }
            troupe_job_free(j);
            return done ? 0 : -1;
        }
        v = j->version;
        troupe_job_free(j);
        j = NULL;
    }
}

/* wait_cluster waits until n nodes are ALIVE with all their GPUs free. */
static int wait_cluster(troupe_client *c, uint32_t nodes, uint32_t gpus, int64_t until, char *why,
                        size_t why_size)
{
    troupe_cluster cl = {0};
    troupe_error e;

    while (tr_now_ms() < until) {
        if (troupe_get_cluster(c, &cl, &e) == TROUPE_OK && cl.nodes_alive == nodes && cl.gpus_total == gpus &&
            cl.gpus_free == gpus) {
            return 0;
        }
        tr_sleep_ms(5);
    }
    snprintf(why, why_size, "cluster: %u nodes alive, %u of %u GPUs free (want %u nodes, %u free)",
             cl.nodes_alive, cl.gpus_free, cl.gpus_total, nodes, gpus);
    return -1;
}

static int start_agents(const eb_startup_opts *o, const eb_head *h, pid_t *pids, char *why, size_t why_size)
{
    for (int i = 0; i < NODES; i++) {
        char name[32], dir[700], log[720], gpus[8];
        char *argv[] = {(char *)o->node_bin,
                        "--head",
                        (char *)h->url,
                        "--name",
                        name,
                        "--fake-gpus",
                        gpus,
                        "--state-dir",
                        dir,
                        "--log-level",
                        (char *)o->log_level,
                        "--stop-grace-ms",
                        "2000",
                        NULL};
        snprintf(name, sizeof(name), "e2e-n%d", i);
        snprintf(gpus, sizeof(gpus), "%d", GPUS);
        snprintf(dir, sizeof(dir), "%s/node-%d", h->dir, i);
        snprintf(log, sizeof(log), "%s/node-%d.log", h->dir, i);
        if (eb_spawn(argv, log, &pids[i]) != 0) {
            snprintf(why, why_size, "cannot start %s: %s", o->node_bin, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* one_rep measures one submit -> all RUNNING, then stop -> all free. */
static int one_rep(troupe_client *c, const char *yaml, eb_startup *s, char *why, size_t why_size)
{
    troupe_error e;
    uint64_t id = 0;
    double t0 = eb_now_s(), t1;

    if (troupe_submit_yaml(c, yaml, strlen(yaml), "startup.yaml", NULL, &id, &e) != TROUPE_OK) {
        snprintf(why, why_size, "submit: %.200s", e.message);
        return -1;
    }
    if (follow(c, id, tr_now_ms() + 30000, 1, why, why_size) != 0) {
        return -1;
    }
    t1 = eb_now_s();
    if (troupe_stop_job(c, id, &e) != TROUPE_OK) {
        snprintf(why, why_size, "stop: %.200s", e.message);
        return -1;
    }
    if (follow(c, id, tr_now_ms() + 30000, 0, why, why_size) != 0 ||
        wait_cluster(c, NODES, NODES * GPUS, tr_now_ms() + 10000, why, why_size) != 0) {
        return -1;
    }
    s->ms[s->done] = (t1 - t0) * 1e3;
    s->release_ms[s->done] = (eb_now_s() - t1) * 1e3;
    s->done++;
    return 0;
}

static void stats(eb_startup *s)
{
    double a[16], b[16];
    memcpy(a, s->ms, sizeof(a));
    memcpy(b, s->release_ms, sizeof(b));
    qsort(a, (size_t)s->done, sizeof(double), eb_cmp_double);
    qsort(b, (size_t)s->done, sizeof(double), eb_cmp_double);
    s->median_ms = eb_pct(a, (size_t)s->done, 0.5);
    s->min_ms = a[0];
    s->release_median_ms = eb_pct(b, (size_t)s->done, 0.5);
}

int eb_startup_run(const eb_startup_opts *o, eb_startup *s)
{
    eb_head_opts ho = {
        .bin = o->head_bin, .tmp_base = o->tmp_base, .sync_full = 1, .log_level = o->log_level};
    troupe_client_opts co = {.timeout_ms = 10000};
    static const char yaml[] =
        "name: e2e-startup\n"
        "cluster: {nodes: [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "
        "1, 1, 1, "
        "1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "
        "1]}\n"
        "groups: [{name: g, workers: 64, resources: {gpu: 1}, strategy: PACK, command: [sleep, \"30\"]}]\n";
    pid_t pids[NODES] = {0};
    troupe_client *c = NULL;
    troupe_error e;
    eb_head h;
    int rv = -1;

    memset(s, 0, sizeof(*s));
    s->reps = o->reps > 16 ? 16 : o->reps;
    s->nodes = NODES;
    s->gpus_per_node = GPUS;
    s->workers = WORKERS;
    if (eb_head_start(&ho, &h, s->note, sizeof(s->note)) != 0) {
        return -1;
    }
    co.head_url = h.url;
    if (start_agents(o, &h, pids, s->note, sizeof(s->note)) != 0) {
        goto out;
    }
    if (troupe_client_open(&c, &co, &e) != TROUPE_OK) {
        snprintf(s->note, sizeof(s->note), "connect: %.200s", e.message);
        goto out;
    }
    if (wait_cluster(c, NODES, NODES * GPUS, tr_now_ms() + 15000, s->note, sizeof(s->note)) != 0) {
        goto out;
    }
    while (s->done < s->reps) {
        if (one_rep(c, yaml, s, s->note, sizeof(s->note)) != 0) {
            goto out;
        }
    }
    stats(s);
    s->ran = 1;
    rv = 0;
out:
    troupe_client_close(c);
    for (int i = 0; i < NODES; i++) {
        eb_stop(pids[i], 5000);
    }
    eb_head_stop(&h);
    return rv;
}
