/* jobspec_load.c - tr_jobspec_load: read a job spec file and parse it with
 * the file's directory as the base of a relative workdir. Kept apart from the
 * YAML walk: it knows files and errno, the walk knows neither. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec_int.h"

/* open_code maps the errno of fopen or fread to a troupe_status. */
static int open_code(int e)
{
    switch (e) {
    case ENOENT:
    case ENOTDIR: return TROUPE_NOT_FOUND;
    case EACCES:
    case EPERM: return TROUPE_PERMISSION_DENIED;
    case EMFILE:
    case ENFILE:
    case ENOMEM: return TROUPE_RESOURCE_EXHAUSTED;
    default: return TROUPE_INVALID_ARGUMENT;
    }
}

/* read_all reads f into a NUL-terminated heap buffer, refusing more than
 * TR_JS_MAX_TEXT bytes. It reads rather than stats, so pipes work too. */
static int read_all(FILE *f, const char *path, char **buf, size_t *len, tr_err *err)
{
    size_t cap = 0, n = 0, got = 1;
    char *b = NULL;
    int rv = TROUPE_OK;

    while (got > 0 && n <= TR_JS_MAX_TEXT) {
        if (n + 1 >= cap) {
            size_t ncap = cap ? cap * 2 : 4096;
            char *nb = realloc(b, ncap);
            if (nb == NULL) {
                rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", path);
                goto out;
            }
            b = nb;
            cap = ncap;
        }
        got = fread(b + n, 1, cap - n - 1, f);
        n += got;
    }
    if (ferror(f)) {
        rv = tr_err_set(err, open_code(errno), "%s: cannot read: %s", path, strerror(errno));
    } else if (n > TR_JS_MAX_TEXT) {
        rv = tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: larger than the %d MiB allowed for a job spec",
                        path, TR_JS_MAX_TEXT >> 20);
    } else {
        b[n] = '\0';
        *buf = b;
        *len = n;
        b = NULL;
    }
out:
    free(b);
    return rv;
}

/* dir_of returns a heap copy of path's directory ("." when it has none). */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');

    if (slash == NULL) {
        return strdup(".");
    }
    return strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

int tr_jobspec_load(const char *path, Troupe__V1__JobSpec **out, tr_err *err)
{
    FILE *f;
    char *buf = NULL, *dir = NULL;
    size_t len = 0;
    int rv;

    *out = NULL;
    f = fopen(path, "rb");
    if (f == NULL) {
        return tr_err_set(err, open_code(errno), "%s: cannot open: %s", path, strerror(errno));
    }
    rv = read_all(f, path, &buf, &len, err);
    if (rv != TROUPE_OK) {
        goto out;
    }
    dir = dir_of(path);
    if (dir == NULL) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", path);
        goto out;
    }
    rv = tr_jobspec_parse(buf, len, path, dir, out, err);
out:
    free(dir);
    free(buf);
    fclose(f);
    return rv;
}
