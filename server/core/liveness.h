/* liveness.h - the node state machine, as a pure function (unit-tested).
 *
 *   ALIVE --(no heartbeat for suspect_after periods)--> SUSPECT
 *   SUSPECT --(heartbeat)--> ALIVE
 *   ALIVE|SUSPECT --(no heartbeat for the DEAD timeout)--> DEAD   (final)
 *
 * DEAD is final: the id is never reused; an agent that comes back registers
 * as a new node (Ray does the same: a node once marked dead stays dead).
 * LEFT (4: the agent deregistered on purpose) is final in the same way.
 *
 * The DEAD timeout is fixed in milliseconds (heartbeat_ms x dead_after), and
 * so is the agents' lease. The period the head asks for is not: with more
 * agents than max_beats_per_s allows at heartbeat_ms, it is lengthened
 * (tr_liveness_period_ms), as Nomad lengthens its heartbeat TTL with the
 * cluster (max_heartbeats_per_second) and Kubernetes renews node leases
 * every 10 s. A network cut is then still found in the same time; only the
 * number of heartbeats inside that time falls (at least 4, and 3 per lease). */
#ifndef TR_LIVENESS_H
#define TR_LIVENESS_H

#include <stdint.h>

typedef struct tr_liveness_cfg {
    int64_t heartbeat_ms;    /* the shortest period agents are told */
    int64_t suspect_after;   /* missed periods before SUSPECT */
    int64_t dead_after;      /* DEAD timeout = heartbeat_ms x dead_after (> suspect_after) */
    int64_t lease_ms;        /* the agents' lease; 0 = automatic (tr_liveness_lease_ms) */
    int64_t disconnect_ms;   /* a closed connection not re-established this long: DEAD */
    int64_t max_beats_per_s; /* heartbeats a second the head asks for at most; 0 = no bound */
} tr_liveness_cfg;

/* TR_LEASE_MARGIN_MS: the least time between the end of an agent's lease and
 * the head's DEAD verdict: the worker shims look at the lease every 100 ms and
 * SIGKILL takes a moment, so by the time a node is DEAD its workers are gone. */
#define TR_LEASE_MARGIN_MS 400

/* tr_liveness_dead_ms: the DEAD timeout, heartbeat_ms x dead_after. */
int64_t tr_liveness_dead_ms(const tr_liveness_cfg *cfg);

/* tr_liveness_lease_ms returns the lease the agents are told: with no
 * answered heartbeat for that long they kill their workers. It is shorter
 * than the DEAD timeout by a margin of a quarter of it, at least two
 * heartbeat_ms periods and TR_LEASE_MARGIN_MS, so an agent that cannot reach
 * the head has fenced itself before the head may call it DEAD and place its
 * work elsewhere (the agent counts its lease from the sending of its last
 * answered heartbeat, which the head saw no earlier). An explicit lease_ms
 * is used as given (the config check keeps it TR_LEASE_MARGIN_MS below the
 * DEAD timeout). It does not depend on the period told. */
int64_t tr_liveness_lease_ms(const tr_liveness_cfg *cfg);

/* tr_liveness_period_ms returns the period to tell each of `nodes` agents:
 * heartbeat_ms, or longer so that together they send at most
 * max_beats_per_s, rounded up to a step of a quarter of heartbeat_ms, and
 * never beyond the longest period that keeps at least four heartbeats in the
 * DEAD timeout, three in the lease and one between SUSPECT and DEAD. */
int64_t tr_liveness_period_ms(const tr_liveness_cfg *cfg, int64_t nodes);

/* tr_liveness_next returns the state (troupe.v1 NodeState numbers: 1 ALIVE,
 * 2 SUSPECT, 3 DEAD) a node in `state` should be in, `silent_ms` after its last
 * heartbeat, when it was told to beat every `period_ms` (suspicion counts in
 * that period, never shorter than heartbeat_ms; DEAD in fixed time). */
int tr_liveness_next(const tr_liveness_cfg *cfg, int state, int64_t silent_ms, int64_t period_ms);

#endif
