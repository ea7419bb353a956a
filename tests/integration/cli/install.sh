#!/usr/bin/env bash
# cmake --install into a temporary prefix: programs that run from there,
# libtroupe with a troupe.pc a program builds against, headers, completion,
# systemd units pointing at the prefix, the example job.
source "$(dirname "$0")/../lib.sh"
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
P=$T/prefix
cmake --install "$TROUPE_BIN" --prefix "$P" >"$T/install.log" 2>&1 || fail "cmake --install: $(tail "$T/install.log")"
for f in bin/troupe bin/troupe-head bin/troupe-node bin/troupe-train lib/libtroupe.so lib/pkgconfig/troupe.pc \
    include/troupe/client.h include/troupe/status.h share/bash-completion/completions/troupe \
    lib/systemd/system/troupe-head.service lib/systemd/system/troupe-node.service lib/sysusers.d/troupe.conf \
    share/troupe/etc-troupe/node.yaml share/doc/troupe/README.md share/doc/troupe/examples/demo/job.yaml; do
    [ -e "$P/$f" ] || fail "not installed: $f"
done
pass "cmake --install put programs, library, pc file, headers, completion, units and the example in $P"

# The installed programs run from the prefix alone (the CLI finds libtroupe by its RPATH).
mv "$P" "$T/moved" && P=$T/moved
env -i PATH="$P/bin:/usr/bin:/bin" troupe --version | grep_all "^troupe " || fail "installed troupe does not run"
for b in troupe troupe-head troupe-node troupe-train; do
    "$P/bin/$b" --help >"$T/help" 2>&1 || fail "$b --help failed: $(cat "$T/help")"
    grep -qi "usage" "$T/help" || fail "$b --help prints no usage"
done
grep -q "^ExecStart=$T/prefix/bin/troupe-node " "$P/lib/systemd/system/troupe-node.service" ||
    fail "unit does not start the installed agent: $(grep ExecStart "$P/lib/systemd/system/troupe-node.service")"
bash -n "$P/share/bash-completion/completions/troupe" || fail "installed completion is not valid bash"
pass "installed programs run from a moved prefix; units point at bin/"

# A program built with pkg-config against the installed library talks to a head.
cat >"$T/app.c" <<'C'
#include <stdio.h>
#include <troupe/client.h>
int main(void)
{
    troupe_client *c;
    troupe_cluster cl;
    troupe_error err;
    if (troupe_client_open(&c, NULL, &err) != TROUPE_OK || troupe_get_cluster(c, &cl, &err) != TROUPE_OK) {
        fprintf(stderr, "%s: %s\n", troupe_strerror(err.code), err.message);
        return 1;
    }
    printf("gpus=%u\n", cl.gpus_total);
    troupe_client_close(c);
    return 0;
}
C
export PKG_CONFIG_PATH=$P/lib/pkgconfig
# A sanitizer build's library needs its runtime in the program too (clang's, as built).
CC=(cc)
# (grep without -q: with pipefail, -q's early exit would SIGPIPE nm and fail the pipe)
if nm -D "$P/lib/libtroupe.so" | grep __asan_init >/dev/null; then CC=(clang -fsanitize=address,undefined); fi
# shellcheck disable=SC2046
"${CC[@]}" -o "$T/app" "$T/app.c" $(pkg-config --cflags --libs troupe) -Wl,-rpath,"$P/lib" 2>"$T/cc.err" ||
    fail "building against troupe.pc: $(cat "$T/cc.err")"
[ "$(pkg-config --modversion troupe)" = "$("$P/bin/troupe" --version | awk '{print $2}')" ] || fail "pc version"
HEAD_BIN=$P/bin/troupe-head NODE_BIN=$P/bin/troupe-node CLI_BIN=$P/bin/troupe
start_head
start_node n1 4xH100:80GB
wait_for 10 "node ALIVE" nodes_alive 1
out=$("$T/app") || fail "app: $out"
[ "$out" = gpus=4 ] || fail "app printed '$out'"
pass "a program built with pkg-config troupe links the installed libtroupe and calls the head"

# A private prefix: the two lines the install prints (and the README shows) are
# all a program needs, without an RPATH of its own.
grep -qF "export PKG_CONFIG_PATH=$T/prefix/lib/pkgconfig LD_LIBRARY_PATH=$T/prefix/lib" "$T/install.log" ||
    fail "install does not print the lines for a private prefix: $(tail -3 "$T/install.log")"
# shellcheck disable=SC2046
"${CC[@]}" -o "$T/app2" "$T/app.c" $(pkg-config --cflags --libs troupe) 2>"$T/cc.err" || fail "cc: $(cat "$T/cc.err")"
out=$(LD_LIBRARY_PATH=$P/lib "$T/app2") || fail "app with LD_LIBRARY_PATH: $out"
[ "$out" = gpus=4 ] || fail "app2 printed '$out'"
pass "private prefix: PKG_CONFIG_PATH and LD_LIBRARY_PATH as printed are enough"

# A system prefix (/usr/local): install runs ldconfig, so a program linked with
# pkg-config starts at once. Done in a private mount namespace (a tmpfs over
# /usr/local, a copy of /etc for the linker cache) so the machine is untouched.
if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
    echo "SKIP (this part): installing to /usr/local needs root and a mount namespace (unshare -m)"
    exit 0
fi
cp -a /etc "$T/etc"
cc_line="${CC[*]}"
rc=0
unshare -m --propagation private env -u PKG_CONFIG_PATH -u LD_LIBRARY_PATH bash -c '
    set -e
    mount -t tmpfs tmpfs /usr/local
    mount --bind "$1/etc" /etc
    cmake --install "$2" --prefix /usr/local >"$1/sys-install.log" 2>&1
    $3 -o "$1/sysapp" "$1/app.c" $(pkg-config --cflags --libs troupe) 2>"$1/sys-cc.err"
    "$1/sysapp"' _ "$T" "$TROUPE_BIN" "$cc_line" >"$T/sys.out" 2>&1 || rc=$?
[ $rc = 0 ] && [ "$(tail -1 "$T/sys.out")" = gpus=4 ] ||
    fail "a program built against /usr/local (rc $rc): $(cat "$T/sys.out") $(tail -3 "$T/sys-install.log" 2>/dev/null) $(cat "$T/sys-cc.err" 2>/dev/null)"
grep -q "Ran ldconfig" "$T/sys-install.log" || fail "install did not say it ran ldconfig: $(tail -3 "$T/sys-install.log")"
pass "install --prefix /usr/local runs ldconfig: a program linked with pkg-config starts without it"
