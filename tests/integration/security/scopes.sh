#!/usr/bin/env bash
# Every method of the head against every kind of credential, through a real
# head: the decision for each method is written down here (SCOPE below), and
# the test fails when the service or the head's method tables (server/*.c)
# gain a method this table has no decision for, or lose one it has.
#
# Credentials: none, a wrong one, admin, user, node, and the worker
# credential of job A used for its own job and for job B. Outcomes:
#   unauth - UNAUTHENTICATED (no credential, or one that does not verify)
#   scope  - PERMISSION_DENIED naming the scope the method needs
#   job    - PERMISSION_DENIED: a worker credential cannot act on another job
#   in     - reached the method (any other answer; the empty request may
#            still be refused as invalid or not found)
source "$(dirname "$0")/../lib.sh"
: "${SCOPECALL:?SCOPECALL must point at the scopecall tool}"
SRC=$(cd "$(dirname "$0")/../../.." && pwd)

# method -> any | node | user | worker_job | admin (rpc.h: TR_SCOPES_*)
declare -A SCOPE=(
    [Ping]=any
    [RegisterNode]=node [Heartbeat]=node [NodeSync]=node [DeregisterNode]=node
    [ListNodes]=user [GetCluster]=user [SubmitJob]=user [ListJobs]=user [StopJob]=user
    [SubmitJobs]=user [StopJobs]=user [DeleteJob]=user [SetProfile]=user
    [GetJob]=worker_job [GetLogs]=worker_job [CommIds]=worker_job [Gather]=worker_job
    [WorkerControl]=worker_job [ReportMetrics]=worker_job [GetMetrics]=worker_job
    [ReportFailure]=worker_job [ReportTrace]=worker_job [GetTrace]=worker_job
    [StoreSet]=worker_job [StoreGet]=worker_job [StoreAdd]=worker_job [StoreCompareSet]=worker_job
    [StoreWait]=worker_job [StoreCheck]=worker_job [StoreDelete]=worker_job [StoreNumKeys]=worker_job
    [CreateToken]=admin [RevokeToken]=admin [DrainNode]=admin
)
# expect CLASS CREDENTIAL: the outcome the table promises.
expect() {
    case "$2:$1" in
        none:* | wrong:*) echo unauth ;;
        admin:*) echo in ;;
        user:any | user:user | user:worker_job) echo in ;;
        node:any | node:node) echo in ;;
        worker_own:any | worker_own:worker_job) echo in ;;
        worker_other:any) echo in ;;
        worker_other:worker_job) echo job ;;
        *) echo scope ;;
    esac
}

# ---- the table covers the service and the head's tables, no more ----------
"$SCOPECALL" methods | sort >"$T/proto.txt"
grep -rho --include="*.c" '{"troupe\.v1\.Head/[A-Za-z]*"' "$SRC"/server | sed 's/.*Head\///; s/"$//' | sort >"$T/tables.txt"
printf '%s\n' "${!SCOPE[@]}" | sort >"$T/decided.txt"
[ -s "$T/tables.txt" ] && [ "$(wc -l <"$T/proto.txt")" -ge 20 ] || fail "no methods found: $(wc -l <"$T/proto.txt") in the service, $(wc -l <"$T/tables.txt") in $SRC/server"
! uniq -d "$T/tables.txt" | grep . || fail "a method registered twice in the head's tables"
for src in proto tables; do
    d=$(comm -3 "$T/$src.txt" "$T/decided.txt")
    [ -z "$d" ] || fail "methods without a decision here (left: in $src, right: only here) - add each to SCOPE: $(echo $d)"
done
pass "$(wc -l <"$T/decided.txt") methods: the service, the head's tables and this test's table agree"

# ---- a head with credentials of every kind --------------------------------
umask 077
ADMIN=adm-$RANDOM$RANDOM
printf '%s\n' "$ADMIN" >"$T/admin.tok"
unset TROUPE_TOKEN
# --dead-after 200 (20 s): on a loaded machine n1 must not go DEAD mid-test,
# which would end job A and with it the worker credential the calls present.
"$HEAD_BIN" --listen "$HEAD" --state-dir "$T/state" --token-file "$T/admin.tok" --heartbeat-ms 100 \
    --dead-after 200 >>"$T/head.log" 2>&1 &
PIDS+=($!)
admin() { "$CLI_BIN" --token-file "$T/admin.tok" "$@"; }
wait_for 10 "head with a token file" admin status
admin token create --scope user >"$T/user.tok"
admin token create --scope node >"$T/node.tok"
"$NODE_BIN" --head "$HEAD" --name n1 --fake-gpus 4 --state-dir "$T/n1" --token-file "$T/node.tok" \
    --stop-grace-ms 500 >>"$T/node-n1.log" 2>&1 &
PIDS+=($!)
wait_for 10 "n1 ALIVE" bash -c "'$CLI_BIN' --token-file '$T/admin.tok' -o json nodes | jq -e '.count == 1'"
mkdir -p "$T/w"
for j in a b; do
    printf 'name: %s\ncluster: {nodes: [1]}\ngroups: [{name: g, workers: 1, resources: {gpu: 1}, command: [sh, -c, %s]}]\n' \
        "$j" "'cp \"\$TROUPE_CREDENTIALS\" $T/w/$j.tmp && mv $T/w/$j.tmp $T/w/$j.cred; sleep 300'" >"$T/$j.yaml"
done
A=$(admin submit --no-wait "$T/a.yaml")
B=$(admin submit --no-wait "$T/b.yaml")
wait_for 20 "the workers of jobs $A and $B to save their credentials" test -s "$T/w/a.cred" -a -s "$T/w/b.cred"
pass "head with admin, user and node credentials; jobs $A and $B RUNNING with worker credentials"

# credential KIND: the token a call of KIND presents ("" = none).
credential() {
    case $1 in
        none) echo "" ;;
        wrong) echo "tr1.u.999.$RANDOM$RANDOM" ;;
        admin) cat "$T/admin.tok" ;;
        user | node) cat "$T/$1.tok" ;;
        worker_own | worker_other) cat "$T/w/a.cred" ;;
    esac
}
# target KIND: the job its calls name (admin and user: no job, so that no
# call of theirs changes one).
target() {
    case $1 in worker_own) echo "$A" ;; worker_other) echo "$B" ;; *) echo 999999 ;; esac
}
outcome() { # REPLY-LINE
    case $1 in
        "code=16 "*) echo unauth ;;
        "code=7 "*"cannot act on job"*) echo job ;;
        "code=7 "*"needs scope"*) echo scope ;;
        "code=12 "* | "no reply"* | "") echo "missing($1)" ;;
        *) echo in ;;
    esac
}

bad=() n=0
for kind in none wrong user node worker_own worker_other admin; do
    tok=$(credential "$kind")
    job=$(target "$kind")
    for m in $(sort "$T/decided.txt"); do
        want=$(expect "${SCOPE[$m]}" "$kind")
        set +e; line=$(TROUPE_TOKEN=$tok "$SCOPECALL" "$HEAD" "$m" "$job" 2>&1); set -e
        got=$(outcome "$line")
        n=$((n + 1))
        [ "$got" = "$want" ] || bad+=("$m as $kind: want $want, got $line")
    done
done
[ ${#bad[@]} = 0 ] || fail "$(printf '%s\n' "${bad[@]}")"
pass "$n calls ($(wc -l <"$T/decided.txt") methods x 7 credentials) answered as the table says"

# Nothing the worker credential tried reached job B, and no call stopped A.
for j in "$A" "$B"; do
    [ "$(admin -o json job "$j" | jqr .state)" = RUNNING ] || fail "job $j changed: $(admin -o json job "$j" | jq -c '{state, reason}')"
done
pass "jobs $A and $B still RUNNING"
