#!/usr/bin/env bash
# deploy.image: deploy/docker/Dockerfile builds (CPU flavour) with podman from
# the debootstrapped Debian base, and the image is what the Dockerfile says:
# the four programs and libtroupe run, no build tools, the non-root user, tini
# as PID 1, the HEALTHCHECK kept. Prints the build time and the image's size
# (the build is cached layer by layer: a second run with an unchanged tree takes
# seconds; the first on a machine minutes).
# shellcheck source=tests/deploy/lib.sh
. "$(dirname "$0")/lib.sh"
podman_setup
build_image
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
base=$(podman image inspect --format '{{.Size}}' debian:12-slim)
cached=$(grep -c -- '--> Using cache' "$T/build.log" || true)
pass "image built in ${BUILD_S} s ($cached steps from the layer cache): $((size / 1000000)) MB, of which the debian:12-slim base $((base / 1000000)) MB"

# in_image CMD...: run CMD in a throwaway container of the image.
in_image() { podman run --rm --label "$TAG" --network none --no-healthcheck --entrypoint "" "$IMAGE" "$@"; }

for b in troupe-head troupe-node troupe; do
    v=$(in_image "$b" --version 2>&1) || fail "$b --version in the image: $v"
done
in_image troupe-train --make-data /tmp/data.tok >/dev/null 2>&1 || fail "troupe-train --make-data in the image"
pass "troupe-head, troupe-node, troupe ($v) and troupe-train run in the image"
in_image sh -c 'ldconfig -p | grep -q "libtroupe\.so\.0 "' || fail "libtroupe.so.0 not in the image's linker cache"
if in_image sh -c 'command -v cc || command -v cmake || test -d /src'; then
    fail "build tools or sources in the runtime image"
fi
pass "libtroupe.so.0 installed; no compiler, CMake or sources in the runtime stage"
[ "$(in_image id -u):$(in_image id -g)" = 10001:10001 ] || fail "the image's user is not 10001:10001"
[ "$(podman image inspect --format '{{json .Config.Entrypoint}}' "$IMAGE")" = '["/usr/bin/tini","--"]' ] ||
    fail "entrypoint: $(podman image inspect --format '{{json .Config.Entrypoint}}' "$IMAGE")"
hc=$(podman image inspect --format '{{json .Config.Healthcheck.Test}}' "$IMAGE")
[ "$hc" = '["CMD","troupe","--timeout","3000","status"]' ] || fail "HEALTHCHECK: $hc"
in_image test -d /opt/troupe/examples/demo || fail "the demo job is not in the image"
pass "user troupe (10001:10001), tini as entrypoint, HEALTHCHECK $hc, examples/demo in /opt/troupe"
