/* http_socks.h - the HTTP port's open connections, as the kernel sees them.
 *
 * The HTTP connection guard (http.c) needs, once a second, every connected
 * TCP socket whose local end is the head's HTTP address, with how long it
 * has received nothing. It used to find them by walking /proc/self/fd with
 * fstat and getsockname on every descriptor: at 10,000 agents that is some
 * 30,000 system calls a second, 4-5% of the head's time, for a handful of
 * HTTP connections. The kernel's socket diagnostics (NETLINK_SOCK_DIAG,
 * what `ss` uses) answer the same question in one request filtered by port
 * in the kernel; /proc/self/fd is walked only where that is unavailable, and
 * to find the descriptor of a connection about to be closed (rare).
 *
 * Ownership: *out from tr_http_socks_list is the caller's (free). */
#ifndef TROUPE_HTTP_SOCKS_H
#define TROUPE_HTTP_SOCKS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <nng/nng.h>

typedef struct tr_http_sock {
    ino_t ino;        /* the socket's inode: stable while it is open */
    uint32_t idle_ms; /* since it last received data (tcpi_last_data_recv) */
    int fd;           /* this process's descriptor for it, or -1 (not looked up) */
} tr_http_sock;

enum {
    TR_HTTP_SOCKS_DIAG = 1, /* found by sock_diag */
    TR_HTTP_SOCKS_PROC = 2, /* found by walking /proc/self/fd */
};

/* tr_http_socks_list lists the connected (not listening) TCP sockets whose
 * local address and port are addr's (any address when addr's is the
 * wildcard). how: 0 tries sock_diag and falls back to /proc; one of the
 * enum forces that way (tests). Returns the way used (the enum), or -1 when
 * neither worked or out of memory. */
int tr_http_socks_list(const nng_sockaddr *addr, int how, tr_http_sock **out, size_t *n);

/* tr_http_socks_find_fds fills the fd of each of s[0..n) that has fd -1,
 * by one walk over /proc/self/fd (-1 stays where none holds it). */
void tr_http_socks_find_fds(tr_http_sock *s, size_t n);

#endif
