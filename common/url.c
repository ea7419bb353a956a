/* url.c - checks of the addresses the daemons are given (url.h).
 *
 * nng parses URLs only when a socket listens or dials, and then with one
 * generic "address invalid" (or not at all: an agent pointed at http://x
 * retries forever). Checking at load time gives --check-config and start-up an
 * error that names the setting, the value and what is accepted. */
#include "url.h"

#include <stdlib.h>
#include <string.h>

#define IPC_PATH_MAX 107 /* sizeof(sockaddr_un.sun_path) - 1 on Linux */

static int host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_';
}

/* check_name: a DNS name or IPv4 literal, as a string of labels. */
static int check_name(const char *h, size_t n, tr_err *err)
{
    if (n == 0 || n > 253) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "host name must have 1 to 253 characters");
    }
    for (size_t i = 0; i < n; i++) {
        if (!host_char(h[i])) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "character '%c' is not allowed in a host name", h[i]);
        }
    }
    if (h[0] == '.' || h[0] == '-' || h[n - 1] == '-' || strstr(h, "..") != NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "'%.*s' is not a valid host name", (int)n, h);
    }
    return TROUPE_OK;
}

static int check_ipv6(const char *h, size_t n, tr_err *err)
{
    if (n < 2) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "empty IPv6 address");
    }
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' ||
              c == '.')) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "'%.*s' is not an IPv6 address", (int)n, h);
        }
    }
    return TROUPE_OK;
}

int tr_host_check(const char *host, tr_err *err)
{
    size_t n = strlen(host);
    if (strstr(host, "://") != NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "expected a host name or IP address, not a URL");
    }
    if (strchr(host, ':') != NULL) {
        return check_ipv6(host, n, err);
    }
    return check_name(host, n, err);
}

static int check_port(const char *p, tr_err *err)
{
    char *end = NULL;
    long v;

    if (p[0] < '0' || p[0] > '9') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "missing port (tcp://HOST:PORT)");
    }
    v = strtol(p, &end, 10);
    if (*end != '\0') {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "port '%s' is not a number", p);
    }
    if (v < 1 || v > 65535) {
        return tr_err_set(err, TROUPE_OUT_OF_RANGE, "port %s is out of range [1, 65535]", p);
    }
    return TROUPE_OK;
}

/* check_tcp: HOST:PORT, [IPv6]:PORT, or *:PORT / :PORT (every interface). */
static int check_tcp(const char *rest, tr_err *err)
{
    const char *colon;
    int rv;

    if (rest[0] == '[') {
        const char *close = strchr(rest, ']');
        if (close == NULL) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "unterminated '[' around an IPv6 address");
        }
        if ((rv = check_ipv6(rest + 1, (size_t)(close - rest - 1), err)) != TROUPE_OK) {
            return rv;
        }
        if (close[1] != ':') {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "missing port (tcp://[ADDR]:PORT)");
        }
        return check_port(close + 2, err);
    }
    colon = strrchr(rest, ':');
    if (colon == NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "missing port (tcp://HOST:PORT)");
    }
    if (strchr(rest, '/') != NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "a tcp:// address has no path (tcp://HOST:PORT)");
    }
    if (colon != rest && !(colon == rest + 1 && rest[0] == '*') &&
        (rv = check_name(rest, (size_t)(colon - rest), err)) != TROUPE_OK) {
        return rv;
    }
    return check_port(colon + 1, err);
}

int tr_url_check(const char *url, tr_err *err)
{
    static const char *const tcp[] = {"tcp://", "tcp4://", "tcp6://", "tls+tcp://", "tls+tcp4://", "tls+tcp6://"};

    for (size_t i = 0; i < sizeof(tcp) / sizeof(tcp[0]); i++) {
        if (strncmp(url, tcp[i], strlen(tcp[i])) == 0) {
            return check_tcp(url + strlen(tcp[i]), err);
        }
    }
    if (strncmp(url, "ipc://", 6) == 0) {
        size_t n = strlen(url + 6);
        if (n == 0) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "missing path (ipc:///PATH)");
        }
        if (n > IPC_PATH_MAX) {
            return tr_err_set(err, TROUPE_OUT_OF_RANGE, "ipc path has %zu bytes; a socket path has at most %d", n,
                              IPC_PATH_MAX);
        }
        return TROUPE_OK;
    }
    return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                      "unsupported address; use tcp://HOST:PORT, tls+tcp://HOST:PORT or ipc:///PATH");
}
