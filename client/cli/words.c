/* words.c - small stateless helpers of the CLI, kept out of main.c so that
 * unit.cli tests them: word lists, "did you mean", kubectl's AGE, and how
 * long a job ran. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

int tr_cli_word_in(const char *word, const char *list)
{
    size_t n = strlen(word);
    for (const char *p = list; p != NULL && *p != '\0';) {
        size_t k = strcspn(p, " ");
        if (k == n && n > 0 && strncmp(p, word, n) == 0) {
            return 1;
        }
        p += k + (p[k] == ' ');
    }
    return 0;
}

/* distance: optimal string alignment distance (Levenshtein plus adjacent
 * transpositions, so "jbos" is one edit from "jobs"); words over 63 bytes
 * count as far from everything. */
static size_t distance(const char *a, size_t n, const char *b, size_t m)
{
    size_t d[64][64];
    if (n >= 64 || m >= 64) {
        return SIZE_MAX;
    }
    for (size_t i = 0; i <= n; i++) {
        d[i][0] = i;
    }
    for (size_t j = 0; j <= m; j++) {
        d[0][j] = j;
    }
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            size_t cost = a[i - 1] != b[j - 1], best = d[i - 1][j - 1] + cost;
            best = d[i - 1][j] + 1 < best ? d[i - 1][j] + 1 : best;
            best = d[i][j - 1] + 1 < best ? d[i][j - 1] + 1 : best;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best) {
                best = d[i - 2][j - 2] + 1;
            }
            d[i][j] = best;
        }
    }
    return d[n][m];
}

const char *tr_cli_suggest(const char *word, const char *list, char *buf, size_t size)
{
    const char *best = NULL;
    size_t n = strlen(word), best_k = 0, best_d = SIZE_MAX, prefixes = 0;
    const char *prefix = NULL;
    size_t prefix_k = 0;
    /* one edit for short words, two from five letters on: more would suggest
     * unrelated words ("ls" is not "job") */
    size_t limit = n >= 5 ? 2 : 1;

    for (const char *p = list; p != NULL && *p != '\0';) {
        size_t k = strcspn(p, " "), d = distance(word, n, p, k);
        if (d < best_d) {
            best = p;
            best_k = k;
            best_d = d;
        }
        if (n >= 3 && k > n && strncmp(p, word, n) == 0 &&
            (prefix == NULL || k != prefix_k || strncmp(p, prefix, k))) {
            prefix = p;
            prefix_k = k;
            prefixes++;
        }
        p += k + (p[k] == ' ');
    }
    if (best == NULL || best_d > limit || best_d == 0) {
        best = prefixes == 1 ? prefix : NULL; /* an unambiguous abbreviation: "sub" for submit */
        best_k = prefix_k;
    }
    if (best == NULL || best_k + 1 > size) {
        return NULL;
    }
    memcpy(buf, best, best_k);
    buf[best_k] = '\0';
    return buf;
}

void tr_cli_age(char *buf, size_t size, int64_t unix_ms, int64_t now_ms)
{
    int64_t s = (now_ms - unix_ms) / 1000;
    if (unix_ms <= 0) {
        snprintf(buf, size, "-");
    } else if (s < 0) {
        snprintf(buf, size, "0s"); /* the head's clock is ahead of this one */
    } else if (s < 120) {
        snprintf(buf, size, "%llds", (long long)s);
    } else if (s < 2 * 3600) {
        snprintf(buf, size, "%lldm", (long long)(s / 60));
    } else if (s < 2 * 86400) {
        snprintf(buf, size, "%lldh", (long long)(s / 3600));
    } else {
        snprintf(buf, size, "%lldd", (long long)(s / 86400));
    }
}

void tr_cli_duration(char *buf, size_t size, double secs)
{
    long long s = (long long)secs;
    if (secs < 0) {
        snprintf(buf, size, "-");
    } else if (secs < 60) {
        snprintf(buf, size, "%.1fs", secs);
    } else if (s < 3600) {
        snprintf(buf, size, "%lldm%02llds", s / 60, s % 60);
    } else if (s < 86400) {
        snprintf(buf, size, "%lldh%02lldm", s / 3600, s % 3600 / 60);
    } else {
        snprintf(buf, size, "%lldd%02lldh", s / 86400, s % 86400 / 3600);
    }
}

double tr_cli_run_secs(const troupe_job *j, int64_t now)
{
    int stopping;
    int64_t end;
    if (j->started_ms <= 0) {
        return -1;
    }
    end = tr_cli_job_end_ms(j, now, &stopping);
    return end > j->started_ms ? (double)(end - j->started_ms) / 1000.0 : 0.0;
}

int64_t tr_cli_job_end_ms(const troupe_job *j, int64_t now, int *stopping)
{
    int64_t end = j->ended_ms;
    *stopping = 0;
    if (end == 0) {
        return now;
    }
    for (size_t i = 0; i < j->n_workers; i++) {
        const troupe_worker *w = &j->workers[i];
        if (w->state == TROUPE_WORKER_RUNNING || w->state == TROUPE_WORKER_PENDING) {
            *stopping = 1;
            return now;
        }
        end = w->ended_ms > end ? w->ended_ms : end;
    }
    return end;
}
