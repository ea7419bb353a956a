/* nccl_wait.c - the deadline loop of the NCCL helper (see nccl_wait.h). */
#include "nccl_wait.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define FIRST_PAUSE_MS 1
#define MAX_PAUSE_MS 20

uint64_t tr_nccl_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t now(const tr_nccl_clock *clk)
{
    return clk != NULL && clk->now_ms != NULL ? clk->now_ms(clk->user) : tr_nccl_now_ms();
}

static void pause_for(const tr_nccl_clock *clk, uint32_t ms)
{
    if (clk != NULL && clk->sleep_ms != NULL) {
        clk->sleep_ms(clk->user, ms);
        return;
    }
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

troupe_status tr_nccl_err(troupe_error *err, troupe_status code, const char *fmt, ...)
{
    va_list ap;
    if (err != NULL) {
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
    }
    return code;
}

troupe_status tr_nccl_wait(const tr_nccl_clock *clk, tr_nccl_poll_fn poll, void *user, uint64_t deadline_ms,
                           const char *what, troupe_error *err)
{
    uint64_t start = now(clk);
    uint32_t pause = FIRST_PAUSE_MS;
    char why[256];

    for (;;) {
        why[0] = '\0';
        int r = poll(user, why, sizeof(why));
        if (r > 0) {
            return TROUPE_OK;
        }
        if (r < 0) {
            return tr_nccl_err(err, TROUPE_UNAVAILABLE, "%s failed: %s", what,
                               why[0] ? why : "no reason given");
        }
        uint64_t t = now(clk);
        if (t >= deadline_ms) {
            return tr_nccl_err(err, TROUPE_DEADLINE_EXCEEDED, "%s still in progress after %llu ms", what,
                               (unsigned long long)(t - start));
        }
        pause_for(clk, (uint32_t)(deadline_ms - t < pause ? deadline_ms - t : pause));
        pause = pause * 2 > MAX_PAUSE_MS ? MAX_PAUSE_MS : pause * 2;
    }
}
