/* worker_fail.c - troupe_worker_fail: a worker tells the head why it is
 * failing (ReportFailure), so the job's reason names the first rank that
 * failed and why, not just the exit codes of the ranks that followed it.
 *
 * One report per handle reaches the head (the first reason is the cause; a
 * second one is usually a consequence). The call is bounded: a failing worker
 * must not hang on a head that is away, so the RPC has its own short
 * deadline (TROUPE_FAIL_REPORT_MS, default 5000) and is retried only within
 * it (the head keeps one report per worker attempt, so a resent call is
 * harmless). */
#include <stdlib.h>
#include <string.h>

#include "text.h"
#include "worker_int.h"

#define FAIL_REPORT_MS 5000
#define TR_FAIL_REASON_MAX 1024 /* what the head keeps (server/failure.c) */

static uint32_t report_ms(void)
{
    const char *s = getenv("TROUPE_FAIL_REPORT_MS");
    char *end = NULL;
    unsigned long v = s ? strtoul(s, &end, 10) : 0;
    return (s && *s && *end == '\0' && v > 0 && v <= 600000) ? (uint32_t)v : FAIL_REPORT_MS;
}

TROUPE_API troupe_status troupe_worker_fail(troupe_worker_ctx *w, troupe_status code, const char *reason,
                                            troupe_error *err)
{
    Troupe__V1__ReportFailureRequest req = TROUPE__V1__REPORT_FAILURE_REQUEST__INIT;
    Troupe__V1__ReportFailureReply *rep = NULL;
    Troupe__V1__WorkerRef ref;
    tr_err e = {0};
    int rv, expected = 0;
    char shown[TR_FAIL_REASON_MAX + 1];

    if (w == NULL) {
        return tr_client_finish(err, &e, tr_err_set(&e, TROUPE_INVALID_ARGUMENT, "worker handle is NULL"));
    }
    if (code == TROUPE_OK || (int)code < 0 || code > TROUPE_UNAUTHENTICATED) {
        return tr_client_finish(err, &e,
                                tr_err_set(&e, TROUPE_INVALID_ARGUMENT,
                                           "troupe_worker_fail: code %d is not a failure status", (int)code));
    }
    if (reason == NULL || reason[0] == '\0') {
        return tr_client_finish(err, &e,
                                tr_err_set(&e, TROUPE_INVALID_ARGUMENT, "troupe_worker_fail: give a reason"));
    }
    if (!atomic_compare_exchange_strong(&w->failure_reported, &expected, 1)) {
        return tr_client_finish(err, &e, TROUPE_OK); /* the first reason stands */
    }
    tr_wk_ref(w, &ref);
    req.from = &ref;
    req.code = (int32_t)code;
    /* The head takes printable ASCII only (it is shown as one line). */
    req.reason = tr_text_escape(shown, sizeof(shown), reason);
    rv = tr_rpc_client_call(w->rpc, "troupe.v1.Head/ReportFailure", &req.base,
                            &troupe__v1__report_failure_reply__descriptor, (ProtobufCMessage **)&rep, report_ms(),
                            TR_RPC_IDEMPOTENT, &e);
    if (rv == TROUPE_OK) {
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    } else {
        atomic_store(&w->failure_reported, 0); /* not recorded: a later call may try again */
        tr_err_prefix(&e, "reporting the failure to the head");
    }
    return tr_client_finish(err, &e, rv);
}

int tr_wk_failure_reported(const troupe_worker_ctx *w)
{
    return w != NULL && atomic_load(&w->failure_reported);
}
