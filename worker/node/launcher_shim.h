/* launcher_shim.h - what the launcher (launcher.c) and its shim
 * (launcher_shim.c, `troupe-node --exec-worker`) agree on. Internal to
 * troupe-node. */
#ifndef TR_LAUNCHER_SHIM_H
#define TR_LAUNCHER_SHIM_H

/* TR_EXEC_PARENT_ENV carries the agent's pid to the shim, which removes it
 * before exec: the shim compares it with getppid() to notice an agent that
 * died before PR_SET_PDEATHSIG took effect (getppid() == 1 is not enough
 * under a subreaper, and wrong when the agent itself is pid 1). */
#define TR_EXEC_PARENT_ENV "TROUPE_EXEC_WORKER_PARENT"

/* TR_EXEC_LEASE_ENV names the agent's lease file for this worker (removed
 * before exec, like the parent pid). The file holds one number: the
 * CLOCK_MONOTONIC millisecond until which the agent's lease runs. The shim
 * reads it every TR_LEASE_CHECK_MS and, once it has passed, kills the worker
 * and everything it started: an agent cut off from the head (or frozen) has
 * its workers fenced even when it cannot act itself. No file: no lease. */
#define TR_EXEC_LEASE_ENV "TROUPE_EXEC_WORKER_LEASE"
#define TR_LEASE_CHECK_MS 100

/* Every failure of the shim is one line on stderr (the worker's log),
 * "troupe-node: cannot start 'CMD': REASON", then exit status 127. The
 * launcher looks for exactly this prefix to tell a start failure from a
 * command that ran and exited 127 by itself. */
#define TR_SHIM_PREFIX "troupe-node: "
/* The shim's line when it fences its worker because the agent's lease ran
 * out; the launcher finds it in the log to say why the worker got SIGKILL. */
#define TR_SHIM_LEASE_LINE "the agent's lease ran out (no contact with the head)"
#define TR_CANNOT_START "cannot start "
#define TR_SHIM_EXIT 127

#endif
