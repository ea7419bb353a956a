/* rpc_backlog.h - the accept queue of the RPC server's listening socket
 * (rpc_backlog.c says why nng's own is too short). */
#ifndef TROUPE_RPC_BACKLOG_H
#define TROUPE_RPC_BACKLOG_H

#include <nng/nng.h>

/* tr_rpc_listen_backlog lengthens the accept queue of started listener l to
 * want connections; the kernel caps it at net.core.somaxconn, and
 * *effective is what applies then. Returns 0, or -1 when l's listening
 * socket was not found or listen() refused (the queue is unchanged,
 * *effective 0). Call once the listener has started; any thread. */
int tr_rpc_listen_backlog(nng_listener l, int want, int *effective);

#endif
