#!/usr/bin/env bash
# Benchmark of the determinism supervisor: each workload natively and under `repro-supervise`, in the
# same run, and the ratio. With --write, replaces the "## Determinism supervisor" section of
# docs/benchmarks.md with the results. Not a test: takes about a minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
cargo build --release -q -p repro-tracer --bin repro-supervise
SUP="$CARGO_TARGET_DIR/release/repro-supervise"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

cat > "$WORK/getppid.c" <<'C'
#include <unistd.h>
#include <sys/syscall.h>
int main(void) { long s = 0; for (int i = 0; i < 100000; i++) s += syscall(SYS_getppid); return s == 0; }
C
cat > "$WORK/clock.c" <<'C'
#include <time.h>
int main(void) { struct timespec t; long s = 0; for (int i = 0; i < 1000000; i++) { clock_gettime(CLOCK_MONOTONIC, &t); s += t.tv_nsec; } return s == 1; }
C
cat > "$WORK/uname.c" <<'C'
#include <sys/utsname.h>
int main(void) { struct utsname u; for (int i = 0; i < 100000; i++) uname(&u); return 0; }
C
for p in getppid clock uname; do gcc -O2 -o "$WORK/$p" "$WORK/$p.c"; done
python3 -c 'import random; r = random.Random(1); print("\n".join(str(r.random()) for _ in range(1000000)))' > "$WORK/lines"

now() { date +%s%N; }
# time_cmd CMD...: wall seconds, best of $REPS
time_cmd() {
  local best=""
  for _ in $(seq "${REPS:-3}"); do
    local t0 t1
    t0=$(now); "$@" > /dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }; t1=$(now)
    local d=$(( t1 - t0 ))
    if [ -z "$best" ] || [ "$d" -lt "$best" ]; then best=$d; fi
  done
  python3 -c "print(f'{$best/1e9:.4f}')"
}

declare -a NAMES NATIVE SUPER
bench() {
  local name=$1; shift
  local n s
  n=$(time_cmd "$@")
  s=$(time_cmd "$SUP" -- "$@")
  NAMES+=("$name"); NATIVE+=("$n"); SUPER+=("$s")
  printf '%-36s native %8ss  supervised %8ss  ratio %s\n' "$name" "$n" "$s" "$(python3 -c "print(f'{$s/$n:.2f}')")" >&2
}

bench "100,000 getppid (unmediated)" "$WORK/getppid"
bench "1,000,000 clock_gettime" "$WORK/clock"
bench "200 fork+exec of /bin/true" sh -c 'for i in $(seq 200); do /bin/true; done'
bench "20 python3 startups" sh -c 'for i in $(seq 20); do python3 -c pass; done'
bench "sort of 1,000,000 lines" sort "$WORK/lines"
bench "find /usr/lib" find /usr/lib
bench "CPU-bound Python loop" python3 -c 'sum(i * i for i in range(5_000_000))'
UN=$(time_cmd "$WORK/uname"); US=$(time_cmd "$SUP" -- "$WORK/uname")
EMPTY=$(REPS=5 time_cmd "$SUP" -- /bin/true)
SLEEP=$(REPS=1 time_cmd "$SUP" -- sleep 60)

python3 - "$ROOT" "$UN" "$US" "$EMPTY" "$SLEEP" "${#NAMES[@]}" "${NAMES[@]}" "${NATIVE[@]}" "${SUPER[@]}" <<'PY'
import math, sys, re, platform, os
root, un, us, empty, sleep, k = sys.argv[1], *map(float, sys.argv[2:6]), int(sys.argv[6])
rest = sys.argv[7:]
names, native, sup = rest[:k], list(map(float, rest[k:2*k])), list(map(float, rest[2*k:3*k]))
ratios = [s / n for n, s in zip(native, sup)]
geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
clock_us = (sup[1] - native[1] - empty) / 1e6 * 1e6
uname_us = (us - un - empty) / 1e5 * 1e6
lines = [
    "## Determinism supervisor",
    "",
    f"Measured by `bench/supervisor.sh` on {platform.machine()} Linux {platform.release()}, {os.cpu_count()} CPUs "
    "(best of 3 wall-clock runs; native and supervised in the same run; the supervised side includes the",
    f"PID-namespace helper and supervisor start-up, {empty*1000:.1f} ms for `/bin/true`).",
    "",
    "| workload | native (s) | supervised (s) | ratio |",
    "|---|---:|---:|---:|",
]
for n, a, b, r in zip(names, native, sup, ratios):
    lines.append(f"| {n} | {a:.4f} | {b:.4f} | {r:.2f}x |")
lines += [
    f"| `sleep 60` | 60 (by definition) | {sleep:.4f} | {sleep/60:.4f}x |",
    "",
    f"- Geometric mean of the ratios above (without `sleep 60`): **{geo:.2f}x** (target 1.5x).",
    f"- Mediated syscall (uname, seccomp user notification + process_vm_writev): **{uname_us:.1f} us** each (target 6 us).",
    f"- Clock read: **{clock_us:.1f} us** each. The vDSO is disabled, so every clock read is a mediated syscall; "
    "the in-process target (under 1 us, a replacement vDSO reading a supervisor-owned page) is not met, see docs/determinism.md.",
    f"- `sleep 60`: **{sleep*1000:.0f} ms** of wall time (target 50 ms).",
    "",
]
section = "\n".join(lines)
print(section)
if os.environ.get("WRITE") == "1":
    path = os.path.join(root, "docs/benchmarks.md")
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n\n"
    pat = re.compile(r"^## Determinism supervisor\n.*?(?=^## |\Z)", re.S | re.M)
    text = pat.sub(lambda m: section + "\n", text) if pat.search(text) else text.rstrip("\n") + "\n\n" + section
    open(path, "w").write(text)
PY
