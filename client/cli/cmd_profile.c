/* cmd_profile.c - `troupe profile` (run-time profiling control), and the
 * worker-runtime parts of `troupe job` (profile setting, rendezvous waits,
 * failures reported by workers). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "text.h"

void tr_cli_runtime_json(FILE *out, const troupe_job *j)
{
    const troupe_profile *p = j->profile;

    fputs(",\"rendezvous\":[", out);
    for (size_t i = 0; i < j->n_waits; i++) {
        const troupe_rdzv_wait *w = &j->waits[i];
        fprintf(out, "%s{\"comm\":", i ? "," : "");
        tr_json_str(out, w->comm);
        fprintf(out, ",\"epoch\":%u,\"what\":", w->epoch);
        tr_json_str(out, w->what);
        fprintf(out, ",\"size\":%u,\"arrived\":%u,\"missing\":[", w->size, w->arrived);
        for (size_t m = 0; m < w->n_missing; m++) {
            fputs(m ? "," : "", out);
            tr_json_str(out, w->missing[m]);
        }
        fputs("]}", out);
    }
    fputc(']', out);
    fputs(",\"failures\":[", out);
    for (size_t i = 0; i < j->n_failures; i++) {
        const troupe_failure *f = &j->failures[i];
        fprintf(out, "%s{\"worker\":", i ? "," : "");
        tr_json_str(out, f->worker);
        fputs(",\"group\":", out);
        tr_json_str(out, f->group);
        fprintf(out, ",\"rank\":%u,\"node\":", f->rank);
        tr_json_str(out, f->node);
        fprintf(out, ",\"attempt\":%u,\"code\":", f->attempt);
        tr_json_str(out, f->code);
        fputs(",\"reason\":", out);
        tr_json_str(out, f->reason);
        fprintf(out, ",\"ts_ms\":%lld}", (long long)f->ts_ms);
    }
    fprintf(out, "],\"failures_dropped\":%u", j->failures_dropped);
    if (p == NULL) {
        return;
    }
    fputs(",\"profile\":{\"spec\":{\"steps\":", out);
    tr_json_str(out, p->spec_steps);
    fputs(",\"workers\":", out);
    tr_json_str(out, p->spec_workers);
    fprintf(out, "},\"version\":%" PRIu64 ",\"off\":%s,\"steps\":", p->version, p->off ? "true" : "false");
    tr_json_str(out, p->steps);
    fprintf(out, ",\"next\":%u,\"align\":%u,\"workers\":", p->next, p->align);
    tr_json_str(out, p->workers);
    fprintf(out, ",\"set_ms\":%lld}", (long long)p->set_ms);
}

/* profile_text describes the setting in force: "steps 2:4 on *policy*"
 * (what a client set is escaped: it cannot forge a line of its own). */
static void profile_text(const troupe_profile *p, char *buf, size_t size)
{
    char steps[300], workers[600];

    if (p->version == 0) {
        if (p->spec_steps[0]) {
            snprintf(buf, size, "steps %s on %s (from the spec)", tr_text_escape(steps, sizeof(steps), p->spec_steps),
                     tr_text_escape(workers, sizeof(workers), p->spec_workers));
        } else {
            snprintf(buf, size, "off");
        }
    } else if (p->off) {
        snprintf(buf, size, "off (troupe profile, version %" PRIu64 ")", p->version);
    } else if (p->next > 0) {
        snprintf(buf, size, "the next %u steps%s%.0u on %s (troupe profile, version %" PRIu64 ")", p->next,
                 p->align ? " from a multiple of " : "", p->align, tr_text_escape(workers, sizeof(workers), p->workers),
                 p->version);
    } else {
        snprintf(buf, size, "steps %s on %s (troupe profile, version %" PRIu64 ")",
                 tr_text_escape(steps, sizeof(steps), p->steps), tr_text_escape(workers, sizeof(workers), p->workers),
                 p->version);
    }
}

void tr_cli_runtime_table(const troupe_job *j)
{
    char text[1400];

    if (j->profile != NULL) {
        profile_text(j->profile, text, sizeof(text));
        printf("profile   %s\n", text);
    }
    for (size_t i = 0; i < j->n_failures; i++) {
        const troupe_failure *f = &j->failures[i];
        char reason[4200];
        printf("failure   rank %u of %s (%s on %s, attempt %u): %s: %s\n", f->rank, f->group, f->worker,
               f->node[0] ? f->node : "?", f->attempt, f->code, tr_text_escape(reason, sizeof(reason), f->reason));
    }
    if (j->failures_dropped > 0) {
        printf("failure   (%u older reports not kept)\n", j->failures_dropped);
    }
    for (size_t i = 0; i < j->n_waits; i++) {
        const troupe_rdzv_wait *w = &j->waits[i];
        printf("waiting   %s epoch %u %s: %u/%u ranks arrived", w->comm, w->epoch, w->what, w->arrived, w->size);
        for (size_t m = 0; m < w->n_missing; m++) {
            printf("%s%s", m ? ", " : "; missing: ", w->missing[m]);
        }
        printf("\n");
    }
}

static int parse_u32(const char *s, uint32_t *out)
{
    char *end = NULL;
    unsigned long v = strtoul(s, &end, 10);
    if (s[0] == '\0' || *end != '\0' || v > UINT32_MAX) {
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static const char profile_usage[] =
    "usage: troupe profile ID (--steps A:B | --next N [--align K] | --off) [--workers PATTERNS]\n";

/* parse_args fills req from argv; -1 on a usage error. */
static int parse_args(int argc, char **argv, uint64_t *id, troupe_profile_req *req)
{
    char *end = NULL;
    int have_id = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--off") == 0) {
            req->off = 1;
        } else if (strcmp(a, "--steps") == 0 && v != NULL) {
            req->steps = v;
            i++;
        } else if (strcmp(a, "--workers") == 0 && v != NULL) {
            req->workers = v;
            i++;
        } else if ((strcmp(a, "--next") == 0 || strcmp(a, "--align") == 0) && v != NULL) {
            if (parse_u32(v, a[2] == 'n' ? &req->next : &req->align) != 0) {
                fprintf(stderr, "troupe profile: %s takes a whole number, not '%s'\n", a, v);
                return -1;
            }
            i++;
        } else if (a[0] != '-' && !have_id) {
            *id = strtoull(a, &end, 10);
            if (a[0] == '\0' || *end != '\0') {
                fprintf(stderr, "troupe profile: '%s' is not a job id\n", a);
                return -1;
            }
            have_id = 1;
        } else {
            fprintf(stderr, "troupe profile: unexpected '%s'\n%s", a, profile_usage);
            return -1;
        }
    }
    if (!have_id || (!req->off && req->steps == NULL && req->next == 0 && req->align == 0)) {
        fputs(profile_usage, stderr);
        return -1;
    }
    if (req->align > 0 && req->next == 0) {
        req->next = 1; /* --align K alone: one step, from the next multiple of K */
    }
    return 0;
}

int tr_cli_cmd_profile(tr_cli *cli, int argc, char **argv)
{
    troupe_profile_req req = {0};
    troupe_error err;
    uint64_t id = 0, version = 0;

    if (parse_args(argc, argv, &id, &req) != 0) {
        return 2;
    }
    if (tr_cli_connect(cli) != 0) {
        return 1;
    }
    if (troupe_set_profile(cli->client, id, &req, &version, &err) != TROUPE_OK) {
        tr_cli_fail(cli, &err);
        troupe_client_close(cli->client);
        return 1;
    }
    if (cli->json) {
        printf("{\"job_id\":%" PRIu64 ",\"version\":%" PRIu64 "}\n", id, version);
    } else {
        printf("job %" PRIu64 ": profile setting version %" PRIu64 " sent to its workers\n", id, version);
    }
    troupe_client_close(cli->client);
    return 0;
}
