#!/usr/bin/env bash
# Benchmarks of `repro chaos` (issue 6):
#   1. hello-world end to end: `repro chaos run examples/chaos/hello-world.yaml`, wall time, median of $RUNS runs
#      (target: under 1 s; the prototype took 33 s, 30 of them a fixed wait);
#   2. per-instance overhead of the process adapter: the same no-op workload with 1 and with $N+1 instances;
#      (median(T[N+1]) - median(T[1])) / N is what one more instance costs the harness end to end: create
#      (env file, own process group), track, collect, delete, and the leak/frozen checks (target: under 20 ms).
# Usage: bench/chaos.sh            (builds target/release/repro unless REPRO points at a binary)
#        RUNS=20 N=200 bench/chaos.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-10}
n=${N:-100}
if [ -z "${REPRO:-}" ]; then
    cargo build --release -q -p repro --manifest-path "$root/Cargo.toml"
    REPRO="${CARGO_TARGET_DIR:-$root/target}/release/repro"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; }

# median of the numbers on stdin
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print int((v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# time_run EXPERIMENT -> prints microseconds; fails unless the verdict is PASS
time_run() {
    local s e out
    s=$(now_us)
    out=$("$REPRO" chaos run "$1" --state-dir "$work/state" -q --seed 1)
    e=$(now_us)
    grep -qx PASS <<< "$out" || { echo "bench: $1 did not PASS:" >&2; echo "$out" >&2; exit 1; }
    echo $((e - s))
}

noop_experiment() { # $1 = instances
    cat > "$work/noop-$1.yaml" <<YAML
apiVersion: repro.dev/chaos/v1
id: noop-$1
version: 1
title: $1 no-op instances
hypothesis: Every instance exits 0.
timeout: 5m
workloads:
  - name: noop
    kind: shell
    instances: $1
    run: ":"
flow: noop
YAML
    echo "$work/noop-$1.yaml"
}

time_run "$root/examples/chaos/hello-world.yaml" > /dev/null # warm the page cache
hello=$(for _ in $(seq "$runs"); do time_run "$root/examples/chaos/hello-world.yaml"; done | median)

one=$(noop_experiment 1)
many=$(noop_experiment $((n + 1)))
t1=$(for _ in $(seq "$runs"); do time_run "$one"; done | median)
tn=$(for _ in $(seq "$runs"); do time_run "$many"; done | median)
per=$(( (tn - t1) / n ))

printf 'hello-world end to end (median of %d): %d.%03d ms (target < 1000 ms)\n' "$runs" $((hello / 1000)) $((hello % 1000))
printf 'no-op workload, 1 instance (median of %d): %d.%03d ms\n' "$runs" $((t1 / 1000)) $((t1 % 1000))
printf 'no-op workload, %d instances (median of %d): %d.%03d ms\n' $((n + 1)) "$runs" $((tn / 1000)) $((tn % 1000))
printf 'process adapter overhead per instance: %d.%03d ms (target < 20 ms)\n' $((per / 1000)) $((per % 1000))
fail=0
[ "$hello" -lt 1000000 ] || { echo "bench: hello-world over 1 s" >&2; fail=1; }
[ "$per" -lt 20000 ] || { echo "bench: per-instance overhead over 20 ms" >&2; fail=1; }
exit $fail
