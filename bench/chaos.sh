#!/usr/bin/env bash
# Benchmarks of `repro chaos` (issue 6):
#   1. hello-world end to end: `repro chaos run examples/chaos/hello-world.yaml`, wall time, median of $RUNS runs
#      (target: under 1 s; the prototype took 33 s, 30 of them a fixed wait);
#   2. per-instance overhead of the process adapter: the same no-op workload with 1 and with $N+1 instances;
#      (median(T[N+1]) - median(T[1])) / N is what one more instance costs the harness end to end: create
#      (env file, own process group), track, collect, delete, and the leak/frozen checks (target: under 20 ms);
#   3. report generation (issue 7): `repro chaos report RUN`, median of $RUNS, for the hello-world run, the
#      $N+1-instance run (one timeline lane per instance), and the hello-world run with a synthetic scrape file
#      of $SCRAPES scrapes x $SERIES series added (10 minutes at 250 ms of a busy exporter) (target: under 1 s);
#   4. interruption: SIGINT to a run whose workload instance is frozen by a fault, until the harness has undone
#      the fault and exited 130, median of $RUNS (target: under 2 s; docs/chaos.md promises it, the tests check
#      only that it happens).
# Every timed command's status is checked: a run that does not PASS, a report or an interruption that fails,
# ends the script with an error.
# Usage: bench/chaos.sh            (builds target/release/repro unless REPRO points at a binary)
#        RUNS=20 N=200 bench/chaos.sh
set -euo pipefail
shopt -s inherit_errexit

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-10}
n=${N:-100}
scrapes=${SCRAPES:-2400}
series=${SERIES:-100}
if [ -z "${REPRO:-}" ]; then
    cargo build --release -q -p repro --manifest-path "$root/Cargo.toml"
    REPRO="${CARGO_TARGET_DIR:-$root/target}/release/repro"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; }

# median of the numbers on stdin
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print int((v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# time_run EXPERIMENT -> prints microseconds; fails unless the verdict is PASS; the run directory is in $work/last
time_run() {
    local s e out
    s=$(now_us)
    out=$("$REPRO" chaos run "$1" --state-dir "$work/state" -q --seed 1) || {
        echo "bench: chaos run $1 failed (exit $?):" >&2
        echo "$out" >&2
        exit 1
    }
    e=$(now_us)
    grep -qx PASS <<< "$out" || { echo "bench: $1 did not PASS:" >&2; echo "$out" >&2; exit 1; }
    tail -n 1 <<< "$out" > "$work/last"
    echo $((e - s))
}

# time_report RUN_DIR -> prints microseconds
time_report() {
    local s e
    s=$(now_us)
    "$REPRO" chaos report "$1" -o "$work/report.html" > /dev/null || { echo "bench: chaos report $1 failed" >&2; exit 1; }
    e=$(now_us)
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
many_dir=$(cat "$work/last")
per=$(( (tn - t1) / n ))

time_run "$root/examples/chaos/hello-world.yaml" > /dev/null
hello_dir=$(cat "$work/last")
r_hello=$(for _ in $(seq "$runs"); do time_report "$hello_dir"; done | median)
r_many=$(for _ in $(seq "$runs"); do time_report "$many_dir"; done | median)
big_dir="$work/big-run"
cp -a "$hello_dir" "$big_dir"
awk -v n="$scrapes" -v m="$series" 'BEGIN {
    for (i = 0; i < n; i++) {
        printf "{\"t\":%.3f,\"ts\":\"2026-01-01T00:00:00Z\",\"samples\":[", i * 0.25
        for (j = 0; j < m; j++) {
            printf "%s{\"name\":\"synth_family_%d\",\"labels\":{\"shard\":\"%d\"},\"value\":%d}", (j ? "," : ""), j % 20, j, (i * (j + 1)) % 997
        }
        print "]}"
    }
}' > "$big_dir/system/metrics/synth.jsonl"
r_big=$(for _ in $(seq "$runs"); do time_report "$big_dir"; done | median)

# An experiment that SIGSTOPs its own workload instance, then waits 300 s: SIGINT once the freeze is verified.
cat > "$work/frz.yaml" <<'YAML'
apiVersion: repro.dev/chaos/v1
id: frz
version: 1
title: frozen instance
hypothesis: h
timeout: 10m
workloads:
  - name: w
    kind: shell
    run: exec sleep 300
operations:
  - {name: freeze-it, uses: freeze, target: w}
flow:
  parallel:
    - w
    - serial: [{wait: {workload: w, condition: started}}, freeze-it, {delay: 300s}]
YAML

# time_interrupt -> prints the microseconds from SIGINT to the harness's exit; fails unless it exits 130
time_interrupt() {
    local state="$work/int-state" pid s e st=0 waited=0
    rm -rf "$state"
    "$REPRO" chaos run "$work/frz.yaml" --state-dir "$state" -q > /dev/null 2>&1 &
    pid=$!
    until grep -qs '"operation.verified"' "$state"/frz/*/timeline.jsonl; do
        sleep 0.02
        waited=$((waited + 1))
        [ "$waited" -lt 1500 ] || { echo "bench: the freeze was never verified" >&2; kill -KILL "$pid"; exit 1; }
    done
    s=$(now_us)
    kill -INT "$pid"
    wait "$pid" || st=$?
    e=$(now_us)
    [ "$st" -eq 130 ] || { echo "bench: SIGINT ended the run with $st, not 130" >&2; exit 1; }
    echo $((e - s))
}
interrupt=$(for _ in $(seq "$runs"); do time_interrupt; done | median)

printf 'hello-world end to end (median of %d): %d.%03d ms (target < 1000 ms)\n' "$runs" $((hello / 1000)) $((hello % 1000))
printf 'no-op workload, 1 instance (median of %d): %d.%03d ms\n' "$runs" $((t1 / 1000)) $((t1 % 1000))
printf 'no-op workload, %d instances (median of %d): %d.%03d ms\n' $((n + 1)) "$runs" $((tn / 1000)) $((tn % 1000))
printf 'process adapter overhead per instance: %d.%03d ms (target < 20 ms)\n' $((per / 1000)) $((per % 1000))
printf 'report, hello-world run (median of %d): %d.%03d ms\n' "$runs" $((r_hello / 1000)) $((r_hello % 1000))
printf 'report, %d-instance run (median of %d): %d.%03d ms\n' $((n + 1)) "$runs" $((r_many / 1000)) $((r_many % 1000))
printf 'report, %d scrapes x %d series (median of %d): %d.%03d ms, %d bytes (target < 1000 ms)\n' "$scrapes" "$series" \
    "$runs" $((r_big / 1000)) $((r_big % 1000)) "$(stat -c %s "$work/report.html")"
printf 'SIGINT to exit of a run with a frozen instance (median of %d): %d.%03d ms (target < 2000 ms)\n' "$runs" \
    $((interrupt / 1000)) $((interrupt % 1000))
fail=0
[ "$interrupt" -lt 2000000 ] || { echo "bench: SIGINT to exit over 2 s" >&2; fail=1; }
[ "$r_big" -lt 1000000 ] || { echo "bench: report of a large run over 1 s" >&2; fail=1; }
[ "$hello" -lt 1000000 ] || { echo "bench: hello-world over 1 s" >&2; fail=1; }
[ "$per" -lt 20000 ] || { echo "bench: per-instance overhead over 20 ms" >&2; fail=1; }
exit $fail
