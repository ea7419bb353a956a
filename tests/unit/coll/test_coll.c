/* test_coll.c - the CPU collective's ring (client/lib/coll.c) with every
 * rank a thread on ipc://: exact sums for 1..7 ranks and awkward sizes,
 * broadcast from any root, barriers, and failures that name the peer.
 *
 * Values are small integers, so float sums are exact whatever the order and
 * the checks compare exactly. The threads only record what happened (cmocka's
 * asserts are for the main thread); the main thread checks. */
#include "test_helpers.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coll.h"
#include "util.h"

#define MAX_RANKS 8

typedef struct world world;
typedef int (*body_fn)(world *wd, uint32_t rank, troupe_coll *c, tr_err *e);

typedef struct rank_result {
    int rv;
    tr_err err;
    int64_t ms; /* how long body took */
    char detail[256];
} rank_result;

struct world {
    uint32_t n;
    uint32_t timeout_ms;
    char dir[256];
    body_fn body;
    const size_t *sizes; /* for the bodies that loop over sizes */
    size_t n_sizes;
    rank_result res[MAX_RANKS];
};

typedef struct rank_arg {
    world *wd;
    uint32_t rank;
} rank_arg;

/* join_ring opens rank's end of the ring of n in dir: listen, connect. */
static int join_ring(const char *dir, uint32_t rank, uint32_t n, uint32_t timeout_ms, troupe_coll **c, tr_err *e)
{
    char urls[MAX_RANKS][300], names[MAX_RANKS][64];
    const char *u[MAX_RANKS], *nm[MAX_RANKS];
    int rv;

    for (uint32_t i = 0; i < n; i++) {
        snprintf(urls[i], sizeof(urls[i]), "ipc://%s/r%u.sock", dir, i);
        snprintf(names[i], sizeof(names[i]), "rank %u (w%u on node-t)", i, i);
        u[i] = urls[i];
        nm[i] = names[i];
    }
    rv = tr_coll_listen(c, rank, n, urls[rank], timeout_ms, NULL, e);
    return rv == TROUPE_OK ? tr_coll_connect(*c, u, nm, e) : rv;
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    world *wd = a->wd;
    rank_result *r = &wd->res[a->rank];
    troupe_coll *c = NULL;
    int64_t t0;

    if (wd->body == NULL) {
        return NULL; /* this rank is a child process (run_world_dying) */
    }
    r->rv = join_ring(wd->dir, a->rank, wd->n, wd->timeout_ms, &c, &r->err);
    if (r->rv == TROUPE_OK) {
        t0 = tr_now_ms();
        r->rv = wd->body(wd, a->rank, c, &r->err);
        r->ms = tr_now_ms() - t0;
    }
    tr_coll_close(c);
    return NULL;
}

/* A rank that dies is a process of its own (this program, argv[1] == CHILD):
 * it joins the ring, says so on stdout and waits to be SIGKILLed, so its
 * connections drop as a dead process's do, by the kernel. A thread could
 * only nng_close its sockets, which in nng 1.5.2 can hang for good
 * (nng#1543): the peers then never saw the death and this test hung, about
 * 1 run in 6 to 30 under ASan. */
#define CHILD "--coll-child"

extern char **environ;

static int child_main(char **argv)
{
    troupe_coll *c = NULL;
    tr_err e = {0};

    if (join_ring(argv[2], (uint32_t)atoi(argv[3]), (uint32_t)atoi(argv[4]), (uint32_t)atoi(argv[5]), &c, &e) !=
        TROUPE_OK) {
        fprintf(stderr, "coll child: %s\n", e.msg);
        return 1;
    }
    if (write(1, "r", 1) != 1) {
        return 1;
    }
    tr_sleep_ms(60000); /* SIGKILLed long before */
    return 1;
}

/* run_world_dying runs body on every rank of n but `dying`, which joins the
 * ring in a child process and is SIGKILLed as soon as it has joined (at
 * most CHILD_JOIN_MS); dying >= n: no such rank, every rank a thread. */
#define CHILD_JOIN_MS 30000

static void run_world_dying(world *wd, uint32_t n, uint32_t timeout_ms, body_fn body, uint32_t dying,
                            const char *self)
{
    pthread_t th[MAX_RANKS];
    rank_arg args[MAX_RANKS];
    world child_wd;
    char rank_s[16], n_s[16], t_s[16], ready = 0;
    char *argv[] = {(char *)self, CHILD, wd->dir, rank_s, n_s, t_s, NULL};
    posix_spawn_file_actions_t fa;
    int fds[2] = {-1, -1}, status = 0;
    struct pollfd pfd;
    pid_t pid = 0;

    wd->n = n;
    wd->timeout_ms = timeout_ms;
    wd->body = body;
    memset(wd->res, 0, sizeof(wd->res));
    tr_test_tmpdir(wd->dir, sizeof(wd->dir), "coll");
    snprintf(rank_s, sizeof(rank_s), "%u", dying);
    snprintf(n_s, sizeof(n_s), "%u", n);
    snprintf(t_s, sizeof(t_s), "%u", timeout_ms);
    if (dying < n) {
        assert_int_equal(pipe(fds), 0);
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
        posix_spawn_file_actions_addclose(&fa, fds[0]);
        assert_int_equal(posix_spawn(&pid, self, &fa, NULL, argv, environ), 0);
        posix_spawn_file_actions_destroy(&fa);
        close(fds[1]);
    }
    child_wd = *wd;
    child_wd.body = NULL;
    for (uint32_t i = 0; i < n; i++) {
        args[i] = (rank_arg){i == dying ? &child_wd : wd, i};
        assert_int_equal(pthread_create(&th[i], NULL, rank_main, &args[i]), 0);
    }
    if (dying < n) {
        /* joined once it wrote; EOF first means it failed (its stderr says why) */
        pfd = (struct pollfd){.fd = fds[0], .events = POLLIN};
        if (poll(&pfd, 1, CHILD_JOIN_MS) != 1 || read(fds[0], &ready, 1) != 1) {
            ready = 0;
        }
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        close(fds[0]);
    }
    for (uint32_t i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
    }
    for (uint32_t i = 0; i < n; i++) {
        char p[300];
        snprintf(p, sizeof(p), "%s/r%u.sock", wd->dir, i);
        unlink(p);
    }
    rmdir(wd->dir);
    if (dying < n && ready != 'r') {
        fail_msg("the dying rank %u (a child process) did not join the ring within %d ms", dying, CHILD_JOIN_MS);
    }
}

/* run_world runs body on n ranks, each a thread, and waits for all of them. */
static void run_world(world *wd, uint32_t n, uint32_t timeout_ms, body_fn body)
{
    run_world_dying(wd, n, timeout_ms, body, UINT32_MAX, NULL);
}

static void assert_all_ok(world *wd)
{
    for (uint32_t i = 0; i < wd->n; i++) {
        if (wd->res[i].rv != TROUPE_OK) {
            fail_msg("%u ranks: rank %u: %s: %s", wd->n, i, troupe_strerror(wd->res[i].rv), wd->res[i].err.msg);
        }
        if (wd->res[i].detail[0]) {
            fail_msg("%u ranks: rank %u: %s", wd->n, i, wd->res[i].detail);
        }
    }
}

/* value is rank's input at element i; the sum over n ranks is known. */
static double value(uint32_t rank, size_t i)
{
    return (double)(i % 4099) + 7.0 * rank + 1.0;
}

static double expected(uint32_t n, size_t i)
{
    return n * (double)(i % 4099) + 7.0 * n * (n - 1) / 2 + n;
}

static int allreduce_sizes(world *wd, uint32_t rank, troupe_coll *c, tr_err *e, troupe_dtype dt)
{
    rank_result *r = &wd->res[rank];

    for (size_t k = 0; k < wd->n_sizes; k++) {
        size_t count = wd->sizes[k], es = dt == TROUPE_F32 ? sizeof(float) : sizeof(double);
        char *buf = malloc(count * es + 1);
        int rv;

        for (size_t i = 0; i < count; i++) {
            if (dt == TROUPE_F32) {
                ((float *)buf)[i] = (float)value(rank, i);
            } else {
                ((double *)buf)[i] = value(rank, i);
            }
        }
        if ((rv = tr_coll_allreduce(c, count ? buf : NULL, count, dt, TROUPE_SUM, e)) != TROUPE_OK) {
            free(buf);
            return rv;
        }
        for (size_t i = 0; i < count && !r->detail[0]; i++) {
            double got = dt == TROUPE_F32 ? ((float *)buf)[i] : ((double *)buf)[i];
            if (got != expected(wd->n, i)) {
                snprintf(r->detail, sizeof(r->detail), "count %zu: element %zu is %.1f, expected %.1f", count, i,
                         got, expected(wd->n, i));
            }
        }
        free(buf);
    }
    return TROUPE_OK;
}

static int body_f32(world *wd, uint32_t rank, troupe_coll *c, tr_err *e)
{
    return allreduce_sizes(wd, rank, c, e, TROUPE_F32);
}

static int body_f64(world *wd, uint32_t rank, troupe_coll *c, tr_err *e)
{
    return allreduce_sizes(wd, rank, c, e, TROUPE_F64);
}

static const size_t k_sizes[] = {0, 1, 5, 1000003};
static const uint32_t k_ranks[] = {1, 2, 3, 4, 7};

static void ranks_and_sizes(body_fn body)
{
    world wd = {.sizes = k_sizes, .n_sizes = 4};

    for (size_t i = 0; i < sizeof(k_ranks) / sizeof(k_ranks[0]); i++) {
        run_world(&wd, k_ranks[i], 15000, body);
        assert_all_ok(&wd);
    }
}

static void ranks_and_sizes_f32(void **state)
{
    (void)state;
    ranks_and_sizes(body_f32);
}

static void ranks_and_sizes_f64(void **state)
{
    (void)state;
    ranks_and_sizes(body_f64);
}

/* large_buffer: 96 MiB of float32 per rank (not divisible by 3), 3 ranks. */
static void large_buffer(void **state)
{
    static const size_t big[] = {(size_t)24 * 1024 * 1024 + 1};
    world wd = {.sizes = big, .n_sizes = 1};

    (void)state;
    run_world(&wd, 3, 40000, body_f32);
    assert_all_ok(&wd);
}

/* Broadcast: root's pattern reaches every rank, for every root. */
static int body_broadcast(world *wd, uint32_t rank, troupe_coll *c, tr_err *e)
{
    static const size_t sizes[] = {0, 1, 5, 3 * 1024 * 1024 + 7};
    rank_result *r = &wd->res[rank];

    for (uint32_t root = 0; root < wd->n; root++) {
        for (size_t k = 0; k < 4; k++) {
            size_t n = sizes[k];
            unsigned char *buf = malloc(n + 1);
            int rv;

            for (size_t i = 0; i < n; i++) {
                buf[i] = rank == root ? (unsigned char)(i * 31 + root) : 0xEE;
            }
            if ((rv = tr_coll_broadcast(c, buf, n, root, e)) != TROUPE_OK) {
                free(buf);
                return rv;
            }
            for (size_t i = 0; i < n && !r->detail[0]; i++) {
                if (buf[i] != (unsigned char)(i * 31 + root)) {
                    snprintf(r->detail, sizeof(r->detail), "root %u, %zu bytes: byte %zu is %u", root, n, i, buf[i]);
                }
            }
            free(buf);
        }
    }
    return TROUPE_OK;
}

static void broadcast_any_root(void **state)
{
    static const uint32_t ranks[] = {1, 2, 3, 5};
    world wd = {0};

    (void)state;
    for (size_t i = 0; i < 4; i++) {
        run_world(&wd, ranks[i], 15000, body_broadcast);
        assert_all_ok(&wd);
    }
}

/* Barrier: the ranks leave together; rank 1 comes 300 ms late, and nobody
 * leaves the second barrier before it arrived. Then an all-reduce still
 * works on the same handle. */
static int body_barrier(world *wd, uint32_t rank, troupe_coll *c, tr_err *e)
{
    int64_t t;
    float v[3] = {1, 2, 3};
    int rv;

    for (int i = 0; i < 20; i++) {
        if ((rv = tr_coll_barrier(c, e)) != TROUPE_OK) {
            return rv;
        }
    }
    if (rank == 1) {
        tr_sleep_ms(300);
    }
    t = tr_now_ms();
    if ((rv = tr_coll_barrier(c, e)) != TROUPE_OK) {
        return rv;
    }
    if (wd->n > 1 && rank != 1 && tr_now_ms() - t < 250) {
        snprintf(wd->res[rank].detail, sizeof(wd->res[rank].detail), "left the barrier after %lld ms",
                 (long long)(tr_now_ms() - t));
    }
    if ((rv = tr_coll_allreduce(c, v, 3, TROUPE_F32, TROUPE_SUM, e)) == TROUPE_OK && v[2] != 3.0f * wd->n) {
        snprintf(wd->res[rank].detail, sizeof(wd->res[rank].detail), "sum after barriers is %f", v[2]);
    }
    return rv;
}

static void barrier_and_sequence(void **state)
{
    world wd = {0};

    (void)state;
    run_world(&wd, 4, 30000, body_barrier);
    assert_all_ok(&wd);
    run_world(&wd, 1, 30000, body_barrier);
    assert_all_ok(&wd);
}

/* Rank 1 broadcasts while the others all-reduce: rank 1 sees rank 0's
 * all-reduce data and says so; every rank fails with that sentence, well
 * before the deadline. */
static int body_mismatch(world *wd, uint32_t rank, troupe_coll *c, tr_err *e)
{
    float v[100] = {0};

    (void)wd;
    if (rank == 1) {
        return tr_coll_broadcast(c, v, sizeof(v), 0, e);
    }
    return tr_coll_allreduce(c, v, 100, TROUPE_F32, TROUPE_SUM, e);
}

static void mismatch_is_named(void **state)
{
    world wd = {0};

    (void)state;
    run_world(&wd, 4, 20000, body_mismatch);
    for (uint32_t i = 0; i < 4; i++) {
        TR_ASSERT_FAILS(wd.res[i].rv, TROUPE_FAILED_PRECONDITION, &wd.res[i].err,
                        "rank 0 (w0 on node-t) is at operation 1 (all-reduce of 100, type 1), rank 1 (w1 on node-t) "
                        "at 1 (broadcast of 400");
        TR_ASSERT_CONTAINS(wd.res[i].err.msg, "same calls in the same order");
        if (wd.res[i].rv == TROUPE_OK || wd.res[i].ms > 10000) {
            fail_msg("rank %u: %s after %lld ms", i, troupe_strerror(wd.res[i].rv), (long long)wd.res[i].ms);
        }
    }
}

/* Rank 2 closes instead of joining the all-reduce: every other rank fails
 * UNAVAILABLE naming rank 2, long before the 20 s deadline; the handle then
 * refuses with the cause. */
static int body_closer(world *wd, uint32_t rank, troupe_coll *c, tr_err *e)
{
    float v[1000];
    int rv;

    (void)wd;
    if (rank == 2) {
        return TROUPE_OK; /* rank_main closes it */
    }
    for (int i = 0; i < 1000; i++) {
        v[i] = 1;
    }
    rv = tr_coll_allreduce(c, v, 1000, TROUPE_F32, TROUPE_SUM, e);
    if (rv != TROUPE_OK) {
        tr_err again = {0};
        if (tr_coll_barrier(c, &again) != TROUPE_FAILED_PRECONDITION || strstr(again.msg, "rank 2") == NULL) {
            snprintf(wd->res[rank].detail, sizeof(wd->res[rank].detail), "after the failure: %.200s", again.msg);
        }
    }
    return rv;
}

static void peer_closes_mid_operation(void **state)
{
    world wd = {0};

    (void)state;
    run_world(&wd, 4, 20000, body_closer);
    assert_int_equal(wd.res[2].rv, TROUPE_OK);
    for (uint32_t i = 0; i < 4; i++) {
        if (i == 2) {
            continue;
        }
        TR_ASSERT_FAILS(wd.res[i].rv, TROUPE_UNAVAILABLE, &wd.res[i].err, "rank 2 (w2 on node-t)");
        TR_ASSERT_CONTAINS(wd.res[i].err.msg, "closed the collective");
        if (wd.res[i].ms > 10000 || wd.res[i].detail[0]) {
            fail_msg("rank %u: failed after %lld ms; %s", i, (long long)wd.res[i].ms, wd.res[i].detail);
        }
    }
}

/* Rank 2 is a process SIGKILLed as soon as it joined the ring: the others
 * fail UNAVAILABLE naming it, long before the deadline. */
static const char *self_exe;

static int body_dies(world *wd, uint32_t rank, troupe_coll *c, tr_err *e)
{
    float v[1000] = {0};
    int rv;

    (void)wd;
    if (rank == 3) {
        tr_sleep_ms(200); /* one rank starts after the death is known */
    }
    rv = tr_coll_allreduce(c, v, 1000, TROUPE_F32, TROUPE_SUM, e);
    return rv;
}

static void peer_dies_mid_operation(void **state)
{
    world wd = {0};

    (void)state;
    run_world_dying(&wd, 4, 20000, body_dies, 2, self_exe);
    for (uint32_t i = 0; i < 4; i++) {
        if (i == 2) {
            continue;
        }
        TR_ASSERT_FAILS(wd.res[i].rv, TROUPE_UNAVAILABLE, &wd.res[i].err, "rank 2 (w2 on node-t) went away");
        if (wd.res[i].ms > 10000) {
            fail_msg("rank %u: failed after %lld ms", i, (long long)wd.res[i].ms);
        }
    }
}

/* Rank 1 stalls past the deadline (500 ms): rank 2, which waits for it,
 * fails DEADLINE_EXCEEDED naming it; nobody waits much past the deadline. */
static int body_stall(world *wd, uint32_t rank, troupe_coll *c, tr_err *e)
{
    double v[10] = {0};

    (void)wd;
    if (rank == 1) {
        tr_sleep_ms(1500);
    }
    return tr_coll_allreduce(c, v, 10, TROUPE_F64, TROUPE_SUM, e);
}

static void deadline_names_peer(void **state)
{
    world wd = {0};

    (void)state;
    run_world(&wd, 3, 500, body_stall);
    TR_ASSERT_FAILS(wd.res[2].rv, TROUPE_DEADLINE_EXCEEDED, &wd.res[2].err, "rank 1 (w1 on node-t) sent nothing to rank 2");
    for (uint32_t i = 0; i < 3; i++) {
        if (wd.res[i].rv == TROUPE_OK || wd.res[i].ms > 1500 + 3000) {
            fail_msg("rank %u: %s after %lld ms", i, troupe_strerror(wd.res[i].rv), (long long)wd.res[i].ms);
        }
    }
}

/* The neighbour that never comes: connect names it at the deadline. */
static void bad_arguments(void **state)
{
    troupe_coll *c = NULL;
    const char *urls[2] = {"ipc:///nonexistent-troupe-dir/a.sock", "ipc:///nonexistent-troupe-dir/b.sock"};
    const char *names[2] = {"rank 0 (w0 on n)", "rank 1 (w1 on n)"};
    char dir[256], url[300];
    float v = 1;
    tr_err e = {0};

    (void)state;
    TR_ASSERT_FAILS(tr_coll_listen(&c, 2, 2, "ipc:///x", 100, NULL, &e), TROUPE_INVALID_ARGUMENT, &e, "rank 2 of 2");
    assert_null(c);
    TR_ASSERT_OK(tr_coll_listen(&c, 0, 1, NULL, 100, NULL, &e), &e);
    TR_ASSERT_OK(tr_coll_connect(c, urls, names, &e), &e);
    TR_ASSERT_FAILS(tr_coll_allreduce(c, &v, 1, (troupe_dtype)9, TROUPE_SUM, &e), TROUPE_INVALID_ARGUMENT, &e,
                    "unknown type");
    TR_ASSERT_FAILS(tr_coll_allreduce(c, &v, 1, TROUPE_F32, (troupe_redop)7, &e), TROUPE_INVALID_ARGUMENT, &e,
                    "unknown operation");
    TR_ASSERT_FAILS(tr_coll_broadcast(c, &v, 4, 1, &e), TROUPE_INVALID_ARGUMENT, &e, "root 1 of 1");
    TR_ASSERT_OK(tr_coll_allreduce(c, &v, 1, TROUPE_F32, TROUPE_SUM, &e), &e);
    assert_true(v == 1.0f);
    tr_coll_close(c);

    tr_test_tmpdir(dir, sizeof(dir), "coll");
    snprintf(url, sizeof(url), "ipc://%s/a.sock", dir);
    urls[0] = url;
    TR_ASSERT_OK(tr_coll_listen(&c, 0, 2, url, 300, NULL, &e), &e);
    TR_ASSERT_FAILS(tr_coll_connect(c, urls, names, &e), TROUPE_DEADLINE_EXCEEDED, &e,
                    "rank 1 (w1 on n) did not accept a connection");
    tr_coll_close(c);
    unlink(url);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    if (argc >= 6 && strcmp(argv[1], CHILD) == 0) {
        return child_main(argv);
    }
    self_exe = argv[0];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ranks_and_sizes_f32),  cmocka_unit_test(ranks_and_sizes_f64),
        cmocka_unit_test(large_buffer),         cmocka_unit_test(broadcast_any_root),
        cmocka_unit_test(barrier_and_sequence), cmocka_unit_test(mismatch_is_named),
        cmocka_unit_test(peer_closes_mid_operation), cmocka_unit_test(peer_dies_mid_operation),
        cmocka_unit_test(deadline_names_peer),
        cmocka_unit_test(bad_arguments),
    };
    return TR_TEST_MAIN("unit.coll", tests, argc, argv);
}
