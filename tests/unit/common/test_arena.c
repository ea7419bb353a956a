/* test_arena.c - unit.common.arena: a call's scratch memory (common/arena.c):
 * allocations are bumps in one block, what does not fit gets its own malloc,
 * a reset gives everything back and sizes the block for the next call like
 * this one (never past TR_ARENA_KEEP). */
#include "test_helpers.h"

#include <stdalign.h>

#include "arena.h"
#include "troupe/v1/troupe.pb-c.h"

static int in_block(const tr_arena *a, const void *p)
{
    return (const uint8_t *)p >= a->block && (const uint8_t *)p < a->block + a->cap;
}

static void bump_and_align(void **state)
{
    tr_arena a;
    uint8_t *p[40];

    (void)state;
    tr_arena_init(&a);
    assert_null(a.block); /* no memory until asked */
    for (int i = 0; i < 40; i++) {
        p[i] = tr_arena_alloc(&a, (size_t)i % 7);
        assert_non_null(p[i]);
        assert_true(in_block(&a, p[i]));
        assert_int_equal((uintptr_t)p[i] % alignof(max_align_t), 0);
        memset(p[i], i, (size_t)i % 7);
    }
    for (int i = 1; i < 40; i++) {
        assert_true(p[i] > p[i - 1]); /* bumps, no overlap */
    }
    assert_null(a.big);
    tr_arena_reset(&a);
    assert_int_equal(a.used, 0);
    assert_int_equal(a.cap, TR_ARENA_FIRST); /* it all fitted: the block stays as it was */
    assert_ptr_equal(tr_arena_alloc(&a, 8), p[0]);
    tr_arena_fini(&a);
}

static void grows_after_overflow(void **state)
{
    tr_arena a;
    void *big;

    (void)state;
    tr_arena_init(&a);
    assert_non_null(tr_arena_alloc(&a, 800));
    big = tr_arena_alloc(&a, 3000); /* does not fit: its own malloc */
    assert_non_null(big);
    assert_false(in_block(&a, big));
    assert_non_null(a.big);
    memset(big, 1, 3000);
    tr_arena_reset(&a);
    assert_null(a.big);
    assert_true(a.cap >= 800 + 3000); /* the next call like it fits */
    assert_true(a.cap <= TR_ARENA_KEEP);
    big = tr_arena_alloc(&a, 800);
    assert_true(in_block(&a, big));
    assert_true(in_block(&a, tr_arena_alloc(&a, 3000)));
    assert_null(a.big);
    tr_arena_fini(&a);
}

static void big_not_kept(void **state)
{
    tr_arena a;
    size_t cap;
    uint8_t *p;

    (void)state;
    tr_arena_init(&a);
    assert_non_null(tr_arena_alloc(&a, 16));
    cap = a.cap;
    p = tr_arena_alloc(&a, 4u << 20); /* a 4 MiB job spec */
    assert_non_null(p);
    p[(4u << 20) - 1] = 1;
    tr_arena_reset(&a);
    assert_int_equal(a.cap, cap); /* no 4 MiB block left behind */
    assert_null(a.big);
    /* An allocation too large for any size arithmetic fails cleanly. */
    assert_null(tr_arena_alloc(&a, SIZE_MAX - 8));
    tr_arena_fini(&a);
}

static void fini_and_reuse(void **state)
{
    tr_arena a;

    (void)state;
    tr_arena_init(&a);
    assert_non_null(tr_arena_alloc(&a, 100));
    assert_non_null(tr_arena_alloc(&a, 5000));
    tr_arena_fini(&a);
    assert_null(a.block);
    assert_null(a.big);
    assert_int_equal(a.cap, 0);
    assert_non_null(tr_arena_alloc(&a, 10)); /* usable again */
    tr_arena_fini(&a);
    tr_arena_fini(&a); /* twice is harmless */
}

/* protobuf_allocator: protobuf-c decodes a message with repeated
 * submessages and strings (a heartbeat) into the arena and frees through it
 * without touching malloc's free (a crash or an ASan report if it did). */
static void protobuf_allocator(void **state)
{
    Troupe__V1__HeartbeatRequest req = TROUPE__V1__HEARTBEAT_REQUEST__INIT, *got;
    Troupe__V1__GpuStats g[8], *gp[8];
    Troupe__V1__NodeStats ns = TROUPE__V1__NODE_STATS__INIT;
    uint8_t buf[1024];
    size_t n;
    tr_arena a;

    (void)state;
    for (int i = 0; i < 8; i++) {
        troupe__v1__gpu_stats__init(&g[i]);
        g[i].index = (uint32_t)i;
        g[i].utilization_pct = 10u + (uint32_t)i;
        gp[i] = &g[i];
    }
    ns.gpu_source = "simulated";
    req.node_id = 77;
    req.gpu_stats = gp;
    req.n_gpu_stats = 8;
    req.stats = &ns;
    n = troupe__v1__heartbeat_request__pack(&req, buf);
    tr_arena_init(&a);
    for (int round = 0; round < 3; round++) {
        got = troupe__v1__heartbeat_request__unpack(&a.pb, n, buf);
        assert_non_null(got);
        assert_true(got->node_id == 77);
        assert_int_equal(got->n_gpu_stats, 8);
        assert_int_equal(got->gpu_stats[7]->utilization_pct, 17);
        assert_string_equal(got->stats->gpu_source, "simulated");
        if (round > 0) { /* the first round sized the block: all of it fits now */
            assert_true(in_block(&a, got) && in_block(&a, got->gpu_stats[7]) &&
                        in_block(&a, got->stats->gpu_source));
            assert_null(a.big);
        }
        troupe__v1__heartbeat_request__free_unpacked(got, &a.pb);
        tr_arena_reset(&a);
    }
    tr_arena_fini(&a);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bump_and_align),       cmocka_unit_test(grows_after_overflow),
        cmocka_unit_test(big_not_kept),         cmocka_unit_test(fini_and_reuse),
        cmocka_unit_test(protobuf_allocator),
    };
    return TR_TEST_MAIN("unit.common.arena", tests, argc, argv);
}
