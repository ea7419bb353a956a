/* head.c - troupe-head's configuration table, start-up, liveness reaper and
 * shutdown. */
#include "head.h"
#include "shutdown.h"
#include "auth.h"
#include "bgw.h"
#include "jobs.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "safefile.h"
#include "util.h"

#define F(x) offsetof(tr_head_config, x)
const tr_cfg_desc tr_head_config_table[] = {
    {"listen", TR_CFG_STRING, F(listen), "tcp://127.0.0.1:7770", TR_CFG_UNBOUNDED, TR_CFG_URL,
     "RPC address: tcp://HOST:PORT or ipc:///PATH"},
    {"state_dir", TR_CFG_STRING, F(state_dir), NULL, TR_CFG_UNBOUNDED, TR_CFG_REQUIRED,
     "directory for head.db (SQLite, WAL); give --state-dir"},
    {"token", TR_CFG_STRING, F(token), NULL, TR_CFG_UNBOUNDED, TR_CFG_SENSITIVE,
     "admin credential (TROUPE_TOKEN; prefer token_file); unset = no auth"},
    {"token_file", TR_CFG_STRING, F(token_file), NULL, TR_CFG_UNBOUNDED, 0,
     "file holding the admin credential (mode 0600); used when token is unset"},
    {"heartbeat_ms", TR_CFG_INT, F(heartbeat_ms), "500", 10, 600000, 0,
     "heartbeat period the agents are told to use"},
    {"suspect_after", TR_CFG_INT, F(suspect_after), "2", 1, 1000, 0, "missed heartbeats before SUSPECT"},
    {"dead_after", TR_CFG_INT, F(dead_after), "8", 2, 10000, 0,
     "missed heartbeats before DEAD (final); the default 8 x 500 ms finds a silent network cut in 4 s"},
    {"lease_ms", TR_CFG_INT, F(lease_ms), "0", 0, 6000000, 0,
     "agents kill their workers after this long without an answered heartbeat; at least 400 ms below the "
     "DEAD timeout (heartbeat_ms x dead_after); 0 = that timeout less a quarter (at least 2 heartbeats, 400 ms)"},
    {"max_heartbeats_per_s", TR_CFG_INT, F(max_heartbeats_per_s), "10000", 0, 100000000, 0,
     "heartbeats a second the head asks of all agents together: beyond heartbeat_ms x this many agents the "
     "period told grows (at most to a quarter of the DEAD timeout and a third of the lease, which do not "
     "change); 0 = always heartbeat_ms"},
    {"disconnect_ms", TR_CFG_INT, F(disconnect_ms), "1000", 0, 600000, 0,
     "an agent whose connection closed (its process died) and that did not reconnect within this is DEAD"},
    {"node_sync_max_ms", TR_CFG_INT, F(node_sync_max_ms), "60000", 100, 60000, 0,
     "longest the head holds an agent's wait for new work before answering it with the current set (the agent "
     "asks again at once); lower it only to see sooner that agents are told nothing unsaved (tests)"},
    {"max_frame_bytes", TR_CFG_INT, F(max_frame_bytes), "4194304", 1024, 1073741824, 0,
     "largest RPC frame accepted; larger frames are dropped"},
    {"contexts", TR_CFG_INT, F(contexts), "64", 1, 4096, 0, "concurrent RPC contexts"},
    {"rpc_threads", TR_CFG_INT, F(rpc_threads), "4", 2, 256, 0,
     "threads that run RPC handlers (nng's own threads only hand requests over); one is kept for Ping, so it "
     "is answered while the others wait on the head's state"},
    {"rpc_queue", TR_CFG_INT, F(rpc_queue), "64", 1, 65536, 0,
     "requests that may wait for a busy handler thread; one more is answered UNAVAILABLE at once (clients "
     "retry idempotent calls with back-off) instead of waiting in the socket until its client gives up. At "
     "or above contexts nothing is refused (at most contexts requests are received at once): 10,000 agents' "
     "heartbeats come in bursts, and a refused heartbeat is a missed one"},
    {"max_connections", TR_CFG_INT, F(max_connections), "16384", 1, 1000000, 0,
     "open connections at most (lowered to fit the descriptor limit less fd_reserve); at the cap a new "
     "connection displaces the oldest that never authenticated (without a token: the one idle longest), or is "
     "refused (logged)"},
    {"fd_reserve", TR_CFG_INT, F(fd_reserve), "128", 16, 65536, 0,
     "descriptors kept for the head's own files (state store, logs) that connections may not take"},
    {"inflight_budget_bytes", TR_CFG_INT, F(inflight_budget_bytes), "67108864", 65536, 68719476736LL, 0,
     "frame bytes unauthenticated connections may hold together, whatever their number or order: with many "
     "of them the largest frame accepted drops toward 64 KiB (a larger one closes its connection), and past "
     "the budget the oldest idle one is closed to admit a new one (at most this / 64 KiB of them)"},
    {"preauth_timeout_ms", TR_CFG_INT, F(preauth_timeout_ms), "10000", 100, 3600000, 0,
     "a connection that made no authenticated call this long after opening is closed"},
    {"tls_cert", TR_CFG_STRING, F(tls_cert), NULL, TR_CFG_UNBOUNDED, 0,
     "PEM certificate (chain) the head shows on a tls+tcp:// listen address; its names (SANs) must be the ones "
     "clients dial"},
    {"tls_key", TR_CFG_STRING, F(tls_key), NULL, TR_CFG_UNBOUNDED, 0, "PEM private key of tls_cert (mode 0600)"},
    {"tls_client_ca", TR_CFG_STRING, F(tls_client_ca), NULL, TR_CFG_UNBOUNDED, 0,
     "PEM CA that signs client certificates (tls_client_auth)"},
    {"tls_client_auth", TR_CFG_STRING, F(tls_client_auth), "none", TR_CFG_UNBOUNDED, 0,
     "none | nodes (agents must show a certificate signed by tls_client_ca; the CLI and workers need none) | "
     "all (every client must)"},
    {"idle_timeout_ms", TR_CFG_INT, F(idle_timeout_ms), "300000", 100, 86400000, 0,
     "an authenticated connection with nothing in flight this long is closed (clients reconnect)"},
    {"sync_full", TR_CFG_BOOL, F(sync_full), "true", TR_CFG_UNBOUNDED, 0,
     "fsync every commit (survives power loss); false survives only process crashes"},
    {"log_level", TR_CFG_STRING, F(log_level), "info", TR_CFG_UNBOUNDED, 0, "err|warning|notice|info|debug"},
    {"advertise", TR_CFG_STRING, F(advertise), NULL, TR_CFG_UNBOUNDED, TR_CFG_URL,
     "URL workers use to reach the head (TROUPE_HEAD in their environment); default: listen"},
    {"master_port_base", TR_CFG_INT, F(master_port_base), "29500", 1024, 65000, 0,
     "first port of the MASTER_PORT band (one port per running worker group on its rank 0's host)"},
    {"master_port_count", TR_CFG_INT, F(master_port_count), "500", 1, 20000, 0,
     "size of the MASTER_PORT band, per host; a group waits PENDING when its host has none free"},
    {"restart_grace_ms", TR_CFG_INT, F(restart_grace_ms), "60000", 0, 86400000, 0,
     "after the head starts, or after a node leaves or dies (an agent restarted), a PENDING job that no "
     "alive or suspect node could hold waits this long for agents to register (again) before it FAILS"},
    {"restart_backoff_ms", TR_CFG_INT, F(restart_backoff_ms), "1000", 0, 3600000, 0,
     "delay before a failed worker group restarts; doubles with each failure in a row (0 = restart at once)"},
    {"restart_backoff_max_ms", TR_CFG_INT, F(restart_backoff_max_ms), "300000", 0, 86400000, 0,
     "cap of that delay; an attempt that ran twice this long starts the back-off over"},
    {"shutdown_timeout_ms", TR_CFG_INT, F(shutdown_timeout_ms), "15000", 100, 3600000, 0,
     "after SIGTERM, exit (status 1, logged) if stopping takes longer; nothing acknowledged is lost"},
    {"max_job_log_bytes", TR_CFG_INT, F(max_job_log_bytes), "67108864", 4096, 1099511627776LL, 0,
     "output the head keeps per job: its start and its last bytes (a quarter, at most 1 MiB), marker lines "
     "where it was cut"},
    {"max_log_memory_bytes", TR_CFG_INT, F(max_log_memory_bytes), "16777216", 1048576, 1099511627776LL, 0,
     "output the head holds in memory before it is written (all jobs; a full state dir): past it agents keep "
     "their workers' output and send it again once the head has written what it holds"},
    {"metrics_max_bytes", TR_CFG_INT, F(metrics_max_bytes), "1073741824", 65536, 1099511627776LL, 0,
     "size bound of metrics.db (its WAL adds 1/16, more while readers hold it): past it new points are refused RESOURCE_EXHAUSTED "
     "and workers keep them (metrics_keep bounds each job's points)"},
    {"traces_max_bytes", TR_CFG_INT, F(traces_max_bytes), "1073741824", 65536, 1099511627776LL, 0,
     "size bound of traces.db (its WAL adds 1/16, more while readers hold it): past it new spans are refused RESOURCE_EXHAUSTED"},
    {"metrics_dir", TR_CFG_STRING, F(metrics_dir), NULL, TR_CFG_UNBOUNDED, 0,
     "directory of metrics.db (another disk keeps a metrics flood off the state); default: state_dir"},
    {"traces_dir", TR_CFG_STRING, F(traces_dir), NULL, TR_CFG_UNBOUNDED, 0,
     "directory of traces.db; default: state_dir"},
    {"min_free_bytes", TR_CFG_INT, F(min_free_bytes), "1048576", 0, 1099511627776LL, 0,
     "new jobs are refused (RESOURCE_EXHAUSTED, naming the disk and the stores' sizes) while the disk of the "
     "state dir, metrics_dir or traces_dir has less free than this; 0 = only when a write fails"},
    {"keep_jobs", TR_CFG_INT, F(keep_jobs), "10000", 1, 100000000, 0,
     "finished jobs kept; past it the oldest are deleted with their events and logs"},
    {"keep_days", TR_CFG_INT, F(keep_days), "30", 0, 36500, 0,
     "finished jobs older than this many days are deleted; 0 = kept regardless of age"},
    {"metrics_keep", TR_CFG_INT, F(metrics_keep), "1000000", 1, 1000000000, 0,
     "metric points kept per job (troupe metrics); past it the oldest are deleted"},
    {"store_max_keys", TR_CFG_INT, F(store_max_keys), "100000", 1, 100000000, 0,
     "keys a job's workers may hold in the head's store (troupe_worker_store_*, troupe.torch) over all its "
     "communicators; a set past it is refused RESOURCE_EXHAUSTED"},
    {"store_max_bytes", TR_CFG_INT, F(store_max_bytes), "67108864", 1024, 68719476736LL, 0,
     "bytes (keys and values) a job's store may hold in the head's memory; a set past it is refused "
     "RESOURCE_EXHAUSTED"},
    {"ingest_nice", TR_CFG_INT, F(ingest_nice), "0", 0, 19, 0,
     "nice added to the threads that write and acknowledge metrics and traces (Linux), so that they yield "
     "the CPU to the RPC path (Ping, status, submit); 0 = the head's own. On a head short of CPU, 19 keeps "
     "RPC latency near idle but delays metric acks and troupe metrics -f by ~100 ms"},
    {"health_stall_min_ms", TR_CFG_INT, F(health_stall_min_ms), "60000", 100, 604800000, 0,
     "a RUNNING job whose ranks reported no step for max(this, health_stall_factor x the group's median step "
     "time) is STALLED (a job's health.stall_after replaces both)"},
    {"health_stall_factor", TR_CFG_DOUBLE, F(health_stall_factor), "10", 1, 1000, 0,
     "times the group's median step time after which a silent rank is stalled (at least health_stall_min_ms)"},
    {"health_on_stall", TR_CFG_STRING, F(health_on_stall), "warn", TR_CFG_UNBOUNDED, 0,
     "warn: show a stalled job as STALLED; fail: fail its stalled group (restart rules apply); health.on_stall "
     "in a job overrides"},
    {"health_straggler_factor", TR_CFG_DOUBLE, F(health_straggler_factor), "1.3", 1.0001, 100, 0,
     "a rank whose median step time over the window is above this x its group's median is a straggler"},
    {"health_straggler_window", TR_CFG_INT, F(health_straggler_window), "10", 2, 512, 0,
     "steps per rank compared for stragglers"},
    {"health_memory_window", TR_CFG_INT, F(health_memory_window), "20", 2, 512, 0,
     "steps in the per-worker linear fit of allocated GPU memory"},
    {"health_memory_slope_mb", TR_CFG_DOUBLE, F(health_memory_slope_mb), "1", 0.000001, 1000000, 0,
     "allocated GPU memory growing faster than this many MiB per step (over the window) warns"},
    {"health_memory_near", TR_CFG_DOUBLE, F(health_memory_near), "0.95", 0.01, 1, 0,
     "allocated GPU memory at this fraction of the GPU's capacity warns"},
    {"health_tick_ms", TR_CFG_INT, F(health_tick_ms), "500", 20, 60000, 0,
     "how often the head judges the health of running jobs"},
    {"http", TR_CFG_STRING, F(http), "127.0.0.1:8470", TR_CFG_UNBOUNDED, 0,
     "HTTP address HOST:PORT for /metrics, /api/ and the dashboard, or off; when the default port is taken "
     "a free one is used (the log and troupe status say which)"},
    {"http_idle_ms", TR_CFG_INT, F(http_idle_ms), "15000", 100, 3600000, 0,
     "an HTTP connection that sent nothing for this long is closed (slow or stalled clients)"},
    {"http_max_conn_ms", TR_CFG_INT, F(http_max_conn_ms), "120000", 1000, 86400000, 0,
     "an HTTP connection open this long is closed (clients reconnect)"},
    {"http_max_conns", TR_CFG_INT, F(http_max_conns), "256", 1, 1000, 0,
     "HTTP connections kept; past it the most idle are closed"},
    {NULL, 0, 0, NULL, 0, 0, 0, NULL},
};
#undef F

int tr_head_tls_client_auth(const char *mode)
{
    if (mode != NULL && strcmp(mode, "nodes") == 0) {
        return TR_TLS_CLIENT_NODES;
    }
    if (mode != NULL && strcmp(mode, "all") == 0) {
        return TR_TLS_CLIENT_ALL;
    }
    return (mode == NULL || strcmp(mode, "none") == 0) ? TR_TLS_CLIENT_NONE : -1;
}

int tr_head_check_tls(const tr_head_config *cfg, tr_err *err)
{
    int mode = tr_head_tls_client_auth(cfg->tls_client_auth);
    int tls = strncmp(cfg->listen, "tls+tcp", 7) == 0;

    if (mode < 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "tls_client_auth '%s': use none, nodes or all",
                          cfg->tls_client_auth);
    }
    if (tls && (cfg->tls_cert == NULL || cfg->tls_key == NULL || !cfg->tls_cert[0] || !cfg->tls_key[0])) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "listen %s: a tls+tcp:// listener needs tls_cert and tls_key (scripts/make-test-ca.sh "
                          "makes a test set)",
                          cfg->listen);
    }
    if (!tls && (cfg->tls_cert || cfg->tls_key || mode != TR_TLS_CLIENT_NONE)) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "tls_cert, tls_key and tls_client_auth need a tls+tcp:// listen address (listen is %s)",
                          cfg->listen);
    }
    if (mode != TR_TLS_CLIENT_NONE && (cfg->tls_client_ca == NULL || !cfg->tls_client_ca[0])) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "tls_client_auth %s needs tls_client_ca: the CA that signs the agents' certificates",
                          cfg->tls_client_auth);
    }
    return TROUPE_OK;
}

/* load_token takes the admin credential from token_file when token is unset,
 * and says when it came from a world-readable file. */
static int load_token(tr_head *h, tr_err *err)
{
    int warn = 0, rv;

    if ((h->cfg.token && h->cfg.token[0]) || !h->cfg.token_file || !h->cfg.token_file[0]) {
        return TROUPE_OK;
    }
    free(h->cfg.token);
    h->cfg.token = NULL;
    if ((rv = tr_secret_file_read(h->cfg.token_file, &h->cfg.token, &warn, err)) != TROUPE_OK) {
        return rv;
    }
    if (warn) {
        TR_LOG(TR_LOG_WARNING, "token_file %s is readable by group or others; chmod 600 it",
               h->cfg.token_file);
    }
    return TROUPE_OK;
}

int tr_head_add_service(tr_head *h, const tr_head_service *s, tr_err *err)
{
    if (h->n_svc == TR_HEAD_MAX_SERVICES) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "too many head services (%d)", TR_HEAD_MAX_SERVICES);
    }
    h->svc[h->n_svc++] = s;
    return TROUPE_OK;
}

/* build_methods joins the RPC layer's table and every service's into h->methods. */
static int build_methods(tr_head *h, tr_err *err)
{
    size_t n = 0, k = 0;

    for (const tr_rpc_method *m = h->core_methods; m != NULL && m->name != NULL; m++) {
        n++;
    }
    for (size_t i = 0; i < h->n_svc; i++) {
        for (const tr_rpc_method *m = h->svc[i]->methods; m != NULL && m->name != NULL; m++) {
            n++;
        }
    }
    if ((h->methods = calloc(n + 1, sizeof(*h->methods))) == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    for (const tr_rpc_method *m = h->core_methods; m != NULL && m->name != NULL; m++) {
        h->methods[k++] = *m;
    }
    for (size_t i = 0; i < h->n_svc; i++) {
        for (const tr_rpc_method *m = h->svc[i]->methods; m != NULL && m->name != NULL; m++) {
            h->methods[k++] = *m;
        }
    }
    return TROUPE_OK;
}

static int services_start(tr_head *h, tr_err *err)
{
    for (size_t i = 0; i < h->n_svc; i++) {
        int rv = h->svc[i]->start ? h->svc[i]->start(h, &h->svc_state[i], err) : TROUPE_OK;
        if (rv != TROUPE_OK) {
            tr_err_prefix(err, "%s", h->svc[i]->name);
            return rv;
        }
    }
    return TROUPE_OK;
}

static void services_stop(tr_head *h)
{
    for (size_t i = h->n_svc; i-- > 0;) {
        if (h->svc[i]->stop != NULL && h->svc_state[i] != NULL) {
            h->svc[i]->stop(h, h->svc_state[i]);
        }
        h->svc_state[i] = NULL;
    }
    free(h->methods);
    h->methods = NULL;
}

/* The reaper (a background worker, bgw.h) ticks a few times per heartbeat
 * period under h->mu: it moves silent nodes along ALIVE -> SUSPECT -> DEAD
 * and closed connections to SUSPECT (liveness.h, node_life.c), then the
 * jobs' waits, restarts and retention. A closed connection wakes it
 * (tr_head_pipe_closed). */
static int64_t reaper_period_ms(const tr_head *h)
{
    return h->live.heartbeat_ms / 4 > 5 ? h->live.heartbeat_ms / 4 : 5;
}

static int64_t reaper_tick(void *arg, int64_t now)
{
    tr_head *h = arg;

    tr_head_nodes_check_pipes(h);
    tr_head_nodes_reap(h);
    tr_jobs_tick(h);
    tr_jobs_retain(h);
    return now + reaper_period_ms(h);
}

/* What the committer saves (commit.h), in this order: a batch's jobs, then
 * its nodes. */
static const tr_commit_source *const commit_sources[] = {&tr_jobs_save_source, &tr_head_nodes_source};

int tr_head_start(tr_head *h, tr_err *err)
{
    tr_rpc_server_opts so = {0};
    char epoch[32];
    int rv;

    pthread_mutex_init(&h->mu, NULL);
    pthread_mutex_init(&h->pipe_mu, NULL);
    h->live.heartbeat_ms = h->cfg.heartbeat_ms;
    h->live.suspect_after = h->cfg.suspect_after;
    h->live.dead_after = h->cfg.dead_after;
    h->live.lease_ms = h->cfg.lease_ms;
    h->live.disconnect_ms = h->cfg.disconnect_ms;
    h->live.max_beats_per_s = h->cfg.max_heartbeats_per_s;
    if ((rv = tr_head_check_liveness(&h->cfg, err)) != TROUPE_OK) {
        return rv;
    }
    h->started_ms = tr_wall_ms();
    h->grace_until = tr_now_ms() + h->cfg.restart_grace_ms;
    if ((rv = load_token(h, err)) != TROUPE_OK || (rv = tr_dir_private(h->cfg.state_dir, err)) != TROUPE_OK) {
        return rv;
    }
    if ((rv = tr_head_lock_state_dir(h, err)) != TROUPE_OK) {
        return rv;
    }
    if ((rv = tr_store_open(h->cfg.state_dir, h->cfg.sync_full, &h->store, err)) != TROUPE_OK) {
        tr_head_unlock_state_dir(h);
        return rv;
    }
    snprintf(epoch, sizeof(epoch), "%lld", (long long)h->started_ms);
    if (tr_store_meta_set(h->store, "started_ms", epoch, err) != TROUPE_OK) {
        /* A note for people reading the file, nothing reads it back: a head
         * on a full disk still starts, and its writer reports the store. */
        TR_LOG(TR_LOG_WARNING, "could not note the start in the state store: %s", err->msg);
    }
    if ((rv = tr_store_get_next_id(h->store, "nodes", &h->next_id[TR_ID_NODES], err)) != TROUPE_OK ||
        (rv = tr_store_get_next_id(h->store, "jobs", &h->next_id[TR_ID_JOBS], err)) != TROUPE_OK ||
        (rv = tr_head_commit_start(h, commit_sources, sizeof(commit_sources) / sizeof(commit_sources[0]), err)) !=
            TROUPE_OK || (rv = tr_joblog_start(h, err)) != TROUPE_OK) {
        goto fail;
    }
    if (h->cfg.token != NULL && h->cfg.token[0] != '\0' &&
        ((rv = tr_auth_open(h->cfg.state_dir, &h->auth, err)) != TROUPE_OK ||
         (rv = tr_auth_follow_jobs(h, err)) != TROUPE_OK)) {
        goto fail;
    }
    /* Recovery may already start jobs (and mark them for the writer). */
    pthread_mutex_lock(&h->mu);
    tr_head_ids_past_logs(h); /* the stored records are checked as they are recovered */
    rv = tr_head_nodes_recover(h, err);
    if (rv == TROUPE_OK) {
        rv = tr_jobs_init(h, err);
    }
    pthread_mutex_unlock(&h->mu);
    if (rv != TROUPE_OK || (rv = build_methods(h, err)) != TROUPE_OK || (rv = services_start(h, err)) != TROUPE_OK) {
        goto fail;
    }
    so.url = h->cfg.listen;
    so.token = h->cfg.token;
    so.auth = tr_head_authenticate;
    so.auth_user = h;
    so.max_frame = (size_t)h->cfg.max_frame_bytes;
    so.contexts = (int)h->cfg.contexts;
    so.threads = (int)h->cfg.rpc_threads;
    so.queue = (int)h->cfg.rpc_queue;
    so.max_connections = (int)h->cfg.max_connections;
    so.fd_reserve = (int)h->cfg.fd_reserve;
    so.inflight_budget = (size_t)h->cfg.inflight_budget_bytes;
    so.preauth_timeout_ms = (uint32_t)h->cfg.preauth_timeout_ms;
    so.idle_timeout_ms = (uint32_t)h->cfg.idle_timeout_ms;
    so.tls.cert_file = h->cfg.tls_cert;
    so.tls.key_file = h->cfg.tls_key;
    so.tls.ca_file = h->cfg.tls_client_ca;
    so.tls.client_auth = tr_head_tls_client_auth(h->cfg.tls_client_auth);
    so.methods = h->methods;
    so.user = h;
    so.on_pipe_closed = tr_head_pipe_closed;
    if ((rv = tr_rpc_server_start(&so, &h->srv, err)) != TROUPE_OK) {
        goto fail;
    }
    {
        tr_bgw_opts ro = {.name = "reaper", .mu = &h->mu, .tick = reaper_tick, .arg = h,
                          .max_wait_ms = reaper_period_ms(h)};
        tr_bgw *reaper = NULL;
        if ((rv = tr_bgw_start(&reaper, &ro, err)) != TROUPE_OK) {
            tr_rpc_server_stop(h->srv);
            h->srv = NULL;
            goto fail;
        }
        pthread_mutex_lock(&h->pipe_mu); /* what tr_head_pipe_closed wakes */
        h->reaper = reaper;
        pthread_mutex_unlock(&h->pipe_mu);
    }
    TR_LOG(TR_LOG_NOTICE,
           "troupe-head %s listening url=%s state_dir=%s auth=%s heartbeat_ms=%lld dead_ms=%lld lease_ms=%lld "
           "disconnect_ms=%lld max_heartbeats_per_s=%lld",
           TROUPE_VERSION, h->cfg.listen, h->cfg.state_dir, (h->cfg.token && h->cfg.token[0]) ? "token" : "none",
           (long long)h->cfg.heartbeat_ms, (long long)(h->cfg.heartbeat_ms * h->cfg.dead_after),
           (long long)tr_liveness_lease_ms(&h->live), (long long)h->cfg.disconnect_ms,
           (long long)h->cfg.max_heartbeats_per_s);
    return TROUPE_OK;
fail:
    services_stop(h);
    tr_joblog_stop(h);
    tr_head_commit_stop(h);
    tr_jobs_fini(h);
    tr_head_nodes_free(h);
    tr_store_close(h->store);
    h->store = NULL;
    tr_head_unlock_state_dir(h);
    tr_auth_close(h->auth);
    h->auth = NULL;
    return rv;
}

void tr_head_stop(tr_head *h)
{
    tr_bgw *reaper;

    tr_head_shutdown_step("stopping the reaper");
    pthread_mutex_lock(&h->pipe_mu); /* no connection-closed callback wakes it from now on */
    reaper = h->reaper;
    h->reaper = NULL;
    pthread_mutex_unlock(&h->pipe_mu);
    tr_bgw_stop(reaper);
    tr_head_shutdown_step("quiescing the job log readers");
    tr_joblog_quiesce(h); /* no log read holds a call the server is about to free */
    tr_head_shutdown_step("stopping the RPC server (nng_close of its sockets)");
    tr_rpc_server_stop(h->srv);
    h->srv = NULL;
    tr_head_shutdown_step("stopping the services (HTTP, metrics, traces, background workers)");
    services_stop(h);
    tr_head_shutdown_step("writing the job logs");
    tr_joblog_stop(h);      /* every log byte received reaches its file */
    tr_head_shutdown_step("saving the last changes");
    tr_head_commit_stop(h); /* everything changed so far reaches the disk */
    tr_head_shutdown_step("freeing the head's state");
    tr_jobs_fini(h);
    tr_head_nodes_free(h);
    tr_store_close(h->store);
    h->store = NULL;
    tr_head_unlock_state_dir(h);
    tr_auth_close(h->auth);
    h->auth = NULL;
    pthread_mutex_destroy(&h->mu);
    pthread_mutex_destroy(&h->pipe_mu);
}

int tr_head_check_liveness(const tr_head_config *c, tr_err *err)
{
    if (c->dead_after <= c->suspect_after) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "dead_after (%lld) must exceed suspect_after (%lld)",
                          (long long)c->dead_after, (long long)c->suspect_after);
    }
    if (c->lease_ms > 0 && c->lease_ms + TR_LEASE_MARGIN_MS > c->heartbeat_ms * c->dead_after) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "lease_ms (%lld) must be at least %d ms below the DEAD timeout heartbeat_ms x dead_after "
                          "(%lld ms), or an agent cut off could still run its workers when they are placed again",
                          (long long)c->lease_ms, TR_LEASE_MARGIN_MS, (long long)(c->heartbeat_ms * c->dead_after));
    }
    return TROUPE_OK;
}
