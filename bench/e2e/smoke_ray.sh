#!/usr/bin/env bash
# bench.e2e.ray_smoke: bench/e2e/ray_pg.py, the Ray peer of the placement
# cycles, for 0.3 s a cell on a single-node Ray started here: every cell
# created and removed placement groups. Needs Ray (`pip install ray`, not a
# build or test dependency): skipped (77), saying so, where it is missing.
source "$(dirname "$0")/../smoke.bash"
py=
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import ray' 2>/dev/null; then py=$p; break; fi
done
[ -n "$py" ] || skip_test "no python3 with Ray (pip install ray): the Ray peer of bench/e2e cannot run"
run_logged ray_pg "$py" "$BENCH/e2e/ray_pg.py" --seconds 0.3 --json "$T/ray.json"
measured "$T/ray.json" "every Ray cell created and removed placement groups" \
    '(.cells | length) == 10 and all(.cells[]; .batches > 0 and .groups_per_s > 0)'
