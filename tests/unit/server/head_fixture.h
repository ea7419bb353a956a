/* head_fixture.h - for unit tests that run a real head in-process: configure
 * and start one on an ipc:// socket in a fresh state dir, register a node of
 * 4 GPUs over RPC (no agent behind it). */
#ifndef TR_TEST_HEAD_FIXTURE_H
#define TR_TEST_HEAD_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "head.h"
#include "rpc.h"
#include "test_helpers.h"
#include "troupe/v1/troupe.pb-c.h"

/* tr_fixture_head_config gives h the head's defaults, listening on
 * ipc://DIR/head.ipc with its state in DIR, a fresh directory (dir and url
 * are filled; tag names it), with the head's RPC layer attached. Change
 * h->cfg, then tr_head_start. */
static inline void tr_fixture_head_config(tr_head *h, char *dir, size_t size, char *url, size_t url_size,
                                          const char *tag)
{
    tr_err err;
    tr_test_tmpdir(dir, size, tag);
    snprintf(url, url_size, "ipc://%s/head.ipc", dir);
    memset(h, 0, sizeof(*h));
    TR_ASSERT_OK(tr_cfg_defaults(tr_head_config_table, &h->cfg, &err), &err);
    free(h->cfg.listen);
    free(h->cfg.state_dir);
    h->cfg.listen = strdup(url);
    h->cfg.state_dir = strdup(dir);
    TR_ASSERT_OK(tr_head_rpc_attach(h, &err), &err);
}

/* tr_fixture_head_start: tr_fixture_head_config with the defaults, started. */
static inline void tr_fixture_head_start(tr_head *h, char *dir, size_t size, char *url, size_t url_size,
                                         const char *tag)
{
    tr_err err;
    tr_fixture_head_config(h, dir, size, url, url_size, tag);
    TR_ASSERT_OK(tr_head_start(h, &err), &err);
}

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
