#!/usr/bin/env bash
# How exactly the process-driver examples replay (issue 18): each example in examples/chaos/ is run once with
# a fixed seed, then `repro chaos replay RUN --runs $RUNS` runs it again from its run directory alone; prints
# one row per example: verdict, replays that reproduced the verdict, every check's outcome and the fault
# schedule, and the time of the original run and of a replay (mean). Not a timed test: a report.
# Usage: bench/chaos-replay.sh [EXAMPLE...]    (default: the process-driver examples; RUNS=10, SEED=4)
set -euo pipefail
shopt -s inherit_errexit

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-10}
seed=${SEED:-4}
if [ -z "${REPRO:-}" ]; then
    cargo build --release -q -p repro --manifest-path "$root/Cargo.toml"
    REPRO="${CARGO_TARGET_DIR:-$root/target}/release/repro"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
examples=("$@")
if [ ${#examples[@]} -eq 0 ]; then
    examples=(hello-world smoke redis-kill-acked-writes redis-freeze redis-nemesis redis-partition-acked-writes
        redis-latency redis-replica-linearizable postgres-kill-postmaster)
fi
printf '| example | verdict | replays reproduced | original run | replay (mean) |\n|---|---|---|---|---|\n'
for ex in "${examples[@]}"; do
    t0=${EPOCHREALTIME/./}
    out=$("$REPRO" chaos run "$root/examples/chaos/$ex.yaml" --seed "$seed" --state-dir "$work/state" -q) || true
    t1=${EPOCHREALTIME/./}
    run=$(tail -n 1 <<<"$out")
    verdict=$(sed -n 's/^\(PASS\|FAIL\|XFAIL\|ERROR\)$/\1/p' <<<"$out" | tail -n 1)
    rep=$("$REPRO" chaos replay "$run" --runs "$runs" -q --json) || true
    t2=${EPOCHREALTIME/./}
    got=$(python3 -c 'import json,sys; r=json.load(sys.stdin); print("%d/%d" % (r["reproduced"], r["requested"]))' <<<"$rep")
    per=$(( (t2 - t1) / runs / 1000 ))
    printf '| %s | %s | %s | %d ms | %d ms |\n' "$ex" "$verdict" "$got" $(( (t1 - t0) / 1000 )) "$per"
done
