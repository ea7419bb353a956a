/* test_parse.c - YAML to JobSpec: the README example field by field, then
 * each kind of bad input with the position and key its message must name. */
#include "jobspec_test.h"

static const char example[] = "name: grpo-demo\n"                               /* 1 */
                              "cluster:\n"                                      /* 2 */
                              "  nodes: [4, 8, 16]       # GPUs per node\n"     /* 3 */
                              "  labels: {gpu: H200}\n"                         /* 4 */
                              "groups:\n"                                       /* 5 */
                              "  - name: policy\n"                              /* 6 */
                              "    workers: 4\n"                                /* 7 */
                              "    resources: {gpu: 2, cpu: 4, memory: 64GB}\n" /* 8 */
                              "    strategy: PACK\n"                            /* 9 */
                              "    command: [troupe-train, --config, train.yaml]\n"
                              "    env: {KEY: value}\n"
                              "  - name: generation\n"
                              "    workers: 2\n"
                              "    resources: {gpu: 1, cpu: 0.5, memory: 1.5GiB}\n"
                              "    strategy: strict_spread\n"
                              "    command: troupe-gen  --port 8000\n"
                              "env: {KEY: value, NCCL_NVLS_ENABLE: \"0\"}\n"
                              "workdir: .\n"
                              "restart: {max_restarts: 3}\n"
                              "timeout_s: 3600\n"
                              "profile: {steps: \"2:3\", workers: \"*policy*\"}\n";

static void check_env(Troupe__V1__EnvVar *const *env, size_t n, size_t i, const char *k, const char *v)
{
    assert_true(i < n);
    assert_string_equal(env[i]->key, k);
    assert_string_equal(env[i]->value, v);
}

static void check_groups(const Troupe__V1__JobSpec *s)
{
    const Troupe__V1__GroupSpec *p, *g;

    assert_int_equal(s->n_groups, 2);
    p = s->groups[0];
    assert_string_equal(p->name, "policy");
    assert_int_equal(p->workers, 4);
    assert_int_equal(p->gpus, 2);
    assert_true(p->cpus == 4.0);
    assert_true(p->memory_bytes == 64000000000ULL);
    assert_string_equal(p->strategy, "PACK");
    assert_int_equal(p->n_command, 3);
    assert_string_equal(p->command[0], "troupe-train");
    assert_string_equal(p->command[1], "--config");
    assert_string_equal(p->command[2], "train.yaml");
    assert_int_equal(p->n_env, 1);
    check_env(p->env, p->n_env, 0, "KEY", "value");
    g = s->groups[1];
    assert_string_equal(g->name, "generation");
    assert_int_equal(g->workers, 2);
    assert_int_equal(g->gpus, 1);
    assert_true(g->cpus == 0.5);
    assert_true(g->memory_bytes == 1610612736ULL);
    assert_string_equal(g->strategy, "STRICT_SPREAD"); /* canonical spelling */
    assert_int_equal(g->n_command, 3);
    assert_string_equal(g->command[0], "troupe-gen");
    assert_string_equal(g->command[1], "--port");
    assert_string_equal(g->command[2], "8000");
    assert_int_equal(g->n_env, 0);
}

static void example_full(void **state)
{
    Troupe__V1__JobSpec *s = jt_parse(example);
    tr_err err = {0};

    assert_string_equal(s->name, "grpo-demo");
    assert_int_equal(s->n_cluster_nodes, 3);
    assert_int_equal(s->cluster_nodes[0], 4);
    assert_int_equal(s->cluster_nodes[1], 8);
    assert_int_equal(s->cluster_nodes[2], 16);
    assert_int_equal(s->n_cluster_labels, 1);
    assert_string_equal(s->cluster_labels[0]->key, "gpu");
    assert_string_equal(s->cluster_labels[0]->value, "H200");
    check_groups(s);
    assert_int_equal(s->n_env, 2);
    check_env(s->env, s->n_env, 0, "KEY", "value");
    check_env(s->env, s->n_env, 1, "NCCL_NVLS_ENABLE", "0");
    assert_string_equal(s->workdir, "/srv/jobs");
    assert_int_equal(s->max_restarts, 3);
    assert_int_equal(s->timeout_s, 3600);
    assert_string_equal(s->source, "job.yaml");
    assert_non_null(s->profile);
    assert_string_equal(s->profile->steps, "2:3");
    assert_string_equal(s->profile->workers, "*policy*");
    JT_STATUS(tr_jobspec_validate(s, &err), TROUPE_OK, &err);
    tr_jobspec_free(s);
    tr_jobspec_free(NULL); /* a no-op, by contract */
}

/* defaults: strategy PACK, no cpu/memory/env/profile, max_restarts and
 * timeout 0, workdir the base directory; null values read as absent. */
static void defaults_and_nulls(void **state)
{
    char *yaml =
        jt_group("1", "{gpu: 1}", "[run]", "    env:\n    strategy: ~\nprofile:\n  steps:\nrestart: {}\n");
    Troupe__V1__JobSpec *s = jt_parse(yaml);
    const Troupe__V1__GroupSpec *g = s->groups[0];

    assert_string_equal(g->strategy, "PACK");
    assert_true(g->cpus == 0.0);
    assert_true(g->memory_bytes == 0);
    assert_int_equal(g->n_env, 0);
    assert_int_equal(s->n_env, 0);
    assert_int_equal(s->n_cluster_labels, 0);
    assert_null(s->profile);
    assert_int_equal(s->max_restarts, 0);
    assert_int_equal(s->timeout_s, 0);
    assert_string_equal(s->workdir, "/srv/jobs");
    tr_jobspec_free(s);
    free(yaml);
}

/* The built message must survive protobuf-c's own pack and unpack: proof
 * that every field is in the shape free_unpacked and the wire expect. */
static void pack_roundtrip(void **state)
{
    Troupe__V1__JobSpec *s = jt_parse(example), *u;
    size_t n = troupe__v1__job_spec__get_packed_size(s);
    uint8_t *buf = malloc(n);
    tr_err err = {0};

    assert_non_null(buf);
    assert_int_equal(troupe__v1__job_spec__pack(s, buf), n);
    u = troupe__v1__job_spec__unpack(NULL, n, buf);
    assert_non_null(u);
    JT_STATUS(tr_jobspec_validate(u, &err), TROUPE_OK, &err);
    assert_string_equal(u->groups[1]->command[2], "8000");
    assert_string_equal(u->profile->workers, "*policy*");
    troupe__v1__job_spec__free_unpacked(u, NULL);
    free(buf);
    tr_jobspec_free(s);
}

static void negative_workers(void **state)
{
    const char *yaml = "name: demo\n"
                       "cluster:\n"
                       "  nodes: [8]\n"
                       "groups:\n"
                       "  - name: policy\n"
                       "    resources: {gpu: 1}\n"
                       "    workers: -2\n"
                       "    command: [run]\n";
    jt_fails(yaml, TROUPE_INVALID_ARGUMENT,
             "job.yaml:7:14: groups[0].workers: expected an integer >= 1, got -2", (const char *)NULL);
    jt_fails_group("0", "{gpu: 1}", "[run]", "", TROUPE_INVALID_ARGUMENT, "6:14",
                   "workers: expected an integer >= 1, got 0");
    jt_fails_group("4097", "{gpu: 1}", "[run]", "", TROUPE_INVALID_ARGUMENT, "6:14", "<= 4096, got 4097");
    jt_fails_group("many", "{gpu: 1}", "[run]", "", TROUPE_INVALID_ARGUMENT, "6:14", "got 'many'");
    jt_fails_group("2.5", "{gpu: 1}", "[run]", "", TROUPE_INVALID_ARGUMENT, "6:14", "got '2.5'");
    jt_fails_group("[1]", "{gpu: 1}", "[run]", "", TROUPE_INVALID_ARGUMENT, "6:14",
                   "workers: expected an integer, got a list");
    jt_fails_group("99999999999999999999", "{gpu: 1}", "[run]", "", TROUPE_INVALID_ARGUMENT, "6:14",
                   "<= 4096");
}

/* gpu: 0 is a CPU-only worker: it parses, with or without a virtual cluster;
 * a group with GPUs still needs cluster.nodes, said at its gpu key. */
static void zero_gpus(void **state)
{
    Troupe__V1__JobSpec *spec;
    char *yaml = jt_group("2", "{gpu: 0, cpu: 0.5}", "[run]", "");

    spec = jt_parse(yaml);
    assert_int_equal(spec->groups[0]->gpus, 0);
    assert_true(spec->groups[0]->cpus == 0.5);
    tr_jobspec_free(spec);
    free(yaml);
    spec = jt_parse("name: cpu\ngroups:\n  - {name: a, workers: 3, resources: {gpu: 0}, command: [x]}\n");
    assert_int_equal(spec->n_cluster_nodes, 0);
    assert_int_equal(spec->groups[0]->gpus, 0);
    tr_jobspec_free(spec);
    spec = jt_parse("name: cpu\ncluster: {labels: {zone: a}}\ngroups:\n"
                    "  - {name: a, workers: 1, resources: {gpu: 0}, command: [x]}\n");
    assert_int_equal(spec->n_cluster_nodes, 0);
    assert_int_equal(spec->n_cluster_labels, 1);
    tr_jobspec_free(spec);
    spec = jt_parse("name: mixed\ncluster: {nodes: [1]}\ngroups:\n"
                    "  - {name: g, workers: 1, resources: {gpu: 1}, command: [x]}\n"
                    "  - {name: c, workers: 2, resources: {gpu: 0}, command: [x]}\n");
    assert_int_equal(spec->groups[0]->gpus, 1);
    assert_int_equal(spec->groups[1]->gpus, 0);
    tr_jobspec_free(spec);
    jt_fails("name: demo\ngroups:\n  - name: a\n    workers: 1\n    resources: {gpu: 2}\n    command: [x]\n",
             TROUPE_INVALID_ARGUMENT,
             "job.yaml:5:22: groups[0].resources.gpu: 2 GPUs per worker, but the job has no "
             "cluster.nodes",
             "or gpu: 0 for a CPU-only worker", (const char *)NULL);
    jt_fails_group("1", "{gpu: 0, cpu: 4097}", "[run]", "", TROUPE_INVALID_ARGUMENT, "7:30",
                   "groups[0].resources.cpu: expected a number > 0 and <= 4096, got '4097'");
    jt_fails_group("1", "{gpu: -1}", "[run]", "", TROUPE_INVALID_ARGUMENT, "7:22", ">= 0");
    jt_fails_group("1", "{gpu: 65}", "[run]", "", TROUPE_INVALID_ARGUMENT, "7:22", "<= 64");
    jt_fails_group("1", "{cpu: 2}", "[run]", "", TROUPE_INVALID_ARGUMENT, "7:16",
                   "missing required key 'groups[0].resources.gpu'");
    jt_fails_group("1", "{gpu: 1, cpu: 0}", "[run]", "", TROUPE_INVALID_ARGUMENT, "7:30",
                   "groups[0].resources.cpu: expected a number > 0 and <= 4096, got '0'");
    jt_fails_group("1", "{gpu: 1, cpu: nan}", "[run]", "", TROUPE_INVALID_ARGUMENT, "cpu", "'nan'");
    jt_fails_group("1", "{gpu: 1, cpu: -1}", "[run]", "", TROUPE_INVALID_ARGUMENT, "cpu", "'-1'");
    jt_fails_group("1", "{gpu: 1, cpu: 0x10}", "[run]", "", TROUPE_INVALID_ARGUMENT, "cpu", "'0x10'");
    jt_fails_group("1", "8", "[run]", "", TROUPE_INVALID_ARGUMENT, "7:16", "resources: expected a mapping");
}

static void strategies(void **state)
{
    static const char *const ok[][2] = {{"PACK", "PACK"},
                                        {"spread", "SPREAD"},
                                        {"Strict_Pack", "STRICT_PACK"},
                                        {"STRICT_SPREAD", "STRICT_SPREAD"}};

    for (size_t i = 0; i < 4; i++) {
        char extra[64];
        snprintf(extra, sizeof(extra), "    strategy: %s\n", ok[i][0]);
        char *yaml = jt_group("1", "{gpu: 1}", "[run]", extra);
        Troupe__V1__JobSpec *s = jt_parse(yaml);
        assert_string_equal(s->groups[0]->strategy, ok[i][1]);
        tr_jobspec_free(s);
        free(yaml);
    }
    jt_fails_group("1", "{gpu: 1}", "[run]", "    strategy: PAKC\n", TROUPE_INVALID_ARGUMENT,
                   "job.yaml:9:15: groups[0].strategy: unknown strategy 'PAKC' (use PACK, SPREAD, "
                   "STRICT_PACK or STRICT_SPREAD)",
                   NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "    strategy: [PACK]\n", TROUPE_INVALID_ARGUMENT, "9:15",
                   "strategy: expected a strategy name, got a list");
}

static void env_styles(void **state)
{
    char *yaml = jt_group("1", "{gpu: 1}", "[run]", "    env_style: torchrun\n");
    Troupe__V1__JobSpec *s = jt_parse(yaml);
    (void)state;
    assert_string_equal(s->groups[0]->env_style, "torchrun");
    tr_jobspec_free(s);
    free(yaml);
    yaml = jt_group("1", "{gpu: 1}", "[run]", "");
    s = jt_parse(yaml);
    assert_string_equal(s->groups[0]->env_style, ""); /* troupe's variables only */
    tr_jobspec_free(s);
    free(yaml);
    jt_fails_group("1", "{gpu: 1}", "[run]", "    env_style: torchrunn\n", TROUPE_INVALID_ARGUMENT,
                   "job.yaml:9:16: groups[0].env_style: unknown env_style 'torchrunn' (use torchrun, or leave it "
                   "out for troupe's variables only)",
                   NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "    env_style: [torchrun]\n", TROUPE_INVALID_ARGUMENT, "9:16",
                   "env_style: expected an environment style, got a list");
}

/* elastic: the bounds point at the key at fault; max_workers defaults to
 * workers; an elastic group may not be part of a declared communicator. */
static void elastic_groups(void **state)
{
    char *yaml = jt_group("3", "{gpu: 0}", "[run]", "    elastic: {min_workers: 2}\n");
    Troupe__V1__JobSpec *s = jt_parse(yaml);
    (void)state;
    assert_non_null(s->groups[0]->elastic);
    assert_int_equal(s->groups[0]->elastic->min_workers, 2);
    assert_int_equal(s->groups[0]->elastic->max_workers, 3);
    tr_jobspec_free(s);
    free(yaml);
    yaml = jt_group("3", "{gpu: 0}", "[run]", "");
    s = jt_parse(yaml);
    assert_null(s->groups[0]->elastic); /* not elastic: today's restart rules */
    tr_jobspec_free(s);
    free(yaml);
    jt_fails_group("3", "{gpu: 0}", "[run]", "    elastic: {min_workers: 4}\n", TROUPE_INVALID_ARGUMENT,
                   "job.yaml:9:28: groups[0].elastic: min_workers must be >= 1 and <= workers (3), got 4", NULL);
    jt_fails_group("3", "{gpu: 0}", "[run]", "    elastic: {min_workers: 0}\n", TROUPE_INVALID_ARGUMENT,
                   "job.yaml:9:28: groups[0].elastic.min_workers: expected an integer >= 1, got 0", NULL);
    jt_fails_group("3", "{gpu: 0}", "[run]", "    elastic: {min_workers: 2, max_workers: 4}\n",
                   TROUPE_INVALID_ARGUMENT, "job.yaml:9:44: groups[0].elastic: max_workers must be >= min_workers (2)",
                   "a group grows back to the size it was placed at");
    jt_fails_group("3", "{gpu: 0}", "[run]", "    elastic: {min_workers: 2, max_workers: 1}\n",
                   TROUPE_INVALID_ARGUMENT, "9:44", "max_workers must be >= min_workers (2) and <= workers (3), got 1");
    jt_fails_group("3", "{gpu: 0}", "[run]", "    elastic: {max_workers: 3}\n", TROUPE_INVALID_ARGUMENT, "9:14",
                   "missing required key 'groups[0].elastic.min_workers'");
    jt_fails_group("3", "{gpu: 0}", "[run]", "    elastic: {min_workers: 2, spare: 1}\n", TROUPE_INVALID_ARGUMENT,
                   "9:", "min_workers and max_workers");
    jt_fails_group("3", "{gpu: 0}", "[run]", "    elastic: 2\n", TROUPE_INVALID_ARGUMENT, "9:14",
                   "elastic: expected a mapping with min_workers and max_workers");
    jt_fails_group("3", "{gpu: 0}", "[run]",
                   "    elastic: {min_workers: 2}\n"
                   "  - name: gen\n"
                   "    workers: 1\n"
                   "    resources: {gpu: 0}\n"
                   "    command: [run]\n"
                   "communicators: [{name: refit, groups: [policy, gen]}]\n",
                   TROUPE_INVALID_ARGUMENT, "job.yaml:14:40: communicators[0]: communicator refit: group policy is elastic",
                   "an elastic group is its own communicator only");
}

static void duplicate_groups(void **state)
{
    const char *yaml = "name: demo\n"
                       "cluster: {nodes: [8]}\n"
                       "groups:\n"
                       "  - name: policy\n"
                       "    workers: 1\n"
                       "    resources: {gpu: 1}\n"
                       "    command: [run]\n"
                       "  - {name: other, workers: 1, resources: {gpu: 1}, command: [run]}\n"
                       "  - name: policy\n"
                       "    workers: 1\n"
                       "    resources: {gpu: 1}\n"
                       "    command: [run]\n";
    jt_fails(yaml, TROUPE_INVALID_ARGUMENT, "job.yaml:9:5: duplicate group name 'policy' (first at line 4)",
             (const char *)NULL);
}

static void unknown_keys(void **state)
{
    jt_fails("name: demo\ncluster:\n  nodse: [8]\n", TROUPE_INVALID_ARGUMENT,
             "job.yaml:3:3: unknown key 'nodse' in cluster (expected nodes or labels)", (const char *)NULL);
    jt_fails("name: demo\nnmae: x\n", TROUPE_INVALID_ARGUMENT, "job.yaml:2:1: unknown key 'nmae' in the job",
             "name, cluster, groups", (const char *)NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "    worker: 3\n", TROUPE_INVALID_ARGUMENT,
                   "job.yaml:9:5: unknown key 'worker' in groups[0]", "workers, resources");
    jt_fails_group("1", "{gpu: 1, gpus: 2}", "[run]", "", TROUPE_INVALID_ARGUMENT,
                   "job.yaml:7:25: unknown key 'gpus' in groups[0].resources", "gpu, cpu or memory");
    jt_fails_group("1", "{gpu: 1}", "[run]", "restart: {max_restart: 1}\n", TROUPE_INVALID_ARGUMENT,
                   "9:11: unknown key 'max_restart' in restart", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "profile: {step: \"1:2\"}\n", TROUPE_INVALID_ARGUMENT,
                   "9:11: unknown key 'step' in profile", NULL);
    /* a key repeated in one mapping is an error, not last-one-wins */
    jt_fails_group("1", "{gpu: 1}", "[run]", "    workers: 2\n", TROUPE_INVALID_ARGUMENT,
                   "job.yaml:9:5: duplicate key 'workers' in groups[0] (first at line 6)", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "    ? [a]\n    : b\n", TROUPE_INVALID_ARGUMENT, "9:7",
                   "keys in groups[0] must be plain names");
}

static void malformed_yaml(void **state)
{
    jt_fails("name: demo\ncluster: {nodes: [8]\ngroups: []\n", TROUPE_INVALID_ARGUMENT,
             "job.yaml:3:", "did not find expected ',' or '}'", (const char *)NULL);
    jt_fails("name: demo\n  bad: indent\n", TROUPE_INVALID_ARGUMENT,
             "job.yaml:2:6:", "mapping values are not allowed", (const char *)NULL);
    jt_fails("name: \"unterminated\n", TROUPE_INVALID_ARGUMENT, "job.yaml:", "unexpected end of stream",
             (const char *)NULL);
    jt_fails("groups: *nothing\n", TROUPE_INVALID_ARGUMENT, "job.yaml:1:9:", "undefined alias",
             (const char *)NULL);
}

static void empty_and_shape(void **state)
{
    jt_fails("", TROUPE_INVALID_ARGUMENT, "job.yaml: empty job spec", (const char *)NULL);
    jt_fails("# just a comment\n\n", TROUPE_INVALID_ARGUMENT, "empty job spec", (const char *)NULL);
    jt_fails("~\n", TROUPE_INVALID_ARGUMENT, "empty job spec", (const char *)NULL);
    jt_fails("- name: demo\n", TROUPE_INVALID_ARGUMENT, "job.yaml:1:1: job spec: expected a mapping",
             "got a list", (const char *)NULL);
    jt_fails("name: demo\ncluster: {nodes: [8]}\ngroups: [policy]\n", TROUPE_INVALID_ARGUMENT,
             "job.yaml:3:10: groups[0]: expected a mapping (a group), got a single value",
             (const char *)NULL);
    jt_fails("name: demo\ncluster: {nodes: [8]}\ngroups: []\n", TROUPE_INVALID_ARGUMENT,
             "job.yaml:3:9: groups: expected 1 to 256 groups, got 0", (const char *)NULL);
    jt_fails("name: demo\ncluster: {nodes: []}\n", TROUPE_INVALID_ARGUMENT,
             "2:18: cluster.nodes: expected 1 to", (const char *)NULL);
    jt_fails("name: demo\ncluster: {nodes: [8, 0]}\n", TROUPE_INVALID_ARGUMENT,
             "2:22: cluster.nodes[1]: expected an integer >= 1, got 0", (const char *)NULL);
    jt_fails("name: demo\ncluster: {nodes: [65]}\n", TROUPE_INVALID_ARGUMENT, "cluster.nodes[0]", "<= 64",
             (const char *)NULL);
    jt_fails("name: demo\ncluster: {nodes: 8}\n", TROUPE_INVALID_ARGUMENT, "cluster.nodes: expected a list",
             (const char *)NULL);
    /* a second document would be silently dropped by a plain load */
    char *yaml = jt_group("1", "{gpu: 1}", "[run]", "---\nname: other\n");
    jt_fails(yaml, TROUPE_INVALID_ARGUMENT, "job.yaml:10:1: a job spec is one YAML document",
             (const char *)NULL);
    free(yaml);
}

static void missing_required(void **state)
{
    jt_fails("cluster: {nodes: [8]}\n", TROUPE_INVALID_ARGUMENT, "job.yaml:1:1: missing required key 'name'",
             (const char *)NULL);
    jt_fails("name: demo\ngroups: []\n", TROUPE_INVALID_ARGUMENT,
             "job.yaml:2:9: groups: expected 1 to 256 groups, got 0", (const char *)NULL);
    jt_fails("name: demo\ncluster: {nodes: [8]}\n", TROUPE_INVALID_ARGUMENT,
             "job.yaml:1:1: missing required key 'groups'", (const char *)NULL);
    jt_fails("name: demo\ncluster: {nodes: [8]}\ngroups:\n  - workers: 1\n", TROUPE_INVALID_ARGUMENT,
             "job.yaml:4:5: missing required key 'groups[0].name'", (const char *)NULL);
    jt_fails("name: demo\ncluster: {nodes: [8]}\ngroups:\n  - name: a\n    command: [x]\n",
             TROUPE_INVALID_ARGUMENT, "job.yaml:4:5: missing required key 'groups[0].workers'",
             (const char *)NULL);
    jt_fails("name: demo\ncluster: {nodes: [8]}\ngroups:\n  - {name: a, workers: 1, command: [x]}\n",
             TROUPE_INVALID_ARGUMENT, "job.yaml:4:5: missing required key 'groups[0].resources'",
             (const char *)NULL);
    jt_fails("name: demo\ncluster: {nodes: [8]}\ngroups:\n  - {name: a, workers: 1, resources: {gpu: 1}}\n",
             TROUPE_INVALID_ARGUMENT, "job.yaml:4:5: missing required key 'groups[0].command'",
             (const char *)NULL);
    jt_fails("name:\ncluster: {nodes: [8]}\n", TROUPE_INVALID_ARGUMENT, "job.yaml:1:6: name: expected a name",
             "got an empty value", (const char *)NULL);
}

static void names(void **state)
{
    jt_fails("name: has space\n", TROUPE_INVALID_ARGUMENT,
             "job.yaml:1:7: name: 'has space' is not a valid name", (const char *)NULL);
    jt_fails("name: ..\n", TROUPE_INVALID_ARGUMENT, "'..' is not a valid name", (const char *)NULL);
    jt_fails("name: a/b\n", TROUPE_INVALID_ARGUMENT, "'a/b' is not a valid name", (const char *)NULL);
    jt_fails("name: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", /* 64 */
             TROUPE_INVALID_ARGUMENT, "is not a valid name (1 to 63", (const char *)NULL);
    jt_fails("name: \"a\\0b\"\n", TROUPE_INVALID_ARGUMENT, "1:7: name: contains a NUL character",
             (const char *)NULL);
    char *yaml = jt_group("1", "{gpu: 1}", "[run]", "");
    memcpy(strstr(yaml, "demo"), "D.e-", 4); /* letters, digits, '.', '_' and '-' are fine */
    Troupe__V1__JobSpec *s = jt_parse(yaml);
    assert_string_equal(s->name, "D.e-");
    tr_jobspec_free(s);
    free(yaml);
}

static void profile_pairs(void **state)
{
    jt_fails_group("1", "{gpu: 1}", "[run]", "profile:\n  steps: \"2:3\"\n", TROUPE_INVALID_ARGUMENT,
                   "job.yaml:10:3: profile: steps and workers go together", "workers is missing");
    jt_fails_group("1", "{gpu: 1}", "[run]", "profile: {workers: \"*policy*\"}\n", TROUPE_INVALID_ARGUMENT,
                   "job.yaml:9:10: profile: steps and workers go together", "steps is missing");
    jt_fails_group("1", "{gpu: 1}", "[run]", "profile: \"2:3\"\n", TROUPE_INVALID_ARGUMENT, "9:10",
                   "profile: expected a mapping with steps and workers");
}

static void profile_bad_ranges(void **state)
{
    static const char *const bad[][2] = {
        {"\"0:10\"", "start must be >= 1"},
        {"\"3:3\"", "start must be less than stop"},
        {"\"5:2\"", "start must be less than stop"},
        {"\"a:b\"", "whole numbers"},
        {"\"2\"", "has no ':'"},
        {"\"\"", "empty step range"},
        {"\"-1:3\"", "whole numbers"},
        {"\"1:99999999999\"", "whole numbers"},
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char extra[96];
        snprintf(extra, sizeof(extra), "profile:\n  steps: %s\n  workers: \"*\"\n", bad[i][0]);
        jt_fails_group("1", "{gpu: 1}", "[run]", extra, TROUPE_INVALID_ARGUMENT,
                       "job.yaml:10:10: profile.steps: ", bad[i][1]);
    }
    jt_fails_group("1", "{gpu: 1}", "[run]", "profile: {steps: \"1:2\", workers: \"*policy,[ab\"}\n",
                   TROUPE_INVALID_ARGUMENT, "9:34: profile.workers: worker pattern '[ab' has an unclosed '['",
                   NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "profile: {steps: \"1:2\", workers: \" , \"}\n",
                   TROUPE_INVALID_ARGUMENT, "profile.workers: no worker patterns", NULL);
}

/* health: durations with units or "auto", warn/fail, the thresholds; bad
 * values point at their key with the bounds. */
static void health_settings(void **state)
{
    char *yaml = jt_group("1", "{gpu: 1}", "[run]",
                          "health: {stall_after: 2.5s, on_stall: fail, straggler_factor: 1.5, straggler_window: 8,\n"
                          "         memory_window: 30, memory_slope_mb: 0.5, memory_near: 0.9}\n");
    Troupe__V1__JobSpec *s = jt_parse(yaml);
    static const char *const durations[][2] = {{"500ms", "500"}, {"30", "30000"}, {"2m", "120000"},
                                               {"1h", "3600000"}, {"auto", "0"}};

    assert_non_null(s->health);
    assert_int_equal(s->health->stall_after_ms, 2500);
    assert_true(s->health->on_stall_fail && s->health->on_stall_set);
    assert_true(s->health->straggler_factor == 1.5);
    assert_int_equal(s->health->straggler_window, 8);
    assert_int_equal(s->health->memory_window, 30);
    assert_true(s->health->memory_slope_mb == 0.5 && s->health->memory_near == 0.9);
    tr_jobspec_free(s);
    free(yaml);
    for (size_t i = 0; i < sizeof(durations) / sizeof(durations[0]); i++) {
        char extra[96];
        snprintf(extra, sizeof(extra), "health: {stall_after: %s, on_stall: warn}\n", durations[i][0]);
        yaml = jt_group("1", "{gpu: 1}", "[run]", extra);
        s = jt_parse(yaml);
        assert_int_equal(s->health->stall_after_ms, strtoul(durations[i][1], NULL, 10));
        assert_true(s->health->on_stall_set && !s->health->on_stall_fail);
        tr_jobspec_free(s);
        free(yaml);
    }
    jt_fails_group("1", "{gpu: 1}", "[run]", "health: {stall_after: 10 minutes}\n", TROUPE_INVALID_ARGUMENT,
                   "job.yaml:9:23: health.stall_after: ", "unknown unit");
    jt_fails_group("1", "{gpu: 1}", "[run]", "health: {stall_after: 50ms}\n", TROUPE_INVALID_ARGUMENT,
                   "9:23: health.stall_after: 50ms is shorter than 100 ms", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "health: {stall_after: 8d}\n", TROUPE_INVALID_ARGUMENT,
                   "health.stall_after: ", "unknown unit 'd'");
    jt_fails_group("1", "{gpu: 1}", "[run]", "health: {stall_after: 200h}\n", TROUPE_INVALID_ARGUMENT,
                   "health.stall_after: '200h' is longer than 7 days", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "health: {on_stall: restart}\n", TROUPE_INVALID_ARGUMENT,
                   "9:20: health.on_stall: expected warn or fail, got 'restart'", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "health: {straggler_factor: 0.9}\n", TROUPE_INVALID_ARGUMENT,
                   "9:28: health.straggler_factor: 0.9 is out of bounds (above 1", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "health: {straggler_factor: fast}\n", TROUPE_INVALID_ARGUMENT,
                   "health.straggler_factor: expected a number, got 'fast'", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "health: {memory_window: 1}\n", TROUPE_INVALID_ARGUMENT,
                   "health.memory_window: expected an integer >= 2", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "health: {straggler_window: 513}\n", TROUPE_INVALID_ARGUMENT,
                   "health.straggler_window: expected an integer <= 512", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "health: {memory_near: 1.2}\n", TROUPE_INVALID_ARGUMENT,
                   "9:23: health.memory_near: 1.2 is out of bounds", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "health: {memory_slope_mb: -1}\n", TROUPE_INVALID_ARGUMENT,
                   "health.memory_slope_mb: -1 is out of bounds", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "health: {stall: 3s}\n", TROUPE_INVALID_ARGUMENT, "health",
                   "stall");
    jt_fails_group("1", "{gpu: 1}", "[run]", "health: fail\n", TROUPE_INVALID_ARGUMENT, "9:9: health", NULL);
}

static void env_rules(void **state)
{
    char *yaml =
        jt_group("1", "{gpu: 1}", "[run]",
                 "    env:\n      A_1: x\n      _B: 'two words'\n      EMPTY:\n      T: true\n      Q: \"\"\n"
                 "env:\n  PATH_X: /a:/b\n");
    Troupe__V1__JobSpec *s = jt_parse(yaml);
    const Troupe__V1__GroupSpec *g = s->groups[0];

    assert_int_equal(g->n_env, 5);
    assert_string_equal(g->env[1]->value, "two words");
    assert_string_equal(g->env[2]->key, "EMPTY");
    assert_string_equal(g->env[2]->value, ""); /* null reads as empty */
    assert_string_equal(g->env[3]->value, "true");
    assert_string_equal(g->env[4]->value, "");
    assert_string_equal(s->env[0]->value, "/a:/b");
    tr_jobspec_free(s);
    free(yaml);
    jt_fails_group("1", "{gpu: 1}", "[run]", "    env: {1FOO: x}\n", TROUPE_INVALID_ARGUMENT,
                   "job.yaml:9:11: groups[0].env: '1FOO' is not a valid variable name", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "env:\n  FOO-BAR: x\n", TROUPE_INVALID_ARGUMENT,
                   "job.yaml:10:3: env: 'FOO-BAR' is not a valid variable name", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "env:\n  \"\": x\n", TROUPE_INVALID_ARGUMENT,
                   "env: '' is not a valid variable name", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "env:\n  FOO: [a]\n", TROUPE_INVALID_ARGUMENT,
                   "job.yaml:10:8: env.FOO: expected a single value, got a list", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "env: [A=b]\n", TROUPE_INVALID_ARGUMENT,
                   "9:6: env: expected a mapping of NAME: value", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "env: {A: 1, A: 2}\n", TROUPE_INVALID_ARGUMENT,
                   "9:13: duplicate key 'A' in env", NULL);
}

/* nrl_group_env: NeMo RL's profiling variables in a group's env: are held to
 * the job-level rules as that group's workers see them (its entries over the
 * job's), the message naming the group and pointing into its env:.
 *   1 name: demo                           6   - name: gen
 *   2 cluster: {nodes: [8]}                7     workers: 1
 *   3 env: {<job>}                         8     resources: {gpu: 1}
 *   4 groups:                              9     command: [run]
 *   5   - {name: policy, ... [run]}       10     env: {<group>}  (first key 10:11)
 *  11 <extra> */
#define NRL_R "NRL_NSYS_PROFILE_STEP_RANGE"
#define NRL_P "NRL_NSYS_WORKER_PATTERNS"
static void nrl_group_env(void **state)
{
    static const struct {
        const char *job, *group, *extra, *want; /* want NULL: accepted */
    } rows[] = {
        {"", NRL_R ": \"2:3\"", "", "job.yaml:10:11: group gen: env: " NRL_R " is set without " NRL_P},
        {"", NRL_P ": \"*gen*\"", "", "job.yaml:10:11: group gen: env: " NRL_P " is set without " NRL_R},
        {"", NRL_R ": \"3:3\", " NRL_P ": \"*gen*\"", "",
         "job.yaml:10:40: group gen: env: " NRL_R ": step range '3:3': start must be less than stop"},
        {"", NRL_R ": \"5:2\", " NRL_P ": \"*\"", "", "10:40: group gen: env: " NRL_R ": step range '5:2'"},
        {"", NRL_R ": \"0:2\", " NRL_P ": \"*\"", "", "10:40: group gen: env: " NRL_R ": step range '0:2': start must be >= 1"},
        {"", NRL_R ": \"2:3:4\", " NRL_P ": \"*\"", "", "10:40: group gen: env: " NRL_R ": step range '2:3:4'"},
        {"", NRL_R ": \"2\", " NRL_P ": \"*\"", "", "10:40: group gen: env: " NRL_R ": step range '2' has no ':'"},
        {"", NRL_R ": \"\", " NRL_P ": \"*\"", "", "10:40: group gen: env: " NRL_R ": empty step range"},
        {"", NRL_R ": \"2:3\", " NRL_P ": \"[x\"", "",
         "10:73: group gen: env: " NRL_P ": worker pattern '[x' has an unclosed '['"},
        /* a group's own entry overrides the job's: its bad range is its fault */
        {NRL_R ": \"2:3\", " NRL_P ": \"*gen*\"", NRL_R ": \"3:3\"", "",
         "job.yaml:10:40: group gen: env: " NRL_R ": step range '3:3'"},
        {NRL_R ": \"2:3\", " NRL_P ": \"*\"", NRL_R ": \"4:4\"", "", "10:40: group gen: env: " NRL_R ": step range '4:4'"},
        {"", NRL_R ": \"2:3\", " NRL_P ": \"*gen*\"", "profile: {steps: \"2:4\", workers: \"*gen*\"}\n",
         "10:40: group gen: env: " NRL_R "=2:3 and " NRL_P "=*gen* disagree with profile: {steps: 2:4"},
        {"", "TROUPE_NSYS: \"2\"", "", "10:24: group gen: env: TROUPE_NSYS is 0 or 1, not '2'"},
        {"", "TROUPE_NSYS: \"1\"", "", "10:24: group gen: env: TROUPE_NSYS=1 needs " NRL_R},
        /* the job's own mistakes are still the job's, at the job's entry */
        {NRL_R ": \"2:3\"", NRL_P ": \"*\"", "", "job.yaml:3:7: env: " NRL_R " is set without " NRL_P},
        /* accepted */
        {"", NRL_R ": \"2:3\", " NRL_P ": \"*gen*\"", "", NULL},
        /* the job's env alone is what policy sees: patterns without a range there are refused */
        {NRL_P ": \"*gen*\"", NRL_R ": \"2:4\"", "", "job.yaml:3:7: env: " NRL_P " is set without " NRL_R},
        /* the job's patterns complete the group's own range */
        {NRL_R ": \"2:3\", " NRL_P ": \"*\"", NRL_R ": \"5:7\"", "", NULL},
        {NRL_R ": \"2:3\", " NRL_P ": \"*policy*\"", NRL_R ": \"5:7\", " NRL_P ": \"*gen*\"", "", NULL},
        {"", NRL_R ": \"2:3\", " NRL_P ": \"*gen*\", TROUPE_NSYS: \"1\"", "", NULL},
    };
    (void)state;

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char yaml[1024];
        snprintf(yaml, sizeof(yaml),
                 "name: demo\ncluster: {nodes: [8]}\nenv: {%s}\ngroups:\n"
                 "  - {name: policy, workers: 1, resources: {gpu: 1}, command: [run]}\n"
                 "  - name: gen\n    workers: 1\n    resources: {gpu: 1}\n    command: [run]\n    env: {%s}\n%s",
                 rows[i].job, rows[i].group, rows[i].extra);
        if (rows[i].want == NULL) {
            tr_jobspec_free(jt_parse(yaml));
        } else {
            jt_fails(yaml, TROUPE_INVALID_ARGUMENT, rows[i].want, (const char *)NULL);
        }
    }
}

static void labels(void **state)
{
    Troupe__V1__JobSpec *s =
        jt_parse("name: d\ncluster:\n  nodes: [8, 8]\n  labels: {gpu: H200, zone: \"us-east/a:1\"}\n"
                 "groups: [{name: g, workers: 2, resources: {gpu: 8}, command: x}]\n");
    assert_int_equal(s->n_cluster_labels, 2);
    assert_string_equal(s->cluster_labels[1]->key, "zone");
    assert_string_equal(s->cluster_labels[1]->value, "us-east/a:1");
    assert_int_equal(s->n_cluster_nodes, 2);
    tr_jobspec_free(s);
    jt_fails("name: d\ncluster:\n  nodes: [8]\n  labels: {\"\": x}\n", TROUPE_INVALID_ARGUMENT,
             "4:12: cluster.labels: a label name is empty", (const char *)NULL);
    /* The label rules of nodes (common/names.h): no selector can match a value no node may carry. */
    jt_fails("name: d\ncluster:\n  nodes: [8]\n  labels: {zone: \"a b\"}\n"
             "groups: [{name: g, workers: 1, resources: {gpu: 8}, command: x}]\n",
             TROUPE_INVALID_ARGUMENT, "4:18: cluster.labels: label zone: value 'a b' is not valid (at most 253 of letters",
             (const char *)NULL);
    jt_fails("name: d\ncluster:\n  nodes: [8]\n  labels: [gpu]\n", TROUPE_INVALID_ARGUMENT,
             "4:11: cluster.labels: expected a mapping", (const char *)NULL);
}

static void top_level_values(void **state)
{
    jt_fails_group("1", "{gpu: 1}", "[run]", "timeout_s: -1\n", TROUPE_INVALID_ARGUMENT,
                   "9:12: timeout_s: expected an integer >= 0, got -1", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "timeout_s: 4294967296\n", TROUPE_INVALID_ARGUMENT,
                   "timeout_s: expected an integer <= 4294967295", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "restart: {max_restarts: 1001}\n", TROUPE_INVALID_ARGUMENT,
                   "9:25: restart.max_restarts: expected an integer <= 1000, got 1001", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "restart: 3\n", TROUPE_INVALID_ARGUMENT,
                   "9:10: restart: expected a mapping with max_restarts", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "workdir: [a]\n", TROUPE_INVALID_ARGUMENT,
                   "9:10: workdir: expected a directory, got a list", NULL);
    jt_fails_group("1", "{gpu: 1}", "[run]", "workdir: \"\"\n", TROUPE_INVALID_ARGUMENT,
                   "9:10: workdir: expected a directory, got an empty value", NULL);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(example_full),     cmocka_unit_test(defaults_and_nulls),
    cmocka_unit_test(pack_roundtrip),   cmocka_unit_test(negative_workers),
    cmocka_unit_test(zero_gpus),        cmocka_unit_test(strategies),
    cmocka_unit_test(duplicate_groups), cmocka_unit_test(unknown_keys),
    cmocka_unit_test(malformed_yaml),   cmocka_unit_test(empty_and_shape),
    cmocka_unit_test(missing_required), cmocka_unit_test(names),
    cmocka_unit_test(profile_pairs),    cmocka_unit_test(profile_bad_ranges), cmocka_unit_test(health_settings),
    cmocka_unit_test(env_rules),        cmocka_unit_test(nrl_group_env),        cmocka_unit_test(labels),
    cmocka_unit_test(top_level_values),   cmocka_unit_test(env_styles),         cmocka_unit_test(elastic_groups),
};

const struct CMUnitTest *jt_parse_tests(size_t *n)
{
    *n = sizeof(tests) / sizeof(tests[0]);
    return tests;
}
