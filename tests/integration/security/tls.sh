#!/usr/bin/env bash
# tls+tcp:// end to end (nng's TLS transport, mbedTLS): a head with a
# certificate from scripts/make-test-ca.sh and tls_client_auth "nodes", an
# agent with a client certificate, the CLI and a worker's libtroupe verifying
# the head with the CA; a job runs to SUCCEEDED. Then each way to get it wrong
# is refused with a clear error on the client and one log line on the head:
# plain tcp:// against the TLS port, the head's certificate checked against
# another CA, a wrong host name, an expired head certificate, an agent whose
# certificate is from another CA or expired, an agent with none.
source "$(dirname "$0")/../lib.sh"
command -v openssl >/dev/null || fail "openssl missing (scripts/setup.sh installs it)"
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
"$SRC/scripts/make-test-ca.sh" "$T/ca" -- n1 >/dev/null
"$SRC/scripts/make-test-ca.sh" "$T/other" -- n1 >/dev/null
PLAIN=$HEAD
HEAD=tls+tcp://127.0.0.1:$PORT
export TROUPE_HEAD=$HEAD TROUPE_TLS_CA=$T/ca/ca.pem
TLS_ARGS=(--tls-cert "$T/ca/head.pem" --tls-key "$T/ca/head.key" --tls-client-ca "$T/ca/ca.pem" --tls-client-auth nodes
    --log-level debug) # the head logs each round that checks for failed handshakes

start_head --heartbeat-ms 200 "${TLS_ARGS[@]}"
grep -q "listening url=$HEAD" "$T/head.log" || fail "head not on $HEAD: $(cat "$T/head.log")"
start_node n1 2 --tls-ca "$T/ca/ca.pem" --tls-cert "$T/ca/agent-n1.pem" --tls-key "$T/ca/agent-n1.key"
wait_for 10 "n1 ALIVE over TLS" is_state n1 ALIVE
cat >"$T/job.yaml" <<YAML
name: over-tls
cluster: {nodes: [2]}
groups: [{name: g, workers: 2, resources: {gpu: 1}, command: [sh, -c, 'test -n "\$TROUPE_TLS_CA" && test -z "\$TROUPE_TLS_KEY" && echo rank \$RANK over \$TROUPE_HEAD']}]
YAML
id=$(submit "$T/job.yaml")
wait_for 20 "the job over TLS SUCCEEDED" is_job_state "$id" SUCCEEDED
logs_grep "$id" "over $HEAD" || fail "worker output: $(cli logs "$id")"
pass "agent with a client certificate, CLI and workers over $HEAD: job $id SUCCEEDED"

# expect_refused WHAT CLIENT_TEXT CMD...: CMD fails naming CLIENT_TEXT; the
# head logs one line about it. The head sums failed handshakes into one line a
# second at most (the categories are nng's guess: mbedTLS reports the same
# failure differently by where it happens), so the cases are spaced. Where the
# client's own diagnosis handshake fails too (tls_client_auth all) that is a
# second failed handshake, which a loaded machine may log a second later: two
# lines at most.
# rounds: the head's rounds of checking for failed handshakes so far;
# two_rounds_after N: two more since N (a failure is logged by then).
rounds() { grep -c "rpc: TLS handshake failures checked round=" "$T/head.log" || true; }
two_rounds_after() { [ "$(rounds)" -ge $(($1 + 2)) ]; }
expect_refused() {
    local what=$1 want=$2 out rc mark n r0; shift 2
    r0=$(rounds)
    wait_for 10 "two rounds of the head's handshake check (anything earlier is logged then)" two_rounds_after "$r0"
    mark=$(head_log_mark)
    set +e; out=$("$@" 2>&1); rc=$?; set -e
    [ $rc -ne 0 ] || fail "$what: accepted: $out"
    grep -qF -- "$want" <<<"$out" || fail "$what: client error lacks '$want': $out"
    wait_for 5 "the head to log the refused TLS connection" \
        bash -c "tail -c +$((mark + 1)) '$T/head.log' | grep -q 'rpc: TLS connections refused: '"
    r0=$(rounds)
    wait_for 10 "two more rounds of the head's handshake check" two_rounds_after "$r0"
    n=$(tail -c +$((mark + 1)) "$T/head.log" | grep -c "rpc: TLS connections refused: " || true)
    [ "$n" -ge 1 ] && [ "$n" -le 2 ] || fail "$what: expected one log line, got $n: $(tail -c +$((mark + 1)) "$T/head.log")"
    pass "$what: $(tail -n1 <<<"$out") / head: $(tail -c +$((mark + 1)) "$T/head.log" | grep -o 'refused: .*' | cut -c1-60)"
}
expect_refused "plain tcp:// against the TLS port" "if the head listens on tls+tcp://, use that URL and --tls-ca" \
    "$CLI_BIN" --head "$PLAIN" status
expect_refused "the head checked against another CA" "The certificate is not correctly signed by the trusted CA" \
    "$CLI_BIN" --tls-ca "$T/other/ca.pem" status
expect_refused "a wrong host name" "for the name 'head.wrong.example': The certificate Common Name (CN) does not match" \
    "$CLI_BIN" --tls-server-name head.wrong.example status

# An agent whose certificate is from another CA, expired, or missing: TLS
# itself succeeds (the CLI needs no certificate), its node calls do not.
for c in other expired none; do
    case $c in
        other) cert=(--tls-cert "$T/other/agent-n1.pem" --tls-key "$T/other/agent-n1.key") ;;
        expired) cert=(--tls-cert "$T/ca/agent-expired.pem" --tls-key "$T/ca/agent-expired.key") ;;
        none) cert=() ;;
    esac
    mark=$(head_log_mark)
    set +e
    out=$(timeout 20 "$NODE_BIN" --head "$HEAD" --name "bad-$c" --fake-gpus 1 --state-dir "$T/node-bad-$c" \
        --tls-ca "$T/ca/ca.pem" "${cert[@]}" 2>&1); rc=$?
    set -e
    [ $rc = 1 ] && grep -q "PERMISSION_DENIED: troupe.v1.Head/RegisterNode needs a client certificate signed by the head's tls_client_ca" <<<"$out" ||
        fail "agent with cert '$c': rc=$rc $out"
    n=$(tail -c +$((mark + 1)) "$T/head.log" | grep -c "RegisterNode from 127.0.0.1:[0-9]* refused: no client certificate signed by tls_client_ca" || true)
    [ "$n" = 1 ] || fail "agent with cert '$c': expected one head log line, got $n: $(tail -c +$((mark + 1)) "$T/head.log")"
    pass "agent with certificate '$c' refused: $(tail -n1 <<<"$out")"
done

# An expired head certificate: clients say so. (n1 goes first: it would keep
# redialing the new head and fail its handshakes too.)
stop_pid "$NODE_PID_n1"
stop_pid "$HEAD_PID"
start_expired() {
    "$HEAD_BIN" --listen "$HEAD" --state-dir "$T/state2" --tls-cert "$T/ca/head-expired.pem" \
        --tls-key "$T/ca/head-expired.key" --log-level debug >>"$T/head.log" 2>&1 &
    HEAD_PID=$!
    PIDS+=("$HEAD_PID")
}
start_expired
wait_for 10 "the head with an expired certificate to listen" grep -q "listening url=$HEAD state_dir=$T/state2" "$T/head.log"
expect_refused "an expired head certificate" "The certificate validity has expired" "$CLI_BIN" status
[ "$(cli -o json status 2>/dev/null || true)" = "" ] || fail "status accepted an expired head certificate"
pass "an expired head certificate: the CLI says 'The certificate validity has expired'"
# An agent (which waits for its head) says why in its waiting line.
"$NODE_BIN" --head "$HEAD" --name n2 --fake-gpus 1 --state-dir "$T/node-n2" --tls-ca "$T/ca/ca.pem" \
    >>"$T/node-n2.log" 2>&1 &
N2=$!
PIDS+=("$N2")
wait_for 15 "the agent to say why it cannot reach the head" \
    grep -q "waiting for troupe-head at $HEAD: the head's certificate did not verify .*The certificate validity has expired" \
    "$T/node-n2.log"
pass "the waiting agent names the expired head certificate"

# tls_client_auth all: every client needs a certificate from the head's CA.
stop_pid "$N2" "$HEAD_PID"
export TROUPE_TLS_CERT=$T/ca/agent-n1.pem TROUPE_TLS_KEY=$T/ca/agent-n1.key # for start_head's wait
start_head "${TLS_ARGS[@]/nodes/all}"
unset TROUPE_TLS_CERT TROUPE_TLS_KEY
grep -q "listening url=$HEAD" "$T/head.log" || fail "head (all) not listening"
cli --tls-cert "$T/ca/agent-n1.pem" --tls-key "$T/ca/agent-n1.key" status >/dev/null || fail "a client certificate refused"
expect_refused "tls_client_auth all, a client without a certificate" "it wants a client certificate signed by its tls_client_ca" \
    "$CLI_BIN" status
expect_refused "tls_client_auth all, an expired client certificate" "it wants a client certificate signed by its tls_client_ca" \
    "$CLI_BIN" --tls-cert "$T/ca/agent-expired.pem" --tls-key "$T/ca/agent-expired.key" status
