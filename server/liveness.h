/* liveness.h - the node state machine, as a pure function (unit-tested).
 *
 *   ALIVE --(no heartbeat for suspect_after periods)--> SUSPECT
 *   SUSPECT --(heartbeat)--> ALIVE
 *   ALIVE|SUSPECT --(no heartbeat for dead_after periods)--> DEAD   (final)
 *
 * DEAD is final: the id is never reused; an agent that comes back registers
 * as a new node (Ray does the same: a node once marked dead stays dead).
 * LEFT (4: the agent deregistered on purpose) is final in the same way. */
#ifndef TR_LIVENESS_H
#define TR_LIVENESS_H

#include <stdint.h>

typedef struct tr_liveness_cfg {
    int64_t heartbeat_ms;  /* period the agents are told to use */
    int64_t suspect_after; /* missed periods before SUSPECT */
    int64_t dead_after;    /* missed periods before DEAD (> suspect_after) */
    int64_t lease_ms;      /* the agents' lease; 0 = automatic (tr_liveness_lease_ms) */
    int64_t disconnect_ms; /* a closed connection not re-established this long: DEAD */
} tr_liveness_cfg;

/* TR_LEASE_MARGIN_MS: the least time between the end of an agent's lease and
 * the head's DEAD verdict: the worker shims look at the lease every 100 ms and
 * SIGKILL takes a moment, so by the time a node is DEAD its workers are gone. */
#define TR_LEASE_MARGIN_MS 400

/* tr_liveness_lease_ms returns the lease the agents are told: with no
 * answered heartbeat for that long they kill their workers. It is shorter
 * than the DEAD timeout (heartbeat_ms * dead_after) by a margin of a quarter
 * of it, at least two heartbeat periods and TR_LEASE_MARGIN_MS, so an agent
 * that cannot reach the head has fenced itself before the head may call it
 * DEAD and place its work elsewhere. An explicit lease_ms is used as given
 * (the config check keeps it TR_LEASE_MARGIN_MS below the DEAD timeout). */
int64_t tr_liveness_lease_ms(const tr_liveness_cfg *cfg);

/* tr_liveness_next returns the state (troupe.v1 NodeState numbers: 1 ALIVE,
 * 2 SUSPECT, 3 DEAD) a node in `state` should be in, `silent_ms` after its last
 * heartbeat. */
int tr_liveness_next(const tr_liveness_cfg *cfg, int state, int64_t silent_ms);

#endif
