# nodes_lib.bash - helpers for the nodes suite (sourced after ../lib.sh).

# start_proxy: a cuttable TCP proxy to the head on $PROXY (PROXY_PID).
start_proxy() {
    local port
    port=$(free_port)
    PROXY=tcp://127.0.0.1:$port
    python3 "$(dirname "${BASH_SOURCE[0]}")/../cutproxy.py" "$port" "$PORT" >"$T/proxy.log" 2>&1 &
    PROXY_PID=$!
    PIDS+=("$PROXY_PID")
    wait_for 10 "the proxy to listen" grep -q ready "$T/proxy.log"
}

# cut_and_drop: the proxy holds every connection, new ones too (SIGUSR1,
# once it says "cut"), then closes the open ones (SIGHUP): the agent's
# connection is seen closed and none of its calls gets through.
cut_and_drop() {
    local n
    n=$(grep -c '^cut$' "$T/proxy.log" || true)
    kill -USR1 "$PROXY_PID"
    wait_for 5 "the proxy to cut" bash -c "[ \$(grep -c '^cut\$' '$T/proxy.log') -gt $n ]"
    kill -HUP "$PROXY_PID"
}

# reports_after MARK ID N: the head logged (debug) at least N reports of
# node ID after MARK: the agent told it, N times, every worker it runs.
reports_after() {
    [ "$(tail -c +$(($1 + 1)) "$T/head.log" | grep -c "node report node=$2 ")" -ge "$3" ]
}

ms_now() { echo $(( $(date +%s%N) / 1000000 )); }

# node_field NAME FIELD: a field of the newest node of that name.
node_field() { cli -o json nodes | jqr --arg n "$1" --arg f "$2" '[.nodes[] | select(.name==$n)] | last | .[$f]'; }

# worker_lines: a job command that appends "ATTEMPT RANK UNIX_MS" to $T/beats
# every 50 ms while it runs, and its pid to $T/pids/WORKER.ATTEMPT: proof of
# which attempt ran when.
beat_cmd() {
    echo "[sh, -c, 'echo \$\$ >> $T/pids/\$TROUPE_WORKER.\$TROUPE_ATTEMPT; while :; do echo \"\$TROUPE_ATTEMPT \$RANK \$(date +%s%3N)\" >> $T/beats; sleep 0.05; done']"
}

# no_overlap: every line of attempt A is older than the first of attempt A+1:
# no rank ever ran twice at once.
no_overlap() {
    awk '{ if (!($1 in last) || $3 > last[$1]) last[$1] = $3; if (!($1 in first) || $3 < first[$1]) first[$1] = $3 }
         END { for (a in last) if ((a + 1) in first && last[a] >= first[a + 1]) {
                   printf "attempt %d ran until %.0f, attempt %d began at %.0f\n", a, last[a], a + 1, first[a + 1]; bad = 1 }
               exit bad }' "$T/beats"
}

# pids_gone FILE...: none of the pids listed in the files is alive.
pids_gone() { local p; for p in $(cat "$@" 2>/dev/null); do if alive "$p"; then return 1; fi; done; }

# beat_script FILE: writes $T/beat-FILE.sh, a worker that appends
# "ATTEMPT RANK UNIX_MS" to $T/FILE every 50 ms, its pid to
# $T/pids/WORKER.ATTEMPT, and on SIGTERM goes on beating for 1.5 s before it
# exits (a worker that takes its grace period to finish). Prints the path.
beat_script() {
    local f=$T/beat-$1.sh
    mkdir -p "$T/pids"
    cat >"$f" <<SH
echo \$\$ >> $T/pids/\$TROUPE_WORKER.\$TROUPE_ATTEMPT
beat() { echo "\$TROUPE_ATTEMPT \$RANK \$(date +%s%3N)" >> $T/$1; }
trap 'for i in \$(seq 30); do beat; sleep 0.05; done; exit 0' TERM
while :; do beat; sleep 0.05; done
SH
    echo "$f"
}
