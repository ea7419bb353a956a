/* test_retention.c - keep_days (jobs_retain.c): a finished job that ended longer
 * ago than keep_days goes from memory and the store; a newer one stays.
 *
 * A real head on an ipc:// socket with one registered node (no agent): a job
 * holds its 4 GPUs, two more wait PENDING and are stopped (settled at once).
 * Their end times are moved back (31 and 29 days) under h->mu, which no
 * integration test can do without waiting a month, and one retention pass
 * runs. */
#include <pthread.h>
#include <unistd.h>

#include "head.h"
#include "head_fixture.h"
#include "jobs.h"
#include "rpc.h"
#include "store.h"
#include "test_helpers.h"
#include "troupe/client.h"
#include "util.h"

#define DAY_MS 86400000LL

static uint64_t submit(troupe_client *c, int gpus)
{
    char yaml[256];
    troupe_error terr;
    uint64_t id = 0;
    int n = snprintf(yaml, sizeof(yaml),
                     "name: j\ncluster: {nodes: [4]}\n"
                     "groups: [{name: g, workers: 1, resources: {gpu: %d}, command: [sleep, '60']}]\n",
                     gpus);
    if (troupe_submit_yaml(c, yaml, (size_t)n, "j.yaml", NULL, &id, &terr) != TROUPE_OK) {
        fail_msg("submit: %s: %s", troupe_strerror(terr.code), terr.message);
    }
    return id;
}

static int store_has(void *arg, uint64_t id, int state, const uint8_t *data, size_t len)
{
    uint64_t *want = arg;
    (void)state, (void)data, (void)len;
    if (id == *want) {
        *want = 0;
    }
    return TROUPE_OK;
}

/* in_store reads the store through a connection of its own. */
static int in_store(const char *dir, uint64_t id)
{
    tr_store *st = NULL;
    tr_err err;
    TR_ASSERT_OK(tr_store_open(dir, 0, &st, &err), &err);
    TR_ASSERT_OK(tr_store_scan(st, "jobs", store_has, &id, &err), &err);
    tr_store_close(st);
    return id == 0;
}

static void keep_days_deletes_old(void **state)
{
    char dir[256], url[300];
    troupe_client_opts co = {0};
    troupe_client *c = NULL;
    troupe_job *j = NULL;
    troupe_error terr;
    uint64_t hold, old, recent;
    int64_t until;
    tr_head h;
    tr_err err;

    (void)state;
    tr_fixture_head_config(&h, dir, sizeof(dir), url, sizeof(url), "retention");
    h.cfg.keep_days = 30;
    TR_ASSERT_OK(tr_head_start(&h, &err), &err);
    tr_rpc_client *agent = tr_fixture_register_node(url);
    co.head_url = url;
    co.timeout_ms = 20000;
    assert_int_equal(troupe_client_open(&c, &co, &terr), TROUPE_OK);
    hold = submit(c, 4);
    old = submit(c, 1); /* PENDING: the GPUs are held */
    recent = submit(c, 1);
    assert_int_equal(troupe_stop_job(c, old, &terr), TROUPE_OK);
    assert_int_equal(troupe_stop_job(c, recent, &terr), TROUPE_OK);

    pthread_mutex_lock(&h.mu);
    assert_true(tr_jobs_is_settled(tr_jobs_find(&h, old)));
    tr_jobs_find(&h, old)->j->ended_ms = tr_wall_ms() - 31 * DAY_MS;
    tr_jobs_find(&h, recent)->j->ended_ms = tr_wall_ms() - 29 * DAY_MS;
    h.retained_ms = 0;
    tr_jobs_retain(&h);
    assert_null(tr_jobs_find(&h, old));
    assert_non_null(tr_jobs_find(&h, recent));
    assert_non_null(tr_jobs_find(&h, hold));
    pthread_mutex_unlock(&h.mu);

    assert_int_equal(troupe_get_job(c, old, &j, &terr), TROUPE_NOT_FOUND);
    until = tr_now_ms() + 10000;
    while (in_store(dir, old) && tr_now_ms() < until) {
        usleep(20000);
    }
    if (in_store(dir, old)) {
        fail_msg("job %llu still in the store 10 s after retention deleted it", (unsigned long long)old);
    }
    assert_true(in_store(dir, recent));
    troupe_client_close(c);
    tr_rpc_client_close(agent);
    tr_head_stop(&h);
    tr_cfg_free(tr_head_config_table, &h.cfg);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(keep_days_deletes_old),
    };
    return TR_TEST_MAIN("unit.server.retention", tests, argc, argv);
}
