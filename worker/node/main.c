/* troupe-node: the per-machine agent. See --help. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher.h"
#include "log.h"
#include "node.h"
#include "util.h"

#define F(x) offsetof(tr_node_config, x)
const tr_cfg_desc tr_node_config_table[] = {
    {"head", TR_CFG_STRING, F(head), "tcp://127.0.0.1:7770", TR_CFG_UNBOUNDED, 0, "troupe-head RPC address"},
    {"name", TR_CFG_STRING, F(name), NULL, TR_CFG_UNBOUNDED, 0, "node name (default: the hostname)"},
    {"labels", TR_CFG_STRING, F(labels), NULL, TR_CFG_UNBOUNDED, 0, "k=v,k2=v2 labels for job selectors"},
    {"fake_gpus", TR_CFG_STRING, F(fake_gpus), NULL, TR_CFG_UNBOUNDED, 0,
     "advertise simulated GPUs instead of real ones: N[xMODEL][:MEM], e.g. 4xH200:141GB"},
    {"token", TR_CFG_STRING, F(token), NULL, TR_CFG_UNBOUNDED, TR_CFG_SENSITIVE, "auth token (TROUPE_TOKEN)"},
    {"address", TR_CFG_STRING, F(address), NULL, TR_CFG_UNBOUNDED, 0,
     "address workers on other nodes use to reach this one, MASTER_ADDR (default: the hostname if it "
     "resolves, else the first non-loopback IPv4 address)"},
    {"state_dir", TR_CFG_STRING, F(state_dir), NULL, TR_CFG_UNBOUNDED, 0,
     "worker logs and state (default: /tmp/troupe-node-NAME)"},
    {"log_level", TR_CFG_STRING, F(log_level), "info", TR_CFG_UNBOUNDED, 0, "err|warning|notice|info|debug"},
    {"stop_grace_ms", TR_CFG_INT, F(stop_grace_ms), "10000", 0, 3600000, 0,
     "SIGTERM-to-SIGKILL grace when stopping workers"},
    {NULL, 0, 0, NULL, 0, 0, 0, NULL},
};
#undef F

static volatile sig_atomic_t stop_flag;

/* default_address is how workers elsewhere reach this node (MASTER_ADDR): the
 * hostname when it resolves, else the first non-loopback IPv4 address, else
 * 127.0.0.1 — a bare machine or container often has no /etc/hosts entry for
 * its own name, and an unresolvable MASTER_ADDR fails only later, in NCCL. */
static const char *default_address(const char *hostname, char *buf, size_t size)
{
    struct addrinfo hints = {0}, *res = NULL;
    struct ifaddrs *ifs = NULL;

    hints.ai_family = AF_UNSPEC;
    if (getaddrinfo(hostname, NULL, &hints, &res) == 0) {
        freeaddrinfo(res);
        return hostname;
    }
    tr_strlcpy(buf, "127.0.0.1", size);
    if (getifaddrs(&ifs) == 0) {
        for (struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
            if (i->ifa_addr != NULL && i->ifa_addr->sa_family == AF_INET && !(i->ifa_flags & IFF_LOOPBACK)) {
                inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, buf,
                          (socklen_t)size);
                break;
            }
        }
        freeifaddrs(ifs);
    }
    TR_LOG(TR_LOG_NOTICE, "hostname %s does not resolve; workers will use address=%s (set --address)",
           hostname, buf);
    return buf;
}

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: troupe-node [--head URL] [--name NAME] [--labels k=v,...] [--fake-gpus SPEC]\n"
                 "                   [--config node.yaml] [--check-config]\n\n"
                 "Registers this machine's GPUs with troupe-head, heartbeats, runs workers.\n"
                 "Settings: defaults < --config file < TROUPE_* environment < flags.\n\n");
    tr_cfg_usage(tr_node_config_table, out);
}

static int load_config(tr_node_agent *a, int argc, char **argv, tr_cfg_args *args, tr_err *err)
{
    tr_node_config *c = &a->cfg;
    int rv;

    if ((rv = tr_cfg_scan_args(tr_node_config_table, argc, argv, args, err)) != TROUPE_OK ||
        (rv = tr_cfg_defaults(tr_node_config_table, c, err)) != TROUPE_OK || args->help || args->version) {
        return rv;
    }
    if ((args->config_path && (rv = tr_cfg_load_file(tr_node_config_table, c, args->config_path, err))) ||
        (rv = tr_cfg_load_env(tr_node_config_table, c, "TROUPE", err)) != TROUPE_OK ||
        (rv = tr_cfg_apply_args(tr_node_config_table, c, argc, argv, err)) != TROUPE_OK) {
        return rv;
    }
    if (tr_log_level_parse(c->log_level) < 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "log_level '%s': use err|warning|notice|info|debug",
                          c->log_level);
    }
    if (gethostname(a->hostname, sizeof(a->hostname) - 1) != 0) {
        tr_strlcpy(a->hostname, "localhost", sizeof(a->hostname));
    }
    if (c->name == NULL || c->name[0] == '\0') {
        free(c->name);
        c->name = strdup(a->hostname);
    }
    if (c->address == NULL || c->address[0] == '\0') {
        char addr[256];
        free(c->address);
        c->address = strdup(default_address(a->hostname, addr, sizeof(addr)));
    }
    if (c->state_dir == NULL || c->state_dir[0] == '\0') {
        char dir[512];
        snprintf(dir, sizeof(dir), "/tmp/troupe-node-%s", c->name);
        free(c->state_dir);
        c->state_dir = strdup(dir);
    }
    if (c->name == NULL || c->address == NULL || c->state_dir == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    if (c->fake_gpus != NULL && c->fake_gpus[0] != '\0') {
        return tr_gpus_parse_fake(c->fake_gpus, c->name, a->gpus, &a->n_gpus, err);
    }
    return tr_gpus_discover(a->gpus, &a->n_gpus, err);
}

/* register_first waits for the head, saying so every few seconds. Errors
 * that waiting cannot fix (bad token, refused registration) end the agent. */
static int register_first(tr_node_agent *a, tr_err *err)
{
    int64_t said = 0;

    for (;;) {
        int rv = tr_node_register(a, err);
        if (rv == TROUPE_OK) {
            return rv;
        }
        if (rv == TROUPE_UNAUTHENTICATED || rv == TROUPE_INVALID_ARGUMENT || rv == TROUPE_PERMISSION_DENIED) {
            return rv;
        }
        if (tr_now_ms() - said >= 5000) {
            TR_LOG(TR_LOG_WARNING, "waiting for troupe-head at %s: %s", a->cfg.head, err->msg);
            said = tr_now_ms();
        }
        for (int i = 0; i < 10 && !stop_flag; i++) {
            tr_sleep_ms(50);
        }
        if (stop_flag) {
            return tr_err_set(err, TROUPE_CANCELLED, "stopped before registering");
        }
    }
}

int main(int argc, char **argv)
{
    static tr_node_agent a;
    tr_rpc_client_opts ro = {0};
    struct sigaction sa;
    tr_cfg_args args;
    tr_err err;
    int rv;

    if (argc > 1 && strcmp(argv[1], "--exec-worker") == 0) {
        return tr_launcher_exec_worker(argc, argv);
    }
    tr_log_init("troupe-node", TR_LOG_INFO);
    rv = load_config(&a, argc, argv, &args, &err);
    if (args.help || args.version) {
        args.help ? usage(stdout) : (void)printf("troupe-node %s\n", TROUPE_VERSION);
        tr_cfg_free(tr_node_config_table, &a.cfg);
        return 0;
    }
    if (rv != TROUPE_OK) {
        fprintf(stderr, "troupe-node: %s\n", err.msg);
        tr_cfg_free(tr_node_config_table, &a.cfg);
        return 2;
    }
    if (args.check_config) {
        tr_cfg_print(tr_node_config_table, &a.cfg, stdout);
        printf("# gpus: %zu%s\n", a.n_gpus, a.n_gpus && a.gpus[0].simulated ? " (simulated)" : "");
        tr_cfg_free(tr_node_config_table, &a.cfg);
        return 0;
    }
    tr_log_level = tr_log_level_parse(a.cfg.log_level);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    a.stop = &stop_flag;

    ro.url = a.cfg.head;
    ro.token = a.cfg.token;
    ro.wait_for_server = 1;
    if ((rv = tr_rpc_client_open(&ro, &a.rpc, &err)) != TROUPE_OK ||
        (rv = register_first(&a, &err)) != TROUPE_OK) {
        fprintf(stderr, "troupe-node: %s: %s\n", troupe_strerror(rv), err.msg);
        tr_rpc_client_close(a.rpc);
        tr_cfg_free(tr_node_config_table, &a.cfg);
        return rv == TROUPE_CANCELLED ? 0 : 1;
    }
    rv = tr_node_run(&a, &err);
    TR_LOG(TR_LOG_NOTICE, "stopping node=%llu", (unsigned long long)a.node_id);
    tr_rpc_client_close(a.rpc);
    tr_cfg_free(tr_node_config_table, &a.cfg);
    return rv == TROUPE_OK ? 0 : 1;
}
