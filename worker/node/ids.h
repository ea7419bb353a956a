/* ids.h - the user and group ids troupe-node's workers run under.
 *
 * A worker must never run as the agent: the agent holds the node credential,
 * every job's worker credential and the logs, and a worker that shares its uid
 * can read them all (and ptrace the agent). So an agent started as root runs
 * each worker under an identity of its own:
 *
 *   dynamic  (default) every worker gets a uid of its own and every job a gid
 *            of its own on this host, both taken from --worker-uid-range
 *            (default TR_IDS_DEFAULT_RANGE, above the 16-bit ids that
 *            distributions and systemd's DynamicUser hand out), as systemd's
 *            DynamicUser does. Ranks of one job share files through the job's
 *            gid (the worker's umask is 007); other jobs cannot reach them.
 *   user     --worker-user NAME: every worker runs as NAME (its primary group,
 *            no supplementary groups). Separates workers from the agent, not
 *            jobs from each other: for one trusted tenant.
 *   shared   --shared-uid: workers run as the agent (the only choice without
 *            root). They can read the node credential and every other job's
 *            credential on the node; the operator accepted that.
 *   none     not root and no --shared-uid: the agent refuses to run workers
 *            (each fails to start, saying why), and says so at start and in
 *            `troupe nodes`.
 *
 * An id is held host-wide while in use by an exclusive flock on the file
 * --worker-id-dir/ID (the lock goes with the agent's process, so a crashed
 * agent frees its ids), so two agents on one host never hand out the same one;
 * ids that name a user or group in the system's databases are skipped.
 *
 * Not thread-safe: the agent's main loop owns it. */
#ifndef TR_IDS_H
#define TR_IDS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

#define TR_IDS_DEFAULT_RANGE "2147000000-2147065535"
#define TR_IDS_DEFAULT_DIR "/run/troupe-node/ids"

typedef enum tr_ids_mode {
    TR_IDS_NONE = 0,
    TR_IDS_SHARED = 1,
    TR_IDS_USER = 2,
    TR_IDS_DYNAMIC = 3,
} tr_ids_mode;

typedef struct tr_ids tr_ids;

typedef struct tr_ids_opts {
    int shared_uid;          /* --shared-uid */
    const char *worker_user; /* --worker-user, NULL/"" = none */
    const char *uid_range;   /* --worker-uid-range "FIRST-LAST", NULL = the default */
    const char *lock_dir;    /* --worker-id-dir, NULL = the default */
} tr_ids_opts;

/* tr_ids_open decides the mode from the options and the agent's euid.
 * INVALID_ARGUMENT for a bad range, an unknown user, or user root;
 * FAILED_PRECONDITION when --worker-user is given without root. Free with
 * tr_ids_close (NULL is a no-op). */
int tr_ids_open(const tr_ids_opts *o, tr_ids **out, tr_err *err);
void tr_ids_close(tr_ids *ids);

tr_ids_mode tr_ids_get_mode(const tr_ids *ids);

/* tr_ids_describe writes the one-line summary the agent logs at start and
 * registers with the head (`troupe nodes`), e.g. "per-worker uid
 * 2147000000-2147065535" or "none: runs as uid 1000 without root; refuses
 * jobs (--shared-uid to accept the risk)". */
void tr_ids_describe(const tr_ids *ids, char *buf, size_t size);

/* tr_ids_acquire gives the identity (job_id, worker, attempt) runs under.
 * *switch_ids is 0 when the worker runs as the agent (shared mode). Mode none:
 * FAILED_PRECONDITION with the reason for the worker's record. Dynamic mode:
 * RESOURCE_EXHAUSTED when the range is used up. */
int tr_ids_acquire(tr_ids *ids, uint64_t job_id, const char *worker, uint32_t attempt, int *switch_ids,
                   uid_t *uid, gid_t *gid, tr_err *err);

/* tr_ids_release gives back what tr_ids_acquire took for (job_id, worker,
 * attempt), once nothing of the worker runs any more; the job's gid goes back
 * with its last worker on this agent. Unknown triples are ignored. */
void tr_ids_release(tr_ids *ids, uint64_t job_id, const char *worker, uint32_t attempt);

#endif
