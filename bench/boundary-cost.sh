#!/usr/bin/env bash
# The cost of a change to the sandbox: the same workloads under `repro run` with two repro binaries (BEFORE and
# AFTER, e.g. the release build of the previous commit and of this one), alternating run by run so both see the
# same machine, best of $REPS each, and natively for reference. Prints a Markdown table with the AFTER/BEFORE
# ratio per workload and their geometric mean. Not a test; exits non-zero if any command fails.
#
#   bench/boundary-cost.sh /path/to/repro-before /path/to/repro-after
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BEFORE_BIN AFTER_BIN" >&2; exit 2; }
BEFORE=$(realpath "$1"); AFTER=$(realpath "$2")
REPS=${REPS:-7}
export PATH=/usr/bin:/bin
PY=/usr/bin/python3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
$PY -c 'import random; r = random.Random(1); print("\n".join(str(r.random()) for _ in range(300000)))' > lines
cat > getppid.c <<'C'
#include <unistd.h>
#include <sys/syscall.h>
int main(void) { long s = 0; for (long i = 0; i < 200000; i++) s += syscall(SYS_getppid); return s == -1; }
C
gcc -O2 -o getppid getppid.c
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

now() { date +%s%N; }
ms() { $PY -c "print(f'{$1/1e6:.2f}')"; }
declare -a ROWS RATIOS
bench() {
    local name=$1; shift
    local bn="" bb="" ba="" t0 d
    for _ in $(seq "$REPS"); do
        t0=$(now); "$@" > /dev/null 2>&1 || { echo "failed natively: $*" >&2; exit 1; }
        d=$(( $(now) - t0 )); if [ -z "$bn" ] || [ "$d" -lt "$bn" ]; then bn=$d; fi
        t0=$(now); "$BEFORE" run -q --state-dir "$WORK/state-b" -- "$@" > /dev/null 2>&1 || { echo "failed (before): $*" >&2; exit 1; }
        d=$(( $(now) - t0 )); if [ -z "$bb" ] || [ "$d" -lt "$bb" ]; then bb=$d; fi
        t0=$(now); "$AFTER" run -q --state-dir "$WORK/state-a" -- "$@" > /dev/null 2>&1 || { echo "failed (after): $*" >&2; exit 1; }
        d=$(( $(now) - t0 )); if [ -z "$ba" ] || [ "$d" -lt "$ba" ]; then ba=$d; fi
    done
    rm -rf "$WORK/state-b" "$WORK/state-a"
    local r; r=$($PY -c "print(f'{$ba/$bb:.3f}')")
    ROWS+=("| $name | $(ms "$bn") | $(ms "$bb") | $(ms "$ba") | ${r}x |")
    RATIOS+=("$r")
    echo "$name: native $(ms "$bn") ms, before $(ms "$bb") ms, after $(ms "$ba") ms, after/before $r" >&2
}

bench '`true` (start-up)' true
bench "\`sh -c 'date; ls /'\`" sh -c 'date; ls / > /dev/null'
bench '200,000 getppid' ./getppid
bench '50 fork+exec of /bin/true' sh -c 'for i in $(seq 50); do /bin/true; done'
bench '5 python3 startups' sh -c "for i in 1 2 3 4 5; do $PY -c pass; done"
bench 'sort of 300,000 lines' sort lines
bench 'find /usr/lib/x86_64-linux-gnu /usr/lib/python3' find /usr/lib/x86_64-linux-gnu /usr/lib/python3
geo=$($PY -c "import math,sys; r=[float(x) for x in sys.argv[1:]]; print(f'{math.exp(sum(map(math.log,r))/len(r)):.3f}')" "${RATIOS[@]}")
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "| workload (best of $REPS, \`repro run\`) | native (ms) | before (ms) | after (ms) | after/before |"
echo "|---|---:|---:|---:|---:|"
printf '%s\n' "${ROWS[@]}"
echo "| **geometric mean** | | | | **${geo}x** |"
