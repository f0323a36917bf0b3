#!/usr/bin/env bash
# The deterministic scheduler's cost: each workload natively, under a `repro run` without the scheduler (BEFORE,
# e.g. main's release binary) and under this tree's release `repro run` (AFTER), median wall time of RUNS runs.
# Usage: bench/sched.sh BEFORE_BINARY [AFTER_BINARY] (RUNS=7 by default; EXTRA=0 skips the rayon, Go and Java
# workloads). Not a test; run it on an idle machine.
# A time ending in "!": one of its runs exited non-zero (a refused run, 121, or a missing tool).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BEFORE=${1:?usage: bench/sched.sh BEFORE_BINARY [AFTER_BINARY]}
AFTER=${2:-$ROOT/target/release/repro}
RUNS=${RUNS:-7}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export PATH=/usr/bin:/bin:$HOME/.cargo/bin
cat > "$WORK/loop.c" <<'C'
#include <stdio.h>
int main(void) { volatile unsigned long s = 0; for (unsigned long i = 0; i < 600000000UL; i++) s += i; printf("%lu\n", s); return 0; }
C
gcc -O1 -o "$WORK/loop" "$WORK/loop.c"
gcc -O2 -pthread -o "$WORK/race_order" "$ROOT/tests/guests/c/race_order.c"
cat > "$WORK/pool.py" <<'P'
from concurrent.futures import ThreadPoolExecutor
def work(i):
    return sum(k * k for k in range(200000))
with ThreadPoolExecutor(4) as ex:
    print(sum(ex.map(work, range(32))))
P
cat > "$WORK/pool_io.py" <<'P'
import threading, queue
q = queue.Queue()
def producer(n):
    for i in range(2000):
        q.put((n, i))
ts = [threading.Thread(target=producer, args=(n,)) for n in range(4)]
for t in ts: t.start()
got = sum(1 for _ in range(8000) if q.get() is not None)
for t in ts: t.join()
print(got)
P
cp -r "$ROOT/tests/guests/make" "$WORK/make"
# The rayon sum (crates from the registry, pinned by its Cargo.lock), the Go program and the Java hello world;
# each is skipped when its toolchain is missing.
extra=()
EXTRA=${EXTRA:-1}
if [ "$EXTRA" != 0 ] && command -v cargo >/dev/null; then
  CARGO_TARGET_DIR="$WORK/rayon-target" cargo build -q --release --locked \
    --manifest-path "$ROOT/bench/sched/rayon-sum/Cargo.toml" && cp "$WORK/rayon-target/release/rayon-sum" "$WORK/" \
    && extra+=("./rayon-sum")
fi
if [ "$EXTRA" != 0 ] && command -v go >/dev/null; then
  (cd "$ROOT/bench/sched/go" && GOCACHE="$WORK/gocache" GO111MODULE=off go build -o "$WORK/goroutines" main.go) \
    && extra+=("./goroutines")
fi
if [ "$EXTRA" != 0 ] && command -v javac >/dev/null; then
  javac -d "$WORK" "$ROOT/bench/sched/Hello.java" && extra+=("java -cp . Hello")
fi
ms() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
measure() { # label, then the command (run in $WORK)
  local label=$1; shift
  local times=() failed=""
  for _ in $(seq "$RUNS"); do
    (cd "$WORK/make" && make -s clean >/dev/null 2>&1) || true
    local t0; t0=$(ms)
    (cd "$WORK" && "$@" >/dev/null 2>&1) || failed="!"
    local t1; t1=$(ms)
    times+=($(( (t1 - t0) / 1000000 )))
  done
  # "!" marks a workload one of whose runs exited non-zero (a refused run's time means little).
  echo "$(printf '%s\n' "${times[@]}" | median)$failed"
}
printf '%-28s %9s %9s %9s %8s\n' workload native before after after/bef
for w in "python3 -c pass" "./loop" "python3 pool.py" "python3 pool_io.py" "./race_order" "make -C make -j4" "${extra[@]}"; do
  n=$(measure native $w)
  b=$(measure before "$BEFORE" run -q --state-dir "$WORK/.repro" -- $w)
  a=$(measure after "$AFTER" run -q --state-dir "$WORK/.repro" -- $w)
  printf '%-28s %7s ms %7s ms %7s ms %8s\n' "$w" "$n" "$b" "$a" "$(awk -v a="${a%!}" -v b="${b%!}" 'BEGIN{printf "%.3f", a/b}')"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
