#!/usr/bin/env bash
# check.sh - validate deploy/ on a machine without a container engine or cluster.
#
#   deploy/check.sh            # static checks, and the health commands against a live head (~15 s)
#
# Uses the binaries of BUILD (default: build-deploy, built here when missing with
# CUDA off). Every check prints PASS, FAIL or SKIP (with why); exit 1 on any FAIL.
# The engines themselves (podman, podman-compose, Slurm, systemd's tools) run the
# files in tests/deploy/ (ctest label deploy); deploy/README.md says what runs where.
# shellcheck disable=SC2015 # `test && PASS || FAIL` is meant: PASS never fails
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
D=$ROOT/deploy
BUILD=${BUILD:-$ROOT/build-deploy}

pass=0 fail=0 skip=0
PASS() { printf 'PASS  %s\n' "$*"; pass=$((pass + 1)); }
FAIL() { printf 'FAIL  %s\n' "$*"; fail=$((fail + 1)); }
SKIP() { printf 'SKIP  %s\n' "$*"; skip=$((skip + 1)); }
# ok NAME CMD...: PASS when CMD exits 0, else FAIL with its output.
ok() {
    local name=$1 out; shift
    if out=$("$@" 2>&1); then PASS "$name"; else FAIL "$name"; printf '%s\n' "$out" | tail -n 15 | sed 's/^/      /'; fi
}

TMP=$(mktemp -d /tmp/troupe-deploy-check.XXXXXX)
BG=()
cleanup() {
    for p in "${BG[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -f "$D/compose/.check-compose.yaml"
    [ -n "${MADE_SECRET:-}" ] && rm -f "$D/compose/admin.token"
    rm -rf "$TMP"
}
trap cleanup EXIT

# ---- binaries -------------------------------------------------------------------
HEAD=$BUILD/server/troupe-head NODE=$BUILD/worker/node/troupe-node
CLI=$BUILD/client/troupe TRAIN=$BUILD/worker/train/troupe-train
if [ ! -x "$HEAD" ] || [ ! -x "$NODE" ] || [ ! -x "$CLI" ] || [ ! -x "$TRAIN" ]; then
    echo "== building troupe in $BUILD (CUDA off)"
    cmake -S . -B "$BUILD" -G Ninja -DTROUPE_WITH_CUDA=OFF -DTROUPE_BENCH_GRPC=OFF \
        -DTROUPE_TESTS=OFF -DTROUPE_BENCHMARKS=OFF >/dev/null &&
        cmake --build "$BUILD" --target troupe-head troupe-node troupe-cli troupe-train >/dev/null ||
        { echo "check: build failed"; exit 1; }
fi
BIN=$TMP/bin
mkdir -p "$BIN"
ln -s "$HEAD" "$NODE" "$CLI" "$TRAIN" "$BIN/"
export PATH="$BIN:$PATH"
unset TROUPE_HEAD TROUPE_TOKEN TROUPE_NAME TROUPE_LABELS TROUPE_STATE_DIR TROUPE_FAKE_GPUS

echo "== shell scripts"
for f in deploy/check.sh deploy/slurm/troupe.sbatch tests/deploy/*.sh; do
    ok "bash -n $f" bash -n "$f"
    if command -v shellcheck >/dev/null; then ok "shellcheck $f" shellcheck -x "$f"; else SKIP "shellcheck $f (not installed)"; fi
done

echo "== YAML well-formedness"
if python3 -c 'import yaml' 2>/dev/null; then
    for f in deploy/compose/compose.yaml deploy/k8s/*.yaml deploy/systemd/etc-troupe/*.yaml; do
        ok "yaml $f" python3 -c 'import sys, yaml; list(yaml.safe_load_all(open(sys.argv[1])))' "$f"
    done
else
    SKIP "YAML parse (python3 yaml missing: pip install pyyaml); configs are still parsed by troupe below"
fi

# ---- settings files and command lines against the real binaries ---------------------
echo "== shipped configs (--check-config; unknown keys are errors)"
# (the unit adds --tls-key from its LoadCredential; the key is not read by --check-config)
ok "troupe-head --check-config systemd/etc-troupe/head.yaml (+ the unit's --tls-key)" "$HEAD" --check-config \
    --config deploy/systemd/etc-troupe/head.yaml --tls-key /etc/troupe/tls/head.key
grep -q '^listen: tls+tcp://' deploy/systemd/etc-troupe/head.yaml && grep -q '^head: tls+tcp://' deploy/systemd/etc-troupe/node.yaml &&
    grep -q '^tls_client_auth: nodes' deploy/systemd/etc-troupe/head.yaml && grep -q '^tls_cert: ' deploy/systemd/etc-troupe/node.yaml &&
    PASS "systemd configs: TLS with agent client certificates (tls_client_auth nodes)" || FAIL "systemd configs: TLS"
ok "troupe-node --check-config systemd/etc-troupe/node.yaml" "$NODE" --check-config --config deploy/systemd/etc-troupe/node.yaml
# An unknown key must be refused, or the checks above prove nothing.
cp deploy/systemd/etc-troupe/head.yaml "$TMP/bad.yaml" && echo 'no_such_key: 1' >>"$TMP/bad.yaml"
if "$HEAD" --check-config --config "$TMP/bad.yaml" >/dev/null 2>&1; then FAIL "an unknown key is refused"; else PASS "an unknown key is refused"; fi
if python3 -c 'import yaml' 2>/dev/null; then
    python3 - "$TMP" <<'EOF' || FAIL "extract k8s ConfigMap"
import sys, yaml
for d in yaml.safe_load_all(open("deploy/k8s/configmap.yaml")):
    for k, v in d["data"].items():
        open(f"{sys.argv[1]}/k8s-{k}", "w").write(v)
EOF
    ok "troupe-head --check-config k8s ConfigMap head.yaml" "$HEAD" --check-config --config "$TMP/k8s-head.yaml"
    # With the environment the DaemonSet gives the agent (downward API values faked).
    ok "troupe-node --check-config k8s ConfigMap node.yaml + DaemonSet env" \
        env TROUPE_NAME=gpu-node-1 TROUPE_ADDRESS=10.0.0.11 TROUPE_LABELS=gpu=H200 TROUPE_TOKEN=x \
        "$NODE" --check-config --config "$TMP/k8s-node.yaml"
fi
# systemd: ExecStart/ExecStartPre with /etc/troupe mapped to the shipped copies and
# the LoadCredential files to stand-ins (systemd's ${CREDENTIALS_DIRECTORY}).
mkdir -p "$TMP/creds" && (umask 077; echo check-admin >"$TMP/creds/admin.token"; echo check-node >"$TMP/creds/node.token")
for u in head node; do
    grep -q "^LoadCredential=$([ $u = head ] && echo admin || echo node).token:/etc/troupe/" "deploy/systemd/troupe-$u.service" &&
        ! grep -q '^EnvironmentFile=' "deploy/systemd/troupe-$u.service" &&
        PASS "troupe-$u.service takes its credential from a file (LoadCredential), not the environment" ||
        FAIL "troupe-$u.service credential"
    grep -E '^ExecStart(Pre)?=' "deploy/systemd/troupe-$u.service" | while IFS='=' read -r key line; do
        line=${line//\/usr\/local\/bin\//}
        line=${line//\/etc\/troupe\//deploy/systemd/etc-troupe/}
        line=${line//\$\{CREDENTIALS_DIRECTORY\}/$TMP/creds}
        # shellcheck disable=SC2086 # the unit's own word splitting
        set -- $line
        [[ " $* " == *" --check-config "* ]] || set -- "$@" --check-config
        ok "troupe-$u.service $key: $*" "$@"
    done
done
# Dockerfile CMD and compose/k8s commands: the flags exist and parse.
cmd=$(sed -n 's/^CMD \[\(.*\)\]$/\1/p' deploy/docker/Dockerfile | tr -d '",')
# shellcheck disable=SC2086
ok "Dockerfile CMD: $cmd" $cmd --check-config
if python3 -c 'import yaml' 2>/dev/null; then
    python3 - >"$TMP/cmds" <<'EOF'
import shlex, yaml
c = yaml.safe_load(open("deploy/compose/compose.yaml"))
for name, s in c["services"].items():
    cmd = s.get("command")
    if cmd and cmd[0] in ("troupe-head", "troupe-node"):
        env = dict(s.get("environment") or {})
        print("compose:" + name, " ".join(f"{k}={shlex.quote(str(v))}" for k, v in env.items()), shlex.join(cmd), sep="|")
for f in ("deploy/k8s/head.yaml", "deploy/k8s/node-daemonset.yaml"):
    for d in yaml.safe_load_all(open(f)):
        if d.get("kind") in ("StatefulSet", "DaemonSet"):
            for ct in d["spec"]["template"]["spec"]["containers"]:
                args = [a.replace("/etc/troupe/", "TMPDIR/k8s-") for a in ct["args"]]
                print("k8s:" + d["metadata"]["name"], "TROUPE_NAME=n1 TROUPE_ADDRESS=10.0.0.1 TROUPE_LABELS=gpu=H200", shlex.join(args), sep="|")
EOF
    mkdir -p "$TMP/creds" "$TMP/secrets"
    [ -f "$TMP/creds/node.token" ] || (umask 077; echo check-node >"$TMP/creds/node.token")
    (umask 077; echo check-token >"$TMP/secrets/admin_token")
    while IFS='|' read -r name envs args; do
        args=${args//TMPDIR\//$TMP/}
        args=${args//\/creds\//$TMP/creds/}                 # compose's volume and secret paths
        envs=${envs//\/run\/secrets\//$TMP/secrets/}
        # shellcheck disable=SC2086 # lists of words made above
        ok "$name: $args" env $envs $args --check-config
    done <"$TMP/cmds"
fi

echo "== systemd units"
if command -v systemd-analyze >/dev/null; then
    mkdir -p "$TMP/units"
    for u in deploy/systemd/*.service; do
        sed -e "s#/usr/local/bin/troupe-head#$HEAD#g" -e "s#/usr/local/bin/troupe-node#$NODE#g" "$u" >"$TMP/units/${u##*/}"
    done
    ok "systemd-analyze verify (binary paths pointed at $BUILD)" systemd-analyze verify "$TMP"/units/*.service
    for u in head node; do
        s=$(systemd-analyze security --offline=true "$TMP/units/troupe-$u.service" 2>/dev/null | sed -n 's/.*Overall exposure level for [^:]*: //p')
        [ -n "$s" ] && PASS "systemd-analyze security troupe-$u.service: $s" || SKIP "systemd-analyze security troupe-$u.service"
    done
    grep -q '^KillMode=mixed' deploy/systemd/troupe-node.service && PASS "troupe-node.service KillMode=mixed" || FAIL "troupe-node.service KillMode=mixed"
    tss=$(sed -n 's/^TimeoutStopSec=//p' deploy/systemd/troupe-node.service)
    grace=$(sed -n 's/^stop_grace_ms: *\([0-9]*\).*/\1/p' deploy/systemd/etc-troupe/node.yaml)
    if [ "$((tss * 1000))" -gt "$((grace + 2000 + 5000))" ]; then
        PASS "TimeoutStopSec=${tss}s > stop_grace_ms ${grace} + 2 s agent wait + 5 s margin"
    else
        FAIL "TimeoutStopSec=${tss}s too small for stop_grace_ms ${grace}"
    fi
else
    SKIP "systemd-analyze not installed (apt-get install systemd)"
fi

echo "== compose"
if [ ! -f "$D/compose/admin.token" ]; then echo check-token >"$D/compose/admin.token"; MADE_SECRET=1; fi
# The top-level name: key is Compose Specification; docker-compose v1 does not know it.
grep -v '^name:' "$D/compose/compose.yaml" >"$D/compose/.check-compose.yaml"
if docker compose version >/dev/null 2>&1; then
    ok "docker compose config" docker compose -f "$D/compose/compose.yaml" --profile cli config -q
else
    SKIP "docker compose (v2 plugin not installed here)"
fi
if command -v docker-compose >/dev/null; then
    ok "docker-compose (v1) config, name: removed" docker-compose -f "$D/compose/.check-compose.yaml" --profile cli config -q
    svcs=$(docker-compose -f "$D/compose/.check-compose.yaml" --profile cli config --services 2>/dev/null | sort | tr '\n' ' ')
    [ "$svcs" = "cli head node-a node-b " ] && PASS "compose services: $svcs" || FAIL "compose services: $svcs"
else
    SKIP "docker-compose v1 (apt-get install docker-compose) not installed"
fi

echo "== kubernetes"
if command -v kubectl >/dev/null; then
    ok "kubectl kustomize deploy/k8s" kubectl kustomize deploy/k8s
else
    SKIP "kubectl not installed"
fi
SKIP "kubectl apply --dry-run (needs an API server for its schema; none here)"
if python3 -c 'import yaml' 2>/dev/null; then
    ok "k8s structure (kinds, namespaces, volume and Secret references, probes)" python3 - <<'EOF'
import glob, yaml
docs = [d for f in sorted(glob.glob("deploy/k8s/*.yaml")) if not f.endswith("kustomization.yaml")
        for d in yaml.safe_load_all(open(f)) if d]
names = {(d["kind"], d["metadata"]["name"]) for d in docs}
for d in docs:
    assert d.get("apiVersion") and d.get("kind") and d["metadata"].get("name"), d
    if d["kind"] != "Namespace":
        assert d["metadata"].get("namespace") == "troupe", d["metadata"]
    if d["kind"] in ("StatefulSet", "DaemonSet"):
        spec = d["spec"]
        assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
        pod = spec["template"]["spec"]
        vols = {v["name"] for v in pod.get("volumes", [])}
        vols |= {v["metadata"]["name"] for v in spec.get("volumeClaimTemplates", [])}
        for c in pod["containers"]:
            for m in c.get("volumeMounts", []):
                assert m["name"] in vols, (c["name"], m["name"])
            for e in c.get("envFrom", []):
                assert ("Secret", e["secretRef"]["name"]) in names
            # Credentials come from files, never from environment values.
            assert not any(e["name"] == "TROUPE_TOKEN" for e in c.get("env", [])), c["name"]
            assert not c.get("envFrom"), ("credentials as env", c["name"])
            assert any(e["name"] == "TROUPE_TOKEN_FILE" for e in c.get("env", [])), c["name"]
        for v in pod.get("volumes", []):
            if "configMap" in v:
                assert ("ConfigMap", v["configMap"]["name"]) in names
            if "secret" in v:
                assert ("Secret", v["secret"]["secretName"]) in names, v
        # TLS: the agents' pods never get the head's key.
        for v in pod.get("volumes", []):
            if d["kind"] == "DaemonSet" and v.get("secret", {}).get("secretName") == "troupe-tls":
                assert all(i["key"] != "head.key" for i in v["secret"].get("items", [{"key": "head.key"}])), v
        if d["kind"] == "StatefulSet":
            assert spec["replicas"] == 1
            c = pod["containers"][0]
            assert c["readinessProbe"]["exec"]["command"][0] == "troupe"
            assert c["livenessProbe"]["exec"]["command"][0] == "troupe"
            assert ("Service", spec["serviceName"]) in names
        if d["kind"] == "DaemonSet":
            assert pod["nodeSelector"] and pod["terminationGracePeriodSeconds"] > 12
cm = [d for d in docs if d["kind"] == "ConfigMap"][0]["data"]
assert "listen: tls+tcp://" in cm["head.yaml"] and "tls_client_auth: nodes" in cm["head.yaml"], "head.yaml TLS"
assert "head: tls+tcp://" in cm["node.yaml"] and "tls_cert:" in cm["node.yaml"], "node.yaml TLS"
EOF
fi

echo "== Dockerfile (static: no engine here)"
for b in troupe-head troupe-node troupe troupe-train; do
    grep -q "build/[a-z/]*/$b\b" deploy/docker/Dockerfile && PASS "Dockerfile copies $b from the build tree" || FAIL "Dockerfile copies $b"
done
for p in server/troupe-head worker/node/troupe-node client/troupe worker/train/troupe-train client/libtroupe.so; do
    if grep -q "build/$p" deploy/docker/Dockerfile; then
        [ -e "$BUILD/$p" ] && PASS "build path build/$p exists in a CMake build" || FAIL "build path build/$p missing in $BUILD"
    fi
done
# Every shared library the binaries load comes from a runtime package (or its
# Depends), from libc6, or is libtroupe (copied).
if grep -q '^TROUPE_WITH_CUDA:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null &&
    grep -qE '^CMAKE_CUDA_COMPILER:[A-Z]*=/' "$BUILD/CMakeCache.txt"; then
    # troupe-train there links CUDA and NCCL, which the CPU image has not.
    SKIP "runtime libraries: $BUILD has the CUDA parts, the CPU image does not (deploy.podman.image runs the image's programs)"
elif command -v dpkg >/dev/null; then
    pkgs=$(sed -n '/^FROM runtime-base/,$p' deploy/docker/Dockerfile | sed -n '/apt-get install/,/rm -rf/p' |
        tr -s ' ' '\n' | grep -E '^(lib[a-z0-9.+-]*|tini)$' | sort -u)
    deps=$(for p in $pkgs; do dpkg-query -W -f='${Depends}\n' "$p" 2>/dev/null; done | tr ',' '\n' | sed 's/ *(.*//; s/^ *//; s/ *|.*//' | sort -u)
    missing=""
    for lib in $(ldd "$HEAD" "$NODE" "$CLI" "$TRAIN" | awk '/=>/ {print $3}' | sort -u); do
        case $lib in *libtroupe.so*) continue ;; esac
        owner=$(dpkg -S "$lib" 2>/dev/null | head -n1 | cut -d: -f1)
        [ -z "$owner" ] && owner=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | head -n1 | cut -d: -f1)
        # shellcheck disable=SC2086 # word lists
        case " libc6 "$(printf '%s ' $pkgs $deps) in *" $owner "*) ;; *) missing="$missing $lib($owner)" ;; esac
    done
    [ -z "$missing" ] && PASS "runtime packages cover every library the binaries load" || FAIL "libraries not in the runtime stage:$missing"
fi

# ---- live checks: health commands against a real head -----------------------------
echo "== health checks against a running head and agent"
PORT=$((30000 + RANDOM % 20000))
export TROUPE_HEAD=tcp://127.0.0.1:$PORT TROUPE_TOKEN=check-token
"$HEAD" --listen "$TROUPE_HEAD" --state-dir "$TMP/head" >"$TMP/head.log" 2>&1 &
BG+=($!)
for _ in $(seq 200); do troupe status >/dev/null 2>&1 && break; sleep 0.1; done   # 20 s: a loaded machine
troupe status >/dev/null 2>&1 || { FAIL "troupe-head on $TROUPE_HEAD did not answer within 20 s; its log:"; tail -n 15 "$TMP/head.log" | sed 's/^/      /'; }
hc=$(sed -n 's/^  CMD \[\(.*\)\]$/\1/p' deploy/docker/Dockerfile | tr -d '",')
# shellcheck disable=SC2086
ok "Dockerfile HEALTHCHECK ($hc) with the head up" $hc
if TROUPE_TOKEN=wrong $hc >/dev/null 2>&1; then FAIL "HEALTHCHECK fails with a wrong token"; else PASS "HEALTHCHECK fails with a wrong token"; fi
ok "k8s probe: troupe --timeout 3000 status" troupe --timeout 3000 status
# TROUPE_SHARED_UID as compose's x-node environment sets it (its agents run as the
# image's user troupe; here, as root, they would otherwise give workers uids of their
# own, and the demo's workers could not enter this script's 0700 temp dir).
TROUPE_SHARED_UID=true "$NODE" --name node-a --fake-gpus 8xH200:141GB --state-dir "$TMP/node-a" >"$TMP/node.log" 2>&1 &
BG+=($!)
for _ in $(seq 50); do troupe -o json nodes --alive 2>/dev/null | grep -q '"name":"node-a"' && break; sleep 0.1; done
# compose's mint service (its entrypoint script, paths mapped): a node credential in
# the creds volume, minted once and kept while it works; the agents use only that.
if python3 -c 'import yaml' 2>/dev/null; then
    python3 - "$TMP" <<'EOF2'
import shlex, sys, yaml
c = yaml.safe_load(open("deploy/compose/compose.yaml"))
open(f"{sys.argv[1]}/mint.sh", "w").write(c["services"]["mint"]["entrypoint"][4].replace("$$", "$"))
hc = c["x-node"]["healthcheck"]["test"]
assert hc[0] == "CMD-SHELL" and len(hc) == 2, hc
open(f"{sys.argv[1]}/node-hc", "w").write("\n".join(shlex.split(hc[1])) + "\n")
EOF2
    rm -f "$TMP/creds/node.token"
    sed "s#/creds/#$TMP/creds/#g" "$TMP/mint.sh" >"$TMP/mint-local.sh"
    ok "compose mint: mints a node credential" env -u TROUPE_TOKEN TROUPE_TOKEN_FILE="$TMP/secrets/admin_token" sh "$TMP/mint-local.sh"
    first=$(cat "$TMP/creds/node.token" 2>/dev/null)
    [[ $first == tr1.n.* ]] && [ "$(stat -c %a "$TMP/creds/node.token")" = 600 ] &&
        PASS "compose mint: node.token is a node credential, 0600" || FAIL "compose mint: node.token '$first'"
    ok "compose mint again (kept while it works)" env -u TROUPE_TOKEN TROUPE_TOKEN_FILE="$TMP/secrets/admin_token" sh "$TMP/mint-local.sh"
    [ "$(cat "$TMP/creds/node.token")" = "$first" ] && PASS "compose mint: the working credential was kept" || FAIL "compose mint re-minted"
    mapfile -t nhc <"$TMP/node-hc"
    nhc=("${nhc[@]//\/creds\//$TMP/creds/}")
    ok "compose node healthcheck (${nhc[*]}) with the minted node credential" env -u TROUPE_TOKEN "${nhc[@]}"
    (umask 077; echo tr1.n.9.bogus >"$TMP/creds/bogus.token")
    if env -u TROUPE_TOKEN "${nhc[@]/node.token/bogus.token}" >/dev/null 2>&1; then
        FAIL "compose node healthcheck fails with a wrong credential"
    else
        PASS "compose node healthcheck fails with a wrong credential"
    fi
fi
# The compose topology without containers: node-b with compose's own command line
# joins node-a, then the cli service's `demo` entrypoint script runs with its
# container paths (/opt/troupe/examples, /jobs) mapped to this tree and a temp dir.
if python3 -c 'import yaml' 2>/dev/null; then
    python3 - "$TMP" <<'EOF2'
import sys, yaml
c = yaml.safe_load(open("deploy/compose/compose.yaml"))
open(f"{sys.argv[1]}/node-b.args", "w").write("\n".join(c["services"]["node-b"]["command"][1:]) + "\n")
open(f"{sys.argv[1]}/cli.sh", "w").write(c["services"]["cli"]["entrypoint"][4].replace("$$", "$"))
EOF2
    mapfile -t nb <"$TMP/node-b.args"
    nb=("${nb[@]//\/creds\//$TMP/creds/}")   # the minted node credential (mint above)
    env -u TROUPE_TOKEN TROUPE_SHARED_UID=true "$NODE" "${nb[@]}" --state-dir "$TMP/node-b" >"$TMP/node-b.log" 2>&1 &
    BG+=($!)
    for _ in $(seq 50); do troupe -o json nodes --alive 2>/dev/null | grep -q '"name":"node-b"' && break; sleep 0.1; done
    gpus=$(troupe -o json status | sed -n 's/.*"gpus":{"total":\([0-9]*\).*/\1/p')
    [ "$gpus" = 24 ] && PASS "compose topology: node-a (8) + node-b (16, compose's command) = 24 GPUs" || FAIL "compose topology: $gpus GPUs"
    mkdir -p "$TMP/jobs-vol"
    sed -e "s#/opt/troupe/examples/demo#$ROOT/examples/demo#g" -e "s#/jobs/#$TMP/jobs-vol/#g" "$TMP/cli.sh" >"$TMP/cli-local.sh"
    if sh -c "$(cat "$TMP/cli-local.sh")" cli demo >"$TMP/cli-demo.out" 2>&1 &&
        [ "$(grep -c 'policy-[01]\] step=60/60' "$TMP/cli-demo.out")" = 2 ]; then
        PASS "compose cli 'demo' entrypoint: demo job SUCCEEDED, both policy workers reached step 60"
    else
        FAIL "compose cli 'demo' entrypoint"; tail -n 15 "$TMP/cli-demo.out" | sed 's/^/      /'
    fi
    ok "compose cli default command path (sh -c ... cli troupe status)" sh -c "$(cat "$TMP/cli-local.sh")" cli troupe status
fi
for ((i = ${#BG[@]} - 1; i >= 0; i--)); do kill -TERM "${BG[$i]}"; wait "${BG[$i]}" 2>/dev/null; done
BG=()
unset TROUPE_HEAD TROUPE_TOKEN

echo
echo "check: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
