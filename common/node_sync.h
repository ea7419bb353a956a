/* node_sync.h - the NodeSync long poll's timing, shared by the agent
 * (worker/node/sync.c), the head (server/jobs_sync.c) and the simulated
 * agents of bench/hosts, so that the three cannot drift apart. */
#ifndef TROUPE_NODE_SYNC_H
#define TROUPE_NODE_SYNC_H

/* How long an agent's poll waits at the head. Long, because at 10,000
 * agents the polls were a sixth of the head's calls at 5 s: an idle poll
 * costs the head a call per wait per agent. A poll made stale by a new
 * registration is cancelled by the agent, not waited out. */
#define TR_NODE_SYNC_WAIT_MS 50000u

/* The longest wait the head grants, whatever a poll asks (the default of
 * the head's node_sync_max_ms, which may only lower it). */
#define TR_NODE_SYNC_WAIT_MAX_MS 60000u

/* What an agent adds to the wait for its call's deadline (the head answers
 * at the wait's end; the margin covers the trip and a busy head). */
#define TR_NODE_SYNC_MARGIN_MS 3000u

#endif
