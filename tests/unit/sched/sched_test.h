/* sched_test.h - helpers shared by the scheduler's unit tests. */
#ifndef SCHED_TEST_H
#define SCHED_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sched/sched.h"

/* Fail with the status name and message instead of "0x3 != 0x0". */
#define assert_status(got, want, err)                                                                        \
    do {                                                                                                     \
        int g_ = (got), w_ = (want);                                                                         \
        if (g_ != w_) {                                                                                      \
            fail_msg("status %s, want %s: %s", troupe_strerror(g_), troupe_strerror(w_), (err)->msg);        \
        }                                                                                                    \
    } while (0)

#define assert_contains(hay, needle)                                                                         \
    do {                                                                                                     \
        if (strstr((hay), (needle)) == NULL) {                                                               \
            fail_msg("'%s' does not contain '%s'", (hay), (needle));                                         \
        }                                                                                                    \
    } while (0)

#define T_MAX_V 64
#define T_MAX_G 8
#define T_MAX_SEL 4

/* A job spec parsed from short strings, with its own storage. */
typedef struct tjob {
    int vnodes[T_MAX_V];
    tr_sched_group_spec groups[T_MAX_G];
    char names[T_MAX_G][32];
    tr_sched_label sel[T_MAX_SEL];
    char selbuf[T_MAX_SEL][2][32];
    tr_sched_job_spec spec;
} tjob;

/* Cluster from a shape: "4,8,16", "3*8", "8@H200" (label gpu=H200), "8!" (dead),
 * "8?" (suspect), "0c4" (no GPU, 4 CPU slots; slots default to 0). Node ids
 * are 1, 2, ... in order. */
tr_sched *t_cluster(const char *shape);
/* Job from vnodes "4,8,16" ("" = none), groups "policy:4x2:PACK;gen:2x1:SPREAD"
 * ("c:3x0c0.5:PACK" = 3 CPU-only workers of 0.5 CPU), selector "gpu=H200" or NULL. */
void t_job(tjob *j, const char *vnodes, const char *groups, const char *selector);
/* Canonical text of a placement: "v=n3[0-15] | policy=n3[0-1]L0N0 ...". */
void t_render(const tr_sched_placement *p, const tr_sched_job_spec *spec, char *buf, size_t len);
/* Structural checks every placement must pass (GPU sets, strategies, ranks). */
void t_check_props(const tr_sched *s, const tr_sched_job_spec *spec, const tr_sched_placement *p);
void t_check_invariants(const tr_sched *s);
uint64_t t_free_gpus(const tr_sched *s);
/* t_free_cpu_milli: node's free CPU slots in thousandths. */
uint64_t t_free_cpu_milli(const tr_sched *s, uint64_t node);

const struct CMUnitTest *sched_place_tests(size_t *n);
const struct CMUnitTest *sched_queue_tests(size_t *n);

#endif
