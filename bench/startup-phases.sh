#!/usr/bin/env bash
# The mean moment of each start-up phase (REPRO_TRACE_STARTUP=1 marks) of `repro run -- true`, over N traced runs
# of each binary, alternating run by run. Lines the init and `repro run` interleaved on stderr are dropped; a mark
# that only some runs print (a first run's scans) says in how many it appeared. Not a test.
#
#   bench/startup-phases.sh [N] [BEFORE_BIN] [AFTER_BIN]   # defaults: 15, repro-before, target/release/repro
set -euo pipefail
shopt -s inherit_errexit
ROOT=$(cd "$(dirname "$0")/.." && pwd)
N=${1:-15}
A=$(realpath -e "${2:-$ROOT/repro-before}")
B=$(realpath -e "${3:-$ROOT/target/release/repro}")
export PATH=/usr/bin:/bin
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
for _ in $(seq "$N"); do
    for t in A B; do
        bin=${!t}
        REPRO_TRACE_STARTUP=1 "$bin" run -q --state-dir "$WORK/state-$t" -- true 2>&1 > /dev/null \
            | grep -E '^\[repro startup\] +[0-9.]+ ms  pid [0-9]+ +[a-z]' >> "$WORK/$t.log" || true
        rm -rf "$WORK/state-$t/runs"
    done
done
for t in A B; do
    echo "== $t: ${!t}"
    sed -E 's/^\[repro startup\] +([0-9.]+) ms +pid [0-9]+ +(.*)$/\2\t\1/' "$WORK/$t.log" \
        | awk -F'\t' '{ sum[$1] += $2; n[$1]++ } END { for (k in sum) printf "%8.2f  %3d  %s\n", sum[k] / n[k], n[k], k }' \
        | sort -n
done
