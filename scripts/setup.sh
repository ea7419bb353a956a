#!/usr/bin/env bash
# setup.sh - install what troupe needs on Debian 12 (run as root; idempotent).
# --demo: only what the build and scripts/demo.sh need; default: the tests' packages too.
# Installs only packages that are missing, so a second run is quick and offline.
set -euo pipefail

# What the demo needs: the build and its libraries, jq (demo.sh reads the CLI's
# JSON). `scripts/setup.sh --demo` installs only these (scripts/demo.sh).
DEMO_PKGS=(build-essential cmake ninja-build pkg-config procps
      libnng-dev libprotobuf-c-dev protobuf-c-compiler libyaml-dev libsqlite3-dev
      libmbedtls-dev  # mbedTLS: TLS diagnosis (common/rpc_tls.c)
      jq)
# What the test command adds (scripts/test.sh runs the default: everything).
TEST_PKGS=(git libcmocka-dev clang libclang-rt-14-dev
      llvm-14   # llvm-symbolizer: the sanitizer run names frames with it, and tests/lsan.supp matches those names
      util-linux  # unshare: the tests that mount (a tmpfs, network namespaces) do it in a mount namespace of their own
      openssl   # scripts/make-test-ca.sh
      python3   # python3: the cut proxy of the fencing tests (tests/integration/cutproxy.py), the HTTP slow-client test
      prometheus chromium  # promtool checks /metrics and prometheus scrapes it, headless chromium loads the dashboard (integration.http)
      gdb   # stacks of a hung test's processes (tests/integration/lib.sh's watchdog)
      curl iproute2 sqlite3   # curl: the HTTP tests; ip: the network-namespace test; sqlite3: state_dir's stored-counter case
                              # (none is in a bare Debian 12 image; without them those checks skipped or failed)
      # The deploy tests (tests/deploy): podman with runc (crun fails on hybrid cgroups),
      # bridge networks with DNS (CNI dnsname plugin), podman-compose, debootstrap for
      # the base image (no registry is reachable), Slurm and munge, systemd's tools,
      # shellcheck and PyYAML for deploy/check.sh.
      podman runc golang-github-containernetworking-plugin-dnsname podman-compose debootstrap
      slurm-wlm munge systemd shellcheck python3-yaml
      python3-torch python3-venv   # troupe.torch's test (integration.python.torch: gloo on CPU, run with
                                   # /usr/bin/python3) and `pip install ./python` into a venv. Large: PyTorch 1.13 and
                                   # its 166 dependencies are about 600 MiB installed; without it that test is skipped (77)
      python3-wheel)  # bdist_wheel: pip's offline build of ./python (--no-build-isolation) needs it; a venv has none
case "${1:-}" in
--demo) PKGS=("${DEMO_PKGS[@]}") ;;
"") PKGS=("${DEMO_PKGS[@]}" "${TEST_PKGS[@]}") ;;
*) echo "usage: scripts/setup.sh [--demo]   (--demo: only what scripts/demo.sh needs; default: everything the tests use too)" >&2
   exit 2 ;;
esac
# The RPC benchmark's gRPC peer: only with TROUPE_SETUP_BENCH=1 (large).
if [ "${TROUPE_SETUP_BENCH:-0}" = 1 ]; then
    PKGS+=(g++ libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler)
    PKGS+=(python3-torch)  # PyTorch 1.13: TCPStore beside bench/rdzv, gloo all-reduce beside bench/coll
fi

missing=()
for p in "${PKGS[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all packages present"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "setup: missing packages: ${missing[*]}" >&2
    echo "setup: run as root (or: sudo apt-get install ${missing[*]})" >&2
    exit 1
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
