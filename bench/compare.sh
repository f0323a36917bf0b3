#!/usr/bin/env bash
# Before/after: the figures of docs/benchmarks.md measured with two repro binaries (BEFORE and AFTER, e.g. the
# release builds of main and of a branch) in one session on one machine, so that a change can show it moves
# them by less than a few percent. Runs alternate between the two binaries (and which goes first alternates
# too), best of $REPS each; `repro run` workloads also run natively for reference.
#
#   `repro run` of the workloads of the boundary cost (start-up, getppid loop, fork+exec, python start-ups,
#   sort, find); `repro run --verify` of a python one-liner; `repro capture` of a failing python one-liner and
#   `repro replay` of that pack (each binary replays its own pack, from a warm root cache); `repro hunt` of a
#   flaky command (8 seeds, 2 jobs, --keep-going: the same 8 runs every time); `repro chaos run` of
#   examples/chaos/hello-world.yaml.
#
# Prints a Markdown table with the AFTER/BEFORE ratio per row and their geometric mean. Not a test: it exits
# non-zero if any command fails or ends with another status than the one expected (a capture of `exit 3` must
# exit 3 and write its pack; a hunt must find its failure; a chaos run must PASS).
#
#   bench/compare.sh /path/to/repro-before /path/to/repro-after
#   REPS=3 bench/compare.sh A B        # fewer repetitions (default 21: under 2 minutes on an idle 2-core machine)
#   ONLY=run bench/compare.sh A B      # only the `repro run` workloads (what bench/boundary-cost.sh measures)
set -euo pipefail
shopt -s inherit_errexit
[ $# -eq 2 ] || { echo "usage: $0 BEFORE_BIN AFTER_BIN" >&2; exit 2; }
BEFORE=$(realpath -e "$1")
AFTER=$(realpath -e "$2")
REPS=${REPS:-21}
ONLY=${ONLY:-all}
case "$ONLY" in all | run) ;; *) echo "ONLY must be all or run, got '$ONLY'" >&2; exit 2 ;; esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export PATH=/usr/bin:/bin
PY=/usr/bin/python3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
for b in "$BEFORE" "$AFTER"; do
    "$b" --version > /dev/null || { echo "compare: $b --version failed" >&2; exit 1; }
done
$PY -c 'import random; r = random.Random(1); print("\n".join(str(r.random()) for _ in range(300000)))' > lines
cat > getppid.c <<'C'
#include <unistd.h>
#include <sys/syscall.h>
int main(void) { long s = 0; for (long i = 0; i < 200000; i++) s += syscall(SYS_getppid); return s == -1; }
C
gcc -O2 -o getppid getppid.c
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# The repro side of a row: FN SIDE BIN ARGS... runs one command of BIN with the side's own state directory,
# cache (XDG_CACHE_HOME) and pack.
r_run() { local s=$1 b=$2; shift 2; XDG_CACHE_HOME="$WORK/cache-$s" "$b" run -q --state-dir "$WORK/state-$s" -- "$@"; }
r_verify() { local s=$1 b=$2; shift 2; XDG_CACHE_HOME="$WORK/cache-$s" "$b" run --verify -q --state-dir "$WORK/state-$s" -- "$@"; }
r_capture() {
    local s=$1 b=$2; shift 2
    rm -f "$WORK/pack-$s.repro"
    XDG_CACHE_HOME="$WORK/cache-$s" "$b" capture -q -o "$WORK/pack-$s.repro" --state-dir "$WORK/state-$s" -- "$@"
}
r_replay() { local s=$1 b=$2; XDG_CACHE_HOME="$WORK/cache-$s" "$b" replay --state-dir "$WORK/state-$s" "$WORK/pack-$s.repro"; }
r_hunt() {
    local s=$1 b=$2; shift 2
    XDG_CACHE_HOME="$WORK/cache-$s" "$b" hunt --vary seed --seeds 8 --max-runs 8 --keep-going --jobs 2 \
        --state-dir "$WORK/state-$s" -- "$@"
}
r_chaos() { local s=$1 b=$2; XDG_CACHE_HOME="$WORK/cache-$s" "$b" chaos run "$ROOT/examples/chaos/$3.yaml" --state-dir "$WORK/state-$s" -q --seed 1; }

# What a row's run must leave besides its exit status: FN SIDE -> fails the script when it is missing.
c_run() { :; }
c_verify() { grep -q "verified: 2 runs identical" "$WORK/err" || fail "no 'verified' line"; }
c_capture() { [ -s "$WORK/pack-$1.repro" ] || fail "no pack written"; }
c_replay() { grep -q "reproduced 1/1" "$WORK/err" || fail "the replay did not reproduce"; }
c_hunt() { grep -q "^8 runs in" "$WORK/out" || fail "the hunt did not make its 8 runs"; }
c_chaos() { grep -qx PASS "$WORK/out" || fail "the experiment did not PASS"; }

fail() {
    echo "compare: $LAST: $1" >&2
    echo "--- stdout" >&2; tail -n 20 "$WORK/out" >&2
    echo "--- stderr" >&2; tail -n 20 "$WORK/err" >&2
    exit 1
}

# timed WANT CMD...: runs CMD with its output in $WORK/out and $WORK/err; T is its wall time in microseconds.
# Any other exit status than WANT ends the script.
T=0
LAST=""
timed() {
    local want=$1 t0 t1 st=0
    shift
    LAST="$*"
    t0=$EPOCHREALTIME
    "$@" > "$WORK/out" 2> "$WORK/err" || st=$?
    t1=$EPOCHREALTIME
    [ "$st" -eq "$want" ] || fail "exit status $st, expected $want"
    T=$((10#${t1/./} - 10#${t0/./}))
}

ms() { $PY -c "print(f'{$1/1e3:.2f}')"; }
declare -a ROWS RATIOS
# bench NAME WANT NATIVE_WANT FN ARGS...: best of $REPS for BEFORE and AFTER through FN, alternating (and
# alternating which goes first); natively too unless NATIVE_WANT is `-`.
bench() {
    local name=$1 want=$2 native=$3 fn=$4
    shift 4
    local bn="" bb="" ba="" i side bin
    for ((i = 0; i < REPS; i++)); do
        if [ "$native" != - ]; then
            timed "$native" "$@"
            if [ -z "$bn" ] || [ "$T" -lt "$bn" ]; then bn=$T; fi
        fi
        local order=(b a)
        if ((i % 2)); then order=(a b); fi
        for side in "${order[@]}"; do
            if [ "$side" = b ]; then bin=$BEFORE; else bin=$AFTER; fi
            timed "$want" "r_$fn" "$side" "$bin" "$@"
            "c_$fn" "$side"
            if [ "$side" = b ]; then
                if [ -z "$bb" ] || [ "$T" -lt "$bb" ]; then bb=$T; fi
            else
                if [ -z "$ba" ] || [ "$T" -lt "$ba" ]; then ba=$T; fi
            fi
            rm -rf "$WORK/state-$side"
        done
    done
    local r n
    r=$($PY -c "print(f'{$ba/$bb:.3f}')")
    if [ -n "$bn" ]; then n=$(ms "$bn"); else n=""; fi
    ROWS+=("| $name | $n | $(ms "$bb") | $(ms "$ba") | ${r}x |")
    RATIOS+=("$r")
    echo "$name: native ${n:-n/a} ms, before $(ms "$bb") ms, after $(ms "$ba") ms, after/before $r" >&2
}

bench '`repro run -- true` (start-up)' 0 0 run true
bench "\`repro run -- sh -c 'date; ls /'\`" 0 0 run sh -c 'date; ls / > /dev/null'
bench '`repro run`: 200,000 getppid' 0 0 run ./getppid
bench '`repro run`: 50 fork+exec of /bin/true' 0 0 run sh -c 'for i in $(seq 50); do /bin/true; done'
bench '`repro run`: 5 python3 startups' 0 0 run sh -c "for i in 1 2 3 4 5; do $PY -c pass; done"
bench '`repro run`: sort of 300,000 lines' 0 0 run sort lines
bench '`repro run`: find /usr/lib/x86_64-linux-gnu /usr/lib/python3' 0 0 run find /usr/lib/x86_64-linux-gnu /usr/lib/python3
if [ "$ONLY" = all ]; then
    FAIL_PY='import json, collections; raise SystemExit(3)'
    bench '`repro run --verify` of a python one-liner' 0 - verify $PY -c 'import random; print(random.random())'
    bench '`repro capture` of a failing python one-liner' 3 - capture $PY -c "$FAIL_PY"
    bench '`repro replay` of that pack (cached root)' 0 - replay
    bench '`repro hunt`: 8 seeds of a flaky python one-liner, 2 jobs' 1 - hunt \
        $PY -c 'import random, sys; sys.exit(1 if random.random() < 0.3 else 0)'
    bench '`repro chaos run` hello-world' 0 - chaos hello-world
fi
geo=$($PY -c "import math,sys; r=[float(x) for x in sys.argv[1:]]; print(f'{math.exp(sum(map(math.log,r))/len(r)):.3f}')" "${RATIOS[@]}")
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "| workload (best of $REPS) | native (ms) | before (ms) | after (ms) | after/before |"
echo "|---|---:|---:|---:|---:|"
printf '%s\n' "${ROWS[@]}"
echo "| **geometric mean** | | | | **${geo}x** |"
