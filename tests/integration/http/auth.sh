#!/usr/bin/env bash
# With a token configured, HTTP takes the RPC layer's credentials: no
# credential or a wrong one is 401 (the dashboard sends people to the login
# form), /healthz stays open, the admin token and a minted user credential
# are let in (bearer header or the HttpOnly cookie the login form sets), node
# credentials are 403, and a revoked credential stops working at once.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hlib.bash"

umask 077
ADMIN="adm+$RANDOM/$RANDOM=; x"  # bytes a cookie cannot carry as they are
printf '%s\n' "$ADMIN" >"$T/admin.tok"
unset TROUPE_TOKEN
"$HEAD_BIN" --listen "$HEAD" --state-dir "$T/state" --token-file "$T/admin.tok" --http "127.0.0.1:$HPORT" \
    >>"$T/head.log" 2>&1 &
PIDS+=($!)
wait_for 10 "head with a token file" "$CLI_BIN" --token-file "$T/admin.tok" status
admin() { "$CLI_BIN" --token-file "$T/admin.tok" "$@"; }

expect_code "healthz without credential" 200 /healthz
for p in /metrics /api/cluster /api/jobs /app.js; do
    expect_code "no credential" 401 "$p"
    expect_code "wrong credential" 401 "$p" -H "Authorization: Bearer not-$ADMIN"
done
curl -s -D "$T/h401" -o /dev/null "$HTTP/metrics"
grep -qi '^WWW-Authenticate: Bearer' "$T/h401" || fail "401 without WWW-Authenticate: $(cat "$T/h401")"
expect_code "dashboard without credential: to the login form" 303 /
curl -s -D "$T/h303" -o /dev/null "$HTTP/"
grep -qi '^Location: /login' "$T/h303" || fail "no redirect to /login: $(cat "$T/h303")"
expect_code "login form open" 200 /login
grep -q "401 GET /metrics: a credential is needed" "$T/head.log" || fail "refusal not logged"
! grep -qF "not-$ADMIN" "$T/head.log" || fail "a presented credential reached the log"
pass "no credential / wrong credential: 401 (WWW-Authenticate: Bearer) on /metrics, /api/*, assets; / redirects to /login; /healthz open"

expect_code "admin bearer" 200 /metrics -H "Authorization: Bearer $ADMIN"
admin token create --scope user >"$T/user.tok"
admin token create --scope node >"$T/node.tok"
expect_code "user bearer" 200 /api/cluster -H "Authorization: Bearer $(cat "$T/user.tok")"
expect_code "node bearer" 403 /api/cluster -H "Authorization: Bearer $(cat "$T/node.tok")"
pass "admin and user credentials let in (bearer), node credential 403"

# the login form: a good credential sets an HttpOnly cookie and sends to /
curl -s -D "$T/hlogin" -o /dev/null -c "$T/jar" --data-urlencode "token=$(cat "$T/user.tok")" "$HTTP/login"
grep -qi '^Set-Cookie: troupe_token=.*HttpOnly' "$T/hlogin" || fail "login cookie: $(cat "$T/hlogin")"
tr -d '\r' <"$T/hlogin" | grep_all -ix 'Location: /' || fail "login redirect: $(cat "$T/hlogin")"
expect_code "cookie" 200 /api/jobs -b "$T/jar"
expect_code "dashboard with cookie" 200 / -b "$T/jar"
curl -s -D "$T/hbad" -o /dev/null --data-urlencode "token=wrong" "$HTTP/login"
grep -qi '^Location: /login?failed=1' "$T/hbad" || fail "bad login: $(cat "$T/hbad")"
! grep -qi '^Set-Cookie' "$T/hbad" || fail "bad login set a cookie"
curl -s -o /dev/null -c "$T/jar2" --data-urlencode "token=$ADMIN" "$HTTP/login"
expect_code "admin cookie (percent-encoded)" 200 /metrics -b "$T/jar2"
pass "login form: good credential -> HttpOnly cookie that opens /api and /; wrong one -> back to the form, no cookie"

uid=$(cut -d. -f3 "$T/user.tok")
admin token revoke "$uid" >/dev/null
expect_code "revoked cookie" 401 /api/jobs -b "$T/jar"
expect_code "revoked bearer" 401 /metrics -H "Authorization: Bearer $(cat "$T/user.tok")"
pass "revoked user credential refused at once (cookie and bearer)"
