#!/usr/bin/env bash
# How often each racy program of tests/races/ shows its bug (exits 1): natively in NATIVE runs (1,000 by default),
# and under `repro run --sched POLICY --sched-seed N --sched-points P` for seeds 0..SEEDS-1 (100 by default) per
# policy and set of scheduling points (POINTS="io" by default, as repro race and hunt --vary schedule run; "blocking
# io" shows what the read/write/signal points add).
# Usage: bench/races.sh [REPRO_BINARY] (default: this tree's target/release/repro). NATIVE=0 skips the native
# runs. Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
REPRO=$(realpath "${1:-$ROOT/target/release/repro}")
NATIVE=${NATIVE:-1000}
SEEDS=${SEEDS:-100}
POLICIES=${POLICIES:-"random round-robin pct pct:d=2,k=50"}
POINTS=${POINTS:-io}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
printf '%-16s %12s' program native
for p in $POLICIES; do for pts in $POINTS; do printf ' %20s' "$p+$pts"; done; done
echo
for src in "$ROOT"/tests/races/*.c; do
  name=$(basename "$src" .c)
  gcc -O2 -pthread -o "$WORK/$name" "$src"
  shown=0
  for _ in $(seq 1 "$NATIVE"); do
    (cd "$WORK" && "./$name" >/dev/null 2>&1) || shown=$((shown + 1))
  done
  printf '%-16s %12s' "$name" "$shown/$NATIVE"
  for p in $POLICIES; do
    for pts in $POINTS; do
      shown=0
      for seed in $(seq 0 $((SEEDS - 1))); do
        rc=0
        (cd "$WORK" && "$REPRO" run -q --state-dir "$WORK/.repro" --sched "$p" --sched-seed "$seed" \
          --sched-points "$pts" -- "./$name" >/dev/null 2>&1) || rc=$?
        case $rc in 0) ;; 1) shown=$((shown + 1)) ;; *) echo "$name $p+$pts seed $seed: exit $rc" >&2 ;; esac
      done
      printf ' %20s' "$shown/$SEEDS"
    done
  done
  echo
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
