#!/usr/bin/env bash
# shellcheck disable=SC2154 # head_* and node_* are defined by the generated pod.sh
# deploy.k8s: the Kubernetes manifests render (kubectl kustomize where kubectl is
# installed; Debian has none, so otherwise the kustomization's resources are
# joined as kustomize would with no transformers), and their pods' containers
# run in podman from the rendered YAML: the image built by deploy.podman.image,
# each container's args, env, ConfigMap and Secret files at their mount paths,
# its securityContext (uid 10001, read-only root for the head, all capabilities
# dropped, no privilege escalation), its PVC and emptyDir volumes owned as the
# kubelet leaves them (root, group fsGroup). The head's readiness and liveness probe
# commands run in its container and pass; the agents (two DaemonSet pods, each in
# its own network namespace, as on two hosts) reach the head by its Service name
# over TLS with their client certificates (tls_client_auth: nodes) and a node
# credential minted as deploy/README.md says (kubectl exec ... troupe token
# create), and a two-node job started from the head pod's CLI SUCCEEDS with its
# workers on both. Simulated GPUs (TROUPE_FAKE_GPUS) are the one addition.
# shellcheck source=tests/deploy/lib.sh
. "$(dirname "$0")/lib.sh"
python3 -c 'import yaml' 2>/dev/null || fail "python3-yaml missing (scripts/setup.sh installs it)"

# ---- render -------------------------------------------------------------------
if command -v kubectl >/dev/null; then
    kubectl kustomize "$ROOT/deploy/k8s" >"$T/rendered.yaml" || fail "kubectl kustomize deploy/k8s"
    how="kubectl kustomize"
else
    python3 - "$ROOT/deploy/k8s" >"$T/rendered.yaml" <<'EOF' || fail "rendering the kustomization"
import sys, yaml
d = sys.argv[1]
k = yaml.safe_load(open(f"{d}/kustomization.yaml"))
assert set(k) <= {"apiVersion", "kind", "resources"}, f"kustomization uses {set(k)}: render it with kubectl"
docs = [x for r in k["resources"] for x in yaml.safe_load_all(open(f"{d}/{r}")) if x]
print(yaml.safe_dump_all(docs, sort_keys=False), end="")
EOF
    how="the kustomization's resources (no kubectl here)"
fi
kinds=$(python3 -c 'import sys, yaml; print(" ".join(sorted(d["kind"] + "/" + d["metadata"]["name"] for d in yaml.safe_load_all(open(sys.argv[1])) if d)))' "$T/rendered.yaml")
[ "$kinds" = "ConfigMap/troupe-config DaemonSet/troupe-node Namespace/troupe Secret/troupe-admin Secret/troupe-node Secret/troupe-tls Service/troupe-head StatefulSet/troupe-head" ] ||
    fail "rendered objects: $kinds"
pass "rendered with $how: $kinds"

# The pods' containers as podman arguments: pod.sh defines, per workload W
# (head, node), W_args (the container's args), W_env (NAME=VALUE; downward-API
# values as @fieldPath), W_mounts (volume:path:source, source = configMap:NAME:KEY...,
# secret:NAME:KEY..., emptyDir, pvc), W_user, W_readonly, W_caps_drop, W_ready, W_live.
python3 - "$T/rendered.yaml" >"$T/pod.sh" <<'EOF' || fail "reading the workloads"
import shlex, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
secret_keys = {d["metadata"]["name"]: sorted({**d.get("data", {}), **d.get("stringData", {})})
               for d in docs if d["kind"] == "Secret"}
def arr(name, items):
    print(f"{name}=(" + " ".join(shlex.quote(str(i)) for i in items) + ")")
for d in docs:
    if d["kind"] not in ("StatefulSet", "DaemonSet"):
        continue
    w = "head" if d["kind"] == "StatefulSet" else "node"
    pod = d["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    arr(f"{w}_args", c["args"])
    env = []
    for e in c.get("env", []):
        v = e["value"] if "value" in e else "@" + e["valueFrom"]["fieldRef"]["fieldPath"]
        env.append(f"{e['name']}={v}")
    arr(f"{w}_env", env)
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = []
    for m in c.get("volumeMounts", []):
        v = vols.get(m["name"])
        if v is None:
            src = "pvc"
        elif "configMap" in v:
            src = "configMap:" + v["configMap"]["name"] + ":" + ",".join(i["key"] for i in v["configMap"]["items"])
        elif "secret" in v:
            s = v["secret"]
            keys = [i["key"] for i in s.get("items", [])] or secret_keys[s["secretName"]]   # no items: every key
            src = "secret:" + s["secretName"] + ":" + ",".join(keys)
        else:
            src = "emptyDir"
        mounts.append(f"{m['name']}:{m['mountPath']}:{src}")
    arr(f"{w}_mounts", mounts)
    sc = {**pod.get("securityContext", {}), **c.get("securityContext", {})}
    print(f"{w}_user={sc['runAsUser']}:{sc['runAsGroup']}")
    print(f"{w}_readonly={'1' if sc.get('readOnlyRootFilesystem') else '0'}")
    print(f"{w}_noescalate={'1' if sc.get('allowPrivilegeEscalation') is False else '0'}")
    arr(f"{w}_caps_drop", sc.get("capabilities", {}).get("drop", []))
    for p in ("readinessProbe", "livenessProbe"):
        if p in c:
            arr(f"{w}_{p[:4]}", c[p]["exec"]["command"])
    if w == "head":
        print(f"head_service={d['spec']['serviceName']}.{d['metadata']['namespace']}.svc.cluster.local")
        print(f"head_pod={d['metadata']['name']}-0")
EOF
# shellcheck disable=SC1091 # made above
. "$T/pod.sh"
if [ "${#head_read[@]}" = 0 ] || [ "${#head_live[@]}" = 0 ]; then fail "the head has no exec probes"; fi
[ "$head_user $node_user" = "10001:10001 10001:10001" ] || fail "pods do not run as the image's user: $head_user $node_user"

podman_setup
build_image

# ---- Secrets and ConfigMap as files -----------------------------------------------
# troupe-tls from scripts/make-test-ca.sh, as secret.yaml suggests: the head's
# certificate for its Service name, a client certificate per agent.
"$ROOT/scripts/make-test-ca.sh" "$T/pki" "$head_service" -- node-a node-b >/dev/null
python3 - "$T/rendered.yaml" "$T/cm" <<'EOF'
import os, sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "ConfigMap":
        os.makedirs(sys.argv[2], exist_ok=True)
        for k, v in d["data"].items():
            open(f"{sys.argv[2]}/{k}", "w").write(v)
EOF
(umask 077; openssl rand -hex 32 >"$T/admin.token")
# secret_file NAME KEY [AGENT]: the file that Secret NAME's KEY holds here.
secret_file() {
    case $1:$2 in
        troupe-admin:admin.token) echo "$T/admin.token" ;;
        troupe-node:node.token) echo "$T/node.token" ;;
        troupe-tls:node.pem) echo "$T/pki/agent-$3.pem" ;;
        troupe-tls:node.key) echo "$T/pki/agent-$3.key" ;;
        troupe-tls:*) echo "$T/pki/$2" ;;
        *) fail "no stand-in for Secret $1 key $2" ;;
    esac
}
# pod_args W [AGENT]: podman run arguments for workload W's container.
pod_args() {
    local w=$1 agent=${2:-} m name path src kind ref keys k dir
    local -n mounts=${w}_mounts env=${w}_env caps=${w}_caps_drop
    local -n user=${w}_user ro=${w}_readonly noesc=${w}_noescalate
    ARGS=(--user "$user")
    [ "$ro" = 1 ] && ARGS+=(--read-only)
    [ "$noesc" = 1 ] && ARGS+=(--security-opt no-new-privileges)
    for k in "${caps[@]}"; do ARGS+=(--cap-drop "$k"); done
    for m in "${mounts[@]}"; do
        IFS=: read -r name path src <<<"$m"
        IFS=: read -r kind ref keys <<<"$src"
        case $kind in
            configMap|secret)
                # A projected volume: a folder holding just the listed keys.
                dir=$T/vol-$w${agent:+-$agent}-$name
                mkdir -p "$dir"
                for k in ${keys//,/ }; do
                    if [ "$kind" = configMap ]; then cp "$T/cm/$k" "$dir/$k"; else cp "$(secret_file "$ref" "$k" "$agent")" "$dir/$k"; fi
                done
                # defaultMode 0440 with fsGroup 10001: readable by the pod's group.
                chgrp -R 10001 "$dir" && chmod 0440 "$dir"/* && chmod 0755 "$dir"
                ARGS+=(-v "$dir:$path:ro") ;;
            pvc|emptyDir)
                # As the kubelet makes them with fsGroup 10001: root's, group
                # 10001, setgid and group-writable (an emptyDir: writable by all).
                dir=$T/vol-$w${agent:+-$agent}-$name
                mkdir -p "$dir" && chown 0:10001 "$dir"
                if [ "$kind" = pvc ]; then chmod 2775 "$dir"; else chmod 2777 "$dir"; fi
                ARGS+=(-v "$dir:$path") ;;
        esac
    done
    for k in "${env[@]}"; do
        case ${k#*=} in
            @spec.nodeName) ARGS+=(-e "${k%%=*}=$agent") ;;
            @status.hostIP) ARGS+=(-e "${k%%=*}=$(agent_ip "$agent")") ;;
            @*) fail "no stand-in for downward-API field ${k#*=}" ;;
            *) ARGS+=(-e "$k") ;;
        esac
    done
}

# ---- the pods -----------------------------------------------------------------------
# A network of its own; the head answers to its Service's DNS name, as agents
# with dnsPolicy ClusterFirstWithHostNet see it. Agents get fixed addresses: the
# downward API's status.hostIP must be known before they start.
sub=$((100 + RANDOM % 100)).$((RANDOM % 250))
NET=$TAG-net
podman network create --label "$TAG" --subnet "10.$sub.0/24" "$NET" >/dev/null || fail "podman network create"
agent_ip() { case $1 in node-a) echo "10.$sub.11" ;; node-b) echo "10.$sub.12" ;; esac; }

pod_args head
run_c head --network "$NET" --network-alias "$head_service" --hostname "$head_pod" "${ARGS[@]}" "$IMAGE" "${head_args[@]}"
wait_for 60 "the head pod's readinessProbe (${head_read[*]})" podman exec "$TAG-head" "${head_read[@]}"
podman exec "$TAG-head" "${head_live[@]}" >/dev/null || fail "the head pod's livenessProbe (${head_live[*]})"
status=$(podman exec "$TAG-head" troupe status)
grep -q "^head .*tls+tcp://127.0.0.1:7770" <<<"$status" || fail "the probes do not reach the head over TLS"
pass "head pod (${head_args[*]}; read-only root, uid 10001): readinessProbe and livenessProbe (${head_read[*]}) pass, over TLS"

# deploy/k8s/secret.yaml: kubectl -n troupe exec troupe-head-0 -- troupe token create --scope node --max-nodes 1000 --ttl 365d
(umask 077; podman exec "$TAG-head" troupe token create --scope node --max-nodes 1000 --ttl 365d >"$T/node.token") || fail "minting the node credential"
for a in node-a node-b; do
    pod_args node "$a"
    run_c "$a" --network "$NET" --ip "$(agent_ip "$a")" --hostname "$a" --no-healthcheck --stop-timeout 30 \
        -e TROUPE_FAKE_GPUS=8xH200:141GB "${ARGS[@]}" "$IMAGE" "${node_args[@]}"
done
alive2() { [ "$(podman exec "$TAG-head" troupe -o json nodes --alive | jq '[.nodes[] | select(.state == "ALIVE")] | length')" = 2 ]; }
wait_for 60 "both DaemonSet agents ALIVE (TLS, client certificates, node credential)" alive2
podman exec "$TAG-head" troupe -o json nodes >"$T/nodes.json"
pass "agents registered over TLS as $(jq -c '[.nodes[] | {name, address}]' "$T/nodes.json")"

# A two-node job from the head pod's CLI; workers start in the job file's folder
# (/tmp, present in every container).
podman exec -i "$TAG-head" sh -c 'cat >/tmp/spread.yaml' <<'EOF'
name: spread
cluster: {nodes: [8, 8]}
groups:
  - name: w
    workers: 2
    resources: {gpu: 8}
    strategy: STRICT_SPREAD
    command: [sh, -c, 'echo "rank $RANK on $TROUPE_NODE master $MASTER_ADDR head $TROUPE_HEAD ca ${TROUPE_TLS_CA:-none}"']
EOF
podman exec "$TAG-head" troupe submit /tmp/spread.yaml >"$T/spread.log" 2>&1 || fail "the two-node job did not succeed (spread.log)"
for a in node-a node-b; do
    grep -Eq "rank [01] on $a master 10\.$sub\.1[12] head tls\+tcp://$head_service:7770 ca /" "$T/spread.log" ||
        fail "no worker on $a with the agents' address as MASTER_ADDR and the head's TLS URL: $(grep rank "$T/spread.log")"
done
pass "two-node job SUCCEEDED from the head pod's CLI: a worker on each agent, MASTER_ADDR $(agent_ip node-a) or $(agent_ip node-b), TLS to the head"
