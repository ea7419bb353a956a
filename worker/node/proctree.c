/* proctree.c - see proctree.h. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proctree.h"

typedef struct proc_ent {
    pid_t pid, ppid;
    char state;
} proc_ent;

/* read_stat parses /proc/PID/stat: "pid (comm) S ppid ..."; comm may hold
 * spaces and parentheses, so the state follows the last ')'. */
static int read_stat(pid_t pid, proc_ent *e)
{
    char path[64], buf[512];
    FILE *f;
    size_t n;
    char *rp;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((f = fopen(path, "r")) == NULL) {
        return -1;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    if ((rp = strrchr(buf, ')')) == NULL) {
        return -1;
    }
    e->pid = pid;
    return sscanf(rp + 1, " %c %d", &e->state, &e->ppid) == 2 ? 0 : -1;
}

/* scan lists every process on the machine (malloc'ed; *n entries). */
static proc_ent *scan(size_t *n)
{
    DIR *d = opendir("/proc");
    proc_ent *v = NULL;
    size_t cap = 0;
    struct dirent *de;

    *n = 0;
    if (d == NULL) {
        return NULL;
    }
    while ((de = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end != '\0' || pid <= 0) {
            continue;
        }
        if (*n == cap) {
            size_t nc = cap ? cap * 2 : 256;
            proc_ent *p = realloc(v, nc * sizeof(*p));
            if (p == NULL) {
                break;
            }
            v = p;
            cap = nc;
        }
        if (read_stat((pid_t)pid, &v[*n]) == 0) {
            (*n)++;
        }
    }
    closedir(d);
    return v;
}

/* descendants marks (in mark[]) every process below root; returns the count
 * of live ones. Parents may be listed after their children, so it sweeps
 * until nothing new is marked. */
static size_t descendants(const proc_ent *v, size_t n, pid_t root, unsigned char *mark)
{
    size_t live = 0;
    int grew = 1;

    while (grew) {
        grew = 0;
        for (size_t i = 0; i < n; i++) {
            if (mark[i] || v[i].pid == root) {
                continue;
            }
            int under = v[i].ppid == root;
            for (size_t k = 0; !under && k < n; k++) {
                under = mark[k] && v[k].pid == v[i].ppid;
            }
            if (under) {
                mark[i] = 1;
                grew = 1;
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        live += mark[i] && v[i].state != 'Z' && v[i].state != 'X';
    }
    return live;
}

static int signal_once(pid_t root, int sig)
{
    size_t n = 0, live;
    proc_ent *v = scan(&n);
    unsigned char *mark = calloc(n ? n : 1, 1);
    int sent = 0;

    if (v == NULL || mark == NULL) {
        free(v);
        free(mark);
        return 0;
    }
    live = descendants(v, n, root, mark);
    for (size_t i = 0; live > 0 && i < n; i++) {
        if (mark[i] && v[i].state != 'Z' && v[i].state != 'X' && kill(v[i].pid, sig) == 0) {
            sent++;
        }
    }
    free(v);
    free(mark);
    return sent;
}

int tr_proctree_signal(pid_t root, int sig)
{
    int sent = signal_once(root, sig);

    for (int round = 0; sig == SIGKILL && sent > 0 && round < 8; round++) {
        sent = signal_once(root, sig);
    }
    return sent;
}

/* tr_proctree_stopped reads root's children from /proc/ROOT/task/ROOT/children
 * (the shim is single-threaded, so that lists them all); it runs for every
 * worker on every report, where a scan of /proc would cost too much. */
int tr_proctree_stopped(pid_t root)
{
    char path[64], buf[1024];
    FILE *f;
    size_t n;
    int stopped = 0;

    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)root, (int)root);
    if ((f = fopen(path, "r")) == NULL) {
        return 0;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    for (char *save = NULL, *tok = strtok_r(buf, " \n", &save); tok != NULL; tok = strtok_r(NULL, " \n", &save)) {
        proc_ent e;
        if (read_stat((pid_t)atoi(tok), &e) == 0 && (e.state == 'T' || e.state == 't')) {
            stopped = 1;
        }
    }
    return stopped;
}
