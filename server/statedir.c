/* statedir.c - what troupe-head checks about its state dir at start.
 *
 * One head per state dir: two heads on one SQLite file would both serve and
 * hand out the same job and node ids. The head holds an exclusive flock on
 * DIR/head.lock for its whole life (the kernel drops it when the process
 * dies, kill -9 included, so a stale lock file never blocks a restart). The
 * file holds the owner's pid, for the message the second head prints.
 *
 * Ids never go backwards: a head.db that is fresh or empty (0 bytes, restored
 * from an old backup, deleted by hand) beside an old logs/ directory would
 * otherwise give a new job the id, and so the log file, of an old one. The
 * counters are raised past every id stored in the tables and every
 * logs/job-N.log at start. */
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

int tr_head_lock_state_dir(tr_head *h, tr_err *err)
{
    char path[4200], owner[32] = "";
    int fd;
    ssize_t n;

    h->lock_fd = -1;
    if (tr_mkdir_p(h->cfg.state_dir) != 0) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "cannot create state dir %s: %s", h->cfg.state_dir,
                          strerror(errno));
    }
    snprintf(path, sizeof(path), "%s/head.lock", h->cfg.state_dir);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "cannot open lock file %s: %s", path, strerror(errno));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        n = pread(fd, owner, sizeof(owner) - 1, 0);
        owner[n > 0 ? n : 0] = '\0';
        owner[strcspn(owner, "\n")] = '\0';
        close(fd);
        if (e == EWOULDBLOCK) {
            return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                              "state dir %s is in use by another troupe-head (pid %s, holding %s); stop that "
                              "one first, or give this one its own --state-dir",
                              h->cfg.state_dir, owner[0] ? owner : "unknown", path);
        }
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "cannot lock %s: %s", path, strerror(e));
    }
    n = snprintf(owner, sizeof(owner), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, owner, (size_t)n, 0) != n) {
        TR_LOG(TR_LOG_WARNING, "cannot write the pid into %s: %s", path, strerror(errno));
    }
    h->lock_fd = fd;
    return TROUPE_OK;
}

void tr_head_unlock_state_dir(tr_head *h)
{
    if (h->lock_fd >= 0) {
        close(h->lock_fd); /* drops the flock; the file stays (removing it would race a new head) */
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
