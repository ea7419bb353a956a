/* rdzv.h - the head's rendezvous service (NCCL unique IDs, barriers,
 * all-gathers between the ranks of a communicator). Register it with
 * tr_head_add_service(h, &tr_rdzv_service, ...) before tr_head_start. */
#ifndef TR_RDZV_H
#define TR_RDZV_H

#include "head.h"

extern const tr_head_service tr_rdzv_service;

#endif
