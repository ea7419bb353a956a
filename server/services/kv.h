/* kv.h - the head's key-value store for a job's workers (TCPStore's
 * semantics, kv.c). Register it with tr_head_add_service(h, &tr_kv_service,
 * ...) before tr_head_start. */
#ifndef TR_KV_H
#define TR_KV_H

#include "head.h"

extern const tr_head_service tr_kv_service;

#endif
