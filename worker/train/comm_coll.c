/* comm_coll.c - the communicator on the worker API's CPU collective (see
 * comm.h and troupe/worker.h): host memory only, fp32 sums in ring order, so
 * every rank ends with the same bits. */
#include "comm_troupe.h"

#include <stdlib.h>

#include "log.h"

typedef struct coll_comm {
    tr_comm base;
    troupe_coll *c;
} coll_comm;

static int coll_fail(tr_comm *c, troupe_status st, const troupe_error *e, const char *what, tr_err *err)
{
    c->failed = 1;
    return tr_err_set(err, st, "%s: %s", what, e->message[0] ? e->message : troupe_strerror(st));
}

static int coll_allreduce(tr_comm *c, float *buf, size_t count, tr_comm_op op, tr_err *err)
{
    coll_comm *cc = (coll_comm *)c;
    troupe_error e = {0};
    troupe_status st = troupe_coll_allreduce(cc->c, buf, count, TROUPE_F32, TROUPE_SUM, &e);

    if (st != TROUPE_OK) {
        return coll_fail(c, st, &e, "CPU collective", err);
    }
    if (op == TR_COMM_MEAN && c->size > 1) {
        /* A division, not a multiply by 1/size: the same rounding as one
         * process averaging size equal parts. */
        for (size_t i = 0; i < count; i++) {
            buf[i] /= (float)c->size;
        }
    }
    return TROUPE_OK;
}

static int coll_reduce_scatter(tr_comm *c, float *buf, size_t count, tr_comm_op op, tr_err *err)
{
    troupe_error e = {0};
    troupe_status st =
        troupe_coll_reduce_scatter(((coll_comm *)c)->c, buf, count, TROUPE_F32, TROUPE_SUM, &e);
    size_t per = count / (size_t)c->size;

    if (st != TROUPE_OK) {
        return coll_fail(c, st, &e, "CPU collective", err);
    }
    if (op == TR_COMM_MEAN && c->size > 1) {
        for (size_t i = per * (size_t)c->rank; i < per * (size_t)(c->rank + 1); i++) {
            buf[i] /= (float)c->size; /* as in coll_allreduce */
        }
    }
    return TROUPE_OK;
}

static int coll_allgather(tr_comm *c, float *buf, size_t count, tr_err *err)
{
    troupe_error e = {0};
    troupe_status st = troupe_coll_allgather(((coll_comm *)c)->c, buf, count, TROUPE_F32, &e);
    return st == TROUPE_OK ? TROUPE_OK : coll_fail(c, st, &e, "CPU collective", err);
}

static int coll_broadcast(tr_comm *c, void *buf, size_t bytes, int root, tr_err *err)
{
    troupe_error e = {0};
    troupe_status st = troupe_coll_broadcast(((coll_comm *)c)->c, buf, bytes, (uint32_t)root, &e);
    return st == TROUPE_OK ? TROUPE_OK : coll_fail(c, st, &e, "CPU collective", err);
}

static int coll_barrier(tr_comm *c, tr_err *err)
{
    troupe_error e = {0};
    troupe_status st = troupe_coll_barrier(((coll_comm *)c)->c, &e);
    return st == TROUPE_OK ? TROUPE_OK : coll_fail(c, st, &e, "CPU collective", err);
}

static void coll_close(tr_comm *c, int failed)
{
    coll_comm *cc = (coll_comm *)c;
    /* After a failure the handle refuses everything; closing it still says
     * goodbye to whichever neighbour is left, which is what they need to
     * fail fast instead of at their deadline. */
    (void)failed;
    troupe_coll_close(cc->c);
    free(cc);
}

static void coll_abort(tr_comm *c)
{
    coll_comm *cc = (coll_comm *)c;
    troupe_coll_abort(cc->c);
    free(cc);
}

static void coll_set_timeout(tr_comm *c, uint32_t ms)
{
    troupe_coll_set_timeout(((coll_comm *)c)->c, ms);
}

static const tr_comm_ops coll_ops = {
    .name = "cpu-coll",
    .allreduce = coll_allreduce,
    .broadcast = coll_broadcast,
    .barrier = coll_barrier,
    .allreduce_device = NULL,
    .wait_device = NULL,
    .close = coll_close,
    .set_timeout = coll_set_timeout,
    .reduce_scatter = coll_reduce_scatter,
    .allgather = coll_allgather,
    .abort = coll_abort,
};

int tr_comm_coll_open(troupe_worker_ctx *w, uint32_t init_ms, uint32_t op_ms, tr_comm **out, tr_err *err)
{
    return tr_comm_coll_open_named(w, NULL, init_ms, op_ms, 0, out, err);
}

int tr_comm_coll_open_named(troupe_worker_ctx *w, const char *comm, uint32_t init_ms, uint32_t op_ms, int quiet,
                            tr_comm **out, tr_err *err)
{
    troupe_coll_opts o = {.timeout_ms = init_ms, .no_fail_report = quiet};
    troupe_error e = {0};
    coll_comm *cc;
    troupe_status st;

    *out = NULL;
    if ((cc = calloc(1, sizeof(*cc))) == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot allocate the communicator");
    }
    st = troupe_worker_coll_open(w, comm, &cc->c, &o, &e);
    if (st != TROUPE_OK) {
        free(cc);
        return tr_err_set(err, st, "joining the %s%s%s CPU collective (dp.init_timeout_ms=%u): %s",
                          comm ? "communicator " : "group's", comm ? comm : "", comm ? "'s" : "", init_ms,
                          e.message[0] ? e.message : troupe_strerror(st));
    }
    troupe_coll_set_timeout(cc->c, op_ms);
    cc->base = (tr_comm){.ops = &coll_ops,
                         .rank = (int)troupe_coll_rank(cc->c),
                         .size = (int)troupe_coll_size(cc->c),
                         .timeout_ms = op_ms,
                         .reports_failures = !quiet};
    *out = &cc->base;
    return TROUPE_OK;
}
