/* proctree.h - a worker's process tree, found through /proc.
 *
 * A worker may start children that leave its process group (setsid, a daemon
 * that double-forks). Its shim is their child subreaper (PR_SET_CHILD_SUBREAPER,
 * launcher_shim.c), so every descendant stays in the tree under the shim,
 * whatever group or session it moved to: signalling the tree reaches them all,
 * where kill(-pgid) would miss them. Async-signal-safe it is not; it
 * allocates. Internal to troupe-node. */
#ifndef TR_PROCTREE_H
#define TR_PROCTREE_H

#include <sys/types.h>

/* tr_proctree_signal sends sig to every live (not zombie) descendant of root,
 * not to root itself. For SIGKILL it scans again until none is left (a tree
 * that forks while being killed), up to a few rounds. Returns how many
 * processes it signalled in the last round (0: none was left). */
int tr_proctree_signal(pid_t root, int sig);

/* tr_proctree_stopped returns 1 when a child of root (the worker's command
 * under its shim) is stopped by a signal (state T, e.g. SIGSTOP), else 0. */
int tr_proctree_stopped(pid_t root);

#endif
