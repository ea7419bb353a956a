/* test_url.c - unit.common.url: RPC addresses and host names accepted in
 * configuration (common/url.c), and the config loader's use of them. */
#include "test_helpers.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "url.h"

static void urls_accepted(void **state)
{
    static const char *const ok[] = {
        "tcp://127.0.0.1:7770", "tcp://head-1.example.com:1", "tcp://*:65535", "tcp://:7770",
        "tcp://[::1]:7770",     "tcp4://10.0.0.1:80",         "tcp6://[fe80::1]:9", "ipc:///tmp/troupe.sock",
        "tls+tcp://head.example.com:7770", "tls+tcp://127.0.0.1:7770",
        "ipc://relative.sock",
    };
    tr_err err;
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        TR_ASSERT_STATUS(tr_url_check(ok[i], &err), TROUPE_OK, &err);
    }
}

static void urls_refused(void **state)
{
    static const struct {
        const char *url;
        int code;
        const char *msg;
    } bad[] = {
        {"http://x", TROUPE_INVALID_ARGUMENT, "unsupported address; use tcp://HOST:PORT, tls+tcp://HOST:PORT or ipc:///PATH"},
        {"127.0.0.1:7770", TROUPE_INVALID_ARGUMENT, "unsupported address"},
        {"tcp://127.0.0.1:99999", TROUPE_OUT_OF_RANGE, "port 99999 is out of range [1, 65535]"},
        {"tcp://127.0.0.1:0", TROUPE_OUT_OF_RANGE, "port 0 is out of range"},
        {"tcp://127.0.0.1", TROUPE_INVALID_ARGUMENT, "missing port"},
        {"tcp://127.0.0.1:", TROUPE_INVALID_ARGUMENT, "missing port"},
        {"tcp://h:80x", TROUPE_INVALID_ARGUMENT, "port '80x' is not a number"},
        {"tcp://h:80/path", TROUPE_INVALID_ARGUMENT, "a tcp:// address has no path"},
        {"tcp://a b:80", TROUPE_INVALID_ARGUMENT, "character ' ' is not allowed"},
        {"tcp://bad..name:80", TROUPE_INVALID_ARGUMENT, "not a valid host name"},
        {"tcp://[::1:80", TROUPE_INVALID_ARGUMENT, "unterminated '['"},
        {"tcp://[zz]:80", TROUPE_INVALID_ARGUMENT, "not an IPv6 address"},
        {"tcp://[::1]", TROUPE_INVALID_ARGUMENT, "missing port"},
        {"ipc://", TROUPE_INVALID_ARGUMENT, "missing path"},
        {"tls+tcp://h", TROUPE_INVALID_ARGUMENT, "missing port"},
        {"http://h:80", TROUPE_INVALID_ARGUMENT, "use tcp://HOST:PORT, tls+tcp://HOST:PORT or ipc:///PATH"},
    };
    tr_err err;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        TR_ASSERT_STATUS(tr_url_check(bad[i].url, &err), bad[i].code, &err);
        TR_ASSERT_CONTAINS(err.msg, bad[i].msg);
    }
    char longpath[200] = "ipc:///";
    memset(longpath + 7, 'p', 120);
    TR_ASSERT_STATUS(tr_url_check(longpath, &err), TROUPE_OUT_OF_RANGE, &err);
    TR_ASSERT_CONTAINS(err.msg, "at most 107");
}

static void hosts(void **state)
{
    tr_err err;
    TR_ASSERT_STATUS(tr_host_check("node-3.cluster", &err), TROUPE_OK, &err);
    TR_ASSERT_STATUS(tr_host_check("10.1.2.3", &err), TROUPE_OK, &err);
    TR_ASSERT_STATUS(tr_host_check("fe80::1", &err), TROUPE_OK, &err);
    TR_ASSERT_STATUS(tr_host_check("tcp://h:1", &err), TROUPE_INVALID_ARGUMENT, &err);
    TR_ASSERT_CONTAINS(err.msg, "not a URL");
    TR_ASSERT_STATUS(tr_host_check("a/b", &err), TROUPE_INVALID_ARGUMENT, &err);
    TR_ASSERT_STATUS(tr_host_check("-a", &err), TROUPE_INVALID_ARGUMENT, &err);
}

typedef struct {
    char *listen;
    char *addr;
} cfg_t;
#define F(x) offsetof(cfg_t, x)
static const tr_cfg_desc table[] = {
    {"listen", TR_CFG_STRING, F(listen), "tcp://127.0.0.1:7070", TR_CFG_UNBOUNDED, TR_CFG_URL, "rpc"},
    {"addr", TR_CFG_STRING, F(addr), NULL, TR_CFG_UNBOUNDED, TR_CFG_HOST, "host"},
    {NULL, 0, 0, NULL, 0, 0, 0, NULL},
};
#undef F

/* Each source names itself: file:line:col, the flag, the variable. */
static void config_names_the_source(void **state)
{
    cfg_t c;
    tr_err err;
    const char *yaml = "addr: ok-host\nlisten: http://x\n";

    TR_ASSERT_STATUS(tr_cfg_defaults(table, &c, &err), TROUPE_OK, &err);
    TR_ASSERT_STATUS(tr_cfg_load_string(table, &c, "head.yaml", yaml, strlen(yaml), &err), TROUPE_INVALID_ARGUMENT,
                  &err);
    TR_ASSERT_CONTAINS(err.msg, "head.yaml:2:9: listen: 'http://x': unsupported address");
    TR_ASSERT_STATUS(tr_cfg_set(table, &c, "listen", "tcp://127.0.0.1:99999", "--listen", &err), TROUPE_OUT_OF_RANGE,
                  &err);
    TR_ASSERT_CONTAINS(err.msg, "--listen: listen: 'tcp://127.0.0.1:99999': port 99999 is out of range");
    TR_ASSERT_STATUS(tr_cfg_set(table, &c, "addr", "tcp://x:1", "env TROUPE_ADDR", &err), TROUPE_INVALID_ARGUMENT,
                  &err);
    TR_ASSERT_CONTAINS(err.msg, "env TROUPE_ADDR: addr: 'tcp://x:1'");
    TR_ASSERT_STATUS(tr_cfg_set(table, &c, "addr", "", "--addr", &err), TROUPE_OK, &err); /* empty = unset */
    TR_ASSERT_STATUS(tr_cfg_set(table, &c, "listen", "ipc:///tmp/t.sock", "--listen", &err), TROUPE_OK, &err);
    assert_string_equal(c.listen, "ipc:///tmp/t.sock");
    tr_cfg_free(table, &c);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(urls_accepted),
        cmocka_unit_test(urls_refused),
        cmocka_unit_test(hosts),
        cmocka_unit_test(config_names_the_source),
    };
    return TR_TEST_MAIN("unit.common.url", tests, argc, argv);
}
