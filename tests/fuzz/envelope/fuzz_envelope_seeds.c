/* fuzz_envelope_seeds.c - writes the seed corpus for fuzz_envelope: one
 * well-formed Request per troupe.v1 method with a typical payload, plus a few
 * edge frames (unknown method, token, extreme ids, a truncated frame, junk).
 * Run at build time: fuzz_envelope_seeds DIR. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.h"
#include "troupe/v1/troupe.pb-c.h"

static const char *dir;
static int written;

static void write_seed(const char *name, const uint8_t *buf, size_t len)
{
    char path[1024];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    written++;
}

/* seed writes a Request for method carrying msg (NULL: empty payload). */
static void seed(const char *name, const char *method, const ProtobufCMessage *msg, const char *token,
                 uint64_t id, uint32_t timeout_ms)
{
    uint8_t *payload = NULL, *buf = NULL;
    size_t plen = 0, len = 0;
    tr_envelope env = {.method = method, .request_id = id, .timeout_ms = timeout_ms, .token = token};
    tr_err err;

    if (msg != NULL) {
        plen = protobuf_c_message_get_packed_size(msg);
        payload = malloc(plen ? plen : 1);
        protobuf_c_message_pack(msg, payload);
    }
    env.payload = payload;
    env.payload_len = plen;
    if (tr_envelope_encode_request(&env, &buf, &len, &err) != TROUPE_OK) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        exit(1);
    }
    write_seed(name, buf, len);
    if (len > 4) {
        char cut[256];
        snprintf(cut, sizeof(cut), "%s.truncated", name);
        write_seed(cut, buf, len - 3);
    }
    free(buf);
    free(payload);
}

int main(int argc, char **argv)
{
    Troupe__V1__PingRequest ping = TROUPE__V1__PING_REQUEST__INIT;
    Troupe__V1__RegisterNodeRequest reg = TROUPE__V1__REGISTER_NODE_REQUEST__INIT;
    Troupe__V1__Label l1 = TROUPE__V1__LABEL__INIT, l2 = TROUPE__V1__LABEL__INIT;
    Troupe__V1__Label *labels[] = {&l1, &l2};
    Troupe__V1__Gpu g0 = TROUPE__V1__GPU__INIT, g1 = TROUPE__V1__GPU__INIT;
    Troupe__V1__Gpu *gpus[] = {&g0, &g1};
    Troupe__V1__HeartbeatRequest hb = TROUPE__V1__HEARTBEAT_REQUEST__INIT;
    Troupe__V1__ListNodesRequest ls = TROUPE__V1__LIST_NODES_REQUEST__INIT;
    Troupe__V1__GetClusterRequest gc = TROUPE__V1__GET_CLUSTER_REQUEST__INIT;
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x0a, 0x80};

    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];

    ping.data.data = (uint8_t *)"hello";
    ping.data.len = 5;
    seed("ping", "troupe.v1.Head/Ping", &ping.base, "", 1, 30000);

    l1.key = "rack";
    l1.value = "r1";
    l2.key = "zone";
    l2.value = "eu-west";
    g0.index = 0;
    g0.model = "NVIDIA H200";
    g0.memory_bytes = 141000000000ull;
    g0.uuid = "GPU-sim-node-a-0";
    g0.simulated = 1;
    g1 = g0;
    g1.index = 1;
    g1.uuid = "GPU-sim-node-a-1";
    reg.name = "node-a";
    reg.hostname = "host-a";
    reg.address = "tcp://10.0.0.5:7071";
    reg.n_labels = 2;
    reg.labels = labels;
    reg.n_gpus = 2;
    reg.gpus = gpus;
    reg.pid = 4242;
    reg.node_id = 17;
    seed("register_node", "troupe.v1.Head/RegisterNode", &reg.base, "s3cret", 2, 5000);

    hb.node_id = 17;
    seed("heartbeat", "troupe.v1.Head/Heartbeat", &hb.base, "s3cret", 3, 1000);
    ls.include_dead = 1;
    seed("list_nodes", "troupe.v1.Head/ListNodes", &ls.base, "", 4, 0);
    seed("get_cluster", "troupe.v1.Head/GetCluster", &gc.base, "", 5, 0);

    seed("unknown_method", "troupe.v1.Head/Nope", &reg.base, "", 6, 1);
    seed("extremes", "x", &ping.base, "t", UINT64_MAX, UINT32_MAX);
    seed("no_service", "Ping", &hb.base, "", 7, 10);
    write_seed("junk", junk, sizeof(junk));
    write_seed("empty", junk, 0);
    printf("fuzz_envelope_seeds: wrote %d seeds to %s\n", written, dir);
    return 0;
}
