/* lease.c - the agent's identity and its lease on its workers.
 *
 * Identity. An agent keeps a random instance id in STATE_DIR/agent.id and
 * holds an exclusive lock on STATE_DIR/agent.lock for its whole life, so one
 * state dir is one agent. The head refuses a registration under the name or id
 * of a live node whose agent had another instance id (two agents given the
 * same --name), and lets the same agent come back (a restart, or a return
 * after it was declared DEAD).
 *
 * Lease. The head grants a lease shorter than its DEAD timeout (lease_ms in
 * every RegisterNode/Heartbeat reply). Each answered call renews it from the
 * moment the call was SENT: the head heard from the agent no earlier, so its
 * DEAD clock started no earlier either. The lease's end goes to
 * STATE_DIR/lease.NODE_ID, which every worker shim of that node id reads
 * (launcher_shim.h): past it, the shims kill their workers, even when the
 * agent itself is frozen or cut off. A new node id (the old one was declared
 * DEAD) gets a new file, so the old workers' lease is never renewed again. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <pthread.h>
#include <unistd.h>

#include "log.h"
#include "node.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

/* write_file replaces path's content atomically (temp file + rename). */
static int write_file(const char *path, const char *text)
{
    char tmp[1200];
    size_t len = strlen(text);
    int fd;

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
        return -1;
    }
    if (write(fd, text, len) != (ssize_t)len) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    close(fd);
    return rename(tmp, path);
}

static int load_instance(tr_node_agent *a, const char *path)
{
    unsigned char raw[16];
    char buf[64] = "";
    FILE *f = fopen(path, "r");
    int fd;

    if (f != NULL) {
        if (fgets(buf, sizeof(buf), f) != NULL) {
            buf[strcspn(buf, "\r\n")] = '\0';
        }
        fclose(f);
        if (strlen(buf) == 32) {
            tr_strlcpy(a->instance, buf, sizeof(a->instance));
            return 0;
        }
    }
    if ((fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC)) < 0 || read(fd, raw, sizeof(raw)) != sizeof(raw)) {
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    close(fd);
    for (size_t i = 0; i < sizeof(raw); i++) {
        snprintf(a->instance + 2 * i, 3, "%02x", raw[i]);
    }
    snprintf(buf, sizeof(buf), "%s\n", a->instance);
    return write_file(path, buf);
}

int tr_node_identity(tr_node_agent *a, tr_err *err)
{
    char path[1100], pid[32] = "";
    ssize_t n;

    a->lock_fd = -1;
    if (tr_mkdir_p(a->cfg.state_dir) != 0) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "cannot create state dir %s: %s", a->cfg.state_dir,
                          strerror(errno));
    }
    snprintf(path, sizeof(path), "%s/agent.lock", a->cfg.state_dir);
    if ((a->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "cannot open %s: %s", path, strerror(errno));
    }
    if (flock(a->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        n = pread(a->lock_fd, pid, sizeof(pid) - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        close(a->lock_fd);
        a->lock_fd = -1;
        return tr_err_set(err, TROUPE_ALREADY_EXISTS,
                          "state dir %s is in use by another troupe-node (pid %s); give each agent its own "
                          "--state-dir (and --name)",
                          a->cfg.state_dir, pid[0] ? pid : "?");
    }
    snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(a->lock_fd, 0) != 0 || pwrite(a->lock_fd, pid, strlen(pid), 0) < 0) {
        TR_LOG(TR_LOG_WARNING, "cannot write pid to %s: %s", path, strerror(errno));
    }
    snprintf(path, sizeof(path), "%s/agent.id", a->cfg.state_dir);
    if (load_instance(a, path) != 0) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "cannot read or write the agent id %s: %s", path,
                          strerror(errno));
    }
    return TROUPE_OK;
}

uint64_t tr_node_id(tr_node_agent *a)
{
    uint64_t id;
    pthread_mutex_lock(&a->id_mu);
    id = a->node_id;
    pthread_mutex_unlock(&a->id_mu);
    return id;
}

int tr_node_lease_file(tr_node_agent *a, char *buf, size_t size)
{
    int have;
    pthread_mutex_lock(&a->id_mu);
    have = a->lease_ms > 0 && a->lease_path[0] != '\0';
    tr_strlcpy(buf, a->lease_path, size);
    pthread_mutex_unlock(&a->id_mu);
    return have;
}

/* lease_renew_locked: caller holds id_mu. Writing the file under it keeps
 * two renewals from racing their renames. */
void tr_node_lease_renew_locked(tr_node_agent *a, int64_t sent_ms)
{
    char text[32];

    if (a->lease_ms <= 0 || a->node_id == 0) {
        return;
    }
    if (sent_ms + a->lease_ms <= a->lease_until) {
        return; /* an older call answered late grants nothing new */
    }
    a->lease_until = sent_ms + a->lease_ms;
    if (a->lease_lapsed) {
        TR_LOG(TR_LOG_NOTICE, "lease renewed node=%llu lease_ms=%lld", (unsigned long long)a->node_id,
               (long long)a->lease_ms);
        a->lease_lapsed = 0;
    }
    snprintf(a->lease_path, sizeof(a->lease_path), "%s/lease.%llu", a->cfg.state_dir,
             (unsigned long long)a->node_id);
    snprintf(text, sizeof(text), "%lld\n", (long long)a->lease_until);
    if (write_file(a->lease_path, text) != 0) {
        /* The shims keep the last deadline they read: they fence early, never late. */
        TR_LOG(TR_LOG_WARNING, "cannot write the lease file %s: %s", a->lease_path, strerror(errno));
    }
}

void tr_node_lease_renew(tr_node_agent *a, int64_t sent_ms)
{
    pthread_mutex_lock(&a->id_mu);
    tr_node_lease_renew_locked(a, sent_ms);
    pthread_mutex_unlock(&a->id_mu);
}

int64_t tr_node_lease_left(tr_node_agent *a)
{
    int64_t left;
    pthread_mutex_lock(&a->id_mu);
    left = a->lease_until > 0 ? a->lease_until - tr_now_ms() : INT64_MAX / 2;
    pthread_mutex_unlock(&a->id_mu);
    return left;
}

/* tr_node_lease_check says so once when the lease runs out; the shims do the
 * killing (they are not frozen with the agent). */
void tr_node_lease_check(tr_node_agent *a)
{
    pthread_mutex_lock(&a->id_mu);
    if (a->lease_lapsed || a->lease_until == 0 || a->lease_until > tr_now_ms()) {
        pthread_mutex_unlock(&a->id_mu);
        return;
    }
    a->lease_lapsed = 1;
    pthread_mutex_unlock(&a->id_mu);
    TR_LOG(TR_LOG_WARNING,
           "lease ran out: no answer from the head for %lld ms; workers of node=%llu are killed (fenced) so "
           "that none runs twice",
           (long long)a->lease_ms, (unsigned long long)a->node_id);
}

void tr_node_deregister(tr_node_agent *a, const char *reason, int restarting)
{
    Troupe__V1__DeregisterNodeRequest req = TROUPE__V1__DEREGISTER_NODE_REQUEST__INIT;
    Troupe__V1__DeregisterNodeReply *rep = NULL;
    tr_err err;

    if ((req.node_id = tr_node_id(a)) == 0) {
        return;
    }
    req.instance = a->instance;
    req.reason = (char *)reason;
    req.restarting = restarting != 0;
    if (tr_rpc_client_call(a->rpc, "troupe.v1.Head/DeregisterNode", &req.base,
                           &troupe__v1__deregister_node_reply__descriptor, (ProtobufCMessage **)&rep, 2000, 0,
                           &err) != TROUPE_OK) {
        TR_LOG(TR_LOG_WARNING, "could not deregister node=%llu (the head will find it gone): %s",
               (unsigned long long)req.node_id, err.msg);
        return;
    }
    troupe__v1__deregister_node_reply__free_unpacked(rep, NULL);
    TR_LOG(TR_LOG_NOTICE, "deregistered node=%llu: the head shows it LEFT", (unsigned long long)req.node_id);
}
