/* procs.c - the processes and temp dirs of bench/e2e.
 *
 * Heads and agents are started with posix_spawn (house rule: no fork() once
 * nng is initialised) and recorded in a small table. Whatever way the bench
 * ends - return from main, exit() after an error, SIGINT/SIGTERM/SIGHUP -
 * every recorded child is SIGKILLed (agents then take their workers with them
 * through PR_SET_PDEATHSIG) and every temp dir is removed, so a failed run
 * leaves nothing behind. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "e2e_bench.h"
#include "util.h"

extern char **environ;

#define MAX_CHILDREN 64
#define MAX_DIRS 32

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static volatile pid_t children[MAX_CHILDREN];
static char dirs[MAX_DIRS][512];
static int n_dirs;

static void remember(pid_t pid)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] == 0) {
            children[i] = pid;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
}

static void forget(pid_t pid)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] == pid) {
            children[i] = 0;
        }
    }
    pthread_mutex_unlock(&mu);
}

/* kill_all is async-signal-safe: it only reads the table and calls kill. */
static void kill_all(void)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        pid_t p = children[i];
        if (p > 0) {
            kill(p, SIGKILL);
        }
    }
}

static void at_exit(void)
{
    kill_all();
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] > 0) {
            waitpid(children[i], NULL, 0);
            children[i] = 0;
        }
    }
    for (int i = 0; i < n_dirs; i++) {
        eb_rmtree(dirs[i]);
    }
    n_dirs = 0;
}

static void on_signal(int sig)
{
    kill_all();
    signal(sig, SIG_DFL);
    raise(sig); /* children are gone; temp dirs stay for a look at their logs */
}

void eb_procs_init(void)
{
    atexit(at_exit);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    signal(SIGPIPE, SIG_IGN);
}

int eb_spawn(char *const argv[], const char *log_path, pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    int rv;

    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    rv = posix_spawn(pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rv != 0) {
        errno = rv;
        return -1;
    }
    remember(*pid);
    return 0;
}

int eb_alive(pid_t pid)
{
    int st;
    if (pid <= 0) {
        return 0;
    }
    if (waitpid(pid, &st, WNOHANG) == pid) {
        forget(pid);
        return 0;
    }
    return 1;
}

void eb_stop(pid_t pid, int grace_ms)
{
    int st;

    if (pid <= 0) {
        return;
    }
    kill(pid, SIGTERM);
    for (int waited = 0; waited < grace_ms; waited += 10) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            forget(pid);
            return;
        }
        tr_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    forget(pid);
}

int eb_free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;

    /* Bind to port 0 and give the port back: a small race, harmless here. */
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
        port = ntohs(a.sin_port);
    }
    if (fd >= 0) {
        close(fd);
    }
    return port;
}

int eb_tmpdir(const char *base, const char *tag, char *out, size_t size)
{
    const char *b = base ? base : getenv("TMPDIR");

    /* /var/tmp, not /tmp: the state store must be on disk for its fsyncs to
     * mean anything, and /tmp is a tmpfs on many machines. */
    snprintf(out, size, "%s/troupe-e2e-%s-XXXXXX", b && b[0] ? b : "/var/tmp", tag);
    if (mkdtemp(out) == NULL) {
        return -1;
    }
    pthread_mutex_lock(&mu);
    if (n_dirs < MAX_DIRS) {
        tr_strlcpy(dirs[n_dirs++], out, sizeof(dirs[0]));
    }
    pthread_mutex_unlock(&mu);
    return 0;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

void eb_rmtree(const char *path)
{
    if (path != NULL && path[0] != '\0') {
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    }
}

double eb_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int eb_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double eb_pct(const double *sorted, size_t n, double p)
{
    size_t i;
    if (n == 0) {
        return 0;
    }
    i = (size_t)(p * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

double eb_proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    unsigned long ut = 0, st = 0;
    FILE *f;
    char *p;

    if (pid == 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
               (double)ru.ru_stime.tv_usec * 1e-6;
    }
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((f = fopen(path, "r")) == NULL) {
        return 0;
    }
    p = fgets(buf, sizeof(buf), f);
    fclose(f);
    /* Fields 14 and 15 (utime, stime) follow the ')' that ends the name. */
    if (p == NULL || (p = strrchr(buf, ')')) == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) {
        return 0;
    }
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

double eb_load1(void)
{
    double l = 0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f != NULL) {
        if (fscanf(f, "%lf", &l) != 1) {
            l = 0;
        }
        fclose(f);
    }
    return l;
}
