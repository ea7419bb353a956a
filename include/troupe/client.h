/*
 * troupe/client.h - libtroupe, the C client of troupe-head.
 *
 * Everything here is the API; nothing else in libtroupe is. Conventions:
 * - Functions return a troupe_status (gRPC numbering, 0 = OK). When `err` is
 *   not NULL it receives the same code and a sentence naming the cause, as the
 *   head or the transport stated it.
 * - Out-params are zeroed on entry. Whoever allocates provides the free:
 *   results from troupe_* calls are released with the matching troupe_*_free.
 * - A troupe_client may be used from several threads at once.
 * - libtroupe never prints, exits or aborts inside your process.
 */
#ifndef TROUPE_CLIENT_H
#define TROUPE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TROUPE_DEFAULT_HEAD "tcp://127.0.0.1:7770"

typedef struct troupe_error {
    int code;          /* troupe_status */
    char message[512]; /* NUL-terminated; empty on OK */
} troupe_error;

typedef struct troupe_client troupe_client;

typedef struct troupe_client_opts {
    const char *head_url;   /* NULL: $TROUPE_HEAD, then TROUPE_DEFAULT_HEAD */
    const char *token;      /* NULL: $TROUPE_TOKEN, then none */
    uint32_t timeout_ms;    /* per-call deadline; 0 = 10000 */
} troupe_client_opts;

/* troupe_client_open connects to the head. Returns UNAVAILABLE ("cannot reach
 * URL: ...") when nothing listens there. On OK, *out is freed with
 * troupe_client_close. opts may be NULL for all defaults. */
TROUPE_API troupe_status troupe_client_open(troupe_client **out, const troupe_client_opts *opts,
                                            troupe_error *err);

/* troupe_client_close disconnects and frees; NULL is a no-op. No call may be
 * in flight on c. */
TROUPE_API void troupe_client_close(troupe_client *c);

/* troupe_client_url returns the head URL in use; valid until close. */
TROUPE_API const char *troupe_client_url(const troupe_client *c);

/* troupe_ping round-trips len bytes (idempotent). */
TROUPE_API troupe_status troupe_ping(troupe_client *c, const void *data, size_t len, troupe_error *err);

typedef enum troupe_node_state {
    TROUPE_NODE_UNKNOWN = 0,
    TROUPE_NODE_ALIVE = 1,
    TROUPE_NODE_SUSPECT = 2,
    TROUPE_NODE_DEAD = 3,
} troupe_node_state;

/* troupe_node_state_name returns "ALIVE", "SUSPECT", "DEAD" or "UNKNOWN". */
TROUPE_API const char *troupe_node_state_name(int state);

typedef struct troupe_gpu {
    uint32_t index;
    const char *model;
    uint64_t memory_bytes;
    const char *uuid;
    int simulated;
} troupe_gpu;

typedef struct troupe_label {
    const char *key;
    const char *value;
} troupe_label;

typedef struct troupe_node {
    uint64_t id;
    const char *name;
    const char *hostname;
    const char *address;
    troupe_node_state state;
    const char *reason;      /* why it is in this state */
    int64_t registered_ms;   /* unix ms */
    int64_t last_seen_ms;
    uint32_t pid;
    uint32_t gpus_free;
    size_t n_gpus;
    const troupe_gpu *gpus;
    size_t n_labels;
    const troupe_label *labels;
} troupe_node;

typedef struct troupe_node_list {
    size_t count;
    const troupe_node *nodes; /* all strings and arrays live inside the list */
} troupe_node_list;

/* troupe_list_nodes lists registered nodes (DEAD ones only when include_dead)
 * in id order. Free *out with troupe_node_list_free. Idempotent. */
TROUPE_API troupe_status troupe_list_nodes(troupe_client *c, int include_dead, troupe_node_list **out,
                                           troupe_error *err);

/* troupe_node_list_free frees a list; NULL is a no-op. */
TROUPE_API void troupe_node_list_free(troupe_node_list *list);

typedef struct troupe_cluster {
    uint32_t nodes_alive, nodes_suspect, nodes_dead;
    uint32_t gpus_total, gpus_free;
    char head_version[32];
    int64_t head_started_ms;
    uint64_t requests_served;
} troupe_cluster;

/* troupe_get_cluster fills *out with the cluster totals. Idempotent. */
TROUPE_API troupe_status troupe_get_cluster(troupe_client *c, troupe_cluster *out, troupe_error *err);

#ifdef __cplusplus
}
#endif
#endif
