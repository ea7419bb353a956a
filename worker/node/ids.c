/* ids.c - the user and group ids troupe-node's workers run under (ids.h).
 *
 * Dynamic mode keeps two kinds of holding: one per worker attempt (its uid)
 * and one per job (its gid, counted by the job's workers here). Each holds an
 * open, flock'ed file --worker-id-dir/ID; the search for a free id starts
 * after the last one taken, so an id just given back is not reused at once
 * (what a finished worker left behind is less likely to meet a new one). */
#include "ids.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "log.h"
#include "safefile.h"
#include "util.h"

typedef struct holding {
    uint64_t job_id;
    char *worker; /* NULL: the job's gid */
    uint32_t attempt;
    uint32_t id;
    int fd;
    unsigned refs; /* the job's gid: workers of the job holding it */
} holding;

struct tr_ids {
    tr_ids_mode mode;
    uid_t agent_uid;
    uid_t user_uid; /* user mode */
    gid_t user_gid;
    char user[64];
    uint32_t first, last, next;
    char dir[1024];
    holding *h;
    size_t n, cap;
};

static int parse_range(const char *s, uint32_t *first, uint32_t *last, tr_err *err)
{
    unsigned long long a, b;
    char tail;

    if (s == NULL || sscanf(s, "%llu-%llu%c", &a, &b, &tail) != 2 || a < 1000 || b < a ||
        b >= 0xFFFFFFFEull) {
        return tr_err_set(
            err, TROUPE_INVALID_ARGUMENT,
            "worker_uid_range '%s': expected FIRST-LAST with 1000 <= FIRST <= LAST < 4294967294, "
            "e.g. " TR_IDS_DEFAULT_RANGE,
            s ? s : "");
    }
    *first = (uint32_t)a;
    *last = (uint32_t)b;
    return TROUPE_OK;
}

static int open_user(tr_ids *ids, const char *name, tr_err *err)
{
    struct passwd *pw = getpwnam(name);

    if (pw == NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "worker_user '%s': no such user", name);
    }
    if (pw->pw_uid == 0 || pw->pw_gid == 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "worker_user '%s': uid %u gid %u is root's; workers must not run as root", name,
                          (unsigned)pw->pw_uid, (unsigned)pw->pw_gid);
    }
    ids->user_uid = pw->pw_uid;
    ids->user_gid = pw->pw_gid;
    tr_strlcpy(ids->user, name, sizeof(ids->user));
    ids->mode = TR_IDS_USER;
    return TROUPE_OK;
}

int tr_ids_open(const tr_ids_opts *o, tr_ids **out, tr_err *err)
{
    tr_ids *ids = calloc(1, sizeof(*ids));
    int rv = TROUPE_OK;

    *out = NULL;
    if (ids == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    ids->agent_uid = geteuid();
    rv = parse_range(o->uid_range ? o->uid_range : TR_IDS_DEFAULT_RANGE, &ids->first, &ids->last, err);
    ids->next = ids->first;
    tr_strlcpy(ids->dir, o->lock_dir && o->lock_dir[0] ? o->lock_dir : TR_IDS_DEFAULT_DIR, sizeof(ids->dir));
    if (rv != TROUPE_OK) {
        goto out;
    }
    if (o->shared_uid) {
        ids->mode = TR_IDS_SHARED;
    } else if (ids->agent_uid != 0) {
        ids->mode = TR_IDS_NONE;
        if (o->worker_user != NULL && o->worker_user[0] != '\0') {
            rv = tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                            "worker_user '%s' needs the agent to run as root (it runs as uid %u)",
                            o->worker_user, (unsigned)ids->agent_uid);
        }
    } else if (o->worker_user != NULL && o->worker_user[0] != '\0') {
        rv = open_user(ids, o->worker_user, err);
    } else {
        ids->mode = TR_IDS_DYNAMIC;
        rv = tr_dir_private(ids->dir, err);
    }
out:
    if (rv != TROUPE_OK) {
        tr_ids_close(ids);
        return rv;
    }
    *out = ids;
    return TROUPE_OK;
}

void tr_ids_close(tr_ids *ids)
{
    if (ids == NULL) {
        return;
    }
    for (size_t i = 0; i < ids->n; i++) {
        close(ids->h[i].fd);
        free(ids->h[i].worker);
    }
    free(ids->h);
    free(ids);
}

tr_ids_mode tr_ids_get_mode(const tr_ids *ids)
{
    return ids->mode;
}

void tr_ids_describe(const tr_ids *ids, char *buf, size_t size)
{
    switch (ids->mode) {
    case TR_IDS_DYNAMIC:
        snprintf(buf, size, "per-worker uid %" PRIu32 "-%" PRIu32, ids->first, ids->last);
        break;
    case TR_IDS_USER:
        snprintf(buf, size, "user %s (uid %u): jobs share one uid", ids->user, (unsigned)ids->user_uid);
        break;
    case TR_IDS_SHARED:
        snprintf(buf, size,
                 "shared uid %u (--shared-uid): workers can read the node credential and each "
                 "other's",
                 (unsigned)ids->agent_uid);
        break;
    default:
        snprintf(buf, size,
                 "none: runs as uid %u without root; refuses jobs (--shared-uid to accept the risk)",
                 (unsigned)ids->agent_uid);
        break;
    }
}

/* take finds a free id in the range, skipping known users and groups, and
 * holds it with an flock on its file. -1 when none is left. */
static int take(tr_ids *ids, uint32_t *id, int *fd_out)
{
    uint64_t span = (uint64_t)ids->last - ids->first + 1;

    for (uint64_t k = 0; k < span; k++) {
        uint32_t id_try = ids->next;
        char path[1100];
        int fd;

        ids->next = ids->next == ids->last ? ids->first : ids->next + 1;
        if (getpwuid(id_try) != NULL || getgrgid(id_try) != NULL) {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%" PRIu32, ids->dir, id_try);
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            continue;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            close(fd); /* another agent on this host holds it */
            continue;
        }
        *id = id_try;
        *fd_out = fd;
        return 0;
    }
    return -1;
}

static holding *add(tr_ids *ids)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 16;
        holding *p = realloc(ids->h, cap * sizeof(*p));
        if (p == NULL) {
            return NULL;
        }
        ids->h = p;
        ids->cap = cap;
    }
    memset(&ids->h[ids->n], 0, sizeof(ids->h[0]));
    ids->h[ids->n].fd = -1;
    return &ids->h[ids->n++];
}

static holding *find(tr_ids *ids, uint64_t job_id, const char *worker, uint32_t attempt)
{
    for (size_t i = 0; i < ids->n; i++) {
        holding *h = &ids->h[i];
        if (h->job_id == job_id &&
            (worker == NULL ? h->worker == NULL
                            : h->worker != NULL && h->attempt == attempt && strcmp(h->worker, worker) == 0)) {
            return h;
        }
    }
    return NULL;
}

static void drop(tr_ids *ids, holding *h)
{
    close(h->fd); /* the flock goes with it */
    free(h->worker);
    *h = ids->h[--ids->n];
}

/* job_gid holds (or counts one more user of) the job's gid. */
static int job_gid(tr_ids *ids, uint64_t job_id, gid_t *gid, tr_err *err)
{
    holding *g = find(ids, job_id, NULL, 0);
    uint32_t id;
    int fd;

    if (g == NULL) {
        if (take(ids, &id, &fd) != 0) {
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED,
                              "no free id left in worker_uid_range %" PRIu32 "-%" PRIu32 " (%s); widen it",
                              ids->first, ids->last, ids->dir);
        }
        if ((g = add(ids)) == NULL) {
            close(fd);
            return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        }
        g->job_id = job_id;
        g->id = id;
        g->fd = fd;
    }
    g->refs++;
    *gid = g->id;
    return TROUPE_OK;
}

int tr_ids_acquire(tr_ids *ids, uint64_t job_id, const char *worker, uint32_t attempt, int *switch_ids,
                   uid_t *uid, gid_t *gid, tr_err *err)
{
    holding *w;
    uint32_t id;
    int fd, rv;

    *switch_ids = 0;
    *uid = ids->agent_uid;
    *gid = getegid();
    switch (ids->mode) {
    case TR_IDS_SHARED: return TROUPE_OK;
    case TR_IDS_USER:
        *switch_ids = 1;
        *uid = ids->user_uid;
        *gid = ids->user_gid;
        return TROUPE_OK;
    case TR_IDS_NONE:
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION,
                          "this troupe-node runs as uid %u without root, so its workers would share its "
                          "identity and could read its node credential and other jobs' credentials; run it "
                          "as root, or with --shared-uid to accept that risk",
                          (unsigned)ids->agent_uid);
    default: break;
    }
    if ((w = find(ids, job_id, worker, attempt)) != NULL) {
        holding *g = find(ids, job_id, NULL, 0);
        *switch_ids = 1;
        *uid = w->id;
        *gid = g != NULL ? g->id : w->id;
        return TROUPE_OK;
    }
    if ((rv = job_gid(ids, job_id, gid, err)) != TROUPE_OK) {
        return rv;
    }
    if (take(ids, &id, &fd) != 0) {
        tr_ids_release(ids, job_id, NULL, 0);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED,
                          "no free id left in worker_uid_range %" PRIu32 "-%" PRIu32 " (%s); widen it",
                          ids->first, ids->last, ids->dir);
    }
    if ((w = add(ids)) == NULL || (w->worker = strdup(worker)) == NULL) {
        if (w != NULL) {
            ids->n--;
        }
        close(fd);
        tr_ids_release(ids, job_id, NULL, 0);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    w->job_id = job_id;
    w->attempt = attempt;
    w->id = id;
    w->fd = fd;
    *switch_ids = 1;
    *uid = id;
    TR_LOG(TR_LOG_DEBUG, "ids taken job=%" PRIu64 " worker=%s attempt=%" PRIu32 " uid=%u gid=%u", job_id,
           worker, attempt, (unsigned)*uid, (unsigned)*gid);
    return TROUPE_OK;
}

void tr_ids_release(tr_ids *ids, uint64_t job_id, const char *worker, uint32_t attempt)
{
    holding *h = find(ids, job_id, worker, attempt);

    if (h == NULL) {
        return;
    }
    if (worker != NULL) {
        drop(ids, h);
        worker = NULL; /* and one user less of the job's gid */
        h = find(ids, job_id, NULL, 0);
        if (h == NULL) {
            return;
        }
    }
    if (h->refs > 0) {
        h->refs--;
    }
    if (h->refs == 0) {
        drop(ids, h);
    }
}
