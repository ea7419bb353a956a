/* libtroupe_check - libtroupe used as an application would, through the
 * public API only (include/troupe/), against a real head with one agent.
 *
 *   libtroupe_check URL
 *
 * Pings, lists nodes, submits a job from memory, follows it with
 * troupe_wait_job to SUCCEEDED, reads its logs, lists active jobs, checks the
 * errors of bad calls, and frees everything (the sanitizer build checks
 * leaks). Prints "ok: ..." per step; exits 1 at the first failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/client.h"

static int fail(const char *what, const troupe_error *err)
{
    fprintf(stderr, "FAIL: %s: %s: %s\n", what, troupe_strerror(err->code), err->message);
    exit(1);
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL: " __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const char job_yaml[] = "name: from-libtroupe\n"
                               "cluster: {nodes: [2]}\n"
                               "groups: [{name: g, workers: 2, resources: {gpu: 1},\n"
                               "          command: [sh, -c, 'echo hello from $RANK']}]\n";

/* follow waits with troupe_wait_job until the job has ended (deadline 20 s). */
static troupe_job *follow(troupe_client *c, uint64_t id)
{
    troupe_error err;
    troupe_job *job = NULL;
    uint64_t version = 0;

    for (int i = 0; i < 40; i++) {
        troupe_job_free(job);
        if (troupe_wait_job(c, id, version, 500, &job, &err) != TROUPE_OK) {
            fail("troupe_wait_job", &err);
        }
        version = job->version;
        if (job->state >= TROUPE_JOB_SUCCEEDED) {
            return job;
        }
    }
    CHECK(0, "job %llu did not end within 20 s (state %s)", (unsigned long long)id, troupe_job_state_name(job->state));
    return NULL;
}

int main(int argc, char **argv)
{
    troupe_client_opts opts = {0};
    troupe_client *c = NULL;
    troupe_error err;
    troupe_node_list *nodes = NULL;
    troupe_job_list *active = NULL;
    troupe_job *job = NULL;
    uint64_t id = 0, next = 0;
    char *logs = NULL;
    size_t len = 0;
    int done = 0;

    CHECK(argc == 2, "usage: libtroupe_check URL");
    opts.head_url = argv[1];
    opts.timeout_ms = 5000;
    if (troupe_client_open(&c, &opts, &err) != TROUPE_OK) {
        fail("troupe_client_open", &err);
    }
    CHECK(strcmp(troupe_client_url(c), argv[1]) == 0, "troupe_client_url: %s", troupe_client_url(c));
    if (troupe_ping(c, "abc", 3, &err) != TROUPE_OK) {
        fail("troupe_ping", &err);
    }
    printf("ok: open and ping %s\n", argv[1]);

    if (troupe_list_nodes(c, 0, &nodes, &err) != TROUPE_OK) {
        fail("troupe_list_nodes", &err);
    }
    CHECK(nodes->count == 1 && nodes->nodes[0].state == TROUPE_NODE_ALIVE && nodes->nodes[0].n_gpus == 2,
          "troupe_list_nodes: %zu nodes", nodes->count);
    printf("ok: one ALIVE node %s with %zu GPUs\n", nodes->nodes[0].name, nodes->nodes[0].n_gpus);
    troupe_node_list_free(nodes);

    if (troupe_submit_yaml(c, job_yaml, strlen(job_yaml), "mem.yaml", NULL, &id, &err) != TROUPE_OK) {
        fail("troupe_submit_yaml", &err);
    }
    job = follow(c, id);
    CHECK(job->state == TROUPE_JOB_SUCCEEDED && job->n_workers == 2 && job->n_groups == 1,
          "job %llu: %s (%s), %zu workers", (unsigned long long)id, troupe_job_state_name(job->state), job->reason,
          job->n_workers);
    for (size_t i = 0; i < job->n_workers; i++) {
        CHECK(job->workers[i].state == TROUPE_WORKER_EXITED && job->workers[i].exit_code == 0 &&
                  job->workers[i].n_gpus == 1,
              "worker %s: %s exit %d", job->workers[i].name, troupe_worker_state_name(job->workers[i].state),
              job->workers[i].exit_code);
    }
    printf("ok: job %llu %s followed with troupe_wait_job to %s\n", (unsigned long long)id, job->name,
           troupe_job_state_name(job->state));
    troupe_job_free(job);

    if (troupe_read_logs(c, id, NULL, 0, 0, &logs, &len, &next, &done, &err) != TROUPE_OK) {
        fail("troupe_read_logs", &err);
    }
    CHECK(logs != NULL && strstr(logs, "hello from 0\n") && strstr(logs, "hello from 1\n") && done && next > 0,
          "logs (done=%d): %s", done, logs ? logs : "(none)");
    printf("ok: logs read to the end (%zu bytes)\n", len);
    troupe_free(logs);

    if (troupe_list_jobs(c, 1, &active, &err) != TROUPE_OK) {
        fail("troupe_list_jobs", &err);
    }
    CHECK(active->count == 0, "active jobs: %zu after the only job ended", active->count);
    troupe_job_list_free(active);
    printf("ok: no active job left\n");

    CHECK(troupe_get_job(c, 424242, &job, &err) == TROUPE_NOT_FOUND && job == NULL, "get unknown: %s",
          troupe_strerror(err.code));
    CHECK(troupe_stop_job(c, id, &err) == TROUPE_FAILED_PRECONDITION, "stop ended job: %s %s",
          troupe_strerror(err.code), err.message);
    CHECK(troupe_submit_yaml(c, "name: x\n", 8, "bad.yaml", NULL, &id, &err) == TROUPE_INVALID_ARGUMENT &&
              strncmp(err.message, "bad.yaml:", 9) == 0,
          "bad spec: %s %s", troupe_strerror(err.code), err.message);
    printf("ok: errors: NOT_FOUND, FAILED_PRECONDITION, INVALID_ARGUMENT (%s)\n", err.message);
    troupe_client_close(c);
    return 0;
}
