#!/usr/bin/env bash
# Benchmark of the determinism supervisor: each workload natively and under `repro-supervise` (the same
# `repro_tracer::supervise` that `repro run` uses, as PID 1 of a fresh PID namespace), in the same run,
# and the ratio. PATH is fixed to /usr/bin:/bin for both sides, as inside the sandbox (python3 is
# /usr/bin/python3, never a pyenv shim). With WRITE=1, replaces the generated part of the
# "## Determinism supervisor" section of docs/benchmarks.md (text after "<!-- notes -->" is kept).
# Not a test: takes about three minutes on 2 cores. Run it on an idle machine (it prints the load).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
cargo build --release -q -p repro-tracer --bin repro-supervise
SUP="$CARGO_TARGET_DIR/release/repro-supervise"
export PATH=/usr/bin:/bin
PY=/usr/bin/python3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
echo "load average before: $LOAD_BEFORE" >&2

cat > "$WORK/getppid.c" <<'C'
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(int c, char **v) { long n = c > 1 ? atol(v[1]) : 100000, s = 0; for (long i = 0; i < n; i++) s += syscall(SYS_getppid); return s == -1; }
C
cat > "$WORK/clock.c" <<'C'
#include <stdlib.h>
#include <time.h>
int main(int c, char **v) { long n = c > 1 ? atol(v[1]) : 1000000, s = 0; struct timespec t; for (long i = 0; i < n; i++) { clock_gettime(CLOCK_MONOTONIC, &t); s += t.tv_nsec; } return s == 1; }
C
cat > "$WORK/uname.c" <<'C'
#include <stdlib.h>
#include <sys/utsname.h>
int main(int c, char **v) { long n = c > 1 ? atol(v[1]) : 100000; struct utsname u; for (long i = 0; i < n; i++) uname(&u); return 0; }
C
for p in getppid clock uname; do gcc -O2 -o "$WORK/$p" "$WORK/$p.c"; done
$PY -c 'import random; r = random.Random(1); print("\n".join(str(r.random()) for _ in range(1000000)))' > "$WORK/lines"

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
  $PY -c "print(f'{$best/1e9:.4f}')"
}

declare -a NAMES NATIVE SUPER
# bench NAME CMD...: native and supervised runs alternate (so both see the same machine), best of $REPS each.
bench() {
  local name=$1; shift
  local bn="" bs="" t0 t1 d
  for _ in $(seq "${REPS:-5}"); do
    t0=$(now); "$@" > /dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }; t1=$(now)
    d=$(( t1 - t0 )); if [ -z "$bn" ] || [ "$d" -lt "$bn" ]; then bn=$d; fi
    t0=$(now); "$SUP" -- "$@" > /dev/null 2>&1 || { echo "failed under the supervisor: $*" >&2; exit 1; }; t1=$(now)
    d=$(( t1 - t0 )); if [ -z "$bs" ] || [ "$d" -lt "$bs" ]; then bs=$d; fi
  done
  local n s
  n=$($PY -c "print(f'{$bn/1e9:.4f}')"); s=$($PY -c "print(f'{$bs/1e9:.4f}')")
  NAMES+=("$name"); NATIVE+=("$n"); SUPER+=("$s")
  printf '%-36s native %8ss  supervised %8ss  ratio %s\n' "$name" "$n" "$s" "$($PY -c "print(f'{$s/$n:.2f}')")" >&2
}

export BENCH_REPS=${REPS:-5}
bench "100,000 getppid (unmediated)" "$WORK/getppid"
bench "1,000,000 clock_gettime (vDSO)" "$WORK/clock"
bench "200 fork+exec of /bin/true" sh -c 'for i in $(seq 200); do /bin/true; done'
bench "20 python3 startups" sh -c "for i in \$(seq 20); do $PY -c pass; done"
bench "sort of 1,000,000 lines" sort "$WORK/lines"
bench "find /usr/lib" find /usr/lib
bench "CPU-bound Python loop" $PY -c 'sum(i * i for i in range(5_000_000))'
# Per-call costs: the same program with 0 and N iterations under the supervisor, so start-up cancels out.
REPS=5
C0=$(time_cmd "$SUP" -- "$WORK/clock" 0); C1=$(time_cmd "$SUP" -- "$WORK/clock" 10000000)
CN0=$(time_cmd "$WORK/clock" 0); CN1=$(time_cmd "$WORK/clock" 10000000)
U0=$(time_cmd "$SUP" -- "$WORK/uname" 0); U1=$(time_cmd "$SUP" -- "$WORK/uname" 100000)
UN=$(time_cmd "$WORK/uname" 100000)
EMPTY=$(time_cmd "$SUP" -- /bin/true)
REPS=1
SLEEP=$(time_cmd "$SUP" -- sleep 60)
PROBE=""
if [ -r ../shared/probes/user_notif_cost.c ] && gcc -O2 -o "$WORK/probe" ../shared/probes/user_notif_cost.c 2>/dev/null; then
  PROBE=$(for _ in 1 2 3 4 5; do "$WORK/probe" || { echo "failed: the probe" >&2; exit 1; }; done | sed -n 's/.*: \([0-9.]*\) us.*/\1/p' | sort -n | head -1)
  [ -n "$PROBE" ] || { echo "the probe printed no figure" >&2; exit 1; }
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
echo "load average after: $LOAD_AFTER" >&2

$PY - "$ROOT" "$C0" "$C1" "$CN0" "$CN1" "$U0" "$U1" "$UN" "$EMPTY" "$SLEEP" "${PROBE:-0}" "$LOAD_BEFORE" "$LOAD_AFTER" \
  "${#NAMES[@]}" "${NAMES[@]}" "${NATIVE[@]}" "${SUPER[@]}" <<'PY'
import math, sys, re, platform, os
root = sys.argv[1]
c0, c1, cn0, cn1, u0, u1, un, empty, sleep, probe = map(float, sys.argv[2:12])
load_before, load_after, k = sys.argv[12], sys.argv[13], int(sys.argv[14])
rest = sys.argv[15:]
names, native, sup = rest[:k], list(map(float, rest[k:2*k])), list(map(float, rest[2*k:3*k]))
ratios = [s / n for n, s in zip(native, sup)]
geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
# The clock row is faster than native (the kernel's vDSO reads the paravirtual clock); without it:
rest_ratios = [r for n, r in zip(names, ratios) if "clock_gettime" not in n]
geo_rest = math.exp(sum(map(math.log, rest_ratios)) / len(rest_ratios))
clock_ns = (c1 - c0) / 1e7 * 1e9
clock_native_ns = (cn1 - cn0) / 1e7 * 1e9
uname_us = (u1 - u0) / 1e5 * 1e6
uname_native_us = un / 1e5 * 1e6
lines = [
    "## Determinism supervisor",
    "",
    f"Measured by `bench/supervisor.sh` on {platform.machine()} Linux {platform.release()}, {os.cpu_count()} CPUs, "
    f"load average {load_before} before and {load_after} after",
    f"(1, 5, 15 min). Best of {os.environ.get('BENCH_REPS', '5')} wall-clock runs, native and supervised alternating in the same run, both with",
    "`PATH=/usr/bin:/bin` as in the sandbox (`python3` is `/usr/bin/python3`). The supervised side is",
    "`repro-supervise`, the same `supervise()` that `repro run` uses, as PID 1 of a fresh PID namespace; it",
    f"includes that helper and the supervisor's start-up ({empty*1000:.1f} ms for `/bin/true`).",
    "",
    "| workload | native (s) | supervised (s) | ratio |",
    "|---|---:|---:|---:|",
]
for n, a, b, r in zip(names, native, sup, ratios):
    lines.append(f"| {n} | {a:.4f} | {b:.4f} | {r:.2f}x |")
lines += [
    f"| `sleep 60` | 60 (by definition) | {sleep:.4f} | {sleep/60:.4f}x |",
    "",
    f"- Geometric mean of the ratios above (without `sleep 60`): **{geo:.2f}x** (target 1.5x); "
    f"without the clock row, which is faster than native: {geo_rest:.2f}x.",
    f"- Clock read through the replacement vDSO (10,000,000 `clock_gettime` minus none, supervised): "
    f"**{clock_ns:.0f} ns** each, native {clock_native_ns:.0f} ns (target: under 1 µs, in-process).",
    f"- Mediated syscall (100,000 `uname` minus none, supervised; seccomp user notification + "
    f"process_vm_writev): **{uname_us:.1f} µs** each, native {uname_native_us:.2f} µs; the bare probe "
    f"(`shared/probes/user_notif_cost.c`, best of 5) measured {probe:.1f} µs in the same run (target 6 µs).",
    f"- `sleep 60`: **{sleep*1000:.0f} ms** of wall time (target 50 ms).",
    "",
]
section = "\n".join(lines)
print(section)
if os.environ.get("WRITE") == "1":
    path = os.path.join(root, "docs/benchmarks.md")
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n\n"
    pat = re.compile(r"^## Determinism supervisor\n.*?(?=^## |\Z)", re.S | re.M)
    m = pat.search(text)
    if m:
        old = m.group(0)
        notes = old[old.index("<!-- notes -->"):] if "<!-- notes -->" in old else ""
        new = section + ("\n" + notes if notes else "\n")
        text = text[:m.start()] + new + text[m.end():]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    open(path, "w").write(text)
PY
