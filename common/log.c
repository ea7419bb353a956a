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

/* escape_message formats the message into out and escapes control bytes
 * (\n as "\\n", others as "\\xNN"): text from clients (a job name with a
 * newline) can then never forge a line of its own. Returns the length. */
static size_t escape_message(char *out, size_t size, const char *fmt, va_list ap)
{
    char raw[2048];
    size_t k = 0;
    int w = vsnprintf(raw, sizeof(raw), fmt, ap);
    size_t len = w < 0 ? 0 : ((size_t)w < sizeof(raw) ? (size_t)w : sizeof(raw) - 1);

    for (size_t i = 0; i < len && k + 5 < size; i++) {
        unsigned char c = (unsigned char)raw[i];
        if (c == '\n') {
            out[k++] = '\\';
            out[k++] = 'n';
        } else if (c < 0x20 || c == 0x7f) {
            k += (size_t)snprintf(out + k, size - k, "\\x%02x", c);
        } else {
            out[k++] = (char)c;
        }
    }
    out[k] = '\0';
    return k;
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
        n += escape_message(line + n, sizeof(line) - n, fmt, ap);
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
