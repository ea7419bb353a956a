/* troupe-head: the coordination service. See --help. */
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "head.h"
#include "failure.h"
#include "http.h"
#include "handlers.h"
#include "health.h"
#include "metrics.h"
#include "profile.h"
#include "kv.h"
#include "rdzv.h"
#include "trace.h"
#include "log.h"
#include "util.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: troupe-head --state-dir DIR [--listen URL] [--config head.yaml] [--check-config]\n"
                 "\n"
                 "Runs the troupe head: node registry and liveness, jobs, RPC on URL.\n"
                 "Settings come from defaults < --config file < TROUPE_* environment < flags.\n"
                 "\n"
                 "  --config FILE            YAML file of the settings below (unknown keys are errors)\n"
                 "  --check-config           load and validate, print the effective settings, exit\n"
                 "  --help, --version\n");
    tr_cfg_usage(tr_head_config_table, out);
    fprintf(out, "\nEnvironment: TROUPE_<SETTING>, e.g. TROUPE_TOKEN, TROUPE_HEARTBEAT_MS.\n");
}

/* load_config applies the four layers in order of precedence. */
static int load_config(tr_head_config *cfg, int argc, char **argv, tr_cfg_args *args, tr_err *err)
{
    int rv;

    if ((rv = tr_cfg_scan_args(tr_head_config_table, argc, argv, args, err)) != TROUPE_OK ||
        (rv = tr_cfg_defaults(tr_head_config_table, cfg, err)) != TROUPE_OK) {
        return rv;
    }
    if (args->help || args->version) {
        return TROUPE_OK;
    }
    if (args->config_path != NULL &&
        (rv = tr_cfg_load_file(tr_head_config_table, cfg, args->config_path, err)) != TROUPE_OK) {
        return rv;
    }
    if ((rv = tr_cfg_load_env(tr_head_config_table, cfg, "TROUPE", err)) != TROUPE_OK ||
        (rv = tr_cfg_apply_args(tr_head_config_table, cfg, argc, argv, err)) != TROUPE_OK ||
        (rv = tr_cfg_validate(tr_head_config_table, cfg, err)) != TROUPE_OK) {
        return rv;
    }
    if (tr_log_level_parse(cfg->log_level) < 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "log_level '%s': use err|warning|notice|info|debug",
                          cfg->log_level);
    }
    if ((rv = tr_http_check_address(cfg->http, err)) != TROUPE_OK ||
        (rv = tr_health_check_config(cfg, err)) != TROUPE_OK || (rv = tr_head_check_tls(cfg, err)) != TROUPE_OK) {
        return rv;
    }
    return tr_head_check_liveness(cfg, err);
}

/* raise_nofile lifts the descriptor soft limit to the hard one: every agent,
 * CLI and worker holds a connection, and at the distribution default of 1024
 * an ordinary cluster (or a flood of idle peers) leaves the head unable to
 * accept or to open its own files. */
static void raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0) {
            TR_LOG(TR_LOG_INFO, "descriptor limit raised from %llu to %llu", (unsigned long long)was,
                   (unsigned long long)rl.rlim_max);
        }
    }
}

int main(int argc, char **argv)
{
    static tr_head head;
    tr_http *http = NULL;
    tr_cfg_args args;
    tr_err err;
    int sig = 0, rv;

    tr_log_init("troupe-head", TR_LOG_INFO);
    umask(077); /* head.db, its WAL, credentials and job logs: the head's user only */
    raise_nofile();
    rv = load_config(&head.cfg, argc, argv, &args, &err);
    if (args.help) {
        usage(stdout);
        tr_cfg_free(tr_head_config_table, &head.cfg);
        return 0;
    }
    if (args.version) {
        printf("troupe-head %s\n", TROUPE_VERSION);
        tr_cfg_free(tr_head_config_table, &head.cfg);
        return 0;
    }
    if (rv != TROUPE_OK) {
        fprintf(stderr, "troupe-head: %s\n", err.msg);
        tr_cfg_free(tr_head_config_table, &head.cfg);
        return 2;
    }
    if (args.check_config) {
        tr_cfg_print(tr_head_config_table, &head.cfg, stdout);
        tr_cfg_free(tr_head_config_table, &head.cfg);
        return 0;
    }
    tr_log_level = tr_log_level_parse(head.cfg.log_level);
    /* Log lines are formatted where they happen, often under the head's lock,
     * and written by their own thread: a slow stderr stalls no lock holder. */
    if (tr_log_async_start() != 0) {
        TR_LOG(TR_LOG_WARNING, "cannot start the log writer thread; lines are written directly");
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--token") == 0 || strncmp(argv[i], "--token=", 8) == 0) {
            TR_LOG(TR_LOG_WARNING, "--token on the command line is visible to other users in ps; use "
                                   "--token-file or TROUPE_TOKEN");
        }
    }

    /* Catch the stop signals before any thread starts (shutdown.c says why
     * through a self-pipe rather than sigwait). */
    if (tr_head_stop_signals_catch(&err) != TROUPE_OK) {
        tr_log_async_stop();
        fprintf(stderr, "troupe-head: %s\n", err.msg);
        tr_cfg_free(tr_head_config_table, &head.cfg);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);

    /* The RPC layer and the services on top of the core. */
    if ((rv = tr_head_rpc_attach(&head, &err)) != TROUPE_OK ||
        (rv = tr_head_add_service(&head, &tr_rdzv_service, &err)) != TROUPE_OK ||
        (rv = tr_head_add_service(&head, &tr_profile_service, &err)) != TROUPE_OK ||
        (rv = tr_head_add_service(&head, &tr_metrics_service, &err)) != TROUPE_OK ||
        (rv = tr_head_add_service(&head, &tr_failure_service, &err)) != TROUPE_OK ||
        (rv = tr_head_add_service(&head, &tr_trace_service, &err)) != TROUPE_OK ||
        (rv = tr_head_add_service(&head, &tr_health_service, &err)) != TROUPE_OK ||
        (rv = tr_head_add_service(&head, &tr_kv_service, &err)) != TROUPE_OK ||
        (rv = tr_head_start(&head, &err)) != TROUPE_OK) {
        tr_log_async_stop();
        fprintf(stderr, "troupe-head: %s\n", err.msg);
        tr_cfg_free(tr_head_config_table, &head.cfg);
        return 1;
    }
    /* HTTP reads the core and the services, so it starts after them and
     * stops before them. */
    if ((rv = tr_http_start(&head, &http, &err)) != TROUPE_OK) {
        fprintf(stderr, "troupe-head: %s\n", err.msg);
        TR_LOG(TR_LOG_ERR, "%s", err.msg);
        tr_head_stop(&head);
        tr_cfg_free(tr_head_config_table, &head.cfg);
        tr_log_async_stop();
        return 1;
    }
    sig = tr_head_stop_signal_wait();
    TR_LOG(TR_LOG_NOTICE, "stopping on signal %s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    tr_head_shutdown_deadline(head.cfg.shutdown_timeout_ms);
    /* Test hook (integration.jobs.shutdown): stands in for a stop step that
     * never returns, such as nng 1.5.2's nng_close (shutdown.c). */
    if (getenv("TROUPE_TEST_SHUTDOWN_STALL_MS") != NULL) {
        tr_head_shutdown_step("the test stall (TROUPE_TEST_SHUTDOWN_STALL_MS)");
        tr_sleep_ms(atoll(getenv("TROUPE_TEST_SHUTDOWN_STALL_MS")));
    }
    tr_head_shutdown_step("stopping the HTTP server");
    tr_http_stop(http);
    tr_head_stop(&head);
    tr_cfg_free(tr_head_config_table, &head.cfg);
    TR_LOG(TR_LOG_NOTICE, "stopped");
    tr_log_async_stop();
    return 0;
}
