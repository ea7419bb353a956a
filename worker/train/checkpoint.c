/* checkpoint.c - atomic checkpoint files (format in checkpoint.h). */
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CKPT_MAGIC "TRCKPT01"
#define CKPT_VERSION 1
#define CKPT_HEADER 96

static void put_u32(unsigned char *p, uint32_t x)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (unsigned char)(x >> (8 * i));
    }
}

static void put_u64(unsigned char *p, uint64_t x)
{
    put_u32(p, (uint32_t)x);
    put_u32(p + 4, (uint32_t)(x >> 32));
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const unsigned char *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static uint64_t fnv1a(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * 0x100000001b3ull;
    }
    return h;
}

static void encode_header(unsigned char *h, const tr_backend *b, const tr_ckpt_state *st, uint64_t sum)
{
    const tr_model_config *c = &b->cfg;
    int32_t dims[6] = {c->layers, c->width, c->heads, c->seq_len, c->vocab, c->padded_vocab};

    memset(h, 0, CKPT_HEADER);
    memcpy(h, CKPT_MAGIC, 8);
    put_u32(h + 8, CKPT_VERSION);
    put_u32(h + 12, CKPT_HEADER);
    for (int i = 0; i < 6; i++) {
        put_u32(h + 16 + 4 * i, (uint32_t)dims[i]);
    }
    put_u64(h + 40, b->num_params);
    put_u64(h + 48, (uint64_t)st->step);
    put_u64(h + 56, st->data_rng);
    put_u64(h + 64, st->seed);
    put_u64(h + 72, st->tokens_seen);
    put_u64(h + 80, sum);
}

/* write_all writes n bytes to fd, retrying short writes. */
static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* sync_dir makes the rename durable; failure to open the directory (some
 * filesystems) is not an error, the data itself is already synced. */
static void sync_dir(const char *path)
{
    char *copy = strdup(path);
    int fd;

    if (copy == NULL) {
        return;
    }
    fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(copy);
}

int tr_ckpt_save(const char *path, tr_backend *b, const tr_ckpt_state *st, tr_err *err)
{
    return tr_ckpt_save_opt(path, b, st, NULL, NULL, err);
}

int tr_ckpt_save_opt(const char *path, tr_backend *b, const tr_ckpt_state *st, const float *m, const float *v,
                     tr_err *err)
{
    unsigned char hdr[CKPT_HEADER];
    char tmp[4096];
    size_t n = b->num_params;
    float *buf = malloc(3 * n * sizeof(float));
    int fd = -1, rv;

    if (buf == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "%s: cannot allocate checkpoint buffer", path);
    }
    rv = b->ops->get_params(b, buf, err);
    if (rv == TROUPE_OK && m != NULL) {
        memcpy(buf + n, m, n * sizeof(float));
        memcpy(buf + 2 * n, v, n * sizeof(float));
    } else if (rv == TROUPE_OK) {
        rv = b->ops->get_opt_state(b, buf + n, buf + 2 * n, err);
    }
    if (rv != TROUPE_OK) {
        goto out;
    }
    encode_header(hdr, b, st, fnv1a(buf, 3 * n * sizeof(float)));
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rv = tr_err_set(err, TROUPE_PERMISSION_DENIED, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    if (write_all(fd, hdr, sizeof(hdr)) != 0 || write_all(fd, buf, 3 * n * sizeof(float)) != 0 ||
        fsync(fd) != 0) {
        rv = tr_err_set(err, TROUPE_UNAVAILABLE, "%s: write failed: %s", tmp, strerror(errno));
        goto out;
    }
    if (close(fd) != 0) {
        fd = -1;
        rv = tr_err_set(err, TROUPE_UNAVAILABLE, "%s: close failed: %s", tmp, strerror(errno));
        goto out;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        rv = tr_err_set(err, TROUPE_UNAVAILABLE, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        goto out;
    }
    sync_dir(path);
out:
    if (fd >= 0) {
        close(fd);
    }
    if (rv != TROUPE_OK) {
        unlink(tmp);
    }
    free(buf);
    return rv;
}

/* check_header compares the stored model config with b's. */
static int check_header(const char *path, const unsigned char *h, const tr_backend *b, tr_err *err)
{
    const tr_model_config *c = &b->cfg;
    int32_t want[6] = {c->layers, c->width, c->heads, c->seq_len, c->vocab, c->padded_vocab};
    int32_t got[6];

    if (memcmp(h, CKPT_MAGIC, 8) != 0) {
        return tr_err_set(err, TROUPE_DATA_LOSS, "%s: not a troupe-train checkpoint (bad magic)", path);
    }
    if (get_u32(h + 8) != CKPT_VERSION || get_u32(h + 12) != CKPT_HEADER) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "%s: unsupported checkpoint version %u", path,
                          get_u32(h + 8));
    }
    for (int i = 0; i < 6; i++) {
        got[i] = (int32_t)get_u32(h + 16 + 4 * i);
    }
    if (memcmp(got, want, sizeof(got)) != 0 || get_u64(h + 40) != b->num_params) {
        return tr_err_set(
            err, TROUPE_FAILED_PRECONDITION,
            "%s: checkpoint does not match the model config: it has layers=%d width=%d heads=%d "
            "seq_len=%d vocab=%d, the config has layers=%d width=%d heads=%d seq_len=%d vocab=%d",
            path, got[0], got[1], got[2], got[3], got[4], want[0], want[1], want[2], want[3], want[4]);
    }
    return TROUPE_OK;
}

int tr_ckpt_load(const char *path, tr_backend *b, tr_ckpt_state *st, tr_err *err)
{
    size_t n = b->num_params;
    float *buf = NULL;
    int rv = tr_ckpt_read(path, b, st, &buf, err);

    if (rv == TROUPE_OK) {
        rv = b->ops->set_params(b, buf, err);
    }
    if (rv == TROUPE_OK) {
        rv = b->ops->set_opt_state(b, buf + n, buf + 2 * n, err);
    }
    free(buf);
    return rv;
}

int tr_ckpt_read(const char *path, const tr_backend *b, tr_ckpt_state *st, float **out, tr_err *err)
{
    unsigned char hdr[CKPT_HEADER];
    size_t n = b->num_params;
    float *buf = NULL;
    FILE *f = fopen(path, "rb");
    int rv;

    memset(st, 0, sizeof(*st));
    *out = NULL;
    if (f == NULL) {
        return tr_err_set(err, errno == ENOENT ? TROUPE_NOT_FOUND : TROUPE_PERMISSION_DENIED,
                          "%s: cannot open checkpoint: %s", path, strerror(errno));
    }
    if (fread(hdr, 1, CKPT_HEADER, f) != CKPT_HEADER) {
        rv = tr_err_set(err, TROUPE_DATA_LOSS, "%s: truncated checkpoint header", path);
        goto out;
    }
    rv = check_header(path, hdr, b, err);
    if (rv != TROUPE_OK) {
        goto out;
    }
    buf = malloc(3 * n * sizeof(float));
    if (buf == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "%s: cannot allocate checkpoint buffer", path);
        goto out;
    }
    if (fread(buf, sizeof(float), 3 * n, f) != 3 * n || fgetc(f) != EOF) {
        rv =
            tr_err_set(err, TROUPE_DATA_LOSS, "%s: checkpoint payload has the wrong size (truncated?)", path);
        goto out;
    }
    if (fnv1a(buf, 3 * n * sizeof(float)) != get_u64(hdr + 80)) {
        rv = tr_err_set(err, TROUPE_DATA_LOSS, "%s: checkpoint checksum mismatch (corrupt file)", path);
        goto out;
    }
    st->step = (int64_t)get_u64(hdr + 48);
    st->data_rng = get_u64(hdr + 56);
    st->seed = get_u64(hdr + 64);
    st->tokens_seen = get_u64(hdr + 72);
    *out = buf;
    buf = NULL;
out:
    free(buf);
    fclose(f);
    return rv;
}
