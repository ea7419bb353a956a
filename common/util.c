#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int64_t tr_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t tr_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void tr_abstime_in(struct timespec *ts, int64_t ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

void tr_sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int tr_ct_equal(const char *given, const char *expected)
{
    size_t n = strlen(expected);
    size_t g = strlen(given);
    unsigned char diff = (unsigned char)(g != n);

    /* Walk the expected length every time; read `given` only within bounds. */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (i < g) ? (unsigned char)given[i] : 0;
        diff |= (unsigned char)(c ^ (unsigned char)expected[i]);
    }
    return diff == 0;
}

size_t tr_strlcpy(char *dst, const char *src, size_t size)
{
    size_t n = strlen(src);
    if (size > 0) {
        size_t c = (n >= size) ? size - 1 : n;
        memcpy(dst, src, c);
        dst[c] = '\0';
    }
    return n;
}

int tr_mkdir_p(const char *path)
{
    char buf[4096];
    size_t n = tr_strlcpy(buf, path, sizeof(buf));

    if (n >= sizeof(buf)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p != '\0'; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
                return -1;
            }
            *p = '/';
        }
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
        return -1;
    }
    /* EEXIST also covers a plain file of that name, which is no directory. */
    struct stat st;
    if (stat(buf, &st) != 0) {
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* A bounded run: the runner and the caller each hold a reference; the last
 * one out frees it. */
typedef struct bounded {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void (*fn)(void *);
    void *arg;
    int done, refs;
} bounded;

static void bounded_drop(bounded *b)
{
    int last;

    pthread_mutex_lock(&b->mu);
    last = --b->refs == 0;
    pthread_mutex_unlock(&b->mu);
    if (last) {
        pthread_cond_destroy(&b->cv);
        pthread_mutex_destroy(&b->mu);
        free(b);
    }
}

static void *bounded_main(void *arg)
{
    bounded *b = arg;

    b->fn(b->arg);
    pthread_mutex_lock(&b->mu);
    b->done = 1;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    bounded_drop(b);
    return NULL;
}

int tr_run_bounded(void (*fn)(void *), void *arg, int64_t ms)
{
    bounded *b = calloc(1, sizeof(*b));
    int64_t deadline = tr_now_ms() + ms;
    pthread_attr_t attr;
    pthread_t t;
    int rv, done;

    if (b == NULL || pthread_attr_init(&attr) != 0) {
        free(b);
        return -1;
    }
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->fn = fn;
    b->arg = arg;
    b->refs = 2;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rv = pthread_create(&t, &attr, bounded_main, b);
    pthread_attr_destroy(&attr);
    if (rv != 0) {
        pthread_cond_destroy(&b->cv);
        pthread_mutex_destroy(&b->mu);
        free(b);
        return -1;
    }
    pthread_mutex_lock(&b->mu);
    while (!b->done && tr_now_ms() < deadline) {
        struct timespec ts;
        tr_abstime_in(&ts, deadline - tr_now_ms());
        pthread_cond_timedwait(&b->cv, &b->mu, &ts);
    }
    done = b->done;
    pthread_mutex_unlock(&b->mu);
    bounded_drop(b);
    return done;
}
