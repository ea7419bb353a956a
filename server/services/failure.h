/* failure.h - the head's failure-report service (ReportFailure: a worker says
 * why it is failing; see failure.c). Register with tr_head_add_service. */
#ifndef TR_FAILURE_H
#define TR_FAILURE_H

#include "head.h"

extern const tr_head_service tr_failure_service;

#endif
