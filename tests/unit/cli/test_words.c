/* Unit tests of the CLI's small helpers (client/cli/words.c): the "did you
 * mean" of a mistyped command, option or format, kubectl's AGE column, and
 * the time a job ran (until its last worker was gone: a stopped job's
 * workers run on through the grace period). */
#include "test_helpers.h"

#include <string.h>

#include "cli.h"

static const char *suggest(const char *word, const char *list)
{
    static char buf[64];
    return tr_cli_suggest(word, list, buf, sizeof(buf));
}

static void did_you_mean(void **state)
{
    const char *commands = "nodes status ping submit submit jobs job logs stop profile trace metrics delete";
    (void)state;
    assert_string_equal(suggest("jbos", commands), "jobs"); /* a transposition is one edit */
    assert_string_equal(suggest("stauts", commands), "status");
    assert_string_equal(suggest("metric", commands), "metrics");
    assert_string_equal(suggest("sub", commands), "submit"); /* an unambiguous abbreviation */
    assert_null(suggest("xyz", commands));                   /* nothing near */
    assert_null(suggest("ls", commands));                    /* two letters: one edit at most */
    assert_string_equal(suggest("--alll", "--active --state --all --oldest-first"), "--all");
    assert_string_equal(suggest("--nmae", "--worker --name --last -f --follow"), "--name");
    assert_string_equal(suggest("jsn", "table json wide csv"), "json");
    assert_string_equal(suggest("tokens_per_sec", "loss tokens_per_s mfu"), "tokens_per_s");
    assert_null(suggest("tok_s", "loss tokens_per_s mfu"));
    assert_true(tr_cli_word_in("json", "table json wide"));
    assert_false(tr_cli_word_in("jso", "table json wide"));
    assert_false(tr_cli_word_in("", "table json wide"));
    assert_false(tr_cli_word_in("csv", "table json wide"));
}

static void age_column(void **state)
{
    char b[16];
    const int64_t now = 1800000000000;
    (void)state;
    tr_cli_age(b, sizeof(b), 0, now);
    assert_string_equal(b, "-");
    tr_cli_age(b, sizeof(b), now - 45000, now);
    assert_string_equal(b, "45s");
    tr_cli_age(b, sizeof(b), now - 119999, now);
    assert_string_equal(b, "119s");
    tr_cli_age(b, sizeof(b), now - 12 * 60000, now);
    assert_string_equal(b, "12m");
    tr_cli_age(b, sizeof(b), now - 3 * 3600000, now);
    assert_string_equal(b, "3h");
    tr_cli_age(b, sizeof(b), now - 5 * 86400000LL, now);
    assert_string_equal(b, "5d");
    tr_cli_age(b, sizeof(b), now + 5000, now); /* the head's clock ahead of this one */
    assert_string_equal(b, "0s");
}

/* A stopped job ended (STOPPED) 1.5 s after it started, its worker ran
 * through the 10 s grace: it ran until the worker was gone, 11.6 s. */
static void ran_until_last_worker(void **state)
{
    troupe_worker w[2];
    troupe_job j;
    int stopping;
    (void)state;
    memset(w, 0, sizeof(w));
    memset(&j, 0, sizeof(j));
    j.started_ms = 1000;
    j.ended_ms = 2500;
    j.workers = w;
    j.n_workers = 2;
    w[0].state = w[1].state = TROUPE_WORKER_EXITED;
    w[0].started_ms = w[1].started_ms = 1100;
    w[0].ended_ms = 12600;
    w[1].ended_ms = 2600;
    assert_int_equal(tr_cli_job_end_ms(&j, 99999, &stopping), 12600);
    assert_false(stopping);
    w[0].state = TROUPE_WORKER_RUNNING; /* still in its grace period */
    w[0].ended_ms = 0;
    assert_int_equal(tr_cli_job_end_ms(&j, 5000, &stopping), 5000);
    assert_true(stopping);
    j.ended_ms = 0; /* running: until now */
    assert_int_equal(tr_cli_job_end_ms(&j, 7000, &stopping), 7000);
    assert_false(stopping);
}

/* troupe jobs' TIME: running for (to now), ran for (to its last worker's
 * end), "-" for a job that never started; seconds, then minutes and hours. */
static void time_column(void **state)
{
    troupe_worker w;
    troupe_job j;
    char b[24];
    (void)state;
    memset(&w, 0, sizeof(w));
    memset(&j, 0, sizeof(j));
    j.submitted_ms = 500;
    assert_true(tr_cli_run_secs(&j, 9000) < 0); /* PENDING: never started */
    tr_cli_duration(b, sizeof(b), tr_cli_run_secs(&j, 9000));
    assert_string_equal(b, "-");
    j.started_ms = 1000; /* RUNNING: until now */
    assert_true(tr_cli_run_secs(&j, 13300) == 12.3);
    tr_cli_duration(b, sizeof(b), tr_cli_run_secs(&j, 13300));
    assert_string_equal(b, "12.3s");
    j.ended_ms = 2500; /* ended, its worker 10 s later: ran until the worker was gone */
    j.workers = &w;
    j.n_workers = 1;
    w.state = TROUPE_WORKER_EXITED;
    w.ended_ms = 12500;
    assert_true(tr_cli_run_secs(&j, 99999999) == 11.5);
    tr_cli_duration(b, sizeof(b), 59.94);
    assert_string_equal(b, "59.9s");
    tr_cli_duration(b, sizeof(b), 303);
    assert_string_equal(b, "5m03s");
    tr_cli_duration(b, sizeof(b), 3 * 3600 + 5 * 60 + 59);
    assert_string_equal(b, "3h05m");
    tr_cli_duration(b, sizeof(b), 2 * 86400 + 3 * 3600);
    assert_string_equal(b, "2d03h");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(did_you_mean),
        cmocka_unit_test(age_column),
        cmocka_unit_test(ran_until_last_worker),
        cmocka_unit_test(time_column),
    };
    return TR_TEST_MAIN("unit.cli", tests, argc, argv);
}
