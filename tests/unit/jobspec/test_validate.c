/* test_validate.c - tr_jobspec_validate on hand-built messages, as a
 * SubmitJob request from any client may carry: every rule, with messages that
 * name the group and field, and NULL pointers where counts promise entries. */
#include <math.h>

#include "jobspec_test.h"

/* hand is one valid spec in caller storage: job "job", one node of 8 GPUs,
 * groups "policy" and "gen" (1 worker, 1 GPU, PACK, command "run"). */
typedef struct hand {
    Troupe__V1__JobSpec spec;
    Troupe__V1__GroupSpec g[2];
    Troupe__V1__GroupSpec *gp[2];
    char *cmd[2];
    uint32_t nodes[1];
    Troupe__V1__EnvVar ev;
    Troupe__V1__EnvVar *evp[1];
    Troupe__V1__Label label;
    Troupe__V1__Label *labelp[1];
    Troupe__V1__ProfileSpec prof;
} hand;

static void hand_init(hand *h)
{
    memset(h, 0, sizeof(*h));
    troupe__v1__job_spec__init(&h->spec);
    h->spec.name = "job";
    h->nodes[0] = 8;
    h->spec.cluster_nodes = h->nodes;
    h->spec.n_cluster_nodes = 1;
    h->cmd[0] = "run";
    h->cmd[1] = "--flag";
    for (int i = 0; i < 2; i++) {
        troupe__v1__group_spec__init(&h->g[i]);
        h->g[i].name = i ? "gen" : "policy";
        h->g[i].workers = 1;
        h->g[i].gpus = 1;
        h->g[i].strategy = "PACK";
        h->g[i].command = h->cmd;
        h->g[i].n_command = 2;
        h->gp[i] = &h->g[i];
    }
    h->spec.groups = h->gp;
    h->spec.n_groups = 2;
    troupe__v1__env_var__init(&h->ev);
    h->ev.key = "NCCL_NVLS_ENABLE";
    h->ev.value = "0";
    h->evp[0] = &h->ev;
    troupe__v1__label__init(&h->label);
    h->labelp[0] = &h->label;
    troupe__v1__profile_spec__init(&h->prof);
}

/* expect_bad validates h and checks the code and message. */
static void expect_bad(hand *h, const char *needle)
{
    tr_err err = {0};

    JT_STATUS(tr_jobspec_validate(&h->spec, &err), TROUPE_INVALID_ARGUMENT, &err);
    JT_CONTAINS(err.msg, needle);
}

static void validate_ok(void **state)
{
    hand h;
    tr_err err = {0};

    hand_init(&h);
    JT_STATUS(tr_jobspec_validate(&h.spec, &err), TROUPE_OK, &err);
    h.spec.env = h.evp; /* optional parts, all valid */
    h.spec.n_env = 1;
    h.label.key = "gpu";
    h.spec.cluster_labels = h.labelp;
    h.spec.n_cluster_labels = 1;
    h.prof.steps = "2:3";
    h.prof.workers = "*policy*";
    h.spec.profile = &h.prof;
    h.spec.workdir = "/srv/jobs";
    h.spec.max_restarts = 1000;
    h.g[1].strategy = "STRICT_SPREAD";
    h.g[1].cpus = 0.5;
    JT_STATUS(tr_jobspec_validate(&h.spec, &err), TROUPE_OK, &err);
    Troupe__V1__ElasticSpec el = TROUPE__V1__ELASTIC_SPEC__INIT;
    el.min_workers = 1, el.max_workers = 1, h.g[1].elastic = &el; /* an elastic group of 1 is valid */
    JT_STATUS(tr_jobspec_validate(&h.spec, &err), TROUPE_OK, &err);
    h.g[1].elastic = NULL;
    h.prof.steps = ""; /* an empty profile is no profile */
    h.prof.workers = "";
    JT_STATUS(tr_jobspec_validate(&h.spec, &err), TROUPE_OK, &err);
    h.g[1].gpus = 0; /* a CPU-only group beside a GPU group */
    JT_STATUS(tr_jobspec_validate(&h.spec, &err), TROUPE_OK, &err);
    h.g[0].gpus = 0; /* CPU-only groups alone need no virtual cluster */
    h.spec.n_cluster_nodes = 0;
    h.spec.cluster_nodes = NULL;
    JT_STATUS(tr_jobspec_validate(&h.spec, &err), TROUPE_OK, &err);
}

static void validate_groups(void **state)
{
    hand h;

    hand_init(&h), h.g[0].workers = 0, expect_bad(&h, "group policy: workers must be >= 1");
    hand_init(&h), h.g[1].workers = 4097,
                   expect_bad(&h, "group gen: workers must be >= 1 and <= 4096, got 4097");
    hand_init(&h), h.g[0].gpus = 65,
                   expect_bad(&h, "group policy: gpus must be <= 64 (0 = a CPU-only worker), got 65");
    hand_init(&h), h.g[0].cpus = 4097, expect_bad(&h, "group policy: cpus must be a number >= 0 and <= 4096");
    hand_init(&h), h.g[0].cpus = -1, expect_bad(&h, "group policy: cpus must be a number >= 0");
    hand_init(&h), h.g[0].cpus = NAN, expect_bad(&h, "group policy: cpus");
    hand_init(&h), h.g[1].strategy = "PAKC", expect_bad(&h, "group gen: unknown strategy 'PAKC' (use PACK");
    hand_init(&h), h.g[1].strategy = "pack",
                   expect_bad(&h, "group gen: unknown strategy 'pack'"); /* not canonical */
    hand_init(&h), h.g[1].strategy = "", expect_bad(&h, "group gen: unknown strategy ''");
    hand_init(&h), h.g[1].strategy = NULL, expect_bad(&h, "group gen: unknown strategy ''");
    hand_init(&h), h.g[1].env_style = "torchrunn",
                   expect_bad(&h, "group gen: unknown env_style 'torchrunn' (use torchrun, or leave it out)");
    Troupe__V1__ElasticSpec el = TROUPE__V1__ELASTIC_SPEC__INIT;
    hand_init(&h), h.g[0].workers = 3, h.g[0].elastic = &el, el.min_workers = 0, el.max_workers = 3,
                   expect_bad(&h, "group policy: elastic.min_workers: min_workers must be >= 1 and <= workers (3)");
    hand_init(&h), h.g[0].workers = 3, h.g[0].elastic = &el, el.min_workers = 2, el.max_workers = 4,
                   expect_bad(&h, "group policy: elastic.max_workers: max_workers must be >= min_workers (2) and "
                                  "<= workers (3), got 4");
    hand_init(&h), h.g[0].n_command = 0, expect_bad(&h, "group policy: command is empty");
    hand_init(&h), h.g[0].command = NULL, expect_bad(&h, "group policy: command is empty");
    hand_init(&h), h.g[0].n_command = 300,
                   expect_bad(&h, "group policy: command has 300 arguments, at most 256");
    hand_init(&h), h.cmd[1] = NULL, expect_bad(&h, "group policy: command[1] is missing");
    hand_init(&h), h.cmd[0] = "", expect_bad(&h, "group policy: command[0] (the program) is empty");
    hand_init(&h), h.g[1].name = "policy",
                   expect_bad(&h, "duplicate group name 'policy' (groups[0] and groups[1])");
    hand_init(&h), h.g[1].name = "bad name", expect_bad(&h, "groups[1]: name 'bad name' is not valid");
    hand_init(&h), h.g[1].name = NULL, expect_bad(&h, "groups[1]: name '' is not valid");
    hand_init(&h), h.gp[1] = NULL, expect_bad(&h, "groups[1]: name '' is not valid");
    hand_init(&h), h.spec.n_groups = 0, expect_bad(&h, "job job: no groups");
    hand_init(&h), h.spec.groups = NULL, expect_bad(&h, "job job: no groups");
    hand_init(&h), h.spec.n_groups = 257, expect_bad(&h, "257 groups, at most 256");
}

static void validate_job(void **state)
{
    hand h;
    tr_err err = {0};

    JT_STATUS(tr_jobspec_validate(NULL, &err), TROUPE_INVALID_ARGUMENT, &err);
    JT_CONTAINS(err.msg, "no job spec");
    hand_init(&h), h.spec.name = "", expect_bad(&h, "job name '' is not valid");
    hand_init(&h), h.spec.name = NULL, expect_bad(&h, "job name '' is not valid");
    hand_init(&h), h.spec.name = "a/b", expect_bad(&h, "job name 'a/b' is not valid (1 to 63 of letters");
    hand_init(&h), h.spec.n_cluster_nodes = 0, expect_bad(&h, "cluster: no nodes");
    hand_init(&h), h.spec.n_cluster_nodes = 0, h.g[0].gpus = 0,
                   expect_bad(&h, "only a job of CPU-only groups, gpu: 0, may leave it out");
    hand_init(&h), h.spec.cluster_nodes = NULL, expect_bad(&h, "cluster: 1 nodes but no list");
    hand_init(&h), h.nodes[0] = 0, expect_bad(&h, "cluster: node 0 has 0 GPUs; each node needs 1 to 64");
    hand_init(&h), h.nodes[0] = 65, expect_bad(&h, "cluster: node 0 has 65 GPUs");
    hand_init(&h), h.spec.n_cluster_nodes = 5000, expect_bad(&h, "cluster: 5000 nodes, at most 4096");
    hand_init(&h), h.spec.n_cluster_labels = 1, expect_bad(&h, "cluster: label 0 has no key");
    hand_init(&h), h.spec.max_restarts = 1001,
                   expect_bad(&h, "job job: max_restarts must be <= 1000, got 1001");
    hand_init(&h), h.spec.workdir = "rel/dir",
                   expect_bad(&h, "job job: workdir 'rel/dir' must be an absolute path");
}

static void validate_env(void **state)
{
    hand h;

    hand_init(&h), h.spec.env = h.evp, h.spec.n_env = 1, h.ev.key = "1X",
                   expect_bad(&h, "job: env name '1X' is not valid");
    hand_init(&h), h.g[1].env = h.evp, h.g[1].n_env = 1, h.ev.key = "A-B",
                   expect_bad(&h, "group gen: env name 'A-B' is not valid");
    hand_init(&h), h.g[1].env = h.evp, h.g[1].n_env = 1, h.ev.key = NULL,
                   expect_bad(&h, "group gen: env name '' is not valid");
    hand_init(&h), h.g[1].env = NULL, h.g[1].n_env = 1, expect_bad(&h, "group gen: env entry 0 is missing");
    /* the cap counts the whole job: 600 in a group and 600 at the top level */
    static Troupe__V1__EnvVar *many[600];
    hand_init(&h);
    for (size_t i = 0; i < 600; i++) {
        many[i] = &h.ev;
    }
    h.g[0].env = many, h.g[0].n_env = 600, h.spec.env = many, h.spec.n_env = 600;
    expect_bad(&h, "job: env: the job sets more than 1024 variables");
}

static void validate_profile(void **state)
{
    hand h;

    hand_init(&h), h.spec.profile = &h.prof, h.prof.steps = "2:3",
                   expect_bad(&h, "profile: steps and workers go together; workers is empty");
    hand_init(&h), h.spec.profile = &h.prof, h.prof.workers = "*",
                   expect_bad(&h, "profile: steps and workers go together; steps is empty");
    hand_init(&h), h.spec.profile = &h.prof, h.prof.workers = "*", h.prof.steps = "0:10",
                   expect_bad(&h, "profile: step range '0:10': start must be >= 1");
    hand_init(&h), h.spec.profile = &h.prof, h.prof.workers = "*", h.prof.steps = "3:3",
                   expect_bad(&h, "profile: step range '3:3': start must be less than stop");
    hand_init(&h), h.spec.profile = &h.prof, h.prof.workers = "[x", h.prof.steps = "1:2",
                   expect_bad(&h, "profile: worker pattern '[x' has an unclosed '['");
    hand_init(&h), h.spec.profile = &h.prof, h.prof.workers = ",", h.prof.steps = "1:2",
                   expect_bad(&h, "profile: no worker patterns");
}

/* validate_health: a hand-built spec's health settings are held to the
 * YAML path's bounds; 0 is the head's default. */
static void validate_health(void **state)
{
    Troupe__V1__HealthSpec hs = TROUPE__V1__HEALTH_SPEC__INIT;
    hand h;
    (void)state;

    hand_init(&h), h.spec.health = &hs;
    assert_int_equal(tr_jobspec_validate(&h.spec, NULL), TROUPE_OK);
    hs.stall_after_ms = 99, expect_bad(&h, "health.stall_after: 99 ms is out of bounds");
    hs.stall_after_ms = 0, hs.straggler_factor = 1.0, expect_bad(&h, "health.straggler_factor: 1 is out of bounds");
    hs.straggler_factor = NAN, expect_bad(&h, "health.straggler_factor: nan is out of bounds");
    hs.straggler_factor = 0, hs.memory_window = 600, expect_bad(&h, "health.memory_window: 600 steps");
    hs.memory_window = 0, hs.straggler_window = 1, expect_bad(&h, "health.straggler_window: 1 steps");
    hs.straggler_window = 0, hs.memory_near = -0.5, expect_bad(&h, "health.memory_near: -0.5 is out of bounds");
    hs.memory_near = 0, hs.memory_slope_mb = INFINITY, expect_bad(&h, "health.memory_slope_mb: inf");
}

/* validate_runtime: communicators and NeMo RL's variables in a spec that
 * did not come from YAML are held to the same rules. */
static void validate_runtime(void **state)
{
    Troupe__V1__CommunicatorSpec c = TROUPE__V1__COMMUNICATOR_SPEC__INIT, *cp = &c;
    Troupe__V1__EnvVar e2 = TROUPE__V1__ENV_VAR__INIT, *evs[2];
    char *groups[3] = {"policy", "gen", "policy"};
    hand h;
    (void)state;

    hand_init(&h), h.spec.communicators = &cp, h.spec.n_communicators = 1, c.name = "refit", c.groups = groups,
                   c.n_groups = 2;
    assert_int_equal(tr_jobspec_validate(&h.spec, NULL), TROUPE_OK);
    c.n_groups = 3, expect_bad(&h, "communicator refit: group policy is listed twice");
    c.n_groups = 0, expect_bad(&h, "communicator refit: expected 1 to 256 groups, got 0");
    c.n_groups = 2, c.name = "gen", expect_bad(&h, "communicator gen has the name of a group");
    c.name = "re fit", expect_bad(&h, "communicator name 're fit' is not valid");
    groups[1] = "trainer", c.name = "refit", expect_bad(&h, "communicator refit: no group named 'trainer'");
    hand_init(&h), h.spec.env = evs, evs[0] = &h.ev, evs[1] = &e2, h.spec.n_env = 1;
    h.ev.key = "NRL_NSYS_PROFILE_STEP_RANGE", h.ev.value = "2:3";
    expect_bad(&h, "env: NRL_NSYS_PROFILE_STEP_RANGE is set without NRL_NSYS_WORKER_PATTERNS");
    h.spec.n_env = 2, e2.key = "NRL_NSYS_WORKER_PATTERNS", e2.value = "*policy*";
    assert_int_equal(tr_jobspec_validate(&h.spec, NULL), TROUPE_OK);
    h.ev.value = "2:3:4", expect_bad(&h, "env: NRL_NSYS_PROFILE_STEP_RANGE: step range '2:3:4'");
    h.ev.value = "2:3", e2.value = "[x", expect_bad(&h, "env: NRL_NSYS_WORKER_PATTERNS: worker pattern '[x'");
    /* the same variables in a group's env, over the job's for its workers */
    hand_init(&h), h.g[1].env = evs, evs[0] = &h.ev, evs[1] = &e2, h.g[1].n_env = 1;
    h.ev.key = "NRL_NSYS_PROFILE_STEP_RANGE", h.ev.value = "2:3";
    expect_bad(&h, "group gen: env: NRL_NSYS_PROFILE_STEP_RANGE is set without NRL_NSYS_WORKER_PATTERNS");
    h.g[1].n_env = 2, e2.key = "NRL_NSYS_WORKER_PATTERNS", e2.value = "*gen*";
    assert_int_equal(tr_jobspec_validate(&h.spec, NULL), TROUPE_OK);
    h.ev.value = "3:3", expect_bad(&h, "group gen: env: NRL_NSYS_PROFILE_STEP_RANGE: step range '3:3'");
    h.ev.value = "2:3", e2.value = "[x", expect_bad(&h, "group gen: env: NRL_NSYS_WORKER_PATTERNS: worker pattern");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(validate_ok),  cmocka_unit_test(validate_groups),  cmocka_unit_test(validate_job),
    cmocka_unit_test(validate_env), cmocka_unit_test(validate_profile), cmocka_unit_test(validate_runtime),
    cmocka_unit_test(validate_health),
};

const struct CMUnitTest *jt_validate_tests(size_t *n)
{
    *n = sizeof(tests) / sizeof(tests[0]);
    return tests;
}
