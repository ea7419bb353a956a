/* Unit tests of `troupe trace`'s JSON writer (client/cli/trace_json.c): spans
 * arriving in any order come out per track (pid = global rank, tid) by start,
 * the enclosing span first, so nested spans follow their parent; times are
 * relative to the earliest span; processes are named after the newest
 * attempt; strings are escaped; the clock notes are kept. */
#include "test_helpers.h"

#include <stdlib.h>
#include <string.h>

#include "trace_json.h"

/* write renders t into a malloc'ed string. */
static char *render(const troupe_trace *t)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);

    assert_non_null(f);
    assert_int_equal(tr_cli_trace_json(f, 7, t), 0);
    fclose(f);
    return out;
}

/* before: a occurs in s, and before b. */
static void before(const char *s, const char *a, const char *b)
{
    const char *pa = strstr(s, a), *pb = strstr(s, b);
    if (pa == NULL || pb == NULL || pa >= pb) {
        fail_msg("expected '%s' before '%s' in:\n%s", a, b, s);
    }
}

static void sorted_and_nested(void **state)
{
    /* Arrival order: rank 1 first, children before parents, two threads. */
    const troupe_trace_span spans[] = {
        {"backward", "phase", 1000000120, 30, 3, 11, 1},
        {"step 3", "step", 1000000100, 100, 3, 11, 1},
        {"all-reduce", "coll", 1000000125, 20, 3, 11, 1},
        {"forward", "phase", 1000000100, 20, 3, 11, 1}, /* same start as its step: after it */
        {"step 3", "step", 1000000000, 90, 3, 10, 0},
        {"loader", "phase", 1000000010, 5, 3, 99, 0}, /* another thread of rank 0 */
        {"step 4", "step", 1000000200, 90, 4, 10, 0},
    };
    const troupe_trace_worker workers[] = {
        {"job7-policy-0", "policy", "na", 0, 0, 0, 0, 120, 3, 0},
        {"job7-policy-1", "policy", "nb", 1, 1, 0, -5000000, 90, 4, 2},
    };
    troupe_trace t = {7, spans, 2, workers};
    char *s = render(&t);

    (void)state;
    TR_ASSERT_CONTAINS(s, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
    TR_ASSERT_CONTAINS(s, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"job7-policy-0 (rank 0: policy 0 on na)\"}}");
    TR_ASSERT_CONTAINS(s, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"sort_index\":1}}");
    /* rank 0 thread 10, rank 0 thread 99, then rank 1 (parent, forward, backward, all-reduce) */
    TR_ASSERT_CONTAINS(s, "{\"name\":\"step 3\",\"cat\":\"step\",\"ph\":\"X\",\"pid\":0,\"tid\":10,\"ts\":0,\"dur\":90,\"args\":{\"step\":3}}");
    TR_ASSERT_CONTAINS(s, "{\"name\":\"step 4\",\"cat\":\"step\",\"ph\":\"X\",\"pid\":0,\"tid\":10,\"ts\":200,\"dur\":90,\"args\":{\"step\":4}}");
    TR_ASSERT_CONTAINS(s, "{\"name\":\"forward\",\"cat\":\"phase\",\"ph\":\"X\",\"pid\":1,\"tid\":11,\"ts\":100,\"dur\":20,\"args\":{\"step\":3}}");
    before(s, "\"pid\":0,\"tid\":10,\"ts\":0,", "\"pid\":0,\"tid\":10,\"ts\":200,");
    before(s, "\"pid\":0,\"tid\":10,\"ts\":200,", "\"name\":\"loader\"");
    before(s, "\"name\":\"loader\"", "\"pid\":1,\"tid\":11,\"ts\":100,\"dur\":100,");
    before(s, "\"pid\":1,\"tid\":11,\"ts\":100,\"dur\":100,", "\"name\":\"forward\"");
    before(s, "\"name\":\"forward\"", "\"name\":\"backward\"");
    before(s, "\"name\":\"backward\"", "\"name\":\"all-reduce\"");
    TR_ASSERT_CONTAINS(s, "\"otherData\":{\"job\":7,\"clock\":\"troupe-head wall clock\",\"origin_unix_us\":1000000000,");
    TR_ASSERT_CONTAINS(s, "{\"worker\":\"job7-policy-1\",\"rank\":1,\"attempt\":0,\"offset_us\":-5000000,\"rtt_us\":90,\"spans\":4,\"dropped\":2}");
    assert_string_equal(s + strlen(s) - 4, "]}}\n"); /* workers, otherData, the document */
    free(s);
}

static void newest_attempt_names_and_escaping(void **state)
{
    const troupe_trace_span spans[] = {
        {"say \"hi\"\n", "phase", 50, 1, 2, 1, 0},
    };
    const troupe_trace_worker workers[] = {
        {"job7-policy-0", "policy", "old-node", 0, 0, 0, 0, 10, 1, 0},
        {"job7-policy-0", "policy", "new-node", 0, 0, 1, 0, 10, 1, 0},
    };
    troupe_trace t = {1, spans, 2, workers};
    char *s = render(&t);

    (void)state;
    TR_ASSERT_CONTAINS(s, "\"args\":{\"name\":\"job7-policy-0 (rank 0: policy 0 on new-node)\"}");
    TR_ASSERT_LACKS(s, "old-node)");
    /* one process_name for pid 0, though two attempts sent spans */
    assert_null(strstr(strstr(s, "\"process_name\"") + 1, "\"process_name\""));
    TR_ASSERT_CONTAINS(s, "{\"name\":\"say \\\"hi\\\"\\n\",\"cat\":\"phase\",\"ph\":\"X\",\"pid\":0,\"tid\":1,\"ts\":0,\"dur\":1,");
    free(s);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sorted_and_nested),
        cmocka_unit_test(newest_attempt_names_and_escaping),
    };
    return TR_TEST_MAIN("unit.cli", tests, argc, argv);
}
