/* health.c - a job's health as the head judged it (troupe_job_health), in
 * `troupe job` (lines naming the ranks), `troupe jobs` (the STATE and REASON
 * columns) and both -o json outputs. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "text.h"

static void rank_json(FILE *out, const troupe_health_rank *r)
{
    fputs("{\"worker\":", out);
    tr_json_str(out, r->worker);
    fputs(",\"group\":", out);
    tr_json_str(out, r->group);
    fprintf(out, ",\"rank\":%u,\"node\":", r->rank);
    tr_json_str(out, r->node);
    fputs(",\"gpus\":[", out);
    for (size_t k = 0; k < r->n_gpus; k++) {
        fprintf(out, "%s%u", k ? "," : "", r->gpus[k]);
    }
    fprintf(out,
            "],\"last_step\":%" PRIu64 ",\"since_ms\":%lld,\"step_ms\":%.6g,\"group_step_ms\":%.6g,\"ratio\":%.6g,"
            "\"memory_bytes\":%.17g,\"memory_slope\":%.6g,\"memory_total\":%.17g,\"memory_growing\":%s,"
            "\"memory_near\":%s,\"by_compute\":%s}",
            r->last_step, (long long)r->since_ms, r->step_ms, r->group_step_ms, r->ratio, r->memory_bytes,
            r->memory_slope, r->memory_total, r->memory_growing ? "true" : "false", r->memory_near ? "true" : "false",
            r->by_compute ? "true" : "false");
}

static void ranks_json(FILE *out, const char *key, const troupe_health_rank *r, size_t n)
{
    fprintf(out, ",\"%s\":[", key);
    for (size_t i = 0; i < n; i++) {
        fputs(i ? "," : "", out);
        rank_json(out, &r[i]);
    }
    fputc(']', out);
}

void tr_cli_health_json(FILE *out, const troupe_job *j)
{
    const troupe_job_health *h = j->health;

    if (h == NULL) {
        return;
    }
    fprintf(out,
            ",\"health\":{\"state\":\"%s\",\"stall_after_ms\":%lld,\"judged_ms\":%lld,\"on_stall\":\"%s\","
            "\"ended\":%s",
            troupe_health_state_name(h->state), (long long)h->stall_after_ms, (long long)h->judged_ms,
            h->on_stall_fail ? "fail" : "warn", h->ended ? "true" : "false");
    ranks_json(out, "stalled", h->stalled, h->n_stalled);
    ranks_json(out, "stragglers", h->stragglers, h->n_stragglers);
    ranks_json(out, "memory", h->memory, h->n_memory);
    fputc('}', out);
}

/* who: "rank 1 job3-policy-1 on na GPU 1". */
static void who(const troupe_health_rank *r, char *buf, size_t size)
{
    size_t off = (size_t)snprintf(buf, size, "rank %u %s on %s", r->rank, r->worker, r->node);
    for (size_t k = 0; k < r->n_gpus && off < size; k++) {
        off += (size_t)snprintf(buf + off, size - off, "%s%u", k ? "," : " GPU ", r->gpus[k]);
    }
}

void tr_cli_health_table(const troupe_job *j)
{
    const troupe_job_health *h = j->health;
    /* an ended job's judgement is the last one while it ran: times are to then */
    int64_t now = h != NULL && h->ended ? h->judged_ms : tr_cli_now_ms();
    char name[400], when[16];

    if (h == NULL || h->state == TROUPE_HEALTH_NONE) {
        return;
    }
    printf("health    %s (stall_after %.1f s%s)%s\n", troupe_health_state_name(h->state),
           (double)h->stall_after_ms / 1000.0, h->on_stall_fail ? ", on_stall: fail" : "",
           h->ended ? ", as judged last while the job ran" : "");
    for (size_t i = 0; i < h->n_stalled; i++) {
        const troupe_health_rank *r = &h->stalled[i];
        who(r, name, sizeof(name));
        tr_cli_time(when, sizeof(when), r->since_ms);
        printf("stalled   %s: last step %" PRIu64 " at %s, no step for %.1f s\n", name, r->last_step, when,
               (double)(now - r->since_ms) / 1000.0);
    }
    for (size_t i = 0; i < h->n_stragglers; i++) {
        const troupe_health_rank *r = &h->stragglers[i];
        who(r, name, sizeof(name));
        printf("straggler %s: %.0f ms %sper step, %.2fx the group's %.0f ms\n", name, r->step_ms,
               r->by_compute ? "of compute " : "", r->ratio, r->group_step_ms);
    }
    for (size_t i = 0; i < h->n_memory; i++) {
        const troupe_health_rank *r = &h->memory[i];
        who(r, name, sizeof(name));
        if (r->memory_growing) {
            printf("memory    %s: allocated GPU memory grows %.2f MiB per step (%.2f GiB now)\n", name,
                   r->memory_slope / 1048576.0, r->memory_bytes / 1073741824.0);
        }
        if (r->memory_near) {
            printf("memory    %s: allocated GPU memory at %.0f%% of %.2f GiB\n", name,
                   100.0 * r->memory_bytes / r->memory_total, r->memory_total / 1073741824.0);
        }
    }
}

const char *tr_cli_health_state(const troupe_job *j)
{
    if (j->state == TROUPE_JOB_RUNNING && j->health != NULL && j->health->state == TROUPE_HEALTH_STALLED) {
        return "STALLED";
    }
    return troupe_job_state_name(j->state);
}

void tr_cli_health_reason(const troupe_job *j, char *buf, size_t size)
{
    const troupe_job_health *h = j->health;
    size_t off = 0;

    buf[0] = '\0';
    if (j->state != TROUPE_JOB_RUNNING || h == NULL) {
        tr_text_escape(buf, size, j->reason); /* it may quote what a client sent */
        return;
    }
    for (size_t i = 0; i < h->n_stalled && off < size; i++) {
        const troupe_health_rank *r = &h->stalled[i];
        off += (size_t)snprintf(buf + off, size - off, "%srank %u (%s) no step for %.0f s since step %" PRIu64,
                                i ? ", " : "stalled: ", r->rank, r->worker,
                                (double)(tr_cli_now_ms() - r->since_ms) / 1000.0, r->last_step);
    }
    for (size_t i = 0; i < h->n_stragglers && off < size; i++) {
        off += (size_t)snprintf(buf + off, size - off, "%sstraggler rank %u %.1fx", off ? "; " : "",
                                h->stragglers[i].rank, h->stragglers[i].ratio);
    }
    for (size_t i = 0; i < h->n_memory && off < size; i++) {
        off += (size_t)snprintf(buf + off, size - off, "%smemory %s", off ? "; " : "", h->memory[i].worker);
    }
    if (off == 0) {
        tr_text_escape(buf, size, j->reason);
    }
}
