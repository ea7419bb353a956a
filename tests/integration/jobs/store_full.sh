#!/usr/bin/env bash
# The state dir on a small tmpfs that fills up (store_full.inc says what is
# shown). Needs root to mount; elsewhere it says so and passes as skipped -
# store_failpoint.sh shows the same with an injected write failure.
source "$(dirname "$0")/../lib.sh"
mkdir -p "$T/state"
if ! mount -t tmpfs -o size=2m,mode=0700 tmpfs "$T/state" 2>"$T/mount.err"; then
    echo "SKIP: cannot mount a tmpfs here ($(cat "$T/mount.err")); store_failpoint.sh covers this"
    exit 0
fi
# Unmount before lib.sh's cleanup removes $T (lazy: the head may still hold it).
trap 'rc=$?; for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; umount -l "$T/state" || true; set +e; (exit $rc); cleanup' EXIT
FULL=tmpfs
source "$(dirname "$0")/store_full.inc"
