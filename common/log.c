#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int tr_log_level = TR_LOG_INFO;
static char log_prog[64] = "troupe";

/* The writer (tr_log_async_start): lines are formatted by the thread that
 * logs, often under its owner's lock, and copied into this ring; one thread
 * writes them to stderr, so a slow or blocked stderr (a pipe nobody drains
 * fast enough, a full disk under a redirect) never stalls a lock holder. The
 * ring holds whole lines in order. A line that finds it full waits up to
 * ROOM_WAIT_MS for room, then is dropped and counted; the writer says so. */
#define RING_BYTES (1u << 20)
#define ROOM_WAIT_MS 1000
static struct {
    pthread_mutex_t mu;
    pthread_cond_t more, room;
    char *buf;
    size_t head, len; /* unwritten bytes start at head (mod RING_BYTES) */
    size_t writing;   /* bytes from head the writer is writing now */
    unsigned long long put, written; /* bytes ever copied in / written out */
    int on, stop;
    unsigned long long dropped;
    pthread_t th;
} ring = {.mu = PTHREAD_MUTEX_INITIALIZER, .more = PTHREAD_COND_INITIALIZER, .room = PTHREAD_COND_INITIALIZER};

/* The end of this thread's latest line in the ring's byte count, until
 * tr_log_flush_mine has seen it written; 0: nothing of it is pending. */
static __thread unsigned long long mine;

static void write_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, p, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return; /* nowhere left to report a failing stderr */
        }
        p += w;
        n -= (size_t)w;
    }
}

static void write_direct(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void *writer_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&ring.mu);
    for (;;) {
        while (ring.len == 0 && ring.dropped == 0 && !ring.stop) {
            pthread_cond_wait(&ring.more, &ring.mu);
        }
        if (ring.len == 0 && ring.dropped == 0) {
            break; /* stop, and everything is written */
        }
        if (ring.len > 0) {
            /* The bytes up to the ring's end, unlocked: producers only fill
             * free space, so these stay put until head moves past them. */
            size_t n = ring.len < RING_BYTES - ring.head ? ring.len : RING_BYTES - ring.head;
            ring.writing = n;
            pthread_mutex_unlock(&ring.mu);
            write_all(ring.buf + ring.head, n);
            pthread_mutex_lock(&ring.mu);
            ring.head = (ring.head + n) % RING_BYTES;
            ring.len -= n;
            ring.written += n;
            ring.writing = 0;
            pthread_cond_broadcast(&ring.room);
        } else {
            unsigned long long dropped = ring.dropped;
            ring.dropped = 0;
            pthread_mutex_unlock(&ring.mu);
            write_direct(TR_LOG_WARNING, "log: %llu lines dropped: stderr took none for %d ms", dropped,
                         ROOM_WAIT_MS);
            pthread_mutex_lock(&ring.mu);
        }
    }
    pthread_mutex_unlock(&ring.mu);
    return NULL;
}

int tr_log_async_start(void)
{
    int rv = 0;

    pthread_mutex_lock(&ring.mu);
    if (!ring.on) {
        ring.buf = malloc(RING_BYTES);
        ring.stop = 0;
        if (ring.buf == NULL || pthread_create(&ring.th, NULL, writer_main, NULL) != 0) {
            free(ring.buf);
            ring.buf = NULL;
            rv = -1;
        } else {
            ring.on = 1;
        }
    }
    pthread_mutex_unlock(&ring.mu);
    return rv;
}

/* deadline_in: the CLOCK_REALTIME time ms from now, for a timed wait. */
static void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

void tr_log_flush(int timeout_ms)
{
    struct timespec ts;

    deadline_in(&ts, timeout_ms);
    pthread_mutex_lock(&ring.mu);
    while (ring.on && ring.len > 0) {
        if (pthread_cond_timedwait(&ring.room, &ring.mu, &ts) == ETIMEDOUT) {
            break;
        }
    }
    pthread_mutex_unlock(&ring.mu);
}

void tr_log_flush_mine(int timeout_ms)
{
    struct timespec ts;

    if (mine == 0) {
        return;
    }
    deadline_in(&ts, timeout_ms);
    pthread_mutex_lock(&ring.mu);
    while (ring.on && ring.written < mine) {
        if (pthread_cond_timedwait(&ring.room, &ring.mu, &ts) == ETIMEDOUT) {
            break;
        }
    }
    pthread_mutex_unlock(&ring.mu);
    mine = 0;
}

void tr_log_async_stop(void)
{
    pthread_mutex_lock(&ring.mu);
    if (!ring.on) {
        pthread_mutex_unlock(&ring.mu);
        return;
    }
    ring.stop = 1;
    pthread_cond_signal(&ring.more);
    pthread_mutex_unlock(&ring.mu);
    pthread_join(ring.th, NULL);
    pthread_mutex_lock(&ring.mu);
    ring.on = 0;
    free(ring.buf);
    ring.buf = NULL;
    ring.head = ring.len = 0;
    pthread_mutex_unlock(&ring.mu);
}

/* ring_put copies one line into the ring; 0 when the writer is not on. */
static int ring_put(const char *line, size_t n)
{
    struct timespec ts;
    int waited = 0;

    pthread_mutex_lock(&ring.mu);
    if (!ring.on || ring.stop) {
        pthread_mutex_unlock(&ring.mu);
        return 0;
    }
    while (RING_BYTES - ring.len < n) {
        if (!waited) {
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += ROOM_WAIT_MS / 1000;
            waited = 1;
        }
        if (pthread_cond_timedwait(&ring.room, &ring.mu, &ts) == ETIMEDOUT) {
            ring.dropped++;
            pthread_cond_signal(&ring.more);
            pthread_mutex_unlock(&ring.mu);
            return 1;
        }
    }
    size_t tail = (ring.head + ring.len) % RING_BYTES, first = n < RING_BYTES - tail ? n : RING_BYTES - tail;
    memcpy(ring.buf + tail, line, first);
    memcpy(ring.buf, line + first, n - first);
    ring.len += n;
    ring.put += n;
    mine = ring.put;
    pthread_cond_signal(&ring.more);
    pthread_mutex_unlock(&ring.mu);
    return 1;
}

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

/* format_line writes one line (with its newline) into line; its length. */
static size_t format_line(char *line, size_t size, int level, const char *fmt, va_list ap)
{
    struct timespec ts;
    struct tm tm;
    size_t n;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, size, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, size - n, ".%03ldZ %s[%d] %s: ", ts.tv_nsec / 1000000L, log_prog,
                          (int)getpid(), level_name(level));
    if (n < size) {
        n += escape_message(line + n, size - n, fmt, ap);
    }
    if (n > size - 2) {
        n = size - 2;
    }
    line[n++] = '\n';
    return n;
}

/* write_direct formats and writes one line itself (the ring's writer). */
static void write_direct(int level, const char *fmt, ...)
{
    char line[512];
    size_t n;
    va_list ap;

    va_start(ap, fmt);
    n = format_line(line, sizeof(line), level, fmt, ap);
    va_end(ap);
    write_all(line, n);
}

void tr_log_write(int level, const char *fmt, ...)
{
    char line[2048];
    size_t n;
    va_list ap;

    va_start(ap, fmt);
    n = format_line(line, sizeof(line), level, fmt, ap);
    va_end(ap);
    if (ring_put(line, n)) {
        return;
    }
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
