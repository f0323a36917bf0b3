#!/usr/bin/env bash
# The fixed start-up of `repro run`: native `true` and `python3 -c pass` against the same under repro (with and
# without the supervisor), alternating command by command (native, repro, ... then again), N rounds; prints the
# mean, median and best of each and the ratio to native. Not a test.
#
#   bench/startup.sh [REPRO_BIN]            # default: target/release/repro (build it first)
#   N=50 bench/startup.sh                   # rounds (default 20)
#   BEFORE=/path/to/old/repro bench/startup.sh   # adds the same repro rows for another binary, alternating too
#   TRACE=1 bench/startup.sh                # also prints one run's phase breakdown (REPRO_TRACE_STARTUP=1)
set -euo pipefail
shopt -s inherit_errexit
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REPRO=$(realpath -e "${1:-$ROOT/target/release/repro}")
BEFORE=${BEFORE:+$(realpath -e "$BEFORE")}
N=${N:-20}
PY=/usr/bin/python3
export PATH=/usr/bin:/bin
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(uname -r)" >&2

# The rows: a label and a command (a repro row runs with its own state directory under $WORK).
labels=()
cmds=()
row() { labels+=("$1"); shift; cmds+=("$*"); }
row "native true" true
row "repro run -- true" "$REPRO" run -q --state-dir "$WORK/state" -- true
row "repro run --no-supervisor -- true" "$REPRO" run -q --no-supervisor --state-dir "$WORK/state" -- true
if [ -n "$BEFORE" ]; then
    row "BEFORE repro run -- true" "$BEFORE" run -q --state-dir "$WORK/state-before" -- true
    row "BEFORE repro run --no-supervisor -- true" "$BEFORE" run -q --no-supervisor --state-dir "$WORK/state-before" -- true
fi
row "native python3 -c pass" "$PY" -c pass
row "repro run -- python3 -c pass" "$REPRO" run -q --state-dir "$WORK/state" -- "$PY" -c pass
if [ -n "$BEFORE" ]; then
    row "BEFORE repro run -- python3 -c pass" "$BEFORE" run -q --state-dir "$WORK/state-before" -- "$PY" -c pass
fi

# One warm-up of each, then N rounds; each round runs every row once, in turn.
for i in "${!cmds[@]}"; do
    # shellcheck disable=SC2086
    ${cmds[$i]} > /dev/null 2>&1 || { echo "startup: failed: ${cmds[$i]}" >&2; exit 1; }
done
for _ in $(seq "$N"); do
    for i in "${!cmds[@]}"; do
        s=$(date +%s%N)
        # shellcheck disable=SC2086
        ${cmds[$i]} > /dev/null 2>&1 || { echo "startup: failed: ${cmds[$i]}" >&2; exit 1; }
        e=$(date +%s%N)
        echo $(((e - s) / 1000)) >> "$WORK/t$i"
    done
    # The run directories are not what is measured: keep the state directory small.
    rm -rf "$WORK/state/runs" "$WORK/state-before/runs"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# mean, median and best in ms of row i.
stats() { sort -n "$WORK/t$1" | awk '{ v[NR] = $1; s += $1 } END { printf "%.2f %.2f %.2f", s / NR / 1000, v[int((NR + 1) / 2)] / 1000, v[1] / 1000 }'; }
echo "| command ($N rounds, alternating) | mean (ms) | median (ms) | best (ms) | mean vs native |"
echo "|---|---:|---:|---:|---:|"
native_mean=0
for i in "${!cmds[@]}"; do
    read -r mean median best <<< "$(stats "$i")"
    case "${labels[$i]}" in native*) native_mean=$mean ;; esac
    ratio=$(awk -v a="$mean" -v b="$native_mean" 'BEGIN { printf "%.1fx", a / b }')
    echo "| \`${labels[$i]}\` | $mean | $median | $best | $ratio |"
done

if [ -n "${TRACE:-}" ]; then
    echo
    echo "One \`repro run -- true\` with REPRO_TRACE_STARTUP=1:"
    REPRO_TRACE_STARTUP=1 "$REPRO" run -q --state-dir "$WORK/state" -- true 2>&1 | grep '^\[repro startup\]' || true
fi
