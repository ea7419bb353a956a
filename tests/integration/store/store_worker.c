/* store_worker - a worker program on the job store of troupe/worker.h
 * (troupe_worker_store_*) for the integration tests of the store suite.
 *
 *   store_worker basic    rank 0 sets "hello"; every rank gets it, adds 1 to
 *                         "count", and the rank that brings it to the group's
 *                         size sets "all", which every rank waits for; rank 0
 *                         then exercises compare_set, check, delete, num_keys
 *                         and two waits that run out.
 *   store_worker bounds   sets keys k0, k1, ... until the head refuses one.
 *   store_worker foreign  claims to be a worker of job $ST_OTHER_JOB (named
 *                         $ST_OTHER_WORKER when set; its credential is of its
 *                         own job) and sets a key.
 *   store_worker restart  attempt 0: rank 0 sets "old" and waits; rank 1 waits
 *                         for "old" and exits 1 (the group restarts). Attempt
 *                         1: both look for "old", then meet through add/wait.
 *   store_worker late     rank 1 waits for "late"; rank 0 sets it once the
 *                         file $ST_GO exists (the test makes it after it
 *                         restarted the head).
 * Every line is prefixed "st:" so tests can grep the job's log. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "troupe/worker.h"

static troupe_worker_ctx *w;

static int say_err(const char *what, const troupe_error *err)
{
    printf("st: %s: ERR %s %s\n", what, troupe_strerror(err->code), err->message);
    fflush(stdout);
    return 1;
}

static int get_str(const char *key, uint32_t wait_ms, char *out, size_t cap, troupe_error *err)
{
    void *v = NULL;
    size_t len = 0;
    troupe_status rv = troupe_worker_store_get(w, NULL, key, wait_ms, &v, &len, err);

    if (rv == TROUPE_OK) {
        snprintf(out, cap, "%.*s", (int)len, (const char *)v);
        troupe_free(v);
    }
    return rv;
}

static int cas(const char *key, const char *expected, const char *desired)
{
    troupe_error err;
    void *v = NULL;
    size_t len = 0;

    if (troupe_worker_store_compare_set(w, NULL, key, expected, strlen(expected), desired, strlen(desired),
                                        &v, &len, &err) != TROUPE_OK) {
        return say_err("compare_set", &err);
    }
    printf("st: compare_set %s '%s'->'%s' = '%.*s'\n", key, expected, desired, (int)len, (const char *)v);
    troupe_free(v);
    return 0;
}

/* rank0_extras: the single-rank operations and the waits that run out. */
static int rank0_extras(void)
{
    const char *both[] = {"hello", "count"}, *some[] = {"hello", "never-a", "never-b"}, *one[] = {"never"};
    troupe_error err;
    uint64_t n = 0;
    int present = 0, deleted = 0;
    char buf[64];

    if (cas("cs", "", "a") || cas("cs", "x", "b") || cas("cs", "a", "b") || cas("cs-missing", "e", "z")) {
        return 1;
    }
    if (troupe_worker_store_check(w, NULL, both, 2, &present, &err) != TROUPE_OK) {
        return say_err("check", &err);
    }
    printf("st: check hello,count = %d\n", present);
    if (troupe_worker_store_check(w, NULL, one, 1, &present, &err) != TROUPE_OK) {
        return say_err("check", &err);
    }
    printf("st: check never = %d\n", present);
    if (troupe_worker_store_num_keys(w, NULL, &n, &err) != TROUPE_OK) {
        return say_err("num_keys", &err);
    }
    printf("st: num_keys = %llu\n", (unsigned long long)n);
    if (troupe_worker_store_delete(w, NULL, "cs", &deleted, &err) != TROUPE_OK) {
        return say_err("delete", &err);
    }
    printf("st: delete cs = %d\n", deleted);
    troupe_worker_store_delete(w, NULL, "cs", &deleted, &err);
    printf("st: delete cs again = %d\n", deleted);
    if (troupe_worker_store_add(w, NULL, "hello", 1, NULL, &err) != TROUPE_OK) {
        say_err("add to text", &err);
    }
    if (get_str("never", 1500, buf, sizeof(buf), &err) != TROUPE_OK) {
        say_err("get never", &err);
    }
    if (troupe_worker_store_wait(w, NULL, some, 3, 1500, &err) != TROUPE_OK) {
        say_err("wait some", &err);
    }
    return 0;
}

static int basic(void)
{
    const troupe_worker_self *me = troupe_worker_self_info(w);
    const char *all[] = {"all"};
    troupe_error err;
    int64_t count = 0;
    char buf[64];

    if (me->rank == 0 && troupe_worker_store_set(w, NULL, "hello", "world", 5, &err) != TROUPE_OK) {
        return say_err("set", &err);
    }
    if (get_str("hello", 20000, buf, sizeof(buf), &err) != TROUPE_OK) {
        return say_err("get hello", &err);
    }
    printf("st: rank %u get hello = %s\n", me->rank, buf);
    if (troupe_worker_store_add(w, NULL, "count", 1, &count, &err) != TROUPE_OK) {
        return say_err("add", &err);
    }
    if (count == (int64_t)me->world_size &&
        troupe_worker_store_set(w, NULL, "all", "1", 1, &err) != TROUPE_OK) {
        return say_err("set all", &err);
    }
    if (troupe_worker_store_wait(w, NULL, all, 1, 20000, &err) != TROUPE_OK) {
        return say_err("wait all", &err);
    }
    if (get_str("count", 0, buf, sizeof(buf), &err) != TROUPE_OK) {
        return say_err("get count", &err);
    }
    printf("st: rank %u count after wait = %s\n", me->rank, buf);
    fflush(stdout);
    return me->rank == 0 ? rank0_extras() : 0;
}

static int bounds(void)
{
    troupe_error err;
    char key[32];

    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        if (troupe_worker_store_set(w, NULL, key, "0123456789", 10, &err) != TROUPE_OK) {
            printf("st: refused at %s: ERR %s %s\n", key, troupe_strerror(err.code), err.message);
            return 0;
        }
    }
    printf("st: never refused\n");
    return 1;
}

static int restart(void)
{
    const troupe_worker_self *me = troupe_worker_self_info(w);
    const char *old[] = {"old"}, *met[] = {"met"};
    troupe_error err;
    int present = 1;
    int64_t n = 0;
    uint64_t keys = 0;
    char buf[64];

    if (me->attempt == 0) {
        if (me->rank == 0) {
            if (troupe_worker_store_set(w, NULL, "old", "attempt0", 8, &err) != TROUPE_OK) {
                return say_err("set old", &err);
            }
            get_str("never", 60000, buf, sizeof(buf), &err); /* until the restart ends this attempt */
            return say_err("attempt 0 wait", &err);
        }
        if (get_str("old", 20000, buf, sizeof(buf), &err) != TROUPE_OK) {
            return say_err("get old", &err);
        }
        printf("st: attempt 0 rank 1 saw old = %s; failing\n", buf);
        return 1;
    }
    if (troupe_worker_store_check(w, NULL, old, 1, &present, &err) != TROUPE_OK ||
        troupe_worker_store_num_keys(w, NULL, &keys, &err) != TROUPE_OK) {
        return say_err("attempt 1 check", &err);
    }
    printf("st: attempt %u rank %u old present = %d\n", me->attempt, me->rank, present);
    if (troupe_worker_store_add(w, NULL, "n", 1, &n, &err) != TROUPE_OK) {
        return say_err("add", &err);
    }
    if (n == (int64_t)me->world_size) {
        troupe_worker_store_set(w, NULL, "met", "", 0, &err);
    }
    if (troupe_worker_store_wait(w, NULL, met, 1, 20000, &err) != TROUPE_OK) {
        return say_err("wait met", &err);
    }
    printf("st: attempt %u rank %u met\n", me->attempt, me->rank);
    return present;
}

static int late(void)
{
    const troupe_worker_self *me = troupe_worker_self_info(w);
    const char *go = getenv("ST_GO");
    troupe_error err;
    char buf[64];

    if (me->rank == 0) {
        for (int i = 0; i < 600 && (go == NULL || access(go, F_OK) != 0); i++) {
            usleep(100000);
        }
        if (troupe_worker_store_set(w, NULL, "late", "after-restart", 13, &err) != TROUPE_OK) {
            return say_err("set late", &err);
        }
        printf("st: rank 0 set late\n");
        return 0;
    }
    printf("st: rank %u waiting for late\n", me->rank);
    if (get_str("late", 40000, buf, sizeof(buf), &err) != TROUPE_OK) {
        return say_err("get late", &err);
    }
    printf("st: rank %u got late = %s\n", me->rank, buf);
    return 0;
}

int main(int argc, char **argv)
{
    troupe_worker_opts o = {.no_control = 1};
    troupe_error err;
    int rv;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: store_worker basic|bounds|foreign|restart|late\n");
        return 2;
    }
    if (strcmp(argv[1], "foreign") == 0 && getenv("ST_OTHER_JOB") != NULL) {
        setenv("TROUPE_JOB", getenv("ST_OTHER_JOB"), 1);
    }
    if (strcmp(argv[1], "foreign") == 0 && getenv("ST_OTHER_WORKER") != NULL) {
        setenv("TROUPE_WORKER", getenv("ST_OTHER_WORKER"), 1);
    }
    if (troupe_worker_open(&w, &o, &err) != TROUPE_OK) {
        return say_err("open", &err);
    }
    if (strcmp(argv[1], "basic") == 0) {
        rv = basic();
    } else if (strcmp(argv[1], "bounds") == 0) {
        rv = bounds();
    } else if (strcmp(argv[1], "restart") == 0) {
        rv = restart();
    } else if (strcmp(argv[1], "late") == 0) {
        rv = late();
    } else {
        rv = troupe_worker_store_set(w, NULL, "x", "y", 1, &err);
        if (rv != TROUPE_OK) {
            say_err("foreign set", &err);
        } else {
            printf("st: foreign set OK\n");
        }
        rv = 0;
    }
    troupe_worker_close(w);
    return rv;
}
