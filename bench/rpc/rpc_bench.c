/* rpc_bench.c - troupe-bench-rpc: unary RPC round trips, troupe vs raw nng vs gRPC.
 *
 * The servers are real processes: troupe-head answering troupe.v1.Head/Ping
 * (the whole RPC layer: envelope, token check, method table, PingRequest
 * unpack and PingReply pack), rpc-bench-nng-echo (nng rep0 contexts, no RPC
 * layer: the floor), and rpc-bench-grpc (gRPC C++ sync server). All three are
 * started before the first cell and idle while another system is measured; the
 * cells are interleaved (per payload and concurrency, every system in turn) so
 * that drift in the machine's load hurts no system more than another.
 *
 * All three carry the same application bytes: a packed PingRequest{data} (the
 * gRPC peer's EchoMsg has the same field), echoed back unchanged. */
#include <errno.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rpc_bench.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

#define MAX_LIST 8

typedef struct opts {
    char head[PATH_MAX], nng_echo[PATH_MAX], grpc_peer[PATH_MAX];
    int clients[MAX_LIST], nclients;
    size_t sizes[MAX_LIST];
    int nsizes;
    int systems[RB_NSYSTEMS]; /* 1 = measure */
    int warmup_ms, duration_ms, rounds, contexts;
    const char *json;
} opts;

typedef struct server {
    pid_t pid;
    int port;
    char url[64];
} server;

static void usage(FILE *out)
{
    fprintf(out, "usage: troupe-bench-rpc [--build DIR] [--json FILE] [options]\n"
                 "\n"
                 "Unary RPC round trips over tcp loopback: troupe (troupe-head, Head/Ping), raw nng\n"
                 "REQ/REP and gRPC C++, servers in their own processes. Prints a table, writes JSON.\n"
                 "\n"
                 "  --build DIR         build tree holding server/troupe-head and bench/rpc/*\n"
                 "                      (default: two levels above this program)\n"
                 "  --head PATH, --nng-echo PATH, --grpc-peer PATH   override single programs\n"
                 "  --systems LIST      of troupe,troupe-shared,nng,grpc (default troupe,nng,grpc)\n"
                 "  --clients LIST      concurrent clients (default 1,16,64)\n"
                 "  --sizes LIST        bytes of echoed data (default 64)\n"
                 "  --rounds N          measure each cell N times, interleaved, pooled (default 3)\n"
                 "  --warmup-ms N       per cell and round, not measured (default 500)\n"
                 "  --duration-ms N     measured window per cell and round (default 1000)\n"
                 "  --contexts N        server contexts, troupe-head and nng echo (default 64)\n"
                 "  --json FILE         write the cells and goal checks as JSON\n");
}

/* parse_list reads "1,16,64" into v; returns the count or -1. */
static int parse_list(const char *s, long *v, int max)
{
    int n = 0;
    char *end;

    while (*s != '\0' && n < max) {
        errno = 0;
        v[n] = strtol(s, &end, 10);
        if (end == s || errno != 0 || v[n] <= 0 || (*end != ',' && *end != '\0')) {
            return -1;
        }
        n++;
        s = *end == ',' ? end + 1 : end;
    }
    return *s == '\0' && n > 0 ? n : -1;
}

static int parse_systems(const char *s, int *on)
{
    char buf[128], *save = NULL;

    memset(on, 0, sizeof(int) * RB_NSYSTEMS);
    tr_strlcpy(buf, s, sizeof(buf));
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < RB_NSYSTEMS; i++) {
            if (strcmp(t, rb_system_name((rb_system)i)) == 0) {
                on[i] = found = 1;
            }
        }
        if (!found) {
            fprintf(stderr, "troupe-bench-rpc: unknown system '%s'\n", t);
            return -1;
        }
    }
    return 0;
}

/* default_paths points at the programs of the build tree this one lives in. */
static void default_paths(opts *o, const char *build)
{
    char self[PATH_MAX], dir[PATH_MAX];
    ssize_t n;

    if (build == NULL) {
        n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        self[n > 0 ? n : 0] = '\0';
        snprintf(dir, sizeof(dir), "%s/../..", dirname(self)); /* DIR/bench/rpc/troupe-bench-rpc */
        build = dir;
    }
    snprintf(o->head, sizeof(o->head), "%.4000s/server/troupe-head", build);
    snprintf(o->nng_echo, sizeof(o->nng_echo), "%.4000s/bench/rpc/rpc-bench-nng-echo", build);
    snprintf(o->grpc_peer, sizeof(o->grpc_peer), "%.4000s/bench/rpc/rpc-bench-grpc", build);
}

static int parse_int_arg(const char *flag, const char *val, int *out)
{
    long v[1];
    if (val == NULL || parse_list(val, v, 1) != 1 || v[0] > 100000000) {
        fprintf(stderr, "troupe-bench-rpc: %s wants a positive number\n", flag);
        return -1;
    }
    *out = (int)v[0];
    return 0;
}

static int parse_args(int argc, char **argv, opts *o)
{
    long v[MAX_LIST];
    const char *build = NULL;

    *o = (opts){.nclients = 3,
                .clients = {1, 16, 64},
                .nsizes = 1,
                .sizes = {64},
                .systems = {[RB_TROUPE] = 1, [RB_NNG] = 1, [RB_GRPC] = 1},
                .warmup_ms = 500,
                .duration_ms = 1000,
                .rounds = 3,
                .contexts = 64};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--build") == 0 && i + 1 < argc) {
            build = argv[++i];
        }
    }
    default_paths(o, build);
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int n, rv = 0;

        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (val == NULL) {
            rv = -1;
        } else if (strcmp(a, "--build") == 0) {
            /* taken above */
        } else if (strcmp(a, "--head") == 0) {
            tr_strlcpy(o->head, val, sizeof(o->head));
        } else if (strcmp(a, "--nng-echo") == 0) {
            tr_strlcpy(o->nng_echo, val, sizeof(o->nng_echo));
        } else if (strcmp(a, "--grpc-peer") == 0) {
            tr_strlcpy(o->grpc_peer, val, sizeof(o->grpc_peer));
        } else if (strcmp(a, "--systems") == 0) {
            rv = parse_systems(val, o->systems);
        } else if (strcmp(a, "--clients") == 0) {
            if ((n = parse_list(val, v, MAX_LIST)) < 0 || v[0] > 1024) {
                rv = -1;
            }
            for (int k = 0; rv == 0 && k < n; k++) {
                o->clients[k] = (int)v[k];
            }
            o->nclients = n;
        } else if (strcmp(a, "--sizes") == 0) {
            if ((n = parse_list(val, v, MAX_LIST)) < 0) {
                rv = -1;
            }
            for (int k = 0; rv == 0 && k < n; k++) {
                o->sizes[k] = (size_t)v[k];
            }
            o->nsizes = n;
        } else if (strcmp(a, "--warmup-ms") == 0) {
            rv = parse_int_arg(a, val, &o->warmup_ms);
        } else if (strcmp(a, "--duration-ms") == 0) {
            rv = parse_int_arg(a, val, &o->duration_ms);
        } else if (strcmp(a, "--rounds") == 0) {
            rv = parse_int_arg(a, val, &o->rounds);
        } else if (strcmp(a, "--contexts") == 0) {
            rv = parse_int_arg(a, val, &o->contexts);
        } else if (strcmp(a, "--json") == 0) {
            o->json = val;
        } else {
            rv = -1;
        }
        if (rv != 0) {
            fprintf(stderr, "troupe-bench-rpc: bad or incomplete option %s\n", a);
            usage(stderr);
            return -1;
        }
    }
    return 0;
}

/* make_payload packs PingRequest{data = n patterned bytes}: what Head/Ping
 * takes, and byte for byte what the gRPC peer's EchoMsg packs to. */
static uint8_t *make_payload(size_t n, size_t *len)
{
    Troupe__V1__PingRequest req = TROUPE__V1__PING_REQUEST__INIT;
    uint8_t *data = malloc(n), *buf;

    if (data == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        data[i] = (uint8_t)(i * 31u + 7u); /* the peer uses the same pattern */
    }
    req.data.data = data;
    req.data.len = n;
    *len = troupe__v1__ping_request__get_packed_size(&req);
    buf = malloc(*len);
    if (buf != NULL) {
        troupe__v1__ping_request__pack(&req, buf);
    }
    free(data);
    return buf;
}

/* start_server launches the server of one system and waits for its port. */
static int start_server(const opts *o, rb_system sys, const char *tmpdir, server *s)
{
    char listen[64], ctx[16], state[PATH_MAX], port[16];
    char *head[] = {(char *)o->head, "--state-dir", state,         "--listen", listen, "--contexts", ctx,
                    "--log-level",   "warning",     "--sync-full", "false",    NULL};
    char *nng[] = {(char *)o->nng_echo, listen, ctx, NULL};
    char *grpc[] = {(char *)o->grpc_peer, "serve", port, NULL};
    char *const *argv = sys == RB_NNG ? nng : sys == RB_GRPC ? grpc : head;

    s->port = rb_free_port();
    snprintf(s->url, sizeof(s->url), "tcp://127.0.0.1:%d", s->port);
    tr_strlcpy(listen, s->url, sizeof(listen));
    snprintf(port, sizeof(port), "%d", s->port);
    snprintf(ctx, sizeof(ctx), "%d", o->contexts);
    snprintf(state, sizeof(state), "%s/head", tmpdir);
    if (s->port == 0 || access(argv[0], X_OK) != 0) {
        fprintf(stderr, "troupe-bench-rpc: %s: cannot run %s\n", rb_system_name(sys), argv[0]);
        return -1;
    }
    if (rb_spawn(argv, &s->pid) != 0 || rb_wait_port(s->port, s->pid, 10000) != 0) {
        fprintf(stderr, "troupe-bench-rpc: %s: %s did not start listening\n", rb_system_name(sys), argv[0]);
        rb_stop(s->pid);
        s->pid = 0;
        return -1;
    }
    return 0;
}

/* A cell being measured: its figures, its pooled rounds, and its request. */
typedef struct plan {
    rb_cell *cell;
    rb_samples samples;
    rb_load ld;
    const server *srv;
    int failed;
} plan;

static void run_round(const opts *o, const char *tmpdir, plan *p, int round)
{
    rb_cell *c = p->cell;
    size_t before = p->samples.n;
    int rv;

    fprintf(stderr, "  round %d %-14s clients=%-3d data=%-5zu ", round + 1, rb_system_name(c->sys),
            c->clients, c->data_len);
    if (p->srv->pid == 0) {
        snprintf(c->note, sizeof(c->note), "server not running");
        rv = -1;
    } else if (c->sys == RB_GRPC) {
        rv = rb_grpc_run(o->grpc_peer, p->srv->port, &p->ld, c->data_len, tmpdir, &p->samples, c->note,
                         sizeof(c->note));
    } else {
        rv = rb_load_run(&p->ld, &p->samples, c->note, sizeof(c->note));
    }
    if (rv == 0) {
        fprintf(stderr, "%zu calls\n", p->samples.n - before);
    } else {
        p->failed = 1;
        fprintf(stderr, "failed: %s\n", c->note);
    }
}

/* plan_cells lays out every (size, clients, system) cell, systems innermost,
 * which is also the order each round measures them in. */
static size_t plan_cells(const opts *o, const server *srv, uint8_t **payloads, rb_cell *cells, plan *plans)
{
    size_t n = 0;

    for (int si = 0; si < o->nsizes; si++) {
        size_t len;
        payloads[si] = make_payload(o->sizes[si], &len);
        for (int ci = 0; payloads[si] != NULL && ci < o->nclients; ci++) {
            for (int s = 0; s < RB_NSYSTEMS; s++) {
                /* troupe-shared calls the same troupe-head as troupe. */
                const server *sv = &srv[s == RB_TROUPE_SHARED ? RB_TROUPE : s];
                if (!o->systems[s]) {
                    continue;
                }
                cells[n] = (rb_cell){.sys = (rb_system)s,
                                     .clients = o->clients[ci],
                                     .data_len = o->sizes[si],
                                     .frame_len = len};
                plans[n] = (plan){.cell = &cells[n], .srv = sv};
                plans[n].ld = (rb_load){.sys = (rb_system)s,
                                        .url = sv->url,
                                        .clients = o->clients[ci],
                                        .payload = payloads[si],
                                        .len = len,
                                        .warmup_ms = o->warmup_ms,
                                        .duration_ms = o->duration_ms};
                n++;
            }
        }
    }
    return n;
}

/* run_all measures every cell once per round, then pools each cell's rounds. */
static size_t run_all(const opts *o, const server *srv, const char *tmpdir, rb_cell *cells)
{
    static plan plans[MAX_LIST * MAX_LIST * RB_NSYSTEMS];
    uint8_t *payloads[MAX_LIST] = {0};
    size_t n = plan_cells(o, srv, payloads, cells, plans);

    for (int r = 0; r < o->rounds; r++) {
        for (size_t i = 0; i < n; i++) {
            if (!plans[i].failed) {
                run_round(o, tmpdir, &plans[i], r);
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!plans[i].failed) {
            rb_cell_stats(&cells[i], &plans[i].samples);
        }
        free(plans[i].samples.lat);
    }
    for (int si = 0; si < o->nsizes; si++) {
        free(payloads[si]);
    }
    return n;
}

static void settings_json(const opts *o, char *buf, size_t size)
{
    snprintf(
        buf, size,
        "{\"rounds\": %d, \"warmup_ms\": %d, \"duration_ms\": %d, \"server_contexts\": %d, "
        "\"transport\": \"tcp loopback\", "
        "\"troupe_method\": \"troupe.v1.Head/Ping\", \"troupe_clients\": \"one tr_rpc_client per thread\", "
        "\"nng_clients\": \"one req0 socket per thread\", \"grpc_clients\": \"one channel+stub per thread\"}",
        o->rounds, o->warmup_ms, o->duration_ms, o->contexts);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(int argc, char **argv)
{
    static rb_cell cells[MAX_LIST * MAX_LIST * RB_NSYSTEMS];
    server srv[RB_NSYSTEMS] = {{0}};
    char tmpdir[] = "/tmp/troupe-bench-rpc.XXXXXX", settings[512];
    size_t n;
    int goals;
    opts o;

    if (parse_args(argc, argv, &o) != 0) {
        return 2;
    }
    if (mkdtemp(tmpdir) == NULL) {
        perror("troupe-bench-rpc: mkdtemp");
        return 1;
    }
    for (int s = 0; s < RB_NSYSTEMS; s++) {
        int wanted = o.systems[s] || (s == RB_TROUPE && o.systems[RB_TROUPE_SHARED]);
        if (s != RB_TROUPE_SHARED && wanted) {
            start_server(&o, (rb_system)s, tmpdir, &srv[s]);
        }
    }
    fprintf(stderr, "troupe-bench-rpc: %d rounds of (warm-up %d ms, window %d ms) per cell\n", o.rounds,
            o.warmup_ms, o.duration_ms);
    n = run_all(&o, srv, tmpdir, cells);
    for (int s = 0; s < RB_NSYSTEMS; s++) {
        rb_stop(srv[s].pid);
    }
    rb_report_table(cells, n, stdout);
    goals = rb_report_goals(cells, n, stdout);
    settings_json(&o, settings, sizeof(settings));
    if (o.json != NULL && rb_report_json(o.json, settings, cells, n) != 0) {
        fprintf(stderr, "troupe-bench-rpc: cannot write %s\n", o.json);
        return 1;
    }
    /* troupe-head left head.db and its WAL in the state dir. */
    if (nftw(tmpdir, rm_entry, 8, FTW_DEPTH | FTW_PHYS) != 0) {
        fprintf(stderr, "troupe-bench-rpc: left %s behind\n", tmpdir);
    }
    /* Missing goals is a finding, not a failure; a missing cell is (exit 3). */
    return goals < 0 ? 3 : 0;
}
