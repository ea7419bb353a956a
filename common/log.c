#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int tr_log_level = TR_LOG_INFO;
static char log_prog[64] = "troupe";

static const char *level_name(int level)
{
    switch (level) {
    case TR_LOG_ERR: return "error";
    case TR_LOG_WARNING: return "warning";
    case TR_LOG_NOTICE: return "notice";
    case TR_LOG_INFO: return "info";
    default: return "debug";
    }
}

void tr_log_init(const char *prog, int level)
{
    snprintf(log_prog, sizeof(log_prog), "%s", prog);
    tr_log_level = level;
}

void tr_log_write(int level, const char *fmt, ...)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    size_t n;
    va_list ap;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof(line) - n, ".%03ldZ %s[%d] %s: ", ts.tv_nsec / 1000000L, log_prog,
                          (int)getpid(), level_name(level));
    va_start(ap, fmt);
    if (n < sizeof(line)) {
        int w = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
        n = (w < 0) ? n : n + (size_t)w;
    }
    va_end(ap);
    if (n > sizeof(line) - 2) {
        n = sizeof(line) - 2;
    }
    line[n++] = '\n';
    /* One write per line so concurrent threads never interleave within a line. */
    if (write(STDERR_FILENO, line, n) < 0) {
        /* Nowhere left to report a failing stderr. */
    }
}

int tr_log_level_parse(const char *s)
{
    static const char *const names[] = {"err", "warning", "notice", "info", "debug"};
    size_t i;

    if (s == NULL) {
        return -1;
    }
    if (s[0] >= '0' && s[0] <= '7' && s[1] == '\0') {
        return s[0] - '0';
    }
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(s, names[i]) == 0) {
            return TR_LOG_ERR + (int)i;
        }
    }
    if (strcmp(s, "error") == 0) {
        return TR_LOG_ERR;
    }
    return -1;
}
