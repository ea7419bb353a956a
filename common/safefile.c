/* safefile.c - see safefile.h. */
#include "safefile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* read_upto reads until end of file, an error, or max bytes; returns the count. */
static size_t read_upto(int fd, char *buf, size_t max)
{
    size_t got = 0;
    while (got < max) {
        ssize_t n = read(fd, buf + got, max - got);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        got += (size_t)n;
    }
    return got;
}

int tr_dir_private(const char *path, tr_err *err)
{
    struct stat st;

    if (tr_mkdir_p(path) != 0 && errno != ENOTDIR) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "cannot create directory %s: %s", path,
                          strerror(errno));
    }
    if (lstat(path, &st) != 0) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "%s: %s", path, strerror(errno));
    }
    if (S_ISLNK(st.st_mode)) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "%s is a symbolic link; refusing to keep state there (remove it, or choose "
                          "another directory)",
                          path);
    }
    if (!S_ISDIR(st.st_mode)) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "%s is not a directory", path);
    }
    if (st.st_uid != geteuid()) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "%s is owned by uid %u, not by this user (uid %u); refusing to keep state there",
                          path, (unsigned)st.st_uid, (unsigned)geteuid());
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "%s is writable by group or others (mode %03o); run chmod 700 on it", path,
                          (unsigned)(st.st_mode & 0777));
    }
    if ((st.st_mode & 0077) != 0 && chmod(path, 0700) != 0) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "chmod 700 %s: %s", path, strerror(errno));
    }
    return TROUPE_OK;
}

int tr_file_open_private(const char *path, int flags, tr_err *err)
{
    struct stat st;
    int fd = open(path, flags | O_NOFOLLOW | O_CLOEXEC, 0600);

    if (fd < 0) {
        int e = errno;
        tr_err_set(err, e == ENOENT ? TROUPE_NOT_FOUND : TROUPE_FAILED_PRECONDITION, "%s: %s%s", path,
                   strerror(e), e == ELOOP ? " (a symbolic link; refusing to follow it)" : "");
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
        close(fd);
        tr_err_set(err, TROUPE_FAILED_PRECONDITION, "%s is not a regular file owned by this user", path);
        return -1;
    }
    return fd;
}

int tr_file_replace_private(const char *path, const char *data, size_t len, tr_err *err)
{
    char tmp[4200];
    size_t off = 0;
    int fd, rv = TROUPE_OK;

    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    unlink(tmp);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "cannot create %s: %s", tmp, strerror(errno));
    }
    while (off < len) {
        ssize_t n = write(fd, data + off, len - off);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            rv = tr_err_set(err, TROUPE_UNAVAILABLE, "write %s: %s", tmp, strerror(errno));
            break;
        }
        off += (size_t)n;
    }
    if (rv == TROUPE_OK && fsync(fd) != 0) {
        rv = tr_err_set(err, TROUPE_UNAVAILABLE, "fsync %s: %s", tmp, strerror(errno));
    }
    close(fd);
    if (rv == TROUPE_OK && rename(tmp, path) != 0) {
        rv = tr_err_set(err, TROUPE_UNAVAILABLE, "rename %s: %s", path, strerror(errno));
    }
    if (rv != TROUPE_OK) {
        unlink(tmp);
    }
    return rv;
}

int tr_file_read_private(const char *path, size_t max, char **text, size_t *len, tr_err *err)
{
    struct stat st;
    char *buf = NULL;
    size_t got = 0;
    int fd = tr_file_open_private(path, O_RDONLY, err);

    *text = NULL;
    *len = 0;
    if (fd < 0) {
        return err->code;
    }
    if (fstat(fd, &st) != 0 || (st.st_mode & 0077) != 0) {
        close(fd);
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "%s is readable by group or others (mode %03o); run chmod 600 on it", path,
                          (unsigned)(st.st_mode & 0777));
    }
    if ((buf = malloc(max + 1)) == NULL) {
        close(fd);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    got = read_upto(fd, buf, max);
    close(fd);
    buf[got] = '\0';
    *text = buf;
    *len = got;
    return TROUPE_OK;
}

int tr_secret_file_read(const char *path, char **secret, int *warning, tr_err *err)
{
    struct stat st;
    char buf[4097];
    size_t got = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    *secret = NULL;
    *warning = 0;
    if (fd < 0) {
        return tr_err_set(err, errno == ENOENT ? TROUPE_NOT_FOUND : TROUPE_PERMISSION_DENIED,
                          "token file %s: %s", path, strerror(errno));
    }
    if (fstat(fd, &st) == 0 && (st.st_mode & 0077) != 0) {
        *warning = 1;
    }
    got = read_upto(fd, buf, sizeof(buf) - 1);
    close(fd);
    while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == '\r' || buf[got - 1] == ' ')) {
        got--;
    }
    buf[got] = '\0';
    if (got == 0 || strlen(buf) != got) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "token file %s is empty or not text", path);
    }
    *secret = strdup(buf);
    memset(buf, 0, sizeof(buf));
    return *secret ? TROUPE_OK : tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
}
