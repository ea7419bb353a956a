#!/usr/bin/env bash
# deploy.slurm: deploy/slurm/troupe.sbatch submitted with sbatch to a real
# Slurm - munged, slurmctld and slurmd started here as root with a one-node
# slurm.conf in the test's temp dir (ports off the defaults, so a site's Slurm
# is not disturbed) - and run unmodified: the head and the agent start as srun
# steps, the job runs, the script tears down. Cases: the README's demo job
# (SUCCEEDS, exit 0, Slurm records COMPLETED), a failing job (exit 1, FAILED),
# and the end of the allocation (SIGTERM to the batch shell, what
# --signal=B:TERM@120 sends: teardown, exit 6). After each: no head, agent or
# worker of that allocation left running.
# shellcheck source=tests/deploy/lib.sh
. "$(dirname "$0")/lib.sh"
need_root
need_binaries
for p in munged slurmctld slurmd sbatch scontrol; do
    command -v "$p" >/dev/null || skip "$p not installed (scripts/setup.sh installs munge and slurm-wlm)"
done

# ---- munge and Slurm, private to this test ----------------------------------
mkdir -p "$T/munge" "$T/state" "$T/spool" "$T/jobs"
chmod 0700 "$T/munge"
dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 0400 "$T/munge/munge.key"
MUNGE_SOCK=$T/munge/munge.sock
munged --foreground --force --socket="$MUNGE_SOCK" --key-file="$T/munge/munge.key" \
    --pid-file="$T/munge/munged.pid" --seed-file="$T/munge/munged.seed" --log-file="$T/munged.log" \
    >>"$T/munged.log" 2>&1 &
MUNGED=$!
on_exit "kill -TERM $MUNGED; wait $MUNGED"
wait_for 20 "munged's socket $MUNGE_SOCK" test -S "$MUNGE_SOCK"
kill -0 "$MUNGED" 2>/dev/null || skip "munged cannot start here: $(tail -n 1 "$T/munged.log")"

NODE=$(hostname -s)   # the node's Slurm name: troupe.sbatch's default head host
# On a cluster node names resolve; a machine whose /etc/hosts lacks its own
# name (a debootstrap chroot) gets the head's address as the script's
# TROUPE_HEAD_HOST says, the NodeAddr given to Slurm below.
if ! getent hosts "$NODE" >/dev/null; then
    log "$NODE does not resolve here: troupe.sbatch gets TROUPE_HEAD_HOST=127.0.0.1"
    export TROUPE_HEAD_HOST=127.0.0.1
fi
base=$((20000 + RANDOM % 20000))
export SLURM_CONF=$T/slurm.conf
cat >"$SLURM_CONF" <<EOF
ClusterName=troupetest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCK
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$T/jobcomp.txt
MpiDefault=none
ReturnToService=2
FirstJobId=$((1000 + RANDOM % 8000))
KillWait=30
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=gpu Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -i -f "$SLURM_CONF" >>"$T/slurmctld.log" 2>&1 &
CTLD=$!
on_exit "kill -TERM $CTLD; wait $CTLD"
slurmd -D -f "$SLURM_CONF" -N "$NODE" >>"$T/slurmd.log" 2>&1 &
SLURMD=$!
on_exit "kill -TERM $SLURMD; wait $SLURMD"
idle() { scontrol show node "$NODE" | grep -qE 'State=IDLE'; }
wait_for 60 "slurmd to register node $NODE IDLE with slurmctld" idle
pass "munged, slurmctld and slurmd up (ports $base, $((base + 1))); node $NODE IDLE"

# ---- the Slurm script ----------------------------------------------------------
BIN=$T/bin
mkdir -p "$BIN"
ln -s "$HEAD_BIN" "$NODE_BIN" "$CLI_BIN" "$TRAIN_BIN" "$BIN/"
mkdir -p "$T/jobs/demo" && cp "$ROOT"/examples/demo/{job,train}.yaml "$T/jobs/demo/"
"$TRAIN_BIN" --make-data "$T/jobs/demo/data.tok" >/dev/null
cat >"$T/jobs/fails.yaml" <<'EOF'
name: fails
cluster: {nodes: [8]}
groups:
  - {name: bad, workers: 1, resources: {gpu: 1}, command: [sh, -c, 'exit 3']}
EOF
cat >"$T/jobs/sleeps.yaml" <<'EOF'
name: sleeps
cluster: {nodes: [8]}
groups:
  - {name: long, workers: 2, resources: {gpu: 1}, command: [sleep, '600']}
EOF

# submit JOB [ENV=VALUE,...]: sbatch the script from $T; prints the Slurm job id.
submit() {
    (cd "$T" && sbatch --parsable --nodes=1 --exclusive --time=10 -o "$T/slurm-%j.out" \
        --export="ALL,TROUPE_BIN=$BIN,TROUPE_NODE_DIR=$T,TROUPE_FAKE_GPUS=8xH200:141GB,TROUPE_STOP_GRACE_MS=2000${2:+,$2}" \
        "$ROOT/deploy/slurm/troupe.sbatch" "$1")
}
state() { scontrol show job "$1" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
finished() { case $(state "$1") in PENDING|RUNNING|CONFIGURING|COMPLETING|SUSPENDED) return 1 ;; esac; }
# left ID: processes of allocation ID still running (head state dir, agent dir).
left() { pgrep -af "troupe-(head|node|train).*troupe-$1" || true; }
# check ID NAME STATE RC: Slurm's record of the job and the script's exit status.
check() {
    local id=$1 name=$2 want=$3 rc=$4 got ec out=$T/slurm-$1.out
    wait_for 240 "Slurm job $id ($name) to end" finished "$id"
    got=$(state "$id")
    ec=$(scontrol show job "$id" | sed -n 's/.* ExitCode=\([0-9]*\):.*/\1/p')
    if [ "$got:$ec" != "$want:$rc" ]; then
        tail -n 30 "$out" >&2
        fail "$name: Slurm job $id is $got exit $ec, wanted $want exit $rc"
    fi
    if ! grep -q "stopping troupe-head" "$out" || ! grep -q "troupe.sbatch: done (exit $rc)" "$out"; then
        tail -n 30 "$out" >&2
        fail "$name: no teardown in $out"
    fi
    [ -z "$(left "$id")" ] || fail "$name: left running after Slurm job $id: $(left "$id")"
}

id=$(submit "$T/jobs/demo/job.yaml")
start=$SECONDS
check "$id" demo COMPLETED 0
out=$T/slurm-$id.out
grep -q "1 node(s): $NODE; head tcp://${TROUPE_HEAD_HOST:-$NODE}:" "$out" || fail "demo: allocation line missing"
grep -Eq "^[0-9]+ +$NODE +ALIVE" "$out" || fail "demo: the agent did not show ALIVE in the output"
[ "$(grep -c 'policy-[01]\] step=60/60' "$out")" = 2 ] || fail "demo: the policy workers did not reach step 60"
grep -q "node registered .*name=$NODE" "$T/troupe-$id/head.log" || fail "demo: head.log does not show the agent registering"
grep -q "JobId=$id .*JobState=COMPLETED" "$T/jobcomp.txt" || fail "demo: Slurm's job record (jobcomp) has no COMPLETED for $id"
pass "demo job through sbatch troupe.sbatch: COMPLETED exit 0 in $((SECONDS - start)) s, head and agent as srun steps, teardown, nothing left"
sed -n '/troupe.sbatch: stopping/,$p' "$out" | sed 's/^/      /'

id=$(submit "$T/jobs/fails.yaml")
check "$id" "failing job" FAILED 1
pass "a failing job: Slurm job FAILED with the script's exit 1, teardown, nothing left"

# The end of the allocation: --signal=B:TERM@120 signals the batch shell only.
id=$(submit "$T/jobs/sleeps.yaml")
wait_for 120 "job sleeps to run under Slurm job $id" grep -q "submitting" "$T/slurm-$id.out"
sleep 3
scancel --batch --signal=TERM "$id"
check "$id" "SIGTERM to the batch shell" FAILED 6
grep -q "received a signal" "$T/slurm-$id.out" || fail "signal: the script did not see the signal"
pass "SIGTERM to the batch shell (end of allocation): the job stopped, teardown, exit 6, nothing left"
