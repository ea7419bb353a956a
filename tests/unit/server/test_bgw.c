/* test_bgw.c - the head's background workers (server/core/bgw.c): a tick
 * runs under the owner's lock on a thread of the worker's name, again when
 * it asked, early when poked or woken, never after stop returned; the head's
 * reaper is one, woken by a closed connection. */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "bgw.h"
#include "head.h"
#include "head_fixture.h"
#include "test_helpers.h"
#include "util.h"

typedef struct owner {
    pthread_mutex_t mu;
    int ticks;
    int held;        /* the tick found mu held by its own thread */
    char name[32];   /* the thread's name, seen from the tick */
    int64_t again;   /* how far ahead the tick asks to run again; 0 = never */
    int64_t last_at; /* tr_now_ms() of the last tick */
} owner;

static int64_t tick(void *arg, int64_t now)
{
    owner *o = arg;
    o->ticks++;
    o->held = pthread_mutex_trylock(&o->mu) != 0; /* held (by us): trylock fails */
    if (!o->held) {
        pthread_mutex_unlock(&o->mu);
    }
    pthread_getname_np(pthread_self(), o->name, sizeof(o->name));
    o->last_at = now;
    return o->again > 0 ? now + o->again : INT64_MAX;
}

/* ticks_by waits (deadline ms) until o has ticked at least n times. */
static int ticks_by(owner *o, int n, int64_t ms)
{
    int64_t end = tr_now_ms() + ms;
    int got;
    do {
        pthread_mutex_lock(&o->mu);
        got = o->ticks;
        pthread_mutex_unlock(&o->mu);
        if (got >= n) {
            return 1;
        }
        usleep(2000);
    } while (tr_now_ms() < end);
    return 0;
}

/* period: a tick that asks to run again in 20 ms runs again (and again),
 * under the owner's lock, on a thread named as the worker. */
static void period(void **state)
{
    owner o = {.mu = PTHREAD_MUTEX_INITIALIZER, .again = 20};
    tr_bgw_opts bo = {.name = "test worker", .mu = &o.mu, .tick = tick, .arg = &o, .max_wait_ms = 5000};
    tr_bgw *w = NULL;
    tr_err err;

    (void)state;
    TR_ASSERT_OK(tr_bgw_start(&w, &bo, &err), &err);
    if (!ticks_by(&o, 5, 3000)) {
        fail_msg("a tick asking for 20 ms ran %d times in 3 s", o.ticks);
    }
    tr_bgw_stop(w);
    assert_true(o.held);
    assert_string_equal(o.name, "test worker");
}

/* poke: a worker that sleeps for want of work (up to 5 s) ticks as soon
 * as it is poked for now, and a poke for later than it planned changes
 * nothing. */
static void poke(void **state)
{
    owner o = {.mu = PTHREAD_MUTEX_INITIALIZER};
    tr_bgw_opts bo = {.name = "test worker", .mu = &o.mu, .tick = tick, .arg = &o, .max_wait_ms = 5000};
    tr_bgw *w = NULL;
    tr_err err;
    int64_t t0;

    (void)state;
    TR_ASSERT_OK(tr_bgw_start(&w, &bo, &err), &err);
    assert_true(ticks_by(&o, 1, 3000)); /* the first tick, at start */
    pthread_mutex_lock(&o.mu);
    t0 = tr_now_ms();
    tr_bgw_poke(w, t0 + 10);
    pthread_mutex_unlock(&o.mu);
    if (!ticks_by(&o, 2, 2000)) {
        fail_msg("a worker poked for 10 ms from now did not tick within 2 s (its idle wait is 5 s)");
    }
    tr_bgw_stop(w);
}

/* stop: no tick runs after tr_bgw_stop returned, and a stop does not wait
 * for the worker's idle wait to end. */
static void stop(void **state)
{
    owner o = {.mu = PTHREAD_MUTEX_INITIALIZER};
    tr_bgw_opts bo = {.name = "test worker", .mu = &o.mu, .tick = tick, .arg = &o, .max_wait_ms = 30000};
    tr_bgw *w = NULL;
    tr_err err;
    int64_t t0;
    int n;

    (void)state;
    TR_ASSERT_OK(tr_bgw_start(&w, &bo, &err), &err);
    assert_true(ticks_by(&o, 1, 3000));
    t0 = tr_now_ms();
    tr_bgw_stop(w);
    assert_true(tr_now_ms() - t0 < 5000); /* woken, not after its 30 s wait */
    n = o.ticks;
    usleep(50000);
    assert_int_equal(o.ticks, n);
    tr_bgw_stop(NULL); /* a no-op */
}

/* wake: a worker that sleeps for want of work (up to 5 s) ticks soon after
 * a wake from a thread that does not hold the owner's lock. A wake may be
 * lost if it comes while the tick runs (bgw.h), so it is repeated until the
 * tick comes, within 2 s. */
static void wake(void **state)
{
    owner o = {.mu = PTHREAD_MUTEX_INITIALIZER};
    tr_bgw_opts bo = {.name = "test worker", .mu = &o.mu, .tick = tick, .arg = &o, .max_wait_ms = 5000};
    tr_bgw *w = NULL;
    tr_err err;
    int woke = 0;

    (void)state;
    TR_ASSERT_OK(tr_bgw_start(&w, &bo, &err), &err);
    assert_true(ticks_by(&o, 1, 3000));
    for (int i = 0; i < 20 && !woke; i++) {
        tr_bgw_wake(w);
        woke = ticks_by(&o, 2, 100);
    }
    if (!woke) {
        fail_msg("a worker woken 20 times in 2 s did not tick (its idle wait is 5 s)");
    }
    tr_bgw_stop(w);
}

/* node_state reads node id's state under h->mu. */
static int node_state(tr_head *h, uint64_t id)
{
    int st = -1;
    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i < h->n_nodes; i++) {
        if (h->nodes[i].n->id == id) {
            st = h->nodes[i].n->state;
        }
    }
    pthread_mutex_unlock(&h->mu);
    return st;
}

/* reaper_woken_by_closed_connection: the head's reaper runs on a background
 * worker, ticking every quarter heartbeat period (here 15 s: heartbeat_ms
 * 60,000), and a closed agent connection wakes it, so the node is SUSPECT
 * within 2 s, not at the next tick. Re-plant: drop tr_bgw_wake from
 * tr_head_pipe_closed (node_life.c): the node stays ALIVE for 15 s. */
static void reaper_woken_by_closed_connection(void **state)
{
    char dir[256], url[300];
    tr_head h;
    tr_err err;
    tr_rpc_client *agent;
    uint64_t id = 0;
    int st = -1;

    (void)state;
    tr_fixture_head_config(&h, dir, sizeof(dir), url, sizeof(url), "bgw");
    h.cfg.heartbeat_ms = 60000;
    TR_ASSERT_OK(tr_head_start(&h, &err), &err);
    agent = tr_fixture_register_node(url);
    pthread_mutex_lock(&h.mu);
    assert_true(h.n_nodes == 1);
    id = h.nodes[0].n->id;
    pthread_mutex_unlock(&h.mu);
    usleep(200000); /* the reaper's first ticks are behind it: it sleeps for 15 s now */
    assert_int_equal(node_state(&h, id), TROUPE__V1__NODE_STATE__NODE_ALIVE);
    tr_rpc_client_close(agent);
    for (int i = 0; i < 200 && (st = node_state(&h, id)) == TROUPE__V1__NODE_STATE__NODE_ALIVE; i++) {
        usleep(10000);
    }
    if (st != TROUPE__V1__NODE_STATE__NODE_SUSPECT && st != TROUPE__V1__NODE_STATE__NODE_DEAD) {
        fail_msg("2 s after its agent's connection closed the node is in state %d, not SUSPECT (%d): the "
                 "reaper was not woken",
                 st, TROUPE__V1__NODE_STATE__NODE_SUSPECT);
    }
    tr_head_stop(&h);
    tr_cfg_free(tr_head_config_table, &h.cfg);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(period),
        cmocka_unit_test(poke),
        cmocka_unit_test(stop),
        cmocka_unit_test(wake),
        cmocka_unit_test(reaper_woken_by_closed_connection),
    };
    return TR_TEST_MAIN("unit.server.bgw", tests, argc, argv);
}
