/* troupe-head: the coordination service. See --help. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "head.h"
#include "log.h"

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
    if (cfg->dead_after <= cfg->suspect_after) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "dead_after (%lld) must exceed suspect_after (%lld)",
                          (long long)cfg->dead_after, (long long)cfg->suspect_after);
    }
    return TROUPE_OK;
}

int main(int argc, char **argv)
{
    static tr_head head;
    tr_cfg_args args;
    sigset_t sigs;
    tr_err err;
    int sig = 0, rv;

    tr_log_init("troupe-head", TR_LOG_INFO);
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

    /* Block the stop signals before any thread starts so only sigwait sees them. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    if ((rv = tr_head_start(&head, &err)) != TROUPE_OK) {
        fprintf(stderr, "troupe-head: %s\n", err.msg);
        tr_cfg_free(tr_head_config_table, &head.cfg);
        return 1;
    }
    sigwait(&sigs, &sig);
    TR_LOG(TR_LOG_NOTICE, "stopping on signal %s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    tr_head_stop(&head);
    tr_cfg_free(tr_head_config_table, &head.cfg);
    TR_LOG(TR_LOG_NOTICE, "stopped");
    return 0;
}
