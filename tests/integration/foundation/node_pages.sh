#!/usr/bin/env bash
# ListNodes answers pages (bounded history: list calls are paginated and a
# reply can never exceed the frame). Node ids are never reused,
# so a head whose agents come and go keeps every node it ever saw; one
# ListNodes reply used to hold them all and could outgrow a frame (the
# `troupe jobs` failure past ~25k jobs, for nodes). With the head's frame at
# 4096 bytes and 60 nodes (about 9 KB of records): every page fits the frame,
# the pages chain by cursor over node ids 1..60 once each, and `troupe nodes`
# (libtroupe pages through) shows all 60.
source "$(dirname "$0")/../lib.sh"
RAW=${RAWCALL:?}
start_head --max-frame-bytes 4096
for i in $(seq -w 1 60); do
    out=$("$RAW" "$HEAD" register-name "flap-node-$i")
    grep -q '^code=0 ' <<<"$out" || fail "register flap-node-$i: $out"
done

cursor=0 pages=0 total=0 want_first=1 sizes=""
while :; do
    out=$("$RAW" "$HEAD" list-nodes "$cursor")
    grep -q '^code=0 ' <<<"$out" || fail "list-nodes after $cursor: $out"
    line=$(grep '^nodes=' <<<"$out" || true)
    [ -n "$line" ] || fail "list-nodes after $cursor: no page in: $out"
    read -r n first last next payload <<<"$(sed 's/^nodes=\([0-9]*\) first=\([0-9]*\) last=\([0-9]*\) next_cursor=\([0-9]*\) payload=\([0-9]*\)$/\1 \2 \3 \4 \5/' <<<"$line")"
    [ "$payload" -le 4096 ] || fail "the page after node $cursor is $payload bytes; the head's frame is 4096 ($line)"
    [ "$n" -ge 1 ] && [ "$first" = "$want_first" ] && [ "$last" = $((first + n - 1)) ] ||
        fail "the page after node $cursor should start at node $want_first and hold consecutive ids: $line"
    pages=$((pages + 1)) total=$((total + n)) sizes="$sizes $payload"
    [ "$next" != 0 ] || break
    [ "$next" = "$last" ] || fail "next_cursor $next, want the page's last id $last"
    [ "$pages" -lt 60 ] || fail "more pages than nodes: the cursor does not move on"
    cursor=$next want_first=$((last + 1))
done
[ "$total" = 60 ] && [ "$last" = 60 ] || fail "pages held $total nodes ending at node $last, want 1..60"
[ "$pages" -ge 2 ] || fail "60 nodes in one page of a 4096-byte frame"
pass "ListNodes: 60 nodes in $pages pages of at most 4096 bytes (payloads:$sizes), ids 1..60 once each"

names=$(cli -o json nodes | jq -r '.nodes[].name' | sort)
[ "$names" = "$(seq -w 1 60 | sed 's/^/flap-node-/')" ] || fail "troupe nodes should list flap-node-01..60 once each: $(echo $names | head -c 300)"
pass "troupe nodes pages through: all 60 nodes, once each"
