/* rpc_backlog.c - the accept queue of the RPC server's listening socket.
 *
 * nng 1.5.2 calls listen(fd, 128) for its TCP and IPC listeners and offers
 * no option to change it. A job's ranks start together: 1,000 or 4,000
 * processes dialling the head within a few milliseconds overflow a queue of
 * 128 before the head's poller thread has accepted the first ones, and Linux
 * then drops the excess handshakes. Each dropped client waits for its SYN to
 * be sent again, one second later (then three), so a rank's first call took
 * 1-3 s instead of a millisecond: at 2,048 ranks at once, 1,187 listen
 * overflows and 732 SYN retransmissions in one run.
 *
 * Linux lets listen() be called again on a listening socket to change its
 * queue's length (capped at net.core.somaxconn). nng does not hand out the
 * descriptor, so it is found among the process's descriptors: the one
 * listening socket bound to the listener's own address. */
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <nng/nng.h>

#include "rpc_backlog.h"

/* same_addr says whether the socket address sa (getsockname's) is the one
 * nng reported for its listener. */
static int same_addr(const struct sockaddr_storage *ss, socklen_t len, const nng_sockaddr *na)
{
    if (ss->ss_family == AF_INET && na->s_family == NNG_AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        return in->sin_port == na->s_in.sa_port && in->sin_addr.s_addr == na->s_in.sa_addr;
    }
    if (ss->ss_family == AF_INET6 && na->s_family == NNG_AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        return in6->sin6_port == na->s_in6.sa_port && memcmp(&in6->sin6_addr, na->s_in6.sa_addr, 16) == 0;
    }
    if (ss->ss_family == AF_UNIX && na->s_family == NNG_AF_IPC) {
        const struct sockaddr_un *un = (const struct sockaddr_un *)ss;
        size_t n =
            len > offsetof(struct sockaddr_un, sun_path) ? len - offsetof(struct sockaddr_un, sun_path) : 0;
        return n > 0 && strncmp(un->sun_path, na->s_ipc.sa_path, n) == 0 &&
               strlen(na->s_ipc.sa_path) == strnlen(un->sun_path, n);
    }
    return 0;
}

/* listening_fd finds the descriptor of the listening socket bound to na; -1
 * when none is (a transport that keeps no such socket). */
static int listening_fd(const nng_sockaddr *na)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int found = -1;

    if (d == NULL) {
        return -1;
    }
    while (found < 0 && (e = readdir(d)) != NULL) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss), vl = sizeof(int);
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        int listening = 0;

        if (*end != '\0' || e->d_name[0] == '\0' || fd == dirfd(d)) {
            continue;
        }
        if (getsockopt((int)fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &vl) != 0 || !listening) {
            continue; /* not a socket, or not a listening one */
        }
        memset(&ss, 0, sizeof(ss));
        if (getsockname((int)fd, (struct sockaddr *)&ss, &len) == 0 && same_addr(&ss, len, na)) {
            found = (int)fd;
        }
    }
    closedir(d);
    return found;
}

/* somaxconn: the kernel's cap on an accept queue (128 where it is unreadable:
 * the old default, so that what is reported is never more than in effect). */
static int somaxconn(void)
{
    FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");
    int v = 128;

    if (f != NULL) {
        if (fscanf(f, "%d", &v) != 1 || v <= 0) {
            v = 128;
        }
        fclose(f);
    }
    return v;
}

int tr_rpc_listen_backlog(nng_listener l, int want, int *effective)
{
    nng_sockaddr na;
    int fd, cap;

    *effective = 0;
    if (nng_listener_get_addr(l, NNG_OPT_LOCADDR, &na) != 0) {
        return -1;
    }
    if ((fd = listening_fd(&na)) < 0) {
        return -1;
    }
    if (listen(fd, want) != 0) {
        return -1;
    }
    cap = somaxconn();
    *effective = want < cap ? want : cap;
    return 0;
}
