/* metrics_bench - worker metrics into one troupe-head: W simulated workers,
 * each on its own connection and thread as the worker runtime's sender is,
 * reporting N scalars at H Hz (one ReportMetrics per worker per tick, as
 * the runtime batches its 100 ms gather), for S seconds.
 *
 *   metrics_bench --head URL --head-pid PID --cli PATH [--workers 1000]
 *                 [--names 10] [--hz 10] [--secs 30] [--idle-ms 5000] [--json FILE]
 *
 * The head must run with a long heartbeat (run.sh starts it): the bench
 * registers simulated nodes itself (no agents, so the workers never start)
 * and submits one job of W one-GPU workers, then reports as those workers.
 *
 * Measured: points acknowledged per second (sustained; a point is counted
 * once the head acknowledged it, i.e. it is on disk), the head's CPU time per
 * 1,000 points (from /proc/PID/stat over the load phase), reports refused or
 * past their 10 s deadline (the points are kept and sent again, as the
 * runtime does), points dropped (a
 * worker holds at most 65,536 unacknowledged points, as the runtime's buffer
 * does; past that new points are dropped), reports refused, the latency from
 * a point's report to its line in `troupe metrics JOB -f` (one worker's
 * first name, value = the wall clock at report), and the RPC latency of Ping
 * every 20 ms while idle and under the load. */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "rpc.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

#define GPUS_PER_NODE 64
#define BUFFER_POINTS 65536
#define MAX_NAMES 64

static struct {
    const char *url, *cli, *json;
    int head_pid;
    uint32_t workers, names, hz, secs;
    uint32_t idle_ms; /* Ping timed alone before the load */
} opt = {.workers = 1000, .names = 10, .hz = 10, .secs = 30, .idle_ms = 5000};

static atomic_int stop_load;
typedef struct samples samples;
static void add_sample(samples *s, double v);
static samples *ack_lat_p;
static atomic_uint_fast64_t acked, dropped, refused, timed_out, failed_calls;

typedef struct worker {
    uint64_t job;
    char name[64];
    tr_rpc_client *rpc;
    uint64_t seq, acked_seq; /* points made so far; acknowledged up to */
    uint64_t pending_from;   /* first seq not acknowledged */
    int rv;
    char why[200];
} worker;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- the cluster: simulated nodes and one job ----------------------------- */

static int register_nodes(tr_rpc_client *rpc, size_t n, tr_err *err)
{
    Troupe__V1__Gpu gpus[GPUS_PER_NODE], *gp[GPUS_PER_NODE];
    int rv = TROUPE_OK;

    for (size_t i = 0; i < n && rv == TROUPE_OK; i++) {
        Troupe__V1__RegisterNodeRequest req = TROUPE__V1__REGISTER_NODE_REQUEST__INIT;
        char name[32], addr[32];
        for (unsigned g = 0; g < GPUS_PER_NODE; g++) {
            troupe__v1__gpu__init(&gpus[g]);
            gpus[g].index = g;
            gpus[g].model = "SIM";
            gpus[g].simulated = 1;
            gp[g] = &gpus[g];
        }
        snprintf(name, sizeof(name), "mx-sim-%03zu", i);
        snprintf(addr, sizeof(addr), "10.78.%zu.%zu", i >> 8, i & 255);
        req.name = req.hostname = name;
        req.address = addr;
        req.gpus = gp;
        req.n_gpus = GPUS_PER_NODE;
        rv = tr_rpc_client_call(rpc, "troupe.v1.Head/RegisterNode", &req.base,
                                &troupe__v1__register_node_reply__descriptor, NULL, 10000, 0, err);
    }
    return rv;
}

static int submit(tr_rpc_client *rpc, uint32_t n, uint64_t *id, tr_err *err)
{
    Troupe__V1__SubmitJobRequest req = TROUPE__V1__SUBMIT_JOB_REQUEST__INIT;
    Troupe__V1__JobSpec spec = TROUPE__V1__JOB_SPEC__INIT;
    Troupe__V1__GroupSpec g = TROUPE__V1__GROUP_SPEC__INIT, *gp = &g;
    Troupe__V1__SubmitJobReply *rep = NULL;
    char *cmd[] = {"sleep", "1"};
    uint32_t vn = (n + GPUS_PER_NODE - 1) / GPUS_PER_NODE, *nodes = calloc(vn, sizeof(*nodes));
    int rv;

    for (uint32_t v = 0; v < vn; v++) {
        nodes[v] = v + 1 < vn ? GPUS_PER_NODE : n - v * GPUS_PER_NODE;
    }
    g.name = "g";
    g.workers = n;
    g.gpus = 1;
    g.strategy = "PACK";
    g.command = cmd;
    g.n_command = 2;
    spec.name = "metrics-bench";
    spec.cluster_nodes = nodes;
    spec.n_cluster_nodes = vn;
    spec.groups = &gp;
    spec.n_groups = 1;
    spec.workdir = "/";
    req.spec = &spec;
    rv = tr_rpc_client_call(rpc, "troupe.v1.Head/SubmitJob", &req.base, &troupe__v1__submit_job_reply__descriptor,
                            (ProtobufCMessage **)&rep, 30000, 0, err);
    free(nodes);
    if (rv == TROUPE_OK) {
        *id = rep->job_id;
        if (rep->state != TROUPE__V1__JOB_STATE__JOB_RUNNING) {
            rv = tr_err_set(err, TROUPE_FAILED_PRECONDITION, "job of %u workers not placed: %s", n, rep->reason);
        }
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    return rv;
}

/* ---- a worker: one report per tick of everything not yet acknowledged ------- */

/* report sends points pending_from..seq (at most 20000, the head's limit per
 * report). The value of name 0 is the wall clock (ms), for the latency. */
static void report(worker *w, char names[][16])
{
    Troupe__V1__ReportMetricsRequest req = TROUPE__V1__REPORT_METRICS_REQUEST__INIT;
    Troupe__V1__ReportMetricsReply *rep = NULL;
    Troupe__V1__WorkerRef ref = TROUPE__V1__WORKER_REF__INIT;
    uint64_t from = w->pending_from, n = w->seq - from + 1;
    Troupe__V1__MetricPoint *pts, **pp;
    int64_t wall = tr_wall_ms();
    tr_err err;
    int rv;

    n = n > 20000 ? 20000 : n;
    pts = calloc(n, sizeof(*pts));
    pp = calloc(n, sizeof(*pp));
    for (uint64_t i = 0; i < n; i++) {
        uint64_t s = from + i;
        troupe__v1__metric_point__init(&pts[i]);
        pts[i].seq = s;
        pts[i].step = (s - 1) / opt.names + 1;
        pts[i].name = names[(s - 1) % opt.names];
        pts[i].value = (s - 1) % opt.names == 0 ? (double)wall : (double)s;
        pts[i].ts_ms = wall;
        pp[i] = &pts[i];
    }
    ref.job_id = w->job;
    ref.worker = w->name;
    req.from = &ref;
    req.points = pp;
    req.n_points = n;
    req.reported = from + n - 1;
    req.dropped = 0;
    int64_t t0 = now_ns();
    rv = tr_rpc_client_call(w->rpc, "troupe.v1.Head/ReportMetrics", &req.base,
                            &troupe__v1__report_metrics_reply__descriptor, (ProtobufCMessage **)&rep, 10000, 0, &err);
    if (rv == TROUPE_OK) {
        add_sample(ack_lat_p, (double)(now_ns() - t0) / 1e6);
        atomic_fetch_add(&acked, rep->acked_seq - w->pending_from + 1);
        w->pending_from = rep->acked_seq + 1;
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    } else if (rv == TROUPE_RESOURCE_EXHAUSTED || rv == TROUPE_UNAVAILABLE || rv == TROUPE_DEADLINE_EXCEEDED) {
        /* kept and sent again next tick, as the runtime's sender retries these */
        atomic_fetch_add(rv == TROUPE_DEADLINE_EXCEEDED ? &timed_out : &refused, 1);
    } else {
        atomic_fetch_add(&failed_calls, 1);
        w->rv = rv;
        snprintf(w->why, sizeof(w->why), "%.190s", err.msg);
    }
    free(pts);
    free(pp);
}

/* worker_main makes the points of every tick that is due (the training loop
 * does not wait for the network) and then sends all it holds in one report
 * (the runtime's sender): a slow head means bigger reports, not fewer points. */
static void *worker_main(void *arg)
{
    worker *w = arg;
    char names[MAX_NAMES][16];
    int64_t period = 1000000000LL / opt.hz, start = now_ns(), ticks = 0;

    for (uint32_t i = 0; i < opt.names; i++) {
        snprintf(names[i], sizeof(names[i]), "m%u", i);
    }
    /* spread the workers over the tick, as independent processes would be */
    start += (int64_t)(((uint64_t)(uintptr_t)w * 2654435761u) % (uint64_t)period);
    while (!atomic_load(&stop_load) && w->rv == TROUPE_OK) {
        int64_t t = now_ns(), due = t < start ? 0 : (t - start) / period + 1;
        if (due == ticks) {
            int64_t wake = start + ticks * period;
            struct timespec ts = {(wake - t) / 1000000000LL, (wake - t) % 1000000000LL};
            nanosleep(&ts, NULL);
            continue;
        }
        for (; ticks < due; ticks++) {
            for (uint32_t i = 0; i < opt.names; i++) {
                if (w->seq + 1 - w->pending_from >= BUFFER_POINTS) {
                    atomic_fetch_add(&dropped, 1); /* the buffer is full: new points go */
                    continue;
                }
                w->seq++;
            }
        }
        if (w->seq >= w->pending_from) {
            report(w, names);
        }
    }
    return NULL;
}

/* ---- probes: RPC latency and the follower ------------------------------------ */

struct samples {
    double *v;
    size_t n, cap;
    pthread_mutex_t mu;
};

static void add_sample(samples *s, double v)
{
    pthread_mutex_lock(&s->mu);
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
    }
    s->v[s->n++] = v;
    pthread_mutex_unlock(&s->mu);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(samples *s, double p)
{
    if (s->n == 0) {
        return NAN;
    }
    qsort(s->v, s->n, sizeof(*s->v), cmp_d);
    return s->v[(size_t)(p * (double)(s->n - 1))];
}

static samples ping_idle, ping_load, follow_lat, ack_lat;
static atomic_int ping_phase; /* 0 idle, 1 load, 2 stop */

static void *ping_main(void *arg)
{
    tr_rpc_client *c = arg;
    while (atomic_load(&ping_phase) < 2) {
        Troupe__V1__PingRequest req = TROUPE__V1__PING_REQUEST__INIT;
        int64_t t0 = now_ns();
        tr_err err;
        int phase = atomic_load(&ping_phase);
        if (tr_rpc_client_call(c, "troupe.v1.Head/Ping", &req.base, &troupe__v1__ping_reply__descriptor, NULL, 5000,
                               0, &err) == TROUPE_OK) {
            add_sample(phase == 0 ? &ping_idle : &ping_load, (double)(now_ns() - t0) / 1e6);
        }
        tr_sleep_ms(20);
    }
    return NULL;
}

typedef struct follower {
    FILE *in;
    pid_t pid;
} follower;

/* follow_main reads `troupe -o json metrics JOB -f` lines: each point's
 * value is the wall clock at its report. */
static void *follow_main(void *arg)
{
    follower *f = arg;
    char line[1024];
    while (fgets(line, sizeof(line), f->in) != NULL) {
        const char *v = strstr(line, "\"value\":");
        if (v != NULL) {
            double sent = strtod(v + 8, NULL);
            add_sample(&follow_lat, (double)tr_wall_ms() - sent);
        }
    }
    return NULL;
}

/* ---- the run ------------------------------------------------------------------ */

static double head_cpu_s(void)
{
    char path[64], buf[2048];
    unsigned long ut = 0, st = 0;
    FILE *f;
    snprintf(path, sizeof(path), "/proc/%d/stat", opt.head_pid);
    if ((f = fopen(path, "r")) == NULL || fgets(buf, sizeof(buf), f) == NULL) {
        if (f) {
            fclose(f);
        }
        return NAN;
    }
    fclose(f);
    /* fields 14 and 15 after the ")" of the command name */
    sscanf(strrchr(buf, ')') + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

static int parse(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--head") == 0) {
            opt.url = argv[i + 1];
        } else if (strcmp(argv[i], "--head-pid") == 0) {
            opt.head_pid = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--cli") == 0) {
            opt.cli = argv[i + 1];
        } else if (strcmp(argv[i], "--workers") == 0) {
            opt.workers = (uint32_t)atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--names") == 0) {
            opt.names = (uint32_t)atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--hz") == 0) {
            opt.hz = (uint32_t)atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--secs") == 0) {
            opt.secs = (uint32_t)atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--idle-ms") == 0) {
            opt.idle_ms = (uint32_t)atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--json") == 0) {
            opt.json = argv[i + 1];
        } else {
            return -1;
        }
    }
    return opt.url && opt.cli && opt.head_pid > 0 && opt.workers > 0 && opt.names > 0 && opt.names <= MAX_NAMES &&
                   opt.hz > 0 && opt.secs > 0
               ? 0
               : -1;
}

static int open_workers(worker *ws, uint64_t job)
{
    for (uint32_t i = 0; i < opt.workers; i++) {
        tr_rpc_client_opts o = {.url = opt.url};
        tr_err err;
        ws[i].job = job;
        ws[i].pending_from = 1;
        snprintf(ws[i].name, sizeof(ws[i].name), "job%" PRIu64 "-g-%u", job, i);
        if (tr_rpc_client_open(&o, &ws[i].rpc, &err) != TROUPE_OK) {
            fprintf(stderr, "metrics_bench: connection %u: %s\n", i, err.msg);
            return -1;
        }
    }
    return 0;
}

extern char **environ;

/* start_follower runs `troupe -o json metrics JOB -f` on one worker's first
 * name, its stdout into a pipe (posix_spawn: no fork after nng started),
 * with this process's environment (LD_LIBRARY_PATH where libtroupe is not
 * installed: with none, the CLI did not start and no latency was measured). */
static int start_follower(follower *f, uint64_t job)
{
    char jobs[32], worker[64];
    char *argv[] = {(char *)opt.cli, "--head", (char *)opt.url, "-o", "json", "metrics", jobs, "-f", "--worker",
                    worker, "--name", "m0", NULL};
    posix_spawn_file_actions_t fa;
    int fds[2], rv;

    snprintf(jobs, sizeof(jobs), "%" PRIu64, job);
    snprintf(worker, sizeof(worker), "job%" PRIu64 "-g-0", job);
    if (pipe(fds) != 0) {
        return -1;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    rv = posix_spawn(&f->pid, opt.cli, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rv != 0 || (f->in = fdopen(fds[0], "r")) == NULL) {
        close(fds[0]);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    tr_rpc_client *ctl = NULL, *probe = NULL;
    tr_rpc_client_opts o = {0};
    worker *ws;
    pthread_t *th, pt, ft;
    follower fol = {0};
    uint64_t job = 0;
    tr_err err;
    struct rlimit rl;
    pthread_attr_t attr;
    double cpu0, cpu1, secs, pts_per_s, self0, self1;
    double load0 = 0;
    FILE *la = fopen("/proc/loadavg", "r");

    if (la != NULL) {
        if (fscanf(la, "%lf", &load0) != 1) {
            load0 = 0;
        }
        fclose(la);
    }
    int64_t t0, t1;

    if (parse(argc, argv) != 0) {
        fprintf(stderr, "usage: metrics_bench --head URL --head-pid PID --cli PATH [--workers N] [--names N] "
                        "[--hz N] [--secs N] [--idle-ms MS] [--json FILE]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    o.url = opt.url;
    if (tr_rpc_client_open(&o, &ctl, &err) != TROUPE_OK || tr_rpc_client_open(&o, &probe, &err) != TROUPE_OK ||
        register_nodes(ctl, (opt.workers + GPUS_PER_NODE - 1) / GPUS_PER_NODE, &err) != TROUPE_OK ||
        submit(ctl, opt.workers, &job, &err) != TROUPE_OK) {
        fprintf(stderr, "metrics_bench: %s\n", err.msg);
        return 1;
    }
    ws = calloc(opt.workers, sizeof(*ws));
    th = calloc(opt.workers, sizeof(*th));
    if (open_workers(ws, job) != 0) {
        return 1;
    }
    pthread_mutex_init(&ping_idle.mu, NULL);
    pthread_mutex_init(&ping_load.mu, NULL);
    pthread_mutex_init(&follow_lat.mu, NULL);
    pthread_mutex_init(&ack_lat.mu, NULL);
    ack_lat_p = &ack_lat;
    pthread_create(&pt, NULL, ping_main, probe);
    tr_sleep_ms(opt.idle_ms); /* idle RPC latency first */
    if (start_follower(&fol, job) != 0 || pthread_create(&ft, NULL, follow_main, &fol) != 0) {
        fprintf(stderr, "metrics_bench: cannot start troupe metrics -f\n");
        return 1;
    }
    atomic_store(&ping_phase, 1);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    cpu0 = head_cpu_s();
    self0 = self_cpu_s();
    t0 = now_ns();
    for (uint32_t i = 0; i < opt.workers; i++) {
        pthread_create(&th[i], &attr, worker_main, &ws[i]);
    }
    tr_sleep_ms((int64_t)opt.secs * 1000);
    atomic_store(&stop_load, 1);
    for (uint32_t i = 0; i < opt.workers; i++) {
        pthread_join(th[i], NULL);
    }
    t1 = now_ns();
    cpu1 = head_cpu_s();
    self1 = self_cpu_s();
    atomic_store(&ping_phase, 2);
    pthread_join(pt, NULL);
    tr_sleep_ms(1000); /* the follower's last poll */
    kill(fol.pid, SIGTERM); /* it follows until the job ends, which it never does here */
    waitpid(fol.pid, NULL, 0);
    pthread_join(ft, NULL); /* EOF on the pipe */
    fclose(fol.in);

    secs = (double)(t1 - t0) / 1e9;
    pts_per_s = (double)atomic_load(&acked) / secs;
    {
        uint64_t made = 0, unacked = 0, errs = 0;
        for (uint32_t i = 0; i < opt.workers; i++) {
            made += ws[i].seq;
            unacked += ws[i].seq + 1 - ws[i].pending_from;
            if (ws[i].rv != TROUPE_OK && errs++ == 0) {
                fprintf(stderr, "worker %u: %s: %s\n", i, troupe_strerror(ws[i].rv), ws[i].why);
            }
        }
        double offered = (double)opt.workers * opt.names * opt.hz;
        double cpu = cpu1 - cpu0;
        printf("metrics ingest: %u workers x %u names x %u Hz = %.0f points/s offered, %.1f s (load average %.2f "
               "at the start)\n", opt.workers, opt.names, opt.hz, offered, secs, load0);
        printf("  %-38s %12.0f\n", "points made", (double)made);
        printf("  %-38s %12.0f  (%.0f points/s)\n", "points acknowledged (on disk)", (double)atomic_load(&acked),
               pts_per_s);
        printf("  %-38s %12.0f\n", "unacknowledged at the end", (double)unacked);
        printf("  %-38s %12" PRIu64 "\n", "points dropped (worker buffer full)", (uint64_t)atomic_load(&dropped));
        printf("  %-38s %12" PRIu64 "\n", "reports refused (sent again)", (uint64_t)atomic_load(&refused));
        printf("  %-38s %12" PRIu64 "\n", "reports past their 10 s deadline (sent again)",
               (uint64_t)atomic_load(&timed_out));
        printf("  %-38s %12" PRIu64 "\n", "reports failed otherwise", (uint64_t)atomic_load(&failed_calls));
        printf("  %-38s %11.0f%%  (%.3f ms CPU per 1,000 points)\n", "head CPU (of one core)", 100 * cpu / secs,
               1000.0 * cpu / ((double)atomic_load(&acked) / 1000.0));
        printf("  %-38s %11.0f%%\n", "this bench's own CPU (of one core)", 100 * (self1 - self0) / secs);
        printf("  %-38s p50 %7.1f ms  p99 %7.1f ms  (n=%zu)\n", "report -> on disk (ReportMetrics)",
               pct(&ack_lat, 0.5), pct(&ack_lat, 0.99), ack_lat.n);
        printf("  %-38s p50 %7.1f ms  p99 %7.1f ms  (n=%zu)\n", "report -> troupe metrics -f", pct(&follow_lat, 0.5),
               pct(&follow_lat, 0.99), follow_lat.n);
        printf("  %-38s p50 %7.3f ms  p99 %7.3f ms  (n=%zu)\n", "RPC Ping idle", pct(&ping_idle, 0.5),
               pct(&ping_idle, 0.99), ping_idle.n);
        printf("  %-38s p50 %7.3f ms  p99 %7.3f ms  (n=%zu)\n", "RPC Ping under load", pct(&ping_load, 0.5),
               pct(&ping_load, 0.99), ping_load.n);
        if (opt.json != NULL) {
            FILE *j = fopen(opt.json, "w");
            if (j != NULL) {
                fprintf(j,
                        "{\"load_average_at_start\":%.2f,\"bench_cpu_s\":%.3f,"
                        "\"ack_latency_ms\":{\"p50\":%.2f,\"p99\":%.2f,\"n\":%zu},"
                        "\"workers\":%u,\"names\":%u,\"hz\":%u,\"secs\":%.2f,\"offered_per_s\":%.0f,\"made\":%" PRIu64
                        ",\"acked\":%" PRIu64 ",\"acked_per_s\":%.1f,\"unacked_at_end\":%" PRIu64
                        ",\"dropped\":%" PRIu64 ",\"refused_reports\":%" PRIu64 ",\"timed_out_reports\":%" PRIu64 ",\"failed_reports\":%" PRIu64
                        ",\"head_cpu_s\":%.3f,\"head_cpu_ms_per_1000_points\":%.4f,"
                        "\"follow_latency_ms\":{\"p50\":%.2f,\"p99\":%.2f,\"n\":%zu},"
                        "\"ping_idle_ms\":{\"p50\":%.4f,\"p99\":%.4f,\"n\":%zu},"
                        "\"ping_load_ms\":{\"p50\":%.4f,\"p99\":%.4f,\"n\":%zu}}\n",
                        load0, self1 - self0, pct(&ack_lat, 0.5), pct(&ack_lat, 0.99), ack_lat.n,
                        opt.workers, opt.names, opt.hz, secs, offered, made, (uint64_t)atomic_load(&acked),
                        pts_per_s, unacked, (uint64_t)atomic_load(&dropped), (uint64_t)atomic_load(&refused),
                        (uint64_t)atomic_load(&timed_out), (uint64_t)atomic_load(&failed_calls), cpu,
                        1000.0 * cpu / ((double)atomic_load(&acked) / 1000.0), pct(&follow_lat, 0.5),
                        pct(&follow_lat, 0.99), follow_lat.n, pct(&ping_idle, 0.5), pct(&ping_idle, 0.99),
                        ping_idle.n, pct(&ping_load, 0.5), pct(&ping_load, 0.99), ping_load.n);
                fclose(j);
            }
        }
        if (follow_lat.n == 0) { /* a figure of the goal is missing: not a result */
            fprintf(stderr, "metrics_bench: troupe metrics -f reported no point (did %s start? its error is above)\n",
                    opt.cli);
            return 1;
        }
        return errs > 0 ? 1 : 0;
    }
}
