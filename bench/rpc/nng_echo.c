/* nng_echo.c - the floor for bench/rpc: a raw nng rep0 server that echoes.
 *
 * The same shape as troupe's RPC server (common/rpc_server.c) minus the RPC
 * layer: a REP socket, a pool of contexts, each driven by its own aio callback
 * through RECV -> SEND -> RECV. The received message is sent back as it is, so
 * the cost measured is nng's alone.
 *
 * usage: rpc-bench-nng-echo URL [CONTEXTS]    (stops on SIGTERM/SIGINT) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

typedef struct echo_ctx {
    nng_ctx ctx;
    nng_aio *aio;
    int sending;
} echo_ctx;

/* echo_cb runs on an nng worker thread for each finished receive or send. */
static void echo_cb(void *arg)
{
    echo_ctx *e = arg;
    int rv = nng_aio_result(e->aio);

    if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
        return;
    }
    if (e->sending) {
        if (rv != 0) {
            nng_msg_free(nng_aio_get_msg(e->aio)); /* peer gone: the message is ours again */
        }
        e->sending = 0;
        nng_ctx_recv(e->ctx, e->aio);
        return;
    }
    if (rv != 0) {
        nng_ctx_recv(e->ctx, e->aio);
        return;
    }
    e->sending = 1;
    /* The received message is already in the aio: send it straight back. */
    nng_ctx_send(e->ctx, e->aio);
}

static int start_contexts(nng_socket sock, echo_ctx *pool, int n)
{
    for (int i = 0; i < n; i++) {
        int rv = nng_aio_alloc(&pool[i].aio, echo_cb, &pool[i]);
        if (rv == 0) {
            rv = nng_ctx_open(&pool[i].ctx, sock);
        }
        if (rv != 0) {
            fprintf(stderr, "rpc-bench-nng-echo: context %d: %s\n", i, nng_strerror(rv));
            return rv;
        }
        nng_ctx_recv(pool[i].ctx, pool[i].aio);
    }
    return 0;
}

int main(int argc, char **argv)
{
    int n = argc > 2 ? atoi(argv[2]) : 64;
    echo_ctx *pool;
    nng_socket sock;
    sigset_t sigs;
    int sig, rv;

    if (argc < 2 || n <= 0) {
        fprintf(stderr, "usage: rpc-bench-nng-echo URL [CONTEXTS]\n");
        return 2;
    }
    /* Block the stop signals before nng starts its threads so only sigwait sees them. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    pool = calloc((size_t)n, sizeof(*pool));
    if (pool == NULL || (rv = nng_rep0_open(&sock)) != 0) {
        fprintf(stderr, "rpc-bench-nng-echo: cannot open a REP socket\n");
        return 1;
    }
    nng_socket_set_size(sock, NNG_OPT_RECVMAXSZ, 4u * 1024u * 1024u); /* troupe's default */
    if ((rv = nng_listen(sock, argv[1], NULL, 0)) != 0) {
        fprintf(stderr, "rpc-bench-nng-echo: listen %s: %s\n", argv[1], nng_strerror(rv));
        return 1;
    }
    if (start_contexts(sock, pool, n) != 0) {
        return 1;
    }
    sigwait(&sigs, &sig);
    nng_close(sock);
    for (int i = 0; i < n; i++) {
        if (pool[i].aio != NULL) {
            nng_aio_stop(pool[i].aio);
            nng_aio_free(pool[i].aio);
        }
    }
    free(pool);
    return 0;
}
