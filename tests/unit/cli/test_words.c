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

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(did_you_mean),
        cmocka_unit_test(age_column),
        cmocka_unit_test(ran_until_last_worker),
    };
    return TR_TEST_MAIN("unit.cli", tests, argc, argv);
}
