/* test_commit.c - the group commit when memory runs out (commit.c).
 *
 * A real head (tr_head_start on an ipc:// socket and a temp state dir), a
 * node and a job sent over RPC, and tr_commit_calloc_hook failing chosen
 * allocations of the writer. Before, a record that could not be packed was
 * dropped and its job marked clean, yet the submit was answered OK: the job
 * never reached the disk. Now the batch is retried and the submit is
 * answered only once the job is on disk - checked by reading the store
 * through a second connection the moment the reply arrives.
 *
 * nudge_only_recovers: a batch that carried nothing but a nudge (a node's
 * assignment version to get on disk) fails on a full disk; once the disk has
 * room the head must leave the failing state by itself. Before, the failed
 * batch left nothing pending, the writer slept, and the head refused new
 * work for good.
 *
 * readers_answered_on_failure: `troupe status` and `troupe job` made while a
 * job's change is being written wait for that batch to show saved state. If
 * the write fails they must be answered at once, as the store stands
 * (status with the failing store and the job counted unsaved; the job
 * UNAVAILABLE), not at their deadline: status is how a user sees a full disk.
 * The writer is held (tr_commit_write_hook) between taking the batch and
 * writing it, so both readers are parked behind it every time. */
#include <pthread.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "head.h"
#include "jobs.h"
#include "head_fixture.h"
#include "rpc.h"
#include "store.h"
#include "test_helpers.h"
#include "troupe/client.h"
#include "util.h"

static int calls, fail_from, fail_count;

/* failing_calloc fails calls fail_from .. fail_from + fail_count - 1. */
static void *failing_calloc(size_t n, size_t size)
{
    int c = ++calls;
    return (c >= fail_from && c < fail_from + fail_count) ? NULL : calloc(n, size);
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

    tr_fixture_head_start(&h, dir, sizeof(dir), url, sizeof(url), "commit");
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

/* head_start_failpoint: a head whose commits fail while the file named in
 * full (a path in a fresh directory, not created) exists (store.h's
 * TROUPE_TEST_STORE_FULL_IF, read when the store opens). Buffers of 256,
 * 300 and 300 bytes. */
static void head_start_failpoint(tr_head *h, char *dir, char *url, char *full)
{
    tr_test_tmpdir(full, 300, "commit-full");
    strncat(full, "/full", 300 - strlen(full) - 1);
    setenv("TROUPE_TEST_STORE_FULL_IF", full, 1);
    tr_fixture_head_start(h, dir, 256, url, 300, "commit");
    unsetenv("TROUPE_TEST_STORE_FULL_IF");
}

static void touch_file(const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
}

/* until_state waits (deadline 5 s, h->mu held) for h->store_failing == want
 * and, when it is 0, for saved_seq to reach seq. */
static int until_state(tr_head *h, int want, uint64_t seq)
{
    for (int i = 0; i < 500; i++) {
        if (h->store_failing == want && (want || h->saved_seq >= seq)) {
            return 1;
        }
        pthread_mutex_unlock(&h->mu);
        usleep(10000);
        pthread_mutex_lock(&h->mu);
    }
    return 0;
}

static void nudge_only_recovers(void **state)
{
    char dir[256], url[300], full[300];
    tr_head h;
    uint64_t seq;

    (void)state;
    head_start_failpoint(&h, dir, url, full);
    /* No node, no job: nothing else changes that would make the writer
     * retry (a silent node turning SUSPECT after 1 s did, and hid the bug). */
    pthread_mutex_lock(&h.mu);
    assert_true(until_state(&h, 0, h.taken_seq)); /* the start is on disk */
    touch_file(full);
    seq = tr_head_change_seq(&h);
    tr_head_commit_nudge(&h);
    if (!until_state(&h, 1, 0)) {
        fail_msg("the nudge's batch did not fail on the full disk");
    }
    assert_int_equal(unlink(full), 0);
    if (!until_state(&h, 0, seq)) {
        fail_msg("5 s after the disk had room the head still could not write: store_failing=%d saved_seq=%llu, "
                 "waiting for %llu (nothing was pending, so nothing retried)",
                 h.store_failing, (unsigned long long)h.saved_seq, (unsigned long long)seq);
    }
    pthread_mutex_unlock(&h.mu);
    tr_head_stop(&h);
    tr_cfg_free(tr_head_config_table, &h.cfg);
}

static pthread_mutex_t hook_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hook_cv = PTHREAD_COND_INITIALIZER;
static int hook_in, hook_go;

/* hold_write: the writer, batch taken, waits until the test lets it go. */
static void hold_write(void)
{
    pthread_mutex_lock(&hook_mu);
    hook_in = 1;
    pthread_cond_broadcast(&hook_cv);
    while (!hook_go) {
        pthread_cond_wait(&hook_cv, &hook_mu);
    }
    pthread_mutex_unlock(&hook_mu);
}

typedef struct reader {
    const char *url;
    uint64_t job_id; /* 0: GetCluster, else GetJob of it */
    troupe_status rv;
    troupe_cluster cl;
    char msg[512];
    int64_t ms;
} reader;

/* read_main: GetCluster through libtroupe; GetJob as one raw call (libtroupe
 * retries UNAVAILABLE within its deadline, which would hide when the head
 * answered). */
static void *read_main(void *arg)
{
    reader *r = arg;
    troupe_client_opts co = {.head_url = r->url, .timeout_ms = 8000};
    troupe_client *c = NULL;
    troupe_error terr = {0};
    int64_t t0 = tr_now_ms();

    if (r->job_id == 0) {
        r->rv = troupe_client_open(&c, &co, &terr);
        if (r->rv == TROUPE_OK) {
            r->rv = troupe_get_cluster(c, &r->cl, &terr);
        }
        snprintf(r->msg, sizeof(r->msg), "%s", terr.message);
        troupe_client_close(c);
    } else {
        Troupe__V1__GetJobRequest req = TROUPE__V1__GET_JOB_REQUEST__INIT;
        tr_rpc_client_opts o = {.url = r->url};
        tr_rpc_client *rc = NULL;
        ProtobufCMessage *rep = NULL;
        tr_err err = {0};
        req.job_id = r->job_id;
        r->rv = tr_rpc_client_open(&o, &rc, &err);
        if (r->rv == TROUPE_OK) {
            r->rv = tr_rpc_client_call(rc, "troupe.v1.Head/GetJob", &req.base, &troupe__v1__get_job_reply__descriptor,
                                       &rep, 8000, 0, &err);
            tr_rpc_client_close(rc);
        }
        if (rep != NULL) {
            protobuf_c_message_free_unpacked(rep, NULL);
        }
        snprintf(r->msg, sizeof(r->msg), "%s", err.msg);
    }
    r->ms = tr_now_ms() - t0;
    return NULL;
}

static void readers_answered_on_failure(void **state)
{
    static const char yaml[] = "name: j\ncluster: {nodes: [1]}\n"
                               "groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sleep, '60']}]\n";
    char dir[256], url[300], full[300];
    tr_head h;
    troupe_client_opts co = {0};
    troupe_client *c = NULL;
    troupe_error terr;
    tr_rpc_client *agent;
    uint64_t id = 0;
    reader rd[2];
    pthread_t th[2];

    (void)state;
    head_start_failpoint(&h, dir, url, full);
    agent = tr_fixture_register_node(url);
    co.head_url = url;
    co.timeout_ms = 8000;
    assert_int_equal(troupe_client_open(&c, &co, &terr), TROUPE_OK);
    if (troupe_submit_yaml(c, yaml, sizeof(yaml) - 1, "j.yaml", NULL, &id, &terr) != TROUPE_OK) {
        fail_msg("submit: %s: %s", troupe_strerror(terr.code), terr.message);
    }

    /* The job changes; the writer takes the batch and is held before writing. */
    hook_in = hook_go = 0;
    pthread_mutex_lock(&h.mu);
    touch_file(full);
    tr_commit_write_hook = hold_write;
    tr_jobs_touch(&h, tr_jobs_find(&h, id));
    pthread_mutex_unlock(&h.mu);
    pthread_mutex_lock(&hook_mu);
    for (int i = 0; i < 500 && !hook_in; i++) {
        struct timespec ts;
        tr_abstime_in(&ts, 10);
        pthread_cond_timedwait(&hook_cv, &hook_mu, &ts);
    }
    pthread_mutex_unlock(&hook_mu);
    assert_true(hook_in); /* within 5 s */

    /* Both readers park behind the batch in flight (the job is not saved). */
    for (int i = 0; i < 2; i++) {
        rd[i] = (reader){.url = url, .job_id = i ? id : 0};
        pthread_create(&th[i], NULL, read_main, &rd[i]);
    }
    for (int i = 0, parked = 0; parked < 2; i++) {
        if (i == 500) {
            fail_msg("the readers did not park behind the batch in flight within 5 s (%d parked)", parked);
        }
        usleep(10000);
        pthread_mutex_lock(&h.mu);
        parked = (int)tr_head_commit_waiters(&h);
        pthread_mutex_unlock(&h.mu);
    }

    /* The write fails (full disk): both are answered now, not at 8 s. */
    pthread_mutex_lock(&hook_mu);
    hook_go = 1;
    pthread_cond_broadcast(&hook_cv);
    pthread_mutex_unlock(&hook_mu);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
    }
    tr_commit_write_hook = NULL;
    if (rd[0].rv != TROUPE_OK || rd[0].ms > 2000 || !rd[0].cl.store_failing || rd[0].cl.jobs_unsaved != 1) {
        fail_msg("troupe status behind a failed write: %s after %lld ms (store_failing %d, jobs_unsaved %u): %s",
                 troupe_strerror(rd[0].rv), (long long)rd[0].ms, rd[0].cl.store_failing, rd[0].cl.jobs_unsaved,
                 rd[0].msg);
    }
    if (rd[1].rv != TROUPE_UNAVAILABLE || rd[1].ms > 2000 || strstr(rd[1].msg, "could not save yet") == NULL) {
        fail_msg("troupe job behind a failed write: %s after %lld ms: %s", troupe_strerror(rd[1].rv),
                 (long long)rd[1].ms, rd[1].msg);
    }

    /* Room again: the change is saved and the job shows. */
    assert_int_equal(unlink(full), 0);
    pthread_mutex_lock(&h.mu);
    if (!until_state(&h, 0, h.taken_seq)) {
        fail_msg("the head did not write again within 5 s of the disk having room");
    }
    pthread_mutex_unlock(&h.mu);
    troupe_client_close(c);
    tr_rpc_client_close(agent);
    tr_head_stop(&h);
    tr_cfg_free(tr_head_config_table, &h.cfg);
}

/* Every statvfs(3) of the head, by thread (the executable is linked with
 * --wrap=statvfs): none may run with h->mu held by the caller (a slow disk
 * would stall every handler behind the lock). Held is read from the mutex's
 * owner, which glibc records for every mutex type. disk_full makes the disks
 * look full (0 bytes free); hold_looks keeps the committer from looking (it
 * waits in its look, h->mu released, up to 10 s) - the moments before its
 * next look, when what it saw last is out of date. */
static tr_head *looked_head;
static int statvfs_locked, statvfs_committer, statvfs_handlers;
static int disk_full, hold_looks;

int __real_statvfs(const char *path, struct statvfs *buf);
int __wrap_statvfs(const char *path, struct statvfs *buf);
int __wrap_statvfs(const char *path, struct statvfs *buf)
{
    tr_head *h = __atomic_load_n(&looked_head, __ATOMIC_ACQUIRE);
    /* disk_full before hold_looks (the test sets them in the other order):
     * a committer that sees the disk full is held. */
    int full = __atomic_load_n(&disk_full, __ATOMIC_SEQ_CST), rv;

    if (h != NULL) {
        int committer = pthread_equal(pthread_self(), h->committer);
        if (__atomic_load_n(&h->mu.__data.__owner, __ATOMIC_RELAXED) == (int)syscall(SYS_gettid)) {
            __atomic_add_fetch(&statvfs_locked, 1, __ATOMIC_RELAXED);
        }
        __atomic_add_fetch(committer ? &statvfs_committer : &statvfs_handlers, 1, __ATOMIC_RELAXED);
        for (int i = 0; committer && i < 10000 && __atomic_load_n(&hold_looks, __ATOMIC_SEQ_CST); i++) {
            usleep(1000);
            full = __atomic_load_n(&disk_full, __ATOMIC_SEQ_CST);
        }
    }
    rv = __real_statvfs(path, buf);
    if (rv == 0 && full) {
        buf->f_bavail = 0;
    }
    return rv;
}

/* refusals_read_the_look: a submit checks min_free_bytes on a look of its
 * own, and while the store fails every change is refused naming the free
 * space; no statvfs runs with h->mu held, neither the committer's nor a
 * submit's (re-plant: statvfs in tr_head_store_refuse or
 * tr_head_space_refuse, or tr_head_space_look called under h->mu). */
static void refusals_read_the_look(void **state)
{
    static const char yaml[] = "name: j\ncluster: {nodes: [1]}\n"
                               "groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sleep, '60']}]\n";
    char dir[256], url[300], full[300];
    tr_head h;
    troupe_client_opts co = {0};
    troupe_client *c = NULL;
    troupe_error terr;
    tr_rpc_client *agent;
    uint64_t id = 0;
    troupe_status rv;

    (void)state;
    head_start_failpoint(&h, dir, url, full);
    assert_true(h.cfg.min_free_bytes > 0); /* so every submit checks the disks */
    agent = tr_fixture_register_node(url);
    co.head_url = url;
    co.timeout_ms = 8000;
    assert_int_equal(troupe_client_open(&c, &co, &terr), TROUPE_OK);
    __atomic_store_n(&looked_head, &h, __ATOMIC_RELEASE);

    if (troupe_submit_yaml(c, yaml, sizeof(yaml) - 1, "j.yaml", NULL, &id, &terr) != TROUPE_OK) {
        fail_msg("submit with room on the disk: %s: %s", troupe_strerror(terr.code), terr.message);
    }
    pthread_mutex_lock(&h.mu);
    touch_file(full);
    tr_head_commit_nudge(&h);
    if (!until_state(&h, 1, 0)) {
        fail_msg("the store did not fail on the full disk within 5 s");
    }
    pthread_mutex_unlock(&h.mu);
    rv = troupe_submit_yaml(c, yaml, sizeof(yaml) - 1, "j.yaml", NULL, &id, &terr);
    if (rv != TROUPE_RESOURCE_EXHAUSTED || strstr(terr.message, "MiB free on its disk") == NULL) {
        fail_msg("submit while the store fails: want RESOURCE_EXHAUSTED naming the free space, got %s: %s",
                 troupe_strerror(rv), terr.message);
    }
    for (int i = 0; i < 500 && __atomic_load_n(&statvfs_committer, __ATOMIC_RELAXED) < 2; i++) {
        usleep(10000);
    }
    __atomic_store_n(&looked_head, NULL, __ATOMIC_RELEASE);
    if (statvfs_locked != 0 || statvfs_committer < 2 || statvfs_handlers < 2 * TR_SPACE_DIRS) {
        fail_msg("statvfs: %d calls with h->mu held (want 0), %d by the committer (want >= 2 in 5 s), %d by "
                 "the handlers (want >= %d: each submit looks at the %d disks)",
                 statvfs_locked, statvfs_committer, statvfs_handlers, 2 * TR_SPACE_DIRS, TR_SPACE_DIRS);
    }
    assert_int_equal(unlink(full), 0);
    troupe_client_close(c);
    tr_rpc_client_close(agent);
    tr_head_stop(&h);
    tr_cfg_free(tr_head_config_table, &h.cfg);
}

/* submit_looks_at_the_disk: a submit made after the disk filled but before
 * the committer looked again (it looks every 100 ms) is refused at once,
 * RESOURCE_EXHAUSTED naming min_free_bytes, not taken to wait for a save
 * that cannot happen. The disks look full from one moment on, and the
 * committer's looks are held from then (hold_looks), so its last look said
 * there was room. Once there is room again a submit is taken. Re-plant:
 * decide in tr_head_space_refuse on h->space (the committer's look) instead
 * of the submit's own; the submit is then taken and waits for its client's
 * deadline (DEADLINE_EXCEEDED). */
static void submit_looks_at_the_disk(void **state)
{
    static const char yaml[] = "name: j\ncluster: {nodes: [1]}\n"
                               "groups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sleep, '60']}]\n";
    char dir[256], url[300], msg[512];
    tr_head h;
    troupe_client_opts co = {0};
    troupe_client *c = NULL;
    troupe_error terr;
    tr_rpc_client *agent;
    uint64_t id = 0;
    troupe_status rv;
    int64_t t0, ms;

    (void)state;
    tr_fixture_head_start(&h, dir, sizeof(dir), url, sizeof(url), "commit");
    assert_true(h.cfg.min_free_bytes > 0); /* the default bound: every submit checks the disks */
    agent = tr_fixture_register_node(url);
    co.head_url = url;
    co.timeout_ms = 3000;
    assert_int_equal(troupe_client_open(&c, &co, &terr), TROUPE_OK);
    statvfs_locked = 0;
    __atomic_store_n(&looked_head, &h, __ATOMIC_RELEASE);
    if (troupe_submit_yaml(c, yaml, sizeof(yaml) - 1, "j.yaml", NULL, &id, &terr) != TROUPE_OK) {
        fail_msg("submit with room on the disk: %s: %s", troupe_strerror(terr.code), terr.message);
    }

    __atomic_store_n(&hold_looks, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&disk_full, 1, __ATOMIC_SEQ_CST);
    t0 = tr_now_ms();
    rv = troupe_submit_yaml(c, yaml, sizeof(yaml) - 1, "j.yaml", NULL, &id, &terr);
    ms = tr_now_ms() - t0;
    snprintf(msg, sizeof(msg), "%s", terr.message);
    __atomic_store_n(&disk_full, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&hold_looks, 0, __ATOMIC_SEQ_CST);
    if (rv != TROUPE_RESOURCE_EXHAUSTED || strstr(msg, "min_free_bytes") == NULL || ms > 2000) {
        fail_msg("submit just after the disk filled: want RESOURCE_EXHAUSTED naming min_free_bytes at once, got "
                 "%s after %lld ms: %s",
                 rv == TROUPE_OK ? "OK (taken)" : troupe_strerror(rv), (long long)ms, rv == TROUPE_OK ? "" : msg);
    }
    if (troupe_submit_yaml(c, yaml, sizeof(yaml) - 1, "j.yaml", NULL, &id, &terr) != TROUPE_OK) {
        fail_msg("submit once the disk had room again: %s: %s", troupe_strerror(terr.code), terr.message);
    }
    __atomic_store_n(&looked_head, NULL, __ATOMIC_RELEASE);
    assert_int_equal(statvfs_locked, 0);
    troupe_client_close(c);
    tr_rpc_client_close(agent);
    tr_head_stop(&h);
    tr_cfg_free(tr_head_config_table, &h.cfg);
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
        cmocka_unit_test(nudge_only_recovers),
        cmocka_unit_test(readers_answered_on_failure),
        cmocka_unit_test(refusals_read_the_look),
        cmocka_unit_test(submit_looks_at_the_disk),
    };
    return TR_TEST_MAIN("unit.server.commit", tests, argc, argv);
}
