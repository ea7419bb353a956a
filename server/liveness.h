/* liveness.h - the node state machine, as a pure function (unit-tested).
 *
 *   ALIVE --(no heartbeat for suspect_after periods)--> SUSPECT
 *   SUSPECT --(heartbeat)--> ALIVE
 *   ALIVE|SUSPECT --(no heartbeat for dead_after periods)--> DEAD   (final)
 *
 * DEAD is final: the id is never reused; an agent that comes back registers
 * as a new node (Ray does the same: a node once marked dead stays dead). */
#ifndef TR_LIVENESS_H
#define TR_LIVENESS_H

#include <stdint.h>

typedef struct tr_liveness_cfg {
    int64_t heartbeat_ms;  /* period the agents are told to use */
    int64_t suspect_after; /* missed periods before SUSPECT */
    int64_t dead_after;    /* missed periods before DEAD (> suspect_after) */
} tr_liveness_cfg;

/* tr_liveness_next returns the state (troupe.v1 NodeState numbers: 1 ALIVE,
 * 2 SUSPECT, 3 DEAD) a node in `state` should be in, `silent_ms` after its last
 * heartbeat. */
int tr_liveness_next(const tr_liveness_cfg *cfg, int state, int64_t silent_ms);

#endif
