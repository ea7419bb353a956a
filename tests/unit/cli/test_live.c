/* test_live.c - the live follow view (client/cli/live.c) fed by hand: what
 * `troupe submit` shows per group while a job runs, and its summary. */
#include "test_helpers.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "live.h"

/* The CLI's own tr_cli_plural lives in main.c, which the test does not link. */
const char *tr_cli_plural(uint64_t n)
{
    return n == 1 ? "" : "s";
}

static void feed(tr_live *l, const char *s)
{
    tr_live_feed(l, s, strlen(s));
}

static char *line_of(tr_live *l, size_t k)
{
    static char buf[512];
    assert_int_equal(tr_live_group_line(l, k, buf, sizeof(buf)), 0);
    return buf;
}

/* A step line split anywhere between chunks is read once, whole. */
static void chunks_split_lines(void **state)
{
    (void)state;
    tr_live *l = tr_live_new(7, stderr, 0, 0, 0);
    feed(l, "[job7-policy-0] st");
    feed(l, "ep=3/10 loss=2.50");
    feed(l, "00 tok_s=1200\n[job7-pol");
    assert_string_equal(line_of(l, 0), "policy: 0/1 running, step 3/10, loss 2.5000, 1.2k tokens/s");
    feed(l, "icy-0] step=4/10 loss=2.25 tok_s=1300\n");
    assert_string_equal(line_of(l, 0), "policy: 0/1 running, step 4/10, loss 2.2500, 1.3k tokens/s");
    assert_int_equal(tr_live_group_line(l, 1, (char[8]){0}, 8), -1);
    tr_live_free(l);
}

static troupe_worker worker(const char *name, const char *group, uint32_t rank, troupe_worker_state st)
{
    troupe_worker w;
    memset(&w, 0, sizeof(w));
    w.name = name;
    w.group = group;
    w.rank = rank;
    w.node_name = "na";
    w.state = st;
    return w;
}

/* Groups in the job's order; the slowest rank is the one furthest behind,
 * at equal steps the one with the lower rate; the lead rank's loss. */
static void groups_ranks_and_slowest(void **state)
{
    (void)state;
    troupe_worker ws[] = {worker("job7-policy-0", "policy", 0, TROUPE_WORKER_RUNNING),
                          worker("job7-policy-1", "policy", 1, TROUPE_WORKER_RUNNING),
                          worker("job7-policy-2", "policy", 2, TROUPE_WORKER_RUNNING),
                          worker("job7-gen-0", "gen", 0, TROUPE_WORKER_PENDING)};
    troupe_group gs[] = {{.name = "gen"}, {.name = "policy"}};
    troupe_job j = {.id = 7, .state = TROUPE_JOB_RUNNING, .n_workers = 4, .workers = ws, .n_groups = 2,
                    .groups = gs};
    tr_live *l = tr_live_new(7, stderr, 0, 0, 0);
    tr_live_job(l, &j);
    feed(l, "[job7-policy-1] step=5 loss=1.5 tok_s=900\n[job7-policy-0] step=5 loss=1.25 tok_s=950\n"
            "[job7-policy-2] step=5 loss=1.75 tok_s=400\n");
    assert_string_equal(line_of(l, 0), "gen: 0/1 running, no step reported yet");
    assert_string_equal(line_of(l, 1),
                        "policy: 3/3 running, step 5, loss 1.2500, 2.2k tokens/s, slowest rank 2 (step 5, 400 "
                        "tokens/s on na)");
    feed(l, "[job7-policy-2] step=6 loss=1.0 tok_s=400\n[job7-policy-0] step=6 loss=1.0 tok_s=950\n");
    assert_non_null(strstr(line_of(l, 1), "slowest rank 1 (step 5, 900 tokens/s on na)"));
    /* an older step line (a restarted rank re-reporting) does not go back */
    feed(l, "[job7-policy-0] step=2 loss=9.0 tok_s=950\n");
    assert_non_null(strstr(line_of(l, 1), "step 6, loss 1.0000"));
    tr_live_free(l);
}

/* A rank that finished neither counts in the group's rate nor is "slowest". */
static void finished_ranks_leave_the_rate(void **state)
{
    (void)state;
    troupe_worker ws[] = {worker("job7-g-0", "g", 0, TROUPE_WORKER_EXITED),
                          worker("job7-g-1", "g", 1, TROUPE_WORKER_RUNNING)};
    troupe_job j = {.id = 7, .state = TROUPE_JOB_RUNNING, .n_workers = 2, .workers = ws};
    tr_live *l = tr_live_new(7, stderr, 0, 0, 0);
    tr_live_job(l, &j);
    feed(l, "[job7-g-0] step=10/10 loss=1 tok_s=1000\n[job7-g-1] step=4/10 loss=2 tok_s=300\n");
    assert_string_equal(line_of(l, 0), "g: 1/2 running, step 10/10, loss 1.0000, 300 tokens/s");
    tr_live_free(l);
}

/* Without a terminal the block is written as plain lines only when changed. */
static void plain_lines_on_change(void **state)
{
    (void)state;
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    tr_live *l = tr_live_new(9, f, 0, 0, 1000);
    feed(l, "[job9-g-0] step=1 loss=3 tok_s=10\n");
    tr_live_draw(l, 10000, 0);
    tr_live_draw(l, 20000, 0); /* unchanged: nothing */
    feed(l, "[job9-g-0] step=2 loss=2 tok_s=10\n");
    tr_live_draw(l, 20500, 0); /* changed, but within the interval */
    tr_live_draw(l, 21000, 0);
    fflush(f);
    assert_string_equal(out, "troupe: job 9 g: 0/1 running, step 1, loss 3.0000, 10 tokens/s\n"
                             "troupe: job 9 g: 0/1 running, step 2, loss 2.0000, 10 tokens/s\n");
    tr_live_free(l);
    fclose(f);
    free(out);
}

/* After a failure the summary shows the last lines that were not step lines;
 * a line too long to be a step line goes nowhere and breaks nothing. */
static void failure_tail_and_long_lines(void **state)
{
    (void)state;
    char *out = NULL, *big = malloc(3000);
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    troupe_job j = {.id = 4, .state = TROUPE_JOB_FAILED};
    tr_live *l = tr_live_new(4, f, 0, 0, 0);

    memset(big, 'x', 2999);
    big[0] = '[';
    big[2999] = '\0';
    feed(l, big);
    feed(l, "\n[job4-g-0] step=1/5 loss=2.0 tok_s=10\n");
    for (int i = 0; i < 25; i++) {
        char b[64];
        snprintf(b, sizeof(b), "[job4-g-0] error line %d\n", i);
        feed(l, b);
    }
    tr_live_summary(l, &j, 1);
    fflush(f);
    assert_non_null(strstr(out, "troupe: job 4 group g: 1 step, final loss 2.0000, mean 10 tokens/s per worker\n"));
    assert_non_null(strstr(out, "the last 20 lines of output (all: troupe logs 4):\n  [job4-g-0] error line 5\n"));
    assert_non_null(strstr(out, "error line 24\n"));
    assert_null(strstr(out, "error line 4\n"));
    assert_null(strstr(out, "xxxxxxxx"));
    tr_live_free(l);
    fclose(f);
    free(out);
    free(big);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chunks_split_lines),
        cmocka_unit_test(groups_ranks_and_slowest),
        cmocka_unit_test(finished_ranks_leave_the_rate),
        cmocka_unit_test(plain_lines_on_change),
        cmocka_unit_test(failure_tail_and_long_lines),
    };
    return TR_TEST_MAIN("unit.cli", tests, argc, argv);
}
