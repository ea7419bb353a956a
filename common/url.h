/* url.h - checks of RPC addresses and host names given in configuration.
 *
 * Accepted RPC addresses (what troupe's nng transport can use):
 *   tcp://HOST:PORT, tcp4://, tcp6://   HOST a name, IPv4, [IPv6], or * / empty
 *                                       (every interface, for listening); PORT 1-65535
 *   ipc:///PATH                         PATH at most 107 bytes (a Unix socket path)
 *   tls+tcp://HOST:PORT (tls+tcp4, tls+tcp6)  the same over TLS (rpc.h: tr_rpc_tls)
 * Thread-safe. */
#ifndef TR_URL_H
#define TR_URL_H

#include "err.h"

/* tr_url_check returns TROUPE_OK, or INVALID_ARGUMENT / OUT_OF_RANGE with
 * what is wrong (the caller adds where the value came from). */
int tr_url_check(const char *url, tr_err *err);

/* tr_host_check accepts a host name, IPv4 or IPv6 address (no scheme, no port). */
int tr_host_check(const char *host, tr_err *err);

#endif
