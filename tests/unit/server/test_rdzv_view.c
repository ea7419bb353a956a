/* test_rdzv_view.c - who is who in a communicator (server/rdzv_view.c): a
 * caller found by its name whether or not the job's workers are laid out
 * group by group in rank order (the one-comparison guess, and the scan when
 * the guess misses), names that do not match the layout, and the epoch as
 * the highest attempt of the communicator's own groups only (found before or
 * after the other groups' workers, with the job's restarts as its bound). */
#include "test_helpers.h"

#include "rdzv_int.h"

#define MAXW 8

typedef struct fake_job {
    Troupe__V1__Job j;
    Troupe__V1__JobSpec spec;
    Troupe__V1__GroupSpec g[2], *gp[2];
    Troupe__V1__WorkerInfo w[MAXW], *wp[MAXW];
    char names[MAXW][32];
} fake_job;

/* mk: job 7 with groups "pol-a" (3 workers) and "gen" (2), its workers at
 * the slots order[] gives (order[i] = where the i-th of the layout sits). */
static void mk(fake_job *f, const int order[5])
{
    static const char *grp[5] = {"pol-a", "pol-a", "pol-a", "gen", "gen"};
    static const uint32_t rank[5] = {0, 1, 2, 0, 1};

    memset(f, 0, sizeof(*f));
    troupe__v1__job__init(&f->j);
    troupe__v1__job_spec__init(&f->spec);
    for (int g = 0; g < 2; g++) {
        troupe__v1__group_spec__init(&f->g[g]);
        f->gp[g] = &f->g[g];
    }
    f->g[0].name = "pol-a";
    f->g[0].workers = 3;
    f->g[1].name = "gen";
    f->g[1].workers = 2;
    f->spec.name = "job";
    f->spec.groups = f->gp;
    f->spec.n_groups = 2;
    for (int i = 0; i < 5; i++) {
        Troupe__V1__WorkerInfo *w = &f->w[order[i]];
        troupe__v1__worker_info__init(w);
        snprintf(f->names[order[i]], sizeof(f->names[0]), "job7-%s-%u", grp[i], rank[i]);
        w->name = f->names[order[i]];
        w->group = (char *)grp[i];
        w->node_name = "n";
        w->rank = rank[i];
        f->wp[order[i]] = w;
    }
    f->j.id = 7;
    f->j.spec = &f->spec;
    f->j.workers = f->wp;
    f->j.n_workers = 5;
}

static void check_all_found(const fake_job *f)
{
    for (int i = 0; i < 5; i++) {
        const Troupe__V1__WorkerInfo *w = tr_rdzv_worker_find(&f->j, f->names[i]);
        assert_non_null(w);
        assert_string_equal(w->name, f->names[i]);
    }
}

static void find_in_layout(void **state)
{
    const int order[5] = {0, 1, 2, 3, 4};
    fake_job f;
    (void)state;

    mk(&f, order);
    check_all_found(&f);
    assert_ptr_equal(tr_rdzv_worker_find(&f.j, "job7-gen-1"), &f.w[4]);
    assert_ptr_equal(tr_rdzv_worker_find(&f.j, "job7-pol-a-2"), &f.w[2]); /* a group name with a dash */
}

static void find_out_of_layout(void **state)
{
    const int order[5] = {4, 2, 0, 3, 1}; /* the guess lands on another worker: the scan finds it */
    fake_job f;
    (void)state;

    mk(&f, order);
    check_all_found(&f);
    assert_ptr_equal(tr_rdzv_worker_find(&f.j, "job7-pol-a-0"), &f.w[4]);
    assert_ptr_equal(tr_rdzv_worker_find(&f.j, "job7-gen-0"), &f.w[3]);
}

static void find_unknown(void **state)
{
    const int order[5] = {0, 1, 2, 3, 4};
    fake_job f;
    (void)state;

    mk(&f, order);
    assert_null(tr_rdzv_worker_find(&f.j, "job7-gen-2"));   /* past the group's workers */
    assert_null(tr_rdzv_worker_find(&f.j, "job7-gen-1x"));  /* not a rank */
    assert_null(tr_rdzv_worker_find(&f.j, "job7-other-0")); /* no such group */
    assert_null(tr_rdzv_worker_find(&f.j, "job8-gen-1"));   /* another job's name at a valid slot */
    assert_null(tr_rdzv_worker_find(&f.j, "gen"));
    assert_null(tr_rdzv_worker_find(&f.j, ""));
    assert_null(tr_rdzv_worker_find(&f.j, "-"));
    assert_null(tr_rdzv_worker_find(&f.j, "job7-gen-"));
}

static void epoch_of_own_groups(void **state)
{
    const int order[5] = {0, 1, 2, 3, 4};
    fake_job f;
    tr_rdzv_view v;
    tr_err err;
    (void)state;

    mk(&f, order);
    TR_ASSERT_OK(tr_rdzv_view_of(&f.j, "gen", &f.w[4], &v, &err), &err);
    assert_int_equal(v.epoch, 0);
    assert_int_equal(v.size, 2);
    assert_int_equal(v.rank, 1);
    f.j.restarts = 3; /* attempts are set from the job's restarts (jobs.c) */
    f.w[1].attempt = 3; /* pol-a restarted: gen's epoch is not its */
    f.w[3].attempt = 2;
    TR_ASSERT_OK(tr_rdzv_view_of(&f.j, "gen", &f.w[4], &v, &err), &err);
    assert_int_equal(v.epoch, 2);
    TR_ASSERT_OK(tr_rdzv_view_of(&f.j, "pol-a", NULL, &v, &err), &err);
    assert_int_equal(v.epoch, 3);
    assert_int_equal(v.size, 3);
    f.j.restarts = 4; /* gen restarted once more: its last worker holds the epoch */
    f.w[4].attempt = 4;
    TR_ASSERT_OK(tr_rdzv_view_of(&f.j, "gen", NULL, &v, &err), &err);
    assert_int_equal(v.epoch, 4);
    TR_ASSERT_OK(tr_rdzv_view_of(&f.j, "pol-a", NULL, &v, &err), &err);
    assert_int_equal(v.epoch, 3);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(find_in_layout),
        cmocka_unit_test(find_out_of_layout),
        cmocka_unit_test(find_unknown),
        cmocka_unit_test(epoch_of_own_groups),
    };
    return TR_TEST_MAIN("server.rdzv_view", tests, argc, argv);
}
