/* jobspec_health.c - the rules of a job's `health:` settings,
 * shared by the YAML walk (jobspec.c, which points at the offending key) and
 * tr_jobspec_validate (a SubmitJob from any client). 0 means "the head's
 * default" for every number; the head checks the merged thresholds again
 * (server/health_judge.c) with the same bounds. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec_int.h"

#define WEEK_MS (7LL * 24 * 3600 * 1000)

int tr_js_duration_parse(const char *s, int64_t *ms, tr_err *err)
{
    static const struct {
        const char *unit;
        double ms;
    } units[] = {{"ms", 1.0}, {"s", 1000.0}, {"m", 60000.0}, {"h", 3600000.0}, {"", 1000.0}};
    char *end = NULL;
    double v;

    *ms = 0;
    errno = 0;
    v = s != NULL ? strtod(s, &end) : NAN;
    if (s == NULL || end == s || errno == ERANGE || !isfinite(v) || v < 0.0 || s[0] == '-' || s[0] == '+') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "'%s' is not a duration (expected e.g. 30s, 500ms, 2m, 1h, or seconds as a number)",
                          s ? s : "");
    }
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(end, units[i].unit) == 0) {
            double total = v * units[i].ms;
            if (total > (double)WEEK_MS) {
                return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "'%s' is longer than 7 days", s);
            }
            *ms = (int64_t)llround(total);
            return TROUPE_OK;
        }
    }
    return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "'%s': unknown unit '%s' (ms, s, m or h)", s, end);
}

int tr_js_health_check(const Troupe__V1__HealthSpec *h, const char **bad_key, tr_err *err)
{
    *bad_key = NULL;
    if (h == NULL) {
        return TROUPE_OK;
    }
    if (h->stall_after_ms != 0 && (h->stall_after_ms < 100 || h->stall_after_ms > WEEK_MS)) {
        *bad_key = "stall_after";
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "health.stall_after: %u ms is out of bounds (100 ms to 7 days, or auto)", h->stall_after_ms);
    }
    if (h->straggler_factor != 0.0 && !(h->straggler_factor > 1.0 && h->straggler_factor <= 100.0)) {
        *bad_key = "straggler_factor";
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "health.straggler_factor: %g is out of bounds (above 1, at most 100: how many times "
                          "its group's median step time makes a rank a straggler)",
                          h->straggler_factor);
    }
    if (h->straggler_window != 0 && (h->straggler_window < 2 || h->straggler_window > TR_JS_MAX_HEALTH_WINDOW)) {
        *bad_key = "straggler_window";
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "health.straggler_window: %u steps is out of bounds (2 to %d)",
                          h->straggler_window, TR_JS_MAX_HEALTH_WINDOW);
    }
    if (h->memory_window != 0 && (h->memory_window < 2 || h->memory_window > TR_JS_MAX_HEALTH_WINDOW)) {
        *bad_key = "memory_window";
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "health.memory_window: %u steps is out of bounds (2 to %d)",
                          h->memory_window, TR_JS_MAX_HEALTH_WINDOW);
    }
    if (h->memory_slope_mb != 0.0 && !(h->memory_slope_mb > 0.0 && h->memory_slope_mb <= 1e6)) {
        *bad_key = "memory_slope_mb";
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "health.memory_slope_mb: %g is out of bounds (above 0, at most 1000000 MiB per step)",
                          h->memory_slope_mb);
    }
    if (h->memory_near != 0.0 && !(h->memory_near > 0.0 && h->memory_near <= 1.0)) {
        *bad_key = "memory_near";
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "health.memory_near: %g is out of bounds (a fraction of the GPU's memory, above 0 and "
                          "at most 1)",
                          h->memory_near);
    }
    return TROUPE_OK;
}
