#!/usr/bin/env bash
# Hunting: a program that runs ~20 ms natively and fails for about 1 seed in 100. Measures the wall time of
# `repro hunt --capture` to the first captured pack, against 100 native runs on the same cores (2 parallel jobs),
# measured in the same run; then shrink of the pytest fixture (40 input files): time and final size.
# `--write` replaces the "Flaky failures" section of docs/benchmarks.md.
# Every timed command's status is checked (the program exits 0 or 1 by design; anything else, a hunt that finds
# nothing or a capture that writes no pack, ends the script with an error).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
root=$PWD
cargo build --release --locked -p repro --quiet
repro="$root/target/release/repro"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
jobs=$(nproc)

# Calibrate a busy loop to ~20 ms natively.
cat > spin.c <<'C'
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#ifndef ITERS
#define ITERS 1000000
#endif
int main(void) {
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != sizeof r) return 2;
    volatile uint64_t x = 0;
    for (uint64_t i = 0; i < (uint64_t)ITERS; i++) x += i ^ r;
    printf("%llu\n", (unsigned long long)(x & 0xff));
    if (r % 100 == 0) { fprintf(stderr, "FAILED: unlucky value %llu\n", (unsigned long long)r); return 1; }
    return 0;
}
C
# run_spin PROGRAM: runs it; its status must be 0 or 1 (an unlucky value), nothing else.
run_spin() {
    local st=0
    "$1" > /dev/null 2>&1 || st=$?
    [ "$st" -le 1 ] || { echo "bench: $1 exited $st" >&2; exit 1; }
}
gcc -O1 -DITERS=100000000 spin.c -o calib
s=$(date +%s%N); run_spin ./calib; e=$(date +%s%N)
iters=$(( 100000000 * 20000000 / (e - s) ))
gcc -O1 -DITERS=$iters spin.c -o spin
s=$(date +%s%N); run_spin ./spin; e=$(date +%s%N)
one_ms=$(echo "scale=1; ($e - $s)/1000000" | bc)

# 100 native runs on the same cores (xargs fails when one of them exits with anything but 0 or 1).
s=$(date +%s%N)
seq 100 | xargs -P "$jobs" -I{} sh -c './spin >/dev/null 2>&1; [ $? -le 1 ]' || { echo "bench: a native run failed" >&2; exit 1; }
e=$(date +%s%N)
native100_ms=$(( (e - s) / 1000000 ))

# The hunt, to the first captured pack.
# It exits 1 when it found a failure (and captured it), 0 when it found none: that is a failed measurement.
s=$(date +%s%N)
st=0
"$repro" hunt --vary seed --seeds 2000 --max-runs 2000 --jobs "$jobs" --capture -o found.repro --json -- ./spin > hunt.json || st=$?
e=$(date +%s%N)
[ "$st" -eq 1 ] && [ -s found.repro ] || { echo "bench: the hunt exited $st without a captured pack" >&2; exit 1; }
hunt_ms=$(( (e - s) / 1000000 ))
runs=$(python3 -c 'import json;print(json.load(open("hunt.json"))["runs"])')
seed=$(python3 -c 'import json;r=json.load(open("hunt.json"));print(r["failures"][0]["first"]["seed"] if r["failures"] else "none")')
ratio=$(echo "scale=2; $hunt_ms / $native100_ms" | bc)
per_run_ratio=$(echo "scale=2; ($hunt_ms / $runs) / ($native100_ms / 100)" | bc)

# Shrink of the pytest fixture.
cp -r "$root/tests/fixtures/pytest-suite" suite
cd suite
# The suite fails (exit 1): that is what is captured. Debian's python3, which has pytest: a `python3` first on PATH
# (a pyenv shim) may not, and "No module named pytest" exits 1 too; so the capture must show pytest's failure.
st=0
"$repro" capture -o suite.repro -- /usr/bin/python3 -m pytest -q -p no:cacheprovider test_inventory.py >capture.out 2>&1 || st=$?
[ "$st" -eq 1 ] && [ -s suite.repro ] || { echo "bench: capturing the pytest suite exited $st (expected 1, a pack)" >&2; exit 1; }
grep -q " failed" capture.out || { echo "bench: the captured run is not pytest's failure:" >&2; cat capture.out >&2; exit 1; }
s=$(date +%s%N)
"$repro" shrink suite.repro -o small.repro --json > shrink.json 2>/dev/null
e=$(date +%s%N)
shrink_s=$(echo "scale=1; ($e - $s)/1000000000" | bc)
read -r before_files after_files removed replays before_pack after_pack < <(python3 -c '
import json; r=json.load(open("shrink.json"))
print(r["before"]["files"], r["after"]["files"], len(r["removed_files"]), r["replays"], r["before"]["pack_bytes"], r["after"]["pack_bytes"])')
cd ..

table=$(cat <<TABLE
| measurement | figure |
|---|---|
| one native run of the program | ${one_ms} ms |
| 100 native runs, ${jobs} in parallel | ${native100_ms} ms |
| \`repro hunt --capture\` to the first captured pack | ${hunt_ms} ms, ${runs} runs (first failing seed: ${seed}) |
| hunt / 100 native runs | ${ratio}x (target at most 2x) |
| per run, hunt vs native | ${per_run_ratio}x |
| shrink of the pytest fixture (confirm 2) | ${shrink_s} s, ${replays} replays |
| shrink: files in the closure | ${before_files} -> ${after_files} (${removed} inputs removed) |
| shrink: pack size | ${before_pack} -> ${after_pack} bytes |
TABLE
)
echo "$table"
if [ "${1:-}" = "--write" ]; then
    cd "$root"
    section=$(printf '## Flaky failures (hunt, shrink)\n\n`bench/hunt.sh`, %s, load average %s at the start.\n\n%s\n' "$(date -u +%Y-%m-%d)" "$(cut -d' ' -f1 /proc/loadavg)" "$table")
    python3 - docs/benchmarks.md "$section" <<'PY'
import re, sys
path, section = sys.argv[1], sys.argv[2]
text = open(path).read()
pattern = re.compile(r"^## Flaky failures.*?\n(?=^## |\Z)", re.S | re.M)
text = pattern.sub(section.rstrip("\n") + "\n\n", text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
open(path, "w").write(text)
PY
    echo "wrote docs/benchmarks.md"
fi
