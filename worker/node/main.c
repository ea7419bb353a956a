/* troupe-node: the per-machine agent. See --help. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ids.h"
#include "launcher.h"
#include "log.h"
#include "names.h"
#include "node.h"
#include "safefile.h"
#include "util.h"

#define F(x) offsetof(tr_node_config, x)
const tr_cfg_desc tr_node_config_table[] = {
    {"head", TR_CFG_STRING, F(head), "tcp://127.0.0.1:7770", TR_CFG_UNBOUNDED, TR_CFG_URL,
     "troupe-head RPC address: tcp://HOST:PORT, tls+tcp://HOST:PORT or ipc:///PATH"},
    {"tls_ca", TR_CFG_STRING, F(tls_ca), NULL, TR_CFG_UNBOUNDED, 0,
     "PEM CA that signed the head's certificate (tls+tcp://); workers get it as TROUPE_TLS_CA"},
    {"tls_cert", TR_CFG_STRING, F(tls_cert), NULL, TR_CFG_UNBOUNDED, 0,
     "PEM client certificate for a head with tls_client_auth (signed by its tls_client_ca)"},
    {"tls_key", TR_CFG_STRING, F(tls_key), NULL, TR_CFG_UNBOUNDED, 0,
     "PEM private key of tls_cert (mode 0600)"},
    {"tls_server_name", TR_CFG_STRING, F(tls_server_name), NULL, TR_CFG_UNBOUNDED, 0,
     "name the head's certificate must carry (default: the host in head)"},
    {"name", TR_CFG_STRING, F(name), NULL, TR_CFG_UNBOUNDED, 0, "node name (default: the hostname)"},
    {"labels", TR_CFG_STRING, F(labels), NULL, TR_CFG_UNBOUNDED, 0, "k=v,k2=v2 labels for job selectors"},
    {"fake_gpus", TR_CFG_STRING, F(fake_gpus), NULL, TR_CFG_UNBOUNDED, 0,
     "advertise simulated GPUs instead of real ones: N[xMODEL][:MEM], e.g. 4xH200:141GB"},
    {"token", TR_CFG_STRING, F(token), NULL, TR_CFG_UNBOUNDED, TR_CFG_SENSITIVE,
     "node credential (TROUPE_TOKEN; prefer token_file: a flag shows in ps)"},
    {"token_file", TR_CFG_STRING, F(token_file), NULL, TR_CFG_UNBOUNDED, 0,
     "file holding the node credential (troupe token create --scope node), mode 0600"},
    {"address", TR_CFG_STRING, F(address), NULL, TR_CFG_UNBOUNDED, TR_CFG_HOST,
     "address workers on other nodes use to reach this one, MASTER_ADDR (default: the hostname if it "
     "resolves, else the first non-loopback IPv4 address)"},
    {"state_dir", TR_CFG_STRING, F(state_dir), NULL, TR_CFG_UNBOUNDED, 0,
     "worker logs and credentials, 0700 (default: /var/lib/troupe-node/NAME as root, else "
     "$XDG_STATE_HOME/troupe-node/NAME or ~/.local/state/troupe-node/NAME)"},
    {"log_level", TR_CFG_STRING, F(log_level), "info", TR_CFG_UNBOUNDED, 0, "err|warning|notice|info|debug"},
    {"stop_grace_ms", TR_CFG_INT, F(stop_grace_ms), "10000", 0, 3600000, 0,
     "SIGTERM-to-SIGKILL grace when stopping workers"},
    {"lease_ms", TR_CFG_INT, F(lease_ms), "0", 0, 6000000, 0,
     "kill the workers after this long without an answered heartbeat; 0 = the lease the head grants "
     "(its lease_ms, shorter than its DEAD timeout); a value here can only shorten it"},
    {"cpus", TR_CFG_INT, F(cpus), "-1", -1, 65536, 0,
     "CPU slots for CPU-only workers (resources: {gpu: 0}; each takes its cpu, 1 when unset); -1 = "
     "this machine's online CPUs, 0 = none (refused where no GPU is found: nothing could run); more "
     "than the online CPUs is allowed, with a warning. GPU workers take no slots"},
    {"shared_uid", TR_CFG_BOOL, F(shared_uid), "false", TR_CFG_UNBOUNDED, 0,
     "run workers as the agent's own user. RISK: every worker can then read the node credential "
     "(and act as this node) and every other job's worker credential on it. Without root it is the "
     "only way to run jobs; as root, workers get uids of their own unless this is set"},
    {"worker_user", TR_CFG_STRING, F(worker_user), NULL, TR_CFG_UNBOUNDED, 0,
     "as root: run every worker as this user (no supplementary groups) instead of a uid per worker; "
     "separates workers from the agent but not jobs from each other"},
    {"worker_uid_range", TR_CFG_STRING, F(worker_uid_range), TR_IDS_DEFAULT_RANGE, TR_CFG_UNBOUNDED, 0,
     "as root: FIRST-LAST ids handed out as a uid per worker and a gid per job (ids not in passwd or "
     "group, held host-wide while in use)"},
    {"worker_id_dir", TR_CFG_STRING, F(worker_id_dir), TR_IDS_DEFAULT_DIR, TR_CFG_UNBOUNDED, 0,
     "where the agents of this host lock the ids they hand out (one file per id in use)"},
    {NULL, 0, 0, NULL, 0, 0, 0, NULL},
};
#undef F

static volatile sig_atomic_t stop_flag;
static volatile sig_atomic_t restart_flag; /* SIGUSR2: stopping to be started again */

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

/* online_cpus: what --cpus -1 stands for, and what a larger --cpus is
 * compared with. */
static long online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}

/* default_state_dir is private to this user, never a shared /tmp path that
 * another local user could prepare with symlinks: /var/lib/troupe-node/NAME
 * as root, else $XDG_STATE_HOME/troupe-node/NAME (~/.local/state/...). */
static char *default_state_dir(const char *name)
{
    const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    char *dir = NULL;

    if (geteuid() == 0) {
        return asprintf(&dir, "/var/lib/troupe-node/%s", name) > 0 ? dir : NULL;
    }
    if (xdg != NULL && xdg[0] == '/') {
        return asprintf(&dir, "%s/troupe-node/%s", xdg, name) > 0 ? dir : NULL;
    }
    if (home == NULL || home[0] != '/') {
        return NULL;
    }
    return asprintf(&dir, "%s/.local/state/troupe-node/%s", home, name) > 0 ? dir : NULL;
}

/* load_token takes the node credential from token_file when token is unset;
 * a --token flag works but says it is visible to every local user in ps. */
static int load_token(tr_node_config *c, int argc, char **argv, tr_err *err)
{
    int warn = 0, rv;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--token") == 0 || strncmp(argv[i], "--token=", 8) == 0) {
            TR_LOG(TR_LOG_WARNING, "--token on the command line is visible to other users in ps; use "
                                   "--token-file or TROUPE_TOKEN");
        }
    }
    if ((c->token && c->token[0]) || !c->token_file || !c->token_file[0]) {
        return TROUPE_OK;
    }
    free(c->token);
    c->token = NULL;
    if ((rv = tr_secret_file_read(c->token_file, &c->token, &warn, err)) != TROUPE_OK) {
        return rv;
    }
    if (warn) {
        TR_LOG(TR_LOG_WARNING, "token_file %s is readable by group or others; chmod 600 it", c->token_file);
    }
    return TROUPE_OK;
}

/* setup_isolation decides who workers run as, says so, and closes to them
 * what is the agent's: the state dir becomes traverse-only (each worker
 * reaches its own credential's directory by path, lists nothing, and every
 * file in it is the agent's, 0600), and a token file others can read is
 * tightened to 0600, or the agent refuses to start. */
static int setup_isolation(tr_node_agent *a, tr_err *err)
{
    tr_ids_opts o = {a->cfg.shared_uid, a->cfg.worker_user, a->cfg.worker_uid_range, a->cfg.worker_id_dir};
    tr_ids_mode mode;
    struct stat st;
    int rv = tr_ids_open(&o, &a->ids, err);

    if (rv != TROUPE_OK) {
        return rv;
    }
    tr_ids_describe(a->ids, a->isolation, sizeof(a->isolation));
    mode = tr_ids_get_mode(a->ids);
    TR_LOG(mode == TR_IDS_DYNAMIC ? TR_LOG_NOTICE : TR_LOG_WARNING, "worker isolation: %s", a->isolation);
    if (mode != TR_IDS_DYNAMIC && mode != TR_IDS_USER) {
        return TROUPE_OK;
    }
    if (chmod(a->cfg.state_dir, 0711) != 0) {
        return tr_err_set(err, TROUPE_FAILED_PRECONDITION, "chmod 711 %s: %s", a->cfg.state_dir,
                          strerror(errno));
    }
    if (a->cfg.token_file != NULL && a->cfg.token_file[0] != '\0' && stat(a->cfg.token_file, &st) == 0 &&
        (st.st_mode & 077) != 0) {
        if (chmod(a->cfg.token_file, st.st_mode & 0700) != 0) {
            return tr_err_set(
                err, TROUPE_FAILED_PRECONDITION,
                "token_file %s is readable by group or others (mode %03o) and chmod failed (%s); "
                "workers run under other uids here and could read the node credential: make it "
                "0600 and owned by the agent's user",
                a->cfg.token_file, (unsigned)(st.st_mode & 0777), strerror(errno));
        }
        TR_LOG(TR_LOG_NOTICE, "token_file %s was mode %03o; made it %03o so that workers cannot read it",
               a->cfg.token_file, (unsigned)(st.st_mode & 0777), (unsigned)(st.st_mode & 0700));
    }
    return TROUPE_OK;
}

static void on_signal(int sig)
{
    if (sig == SIGUSR2) {
        restart_flag = 1;
    }
    stop_flag = 1;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: troupe-node [--head URL] [--name NAME] [--labels k=v,...] [--fake-gpus SPEC]\n"
            "                   [--config node.yaml] [--check-config]\n\n"
            "Registers this machine's GPUs and CPU slots (--cpus) with troupe-head, heartbeats,\n"
            "runs workers. Without GPUs it still runs CPU-only workers (resources: {gpu: 0}).\n"
            "Settings: defaults < --config file < TROUPE_* environment < flags.\n"
            "SIGTERM or SIGINT: stop the workers, deregister (the node is LEFT) and exit.\n"
            "SIGUSR2: the same, for a restart (an upgrade): the head shows the node LEFT \"for a restart\".\n"
            "After either (or a crash), the head keeps queued jobs that need this node waiting\n"
            "restart_grace_ms for it to register again.\n\n"
            "Isolation: started as root, the agent runs every worker under a uid of their own\n"
            "(--worker-uid-range; a gid per job, shared by its ranks) or as --worker-user, never\n"
            "as itself. Without root it cannot: it refuses jobs unless --shared-uid is given,\n"
            "and then any worker can read the node credential and other jobs' credentials.\n\n");
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
    if (c->cpus < 0) {
        c->cpus = online_cpus();
    }
    if (c->state_dir == NULL || c->state_dir[0] == '\0') {
        free(c->state_dir);
        c->state_dir = default_state_dir(c->name);
    }
    if (c->state_dir == NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "no state dir: set --state-dir (HOME is not set)");
    }
    if (c->name == NULL || c->address == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    /* The head refuses the same (names.h); saying it here names the setting. */
    if ((rv = tr_node_name_check("name", c->name, err)) != TROUPE_OK ||
        (rv = tr_address_check("address", c->address, err)) != TROUPE_OK ||
        (rv = tr_labels_check_list(c->labels, 32, err)) != TROUPE_OK) {
        return rv;
    }
    if ((rv = load_token(c, argc, argv, err)) != TROUPE_OK) {
        return rv;
    }
    if (c->fake_gpus != NULL && c->fake_gpus[0] != '\0') {
        rv = tr_gpus_parse_fake(c->fake_gpus, c->name, a->gpus, &a->n_gpus, err);
    } else {
        rv = tr_gpus_discover(a->gpus, &a->n_gpus, err);
    }
    if (rv == TROUPE_OK && a->n_gpus == 0 && c->cpus == 0) {
        /* Registered, such a node would be ALIVE and never take a worker. */
        rv = tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                        "no GPU found and --cpus 0: no worker could ever run on this node; give it CPU slots "
                        "(--cpus N; the default, -1, is this machine's online CPUs) or GPUs (--fake-gpus "
                        "8xH200:141GB simulates them)");
    }
    return rv;
}

/* register_first waits for the head, saying so every few seconds. Errors
 * that waiting cannot fix (bad token, refused registration) end the agent. */
static int register_first(tr_node_agent *a, tr_err *err)
{
    int64_t said = 0;

    tr_node_find_nsys(a); /* told to the head at every registration */

    for (;;) {
        int rv = tr_node_register(a, err);
        if (rv == TROUPE_OK) {
            return rv;
        }
        if (rv == TROUPE_UNAUTHENTICATED || rv == TROUPE_INVALID_ARGUMENT || rv == TROUPE_PERMISSION_DENIED ||
            rv == TROUPE_ALREADY_EXISTS) {
            return rv;
        }
        if (tr_now_ms() - said >= 5000) {
            tr_rpc_client_explain(a->rpc, err); /* a TLS handshake that fails says why */
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
        printf("# gpus: %zu%s\n", a.n_gpus,
               a.n_gpus == 0         ? " (none found: only CPU-only workers, resources: {gpu: 0}, run here)"
               : a.gpus[0].simulated ? " (simulated)"
                                     : "");
        printf("# cpus: %lld slots, %ld online CPUs%s\n", (long long)a.cfg.cpus, online_cpus(),
               a.cfg.cpus > online_cpus() ? " (oversubscribed: CPU-only workers here share the CPUs)" : "");
        tr_cfg_free(tr_node_config_table, &a.cfg);
        return 0;
    }
    tr_log_level = tr_log_level_parse(a.cfg.log_level);
    if (a.n_gpus == 0) { /* said at start and shown by troupe nodes: a silent 0 looks like a broken node */
        TR_LOG(TR_LOG_WARNING,
               "no GPU found (no CUDA driver, or it sees no device): only CPU-only workers "
               "(resources: {gpu: 0}) can run on this node, in its %lld CPU slots (--cpus); "
               "--fake-gpus 8xH200:141GB simulates GPUs",
               (long long)a.cfg.cpus);
    }
    if (a.cfg.cpus > online_cpus()) { /* allowed (Ray's num_cpus may exceed the cores), but said */
        TR_LOG(TR_LOG_WARNING,
               "--cpus %lld is more than this machine's %ld online CPUs: the CPU-only workers placed here "
               "will share them (oversubscribed); the default, -1, counts the online CPUs",
               (long long)a.cfg.cpus, online_cpus());
    }
    if ((rv = tr_dir_private(a.cfg.state_dir, &err)) != TROUPE_OK) {
        fprintf(stderr, "troupe-node: state dir: %s\n", err.msg);
        tr_cfg_free(tr_node_config_table, &a.cfg);
        return 2;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    a.stop = &stop_flag;
    a.restarting = &restart_flag;

    pthread_mutex_init(&a.id_mu, NULL);
    if ((rv = tr_node_identity(&a, &err)) != TROUPE_OK) {
        fprintf(stderr, "troupe-node: %s\n", err.msg);
        tr_cfg_free(tr_node_config_table, &a.cfg);
        return 1;
    }
    if ((rv = setup_isolation(&a, &err)) != TROUPE_OK) {
        fprintf(stderr, "troupe-node: %s\n", err.msg);
        close(a.lock_fd);
        tr_cfg_free(tr_node_config_table, &a.cfg);
        return 2;
    }
    ro.url = a.cfg.head;
    ro.token = a.cfg.token;
    ro.wait_for_server = 1;
    ro.tls.ca_file = a.cfg.tls_ca;
    ro.tls.cert_file = a.cfg.tls_cert;
    ro.tls.key_file = a.cfg.tls_key;
    ro.tls.server_name = a.cfg.tls_server_name;
    if ((rv = tr_rpc_client_open(&ro, &a.rpc, &err)) != TROUPE_OK ||
        (rv = register_first(&a, &err)) != TROUPE_OK) {
        fprintf(stderr, "troupe-node: %s: %s\n", troupe_strerror(rv), err.msg);
        tr_rpc_client_close(a.rpc);
        close(a.lock_fd);
        tr_ids_close(a.ids);
        tr_cfg_free(tr_node_config_table, &a.cfg);
        return rv == TROUPE_CANCELLED ? 0 : 1;
    }
    rv = tr_node_run(&a, &err);
    TR_LOG(TR_LOG_NOTICE, "stopping node=%llu", (unsigned long long)a.node_id);
    tr_rpc_client_close(a.rpc);
    close(a.lock_fd);
    tr_ids_close(a.ids);
    tr_cfg_free(tr_node_config_table, &a.cfg);
    return rv == TROUPE_OK ? 0 : 1;
}
