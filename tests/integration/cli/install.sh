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
