/* test_nccl_wait.c - the NCCL helper's deadline loop with a stub poll and a
 * fake clock: ready, in progress then ready, deadline (the message names
 * what was waited for and how long), failure (the reason), back-off that
 * never sleeps past the deadline. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nccl_wait.h"
#include "test_main.h"

typedef struct stub {
    int polls;       /* polls so far */
    int ready_after; /* ready at this poll (1-based); 0 = never */
    int fail_at;     /* fail at this poll; 0 = never */
    uint64_t now;    /* fake clock, ms */
    uint32_t slept[64];
    int nslept;
} stub;

static int poll_stub(void *user, char *why, size_t len)
{
    stub *s = user;
    s->polls++;
    if (s->fail_at != 0 && s->polls == s->fail_at) {
        snprintf(why, len, "unhandled cuda error (peer 1 gone)");
        return -1;
    }
    return s->ready_after != 0 && s->polls >= s->ready_after ? 1 : 0;
}

static uint64_t fake_now(void *user)
{
    return ((stub *)user)->now;
}

static void fake_sleep(void *user, uint32_t ms)
{
    stub *s = user;
    if (s->nslept < 64) {
        s->slept[s->nslept++] = ms;
    }
    s->now += ms;
}

static troupe_status run(stub *s, uint64_t deadline, troupe_error *err)
{
    tr_nccl_clock clk = {fake_now, fake_sleep, s};
    return tr_nccl_wait(&clk, poll_stub, s, deadline, "ncclCommInitRankConfig", err);
}

static void ready_at_once(void **state)
{
    (void)state;
    stub s = {.ready_after = 1, .now = 1000};
    troupe_error err = {0};
    assert_int_equal(run(&s, 2000, &err), TROUPE_OK);
    assert_int_equal(s.polls, 1);
    assert_int_equal(s.nslept, 0);
}

static void ready_after_polls(void **state)
{
    (void)state;
    stub s = {.ready_after = 5, .now = 1000};
    troupe_error err = {0};
    assert_int_equal(run(&s, 2000, &err), TROUPE_OK);
    assert_int_equal(s.polls, 5);
    assert_int_equal(s.nslept, 4);
}

static void deadline_names_what(void **state)
{
    (void)state;
    stub s = {.now = 1000};
    troupe_error err = {0};
    assert_int_equal(run(&s, 1500, &err), TROUPE_DEADLINE_EXCEEDED);
    assert_int_equal(err.code, TROUPE_DEADLINE_EXCEEDED);
    assert_string_equal(err.message, "ncclCommInitRankConfig still in progress after 500 ms");
    assert_int_equal(s.now, 1500); /* stopped at the deadline, not later */
}

static void failure_says_why(void **state)
{
    (void)state;
    stub s = {.fail_at = 3, .now = 1000};
    troupe_error err = {0};
    assert_int_equal(run(&s, 9000, &err), TROUPE_UNAVAILABLE);
    assert_string_equal(err.message, "ncclCommInitRankConfig failed: unhandled cuda error (peer 1 gone)");
    assert_int_equal(s.polls, 3);
}

static void polls_once_past_deadline(void **state)
{
    (void)state;
    stub s = {.ready_after = 1, .now = 5000};
    troupe_error err = {0};
    assert_int_equal(run(&s, 1000, &err), TROUPE_OK); /* ready wins over a deadline already passed */
    stub t = {.now = 5000};
    assert_int_equal(run(&t, 1000, &err), TROUPE_DEADLINE_EXCEEDED);
    assert_int_equal(t.polls, 1);
    assert_int_equal(t.nslept, 0);
}

static void pauses_back_off_within_deadline(void **state)
{
    (void)state;
    stub s = {.now = 0};
    troupe_error err = {0};
    assert_int_equal(run(&s, 50, &err), TROUPE_DEADLINE_EXCEEDED);
    /* 1, 2, 4, 8, 16, then the 19 ms left instead of 20. */
    uint32_t want[] = {1, 2, 4, 8, 16, 19};
    assert_int_equal(s.nslept, 6);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(s.slept[i], want[i]);
    }
    stub t = {.now = 0};
    assert_int_equal(run(&t, 200, &err), TROUPE_DEADLINE_EXCEEDED);
    for (int i = 0; i < t.nslept; i++) {
        assert_true(t.slept[i] <= 20);
    }
}

static void real_clock_deadline(void **state)
{
    (void)state;
    stub s = {0};
    troupe_error err = {0};
    uint64_t t0 = tr_nccl_now_ms();
    assert_int_equal(tr_nccl_wait(NULL, poll_stub, &s, t0 + 60, "warm-up ncclAllReduce", &err),
                     TROUPE_DEADLINE_EXCEEDED);
    uint64_t took = tr_nccl_now_ms() - t0;
    assert_true(took >= 60);
    assert_true(s.polls >= 2);
    assert_non_null(strstr(err.message, "warm-up ncclAllReduce still in progress after "));
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ready_at_once),
        cmocka_unit_test(ready_after_polls),
        cmocka_unit_test(deadline_names_what),
        cmocka_unit_test(failure_says_why),
        cmocka_unit_test(polls_once_past_deadline),
        cmocka_unit_test(pauses_back_off_within_deadline),
        cmocka_unit_test(real_clock_deadline),
    };
    return TR_TEST_MAIN("unit.nccl.wait", tests, argc, argv);
}
