/* dp.c - data-parallel agreement, state sharing and data positions (dp.h). */
#include "dp.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tr_dp_agree(tr_comm *c, int rv, const char *what, tr_err *err)
{
    float failed = rv != TROUPE_OK ? 1.0f : 0.0f;
    tr_err own = *err;
    int crv = c->ops->allreduce(c, &failed, 1, TR_COMM_SUM, err);

    if (rv != TROUPE_OK) {
        *err = own; /* this rank's own reason is the one to report */
        return rv;
    }
    if (crv != TROUPE_OK) {
        return crv;
    }
    if (failed > 0.0f) {
        return tr_err_set(err, TROUPE_ABORTED, "%d other rank%s could not %s (see %s log)", (int)failed,
                          failed > 1.0f ? "s" : "", what, failed > 1.0f ? "their" : "its");
    }
    return TROUPE_OK;
}

int tr_dp_check_same(tr_comm *c, const tr_dp_setting *s, int n, tr_err *err)
{
    return tr_dp_check_same_for(c, s, n, "data parallelism needs the same settings and data on every rank",
                                err);
}

int tr_dp_check_same_for(tr_comm *c, const tr_dp_setting *s, int n, const char *needs, tr_err *err)
{
    double v[64];
    int rv = TROUPE_OK;

    if (n > 64) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%d settings to compare, at most 64", n);
    }
    for (int i = 0; i < n; i++) {
        v[i] = s[i].value;
    }
    if ((rv = c->ops->broadcast(c, v, (size_t)n * sizeof(double), 0, err)) != TROUPE_OK) {
        return rv;
    }
    for (int i = 0; i < n && rv == TROUPE_OK; i++) {
        if (memcmp(&v[i], &s[i].value, sizeof(double)) != 0) {
            rv = tr_err_set(err, TROUPE_FAILED_PRECONDITION, "%s is %.17g on rank %d, %.17g on rank 0: %s",
                            s[i].name, s[i].value, c->rank, v[i], needs);
        }
    }
    return tr_dp_agree(c, rv, "match rank 0's settings", err);
}

uint64_t tr_dp_params_hash(const float *p, size_t n)
{
    const size_t bytes = n * sizeof(float), words = bytes / 8;
    const unsigned char *b = (const unsigned char *)p;
    uint64_t lane[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull,
                        0x27D4EB2F165667C5ull};
    uint64_t h;
    size_t i = 0;

    /* four lanes, so that the multiplies do not wait on one another */
    for (; i + 4 <= words; i += 4) {
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, b + (i + (size_t)k) * 8, 8);
            lane[k] = (lane[k] ^ w) * 0x100000001b3ull;
            lane[k] ^= lane[k] >> 29;
        }
    }
    h = (uint64_t)bytes;
    for (int k = 0; k < 4; k++) {
        h = (h ^ lane[k]) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 32;
    }
    for (size_t j = i * 8; j < bytes; j++) { /* the words and bytes past the last group of four */
        h = (h ^ b[j]) * 0x100000001b3ull;
    }
    return h;
}

int tr_dp_check_same_params(tr_comm *c, uint64_t hash, const char *what, tr_err *err)
{
    uint64_t h0 = hash;
    int rv = c->ops->broadcast(c, &h0, sizeof(h0), 0, err);

    if (rv != TROUPE_OK) {
        return rv;
    }
    if (h0 != hash) {
        rv = tr_err_set(err, TROUPE_DATA_LOSS,
                        "rank %d's %s hash to %016" PRIx64 ", rank 0's to %016" PRIx64
                        ": the ranks would train different models (the same troupe-train build and settings "
                        "on every rank?)",
                        c->rank, what, hash, h0);
    }
    return tr_dp_agree(c, rv, "hold rank 0's weights", err);
}

static int pos_read(const char *dir, int rank, int size, int micro_batch, int global, int64_t step,
                    uint64_t *rng, tr_err *err);

void tr_dp_pos_path(const char *dir, int rank, char *buf, size_t len)
{
    snprintf(buf, len, "%s/data-rank-%d.pos", dir, rank);
}

int tr_dp_pos_write(const char *dir, int rank, int size, int micro_batch, int64_t step, uint64_t rng,
                    int64_t prev_step, uint64_t prev_rng, tr_err *err)
{
    char path[4096], tmp[4200], text[512];
    int n, fd, ok;

    tr_dp_pos_path(dir, rank, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    n = snprintf(text, sizeof(text),
                 "troupe-train data position 1\nrank %d\nworld_size %d\nmicro_batch %d\nstep %" PRId64
                 " rng %" PRIu64 "\nstep %" PRId64 " rng %" PRIu64 "\n",
                 rank, size, micro_batch, step, rng, prev_step, prev_rng);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        return tr_err_set(err, TROUPE_PERMISSION_DENIED, "data position %s: cannot create: %s", tmp,
                          strerror(errno));
    }
    ok = write(fd, text, (size_t)n) == n && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return tr_err_set(err, TROUPE_UNAVAILABLE, "data position %s: cannot write: %s", path, strerror(e));
    }
    return TROUPE_OK;
}

int tr_dp_pos_read(const char *dir, int rank, int size, int micro_batch, int64_t step, uint64_t *rng,
                   tr_err *err)
{
    tr_err own = {0};
    int rv = pos_read(dir, rank, size, micro_batch, 0, step, rng, &own), rv0;

    if (rv == TROUPE_OK || rv == TROUPE_DATA_LOSS) {
        *err = own;
        return rv;
    }
    /* Written by another world size (this rank's file is then of another
     * layout, or missing when the rank did not exist): every rank's sampler
     * stood where rank 0's did, and with the same global batch the draws go
     * on alike, so rank 0's position serves. A file missing under the same
     * layout is still an error: something removed it. */
    rv0 = pos_read(dir, 0, size, micro_batch, 1, step, rng, err);
    if (rv0 == TROUPE_OK) {
        return TROUPE_OK;
    }
    *err = own;
    return rv;
}

int tr_dp_share_buffer(tr_comm *c, tr_backend *b, float *buf, tr_err *err)
{
    size_t n = b->num_params;
    int rv = c->ops->broadcast(c, buf, 3 * n * sizeof(float), 0, err);

    if (rv == TROUPE_OK) {
        rv = b->ops->set_params(b, buf, err);
    }
    if (rv == TROUPE_OK) {
        rv = b->ops->set_opt_state(b, buf + n, buf + 2 * n, err);
    }
    return tr_dp_agree(c, rv, "take rank 0's model state", err);
}

/* pos_read reads rank's file; global: accept any layout with the same
 * global batch (world size x micro-batch). */
static int pos_read(const char *dir, int rank, int size, int micro_batch, int global, int64_t step,
                    uint64_t *rng, tr_err *err)
{
    char path[4096];
    int r, n, b, version;
    int64_t s[2];
    uint64_t x[2];
    FILE *f;

    tr_dp_pos_path(dir, rank, path, sizeof(path));
    if ((f = fopen(path, "r")) == NULL) {
        return tr_err_set(err, errno == ENOENT ? TROUPE_NOT_FOUND : TROUPE_PERMISSION_DENIED,
                          "data position %s: cannot open: %s", path, strerror(errno));
    }
    int got = fscanf(f,
                     "troupe-train data position %d\nrank %d\nworld_size %d\nmicro_batch %d\nstep %" SCNd64
                     " rng %" SCNu64 "\nstep %" SCNd64 " rng %" SCNu64,
                     &version, &r, &n, &b, &s[0], &x[0], &s[1], &x[1]);
    fclose(f);
    if (got != 8 || version != 1 || r != rank) {
        return tr_err_set(err, TROUPE_DATA_LOSS, "data position %s: not a version 1 position file of rank %d",
                          path, rank);
    }
    if (global && (n == size || (int64_t)n * b != (int64_t)size * micro_batch)) {
        return tr_err_set(
            err, TROUPE_FAILED_PRECONDITION,
            "data position %s: world size %d, micro-batch %d; no other layout of global batch %d", path, n, b,
            size * micro_batch);
    }
    if (!global && (n != size || b != micro_batch)) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "data position %s was written by a run of world size %d and micro-batch %d, this "
                          "one has %d and %d: resume with the same layout, or start a new checkpoint.dir",
                          path, n, b, size, micro_batch);
    }
    for (int i = 0; i < 2; i++) {
        if (s[i] == step) {
            *rng = x[i];
            return TROUPE_OK;
        }
    }
    return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                      "data position %s holds steps %" PRId64 " and %" PRId64
                      ", the model checkpoint is at step %" PRId64,
                      path, s[0], s[1], step);
}
