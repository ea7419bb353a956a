/* mx_worker - a worker program on troupe/worker.h for the metrics tests.
 *
 * Reports $MX_POINTS points (default 10000) cycling over the names in
 * $MX_NAMES (default "loss,tok_s"), one every $MX_EVERY_US microseconds (0:
 * as fast as it can); point i has step i/names+1 and value RANK*1e6+i, so a
 * test can check order and completeness. $MX_SPECIAL=1 first reports NaN,
 * +inf and -inf as "odd". The first point it has to drop (its buffer full)
 * prints "mx: buffer full, dropping from point N". Then it flushes (up to 60 s) and prints
 *   mx: reported=R acked=A dropped=D buffered=B flush=CODE [message]
 * and exits 0 when the flush succeeded. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "troupe/worker.h"

static long env_l(const char *k, long dflt)
{
    const char *v = getenv(k);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

int main(void)
{
    troupe_worker_opts opts = {0};
    troupe_worker_ctx *w = NULL;
    troupe_metrics_stats st;
    troupe_error err;
    char names_buf[512], *names[16];
    size_t n_names = 0;
    long points = env_l("MX_POINTS", 10000), every_us = env_l("MX_EVERY_US", 0), rank = env_l("RANK", 0);
    troupe_status rv;

    snprintf(names_buf, sizeof(names_buf), "%s", getenv("MX_NAMES") ? getenv("MX_NAMES") : "loss,tok_s");
    for (char *save = NULL, *t = strtok_r(names_buf, ",", &save); t && n_names < 16; t = strtok_r(NULL, ",", &save)) {
        names[n_names++] = t;
    }
    opts.no_control = 1;
    if ((rv = troupe_worker_open(&w, &opts, &err)) != TROUPE_OK) {
        printf("mx: open %s %s\n", troupe_strerror(rv), err.message);
        return 2;
    }
    if (env_l("MX_SPECIAL", 0)) {
        troupe_worker_metric(w, 0, "odd", NAN);
        troupe_worker_metric(w, 0, "odd", INFINITY);
        troupe_worker_metric(w, 0, "odd", -INFINITY);
    }
    if (troupe_worker_metric(w, 0, "bad name", 1.0) != TROUPE_INVALID_ARGUMENT) {
        printf("mx: a name with a space was accepted\n");
        return 2;
    }
    for (long i = 0, said = 0; i < points; i++) {
        if (troupe_worker_metric(w, (uint64_t)(i / (long)n_names + 1), names[i % (long)n_names],
                                 rank * 1e6 + (double)i) == TROUPE_RESOURCE_EXHAUSTED &&
            !said) {
            printf("mx: buffer full, dropping from point %ld\n", i + 1); /* what a test can wait for */
            fflush(stdout);
            said = 1;
        }
        if (every_us > 0) {
            struct timespec ts = {every_us / 1000000, (every_us % 1000000) * 1000L};
            nanosleep(&ts, NULL);
        }
    }
    rv = troupe_worker_metrics_flush(w, 60000, &err);
    troupe_worker_metrics_stats(w, &st);
    printf("mx: reported=%llu acked=%llu dropped=%llu buffered=%llu flush=%s %s\n", (unsigned long long)st.reported,
           (unsigned long long)st.acked, (unsigned long long)st.dropped, (unsigned long long)st.buffered,
           troupe_strerror(rv), rv == TROUPE_OK ? "" : err.message);
    fflush(stdout);
    troupe_worker_close(w);
    return rv == TROUPE_OK ? 0 : 1;
}
