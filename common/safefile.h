/* safefile.h - files and directories only their owner can touch.
 *
 * State dirs and the files in them (head.db, credentials, worker logs) are
 * made so that another local user can neither read them nor redirect them:
 * directories 0700 and refused when owned by someone else or writable by
 * group/others, files opened with O_NOFOLLOW (a planted symlink is an error,
 * never followed) and created 0600. */
#ifndef TR_SAFEFILE_H
#define TR_SAFEFILE_H

#include <stddef.h>

#include "err.h"

/* tr_dir_private makes path (and missing parents, 0755 as tr_mkdir_p does)
 * with the last component 0700, then checks it: a real directory (not a
 * symlink), owned by the effective user, not writable by group or others.
 * FAILED_PRECONDITION with the reason and what to do otherwise. */
int tr_dir_private(const char *path, tr_err *err);

/* tr_file_open_private opens path with flags | O_NOFOLLOW | O_CLOEXEC and
 * mode 0600 for a new file; refuses a symlink or a file owned by another
 * user. Returns the descriptor, or -1 with err set. */
int tr_file_open_private(const char *path, int flags, tr_err *err);

/* tr_file_replace_private writes data to path atomically (a temporary file
 * in the same directory, fsync, rename), mode 0600. */
int tr_file_replace_private(const char *path, const char *data, size_t len, tr_err *err);

/* tr_file_read_private reads at most max bytes of path into a malloc'ed,
 * NUL-terminated *text. NOT_FOUND when it does not exist; refuses a symlink,
 * another user's file, or one readable by group/others (a secret left open). */
int tr_file_read_private(const char *path, size_t max, char **text, size_t *len, tr_err *err);

/* tr_secret_file_read reads a credential given by the operator (--token-file,
 * token_file:, a Kubernetes Secret mounted as a file): the whole content
 * with trailing newlines and spaces stripped, into a malloc'ed *secret.
 * Symlinks are followed here (Secret volumes are symlinks); a file readable
 * by group or others is accepted with *warning set to 1, for the caller to
 * say so. INVALID_ARGUMENT for an empty file. */
int tr_secret_file_read(const char *path, char **secret, int *warning, tr_err *err);

#endif
