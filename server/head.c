/* head.c - troupe-head's configuration table, start-up, liveness reaper and
 * shutdown. */
#include "head.h"
#include "jobs.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "util.h"

#define F(x) offsetof(tr_head_config, x)
const tr_cfg_desc tr_head_config_table[] = {
    {"listen", TR_CFG_STRING, F(listen), "tcp://127.0.0.1:7770", TR_CFG_UNBOUNDED, 0,
     "RPC address: tcp://HOST:PORT or ipc:///PATH"},
    {"state_dir", TR_CFG_STRING, F(state_dir), NULL, TR_CFG_UNBOUNDED, TR_CFG_REQUIRED,
     "directory for head.db (SQLite, WAL); give --state-dir"},
    {"token", TR_CFG_STRING, F(token), NULL, TR_CFG_UNBOUNDED, TR_CFG_SENSITIVE,
     "shared secret every call must carry (TROUPE_TOKEN); unset = no auth"},
    {"heartbeat_ms", TR_CFG_INT, F(heartbeat_ms), "1000", 10, 600000, 0,
     "heartbeat period the agents are told to use"},
    {"suspect_after", TR_CFG_INT, F(suspect_after), "3", 1, 1000, 0, "missed heartbeats before SUSPECT"},
    {"dead_after", TR_CFG_INT, F(dead_after), "10", 2, 10000, 0, "missed heartbeats before DEAD (final)"},
    {"max_frame_bytes", TR_CFG_INT, F(max_frame_bytes), "4194304", 1024, 1073741824, 0,
     "largest RPC frame accepted; larger frames are dropped"},
    {"contexts", TR_CFG_INT, F(contexts), "64", 1, 4096, 0, "concurrent RPC contexts"},
    {"sync_full", TR_CFG_BOOL, F(sync_full), "true", TR_CFG_UNBOUNDED, 0,
     "fsync every commit (survives power loss); false survives only process crashes"},
    {"log_level", TR_CFG_STRING, F(log_level), "info", TR_CFG_UNBOUNDED, 0, "err|warning|notice|info|debug"},
    {"advertise", TR_CFG_STRING, F(advertise), NULL, TR_CFG_UNBOUNDED, 0,
     "URL workers use to reach the head (TROUPE_HEAD in their environment); default: listen"},
    {"master_port_base", TR_CFG_INT, F(master_port_base), "29500", 1024, 65000, 0,
     "first port of the MASTER_PORT band (one port per running worker group on its rank 0's host)"},
    {"master_port_count", TR_CFG_INT, F(master_port_count), "500", 1, 20000, 0,
     "size of the MASTER_PORT band, per host; a group waits PENDING when its host has none free"},
    {NULL, 0, 0, NULL, 0, 0, 0, NULL},
};
#undef F

static const tr_rpc_method head_methods[] = {
    {"troupe.v1.Head/Ping", tr_head_ping},
    {"troupe.v1.Head/RegisterNode", tr_head_register_node},
    {"troupe.v1.Head/Heartbeat", tr_head_heartbeat},
    {"troupe.v1.Head/ListNodes", tr_head_list_nodes},
    {"troupe.v1.Head/GetCluster", tr_head_get_cluster},
    {"troupe.v1.Head/SubmitJob", tr_head_submit_job},
    {"troupe.v1.Head/GetJob", tr_head_get_job},
    {"troupe.v1.Head/ListJobs", tr_head_list_jobs},
    {"troupe.v1.Head/StopJob", tr_head_stop_job},
    {"troupe.v1.Head/GetLogs", tr_head_get_logs},
    {"troupe.v1.Head/NodeSync", tr_head_node_sync},
    {"troupe.v1.Head/SubmitJobs", tr_head_submit_jobs},
    {"troupe.v1.Head/StopJobs", tr_head_stop_jobs},
    {NULL, NULL},
};

/* The reaper wakes a few times per heartbeat period and moves silent nodes
 * along ALIVE -> SUSPECT -> DEAD (liveness.h). */
static void *reaper_main(void *arg)
{
    tr_head *h = arg;
    int64_t tick = h->live.heartbeat_ms / 4 > 5 ? h->live.heartbeat_ms / 4 : 5;

    pthread_mutex_lock(&h->mu);
    while (!h->stopping) {
        struct timespec ts;
        tr_head_nodes_reap(h);
        tr_jobs_tick(h);
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += tick / 1000;
        ts.tv_nsec += (tick % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

int tr_head_start(tr_head *h, tr_err *err)
{
    tr_rpc_server_opts so = {0};
    char epoch[32];
    int rv;

    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    h->live.heartbeat_ms = h->cfg.heartbeat_ms;
    h->live.suspect_after = h->cfg.suspect_after;
    h->live.dead_after = h->cfg.dead_after;
    if (h->cfg.dead_after <= h->cfg.suspect_after) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "dead_after (%lld) must exceed suspect_after (%lld)",
                          (long long)h->cfg.dead_after, (long long)h->cfg.suspect_after);
    }
    h->started_ms = tr_wall_ms();
    if ((rv = tr_store_open(h->cfg.state_dir, h->cfg.sync_full, &h->store, err)) != TROUPE_OK) {
        return rv;
    }
    snprintf(epoch, sizeof(epoch), "%lld", (long long)h->started_ms);
    if ((rv = tr_store_meta_set(h->store, "started_ms", epoch, err)) != TROUPE_OK ||
        (rv = tr_store_get_next_id(h->store, "nodes", &h->next_id[TR_ID_NODES], err)) != TROUPE_OK ||
        (rv = tr_store_get_next_id(h->store, "jobs", &h->next_id[TR_ID_JOBS], err)) != TROUPE_OK ||
        (rv = tr_head_commit_start(h, err)) != TROUPE_OK) {
        goto fail;
    }
    /* Recovery may already start jobs (and mark them for the writer). */
    pthread_mutex_lock(&h->mu);
    rv = tr_head_nodes_recover(h, err);
    if (rv == TROUPE_OK) {
        rv = tr_jobs_init(h, err);
    }
    pthread_mutex_unlock(&h->mu);
    if (rv != TROUPE_OK) {
        goto fail;
    }
    so.url = h->cfg.listen;
    so.token = h->cfg.token;
    so.max_frame = (size_t)h->cfg.max_frame_bytes;
    so.contexts = (int)h->cfg.contexts;
    so.methods = head_methods;
    so.user = h;
    if ((rv = tr_rpc_server_start(&so, &h->srv, err)) != TROUPE_OK) {
        goto fail;
    }
    if (pthread_create(&h->reaper, NULL, reaper_main, h) != 0) {
        rv = tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot start the liveness thread");
        tr_rpc_server_stop(h->srv);
        goto fail;
    }
    TR_LOG(TR_LOG_NOTICE, "troupe-head %s listening url=%s state_dir=%s auth=%s heartbeat_ms=%lld",
           TROUPE_VERSION, h->cfg.listen, h->cfg.state_dir,
           (h->cfg.token && h->cfg.token[0]) ? "token" : "none", (long long)h->cfg.heartbeat_ms);
    return TROUPE_OK;
fail:
    tr_head_commit_stop(h);
    tr_jobs_fini(h);
    tr_head_nodes_free(h);
    tr_store_close(h->store);
    h->store = NULL;
    return rv;
}

void tr_head_stop(tr_head *h)
{
    pthread_mutex_lock(&h->mu);
    h->stopping = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->reaper, NULL);
    tr_rpc_server_stop(h->srv);
    h->srv = NULL;
    tr_head_commit_stop(h); /* everything changed so far reaches the disk */
    tr_jobs_fini(h);
    tr_head_nodes_free(h);
    tr_store_close(h->store);
    h->store = NULL;
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
}
