# lib_elastic.bash - what the elastic tests share (sourced after lib.sh).

# ew_job NAME WORKERS MIN MAX STEP_MS STEPS [MAX_RESTARTS]: submit a job of
# one elastic CPU-only group dp of elastic_worker; prints its id. MAX below
# WORKERS keeps the head from growing the group back above it. EW_ENV adds
# entries to the workers' env ('EW_STALL_RANK: "2", ...'), EW_YAML lines
# at the job's top level (health: ...).
ew_job() {
    cat >"$T/$1.yaml" <<YAML
name: $1
groups:
  - name: dp
    workers: $2
    resources: {gpu: 0, cpu: 0.1}
    strategy: SPREAD
    command: [$ELASTIC_WORKER]
    env: {EW_STEPS: "$6", EW_STEP_MS: "$5"${EW_ENV:+, $EW_ENV}}
    elastic: {min_workers: $3, max_workers: $4}
restart: {max_restarts: ${7:-0}}
${EW_YAML:-}
YAML
    submit "$T/$1.yaml"
}

# ew_pid ID RANK: the pid of rank RANK's elastic_worker in job ID (the job
# lists the agent's supervisor; the worker is its only child).
ew_pid() { worker_child_pid "$1" "job$1-dp-$2"; }

# ew_final ID RANK STEPS: the final weights rank RANK (its placed rank) printed.
ew_final() {
    cli logs "$1" | sed -n "s/^\[job$1-dp-$2\] ew: final rank [0-9]*\/[0-9]* epoch [0-9]* steps $3 w //p"
}

# ew_same A B: two lists of weights agree within 1e-9 (relative).
ew_same() {
    awk -v a="$1" -v b="$2" 'BEGIN { n = split(a, x, " "); m = split(b, y, " "); if (n != m || n == 0) exit 1;
        for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d;
            if (d > 1e-9 * (1 + (x[i] < 0 ? -x[i] : x[i]))) exit 1 } }'
}

# ew_steps_once ID RANK STEPS: rank RANK completed steps 1..STEPS once each.
ew_steps_once() {
    local got
    got=$(cli logs "$1" | grep -o "^\[job$1-dp-$2\] ew: step [0-9]* rank" | awk '{print $4}' | tr '\n' ' ')
    [ "$got" = "$(seq -s ' ' 1 "$3") " ] || fail "rank $2 of job $1: steps $got"
}
