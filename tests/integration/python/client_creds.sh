#!/usr/bin/env bash
# troupe.Client's credentials and TLS as the CLI's: against a head on
# tls+tcp:// that wants a credential, the client gets in with token_file=,
# token=, $TROUPE_TOKEN, $TROUPE_TOKEN_FILE (and the CA from tls_ca= or
# $TROUPE_TLS_CA); without a credential, with a bad one, without the CA, with
# another CA or a wrong server name it raises the status the CLI reports,
# with libtroupe's message.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/py_lib.bash"
D=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH=$TROUPE_PY_SRC
command -v openssl >/dev/null || fail "openssl missing (scripts/setup.sh installs it)"
SRC=$(cd "$D/../../.." && pwd)
"$SRC/scripts/make-test-ca.sh" "$T/ca" -- n1 >/dev/null
"$SRC/scripts/make-test-ca.sh" "$T/other" -- n1 >/dev/null
umask 077
printf 'adm-%s\n' "$RANDOM$RANDOM" >"$T/admin.tok"
unset TROUPE_TOKEN TROUPE_TOKEN_FILE TROUPE_CREDENTIALS
HEAD=tls+tcp://127.0.0.1:$PORT
"$HEAD_BIN" --listen "$HEAD" --state-dir "$T/state" --token-file "$T/admin.tok" --tls-cert "$T/ca/head.pem" \
    --tls-key "$T/ca/head.key" >>"$T/head.log" 2>&1 &
PIDS+=($!)
admin() { "$CLI_BIN" --head "$HEAD" --tls-ca "$T/ca/ca.pem" --token-file "$T/admin.tok" "$@"; }
wait_for 10 "the head on $HEAD" admin status
admin token create --scope user >"$T/user.tok"
pyrun "$PY" "$D/py_creds_client.py" "$HEAD" "$T/ca/ca.pem" "$T/other/ca.pem" "$T/user.tok" >"$T/out.json" 2>"$T/err" ||
    fail "py_creds_client: $(cat "$T/err" "$T/out.json")"
res() { jq -c -s --arg c "$1" 'map(select(.case == $c)) | .[0]' "$T/out.json"; }
for c in token_file token env_token env_token_file; do
    jq -e --arg h "$HEAD" '.ok == 0 and .head == $h' <<<"$(res $c)" >/dev/null || fail "$c: $(res $c)"
done
pass "a user credential from token_file=, token=, TROUPE_TOKEN, TROUPE_TOKEN_FILE over TLS (tls_ca= or TROUPE_TLS_CA)"
# expect CASE CLASS TEXT: the case raised CLASS with TEXT in its message, and
# the CLI given the same says the same.
expect() {
    jq -e --arg k "$2" --arg t "$3" '.error == $k and (.message | contains($t))' <<<"$(res "$1")" >/dev/null ||
        fail "$1: expected $2 '$3', got $(res "$1")"
}
expect no_token Unauthenticated "credential"
expect bad_token Unauthenticated "credential"
expect no_ca InvalidArgument "needs tls_ca (--tls-ca, TROUPE_TLS_CA)"
expect other_ca Unavailable "The certificate is not correctly signed by the trusted CA"
expect wrong_name Unavailable "for the name 'head.wrong.example'"
out=$("$CLI_BIN" --head "$HEAD" --tls-ca "$T/ca/ca.pem" nodes 2>&1) && fail "CLI without a credential: $out"
grep -qF "$(res no_token | jq -r .message)" <<<"$out" || fail "CLI says otherwise: $out vs $(res no_token)"
pass "refusals: $(jq -r -s 'map(select(.error) | "\(.case): \(.error)") | join(", ")' "$T/out.json")"
