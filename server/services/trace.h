/* trace.h - the head's built-in trace service (ReportTrace from workers,
 * GetTrace for `troupe trace`; see trace.c). Register with tr_head_add_service. */
#ifndef TR_TRACE_H
#define TR_TRACE_H

#include "head.h"

extern const tr_head_service tr_trace_service;

#endif
