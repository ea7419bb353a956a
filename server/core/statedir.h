/* statedir.h - the state dir at start (statedir.c). */
#ifndef TR_STATEDIR_H
#define TR_STATEDIR_H

#include <stdint.h>

#include "err.h"

/* Defined in head.h; named here so this header stands alone (C11 allows
 * the typedef twice). */
typedef struct tr_head tr_head;

/* State dir checks at start (statedir.c): the exclusive lock (FAILED_PRECONDITION
 * naming the holder's pid when another head has it), and ids that never go
 * backwards: tr_head_id_seen raises the counter past an id found on disk. */
int tr_head_lock_state_dir(tr_head *h, tr_err *err);
void tr_head_unlock_state_dir(tr_head *h);
void tr_head_id_seen(tr_head *h, int table, uint64_t id, const char *where);
void tr_head_ids_past_logs(tr_head *h);

#endif
