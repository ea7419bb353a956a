/* head.c - one troupe-head process for a measurement.
 *
 * Each head gets a fresh state dir on disk, so its SQLite store starts empty
 * and its fsyncs hit a real disk. With `sim` the liveness settings keep nodes
 * ALIVE although their (simulated) agents never heartbeat: a heartbeat period
 * of 60 s and SUSPECT/DEAD after 50/100 of them is far beyond any run. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "e2e_bench.h"
#include "util.h"

/* wait_ready pings the head until it answers, it exits, or 10 s pass. */
static int wait_ready(eb_head *h, char *why, size_t why_size)
{
    troupe_client_opts co = {.head_url = h->url, .timeout_ms = 1000};
    int64_t until = tr_now_ms() + 10000;

    while (tr_now_ms() < until) {
        troupe_client *c = NULL;
        troupe_error e;
        int ok = troupe_client_open(&c, &co, &e) == TROUPE_OK && troupe_ping(c, "x", 1, &e) == TROUPE_OK;
        troupe_client_close(c);
        if (ok) {
            return 0;
        }
        if (!eb_alive(h->pid)) {
            snprintf(why, why_size, "troupe-head exited at start-up (see %s)", h->log);
            h->pid = 0;
            return -1;
        }
        tr_sleep_ms(20);
    }
    snprintf(why, why_size, "troupe-head did not answer on %s within 10 s (see %s)", h->url, h->log);
    return -1;
}

int eb_head_start(const eb_head_opts *o, eb_head *h, char *why, size_t why_size)
{
    char *argv[24];
    int a = 0;

    memset(h, 0, sizeof(*h));
    if (eb_tmpdir(o->tmp_base, "head", h->dir, sizeof(h->dir)) != 0 || (h->port = eb_free_port()) == 0) {
        snprintf(why, why_size, "cannot make a state dir or find a port: %s", strerror(errno));
        return -1;
    }
    snprintf(h->url, sizeof(h->url), "tcp://127.0.0.1:%d", h->port);
    snprintf(h->log, sizeof(h->log), "%s/head.log", h->dir);
    argv[a++] = (char *)o->bin;
    argv[a++] = "--listen";
    argv[a++] = h->url;
    argv[a++] = "--state-dir";
    argv[a++] = h->dir;
    argv[a++] = "--sync-full";
    argv[a++] = o->sync_full ? "true" : "false";
    argv[a++] = "--log-level";
    argv[a++] = (char *)o->log_level;
    if (o->sim) {
        argv[a++] = "--heartbeat-ms";
        argv[a++] = "60000";
        argv[a++] = "--suspect-after";
        argv[a++] = "50";
        argv[a++] = "--dead-after";
        argv[a++] = "100";
    }
    argv[a] = NULL;
    if (eb_spawn(argv, h->log, &h->pid) != 0) {
        snprintf(why, why_size, "cannot start %s: %s", o->bin, strerror(errno));
        return -1;
    }
    return wait_ready(h, why, why_size);
}

void eb_head_stop(eb_head *h)
{
    eb_stop(h->pid, 5000);
    h->pid = 0;
    eb_rmtree(h->dir);
}

void eb_head_tail(const eb_head *h, int lines)
{
    char buf[8192];
    FILE *f = fopen(h->log, "r");
    long size, from;
    size_t n;
    char *p;

    if (f == NULL) {
        return;
    }
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    from = size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0;
    fseek(f, from, SEEK_SET);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = buf + n;
    for (int seen = 0; p > buf; p--) {
        if (p[-1] == '\n' && p != buf + n && ++seen > lines) {
            break;
        }
    }
    fprintf(stderr, "---- last lines of the head's log (%s) ----\n%s", h->log, p);
}
