#!/usr/bin/env bash
# The state dir on a small tmpfs that fills up (store_full.inc says what is
# shown). Needs root to mount: elsewhere it is skipped (exit 77) and says why
# - store_failpoint.sh shows the same with an injected write failure. The
# test runs in a mount namespace of its own, so the tmpfs goes away with it,
# even when it is killed.
source "$(dirname "$0")/../lib.sh"
private_mounts
mkdir -p "$T/state"
mount -t tmpfs -o size=2m,mode=0700 tmpfs "$T/state" 2>"$T/mount.err" ||
    skip_test "cannot mount a tmpfs here ($(cat "$T/mount.err")); store_failpoint.sh covers this"
FULL=tmpfs
source "$(dirname "$0")/store_full.inc"
