/* fuzz_head.c - libFuzzer target for troupe-head's request handlers.
 *
 * A real head runs inside the fuzzer (state in a fresh temp dir, listening on
 * an ipc:// socket in it), and each input is one request: its first byte picks a method of
 * the troupe.v1.Head service, the rest is the payload as a client would send
 * it. The handlers unpack and act on it exactly as for a remote caller, so
 * registrations, submits, syncs and stops pile up in the head's state across
 * inputs, as they would on a long-lived head facing a hostile client.
 *
 * Besides memory errors (ASan) and undefined behaviour (UBSan) in the head's
 * code (compiled into the fuzzer), it checks after every input:
 *   - the call ended with a status code in gRPC's range (a deferred call may
 *     end DEADLINE_EXCEEDED at its 300 ms deadline);
 *   - the head still answers Ping (no handler wedged it or its lock);
 *   - GetCluster's totals are consistent (free GPUs <= total GPUs). */
#define _XOPEN_SOURCE 700
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <ftw.h>
#include <string.h>
#include <unistd.h>

#include "handlers.h"
#include "head.h"
#include "kv.h"
#include "log.h"
#include "rpc.h"
#include "troupe/v1/troupe.pb-c.h"

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_head: property failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static tr_head head;
static tr_rpc_client *cli;
static char state_dir[] = "/tmp/troupe-fuzz-head-XXXXXX";

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* remove_state deletes the head's temp state dir when the fuzzer exits (the
 * head itself is left running: the process is ending). */
static void remove_state(void)
{
    nftw(state_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void start(void)
{
    char url[128];
    char *argv[] = {"fuzz_head", "--listen", url, "--state-dir", state_dir, "--sync-full", "false", NULL};
    tr_rpc_client_opts co = {0};
    tr_err err = {0};

    CHECK(mkdtemp(state_dir) != NULL, "mkdtemp");
    atexit(remove_state);
    snprintf(url, sizeof(url), "ipc://%s/head.sock", state_dir); /* the head takes tcp:// and ipc:// */
    tr_log_init("fuzz_head", TR_LOG_ERR);
    CHECK(tr_cfg_defaults(tr_head_config_table, &head.cfg, &err) == TROUPE_OK &&
              tr_cfg_apply_args(tr_head_config_table, &head.cfg, 7, argv, &err) == TROUPE_OK,
          "config: %s", err.msg);
    /* The job store's handlers too (the other services' are not here yet). */
    CHECK(tr_head_rpc_attach(&head, &err) == TROUPE_OK, "RPC layer: %s", err.msg);
    CHECK(tr_head_add_service(&head, &tr_kv_service, &err) == TROUPE_OK, "store service: %s", err.msg);
    CHECK(tr_head_start(&head, &err) == TROUPE_OK, "head: %s", err.msg);
    co.url = url;
    CHECK(tr_rpc_client_open(&co, &cli, &err) == TROUPE_OK, "client: %s", err.msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const ProtobufCServiceDescriptor *svc = &troupe__v1__head__descriptor;
    Troupe__V1__GetClusterRequest creq = TROUPE__V1__GET_CLUSTER_REQUEST__INIT;
    Troupe__V1__GetClusterReply *cluster = NULL;
    uint8_t *reply = NULL;
    size_t reply_len = 0;
    char method[160];
    tr_err err = {0};
    int rv;

    if (cli == NULL) {
        start();
    }
    if (size == 0) {
        return 0;
    }
    snprintf(method, sizeof(method), "%s/%s", svc->name, svc->methods[data[0] % svc->n_methods].name);
    rv = tr_rpc_client_call_raw(cli, method, data + 1, size - 1, &reply, &reply_len, 300, 0, &err);
    free(reply);
    CHECK(rv >= 0 && rv <= 16, "%s: status %d", method, rv);
    rv = tr_rpc_client_call_raw(cli, "troupe.v1.Head/Ping", NULL, 0, &reply, &reply_len, 5000, 0, &err);
    free(reply);
    CHECK(rv == TROUPE_OK, "after %s the head does not answer Ping: %s", method, err.msg);
    rv = tr_rpc_client_call(cli, "troupe.v1.Head/GetCluster", &creq.base, &troupe__v1__get_cluster_reply__descriptor,
                            (ProtobufCMessage **)&cluster, 5000, 0, &err);
    CHECK(rv == TROUPE_OK, "after %s GetCluster fails: %s", method, err.msg);
    CHECK(cluster->gpus_free <= cluster->gpus_total, "after %s: %u free of %u GPUs", method, cluster->gpus_free,
          cluster->gpus_total);
    protobuf_c_message_free_unpacked(&cluster->base, NULL);
    return 0;
}
