#!/usr/bin/env bash
# Long output lines reach `troupe logs` whole: two workers print base64 lines
# of 300 KiB and 1 MiB at the same time (longer than an agent's 256 KiB report
# batch, so each line comes in several reports); every line arrives whole,
# prefixed once, not interleaved with the other worker's. A line longer than
# TR_LOG_LINE_MAX (2 MiB of text) keeps its first 2 MiB and ends with a marker
# that says how much was left out.
source "$(dirname "$0")/../lib.sh"
start_head --heartbeat-ms 100 --suspect-after 3 --dead-after 50
start_node na 2xH100:80GB --stop-grace-ms 1000
wait_for 10 "node ALIVE" nodes_alive 1

# Each worker writes its lines to $T/out-RANK too, then prints that file's
# lines one by one, slowly enough that both workers' lines overlap in time.
cat >"$T/w.sh" <<EOS
for n in 307200 1048576 307200 1048576 4096; do head -c \$n /dev/urandom | base64 -w0 | head -c \$n; echo; done >$T/out-\$RANK
if [ \$RANK = 0 ]; then head -c 3145728 /dev/urandom | base64 -w0 | head -c 3145728 >$T/huge; echo >>$T/huge; fi
while IFS= read -r l; do printf '%s\\n' "\$l"; sleep 0.05; done <$T/out-\$RANK
if [ \$RANK = 0 ]; then cat $T/huge; fi
echo done-\$RANK
EOS
printf 'name: long\ncluster: {nodes: [2]}\ngroups: [{name: g, workers: 2, resources: {gpu: 1}, command: [sh, %s]}]\n' \
    "$T/w.sh" >"$T/long.yaml"
id=$(submit "$T/long.yaml")
wait_for 60 "job $id SUCCEEDED" is_job_state "$id" SUCCEEDED
cli logs "$id" >"$T/all.log" || fail "troupe logs $id failed"

# Every line of the whole log is one worker's line or a troupe marker.
bad=$(grep -cvE "^\[(job$id-g-[01]|troupe)\] " "$T/all.log" || true)
[ "$bad" = 0 ] || fail "$bad lines of troupe logs are pieces of lines: $(grep -nvE "^\[(job$id-g-[01]|troupe)\] " "$T/all.log" | cut -c1-80 | head -3)"
for r in 0 1; do
    w=job$id-g-$r
    { sed "s/^/[$w] /" "$T/out-$r"; [ $r = 0 ] && printf '[%s] %s [troupe: line cut, 1048576 more bytes]\n' "$w" "$(head -c 2097152 "$T/huge")"; echo "[$w] done-$r"; } >"$T/want-$r"
    grep -F "[$w] " "$T/all.log" >"$T/got-$r" || true
    cmp -s "$T/want-$r" "$T/got-$r" || fail "worker $w: its lines in troupe logs differ from what it printed: want $(wc -l <"$T/want-$r") lines ($(awk '{print length}' "$T/want-$r" | tr '\n' ' ')), got $(wc -l <"$T/got-$r") ($(awk '{print length}' "$T/got-$r" | head -20 | tr '\n' ' '))"
    cli logs "$id" --worker "$w" >"$T/only-$r" || fail "troupe logs --worker $w failed"
    cmp -s "$T/want-$r" "$T/only-$r" || fail "troupe logs --worker $w: $(wc -l <"$T/only-$r") lines, want $(wc -l <"$T/want-$r")"
done
pass "2 workers, 300 KiB and 1 MiB lines: each whole and once in troupe logs (with and without --worker); a 3 MiB line cut at 2 MiB with its marker"
