/* conn_phases.c - where one rank's connection set-up goes: N connections
 * made one after the other, each its dial and first call, then a second
 * call on it (the cost of a call once connected), against troupe-head with
 * libtroupe's RPC client (as the worker runtime opens it: the dial in the
 * background, the first call waiting for it; Ping), or with a bare nng REQ
 * socket against a bare nng REP echo server (this program with --echo):
 * what nng 1.5.2 itself costs for the same exchange.
 *
 *   store_conn_phases --echo URL                       (serves until killed)
 *   store_conn_phases --head URL [--token-file F] --n N [--json FILE]
 *   store_conn_phases --nng URL --n N [--json FILE]
 *
 * Prints, per connection: median and 90th percentile of dial + first call
 * (us), and the means of the dial call's return, the first call and the
 * second call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include "rpc.h"
#include "safefile.h"
#include "util.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int echo(const char *url)
{
    nng_socket s;
    nng_msg *m;

    if (nng_rep0_open(&s) != 0 || nng_listen(s, url, NULL, 0) != 0) {
        fprintf(stderr, "store_conn_phases: cannot listen on %s\n", url);
        return 1;
    }
    while (nng_recvmsg(s, &m, 0) == 0) {
        if (nng_sendmsg(s, m, 0) != 0) {
            nng_msg_free(m);
        }
    }
    return 0;
}

/* nng_call sends a 120-byte request on s and waits for its reply. */
static int nng_call(nng_socket s)
{
    nng_msg *m;
    int rv;

    if ((rv = nng_msg_alloc(&m, 120)) != 0 || (rv = nng_sendmsg(s, m, 0)) != 0) {
        return rv;
    }
    if ((rv = nng_recvmsg(s, &m, 0)) == 0) {
        nng_msg_free(m);
    }
    return rv;
}

/* one_conn makes connection k and its two calls; t[0..2] get the phases. */
static int one_conn(const char *url, const char *token, int bare, void **keep, double t[3], tr_err *err)
{
    double t0 = now_us();
    int rv;

    if (bare) {
        nng_socket *s = calloc(1, sizeof(*s));
        *keep = s;
        if (s == NULL || nng_req0_open(s) != 0) {
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot open a REQ socket");
        }
        nng_socket_set_ms(*s, NNG_OPT_RECONNMINT, 50); /* as common/rpc_client.c */
        rv = nng_dial(*s, url, NULL, NNG_FLAG_NONBLOCK);
        t[0] = now_us() - t0;
        if (rv != 0 || (rv = nng_call(*s)) != 0) {
            return tr_rpc_from_nng(rv, url, err);
        }
        t[1] = now_us() - t0 - t[0];
        rv = nng_call(*s);
        t[2] = now_us() - t0 - t[0] - t[1];
        return rv != 0 ? tr_rpc_from_nng(rv, url, err) : TROUPE_OK;
    }
    tr_rpc_client_opts o = {.url = url, .token = token, .wait_for_server = 1};
    tr_rpc_client *c = NULL;
    if ((rv = tr_rpc_client_open(&o, &c, err)) != TROUPE_OK) {
        return rv;
    }
    *keep = c;
    t[0] = now_us() - t0;
    if ((rv = tr_rpc_client_call(c, "troupe.v1.Head/Ping", NULL, NULL, NULL, 10000, 0, err)) != TROUPE_OK) {
        return rv;
    }
    t[1] = now_us() - t0 - t[0];
    rv = tr_rpc_client_call(c, "troupe.v1.Head/Ping", NULL, NULL, NULL, 10000, 0, err);
    t[2] = now_us() - t0 - t[0] - t[1];
    return rv;
}

/* close_all closes the n connections kept open while measuring and frees
 * keep (entries past the last one opened are NULL). */
static void close_all(void **keep, int n, int bare)
{
    for (int k = 0; keep != NULL && k < n; k++) {
        if (keep[k] == NULL) {
            continue;
        }
        if (bare) {
            nng_close(*(nng_socket *)keep[k]);
            free(keep[k]);
        } else {
            tr_rpc_client_close(keep[k]);
        }
    }
    free(keep);
}

int main(int argc, char **argv)
{
    const char *url = NULL, *token_file = NULL, *json = NULL;
    char *token = NULL;
    int n = 1024, bare = 0, rv = TROUPE_OK;
    tr_err err = {0};

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--echo") == 0 && i + 1 < argc) {
            return echo(argv[i + 1]);
        } else if ((strcmp(argv[i], "--head") == 0 || strcmp(argv[i], "--nng") == 0) && i + 1 < argc) {
            bare = strcmp(argv[i], "--nng") == 0;
            url = argv[++i];
        } else if (strcmp(argv[i], "--token-file") == 0 && i + 1 < argc) {
            token_file = argv[++i];
        } else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
            n = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            json = argv[++i];
        } else {
            url = NULL;
            break;
        }
    }
    if (url == NULL || n < 1) {
        fprintf(stderr,
                "usage: store_conn_phases --echo URL | (--head URL [--token-file F] | --nng URL) --n N "
                "[--json FILE]\n");
        return 2;
    }
    int loose = 0;
    if (token_file != NULL && tr_secret_file_read(token_file, &token, &loose, &err) != TROUPE_OK) {
        fprintf(stderr, "store_conn_phases: %s\n", err.msg);
        return 1;
    }
    double *tot = calloc((size_t)n, sizeof(double)), sum[3] = {0, 0, 0}, t[3];
    void **keep = calloc((size_t)n, sizeof(void *));
    for (int k = 0; k < n && rv == TROUPE_OK && tot && keep; k++) {
        rv = one_conn(url, token, bare, &keep[k], t, &err);
        tot[k] = t[0] + t[1];
        for (int j = 0; j < 3; j++) {
            sum[j] += t[j];
        }
    }
    if (rv != TROUPE_OK || tot == NULL || keep == NULL) {
        fprintf(stderr, "store_conn_phases: %s\n", tot && keep ? err.msg : "out of memory");
        close_all(keep, n, bare);
        free(tot);
        free(token);
        return 1;
    }
    qsort(tot, (size_t)n, sizeof(double), cmp_d);
    printf("%s %d connections one after the other: dial + first call median %.0f us, p90 %.0f us; "
           "means: dial returns %.0f us, first call %.0f us, second call %.0f us\n",
           bare ? "nng REQ -> nng REP echo" : "libtroupe -> troupe-head", n, tot[n / 2], tot[n * 9 / 10],
           sum[0] / n, sum[1] / n, sum[2] / n);
    if (json != NULL) {
        FILE *f = fopen(json, "w");
        if (f != NULL) {
            fprintf(f,
                    "{\"side\":\"%s\",\"n\":%d,\"median_us\":%.1f,\"p90_us\":%.1f,\"dial_us\":%.1f,"
                    "\"first_call_us\":%.1f,\"second_call_us\":%.1f}\n",
                    bare ? "nng" : "troupe", n, tot[n / 2], tot[n * 9 / 10], sum[0] / n, sum[1] / n,
                    sum[2] / n);
            fclose(f);
        }
    }
    close_all(keep, n, bare); /* after the figures: closing is not measured */
    free(tot);
    free(token);
    return 0;
}
