/* preauth_bench.c - the pre-authentication attack, measured.
 *
 * Opens N TCP connections to a head that never show a credential: each
 * completes nng's SP handshake as a REQ peer and then either sends the
 * header of a FRAME-byte frame and all of its body but the last byte
 * (--mode frames: the head allocates the frame and waits for the rest),
 * sends nothing more (--mode idle), or sends one whole Ping without a
 * credential and then nothing (--mode ping: against a head without
 * credentials that is a connection that has made a call). --mode burst is
 * the legitimate side instead: all N connections complete the handshake
 * first (ranks of a rendezvous opening at once), then each sends one Ping
 * (with the credential of --token-file, if given) and waits for its reply; the head
 * should answer every one and close none. With --raw the SP handshake is skipped
 * too (a bare TCP connection). While the connections are held it samples the
 * head's RSS (/proc/PID/status) and times `troupe status` the way the CLI
 * does it: a fresh connection, GetCluster, close.
 *
 * Prints a table and, with --json, writes one JSON object. Exit status 0 when
 * every measurement was taken (the bounds are the caller's to judge). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rpc.h"
#include "util.h"

typedef struct conn {
    int fd;
    size_t sent, total; /* bytes of handshake + frame to send */
    int closed;         /* the head closed it (or refused it) */
    size_t got;         /* bytes received (--mode burst) */
} conn;

typedef struct opts {
    const char *url, *token_file, *json, *label, *mode;
    long pid;
    int conns, samples, raw, hold_ms, after_ms;
    size_t frame;
} opts;

/* The Ping frame of --mode ping: SP header (8-byte length, REQ request id)
 * and the envelope. */
static uint8_t *ping_frame;
static size_t ping_len;

typedef struct result {
    long rss_before_kb, rss_peak_kb, rss_after_kb;
    int opened, connect_failed, closed_by_head, still_open;
    int handshaken, replied; /* --mode burst: handshakes the head answered, Pings it answered */
    size_t bytes_sent;
    double p50, p99, max;
    int status_ok, status_failed;
    char first_error[640];
    double attack_s;
} result;

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static long rss_kb(long pid);

/* The sampler reads the head's RSS every 20 ms for the peak. */
static atomic_long peak_kb;
static atomic_int sampling = 1;
static void *sampler(void *arg)
{
    long pid = *(long *)arg;
    while (atomic_load(&sampling)) {
        long kb = rss_kb(pid);
        if (kb > atomic_load(&peak_kb)) {
            atomic_store(&peak_kb, kb);
        }
        usleep(20000);
    }
    return NULL;
}

static long rss_kb(long pid)
{
    char path[64], line[256];
    long kb = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%ld/status", pid);
    if ((f = fopen(path, "r")) == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kb = strtol(line + 6, NULL, 10);
        }
    }
    fclose(f);
    return kb;
}

static int parse_tcp(const char *url, struct sockaddr_in *sa)
{
    char host[64];
    const char *p = strncmp(url, "tcp://", 6) == 0 ? url + 6 : NULL;
    const char *colon = p ? strrchr(p, ':') : NULL;

    if (p == NULL || colon == NULL || (size_t)(colon - p) >= sizeof(host)) {
        return -1;
    }
    memcpy(host, p, (size_t)(colon - p));
    host[colon - p] = '\0';
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)atoi(colon + 1));
    return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

/* conn_bytes: the bytes at offset off of what c sends (handshake, header, body). */
static size_t conn_bytes(const opts *o, const conn *c, uint8_t *buf, size_t cap)
{
    static const uint8_t sp[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0}; /* SP v0, REQ (0x30) */
    size_t off = c->sent, n = 0;

    while (n < cap && off + n < c->total) {
        size_t at = off + n;
        if (at >= 8 && ping_frame != NULL) {
            buf[n] = ping_frame[at - 8];
        } else if (at < 8) {
            buf[n] = sp[at];
        } else if (at < 16) {
            buf[n] = (uint8_t)((uint64_t)o->frame >> (8 * (15 - at)));
        } else {
            buf[n] = 'A';
        }
        n++;
    }
    return n;
}

/* pump sends what each connection still has to send and notices closes,
 * until everything is sent or closed, or deadline. */
static void pump(const opts *o, conn *cs, int n, int64_t deadline, result *r)
{
    static uint8_t buf[65536];
    struct pollfd *pf = calloc((size_t)n, sizeof(*pf));

    for (;;) {
        int waiting = 0;
        for (int i = 0; i < n; i++) {
            pf[i].fd = (cs[i].closed || cs[i].fd < 0) ? -1 : cs[i].fd;
            pf[i].events = cs[i].sent < cs[i].total ? POLLOUT : 0;
            waiting += (pf[i].fd >= 0 && cs[i].sent < cs[i].total);
        }
        if (waiting == 0 || tr_now_ms() >= deadline) {
            break;
        }
        if (poll(pf, (nfds_t)n, 100) < 0) {
            break;
        }
        for (int i = 0; i < n; i++) {
            if (pf[i].fd < 0 || pf[i].revents == 0) {
                continue;
            }
            if (pf[i].revents & (POLLHUP | POLLERR)) {
                cs[i].closed = 1;
                continue;
            }
            if (pf[i].revents & POLLOUT) {
                size_t len = conn_bytes(o, &cs[i], buf, sizeof(buf));
                ssize_t w = send(cs[i].fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w > 0) {
                    cs[i].sent += (size_t)w;
                    r->bytes_sent += (size_t)w;
                } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                    cs[i].closed = 1;
                }
            }
        }
    }
    free(pf);
}

/* count_closed marks connections the head has closed (EOF or reset). */
static void count_closed(conn *cs, int n, result *r)
{
    char b[64];

    r->closed_by_head = 0;
    r->still_open = 0;
    for (int i = 0; i < n; i++) {
        while (cs[i].fd >= 0 && !cs[i].closed) { /* past the head's SP handshake, to EOF or EAGAIN */
            ssize_t k = recv(cs[i].fd, b, sizeof(b), MSG_DONTWAIT);
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                cs[i].closed = 1;
            }
            if (k < 0) {
                break;
            }
        }
        if (cs[i].fd >= 0) {
            r->closed_by_head += cs[i].closed;
            r->still_open += !cs[i].closed;
        }
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* status_latency times `troupe status` (fresh connection, GetCluster). */
static void status_latency(const opts *o, const char *token, result *r)
{
    double *ms = calloc((size_t)o->samples, sizeof(double));
    int n = 0;
    int64_t stop = now_us() + 60 * 1000000LL; /* a head that never answers costs a minute, not hours */

    for (int i = 0; i < o->samples && now_us() < stop; i++) {
        tr_rpc_client_opts co = {.url = o->url, .token = token};
        tr_rpc_client *c = NULL;
        uint8_t *rep = NULL;
        size_t rep_len = 0;
        tr_err err = {0};
        int64_t t0 = now_us();
        int rv = tr_rpc_client_open(&co, &c, &err);
        if (rv == TROUPE_OK) {
            rv = tr_rpc_client_call_raw(c, "troupe.v1.Head/GetCluster", NULL, 0, &rep, &rep_len, 5000, 0, &err);
        }
        tr_rpc_client_close(c);
        free(rep);
        if (rv == TROUPE_OK) {
            ms[n++] = (double)(now_us() - t0) / 1000.0;
            r->status_ok++;
        } else {
            r->status_failed++;
            if (r->first_error[0] == '\0') {
                snprintf(r->first_error, sizeof(r->first_error), "%s: %s", troupe_strerror(rv), err.msg);
            }
        }
        usleep(20000);
    }
    qsort(ms, (size_t)n, sizeof(double), cmp_double);
    if (n > 0) {
        r->p50 = ms[n / 2];
        r->p99 = ms[(size_t)((n - 1) * 0.99)];
        r->max = ms[n - 1];
    }
    free(ms);
}

static int open_conns(const opts *o, const struct sockaddr_in *sa, conn *cs, result *r)
{
    for (int i = 0; i < o->conns; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cs[i].fd = -1;
        if (fd < 0) {
            fprintf(stderr, "preauth: socket: %s (raise ulimit -n)\n", strerror(errno));
            return -1;
        }
        if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) != 0) {
            r->connect_failed++;
            close(fd);
            continue;
        }
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        cs[i].fd = fd;
        cs[i].total = o->raw                             ? 0
                      : strcmp(o->mode, "frames") == 0 ? 16 + o->frame - 1
                      : strcmp(o->mode, "ping") == 0   ? 8 + ping_len
                                                       : 8;
        r->opened++;
    }
    return 0;
}

static void print(const opts *o, const result *r)
{
    printf("%-8s %-6s %5s %9s %8s %8s %8s %9s %9s %9s %9s %9s %5s\n", "label", "mode", "conns", "frame", "opened",
           "closed", "open", "MB_sent", "rss0_MB", "rssmax_MB", "p50_ms", "p99_ms", "fail");
    printf("%-8s %-6s %5d %9zu %8d %8d %8d %9.1f %9.1f %9.1f %9.2f %9.2f %5d\n", o->label,
           o->raw ? "raw" : o->mode, o->conns, o->frame, r->opened, r->closed_by_head, r->still_open,
           (double)r->bytes_sent / 1048576.0, r->rss_before_kb / 1024.0, r->rss_peak_kb / 1024.0, r->p50, r->p99,
           r->status_failed);
    if (r->first_error[0]) {
        printf("first status error: %s\n", r->first_error);
    }
}

static int write_json(const opts *o, const result *r)
{
    FILE *f = fopen(o->json, "w");

    if (f == NULL) {
        fprintf(stderr, "preauth: cannot write %s: %s\n", o->json, strerror(errno));
        return -1;
    }
    fprintf(f,
            "{\"label\":\"%s\",\"mode\":\"%s\",\"conns\":%d,\"frame_bytes\":%zu,\"opened\":%d,"
            "\"connect_failed\":%d,\"closed_by_head\":%d,\"still_open\":%d,\"bytes_sent\":%zu,"
            "\"attack_s\":%.2f,\"rss_before_kb\":%ld,\"rss_peak_kb\":%ld,\"rss_after_kb\":%ld,"
            "\"status_ok\":%d,\"status_failed\":%d,\"status_p50_ms\":%.3f,\"status_p99_ms\":%.3f,"
            "\"status_max_ms\":%.3f,\"handshaken\":%d,\"replied\":%d}\n",
            o->label, o->raw ? "raw" : o->mode, o->conns, o->frame, r->opened, r->connect_failed,
            r->closed_by_head, r->still_open, r->bytes_sent, r->attack_s, r->rss_before_kb, r->rss_peak_kb,
            r->rss_after_kb, r->status_ok, r->status_failed, r->p50, r->p99, r->max, r->handshaken,
            r->replied);
    return fclose(f);
}

static void usage(void)
{
    fprintf(stderr, "usage: troupe-bench-preauth --head tcp://HOST:PORT --head-pid PID [--token-file F]\n"
                    "       [--mode frames|idle] [--raw] [--conns N] [--frame-bytes B] [--samples K]\n"
                    "       [--hold-ms MS] [--after-ms MS] [--label L] [--json FILE]\n"
                    "  --mode ping: one Ping each, then idle; --after-ms: wait this long after closing\n"
                    "  --mode burst: all connect, then each sends one Ping (with --token-file's credential)\n"
                    "  and waits for its reply (legitimate clients arriving at once)\n"
                    "  before the after-close RSS (default 500)\n");
}

static int parse(int argc, char **argv, opts *o)
{
    static const struct option lo[] = {
        {"head", 1, 0, 'h'},    {"head-pid", 1, 0, 'p'},    {"token-file", 1, 0, 't'}, {"mode", 1, 0, 'm'},
        {"raw", 0, 0, 'r'},     {"conns", 1, 0, 'c'},       {"frame-bytes", 1, 0, 'f'}, {"samples", 1, 0, 's'},
        {"label", 1, 0, 'l'},   {"json", 1, 0, 'j'},        {"hold-ms", 1, 0, 'H'},    {"after-ms", 1, 0, 'A'},
        {0, 0, 0, 0},
    };
    int ch;

    *o = (opts){.mode = "frames", .conns = 400, .frame = 4u << 20, .samples = 200, .label = "run", .hold_ms = 2000,
                .after_ms = 500};
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'h': o->url = optarg; break;
        case 'p': o->pid = strtol(optarg, NULL, 10); break;
        case 't': o->token_file = optarg; break;
        case 'm': o->mode = optarg; break;
        case 'r': o->raw = 1; break;
        case 'c': o->conns = atoi(optarg); break;
        case 'f': o->frame = (size_t)strtoull(optarg, NULL, 10); break;
        case 's': o->samples = atoi(optarg); break;
        case 'l': o->label = optarg; break;
        case 'j': o->json = optarg; break;
        case 'H': o->hold_ms = atoi(optarg); break;
        case 'A': o->after_ms = atoi(optarg); break;
        default: usage(); return -1;
        }
    }
    if (o->url == NULL || o->pid <= 0 || o->conns <= 0 || o->samples <= 0 || o->frame < 2 ||
        (strcmp(o->mode, "frames") != 0 && strcmp(o->mode, "idle") != 0 && strcmp(o->mode, "ping") != 0 &&
         strcmp(o->mode, "burst") != 0)) {
        usage();
        return -1;
    }
    return 0;
}

/* make_ping builds the one Ping frame every --mode ping connection sends. */
static int make_ping(const char *token)
{
    tr_envelope env = {.method = "troupe.v1.Head/Ping", .request_id = 1, .timeout_ms = 5000, .token = token};
    uint8_t *body = NULL;
    size_t len = 0;
    tr_err err = {0};

    if (tr_envelope_encode_request(&env, &body, &len, &err) != TROUPE_OK) {
        fprintf(stderr, "preauth: cannot encode a Ping: %s\n", err.msg);
        return -1;
    }
    ping_len = 8 + 4 + len;
    ping_frame = malloc(ping_len);
    if (ping_frame == NULL) {
        return -1;
    }
    for (int i = 0; i < 8; i++) {
        ping_frame[i] = (uint8_t)((uint64_t)(4 + len) >> (8 * (7 - i)));
    }
    ping_frame[8] = 0x80; /* REQ request id, the high bit set */
    ping_frame[9] = 0;
    ping_frame[10] = 0;
    ping_frame[11] = 1;
    memcpy(ping_frame + 12, body, len);
    free(body);
    return 0;
}

/* receive_until reads what the head sends each open connection until every
 * one has received want bytes or was closed, or deadline; returns how many
 * have want bytes. */
static int receive_until(conn *cs, int n, size_t want, int64_t deadline)
{
    struct pollfd *pf = calloc((size_t)n, sizeof(*pf));
    int have = 0;

    for (;;) {
        int waiting = 0;
        have = 0;
        for (int i = 0; i < n; i++) {
            pf[i].fd = (cs[i].closed || cs[i].fd < 0 || cs[i].got >= want) ? -1 : cs[i].fd;
            pf[i].events = POLLIN;
            waiting += pf[i].fd >= 0;
            have += cs[i].fd >= 0 && cs[i].got >= want;
        }
        if (waiting == 0 || tr_now_ms() >= deadline || poll(pf, (nfds_t)n, 100) < 0) {
            break;
        }
        for (int i = 0; i < n; i++) {
            uint8_t b[512];
            ssize_t k;
            if (pf[i].fd < 0 || pf[i].revents == 0) {
                continue;
            }
            k = recv(cs[i].fd, b, sizeof(b), MSG_DONTWAIT);
            if (k > 0) {
                cs[i].got += (size_t)k;
            } else if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                cs[i].closed = 1;
            }
        }
    }
    free(pf);
    return have;
}

/* run_burst: --mode burst. A reply is the head's 8-byte SP header, then a
 * frame: its 8-byte length, the 4-byte request id and the envelope. */
static int run_burst(opts *o, const struct sockaddr_in *sa)
{
    result r = {0};
    conn *cs = calloc((size_t)o->conns, sizeof(*cs));
    int64_t t0 = tr_now_ms();

    if (cs == NULL || open_conns(o, sa, cs, &r) != 0) {
        return 1;
    }
    for (int i = 0; i < o->conns; i++) {
        cs[i].total = cs[i].fd >= 0 ? 8 : 0; /* the handshake alone, first */
    }
    pump(o, cs, o->conns, tr_now_ms() + 30000, &r);
    r.handshaken = receive_until(cs, o->conns, 8, tr_now_ms() + 30000);
    usleep((useconds_t)o->hold_ms * 1000u); /* all of them open, none has called yet */
    for (int i = 0; i < o->conns; i++) {
        cs[i].total = cs[i].fd >= 0 && !cs[i].closed ? 8 + ping_len : cs[i].sent;
    }
    pump(o, cs, o->conns, tr_now_ms() + 30000, &r);
    r.replied = receive_until(cs, o->conns, 8 + 8 + 4 + 1, tr_now_ms() + 30000);
    r.attack_s = (double)(tr_now_ms() - t0) / 1000.0;
    for (int i = 0; i < o->conns; i++) {
        r.closed_by_head += cs[i].fd >= 0 && cs[i].closed;
        r.still_open += cs[i].fd >= 0 && !cs[i].closed;
        if (cs[i].fd >= 0) {
            close(cs[i].fd);
        }
    }
    printf("%-8s %-6s %5s %8s %10s %8s %8s %8s\n", "label", "mode", "conns", "opened", "handshaken",
           "replied", "closed", "time_s");
    printf("%-8s %-6s %5d %8d %10d %8d %8d %8.2f\n", o->label, o->mode, o->conns, r.opened, r.handshaken,
           r.replied, r.closed_by_head, r.attack_s);
    free(cs);
    return o->json != NULL && write_json(o, &r) != 0 ? 1 : 0;
}

static char *read_token(const char *path)
{
    char buf[512];
    FILE *f;
    size_t n;

    if (path == NULL || (f = fopen(path, "r")) == NULL) {
        return NULL;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) {
        n--;
    }
    buf[n] = '\0';
    return strdup(buf);
}

int main(int argc, char **argv)
{
    opts o;
    result r = {0};
    struct sockaddr_in sa;
    struct rlimit rl;
    conn *cs;
    char *token;
    int64_t t0;

    if (parse(argc, argv, &o) != 0) {
        return 2;
    }
    if (parse_tcp(o.url, &sa) != 0) {
        fprintf(stderr, "preauth: --head must be tcp://IPv4:PORT, got %s\n", o.url);
        return 2;
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) { /* the attacker needs more descriptors than the head */
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    token = read_token(o.token_file);
    if (strcmp(o.mode, "ping") == 0 && make_ping(NULL) != 0) {
        free(token);
        return 1;
    }
    if (strcmp(o.mode, "burst") == 0) {
        int rv;

        if ((o.token_file != NULL && token == NULL) || make_ping(token) != 0) {
            fprintf(stderr, "preauth: cannot read --token-file %s\n", o.token_file);
            free(token);
            return 2;
        }
        rv = run_burst(&o, &sa); /* the pinged frame holds its own copy of the token */
        free(token);
        return rv;
    }
    r.rss_before_kb = rss_kb(o.pid);
    pthread_t th;
    pthread_create(&th, NULL, sampler, &o.pid);
    cs = calloc((size_t)o.conns, sizeof(*cs));
    t0 = tr_now_ms();
    if (cs == NULL || open_conns(&o, &sa, cs, &r) != 0) {
        return 1;
    }
    pump(&o, cs, o.conns, tr_now_ms() + 60000, &r);
    r.attack_s = (double)(tr_now_ms() - t0) / 1000.0;
    usleep((useconds_t)o.hold_ms * 1000u); /* let the head take what it will */
    status_latency(&o, token, &r);
    atomic_store(&sampling, 0);
    pthread_join(th, NULL);
    r.rss_peak_kb = atomic_load(&peak_kb);
    count_closed(cs, o.conns, &r);
    for (int i = 0; i < o.conns; i++) {
        if (cs[i].fd >= 0) {
            close(cs[i].fd);
        }
    }
    usleep((useconds_t)o.after_ms * 1000u);
    r.rss_after_kb = rss_kb(o.pid);
    print(&o, &r);
    if (o.json != NULL && write_json(&o, &r) != 0) {
        return 1;
    }
    free(cs);
    free(token);
    return r.rss_peak_kb < 0 ? 1 : 0;
}
