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

/* Every failure of the shim is one line on stderr (the worker's log),
 * "troupe-node: cannot start 'CMD': REASON", then exit status 127. The
 * launcher looks for exactly this prefix to tell a start failure from a
 * command that ran and exited 127 by itself. */
#define TR_SHIM_PREFIX "troupe-node: "
#define TR_CANNOT_START "cannot start "
#define TR_SHIM_EXIT 127

#endif
