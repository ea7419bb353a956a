/* sync.c - the agent side of NodeSync: run what the head assigns.
 *
 * A sync thread keeps one long poll open to the head and parks each new
 * assignment set in a->incoming. The main loop (tr_node_workers_step) applies
 * it: it starts assigned workers it does not know, stops known workers that
 * are no longer assigned, and then reports the complete list of its workers
 * with any new output. A (name, attempt) that the agent has seen is never
 * started again, so an exited worker is not resurrected by a set that was
 * computed before the head heard of the exit. Output that could not be
 * delivered stays queued and goes with the next report, named by its offset
 * in the worker's log file, so the head keeps each byte once however often a
 * report it could not acknowledge is sent again.
 *
 * No output is lost: a worker that ended is reported as still running until
 * its log has been read to the end and shipped, so the head never sees a job
 * end before it has every byte its workers wrote; and a worker is forgotten
 * only once the head acknowledged the report that carried its last bytes.
 * A report carries at most LOG_BATCH of each worker's output and REPORT_LOG_MAX
 * in all (well inside the head's frame); while more is waiting, the next
 * report goes out on the next step instead of after the usual period. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpus.h"
#include "ids.h"
#include "log.h"
#include "node.h"
#include "node_sync.h"
#include "safefile.h"
#include "troupe/v1/troupe.pb-c.h"
#include "util.h"

#define LOG_BATCH (256u * 1024u)
#define REPORT_LOG_MAX (1024u * 1024u)

typedef struct tr_pending_log {
    uint64_t job_id;
    char name[128];
    uint32_t attempt;
    char *buf;
    size_t len;
    uint64_t off; /* where buf[0] is in the worker's log file: the report's log_offset */
    int drained; /* the worker ended and its log was read to the end */
    struct tr_pending_log *next;
} tr_pending_log;

/* gather keeps the parts of one set (NodeSyncReply.next != 0) until its
 * last part came: their wire forms, concatenated, unpack as one message with
 * every worker and common part (repeated fields append). */
typedef struct gather {
    uint8_t *buf;
    size_t len;
    uint64_t version;
    uint32_t next; /* the page to ask for; 0 = not gathering */
} gather;

static void gather_reset(gather *g)
{
    free(g->buf);
    memset(g, 0, sizeof(*g));
}

/* gather_add appends a part; returns the whole set once rep was its last
 * part (rep is then consumed or returned as is), else NULL. A part that does
 * not continue the set being gathered restarts it (a part 0) or is dropped. */
static Troupe__V1__NodeSyncReply *gather_add(gather *g, Troupe__V1__NodeSyncReply *rep)
{
    Troupe__V1__NodeSyncReply *whole;
    size_t n;
    uint8_t *grown;

    if (rep->page == 0) {
        gather_reset(g);
        if (rep->next == 0) {
            return rep; /* the whole set in one reply */
        }
    } else if (g->next == 0 || rep->version != g->version || rep->page != g->next) {
        TR_LOG(TR_LOG_INFO,
               "node sync: part at %u of version %llu does not continue the set gathered; "
               "asking again",
               rep->page, (unsigned long long)rep->version);
        gather_reset(g);
        troupe__v1__node_sync_reply__free_unpacked(rep, NULL);
        return NULL;
    }
    n = troupe__v1__node_sync_reply__get_packed_size(rep);
    if ((grown = realloc(g->buf, g->len + n)) == NULL) {
        gather_reset(g);
        troupe__v1__node_sync_reply__free_unpacked(rep, NULL);
        return NULL;
    }
    g->buf = grown;
    troupe__v1__node_sync_reply__pack(rep, g->buf + g->len);
    g->len += n;
    g->version = rep->version;
    g->next = rep->next;
    troupe__v1__node_sync_reply__free_unpacked(rep, NULL);
    if (g->next != 0) {
        return NULL;
    }
    whole = troupe__v1__node_sync_reply__unpack(NULL, g->len, g->buf);
    gather_reset(g);
    if (whole != NULL) {
        whole->next = 0;
        whole->page = 0;
    }
    return whole;
}

static void *sync_main(void *arg)
{
    tr_node_agent *a = arg;
    gather g = {0};

    while (!*a->stop) {
        Troupe__V1__NodeSyncRequest req = TROUPE__V1__NODE_SYNC_REQUEST__INIT;
        Troupe__V1__NodeSyncReply *rep = NULL;
        tr_err err;
        int rv;

        pthread_mutex_lock(&a->mu);
        req.node_id = a->sync_node_id;
        req.version = a->incoming ? a->incoming->version : a->applied_version;
        pthread_mutex_unlock(&a->mu);
        req.wait_ms = TR_NODE_SYNC_WAIT_MS;
        req.common_parts = 1;
        if (g.next != 0) { /* the rest of a set: answered at once */
            req.version = g.version;
            req.page = g.next;
            req.wait_ms = 0;
        }
        rv = tr_rpc_client_call(a->rpc, "troupe.v1.Head/NodeSync", &req.base,
                                &troupe__v1__node_sync_reply__descriptor, (ProtobufCMessage **)&rep,
                                req.wait_ms + TR_NODE_SYNC_MARGIN_MS, 0, &err);
        if (rv != TROUPE_OK) {
            if (g.next != 0) {
                TR_LOG(TR_LOG_WARNING, "node sync: part at %u of version %llu not received: %s", g.next,
                       (unsigned long long)g.version, err.msg);
            }
            gather_reset(&g);
            tr_sleep_ms(200); /* the heartbeat path reports and re-registers */
            continue;
        }
        pthread_mutex_lock(&a->mu);
        if (req.node_id != a->sync_node_id) {
            /* Asked for a node id the agent no longer has (it registered
             * again as a new node): that set is not this node's. */
            troupe__v1__node_sync_reply__free_unpacked(rep, NULL);
            gather_reset(&g);
            rep = NULL;
        }
        pthread_mutex_unlock(&a->mu);
        if (rep != NULL && (rep = gather_add(&g, rep)) == NULL) {
            continue; /* more parts to come */
        }
        pthread_mutex_lock(&a->mu);
        if (rep != NULL && a->incoming != NULL) {
            troupe__v1__node_sync_reply__free_unpacked(a->incoming, NULL);
        }
        if (rep != NULL) {
            a->incoming = rep;
        }
        pthread_mutex_unlock(&a->mu);
    }
    gather_reset(&g);
    return NULL;
}

int tr_node_workers_start(tr_node_agent *a, tr_err *err)
{
    char dir[1024];
    int rv;

    snprintf(dir, sizeof(dir), "%s/logs", a->cfg.state_dir);
    if ((rv = tr_launcher_open(dir, "/proc/self/exe", a->cfg.stop_grace_ms, &a->launcher, err)) !=
        TROUPE_OK) {
        return rv;
    }
    pthread_mutex_init(&a->mu, NULL);
    a->sync_node_id = tr_node_id(a);
    if (pthread_create(&a->sync_thread, NULL, sync_main, a) != 0) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot start the sync thread");
    }
    a->sync_started = 1;
    return TROUPE_OK;
}

static const Troupe__V1__WorkerAssignment *assigned(const Troupe__V1__NodeSyncReply *set, const char *name,
                                                    uint32_t attempt)
{
    for (size_t i = 0; set != NULL && i < set->n_workers; i++) {
        if (set->workers[i]->attempt == attempt && strcmp(set->workers[i]->name, name) == 0) {
            return set->workers[i];
        }
    }
    return NULL;
}

/* credential_dir names the directory holding a worker's credential:
 * STATE_DIR/credentials/JOB-ATTEMPT-WORKER (worker names are [A-Za-z0-9._-],
 * the head's name rules; anything else would not be a file name here). The
 * credential itself is the file "token" in it. */
static void credential_dir(const tr_node_agent *a, uint64_t job, uint32_t attempt, const char *name,
                           char *path, size_t size)
{
    snprintf(path, size, "%s/credentials/%llu-%u-%s", a->cfg.state_dir, (unsigned long long)job, attempt,
             strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == strlen(name) &&
                     name[0] != '.'
                 ? name
                 : "worker");
}

/* remove_credential deletes a worker's credential and its directory. */
static void remove_credential(const tr_node_agent *a, uint64_t job, uint32_t attempt, const char *name)
{
    char dir[1024], path[1100];

    credential_dir(a, job, attempt, name, dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/token", dir);
    unlink(path);
    rmdir(dir);
}

/* write_credential stores wa's credential where only the worker can read it:
 * STATE_DIR (traverse only) / credentials (traverse only) / a directory of
 * the worker's own (0700) / token (0400), both owned by the worker's uid when
 * it has one (ids.h), else by the agent. The file is written while the
 * directory is still the agent's, so the worker's uid never holds a directory
 * that the agent writes into. */
static int write_credential(tr_node_agent *a, const Troupe__V1__WorkerAssignment *wa,
                            const tr_worker_spec *ws, char *path, size_t size, tr_err *err)
{
    char dir[1024];
    int rv;

    snprintf(dir, sizeof(dir), "%s/credentials", a->cfg.state_dir);
    if ((rv = tr_dir_private(dir, err)) != TROUPE_OK) {
        return rv;
    }
    if (ws->switch_ids && chmod(dir, 0711) != 0) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "chmod 711 %s: %s", dir, strerror(errno));
    }
    remove_credential(a, wa->job_id, wa->attempt, wa->name); /* a start retried */
    credential_dir(a, wa->job_id, wa->attempt, wa->name, dir, sizeof(dir));
    if (mkdir(dir, 0700) != 0) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "credential directory %s: %s", dir,
                          strerror(errno));
    }
    snprintf(path, size, "%s/token", dir);
    if ((rv = tr_file_replace_private(path, wa->credential, strlen(wa->credential), err)) != TROUPE_OK) {
        rmdir(dir);
        return rv;
    }
    if (ws->switch_ids && (lchown(path, ws->uid, ws->gid) != 0 || chmod(path, 0400) != 0 ||
                           lchown(dir, ws->uid, ws->gid) != 0)) {
        rv = tr_err_set(err, TROUPE_FAILED_PRECONDITION, "giving %s to uid %u: %s", path, (unsigned)ws->uid,
                        strerror(errno));
        remove_credential(a, wa->job_id, wa->attempt, wa->name);
    }
    return rv;
}

/* common_of finds the job's common part and the group's in set (a job's
 * groups may come in several parts, each with its own JobCommon entry). */
static const Troupe__V1__JobCommon *common_of(const Troupe__V1__NodeSyncReply *set, uint64_t job,
                                              const char *group, const Troupe__V1__GroupCommon **gc)
{
    const Troupe__V1__JobCommon *first = NULL;

    *gc = NULL;
    for (size_t j = 0; j < set->n_jobs; j++) {
        if (set->jobs[j]->job_id != job) {
            continue;
        }
        first = first ? first : set->jobs[j];
        for (size_t k = 0; k < set->jobs[j]->n_groups; k++) {
            if (strcmp(set->jobs[j]->groups[k]->name, group) == 0) {
                *gc = set->jobs[j]->groups[k];
                return set->jobs[j];
            }
        }
    }
    return first;
}

/* env_layer adds vars to env (n of them so far), a later layer's key
 * replacing an earlier one's value in place. */
static void env_layer(Troupe__V1__EnvVar **env, size_t *n, Troupe__V1__EnvVar *const *vars, size_t n_vars)
{
    for (size_t i = 0; i < n_vars; i++) {
        size_t k = 0;
        while (k < *n && strcmp(env[k]->key, vars[i]->key) != 0) {
            k++;
        }
        env[k] = vars[i];
        *n += k == *n;
    }
}

/* resolve makes the worker's whole assignment: its own part over its job's
 * and group's common parts (troupe.proto, WorkerAssignment). env is
 * allocated (the caller frees it); its entries are borrowed from set. */
static int resolve(const Troupe__V1__NodeSyncReply *set, const Troupe__V1__WorkerAssignment *wa,
                   Troupe__V1__WorkerAssignment *out)
{
    const Troupe__V1__GroupCommon *gc = NULL;
    const Troupe__V1__JobCommon *jc = common_of(set, wa->job_id, wa->group ? wa->group : "", &gc);
    size_t cap = wa->n_env + (jc ? jc->n_env : 0) + (gc ? gc->n_env : 0);

    *out = *wa;
    out->n_env = 0;
    if ((out->env = calloc(cap + 1, sizeof(*out->env))) == NULL) {
        return -1;
    }
    if (jc != NULL) {
        env_layer(out->env, &out->n_env, jc->env, jc->n_env);
        if (out->workdir == NULL || out->workdir[0] == '\0') {
            out->workdir = jc->workdir;
        }
    }
    if (gc != NULL) {
        env_layer(out->env, &out->n_env, gc->env, gc->n_env);
        if (out->n_command == 0) {
            out->command = gc->command;
            out->n_command = gc->n_command;
        }
    }
    env_layer(out->env, &out->n_env, wa->env, wa->n_env);
    return 0;
}

static void start_resolved(tr_node_agent *a, const Troupe__V1__WorkerAssignment *wa);

static void start_one(tr_node_agent *a, const Troupe__V1__NodeSyncReply *set,
                      const Troupe__V1__WorkerAssignment *wa)
{
    Troupe__V1__WorkerAssignment whole;

    if (resolve(set, wa, &whole) != 0) {
        TR_LOG(TR_LOG_ERR, "cannot start worker=%s: out of memory", wa->name);
        return;
    }
    start_resolved(a, &whole);
    free(whole.env);
}

static void start_resolved(tr_node_agent *a, const Troupe__V1__WorkerAssignment *wa)
{
    const char **argv = calloc(wa->n_command + 1, sizeof(*argv));
    const char **env = calloc(wa->n_env + 7, sizeof(*env));
    char **owned = calloc(wa->n_env + 7, sizeof(*owned));
    tr_worker_spec ws = {0};
    tr_nsys_cmd nsys = {0};
    char lease[1100];
    size_t ne = 0;
    tr_err err, gpu_err = {0}, id_err = {0};
    const char *real_visible = getenv("CUDA_VISIBLE_DEVICES");

    if (a->n_gpus == 0 || a->gpus[0].simulated || real_visible == NULL || real_visible[0] == '\0') {
        real_visible = NULL; /* simulated GPUs, or the agent sees every GPU */
    }

    if (argv == NULL || env == NULL || owned == NULL || wa->n_command == 0) {
        TR_LOG(TR_LOG_ERR, "cannot start worker=%s: %s", wa->name,
               wa->n_command ? "out of memory" : "no command");
        goto out;
    }
    for (size_t i = 0; i < wa->n_command; i++) {
        argv[i] = wa->command[i];
    }
    for (size_t i = 0; i < wa->n_env; i++) {
        const char *value = wa->env[i]->value;
        char mapped[1024];
        /* The head numbers GPUs as this agent discovered them; when the agent
         * itself sees only some GPUs (CUDA_VISIBLE_DEVICES=4,5,6,7 in a partial
         * allocation), index 0 is physical GPU 4: translate for the worker.
         * An index that does not translate fails the worker: the raw index
         * may be a GPU of another allocation. */
        if (strcmp(wa->env[i]->key, "CUDA_VISIBLE_DEVICES") == 0 && real_visible != NULL) {
            if (tr_gpus_translate_visible(real_visible, value, mapped, sizeof(mapped), &gpu_err) == TROUPE_OK) {
                value = mapped;
            }
        }
        if (asprintf(&owned[ne], "%s=%s", wa->env[i]->key, value) > 0) {
            env[ne] = owned[ne];
            ne++;
        }
    }
    if (asprintf(&owned[ne], "TROUPE_NODE=%s", a->cfg.name) > 0) {
        env[ne] = owned[ne];
        ne++;
    }
    /* Who it runs as (ids.h); an agent that cannot separate workers from
     * itself and was not told to accept that fails the worker, saying why. */
    if (tr_ids_acquire(a->ids, wa->job_id, wa->name, wa->attempt, &ws.switch_ids, &ws.uid, &ws.gid,
                       &id_err) != TROUPE_OK) {
        ws.switch_ids = 0;
    }
    /* The worker gets its job's worker credential in a file, never the
     * agent's own credential and never on a command line or in its env. */
    if (id_err.code == TROUPE_OK && wa->credential != NULL && wa->credential[0] != '\0') {
        char path[1100];
        if (write_credential(a, wa, &ws, path, sizeof(path), &err) != TROUPE_OK) {
            tr_ids_release(a->ids, wa->job_id, wa->name, wa->attempt);
            TR_LOG(TR_LOG_ERR, "cannot start worker=%s: %s", wa->name, err.msg);
            goto out;
        }
        if (asprintf(&owned[ne], "TROUPE_CREDENTIALS=%s", path) > 0) {
            env[ne] = owned[ne];
            ne++;
        }
    }
    /* Where peers on other nodes reach this worker (the CPU collective listens on it). */
    if (a->cfg.address != NULL && asprintf(&owned[ne], "TROUPE_NODE_ADDR=%s", a->cfg.address) > 0) {
        env[ne] = owned[ne];
        ne++;
    }
    /* A TLS head: the worker's libtroupe verifies it with the agent's CA (a
     * public certificate); the agent's own client key never reaches it. */
    if (a->cfg.tls_ca != NULL && a->cfg.tls_ca[0] && asprintf(&owned[ne], "TROUPE_TLS_CA=%s", a->cfg.tls_ca) > 0) {
        env[ne] = owned[ne];
        ne++;
    }
    if (a->cfg.tls_server_name != NULL && a->cfg.tls_server_name[0] &&
        asprintf(&owned[ne], "TROUPE_TLS_SERVER_NAME=%s", a->cfg.tls_server_name) > 0) {
        env[ne] = owned[ne];
        ne++;
    }
    if (tr_node_nsys_wrap(a, wa, &nsys) != 0) {
        TR_LOG(TR_LOG_ERR, "cannot start worker=%s: out of memory", wa->name);
        goto out;
    }
    ws.job_id = wa->job_id;
    ws.name = wa->name;
    ws.attempt = wa->attempt;
    ws.argv = nsys.argv != NULL ? nsys.argv : argv; /* under nsys when the job asks (nsys.c) */
    ws.report_glob = nsys.report_glob;
    ws.env = env;
    ws.workdir = wa->workdir;
    ws.fail_reason = id_err.code != TROUPE_OK    ? id_err.msg
                     : gpu_err.code != TROUPE_OK ? gpu_err.msg
                     : nsys.fail_reason[0]       ? nsys.fail_reason
                                                 : NULL;
    ws.lease_path = tr_node_lease_file(a, lease, sizeof(lease)) ? lease : NULL;
    if (tr_launcher_start(a->launcher, &ws, &err) != TROUPE_OK) {
        TR_LOG(TR_LOG_ERR, "cannot start worker=%s: %s", wa->name, err.msg);
        if (err.code != TROUPE_ALREADY_EXISTS) { /* no record holds its ids (an existing one keeps them) */
            remove_credential(a, wa->job_id, wa->attempt, wa->name);
            tr_ids_release(a->ids, wa->job_id, wa->name, wa->attempt);
        }
    } else {
        TR_LOG(TR_LOG_INFO, "started worker=%s attempt=%u job=%llu gpus=%zu", wa->name, wa->attempt,
               (unsigned long long)wa->job_id, wa->n_gpus);
    }
out:
    for (size_t i = 0; owned != NULL && i < ne; i++) {
        free(owned[i]);
    }
    tr_node_nsys_free(&nsys);
    free(owned);
    free(argv);
    free(env);
}

/* apply makes the running workers match the newest set. */
static void apply(tr_node_agent *a)
{
    Troupe__V1__NodeSyncReply *set;
    tr_err err;

    pthread_mutex_lock(&a->mu);
    set = a->incoming;
    a->incoming = NULL;
    pthread_mutex_unlock(&a->mu);
    if (set == NULL) {
        return;
    }
    for (size_t i = 0; i < set->n_workers; i++) {
        if (tr_launcher_find(a->launcher, set->workers[i]->name, set->workers[i]->attempt) < 0) {
            start_one(a, set, set->workers[i]);
        }
    }
    for (size_t i = 0; i < tr_launcher_count(a->launcher); i++) {
        tr_worker_status st;
        if (tr_launcher_get(a->launcher, i, &st) != TROUPE_OK || assigned(set, st.name, st.attempt)) {
            continue;
        }
        if (st.phase == TR_WORKER_RUNNING) {
            TR_LOG(TR_LOG_INFO, "stopping worker=%s attempt=%u (no longer assigned)", st.name, st.attempt);
            tr_launcher_stop(a->launcher, st.name, st.attempt, &err);
        }
    }
    if (a->applied != NULL) {
        troupe__v1__node_sync_reply__free_unpacked(a->applied, NULL);
    }
    a->applied = set;
    pthread_mutex_lock(&a->mu);
    a->applied_version = set->version;
    memset(a->gpu_busy, 0, sizeof(a->gpu_busy)); /* for the heartbeat's simulated GPU figures */
    for (size_t i = 0; i < set->n_workers; i++) {
        for (size_t k = 0; k < set->workers[i]->n_gpus; k++) {
            if (set->workers[i]->gpus[k] < TR_MAX_GPUS) {
                a->gpu_busy[set->workers[i]->gpus[k]] = 1;
            }
        }
    }
    pthread_mutex_unlock(&a->mu);
    a->need_report = 1;
}

static tr_pending_log *pending_for(tr_node_agent *a, const tr_worker_status *st)
{
    for (tr_pending_log *p = a->logs; p != NULL; p = p->next) {
        if (p->job_id == st->job_id && p->attempt == st->attempt && strcmp(p->name, st->name) == 0) {
            return p;
        }
    }
    tr_pending_log *p = calloc(1, sizeof(*p));
    if (p != NULL) {
        p->job_id = st->job_id;
        p->attempt = st->attempt;
        tr_strlcpy(p->name, st->name, sizeof(p->name));
        p->next = a->logs;
        a->logs = p;
    }
    return p;
}

static int phase_ended(tr_worker_phase ph)
{
    return ph != TR_WORKER_RUNNING && ph != TR_WORKER_STOPPING;
}

/* collect_output moves new log output of worker i into its pending buffer,
 * taking at most *budget bytes (and LOG_BATCH per worker); it marks the
 * buffer drained once a read of an ended worker's log comes back short.
 * st was taken before the read, so an ended worker wrote nothing after it. */
static void collect_output(tr_node_agent *a, size_t i, const tr_worker_status *st, size_t *budget)
{
    tr_pending_log *p = pending_for(a, st);
    tr_err err;

    while (p != NULL && !p->drained && p->len<LOG_BATCH && * budget> 0) {
        size_t room = LOG_BATCH - p->len < *budget ? LOG_BATCH - p->len : *budget;
        char *buf = NULL, *grown = realloc(p->buf, p->len + room);
        size_t len = 0;
        if (grown == NULL) {
            return; /* room first, so a read's bytes always have a place */
        }
        p->buf = grown;
        if (p->len == 0) {
            p->off = tr_launcher_log_offset(a->launcher, i);
        }
        if (tr_launcher_read_log(a->launcher, i, room, &buf, &len, &err) != TROUPE_OK) {
            TR_LOG(TR_LOG_WARNING, "worker=%s: log not read, will retry: %s", st->name, err.msg);
            return;
        }
        if (len > 0) {
            memcpy(p->buf + p->len, buf, len);
        }
        p->len += len;
        *budget -= len;
        free(buf);
        if (len < room) {
            p->drained = phase_ended(st->phase);
            return;
        }
    }
}

static Troupe__V1__WorkerState report_state(tr_worker_phase ph)
{
    switch (ph) {
    case TR_WORKER_EXITED: return TROUPE__V1__WORKER_STATE__WORKER_EXITED;
    case TR_WORKER_FAILED_TO_START: return TROUPE__V1__WORKER_STATE__WORKER_FAILED_TO_START;
    default: return TROUPE__V1__WORKER_STATE__WORKER_RUNNING;
    }
}

/* drop_drained frees st's output queue if the worker's log was read to the
 * end and delivered; returns 1 then (or when it has no queue at all). */
static int drop_drained(tr_node_agent *a, const tr_worker_status *st)
{
    for (tr_pending_log **pp = &a->logs; *pp != NULL; pp = &(*pp)->next) {
        tr_pending_log *p = *pp;
        if (p->job_id == st->job_id && p->attempt == st->attempt && strcmp(p->name, st->name) == 0) {
            if (!p->drained || p->len > 0) {
                return 0;
            }
            *pp = p->next;
            free(p->buf);
            free(p);
            return 1;
        }
    }
    return 1;
}

static void forget_settled(tr_node_agent *a)
{
    tr_err err;
    for (size_t i = tr_launcher_count(a->launcher); i-- > 0;) {
        tr_worker_status st;
        if (tr_launcher_get(a->launcher, i, &st) != TROUPE_OK || st.phase == TR_WORKER_RUNNING ||
            st.phase == TR_WORKER_STOPPING || assigned(a->applied, st.name, st.attempt)) {
            continue;
        }
        /* Reported and no longer wanted: forget it once the head has every
         * byte of its output (its queue drained and delivered). */
        if (!drop_drained(a, &st)) {
            continue;
        }
        /* A settled worker's credential no longer works anyway; its ids go
         * back once nothing of it runs (it has been reaped). */
        remove_credential(a, st.job_id, st.attempt, st.name);
        tr_ids_release(a->ids, st.job_id, st.name, st.attempt);
        tr_launcher_forget(a->launcher, st.name, st.attempt, &err);
    }
}

/* report_deadline keeps a report from outlasting the lease, so the main loop
 * is back to heartbeats (and notices a lapse) in time. */
static uint32_t report_deadline(tr_node_agent *a)
{
    int64_t left = tr_node_lease_left(a);
    return left >= 3000 ? 3000u : left > 50 ? (uint32_t)left : 50u;
}

/* report sends every worker's state and new output; on success the queued
 * output is dropped and settled workers are forgotten. */
static int report(tr_node_agent *a)
{
    Troupe__V1__NodeSyncRequest req = TROUPE__V1__NODE_SYNC_REQUEST__INIT;
    Troupe__V1__NodeSyncReply *rep = NULL;
    size_t n = tr_launcher_count(a->launcher);
    Troupe__V1__WorkerReport *r = calloc(n + 1, sizeof(*r));
    Troupe__V1__WorkerReport **rp = calloc(n + 1, sizeof(*rp));
    tr_pending_log **used = calloc(n + 1, sizeof(*used));
    size_t budget = REPORT_LOG_MAX;
    tr_err err;
    int64_t sent;
    int rv = TROUPE_RESOURCE_EXHAUSTED;

    if (r == NULL || rp == NULL || used == NULL) {
        goto out;
    }
    for (const tr_pending_log *p = a->logs; p != NULL; p = p->next) {
        budget = p->len < budget ? budget - p->len : 0; /* queued from an undelivered report */
    }
    a->more_output = 0;
    for (size_t i = 0; i < n; i++) {
        tr_worker_status st;
        tr_pending_log *p;
        if (tr_launcher_get(a->launcher, i, &st) != TROUPE_OK) {
            continue;
        }
        collect_output(a, i, &st, &budget);
        p = pending_for(a, &st);
        troupe__v1__worker_report__init(&r[req.n_reports]);
        r[req.n_reports].job_id = st.job_id;
        r[req.n_reports].name = (char *)st.name;
        r[req.n_reports].attempt = st.attempt;
        r[req.n_reports].state = report_state(st.phase);
        if (phase_ended(st.phase) && (p == NULL || !p->drained)) {
            /* Its exit is told with its last bytes: the head must not end
             * the job (and `logs -f` must not stop) before the tail came. */
            r[req.n_reports].state = TROUPE__V1__WORKER_STATE__WORKER_RUNNING;
            a->more_output = 1;
        }
        a->more_output |= p != NULL && p->len >= LOG_BATCH;
        r[req.n_reports].exit_code = st.exit_code;
        r[req.n_reports].signal = st.signal;
        r[req.n_reports].pid = (uint32_t)st.pid;
        r[req.n_reports].message = (char *)(st.message ? st.message : "");
        r[req.n_reports].paused = tr_launcher_paused(a->launcher, i);
        r[req.n_reports].nsys_report = (char *)(st.report ? st.report : "");
        used[req.n_reports] = p;
        if (used[req.n_reports] != NULL) {
            r[req.n_reports].log.data = (uint8_t *)used[req.n_reports]->buf;
            r[req.n_reports].log.len = used[req.n_reports]->len;
            r[req.n_reports].log_offset_set = 1;
            r[req.n_reports].log_offset = used[req.n_reports]->off;
        }
        rp[req.n_reports] = &r[req.n_reports];
        req.n_reports++;
    }
    req.reports = rp;
    req.node_id = tr_node_id(a);
    /* applied_version counts sets of sync_node_id. The heartbeat thread may
     * have registered the agent as a new node since this step compared the
     * ids: then nothing of the new node is applied yet, and the old node's
     * version (as high as the new node's first placement) would make the
     * head take those workers for lost. */
    pthread_mutex_lock(&a->mu);
    req.version = req.node_id == a->sync_node_id ? a->applied_version : 0;
    pthread_mutex_unlock(&a->mu);
    req.wait_ms = 0;
    req.common_parts = 1;
    req.ack_only = 1; /* the set comes by the long poll */
    sent = tr_now_ms();
    rv = tr_rpc_client_call(a->rpc, "troupe.v1.Head/NodeSync", &req.base,
                            &troupe__v1__node_sync_reply__descriptor, (ProtobufCMessage **)&rep,
                            report_deadline(a), 0, &err);
    if (rv == TROUPE_OK) {
        tr_node_lease_renew(a, sent);
        for (size_t i = 0; i < req.n_reports; i++) {
            if (used[i] != NULL) {
                free(used[i]->buf);
                used[i]->buf = NULL;
                used[i]->off += used[i]->len;
                used[i]->len = 0;
            }
        }
        troupe__v1__node_sync_reply__free_unpacked(rep, NULL);
        forget_settled(a);
    } else {
        TR_LOG(TR_LOG_DEBUG, "report not delivered, will retry: %s", err.msg);
    }
out:
    free(r);
    free(rp);
    free(used);
    return rv;
}

size_t tr_node_running_workers(tr_node_agent *a)
{
    size_t n = 0;
    for (size_t i = 0; a->launcher != NULL && i < tr_launcher_count(a->launcher); i++) {
        tr_worker_status st;
        n += tr_launcher_get(a->launcher, i, &st) == TROUPE_OK &&
             (st.phase == TR_WORKER_RUNNING || st.phase == TR_WORKER_STOPPING);
    }
    return n;
}

static int any_running(tr_node_agent *a)
{
    return tr_node_running_workers(a) > 0;
}

void tr_node_workers_step(tr_node_agent *a)
{
    int64_t now = tr_now_ms();
    uint64_t node_id = tr_node_id(a);
    size_t running = tr_node_running_workers(a);
    int64_t every;
    int renewed;

    pthread_mutex_lock(&a->id_mu);
    a->running_now = running;
    pthread_mutex_unlock(&a->id_mu);
    pthread_mutex_lock(&a->mu);
    if (a->sync_node_id != node_id) {
        /* Registered again as a new node: its assignment versions start
         * afresh. Keeping the old node's (higher) version would tell the head
         * this node applied sets it never saw, and the head would take the
         * first worker placed here for lost. */
        a->applied_version = 0;
        if (a->incoming != NULL) {
            troupe__v1__node_sync_reply__free_unpacked(a->incoming, NULL);
            a->incoming = NULL;
        }
        a->need_report = 1;
    }
    renewed = a->sync_node_id != node_id;
    a->sync_node_id = node_id;
    pthread_mutex_unlock(&a->mu);
    if (renewed) {
        /* The sync thread's poll asks about the old node and would hold the
         * new node's first work back until the head lets it go (up to
         * TR_NODE_SYNC_WAIT_MS after a silent cut): end it so that it asks
         * again. Only the sync thread has a NodeSync in flight here: reports
         * are sent from this thread, below. */
        tr_rpc_client_cancel(a->rpc, "troupe.v1.Head/NodeSync");
    }
    apply(a);
    if (tr_launcher_poll(a->launcher) > 0) {
        a->need_report = 1;
    }
    every = any_running(a) ? 250 : 2000;
    if (a->need_report || now - a->last_report >= every) {
        int rv = report(a);
        if (rv == TROUPE_OK) {
            a->need_report = a->more_output; /* more output waiting: next step */
        } else if (rv == TROUPE_RESOURCE_EXHAUSTED) {
            /* The head holds all the output it can until its disk has room:
             * again after the period, not on every step. */
            a->need_report = 0;
        }
        a->last_report = now;
    }
}

void tr_node_workers_stop(tr_node_agent *a)
{
    int64_t until = tr_now_ms() + a->cfg.stop_grace_ms + 2000;
    tr_err err;

    if (a->launcher == NULL) {
        return;
    }
    for (size_t i = 0; i < tr_launcher_count(a->launcher); i++) {
        tr_worker_status st;
        if (tr_launcher_get(a->launcher, i, &st) == TROUPE_OK && st.phase == TR_WORKER_RUNNING) {
            tr_launcher_stop(a->launcher, st.name, st.attempt, &err);
        }
    }
    while (any_running(a) && tr_now_ms() < until) {
        tr_launcher_poll(a->launcher);
        tr_sleep_ms(20);
    }
    tr_launcher_poll(a->launcher);
    /* Best effort: tell the head how they ended, with all of their output. */
    while (report(a) == TROUPE_OK && a->more_output && tr_now_ms() < until + 5000) {
    }
    if (a->restarting != NULL && *a->restarting) {
        tr_node_deregister(a, "troupe-node stopped for a restart (SIGUSR2)", 1);
    } else {
        tr_node_deregister(a, "troupe-node stopped (SIGTERM or SIGINT)", 0);
    }
    tr_rpc_client_shutdown(a->rpc);
    if (a->sync_started) {
        pthread_join(a->sync_thread, NULL);
    }
    tr_launcher_close(a->launcher);
    a->launcher = NULL;
    if (a->incoming != NULL) {
        troupe__v1__node_sync_reply__free_unpacked(a->incoming, NULL);
    }
    if (a->applied != NULL) {
        troupe__v1__node_sync_reply__free_unpacked(a->applied, NULL);
    }
    while (a->logs != NULL) {
        tr_pending_log *p = a->logs;
        a->logs = p->next;
        free(p->buf);
        free(p);
    }
    pthread_mutex_destroy(&a->mu);
}
