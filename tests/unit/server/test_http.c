/* test_http.c - unit.server.http: the pure parts of the head's HTTP side
 * (server/http): query strings, the http setting's forms, and the compiled-in
 * dashboard (every asset there, nothing fetched from elsewhere). */
#include <string.h>

#include "test_helpers.h"

#include "http.h"

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

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(query_get),
        cmocka_unit_test(check_address),
        cmocka_unit_test(assets),
    };
    return TR_TEST_MAIN("unit.server.http", tests, argc, argv);
}
