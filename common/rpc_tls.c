/* rpc_tls.c - TLS for troupe's RPC (see rpc_tls.h). */
#include "rpc_tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>
#include <nng/supplemental/tls/tls.h>

#include "log.h"

int tr_rpc_is_tls(const char *url)
{
    return url != NULL && strncmp(url, "tls+tcp", 7) == 0;
}

/* url_host_port splits "tls+tcp://HOST:PORT" ([IPv6] unbracketed). */
static int url_host_port(const char *url, char *host, size_t hsize, char *port, size_t psize)
{
    const char *p = strstr(url, "://"), *colon, *h, *he;

    if (p == NULL || (colon = strrchr(p + 3, ':')) == NULL) {
        return -1;
    }
    h = p + 3;
    he = colon;
    if (*h == '[' && he > h + 1 && he[-1] == ']') {
        h++;
        he--;
    }
    if ((size_t)(he - h) >= hsize || strlen(colon + 1) >= psize) {
        return -1;
    }
    memcpy(host, h, (size_t)(he - h));
    host[he - h] = '\0';
    strcpy(port, colon + 1);
    return 0;
}

/* read_pem reads a whole PEM file; what names the setting in errors. A key
 * readable by group or others is used, with a warning. */
static int read_pem(const char *what, const char *path, int secret, char **out, tr_err *err)
{
    FILE *f = fopen(path, "r");
    struct stat st;
    char *buf;
    long n;

    *out = NULL;
    if (f == NULL) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s '%s': %s", what, path, strerror(errno));
    }
    if (fstat(fileno(f), &st) != 0 || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || n > (1L << 20) ||
        fseek(f, 0, SEEK_SET) != 0 || (buf = malloc((size_t)n + 1)) == NULL) {
        fclose(f);
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s '%s': cannot read it (or over 1 MiB)", what, path);
    }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(buf);
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s '%s': short read", what, path);
    }
    fclose(f);
    buf[n] = '\0';
    if (secret && (st.st_mode & 077) != 0) {
        TR_LOG(TR_LOG_WARNING, "%s %s is readable by group or others; chmod 600 it", what, path);
    }
    *out = buf;
    return TROUPE_OK;
}

/* own_cert loads the certificate and key pair into cfg. */
static int own_cert(nng_tls_config *cfg, const tr_rpc_tls *t, tr_err *err)
{
    char *cert = NULL, *key = NULL;
    int rv, nrv;

    if ((rv = read_pem("tls_cert", t->cert_file, 0, &cert, err)) != TROUPE_OK ||
        (rv = read_pem("tls_key", t->key_file, 1, &key, err)) != TROUPE_OK) {
        free(cert);
        return rv;
    }
    if ((nrv = nng_tls_config_own_cert(cfg, cert, key, NULL)) != 0) {
        rv = tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                        "tls_cert '%s' / tls_key '%s': not a PEM certificate and its unencrypted key (%s)",
                        t->cert_file, t->key_file, nng_strerror(nrv));
    }
    free(cert);
    free(key);
    return rv;
}

static int ca_file(nng_tls_config *cfg, const char *what, const char *path, tr_err *err)
{
    char *pem = NULL;
    int rv, nrv;

    if ((rv = read_pem(what, path, 0, &pem, err)) != TROUPE_OK) { /* a clear message for a missing file */
        return rv;
    }
    free(pem);
    if ((nrv = nng_tls_config_ca_file(cfg, path)) != 0) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s '%s': not a PEM CA certificate (%s)", what, path,
                          nng_strerror(nrv));
    }
    return TROUPE_OK;
}

static int server_config(nng_tls_config *cfg, const tr_rpc_tls *t, tr_err *err)
{
    int rv;

    if (t->cert_file == NULL || t->key_file == NULL || !t->cert_file[0] || !t->key_file[0]) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "a tls+tcp:// listener needs tls_cert and tls_key (scripts/make-test-ca.sh makes a test set)");
    }
    if ((rv = own_cert(cfg, t, err)) != TROUPE_OK) {
        return rv;
    }
    if (t->client_auth == TR_TLS_CLIENT_NONE) {
        nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_NONE);
        return TROUPE_OK;
    }
    if (t->ca_file == NULL || !t->ca_file[0]) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "tls_client_auth needs tls_client_ca: the CA that signs the agents' certificates");
    }
    if ((rv = ca_file(cfg, "tls_client_ca", t->ca_file, err)) != TROUPE_OK) {
        return rv;
    }
    /* NODES: OPTIONAL, so the CLI and workers connect without one and the
     * server checks node credentials against NNG_OPT_TLS_VERIFIED. */
    nng_tls_config_auth_mode(cfg, t->client_auth == TR_TLS_CLIENT_ALL ? NNG_TLS_AUTH_MODE_REQUIRED
                                                                     : NNG_TLS_AUTH_MODE_OPTIONAL);
    return TROUPE_OK;
}

static int client_config(nng_tls_config *cfg, const tr_rpc_tls *t, const char *url, tr_err *err)
{
    char host[256], port[16];
    const char *name = t->server_name;
    int rv;

    if (t->ca_file == NULL || !t->ca_file[0]) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT,
                          "%s needs tls_ca (--tls-ca, TROUPE_TLS_CA): the CA that signed the head's certificate", url);
    }
    if ((rv = ca_file(cfg, "tls_ca", t->ca_file, err)) != TROUPE_OK) {
        return rv;
    }
    nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED);
    if (name == NULL || name[0] == '\0') {
        if (url_host_port(url, host, sizeof(host), port, sizeof(port)) != 0) {
            return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "%s: no host to verify the certificate against", url);
        }
        name = host;
    }
    if (nng_tls_config_server_name(cfg, name) != 0) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    if ((t->cert_file && t->cert_file[0]) != (t->key_file && t->key_file[0])) {
        return tr_err_set(err, TROUPE_INVALID_ARGUMENT, "tls_cert and tls_key go together");
    }
    return (t->cert_file && t->cert_file[0]) ? own_cert(cfg, t, err) : TROUPE_OK;
}

int tr_rpc_tls_config(const tr_rpc_tls *t, int server, const char *url, nng_tls_config **out, tr_err *err)
{
    nng_tls_config *cfg;
    int rv;

    *out = NULL;
    if ((rv = nng_tls_config_alloc(&cfg, server ? NNG_TLS_MODE_SERVER : NNG_TLS_MODE_CLIENT)) != 0) {
        return tr_err_set(err, TROUPE_UNIMPLEMENTED, "TLS is not available in this libnng (%s; engine %s)",
                          nng_strerror(rv), nng_tls_engine_name());
    }
    rv = server ? server_config(cfg, t, err) : client_config(cfg, t, url, err);
    if (rv != TROUPE_OK) {
        nng_tls_config_free(cfg);
        return rv;
    }
    *out = cfg;
    return TROUPE_OK;
}

/* ---- diagnosis ----------------------------------------------------------- */

/* verify_text turns mbedTLS verification flags into one line. */
static void verify_text(uint32_t flags, char *out, size_t size)
{
    char buf[512];
    size_t used = 0;

    mbedtls_x509_crt_verify_info(buf, sizeof(buf), "", flags);
    out[0] = '\0';
    for (char *line = strtok(buf, "\n"); line != NULL && used + 3 < size; line = strtok(NULL, "\n")) {
        int n = snprintf(out + used, size - used, "%s%s", used ? "; " : "", line);
        used += n > 0 ? (size_t)n : 0;
    }
}

/* handshake_text explains a failed handshake by mbedTLS's error. */
static void handshake_text(int ret, char *out, size_t size)
{
    char msg[160];

    mbedtls_strerror(ret, msg, sizeof(msg));
    switch (ret) {
    case MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE:
        snprintf(out, size,
                 "the head refused the handshake (%s): it wants a client certificate signed by its "
                 "tls_client_ca (give tls_cert and tls_key), or refused the one given",
                 msg);
        return;
    case MBEDTLS_ERR_SSL_INVALID_RECORD:
    case MBEDTLS_ERR_SSL_BAD_HS_SERVER_HELLO:
    case MBEDTLS_ERR_SSL_TIMEOUT:
        snprintf(out, size, "no TLS server answers there (%s): is the head listening on tcp:// instead?", msg);
        return;
    case MBEDTLS_ERR_SSL_CONN_EOF:
    case MBEDTLS_ERR_NET_CONN_RESET:
        snprintf(out, size,
                 "the head closed the connection during the TLS handshake (%s): it wants a client certificate "
                 "signed by its tls_client_ca (give tls_cert and tls_key), or it is not a TLS server (tcp://?)",
                 msg);
        return;
    default: snprintf(out, size, "TLS handshake failed: %s", msg); return;
    }
}

/* sp_handshake completes nng's SP exchange (a REQ peer) on a diagnosis
 * connection, so the server sees an ordinary connection that closes, not a
 * failed one to log. */
static void sp_handshake(mbedtls_ssl_context *ssl)
{
    static const unsigned char req[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};
    unsigned char rep[8];
    size_t got = 0;
    int n;

    if (mbedtls_ssl_write(ssl, req, sizeof(req)) != (int)sizeof(req)) {
        return;
    }
    while (got < sizeof(rep) && (n = mbedtls_ssl_read(ssl, rep + got, sizeof(rep) - got)) > 0) {
        got += (size_t)n;
    }
}

typedef struct diag {
    mbedtls_net_context net;
    mbedtls_ssl_context ssl;
    mbedtls_ssl_config conf;
    mbedtls_x509_crt ca, own;
    mbedtls_pk_context key;
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
} diag;

static int diag_setup(diag *d, const tr_rpc_tls *t, const char *name, char *why, size_t size)
{
    int ret;

    if ((ret = mbedtls_ctr_drbg_seed(&d->drbg, mbedtls_entropy_func, &d->entropy, NULL, 0)) != 0 ||
        (ret = mbedtls_ssl_config_defaults(&d->conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                           MBEDTLS_SSL_PRESET_DEFAULT)) != 0) {
        handshake_text(ret, why, size);
        return -1;
    }
    if (mbedtls_x509_crt_parse_file(&d->ca, t->ca_file) != 0) {
        snprintf(why, size, "tls_ca '%s' holds no PEM certificate", t->ca_file);
        return -1;
    }
    mbedtls_ssl_conf_authmode(&d->conf, MBEDTLS_SSL_VERIFY_OPTIONAL); /* read the flags after */
    mbedtls_ssl_conf_ca_chain(&d->conf, &d->ca, NULL);
    mbedtls_ssl_conf_rng(&d->conf, mbedtls_ctr_drbg_random, &d->drbg);
    mbedtls_ssl_conf_read_timeout(&d->conf, 3000);
    if (t->cert_file && t->cert_file[0] && t->key_file && t->key_file[0] &&
        mbedtls_x509_crt_parse_file(&d->own, t->cert_file) == 0 &&
        mbedtls_pk_parse_keyfile(&d->key, t->key_file, NULL) == 0) {
        mbedtls_ssl_conf_own_cert(&d->conf, &d->own, &d->key);
    }
    if ((ret = mbedtls_ssl_setup(&d->ssl, &d->conf)) != 0 || (ret = mbedtls_ssl_set_hostname(&d->ssl, name)) != 0) {
        handshake_text(ret, why, size);
        return -1;
    }
    return 0;
}

void tr_rpc_tls_diagnose(const tr_rpc_tls *t, const char *url, char *why, size_t size)
{
    char host[256], port[16];
    const char *name = t->server_name;
    diag d;
    int ret;

    why[0] = '\0';
    if (url_host_port(url, host, sizeof(host), port, sizeof(port)) != 0 || t->ca_file == NULL) {
        return;
    }
    name = (name && name[0]) ? name : host;
    mbedtls_net_init(&d.net);
    mbedtls_ssl_init(&d.ssl);
    mbedtls_ssl_config_init(&d.conf);
    mbedtls_x509_crt_init(&d.ca);
    mbedtls_x509_crt_init(&d.own);
    mbedtls_pk_init(&d.key);
    mbedtls_entropy_init(&d.entropy);
    mbedtls_ctr_drbg_init(&d.drbg);
    if (diag_setup(&d, t, name, why, size) != 0) {
        goto out;
    }
    if ((ret = mbedtls_net_connect(&d.net, host, port, MBEDTLS_NET_PROTO_TCP)) != 0) {
        handshake_text(ret, why, size);
        goto out;
    }
    mbedtls_ssl_set_bio(&d.ssl, &d.net, mbedtls_net_send, NULL, mbedtls_net_recv_timeout);
    while ((ret = mbedtls_ssl_handshake(&d.ssl)) == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE) {
    }
    if (ret != 0) {
        handshake_text(ret, why, size);
    } else {
        if (mbedtls_ssl_get_verify_result(&d.ssl) != 0) {
            char flags[400];
            verify_text(mbedtls_ssl_get_verify_result(&d.ssl), flags, sizeof(flags));
            snprintf(why, size, "the head's certificate did not verify against tls_ca '%s' for the name '%s': %s",
                     t->ca_file, name, flags);
        }
        sp_handshake(&d.ssl);
    }
    mbedtls_ssl_close_notify(&d.ssl);
out:
    mbedtls_net_free(&d.net);
    mbedtls_ssl_free(&d.ssl);
    mbedtls_ssl_config_free(&d.conf);
    mbedtls_x509_crt_free(&d.ca);
    mbedtls_x509_crt_free(&d.own);
    mbedtls_pk_free(&d.key);
    mbedtls_ctr_drbg_free(&d.drbg);
    mbedtls_entropy_free(&d.entropy);
}

/* ---- server-side counters ------------------------------------------------ */

static uint64_t child_value(nng_stat *parent, const char *name)
{
    for (nng_stat *c = nng_stat_child(parent); c != NULL; c = nng_stat_next(c)) {
        if (strcmp(nng_stat_name(c), name) == 0) {
            return nng_stat_value(c);
        }
    }
    return 0;
}

int tr_rpc_listener_errors(nng_listener l, tr_tls_errors *out)
{
    nng_stat *all, *st;

    memset(out, 0, sizeof(*out));
    if (nng_stats_get(&all) != 0) {
        return -1;
    }
    st = nng_stat_find_listener(all, l);
    if (st != NULL) {
        out->auth = child_value(st, "auth");
        out->proto = child_value(st, "proto");
        out->other = child_value(st, "other");
        out->timeout = child_value(st, "timeout");
    }
    nng_stats_free(all);
    return st != NULL ? 0 : -1;
}
