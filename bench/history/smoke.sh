#!/usr/bin/env bash
# bench.history.smoke: bench/history/run.sh with 500 jobs: the head's RSS was
# read before and after, the list calls were timed, `troupe jobs --all` listed
# every job, and the restart with keep_jobs=1000 was timed.
source "$(dirname "$0")/../smoke.bash"
export TROUPE_SHARED_UID=true
run_logged history "$BENCH/history/run.sh" "$TROUPE_BIN" "$T/history.json" 500
measured "$T/history.json" "500 jobs submitted and stopped, the head's memory read" \
    '.jobs == 500 and .submit_and_stop_ms > 0 and .head_rss_kb_before > 0 and .head_rss_kb_after > 0'
measured "$T/history.json" "list calls timed, every job listed" \
    '.list_first_100_ms > 0 and .list_first_1000_ms > 0 and .list_100_at_cursor_200_ms > 0 and .list_all_count == 501'
measured "$T/history.json" "the restart under keep_jobs=1000 was timed" '.restart_keep_1000_ms > 0'
