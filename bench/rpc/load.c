/* load.c - the client side of a troupe or raw nng cell, and the statistics.
 *
 * Each client is a thread that opens its connection, meets the others at a
 * barrier, then calls in a closed loop (next call as soon as the reply is in)
 * until the driver flips the shared phase to STOP. A call is kept when it
 * started in the MEASURE phase; warm-up calls only warm caches, connections
 * and nng's thread pool. Every reply is compared with the request, so a
 * server that answers wrongly cannot look fast. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "rpc.h"
#include "rpc_bench.h"
#include "util.h"

#define CALL_TIMEOUT_MS 10000
#define PING_METHOD "troupe.v1.Head/Ping"

enum { PH_WARMUP, PH_MEASURE, PH_STOP };

/* One client connection of some system: open, one echo call, close. */
typedef struct client_ops {
    int (*open)(void **state, const char *url, void *shared);
    int (*call)(void *state, const uint8_t *p, size_t n); /* 0 = echoed correctly */
    void (*close)(void *state);
} client_ops;

typedef struct run {
    const rb_load *ld;
    const client_ops *ops;
    void *shared; /* troupe-shared: the one handle; else NULL */
    pthread_barrier_t ready;
    atomic_int phase;
} run;

typedef struct worker {
    run *r;
    pthread_t th;
    int open_rv;
    uint64_t *lat;
    size_t n, cap;
    uint64_t errors;
} worker;

uint64_t rb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- troupe: tr_rpc_client_call_raw to troupe-head's Head/Ping ---- */

static int troupe_open(void **state, const char *url, void *shared)
{
    tr_rpc_client_opts o = {.url = url};
    tr_err err;

    if (shared != NULL) {
        *state = shared;
        return 0;
    }
    if (tr_rpc_client_open(&o, (tr_rpc_client **)state, &err) != TROUPE_OK) {
        fprintf(stderr, "troupe-bench-rpc: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int troupe_call(void *state, const uint8_t *p, size_t n)
{
    uint8_t *rep = NULL;
    size_t rn = 0;
    tr_err err;
    int rv = tr_rpc_client_call_raw(state, PING_METHOD, p, n, &rep, &rn, CALL_TIMEOUT_MS, 0, &err);

    /* PingReply{data} packs to the same bytes as PingRequest{data}. */
    if (rv == TROUPE_OK && (rn != n || memcmp(rep, p, n) != 0)) {
        rv = -1;
    }
    free(rep);
    return rv == TROUPE_OK ? 0 : -1;
}

static void troupe_close(void *state)
{
    tr_rpc_client_close(state);
}

static void troupe_close_shared(void *state)
{
    (void)state; /* the driver closes the one handle after the threads */
}

/* ---- raw nng: req0 socket per client, nng_sendmsg/nng_recvmsg ---- */

static int nng_client_open(void **state, const char *url, void *shared)
{
    nng_socket *s = calloc(1, sizeof(*s));
    int rv;

    (void)shared;
    if (s == NULL || nng_req0_open(s) != 0) {
        free(s);
        return -1;
    }
    /* As troupe's client: no resend timer, a bounded wait. */
    nng_socket_set_ms(*s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_ms(*s, NNG_OPT_RECVTIMEO, CALL_TIMEOUT_MS);
    if ((rv = nng_dial(*s, url, NULL, 0)) != 0) {
        fprintf(stderr, "troupe-bench-rpc: dial %s: %s\n", url, nng_strerror(rv));
        nng_close(*s);
        free(s);
        return -1;
    }
    *state = s;
    return 0;
}

static int nng_client_call(void *state, const uint8_t *p, size_t n)
{
    nng_socket *s = state;
    nng_msg *m = NULL;
    int rv;

    if (nng_msg_alloc(&m, 0) != 0 || nng_msg_append(m, p, n) != 0) {
        nng_msg_free(m);
        return -1;
    }
    if (nng_sendmsg(*s, m, 0) != 0) {
        nng_msg_free(m);
        return -1;
    }
    if (nng_recvmsg(*s, &m, 0) != 0) {
        return -1;
    }
    rv = (nng_msg_len(m) == n && memcmp(nng_msg_body(m), p, n) == 0) ? 0 : -1;
    nng_msg_free(m);
    return rv;
}

static void nng_client_close(void *state)
{
    nng_close(*(nng_socket *)state);
    free(state);
}

static const client_ops troupe_ops = {troupe_open, troupe_call, troupe_close};
static const client_ops troupe_shared_ops = {troupe_open, troupe_call, troupe_close_shared};
static const client_ops nng_ops = {nng_client_open, nng_client_call, nng_client_close};

/* ---- the closed loop ---- */

static int keep(worker *w, uint64_t ns)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 4096;
        uint64_t *p = realloc(w->lat, cap * sizeof(*p));
        if (p == NULL) {
            return -1;
        }
        w->lat = p;
        w->cap = cap;
    }
    w->lat[w->n++] = ns;
    return 0;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    run *r = w->r;
    void *st = NULL;
    int ph;

    w->open_rv = r->ops->open(&st, r->ld->url, r->shared);
    pthread_barrier_wait(&r->ready);
    if (w->open_rv != 0) {
        return NULL;
    }
    while ((ph = atomic_load_explicit(&r->phase, memory_order_relaxed)) != PH_STOP) {
        uint64_t t0 = rb_now_ns();
        int rv = r->ops->call(st, r->ld->payload, r->ld->len);
        uint64_t t1 = rb_now_ns();

        if (ph != PH_MEASURE) {
            continue;
        }
        if (rv != 0 || keep(w, t1 - t0) != 0) {
            w->errors++;
        }
    }
    r->ops->close(st);
    return NULL;
}

/* phases sleeps through warm-up and the window; returns the window in ns. */
static uint64_t phases(run *r)
{
    uint64_t t0, t1;

    tr_sleep_ms(r->ld->warmup_ms);
    t0 = rb_now_ns();
    atomic_store(&r->phase, PH_MEASURE);
    tr_sleep_ms(r->ld->duration_ms);
    atomic_store(&r->phase, PH_STOP);
    t1 = rb_now_ns();
    return t1 - t0;
}

/* gather joins the workers and moves their latencies into s. */
static int gather(worker *w, int n, rb_samples *s, char *note, size_t note_size)
{
    int rv = 0;

    for (int i = 0; i < n; i++) {
        pthread_join(w[i].th, NULL);
        s->errors += w[i].errors;
        if (w[i].open_rv != 0) {
            snprintf(note, note_size, "a client could not connect to %s", w[i].r->ld->url);
            rv = -1;
        } else if (rv == 0 && rb_samples_add(s, w[i].lat, w[i].n) != 0) {
            snprintf(note, note_size, "out of memory");
            rv = -1;
        }
        free(w[i].lat);
    }
    return rv;
}

static int open_shared(run *r)
{
    if (r->ld->sys != RB_TROUPE_SHARED) {
        return 0;
    }
    return troupe_open(&r->shared, r->ld->url, NULL);
}

int rb_load_run(const rb_load *ld, rb_samples *s, char *note, size_t note_size)
{
    run r = {.ld = ld};
    worker *w = calloc((size_t)ld->clients, sizeof(*w));
    uint64_t window;
    int rv = -1;

    r.ops = ld->sys == RB_NNG ? &nng_ops : ld->sys == RB_TROUPE_SHARED ? &troupe_shared_ops : &troupe_ops;
    atomic_init(&r.phase, PH_WARMUP);
    if (w == NULL || open_shared(&r) != 0) {
        snprintf(note, note_size, "cannot set up the clients");
        goto out;
    }
    pthread_barrier_init(&r.ready, NULL, (unsigned)ld->clients + 1);
    for (int i = 0; i < ld->clients; i++) {
        w[i].r = &r;
        if (pthread_create(&w[i].th, NULL, worker_main, &w[i]) != 0) {
            /* Cannot happen at these counts; give up loudly rather than hang at the barrier. */
            fprintf(stderr, "troupe-bench-rpc: cannot start client thread %d\n", i);
            abort();
        }
    }
    pthread_barrier_wait(&r.ready);
    window = phases(&r);
    rv = gather(w, ld->clients, s, note, note_size);
    if (rv == 0) {
        s->window_ns += window;
    }
    pthread_barrier_destroy(&r.ready);
out:
    if (r.shared != NULL) {
        tr_rpc_client_close(r.shared);
    }
    free(w);
    return rv;
}

int rb_samples_add(rb_samples *s, const uint64_t *lat, size_t n)
{
    if (s->n + n > s->cap) {
        size_t cap = s->cap ? s->cap : 65536;
        uint64_t *p;
        while (cap < s->n + n) {
            cap *= 2;
        }
        p = realloc(s->lat, cap * sizeof(*p));
        if (p == NULL) {
            return -1;
        }
        s->lat = p;
        s->cap = cap;
    }
    if (n > 0) {
        memcpy(s->lat + s->n, lat, n * sizeof(*lat));
    }
    s->n += n;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* nearest_rank is the p-quantile by the nearest-rank method; lat is sorted. */
static double nearest_rank(const uint64_t *lat, size_t n, double p)
{
    size_t k = (size_t)(p * (double)n + 0.999999);
    return n == 0 ? 0.0 : (double)lat[(k ? k : 1) - 1];
}

void rb_cell_stats(rb_cell *cell, rb_samples *s)
{
    size_t n = s->n;

    qsort(s->lat, n, sizeof(*s->lat), cmp_u64);
    cell->calls = n;
    cell->errors = s->errors;
    cell->window_s = (double)s->window_ns / 1e9;
    cell->p50_us = nearest_rank(s->lat, n, 0.50) / 1e3;
    cell->p99_us = nearest_rank(s->lat, n, 0.99) / 1e3;
    cell->calls_per_s = cell->window_s > 0 ? (double)n / cell->window_s : 0.0;
    cell->ran = n > 0;
    if (n == 0) {
        snprintf(cell->note, sizeof(cell->note), "no call completed in the window");
    }
}
