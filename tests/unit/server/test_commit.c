/* test_commit.c - the group commit when memory runs out (commit.c).
 *
 * A real head (tr_head_start on an ipc:// socket and a temp state dir), a
 * node and a job sent over RPC, and tr_commit_calloc_hook failing chosen
 * allocations of the writer. Before, a record that could not be packed was
 * dropped and its job marked clean, yet the submit was answered OK: the job
 * never reached the disk. Now the batch is retried and the submit is
 * answered only once the job is on disk - checked by reading the store
 * through a second connection the moment the reply arrives. */
#include <pthread.h>
#include <unistd.h>

#include "head.h"
#include "head_fixture.h"
#include "rpc.h"
#include "store.h"
#include "test_helpers.h"
#include "troupe/client.h"

static int calls, fail_from, fail_count;

/* failing_calloc fails calls fail_from .. fail_from + fail_count - 1. */
static void *failing_calloc(size_t n, size_t size)
{
    int c = ++calls;
    return (c >= fail_from && c < fail_from + fail_count) ? NULL : calloc(n, size);
}

static void head_start(tr_head *h, char *dir, size_t size, char *url, size_t url_size)
{
    tr_err err;
    tr_test_tmpdir(dir, size, "commit");
    snprintf(url, url_size, "ipc://%s/head.ipc", dir);
    memset(h, 0, sizeof(*h));
    TR_ASSERT_OK(tr_cfg_defaults(tr_head_config_table, &h->cfg, &err), &err);
    free(h->cfg.listen);
    free(h->cfg.state_dir);
    h->cfg.listen = strdup(url);
    h->cfg.state_dir = strdup(dir);
    TR_ASSERT_OK(tr_head_start(h, &err), &err);
}

typedef struct found {
    uint64_t id;
    int seen;
} found;

static int find_job(void *arg, uint64_t id, int state, const uint8_t *data, size_t len)
{
    found *f = arg;
    (void)state, (void)data, (void)len;
    f->seen |= id == f->id;
    return TROUPE_OK;
}

/* submit_with_failures submits a job while allocations from..from+count-1
 * of the writer fail; the reply must find the job on disk. */
static void submit_with_failures(int from, int count)
{
    static const char yaml[] =
        "name: j\ncluster: {nodes: [1]}\n"
        "groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sleep, '60']}]\n";
    char dir[256], url[300];
    tr_head h;
    troupe_client_opts co = {0};
    troupe_client *c = NULL;
    troupe_error terr;
    tr_store *st = NULL;
    tr_rpc_client *agent;
    found f = {0};
    tr_err err;

    head_start(&h, dir, sizeof(dir), url, sizeof(url));
    agent = tr_fixture_register_node(url);
    pthread_mutex_lock(&h.mu);
    calls = 0;
    fail_from = from;
    fail_count = count;
    tr_commit_calloc_hook = failing_calloc;
    pthread_mutex_unlock(&h.mu);

    co.head_url = url;
    co.timeout_ms = 20000;
    assert_int_equal(troupe_client_open(&c, &co, &terr), TROUPE_OK);
    if (troupe_submit_yaml(c, yaml, sizeof(yaml) - 1, "j.yaml", NULL, &f.id, &terr) != TROUPE_OK) {
        fail_msg("submit: %s: %s", troupe_strerror(terr.code), terr.message);
    }
    /* Answered: so on disk, now - read through a connection of our own. */
    TR_ASSERT_OK(tr_store_open(dir, 0, &st, &err), &err);
    TR_ASSERT_OK(tr_store_scan(st, "jobs", find_job, &f, &err), &err);
    tr_store_close(st);
    assert_true(f.seen);

    pthread_mutex_lock(&h.mu);
    tr_commit_calloc_hook = NULL;
    assert_true(calls >= from + count); /* the failures did happen */
    assert_true(h.store_failed_writes >= 1);
    assert_false(h.store_failing); /* and the head left the failing state */
    pthread_mutex_unlock(&h.mu);
    troupe_client_close(c);
    tr_rpc_client_close(agent);
    tr_head_stop(&h);
    tr_cfg_free(tr_head_config_table, &h.cfg);
}

/* The first packed record of the submit's batch cannot be allocated. */
static void pack_fails(void **state)
{
    (void)state;
    submit_with_failures(2, 1);
}

/* The record array of the batch, then of its first retry, cannot be. */
static void take_fails(void **state)
{
    (void)state;
    submit_with_failures(1, 2);
}

/* Every allocation for a while: several retries, then it goes through. */
static void many_fail(void **state)
{
    (void)state;
    submit_with_failures(1, 6);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pack_fails),
        cmocka_unit_test(take_fails),
        cmocka_unit_test(many_fail),
    };
    return TR_TEST_MAIN("unit.server.commit", tests, argc, argv);
}
