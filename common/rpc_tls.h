/* rpc_tls.h - TLS for troupe's RPC (internal to rpc_server.c/rpc_client.c):
 * nng 1.5.2's tls+tcp:// transport (mbedTLS in Debian's libnng) configured
 * from files, and the errors made readable.
 *
 * nng reports a failed handshake as "Cryptographic error" on the client and
 * not at all on the server. So a client whose TLS dial fails repeats the
 * handshake itself with mbedTLS (same CA, host name, certificate) and says
 * why: certificate expired, signed by another CA, issued for another name,
 * not TLS at all. The server reads its listener's nng statistics (auth /
 * proto / other / timeout errors) and logs what failed. */
#ifndef TR_RPC_TLS_H
#define TR_RPC_TLS_H

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "rpc.h"

/* tr_rpc_is_tls: the URL uses nng's TLS transport. */
int tr_rpc_is_tls(const char *url);

/* tr_rpc_tls_config builds an nng TLS configuration (server: certificate and
 * key required, client CA when client_auth; client: CA required, server name
 * from t or the URL's host, certificate optional). The caller frees it with
 * nng_tls_config_free after handing it to nng. */
int tr_rpc_tls_config(const tr_rpc_tls *t, int server, const char *url, nng_tls_config **out, tr_err *err);

/* tr_rpc_tls_diagnose repeats a client handshake with mbedTLS to url and
 * writes why it fails into why ("" when it succeeds). */
void tr_rpc_tls_diagnose(const tr_rpc_tls *t, const char *url, char *why, size_t size);

/* tr_rpc_tls_errors reads the listener's (or dialer's, with dialer set)
 * handshake error counters: auth, proto, other, timeout. 0 on success. */
typedef struct tr_tls_errors {
    uint64_t auth, proto, other, timeout;
} tr_tls_errors;
int tr_rpc_listener_errors(nng_listener l, tr_tls_errors *out);

#endif
