/* head_fixture.h - for unit tests that run a real head in-process: register a
 * node of 4 GPUs over RPC (no agent behind it). */
#ifndef TR_TEST_HEAD_FIXTURE_H
#define TR_TEST_HEAD_FIXTURE_H

#include "rpc.h"
#include "test_helpers.h"
#include "troupe/v1/troupe.pb-c.h"

/* tr_fixture_register_node registers n1 and returns its connection: keep it
 * open like a live agent (a closed one makes the node SUSPECT, one more change
 * for the writer) and close it with tr_rpc_client_close at the end. */
static inline tr_rpc_client *tr_fixture_register_node(const char *url)
{
    Troupe__V1__RegisterNodeRequest req = TROUPE__V1__REGISTER_NODE_REQUEST__INIT;
    Troupe__V1__Gpu g[4], *gp[4];
    tr_rpc_client_opts o = {.url = url};
    tr_rpc_client *c = NULL;
    ProtobufCMessage *rep = NULL;
    tr_err err;

    for (int i = 0; i < 4; i++) {
        troupe__v1__gpu__init(&g[i]);
        g[i].index = (uint32_t)i;
        g[i].model = "H100";
        gp[i] = &g[i];
    }
    req.name = "n1";
    req.hostname = "n1";
    req.address = "127.0.0.1";
    req.gpus = gp;
    req.n_gpus = 4;
    TR_ASSERT_OK(tr_rpc_client_open(&o, &c, &err), &err);
    TR_ASSERT_OK(tr_rpc_client_call(c, "troupe.v1.Head/RegisterNode", &req.base,
                                    &troupe__v1__register_node_reply__descriptor, &rep, 10000, 0, &err),
                 &err);
    protobuf_c_message_free_unpacked(rep, NULL);
    return c;
}

#endif
