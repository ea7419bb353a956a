/* data.c - token files, byte files, batches and the generated dataset.
 *
 * Files are read whole into memory: the CPU path trains on small corpora, and
 * the CUDA path copies each micro-batch to the device anyway. The header is
 * decoded byte by byte (little-endian, whatever the host); token payloads are
 * copied as-is, which assumes a little-endian host (checked at compile time). */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rng.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token files are little-endian; add byte swapping for this host"
#endif

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const unsigned char *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

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

/* read_file loads path into a malloc'd buffer (*buf, *len). */
static int read_file(const char *path, unsigned char **buf, size_t *len, tr_err *err)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    int rv = TROUPE_OK;

    *buf = NULL;
    *len = 0;
    if (f == NULL) {
        return tr_err_set(err, errno == ENOENT ? TROUPE_NOT_FOUND : TROUPE_PERMISSION_DENIED,
                          "%s: cannot open data file: %s", path, strerror(errno));
    }
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        rv = tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: not a regular file", path);
        goto out;
    }
    if (st.st_size == 0) {
        rv = tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: data file is empty", path);
        goto out;
    }
    *buf = malloc((size_t)st.st_size);
    if (*buf == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "%s: cannot allocate %lld bytes", path,
                        (long long)st.st_size);
        goto out;
    }
    if (fread(*buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        rv = tr_err_set(err, TROUPE_DATA_LOSS, "%s: short read", path);
        goto out;
    }
    *len = (size_t)st.st_size;
out:
    if (rv != TROUPE_OK) {
        free(*buf);
        *buf = NULL;
    }
    fclose(f);
    return rv;
}

static int has_magic(const unsigned char *buf, size_t len)
{
    return len >= 8 && memcmp(buf, TR_DATA_MAGIC, 8) == 0;
}

/* parse_tokens checks a token file's header and payload and copies the tokens. */
static int parse_tokens(tr_data *d, const char *path, const unsigned char *buf, size_t len, tr_err *err)
{
    uint32_t version, vocab;
    uint64_t count;

    if (!has_magic(buf, len)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "%s: bad magic: not a troupe token file (expected \"%s\")", path, TR_DATA_MAGIC);
    }
    if (len < TR_DATA_HEADER_BYTES) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: truncated header (%zu of %d bytes)", path, len,
                          TR_DATA_HEADER_BYTES);
    }
    version = get_u32(buf + 8);
    vocab = get_u32(buf + 12);
    count = get_u64(buf + 16);
    if (version != TR_DATA_VERSION) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: unsupported token file version %u (want %d)",
                          path, version, TR_DATA_VERSION);
    }
    if (vocab == 0 || vocab > 65536) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: vocab %u outside 1..65536", path, vocab);
    }
    if (count > (len - TR_DATA_HEADER_BYTES) / 2 || len != TR_DATA_HEADER_BYTES + 2 * count) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "%s: header says %llu tokens but the file holds %zu payload bytes", path,
                          (unsigned long long)count, len - TR_DATA_HEADER_BYTES);
    }
    d->tokens = malloc(count * sizeof(uint16_t) + 1);
    if (d->tokens == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "%s: cannot allocate %llu tokens", path,
                          (unsigned long long)count);
    }
    memcpy(d->tokens, buf + TR_DATA_HEADER_BYTES, count * sizeof(uint16_t));
    for (size_t i = 0; i < count; i++) {
        if (d->tokens[i] >= vocab) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: token %u at index %zu is not below vocab %u",
                              path, d->tokens[i], i, vocab);
        }
    }
    d->count = count;
    d->vocab = (int)vocab;
    return TROUPE_OK;
}

static int parse_bytes(tr_data *d, const char *path, const unsigned char *buf, size_t len, tr_err *err)
{
    d->tokens = malloc(len * sizeof(uint16_t));
    if (d->tokens == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "%s: cannot allocate %zu tokens", path, len);
    }
    for (size_t i = 0; i < len; i++) {
        d->tokens[i] = buf[i];
    }
    d->count = len;
    d->vocab = 256;
    d->is_bytes = 1;
    return TROUPE_OK;
}

/* split holds out the last val_fraction of the tokens and checks both parts
 * can give at least one window of seq_len + 1 tokens. */
static int split(tr_data *d, const char *path, double val_fraction, int seq_len, tr_err *err)
{
    size_t need = (size_t)seq_len + 1;

    d->val_count = (size_t)((double)d->count * val_fraction);
    if (val_fraction > 0.0 && d->val_count < need) {
        return tr_err_set(
            err, TROUPE_INVALID_ARGUMENT,
            "%s: too short: %zu tokens give a validation split of %zu tokens (data.val_fraction "
            "%g), need at least seq_len+1 = %zu",
            path, d->count, d->val_count, val_fraction, need);
    }
    d->train_count = d->count - d->val_count;
    if (d->train_count < need) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "%s: too short: %zu training tokens, need at least seq_len+1 = %zu", path,
                          d->train_count, need);
    }
    return TROUPE_OK;
}

int tr_data_open(tr_data *d, const char *path, const char *format, double val_fraction, int seq_len,
                 tr_err *err)
{
    unsigned char *buf = NULL;
    size_t len = 0;
    int rv;

    memset(d, 0, sizeof(*d));
    if (strcmp(format, "auto") != 0 && strcmp(format, "tokens") != 0 && strcmp(format, "bytes") != 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "data.format must be auto, tokens or bytes, got '%s'",
                          format);
    }
    if (seq_len <= 0 || val_fraction < 0.0 || val_fraction >= 1.0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: bad seq_len %d or val_fraction %g", path,
                          seq_len, val_fraction);
    }
    rv = read_file(path, &buf, &len, err);
    if (rv != TROUPE_OK) {
        goto out;
    }
    if (strcmp(format, "bytes") == 0 || (strcmp(format, "auto") == 0 && !has_magic(buf, len))) {
        rv = parse_bytes(d, path, buf, len, err);
    } else {
        rv = parse_tokens(d, path, buf, len, err);
    }
    if (rv == TROUPE_OK) {
        rv = split(d, path, val_fraction, seq_len, err);
    }
out:
    free(buf);
    if (rv != TROUPE_OK) {
        tr_data_close(d);
    }
    return rv;
}

void tr_data_close(tr_data *d)
{
    if (d == NULL) {
        return;
    }
    free(d->tokens);
    memset(d, 0, sizeof(*d));
}

static void window(const uint16_t *src, int T, int32_t *inputs, int32_t *targets)
{
    for (int t = 0; t < T; t++) {
        inputs[t] = src[t];
        targets[t] = src[t + 1];
    }
}

void tr_data_train_batch(const tr_data *d, uint64_t *rng, int B, int T, int32_t *inputs, int32_t *targets)
{
    tr_data_train_shard(d, rng, B, 0, B, T, inputs, targets);
}

void tr_data_train_shard(const tr_data *d, uint64_t *rng, int B_total, int first, int B, int T,
                         int32_t *inputs, int32_t *targets)
{
    uint64_t starts = (uint64_t)(d->train_count - (size_t)T); /* valid starts: [0, train_count - T - 1] */

    for (int b = 0; b < B_total; b++) {
        /* Every window is drawn, kept or not, so that every rank's sampler
         * stays where one process drawing the global batch would be. */
        size_t s = (size_t)tr_rng_below(rng, starts);
        if (b >= first && b < first + B) {
            window(d->tokens + s, T, inputs + (size_t)(b - first) * T, targets + (size_t)(b - first) * T);
        }
    }
}

size_t tr_data_val_batches(const tr_data *d, int B, int T)
{
    if (d->val_count < (size_t)T + 1) {
        return 0;
    }
    return (d->val_count - 1) / (size_t)T / (size_t)B;
}

void tr_data_val_batch(const tr_data *d, size_t k, int B, int T, int32_t *inputs, int32_t *targets)
{
    tr_data_val_shard(d, k, B, 0, B, T, inputs, targets);
}

void tr_data_val_shard(const tr_data *d, size_t k, int B_total, int first, int n, int T, int32_t *inputs,
                       int32_t *targets)
{
    const uint16_t *val = d->tokens + d->train_count;

    for (int b = 0; b < n; b++) {
        size_t w = k * (size_t)B_total + (size_t)first + (size_t)b;
        window(val + w * (size_t)T, T, inputs + (size_t)b * T, targets + (size_t)b * T);
    }
}

int tr_data_write(const char *path, const uint16_t *tokens, size_t count, int vocab, tr_err *err)
{
    unsigned char hdr[TR_DATA_HEADER_BYTES] = {0};
    char tmp[4096];
    FILE *f = NULL;
    int rv = TROUPE_OK;

    if (vocab <= 0 || vocab > 65536) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: vocab %d outside 1..65536", path, vocab);
    }
    /* A temp name per process: workers of one job may write the same file at
     * once (the example job generates its data in its first seconds), and the
     * rename makes one complete file win. */
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: path too long", path);
    }
    memcpy(hdr, TR_DATA_MAGIC, 8);
    put_u32(hdr + 8, TR_DATA_VERSION);
    put_u32(hdr + 12, (uint32_t)vocab);
    put_u64(hdr + 16, count);
    f = fopen(tmp, "wb");
    if (f == NULL) {
        return tr_err_set(err, TROUPE_PERMISSION_DENIED, "%s: cannot create: %s", tmp, strerror(errno));
    }
    if (fwrite(hdr, 1, sizeof(hdr), f) != sizeof(hdr) ||
        fwrite(tokens, sizeof(uint16_t), count, f) != count) {
        rv = tr_err_set(err, TROUPE_UNAVAILABLE, "%s: write failed: %s", tmp, strerror(errno));
    }
    if (fclose(f) != 0 && rv == TROUPE_OK) {
        rv = tr_err_set(err, TROUPE_UNAVAILABLE, "%s: write failed: %s", tmp, strerror(errno));
    }
    if (rv == TROUPE_OK && rename(tmp, path) != 0) {
        rv = tr_err_set(err, TROUPE_UNAVAILABLE, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    }
    if (rv != TROUPE_OK) {
        remove(tmp);
    }
    return rv;
}

int tr_data_make_learnable(const char *path, int vocab, size_t count, uint64_t seed, tr_err *err)
{
    uint16_t *tokens = NULL, *succ = NULL;
    uint64_t rng = seed;
    int rv;

    if (vocab < 2 || vocab > 65536 || count < 2) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "make-data: need vocab in 2..65536 and count >= 2");
    }
    tokens = malloc(count * sizeof(*tokens));
    succ = malloc((size_t)vocab * sizeof(*succ));
    if (tokens == NULL || succ == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "make-data: cannot allocate %zu tokens", count);
        goto out;
    }
    /* Successor table: a random permutation (Fisher-Yates), so every token is
     * some token's likely successor and the chain visits the whole vocabulary. */
    for (int v = 0; v < vocab; v++) {
        succ[v] = (uint16_t)v;
    }
    for (int v = vocab - 1; v > 0; v--) {
        int j = (int)tr_rng_below(&rng, (uint64_t)v + 1);
        uint16_t t = succ[v];
        succ[v] = succ[j];
        succ[j] = t;
    }
    tokens[0] = 0;
    for (size_t i = 1; i < count; i++) {
        tokens[i] =
            tr_rng_uniform(&rng) < 0.9 ? succ[tokens[i - 1]] : (uint16_t)tr_rng_below(&rng, (uint64_t)vocab);
    }
    rv = tr_data_write(path, tokens, count, vocab, err);
out:
    free(tokens);
    free(succ);
    return rv;
}
