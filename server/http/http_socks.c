/* http_socks.c - the HTTP port's open connections (http_socks.h). */
#include "http_socks.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* A growing array of sockets. */
typedef struct socks {
    tr_http_sock *v;
    size_t n, cap;
    int oom;
} socks;

static void socks_add(socks *s, ino_t ino, uint32_t idle_ms, int fd)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        tr_http_sock *v = realloc(s->v, cap * sizeof(*v));
        if (v == NULL) {
            s->oom = 1;
            return;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (tr_http_sock){ino, idle_ms, fd};
}

/* The address to match, from nng's form: family, port (host order) and the
 * address bytes (all zero: the wildcard, any address matches). */
typedef struct want {
    int family;
    uint16_t port;
    uint8_t addr[16];
    size_t addr_len;
    int any;
} want;

static int want_of(const nng_sockaddr *sa, want *w)
{
    static const uint8_t zero[16];

    memset(w, 0, sizeof(*w));
    if (sa->s_family == NNG_AF_INET) {
        w->family = AF_INET;
        w->port = ntohs(sa->s_in.sa_port);
        memcpy(w->addr, &sa->s_in.sa_addr, 4);
        w->addr_len = 4;
    } else if (sa->s_family == NNG_AF_INET6) {
        w->family = AF_INET6;
        w->port = ntohs(sa->s_in6.sa_port);
        memcpy(w->addr, sa->s_in6.sa_addr, 16);
        w->addr_len = 16;
    } else {
        return -1;
    }
    w->any = memcmp(w->addr, zero, w->addr_len) == 0;
    return 0;
}

/* ---- sock_diag ---------------------------------------------------------------- */

/* The states of a connection the guard may still have to close: open both
 * ways, or closed by the client only (CLOSE_WAIT). Once this end has shut
 * down (FIN_WAIT1/2, CLOSING, LAST_ACK, TIME_WAIT, CLOSE) there is nothing
 * left to close, though the socket keeps its inode until nng closes the
 * descriptor - which under load takes seconds, and the guard, scanning
 * every second, counted one connection as closed again at each scan. */
#define SOCKS_OPEN_STATES ((1u << TCP_ESTABLISHED) | (1u << TCP_SYN_RECV) | (1u << TCP_CLOSE_WAIT))

/* diag_request asks for the TCP sockets of w's family whose local port is
 * w's, in a state of SOCKS_OPEN_STATES, with their tcp_info. The port test runs in
 * the kernel (bytecode: sport >= P, then sport <= P), so the answer holds
 * the HTTP connections only, not the head's 10,000 RPC ones. */
static int diag_request(int fd, const want *w)
{
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 req;
        struct nlattr bc;
        struct inet_diag_bc_op ops[4];
    } msg;
    struct sockaddr_nl to = {.nl_family = AF_NETLINK};

    memset(&msg, 0, sizeof(msg));
    msg.nlh.nlmsg_len = sizeof(msg);
    msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    msg.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    msg.req.sdiag_family = (uint8_t)w->family;
    msg.req.sdiag_protocol = IPPROTO_TCP;
    msg.req.idiag_states = SOCKS_OPEN_STATES;
    msg.req.idiag_ext = 1u << (INET_DIAG_INFO - 1);
    msg.bc.nla_len = (uint16_t)(NLA_HDRLEN + sizeof(msg.ops));
    msg.bc.nla_type = INET_DIAG_REQ_BYTECODE;
    /* Each test is an op and a second op holding the port; "yes" steps to
     * the next test, "no" jumps 4 bytes past the end (reject). */
    msg.ops[0] = (struct inet_diag_bc_op){INET_DIAG_BC_S_GE, 8, 20};
    msg.ops[1] = (struct inet_diag_bc_op){0, 0, w->port};
    msg.ops[2] = (struct inet_diag_bc_op){INET_DIAG_BC_S_LE, 8, 12};
    msg.ops[3] = (struct inet_diag_bc_op){0, 0, w->port};
    return sendto(fd, &msg, sizeof(msg), 0, (struct sockaddr *)&to, sizeof(to)) == (ssize_t)sizeof(msg) ? 0 : -1;
}

/* diag_one adds the socket one answer describes, when its local address is
 * w's and it has an inode (an orphan closing on its own has none). */
static void diag_one(const struct nlmsghdr *h, const want *w, socks *out)
{
    const struct inet_diag_msg *m = NLMSG_DATA(h);
    int len = (int)h->nlmsg_len - (int)NLMSG_LENGTH(sizeof(*m));
    uint32_t idle = 0;

    if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)) || m->idiag_inode == 0 ||
        ntohs(m->id.idiag_sport) != w->port ||
        (!w->any && memcmp(m->id.idiag_src, w->addr, w->addr_len) != 0)) {
        return;
    }
    for (const struct rtattr *a = (const struct rtattr *)(m + 1); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        if (a->rta_type == INET_DIAG_INFO &&
            RTA_PAYLOAD(a) >= offsetof(struct tcp_info, tcpi_last_data_recv) + sizeof(uint32_t)) {
            struct tcp_info ti;
            memset(&ti, 0, sizeof(ti));
            memcpy(&ti, RTA_DATA(a), RTA_PAYLOAD(a) < sizeof(ti) ? RTA_PAYLOAD(a) : sizeof(ti));
            idle = ti.tcpi_last_data_recv;
        }
    }
    socks_add(out, (ino_t)m->idiag_inode, idle, -1);
}

/* diag_list: 0 with out filled, -1 where sock_diag is unavailable. */

/* nl_fits: NLMSG_OK without its signed/unsigned comparison: a whole header
 * and the whole message it announces lie in the LEFT bytes received. */
static int nl_fits(const struct nlmsghdr *h, int left)
{
    return left >= (int)sizeof(*h) && h->nlmsg_len >= sizeof(*h) && (long)h->nlmsg_len <= (long)left;
}
static int diag_list(const want *w, socks *out)
{
    enum { BUF = 32768 };
    long *buf = malloc(BUF); /* long: aligned for the headers */
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    int rv = -1;

    if (fd < 0 || buf == NULL) {
        goto out;
    }
    if (diag_request(fd, w) != 0) {
        goto out;
    }
    for (;;) {
        ssize_t got = recv(fd, buf, BUF, 0);
        int left = (int)got;
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            goto out;
        }
        for (const struct nlmsghdr *h = (const struct nlmsghdr *)buf; nl_fits(h, left);
             h = NLMSG_NEXT(h, left)) {
            if (h->nlmsg_type == NLMSG_DONE) {
                rv = 0;
                goto out;
            }
            if (h->nlmsg_type == NLMSG_ERROR) {
                goto out;
            }
            diag_one(h, w, out);
        }
    }
out:
    if (fd >= 0) {
        close(fd);
    }
    free(buf);
    return rv;
}

/* ---- /proc/self/fd ---------------------------------------------------------------- */

/* proc_match: fd is a connected TCP socket whose local end is w's, in a
 * state of SOCKS_OPEN_STATES; fills its inode and idle time. */
static int proc_match(int fd, const want *w, ino_t *ino, uint32_t *idle_ms)
{
    struct stat st;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss), tlen, alen = sizeof(int);
    struct tcp_info ti;
    int acc = 0;
    const uint8_t *a;
    uint16_t port;

    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) || getsockname(fd, (struct sockaddr *)&ss, &len) != 0 ||
        ss.ss_family != w->family) {
        return 0;
    }
    if (ss.ss_family == AF_INET) {
        port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        a = (const uint8_t *)&((struct sockaddr_in *)&ss)->sin_addr;
    } else {
        port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        a = (const uint8_t *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
    }
    tlen = sizeof(ti);
    if (port != w->port || (!w->any && memcmp(a, w->addr, w->addr_len) != 0) ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &alen) != 0 || acc ||
        getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tlen) != 0 || !(SOCKS_OPEN_STATES & (1u << ti.tcpi_state))) {
        return 0;
    }
    *ino = st.st_ino;
    *idle_ms = ti.tcpi_last_data_recv;
    return 1;
}

static int proc_list(const want *w, socks *out)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;

    if (d == NULL) {
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        ino_t ino;
        uint32_t idle;
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && fd != dirfd(d) && proc_match(fd, w, &ino, &idle)) {
            socks_add(out, ino, idle, fd);
        }
    }
    closedir(d);
    return 0;
}

int tr_http_socks_list(const nng_sockaddr *addr, int how, tr_http_sock **out, size_t *n)
{
    socks s = {0};
    want w;
    int used = -1;

    *out = NULL;
    *n = 0;
    if (want_of(addr, &w) != 0) {
        return -1;
    }
    if (how != TR_HTTP_SOCKS_PROC && diag_list(&w, &s) == 0) {
        used = TR_HTTP_SOCKS_DIAG;
    } else if (how != TR_HTTP_SOCKS_DIAG) {
        s.n = 0;
        s.oom = 0;
        used = proc_list(&w, &s) == 0 ? TR_HTTP_SOCKS_PROC : -1;
    }
    if (used < 0 || s.oom) {
        free(s.v);
        return -1;
    }
    *out = s.v;
    *n = s.n;
    return used;
}

void tr_http_socks_find_fds(tr_http_sock *s, size_t n)
{
    DIR *d;
    struct dirent *e;
    size_t missing = 0;

    for (size_t i = 0; i < n; i++) {
        missing += s[i].fd < 0;
    }
    if (missing == 0 || (d = opendir("/proc/self/fd")) == NULL) {
        return;
    }
    while (missing > 0 && (e = readdir(d)) != NULL) {
        char path[300], link[64];
        unsigned long long ino;
        ssize_t len;
        if (e->d_name[0] < '0' || e->d_name[0] > '9') {
            continue;
        }
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        /* One readlink per descriptor: "socket:[INODE]" for a socket. */
        if ((len = readlink(path, link, sizeof(link) - 1)) <= 0) {
            continue;
        }
        link[len] = '\0';
        if (sscanf(link, "socket:[%llu]", &ino) != 1) {
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            if (s[i].fd < 0 && s[i].ino == (ino_t)ino) {
                s[i].fd = atoi(e->d_name);
                missing--;
            }
        }
    }
    closedir(d);
}
