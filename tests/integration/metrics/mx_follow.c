/* mx_follow - one GetMetrics long poll through libtroupe, timed, for the
 * metrics tests: `mx_follow JOB AFTER_ID WAIT_MS` asks for the job's points
 * after AFTER_ID with wait_ms = WAIT_MS (head from $TROUPE_HEAD) and prints
 *   follow: points=N next=ID elapsed_ms=E
 * or `follow: error CODE message`; exits 0 when the call succeeded. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "troupe/client.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    troupe_client *c = NULL;
    troupe_metrics_page *pg = NULL;
    troupe_error err;
    troupe_metrics_query q = {0};
    double t0;
    troupe_status rv;

    if (argc != 4) {
        fprintf(stderr, "usage: mx_follow JOB AFTER_ID WAIT_MS\n");
        return 2;
    }
    if ((rv = troupe_client_open(&c, NULL, &err)) != TROUPE_OK) {
        printf("follow: error %s %s\n", troupe_strerror(rv), err.message);
        return 1;
    }
    q.after_id = strtoull(argv[2], NULL, 10);
    q.wait_ms = (uint32_t)strtoul(argv[3], NULL, 10);
    t0 = now_ms();
    rv = troupe_get_metrics(c, strtoull(argv[1], NULL, 10), &q, &pg, &err);
    if (rv != TROUPE_OK) {
        printf("follow: error %s %s\n", troupe_strerror(rv), err.message);
    } else {
        printf("follow: points=%zu next=%llu elapsed_ms=%.0f\n", pg->n_points, (unsigned long long)pg->next_id,
               now_ms() - t0);
    }
    troupe_metrics_page_free(pg);
    troupe_client_close(c);
    return rv == TROUPE_OK ? 0 : 1;
}
