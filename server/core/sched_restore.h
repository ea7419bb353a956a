/* sched_restore.h - re-reserve a stored placement (head restart recovery). */
#ifndef TR_SCHED_RESTORE_H
#define TR_SCHED_RESTORE_H

#include "sched/sched.h"

/* tr_sched_restore links a placement for job_id made of exactly these
 * workers and vnodes (as stored), taking their GPUs. Returns OK; ABORTED when
 * a GPU is already taken or a node is unknown (nothing reserved then);
 * DATA_LOSS when the worker count does not match spec; ALREADY_EXISTS. */
int tr_sched_restore(tr_sched *s, uint64_t job_id, const tr_sched_job_spec *spec,
                     const tr_sched_worker *workers, size_t nworkers, const tr_sched_vnode *vnodes,
                     size_t nvnodes, tr_err *err);

/* tr_sched_relocate places CPU-only worker idx of job_id's placement on
 * another node, chosen as the scheduler places one such worker of the spec
 * (ALIVE, labels, free CPU), and moves its CPU share there from where it
 * was; *node_id is the node. TROUPE_UNIMPLEMENTED for a GPU worker;
 * placement errors as tr_sched_place (nothing changed then). */
int tr_sched_relocate(tr_sched *s, uint64_t job_id, const tr_sched_job_spec *spec, size_t idx,
                      uint64_t *node_id, tr_err *err);

#endif
