#!/usr/bin/env bash
# Addresses are checked when settings load: --check-config and start-up refuse
# an unsupported scheme, a port out of range or a URL where a host belongs,
# with exit 2 and a message naming the flag, variable or file:line:col.
# (Before, --check-config accepted --listen http://x and tcp://127.0.0.1:99999,
# and an agent given --head http://x retried forever.)
source "$(dirname "$0")/../lib.sh"
# refused WANT_TEXT CMD...: CMD exits 2 within 10 s and says WANT_TEXT.
refused() {
    local want=$1 rc=0; shift
    timeout 10 "$@" >"$T/out" 2>&1 || rc=$?
    [ "$rc" = 2 ] || fail "$* exited $rc, want 2: $(cat "$T/out")"
    grep -qF -- "$want" "$T/out" || fail "$*: message lacks '$want': $(cat "$T/out")"
    pass "$* -> exit 2: $(cat "$T/out")"
}
refused "--listen: listen: 'http://x': unsupported address; use tcp://HOST:PORT, tls+tcp://HOST:PORT or ipc:///PATH" \
    "$HEAD_BIN" --state-dir "$T/s" --listen http://x --check-config
refused "--listen: listen: 'tcp://127.0.0.1:99999': port 99999 is out of range [1, 65535]" \
    "$HEAD_BIN" --state-dir "$T/s" --listen tcp://127.0.0.1:99999 --check-config
refused "--advertise: advertise: 'tcp://head': missing port" \
    "$HEAD_BIN" --state-dir "$T/s" --advertise tcp://head --check-config
printf 'state_dir: %s\nlisten: tls+tcp://127.0.0.1:7770\n' "$T/s" >"$T/head.yaml"
refused "listen tls+tcp://127.0.0.1:7770: a tls+tcp:// listener needs tls_cert and tls_key" \
    "$HEAD_BIN" --config "$T/head.yaml" --check-config
# Start-up, not only --check-config: nothing listens, nothing is created.
refused "port 99999 is out of range" "$HEAD_BIN" --state-dir "$T/s2" --listen tcp://127.0.0.1:99999
[ ! -e "$T/s2" ] || fail "a refused head created its state dir"
refused "env TROUPE_HEAD: head: 'http://x'" env TROUPE_HEAD=http://x "$NODE_BIN" --check-config
refused "--head: head: 'tcp://127.0.0.1:0': port 0 is out of range" "$NODE_BIN" --head tcp://127.0.0.1:0 --fake-gpus 1
refused "--address: address: 'tcp://10.0.0.1:29500': expected a host name or IP address, not a URL" \
    "$NODE_BIN" --head "$HEAD" --address tcp://10.0.0.1:29500 --check-config
# Good addresses still work end to end, ipc:// included.
HEAD=ipc://$T/head.sock
export TROUPE_HEAD=$HEAD
start_head
start_node n1 1
wait_for 10 "node ALIVE over ipc://" is_state n1 ALIVE
pass "head and agent on $HEAD"
