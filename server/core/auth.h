/* auth.h - troupe-head's credentials: who may call what.
 *
 * Four kinds of credential (rpc.h names their scopes):
 *   admin   the head's configured `token` (token_file / TROUPE_TOKEN); the RPC
 *           layer compares it in constant time itself. Also mintable.
 *   user,   minted by the admin (troupe token create --scope user|node|admin
 *   node,   [--ttl]); the head keeps only a SHA-256 of each secret, in
 *   admin   STATE_DIR/credentials (0600), with its scope and expiry, and for
 *           a node credential the node name it is bound to and how many names
 *           it may register. Text: "tr1.u.ID.SECRET" / "tr1.n.ID.SECRET" /
 *           "tr1.a.ID.SECRET" (SECRET: 64 hex).
 *   worker  minted per worker and attempt: "tr1.w.JOB.ATTEMPT.INDEX.MAC" where
 *           INDEX is the worker's place in the job's record and MAC is
 *           HMAC-SHA256(worker key, "tr1.w.JOB.ATTEMPT.INDEX"); the key is 32
 *           random bytes in STATE_DIR/worker.key (0600), so nothing per
 *           credential is stored and a restarted head still knows them. A
 *           worker credential works only while its job is not finished and
 *           its attempt is the job's current one, and speaks only for its
 *           own worker (tr_rpc_require_worker): a rank cannot forge another's
 *           reports.
 * Secrets never reach a log line. */
#ifndef TR_AUTH_H
#define TR_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "rpc.h"

struct tr_head;
struct tr_head_node;
typedef struct tr_auth tr_auth;

#define TR_AUTH_TOKEN_MAX 160 /* longest minted credential text, with its NUL */

/* tr_auth_open loads (or creates) the worker key and the minted-credential
 * file under state_dir. On OK *out is freed with tr_auth_close. */
int tr_auth_open(const char *state_dir, tr_auth **out, tr_err *err);
void tr_auth_close(tr_auth *a); /* NULL is a no-op */

/* tr_auth_worker_credential writes the credential of the worker at index in
 * job_id's record, at attempt, into buf (TR_AUTH_TOKEN_MAX bytes). */
void tr_auth_worker_credential(const tr_auth *a, uint64_t job_id, uint32_t attempt, uint32_t index, char *buf,
                               size_t size);

/* tr_head_authenticate is the RPC layer's tr_rpc_auth_fn (user = tr_head *).
 * Caller holds no head lock. It does not take h->mu, but for the first
 * worker credential of a job it has not heard of since the head started
 * (recovered from the store): a worker's job is checked against the copy of
 * the workers that tr_auth_follow_jobs keeps. */
int tr_head_authenticate(void *user, const char *token, tr_rpc_principal *out, tr_err *err);

/* tr_auth_follow_jobs subscribes h->auth's copy of the workers to the job
 * events (once per head struct; before the head serves). */
int tr_auth_follow_jobs(struct tr_head *h, tr_err *err);

/* tr_head_node_allowed returns 1 when the caller may act for node hn: any
 * credential but a node one, or the node credential that registered it.
 * Otherwise answers PERMISSION_DENIED and returns 0. Caller holds h->mu. */
int tr_head_node_allowed(tr_rpc_call *call, const struct tr_head_node *hn);

/* tr_head_node_may_register returns 1 when a node credential may register
 * (name, node_id): neither the node id it asks to keep nor a live node of
 * that name belongs to another credential, and the name is one it was minted
 * for (its --node NAME, else a name it registered before, or a new one while
 * it has registered fewer than its max_nodes, 1 by default). Otherwise
 * answers PERMISSION_DENIED and returns 0. Caller holds h->mu. */
int tr_head_node_may_register(tr_rpc_call *call, struct tr_head *h, const char *name, uint64_t node_id);

/* tr_head_names_bound counts n's owner and name in the index of bound names
 * (delta 1: n joined the node table or gained its owner; -1: it is about to
 * be replaced or freed); a record without an owner is not counted. Aborts
 * when out of memory: a partial index would let a credential past --max-nodes.
 * Caller holds h->mu. */
struct Troupe__V1__Node;
void tr_head_names_bound(struct tr_head *h, const struct Troupe__V1__Node *n, int delta);

/* tr_head_node_bind records the caller's credential as hn's owner in its record
 * (persisted with it: the caller has marked hn dirty). Caller holds h->mu. */
void tr_head_node_bind(tr_rpc_call *call, struct tr_head *h, struct tr_head_node *hn);

struct tr_head_job;

/* tr_head_caller_name writes the caller as a job's owner (Job.owner):
 * "user:ID", "admin:ID", "admin", or "" on a head without auth. */
void tr_head_caller_name(tr_rpc_call *call, const struct tr_head *h, char *buf, size_t size);

/* tr_head_may_manage returns 1 when the caller may stop or delete hj: an
 * admin (the head's token or a minted admin credential), or the user
 * credential that submitted it. Otherwise sets err (PERMISSION_DENIED,
 * naming the owner) and returns 0. Caller holds h->mu. */
int tr_head_may_manage(tr_rpc_call *call, const struct tr_head_job *hj, tr_err *err);

/* tr_auth_scope_of maps "user", "node", "admin" to TR_SCOPE_*; 0 otherwise. */
unsigned tr_auth_scope_of(const char *s);

/* tr_auth_minted: what tr_auth_mint made (never the secret). */
typedef struct tr_auth_minted {
    uint64_t id;
    int64_t expires_ms; /* wall clock; 0 = never */
    char node[64];      /* a node credential's node, or "" */
    uint32_t max_nodes; /* a node credential's bound, else 0 */
} tr_auth_minted;

/* tr_auth_mint makes a credential of scope (TR_SCOPE_USER, _NODE or _ADMIN;
 * node and max_nodes for a node credential only, max_nodes 0 = 1), living
 * ttl_s seconds (0 = for ever), saves it, and writes its text to token (size
 * TR_AUTH_TOKEN_MAX); not saved, it is not minted (err says why). Any thread. */
int tr_auth_mint(tr_auth *a, unsigned scope, const char *node, uint32_t max_nodes, uint64_t ttl_s, char *token,
                 size_t size, tr_auth_minted *out, tr_err *err);
/* tr_auth_revoke forgets credential id at once and on disk: NOT_FOUND when
 * there is none; a failed save keeps it valid (err says why). Any thread. */
int tr_auth_revoke(tr_auth *a, uint64_t id, tr_err *err);

#endif
