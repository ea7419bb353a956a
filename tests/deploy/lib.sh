# shellcheck shell=bash disable=SC2034 # (variables for the tests that source it)
# lib.sh - helpers for the deploy tests (sourced by each test in this folder).
#
# These tests run deploy/ for real: the image built and run by podman, the
# compose file by podman-compose, the Slurm script by slurmctld/slurmd, the
# units by systemd's tools. They need root and the engines scripts/setup.sh
# installs; each test sets up what it needs, removes everything it made on exit,
# and exits 77 (skipped, with the reason on stderr) only where an engine cannot
# start on this machine.
set -euo pipefail

: "${TROUPE_BIN:?TROUPE_BIN must point at the build tree}"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HEAD_BIN=$TROUPE_BIN/server/troupe-head
NODE_BIN=$TROUPE_BIN/worker/node/troupe-node
CLI_BIN=$TROUPE_BIN/client/troupe
TRAIN_BIN=$TROUPE_BIN/worker/train/troupe-train
# The image the container tests build and share (podman's layer cache makes a
# rebuild of an unchanged tree take seconds).
IMAGE=${TROUPE_TEST_IMAGE:-localhost/troupe:cpu-test}

T=$(mktemp -d /tmp/troupe-deploy.XXXXXX)
# Every container, volume, network and pod a test makes carries this label, so
# cleanup removes exactly those (other tests and users may run podman too).
TAG=troupe-test-$$
CLEANUPS=()

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }
pass() { echo "PASS: $*"; }

# on_exit CMD: run CMD (eval'd) when the test ends, last registered first.
on_exit() { CLEANUPS+=("$1"); }
cleanup() {
    local rc=$? i
    TEST_RC=$rc
    [ -z "${WATCHDOG_PID:-}" ] || kill -9 "$WATCHDOG_PID" 2>/dev/null || true
    set +e
    for ((i = ${#CLEANUPS[@]} - 1; i >= 0; i--)); do eval "${CLEANUPS[$i]}"; done
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
        echo "---- test failed (rc=$rc); logs from $T ----"
        for f in "$T"/*.log; do [ -f "$f" ] && { echo "== $f"; tail -n 40 "$f"; }; done
    fi
    rm -rf "$T"
    exit "$rc"
}
trap cleanup EXIT

# A deadline for the whole test below ctest's TIMEOUT, so a hang says where it was.
if [ -n "${TROUPE_TEST_DEADLINE_S:-}" ]; then
    trap 'echo "FAIL: still running after ${TROUPE_TEST_DEADLINE_S} s (TROUPE_TEST_DEADLINE_S)" >&2; exit 1' TERM
    (read -rt "$TROUPE_TEST_DEADLINE_S" _ <> <(:); kill -TERM $$ 2>/dev/null) &
    WATCHDOG_PID=$!
fi

# wait_for SECONDS WHAT CMD...: run CMD every 0.5 s until it succeeds; fail
# naming WHAT after SECONDS.
wait_for() {
    local secs=$1 what=$2 end; shift 2
    end=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$end" ] || fail "waited ${secs} s for $what"
        sleep 0.5
    done
}

need_root() { [ "$(id -u)" = 0 ] || skip "needs root (the engines run as root here)"; }

# ---- podman -----------------------------------------------------------------
# What makes podman work on this kind of machine (Debian 12 VM with hybrid
# cgroups, no systemd as PID 1, setrlimit denied): runc rather than crun,
# cgroupfs rather than systemd, and no default ulimits. A user on a stock host
# needs none of this.
podman_setup() {
    need_root
    command -v podman >/dev/null || skip "podman not installed (scripts/setup.sh installs it)"
    command -v runc >/dev/null || skip "runc not installed (scripts/setup.sh installs it)"
    cat >"$T/containers.conf" <<'EOF'
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
EOF
    export CONTAINERS_CONF=$T/containers.conf
    podman info >"$T/podman-info.log" 2>&1 || skip "podman cannot start here: $(tail -n 1 "$T/podman-info.log")"
    on_exit podman_cleanup
    # An empty image, imported and removed: whether the storage can write a
    # layer here. In a chroot it cannot ('remount /, flags: 0x44000: invalid
    # argument': its / is no mount point), found before minutes of debootstrap.
    tar -cf - -T /dev/null | podman import - "localhost/$TAG-probe:1" >"$T/podman-import.log" 2>&1 ||
        skip "podman cannot store an image here: $(tail -n 1 "$T/podman-import.log")"
    podman rmi "localhost/$TAG-probe:1" >/dev/null 2>&1 || true
    base_images
    podman run --rm --network host --label "$TAG" debian:12 true >"$T/podman-run.log" 2>&1 ||
        skip "podman cannot run a container here: $(tail -n 1 "$T/podman-run.log")"
}

podman_cleanup() {
    local ids c
    # A failed test shows what its containers said.
    if [ "$TEST_RC" != 0 ] && [ "$TEST_RC" != 77 ]; then
        for c in $(podman ps -a --format '{{.Names}}' --filter "label=$TAG" 2>/dev/null); do
            echo "== podman logs $c (last 30 lines)"
            podman logs --tail 30 "$c" 2>&1
        done
    fi
    ids=$(podman ps -aq --filter "label=$TAG" 2>/dev/null)
    # shellcheck disable=SC2086 # a list of ids
    [ -z "$ids" ] || podman rm -f -t 5 $ids >/dev/null 2>&1
    ids=$(podman volume ls -q --filter "label=$TAG" 2>/dev/null)
    # shellcheck disable=SC2086
    [ -z "$ids" ] || podman volume rm -f $ids >/dev/null 2>&1
    ids=$(podman network ls -q --filter "label=$TAG" 2>/dev/null)
    # shellcheck disable=SC2086
    [ -z "$ids" ] || podman network rm -f $ids >/dev/null 2>&1
}

# base_images: debian:12 and debian:12-slim, the Dockerfile's bases. No image
# registry is reachable from CI, so they are made from Debian's archive with
# debootstrap and imported once; later runs on the machine reuse them.
base_images() {
    if podman image exists debian:12 && podman image exists debian:12-slim; then
        return 0
    fi
    command -v debootstrap >/dev/null || skip "no debian:12 image and no debootstrap to make one (scripts/setup.sh installs it)"
    local start=$SECONDS
    log "making debian:12 with debootstrap (once per machine)"
    debootstrap --variant=minbase bookworm "$T/rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" \
        >"$T/debootstrap.log" 2>&1 || fail "debootstrap failed (log: $T/debootstrap.log)"
    rm -rf "$T"/rootfs/var/cache/apt/archives/*.deb "$T"/rootfs/var/lib/apt/lists/*
    tar -C "$T/rootfs" -c . | podman import - debian:12 >/dev/null || fail "podman import failed"
    podman tag debian:12 debian:12-slim
    rm -rf "$T/rootfs"
    log "debian:12 made in $((SECONDS - start)) s"
}

# build_image: the image of deploy/docker/Dockerfile, CPU flavour, as $IMAGE.
# FLAVOR is given explicitly: podman's builder (buildah 1.28) resolves a stage
# named through an ARG (FROM build-base-${FLAVOR}) only for build args given on
# the command line. --format docker keeps the HEALTHCHECK (OCI images drop it).
build_image() {
    local start=$SECONDS
    nice podman build --format docker --build-arg FLAVOR=cpu -f "$ROOT/deploy/docker/Dockerfile" \
        -t "$IMAGE" "$ROOT" >"$T/build.log" 2>&1 || { tail -n 30 "$T/build.log" >&2; fail "podman build failed"; }
    BUILD_S=$((SECONDS - start))
}

# run_c NAME ARGS...: podman run -d with the test's label, named $TAG-NAME.
run_c() {
    local name=$1; shift
    podman run -d --name "$TAG-$name" --label "$TAG" "$@" >/dev/null
}

# need_binaries: the host build of the programs exists (Slurm, systemd tests).
need_binaries() {
    local b
    for b in "$HEAD_BIN" "$NODE_BIN" "$CLI_BIN" "$TRAIN_BIN"; do
        [ -x "$b" ] || fail "$b not built"
    done
}
