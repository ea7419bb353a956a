/* test_elastic.c - elastic groups on the head (elastic.c): the rules of a
 * shrink, of falling below min_workers, of a restart after a shrink and of
 * growing back, checked on the job record.
 *
 * A real head on an ipc:// socket with one registered node of 4 GPUs (no
 * agent): a job of one elastic group of 3 one-GPU workers is placed; worker
 * ends are then written into the record under h->mu as the agent's reports
 * would, and tr_jobs_worker_ended decides, as it does for a report. */
#include <pthread.h>
#include <unistd.h>

#include "elastic.h"
#include "head.h"
#include "head_fixture.h"
#include "jobs.h"
#include "rdzv_int.h"
#include "rpc.h"
#include "test_helpers.h"
#include "troupe/client.h"
#include "util.h"

typedef struct fix {
    tr_head h;
    char dir[256], url[300];
    tr_rpc_client *agent;
    troupe_client *c;
} fix;

static void fix_start(fix *f, const char *tag, int64_t backoff_ms)
{
    troupe_client_opts co = {0};
    troupe_error terr;
    tr_err err;

    tr_fixture_head_config(&f->h, f->dir, sizeof(f->dir), f->url, sizeof(f->url), tag);
    f->h.cfg.restart_backoff_ms = backoff_ms;
    f->h.cfg.dead_after = 1000; /* no agent heartbeats: the node must stay ALIVE for the test */
    TR_ASSERT_OK(tr_head_start(&f->h, &err), &err);
    f->agent = tr_fixture_register_node(f->url);
    co.head_url = f->url;
    co.timeout_ms = 20000;
    assert_int_equal(troupe_client_open(&f->c, &co, &terr), TROUPE_OK);
}

static void fix_stop(fix *f)
{
    troupe_client_close(f->c);
    tr_rpc_client_close(f->agent);
    tr_head_stop(&f->h);
    tr_cfg_free(tr_head_config_table, &f->h.cfg);
}

static uint64_t submit(fix *f, int min, int max, int restarts)
{
    char yaml[512];
    troupe_error terr;
    uint64_t id = 0;
    int n = snprintf(yaml, sizeof(yaml),
                     "name: el\ncluster: {nodes: [4]}\nrestart: {max_restarts: %d}\n"
                     "groups: [{name: dp, workers: 3, resources: {gpu: 1}, command: [sleep, '60'],\n"
                     "          elastic: {min_workers: %d, max_workers: %d}}]\n",
                     restarts, min, max);
    if (troupe_submit_yaml(f->c, yaml, (size_t)n, "el.yaml", NULL, &id, &terr) != TROUPE_OK) {
        fail_msg("submit: %s: %s", troupe_strerror(terr.code), terr.message);
    }
    return id;
}

/* running marks every worker RUNNING (the agent's first report). */
static tr_head_job *running(fix *f, uint64_t id)
{
    tr_head_job *hj = tr_jobs_find(&f->h, id);
    assert_non_null(hj);
    assert_int_equal(hj->j->state, TROUPE__V1__JOB_STATE__JOB_RUNNING);
    assert_int_equal(hj->j->n_workers, 3);
    for (size_t i = 0; i < 3; i++) {
        hj->j->workers[i]->state = TROUPE__V1__WORKER_STATE__WORKER_RUNNING;
        hj->j->workers[i]->started_ms = tr_wall_ms();
    }
    return hj;
}

/* killed: worker i was killed by SIGKILL, as its agent reports. */
static void killed(fix *f, tr_head_job *hj, size_t i)
{
    Troupe__V1__WorkerInfo *w = hj->j->workers[i];
    w->state = TROUPE__V1__WORKER_STATE__WORKER_EXITED;
    w->signal = 9;
    w->ended_ms = tr_wall_ms();
    tr_jobs_worker_ended(&f->h, hj, i);
}

static void ranks_are(const tr_head_job *hj, int r0, int r1, int r2)
{
    int want[3] = {r0, r1, r2};
    for (size_t i = 0; i < 3; i++) {
        const Troupe__V1__WorkerInfo *w = hj->j->workers[i];
        if (want[i] < 0) {
            assert_true(w->removed);
        } else {
            assert_false(w->removed);
            assert_int_equal(w->member_rank, want[i]);
        }
    }
}

/* A rank killed while min_workers remain shrinks the group: the survivors
 * renumbered, a new epoch, the change recorded; the rendezvous refuses the
 * removed worker and ranks the survivors densely. One more loss goes below
 * min_workers: without restarts the job fails, naming that worker. */
static void shrink_then_below_min(void **state)
{
    fix f;
    tr_head_job *hj;
    tr_rdzv_view v;
    tr_err err;
    uint64_t id;

    (void)state;
    fix_start(&f, "elastic-shrink", 1000);
    id = submit(&f, 2, 2, 0);
    pthread_mutex_lock(&f.h.mu);
    hj = running(&f, id);
    assert_int_equal(tr_elastic_epoch(hj->j, "dp"), 0);
    killed(&f, hj, 1);
    assert_int_equal(hj->j->state, TROUPE__V1__JOB_STATE__JOB_RUNNING);
    ranks_are(hj, 0, -1, 1);
    assert_int_equal(hj->j->groups[0]->world_size, 2);
    assert_int_equal(tr_elastic_epoch(hj->j, "dp"), 1);
    assert_int_equal(hj->j->n_membership, 1);
    assert_string_equal(hj->j->membership[0]->kind, "SHRUNK");
    assert_int_equal(hj->j->membership[0]->from_size, 3);
    assert_int_equal(hj->j->membership[0]->to_size, 2);
    TR_ASSERT_CONTAINS(hj->j->membership[0]->text, "SHRUNK dp 3 -> 2: rank 1 (job1-dp-1 on n1) killed by SIGKILL; epoch 1");
    assert_int_equal(hj->j->restarts, 0);

    assert_int_equal(tr_rdzv_view_of(hj->j, "", hj->j->workers[2], &v, &err), TROUPE_OK);
    assert_int_equal(v.rank, 1);
    assert_int_equal(v.size, 2);
    assert_int_equal(v.epoch, 1);
    assert_int_equal(tr_rdzv_view_of(hj->j, "", hj->j->workers[1], &v, &err), TROUPE_FAILED_PRECONDITION);
    TR_ASSERT_CONTAINS(err.msg, "no longer a member of elastic group dp");

    killed(&f, hj, 1); /* its end reported again: nothing changes */
    assert_int_equal(hj->j->n_membership, 1);
    killed(&f, hj, 2); /* 1 would remain, min_workers 2 */
    assert_int_equal(hj->j->state, TROUPE__V1__JOB_STATE__JOB_FAILED);
    TR_ASSERT_CONTAINS(hj->j->reason, "job1-dp-2");
    assert_int_equal(hj->j->n_membership, 1);
    pthread_mutex_unlock(&f.h.mu);
    fix_stop(&f);
}

/* Below min_workers with a restart left, the group restarts whole: every
 * worker a member again at its placed rank, at the new attempt, and the
 * epoch (attempt + membership changes) above every earlier one. Members that
 * exit 0 end the job SUCCEEDED with a removed worker left out. */
static void restart_makes_whole(void **state)
{
    fix f;
    tr_head_job *hj;
    uint64_t id;

    (void)state;
    fix_start(&f, "elastic-restart", 0);
    id = submit(&f, 2, 2, 1);
    pthread_mutex_lock(&f.h.mu);
    hj = running(&f, id);
    killed(&f, hj, 2);
    assert_int_equal(tr_elastic_epoch(hj->j, "dp"), 1);
    killed(&f, hj, 0); /* below min_workers: the restart rules */
    assert_int_equal(hj->j->state, TROUPE__V1__JOB_STATE__JOB_RUNNING);
    assert_int_equal(hj->j->restarts, 1);
    ranks_are(hj, 0, 1, 2);
    assert_int_equal(hj->j->groups[0]->world_size, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(hj->j->workers[i]->attempt, 1);
    }
    assert_int_equal(tr_elastic_epoch(hj->j, "dp"), 2);

    running(&f, id);
    killed(&f, hj, 0); /* the restarted group shrinks again */
    ranks_are(hj, -1, 0, 1);
    assert_int_equal(tr_elastic_epoch(hj->j, "dp"), 3);
    for (size_t i = 1; i < 3; i++) {
        hj->j->workers[i]->state = TROUPE__V1__WORKER_STATE__WORKER_EXITED;
        hj->j->workers[i]->ended_ms = tr_wall_ms();
        tr_jobs_worker_ended(&f.h, hj, i);
    }
    assert_int_equal(hj->j->state, TROUPE__V1__JOB_STATE__JOB_SUCCEEDED);
    TR_ASSERT_CONTAINS(hj->j->reason, "all 2 members exited with code 0 (1 left elastic groups)");
    pthread_mutex_unlock(&f.h.mu);
    fix_stop(&f);
}

/* Growing back: a removed worker that ended, on an ALIVE node, after the
 * back-off, runs again at an attempt above every one issued, in a new epoch;
 * a later restart's attempt is above it too. max_workers below workers keeps
 * the group from growing back. */
static void grow_back(void **state)
{
    fix f;
    tr_head_job *hj;
    uint64_t id;

    (void)state;
    fix_start(&f, "elastic-grow", 0);
    id = submit(&f, 2, 3, 1);
    pthread_mutex_lock(&f.h.mu);
    hj = running(&f, id);
    killed(&f, hj, 1);
    ranks_are(hj, 0, -1, 1);
    tr_elastic_grow(&f.h, hj);
    ranks_are(hj, 0, 1, 2);
    assert_int_equal(hj->j->workers[1]->attempt, 1);
    assert_int_equal(hj->j->workers[1]->state, TROUPE__V1__WORKER_STATE__WORKER_PENDING);
    assert_int_equal(hj->j->groups[0]->world_size, 3);
    assert_int_equal(tr_elastic_epoch(hj->j, "dp"), 3); /* attempt 1 + 2 changes */
    assert_int_equal(hj->j->n_membership, 2);
    assert_string_equal(hj->j->membership[1]->kind, "GREW");
    TR_ASSERT_CONTAINS(hj->j->membership[1]->text, "GREW dp 2 -> 3: rank 1 (job1-dp-1 on n1) started again, attempt 1");
    assert_int_equal(hj->j->restarts, 0);
    tr_elastic_grow(&f.h, hj); /* whole: nothing to do */
    assert_int_equal(hj->j->n_membership, 2);

    /* A restart now: restarts becomes 1, which the replacement had. */
    hj->j->workers[0]->state = TROUPE__V1__WORKER_STATE__WORKER_EXITED;
    hj->j->workers[0]->exit_code = 1;
    hj->j->workers[2]->state = TROUPE__V1__WORKER_STATE__WORKER_EXITED;
    hj->j->workers[2]->exit_code = 1;
    tr_jobs_worker_ended(&f.h, hj, 0); /* shrinks: 2 remain */
    tr_jobs_worker_ended(&f.h, hj, 2); /* 1 would remain: the group restarts */
    assert_int_equal(hj->j->restarts, 1);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(hj->j->workers[i]->attempt, 2);
    }
    pthread_mutex_unlock(&f.h.mu);
    fix_stop(&f);

    fix_start(&f, "elastic-nogrow", 0);
    id = submit(&f, 2, 2, 0);
    pthread_mutex_lock(&f.h.mu);
    hj = running(&f, id);
    killed(&f, hj, 1);
    tr_elastic_grow(&f.h, hj); /* max_workers 2: stays at 2 */
    ranks_are(hj, 0, -1, 1);
    assert_int_equal(hj->j->n_membership, 1);
    pthread_mutex_unlock(&f.h.mu);
    fix_stop(&f);
}

/* ended_ago: worker i ended ms ago (the back-off counts from its end). */
static void ended_ago(tr_head_job *hj, size_t i, int64_t ms)
{
    hj->j->workers[i]->ended_ms = tr_wall_ms() - ms;
}

/* A replacement that keeps failing is a crash loop of its slot: each
 * grow-back waits the crash-loop back-off of the replacements that failed in
 * a row (1 s, then 2 s), and with max_restarts 1 the second failed
 * replacement leaves the slot empty, saying why; a replacement that ran
 * twice restart_backoff_max_ms starts the count over, and a group restart
 * makes the slot growable again. */
static void regrow_capped(void **state)
{
    fix f;
    tr_head_job *hj;
    uint64_t id;

    (void)state;
    fix_start(&f, "elastic-capped", 1000);
    f.h.cfg.restart_backoff_max_ms = 60000;
    id = submit(&f, 2, 3, 1);
    pthread_mutex_lock(&f.h.mu);
    hj = running(&f, id);
    killed(&f, hj, 1);
    ended_ago(hj, 1, 900);
    tr_elastic_grow(&f.h, hj); /* 1 s after the loss, not before */
    assert_true(hj->j->workers[1]->removed);
    ended_ago(hj, 1, 1100);
    tr_elastic_grow(&f.h, hj);
    assert_false(hj->j->workers[1]->removed);
    assert_int_equal(hj->j->workers[1]->regrown, 1);

    running(&f, id);
    killed(&f, hj, 1); /* the first replacement fails: tried again after 2 s */
    assert_false(hj->j->workers[1]->regrow_stopped);
    ended_ago(hj, 1, 1500);
    tr_elastic_grow(&f.h, hj);
    assert_true(hj->j->workers[1]->removed);
    ended_ago(hj, 1, 2100);
    tr_elastic_grow(&f.h, hj);
    assert_int_equal(hj->j->workers[1]->regrown, 2);

    running(&f, id);
    killed(&f, hj, 1); /* the second one fails: more than max_restarts 1 */
    assert_true(hj->j->workers[1]->regrow_stopped);
    assert_int_equal(hj->j->n_membership, 5);
    TR_ASSERT_CONTAINS(hj->j->membership[4]->text,
                       "killed by SIGKILL; not grown back: 2 replacements failed in a row (restart.max_restarts 1)");
    ended_ago(hj, 1, 3600000);
    tr_elastic_grow(&f.h, hj);
    assert_int_equal(hj->j->n_membership, 5);
    assert_int_equal(hj->j->groups[0]->world_size, 2);
    assert_int_equal(hj->j->state, TROUPE__V1__JOB_STATE__JOB_RUNNING);
    assert_int_equal(hj->j->restarts, 0);

    tr_elastic_reset(hj, "dp"); /* what a group restart does */
    assert_int_equal(hj->j->workers[1]->regrown, 0);
    assert_false(hj->j->workers[1]->regrow_stopped);
    pthread_mutex_unlock(&f.h.mu);
    fix_stop(&f);

    fix_start(&f, "elastic-ranwell", 1000);
    f.h.cfg.restart_backoff_max_ms = 2000;
    id = submit(&f, 2, 3, 0);
    pthread_mutex_lock(&f.h.mu);
    hj = running(&f, id);
    killed(&f, hj, 1);
    ended_ago(hj, 1, 1100);
    tr_elastic_grow(&f.h, hj);
    assert_int_equal(hj->j->workers[1]->regrown, 1);
    running(&f, id);
    hj->j->workers[1]->started_ms = tr_wall_ms() - 4000; /* ran 2 x restart_backoff_max_ms */
    killed(&f, hj, 1);
    assert_false(hj->j->workers[1]->regrow_stopped); /* max_restarts 0, but it ran well */
    assert_int_equal(hj->j->workers[1]->regrown, 0);
    ended_ago(hj, 1, 1100);
    tr_elastic_grow(&f.h, hj); /* the first back-off again */
    assert_false(hj->j->workers[1]->removed);
    pthread_mutex_unlock(&f.h.mu);
    fix_stop(&f);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shrink_then_below_min),
        cmocka_unit_test(restart_makes_whole),
        cmocka_unit_test(grow_back),
        cmocka_unit_test(regrow_capped),
    };
    return TR_TEST_MAIN("unit.server.elastic", tests, argc, argv);
}
