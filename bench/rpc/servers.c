/* servers.c - the processes of bench/rpc: servers and the gRPC load generator.
 *
 * Every server runs in its own process so that client and server never share
 * an address space, an allocator or nng's thread pool. They are started with
 * posix_spawn (house rule: no fork() once nng is initialised), watched until
 * their port accepts, and stopped with SIGTERM, as an operator would. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rpc_bench.h"
#include "util.h"

extern char **environ;

#define GRPC_MAGIC 0x31434552504752ull /* "RGPREC1": the peer's latency file */

int rb_free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;

    /* Bind to port 0 and give the port back: a small race, harmless on a test box. */
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
        port = ntohs(a.sin_port);
    }
    if (fd >= 0) {
        close(fd);
    }
    return port;
}

int rb_spawn(char *const argv[], pid_t *pid)
{
    int rv = posix_spawn(pid, argv[0], NULL, NULL, argv, environ);
    if (rv != 0) {
        errno = rv;
        return -1;
    }
    return 0;
}

static int try_connect(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

    a.sin_port = htons((uint16_t)port);
    ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0) {
        close(fd);
    }
    return ok;
}

int rb_wait_port(int port, pid_t pid, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 10) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            return -1; /* it exited: bad flags, port taken, ... (its stderr says) */
        }
        if (try_connect(port)) {
            return 0;
        }
        tr_sleep_ms(10);
    }
    return -1;
}

void rb_stop(pid_t pid)
{
    int st;

    if (pid <= 0) {
        return;
    }
    kill(pid, SIGTERM);
    for (int waited = 0; waited < 5000; waited += 10) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            return;
        }
        tr_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
}

int rb_run_child(char *const argv[])
{
    pid_t pid;
    int st;

    if (rb_spawn(argv, &pid) != 0) {
        return -1;
    }
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            return -1;
        }
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* read_grpc_file reads the peer's file: magic, window_ns, errors, count, then
 * count latencies in ns (all uint64, host order). */
static int read_grpc_file(const char *path, uint64_t **lat, uint64_t *n, uint64_t *window, uint64_t *errors)
{
    uint64_t hdr[4];
    FILE *f = fopen(path, "rb");
    int rv = -1;

    *lat = NULL;
    if (f == NULL || fread(hdr, sizeof(hdr), 1, f) != 1 || hdr[0] != GRPC_MAGIC) {
        goto out;
    }
    *window = hdr[1];
    *errors = hdr[2];
    *n = hdr[3];
    *lat = malloc((*n ? *n : 1) * sizeof(uint64_t));
    if (*lat != NULL && fread(*lat, sizeof(uint64_t), *n, f) == *n) {
        rv = 0;
    }
out:
    if (f != NULL) {
        fclose(f);
    }
    return rv;
}

int rb_grpc_run(const char *peer, int port, const rb_load *ld, size_t data_len, const char *tmpdir,
                rb_samples *s, char *note, size_t note_size)
{
    char target[64], clients[16], size[32], warm[16], dur[16], out[512];
    char *argv[] = {(char *)peer, "load", target, clients, size, warm, dur, out, NULL};
    uint64_t *lat = NULL, n = 0, window = 0, errors = 0;
    int rv;

    snprintf(target, sizeof(target), "127.0.0.1:%d", port);
    snprintf(clients, sizeof(clients), "%d", ld->clients);
    snprintf(size, sizeof(size), "%zu", data_len);
    snprintf(warm, sizeof(warm), "%d", ld->warmup_ms);
    snprintf(dur, sizeof(dur), "%d", ld->duration_ms);
    snprintf(out, sizeof(out), "%s/grpc-%d-%zu.lat", tmpdir, ld->clients, data_len);
    if ((rv = rb_run_child(argv)) != 0) {
        snprintf(note, note_size, "gRPC load generator exited with %d", rv);
        return -1;
    }
    rv = read_grpc_file(out, &lat, &n, &window, &errors);
    if (rv != 0) {
        snprintf(note, note_size, "unreadable latency file %.120s", out);
    } else if ((rv = rb_samples_add(s, lat, (size_t)n)) != 0) {
        snprintf(note, note_size, "out of memory");
    } else {
        s->window_ns += window;
        s->errors += errors;
    }
    free(lat);
    unlink(out);
    return rv;
}
