#!/usr/bin/env bash
# setup.sh - install what troupe needs on Debian 12 (run as root; idempotent).
# Installs only packages that are missing, so a second run is quick and offline.
set -euo pipefail

PKGS=(build-essential cmake ninja-build pkg-config git procps
      libnng-dev libprotobuf-c-dev protobuf-c-compiler libyaml-dev libsqlite3-dev
      libcmocka-dev jq clang libclang-rt-14-dev
      libmbedtls-dev openssl  # mbedTLS: TLS diagnosis (common/rpc_tls.c); openssl: scripts/make-test-ca.sh
      python3   # python3: the cut proxy of the fencing tests (tests/integration/cutproxy.py), the HTTP slow-client test
      prometheus chromium  # promtool checks /metrics, headless chromium loads the dashboard (integration.http)
      gdb   # stacks of a hung test's processes (tests/integration/lib.sh's watchdog)
      curl iproute2 sqlite3  # curl: the HTTP tests; ip: the network-namespace test; sqlite3: state_dir's stored-counter case
                             # (none is in a bare Debian 12 image; without them those checks skipped or failed)
      python3-torch python3-venv)  # tests only: troupe.torch's test (integration.python.torch: gloo on CPU, run with
                                   # /usr/bin/python3) and `pip install ./python` into a venv. Large: PyTorch 1.13 and
                                   # its 166 dependencies are about 600 MiB installed; without it that test is skipped (77)
# The RPC benchmark's gRPC peer: only with TROUPE_SETUP_BENCH=1 (large).
if [ "${TROUPE_SETUP_BENCH:-0}" = 1 ]; then
    PKGS+=(g++ libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler)
    PKGS+=(python3-torch)  # PyTorch 1.13: TCPStore beside bench/rdzv, gloo all-reduce beside bench/coll
fi

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
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
