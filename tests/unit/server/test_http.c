/* test_http.c - unit.server.http: the pure parts of the head's HTTP side
 * (server/http): query strings, the http setting's forms, the compiled-in
 * dashboard (every asset there, nothing fetched from elsewhere), and the
 * connection guard's view of the HTTP port (http_socks) over real loopback
 * sockets. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_helpers.h"

#include "http.h"
#include "http_socks.h"

static void query_get(void **state)
{
    const char *q = "name=loss%2Ctokens_per_s&names=no&worker=job1-g-0&empty=&plus=a+b&last=5";
    char buf[64];

    (void)state;
    assert_true(tr_http_query_get(q, "name", buf, sizeof(buf)));
    assert_string_equal(buf, "loss,tokens_per_s"); /* %2C decoded */
    assert_true(tr_http_query_get(q, "worker", buf, sizeof(buf)));
    assert_string_equal(buf, "job1-g-0");
    assert_true(tr_http_query_get(q, "plus", buf, sizeof(buf)));
    assert_string_equal(buf, "a b"); /* forms send spaces as + */
    assert_true(tr_http_query_get(q, "last", buf, sizeof(buf)));
    assert_string_equal(buf, "5");
    assert_true(tr_http_query_get(q, "empty", buf, sizeof(buf))); /* present, empty */
    assert_string_equal(buf, "");
    assert_false(tr_http_query_get(q, "nam", buf, sizeof(buf)));   /* a prefix of a key is not the key */
    assert_false(tr_http_query_get(q, "after", buf, sizeof(buf)));
    assert_false(tr_http_query_get("", "name", buf, sizeof(buf)));
    assert_true(tr_http_query_get("name=abcdefgh", "name", buf, 4));
    assert_string_equal(buf, "abc"); /* cut to the buffer, terminated */
    assert_true(tr_http_query_get("v=%zz%4", "v", buf, sizeof(buf)));
    assert_string_equal(buf, "%zz%4"); /* bad escapes kept as they are */
}

static void check_address(void **state)
{
    static const char *const good[] = {"off", "127.0.0.1:8470", "0.0.0.0:1", "http://127.0.0.1:0", "[::1]:8470",
                                       "localhost:80"};
    static const char *const bad[] = {"nonsense", "127.0.0.1", ":80", "host:", "host:8x", "http://h:1/metrics",
                                      "tcp://h:1/x"};
    tr_err err;

    (void)state;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        TR_ASSERT_OK(tr_http_check_address(good[i], &err), &err);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char want[128];
        snprintf(want, sizeof(want), "http '%s': use HOST:PORT", bad[i]);
        TR_ASSERT_FAILS(tr_http_check_address(bad[i], &err), TROUPE_INVALID_ARGUMENT, &err, want);
    }
}

static const tr_http_asset *asset(const char *path)
{
    for (const tr_http_asset *a = tr_http_assets; a->path != NULL; a++) {
        if (strcmp(a->path, path) == 0) {
            return a;
        }
    }
    return NULL;
}

static int contains(const tr_http_asset *a, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= a->len; i++) {
        if (memcmp(a->data + i, needle, n) == 0) {
            return 1;
        }
    }
    return 0;
}

/* foreign: a URL with a scheme in a, other than the SVG namespace (a name,
 * never fetched). */
static int foreign(const tr_http_asset *a)
{
    static const char svg[] = "http://www.w3.org/2000/svg";
    for (size_t i = 0; i + 3 <= a->len; i++) {
        if (memcmp(a->data + i, "://", 3) == 0 &&
            !(i >= 4 && i - 4 + sizeof(svg) - 1 <= a->len && memcmp(a->data + i - 4, svg, sizeof(svg) - 1) == 0)) {
            return 1;
        }
    }
    return 0;
}

/* assets: the page, its script and style, the login form; none of them
 * loads anything from another origin (clusters often have no internet). */
static void assets(void **state)
{
    static const char *const paths[] = {"/", "/app.js", "/style.css", "/login", "/login.js"};
    const tr_http_asset *index = asset("/"), *app = asset("/app.js");

    (void)state;
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        const tr_http_asset *a = asset(paths[i]);
        if (a == NULL || a->len == 0) {
            fail_msg("asset %s missing or empty", paths[i]);
        }
        if (foreign(a) || contains(a, "src=\"//") || contains(a, "href=\"//") || contains(a, "@import")) {
            fail_msg("asset %s refers to another origin", paths[i]);
        }
    }
    assert_string_equal(index->ctype, "text/html; charset=utf-8");
    assert_string_equal(app->ctype, "text/javascript; charset=utf-8");
    assert_string_equal(asset("/style.css")->ctype, "text/css; charset=utf-8");
    assert_true(contains(index, "<script src=\"/app.js\""));
    assert_true(contains(app, "/api/jobs/"));
    assert_true(contains(asset("/login"), "<form method=\"post\" action=\"/login\""));
    assert_null(asset("/nope"));
}

/* listen_on: a listening loopback TCP socket on a free port. */
static int listen_on(struct sockaddr_in *sa)
{
    socklen_t len = sizeof(*sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)sa, sizeof(*sa)), 0);
    assert_int_equal(listen(fd, 16), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)sa, &len), 0);
    return fd;
}

static int dial(const struct sockaddr_in *sa)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (const struct sockaddr *)sa, sizeof(*sa)), 0);
    return fd;
}

static ino_t ino_of(int fd)
{
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    return st.st_ino;
}

/* check_socks: list has exactly the accepted sockets acc[0..n) (inodes),
 * with their descriptors once looked up. */
static void check_socks(tr_http_sock *list, size_t got, const int *acc, size_t n, const char *how)
{
    if (got != n) {
        fail_msg("%s: %zu sockets listed, want the %zu accepted ones", how, got, n);
    }
    tr_http_socks_find_fds(list, got);
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < got && list[j].ino != ino_of(acc[i])) {
            j++;
        }
        if (j == got) {
            fail_msg("%s: accepted socket %zu (fd %d) not listed", how, i, acc[i]);
        }
        assert_int_equal(list[j].fd, acc[i]);
        assert_true(list[j].idle_ms < 60000);
    }
}

/* socks_listed: sock_diag and the /proc walk both find exactly the HTTP
 * port's accepted connections still open on this end: not its listener,
 * not the clients' ends (whose remote port is the HTTP port), not another
 * port's connection, not one this end has shut down (the guard did, and nng
 * has not closed its descriptor yet: counted and closed once, not at every
 * scan); one the client closed is; with the wildcard address as with the
 * bound one. The guard closes by what these return. Re-plant: list every
 * state but LISTEN again. */
static void socks_listed(void **state)
{
    struct sockaddr_in sa, other_sa;
    int lfd = listen_on(&sa), other = listen_on(&other_sa);
    int cli[5], acc[5], ocli, oacc, nl;
    nng_sockaddr addr = {0};
    tr_http_sock *list = NULL;
    size_t n = 0;

    (void)state;
    for (int i = 0; i < 5; i++) {
        cli[i] = dial(&sa);
        acc[i] = accept(lfd, NULL, NULL);
        assert_true(acc[i] >= 0);
    }
    ocli = dial(&other_sa);
    oacc = accept(other, NULL, NULL);
    assert_int_equal(write(cli[0], "GET / HTTP/1.1\r\n", 16), 16);
    /* acc[3]: shut down by this end (FIN_WAIT1 at once); acc[4]: closed by
     * the client (CLOSE_WAIT once its FIN is in, ESTABLISHED before: listed
     * either way), checked in acc[3]'s place. */
    assert_int_equal(shutdown(acc[3], SHUT_RDWR), 0);
    close(cli[4]);
    cli[4] = -1;
    {
        int t = acc[3];
        acc[3] = acc[4];
        acc[4] = t;
    }
    addr.s_in.sa_family = NNG_AF_INET;
    addr.s_in.sa_port = sa.sin_port;
    addr.s_in.sa_addr = sa.sin_addr.s_addr;

    assert_int_equal(tr_http_socks_list(&addr, TR_HTTP_SOCKS_PROC, &list, &n), TR_HTTP_SOCKS_PROC);
    check_socks(list, n, acc, 4, "/proc/self/fd");
    free(list);
    nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (nl < 0) {
        print_message("sock_diag unavailable here (%s): only the /proc walk was checked\n", strerror(errno));
    } else {
        close(nl);
        assert_int_equal(tr_http_socks_list(&addr, TR_HTTP_SOCKS_DIAG, &list, &n), TR_HTTP_SOCKS_DIAG);
        check_socks(list, n, acc, 4, "sock_diag");
        free(list);
        addr.s_in.sa_addr = 0; /* the wildcard: any local address on the port */
        assert_int_equal(tr_http_socks_list(&addr, 0, &list, &n), TR_HTTP_SOCKS_DIAG);
        check_socks(list, n, acc, 4, "sock_diag, wildcard");
        free(list);
    }
    for (int i = 0; i < 5; i++) {
        if (cli[i] >= 0) {
            close(cli[i]);
        }
        close(acc[i]);
    }
    close(ocli);
    close(oacc);
    close(other);
    close(lfd);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(query_get),
        cmocka_unit_test(check_address),
        cmocka_unit_test(assets),
        cmocka_unit_test(socks_listed),
    };
    return TR_TEST_MAIN("unit.server.http", tests, argc, argv);
}
