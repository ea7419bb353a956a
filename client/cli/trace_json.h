/* trace_json.h - writing a troupe_trace as Chrome/Perfetto trace-event JSON. */
#ifndef TR_CLI_TRACE_JSON_H
#define TR_CLI_TRACE_JSON_H

#include <stdint.h>
#include <stdio.h>

#include "troupe/client.h"

/* tr_cli_trace_json writes {"displayTimeUnit":"ms","traceEvents":[...],
 * "otherData":{...}}: per worker (pid = global rank, newest attempt's name)
 * process_name and process_sort_index metadata, then one complete ("X")
 * event per span, sorted by (pid, tid, start, longest first) so that nested
 * spans follow their parent; ts relative to the earliest span, whose unix us
 * is otherData.origin_unix_us; otherData.workers gives each worker attempt's
 * clock offset, probe round trip, spans and drops. 0, or -1 out of memory. */
int tr_cli_trace_json(FILE *out, uint64_t job_id, const troupe_trace *t);

#endif
