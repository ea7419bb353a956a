/* statedir.c - what troupe-head checks about its state dir at start.
 *
 * One head per state dir: two heads on one SQLite file would both serve and
 * hand out the same job and node ids. The head holds an exclusive flock on
 * the state dir itself for its whole life (the kernel drops it when the
 * process dies, kill -9 included, so nothing stale ever blocks a restart).
 * The lock is on the directory, not on a file in it: a lock file removed by
 * hand (`rm head.lock`) let a second head create a fresh one, lock that, and
 * serve the same head.db. DIR/head.lock only holds the owner's pid, for the
 * message the second head prints.
 *
 * Ids never go backwards: a head.db that is fresh or empty (0 bytes, restored
 * from an old backup, deleted by hand) beside an old logs/ directory would
 * otherwise give a new job the id, and so the log file, of an old one. The
 * counters are raised past every id stored in the tables and every
 * logs/job-N.log at start. */
#include "statedir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "head.h"
#include "log.h"
#include "util.h"

/* lock_owner reads the pid the owner wrote into DIR/head.lock ("" if none). */
static void lock_owner(const char *path, char *owner, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    ssize_t n = fd >= 0 ? pread(fd, owner, size - 1, 0) : -1;

    owner[n > 0 ? n : 0] = '\0';
    owner[strcspn(owner, "\n")] = '\0';
    if (fd >= 0) {
        close(fd);
    }
}

int tr_head_lock_state_dir(tr_head *h, tr_err *err)
{
    char path[4200], owner[32] = "";
    int fd, pid_fd;
    ssize_t n;

    h->lock_fd = -1;
    if (tr_mkdir_p(h->cfg.state_dir) != 0) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "cannot create state dir %s: %s", h->cfg.state_dir,
                          strerror(errno));
    }
    snprintf(path, sizeof(path), "%s/head.lock", h->cfg.state_dir);
    fd = open(h->cfg.state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "cannot open state dir %s: %s", h->cfg.state_dir,
                          strerror(errno));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK) {
            lock_owner(path, owner, sizeof(owner));
            return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                              "state dir %s is in use by another troupe-head (pid %s, holding a lock on the "
                              "directory); stop that one first, or give this one its own --state-dir",
                              h->cfg.state_dir, owner[0] ? owner : "unknown");
        }
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "cannot lock state dir %s: %s", h->cfg.state_dir,
                          strerror(e));
    }
    pid_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    n = snprintf(owner, sizeof(owner), "%ld\n", (long)getpid());
    if (pid_fd < 0 || write(pid_fd, owner, (size_t)n) != n) {
        TR_LOG(TR_LOG_WARNING, "cannot write the pid into %s: %s", path, strerror(errno));
    }
    if (pid_fd >= 0) {
        close(pid_fd);
    }
    h->lock_fd = fd;
    return TROUPE_OK;
}

void tr_head_unlock_state_dir(tr_head *h)
{
    if (h->lock_fd >= 0) {
        close(h->lock_fd); /* drops the flock on the directory; head.lock stays (only a pid) */
        h->lock_fd = -1;
    }
}

void tr_head_id_seen(tr_head *h, int table, uint64_t id, const char *where)
{
    if (id < h->next_id[table]) {
        return;
    }
    TR_LOG(TR_LOG_WARNING, "%s id %" PRIu64 " found in %s is not below the stored counter %" PRIu64
           "; new ids start at %" PRIu64,
           table == TR_ID_JOBS ? "job" : "node", id, where, h->next_id[table], id + 1);
    h->next_id[table] = id + 1;
    h->ids_dirty = 1;
}

void tr_head_ids_past_logs(tr_head *h)
{
    char dir[4200];
    DIR *d;
    struct dirent *e;

    snprintf(dir, sizeof(dir), "%s/logs", h->cfg.state_dir);
    if ((d = opendir(dir)) == NULL) {
        return;
    }
    while ((e = readdir(d)) != NULL) {
        unsigned long long id;
        int end = 0;
        if (sscanf(e->d_name, "job-%llu.log%n", &id, &end) == 1 && e->d_name[end] == '\0') {
            tr_head_id_seen(h, TR_ID_JOBS, (uint64_t)id, "an old log file in logs/");
        }
    }
    closedir(d);
}
