#!/usr/bin/env bash
# Reproducer packs: capture overhead relative to `repro run`, pack size, replay start-up, and ReproZip's pack size
# and trace+pack time on the same commands (when `reprozip` is installed: pip install reprozip).
# Usage: bench/pack.sh [path/to/repro]   (default: target/release/repro; build with cargo build --release -p repro)
# Every timed command's status is checked: `repro run` and `repro capture` must end as the command does natively
# (these commands fail on purpose), a capture must write its pack, a replay must reproduce (exit 0).
set -euo pipefail
shopt -s inherit_errexit
REPRO=${1:-${CARGO_TARGET_DIR:-target}/release/repro}
REPRO=$(realpath "$REPRO")
N=${N:-5}
W=$(mktemp -d /tmp/repro-bench-pack.XXXXXX)
trap 'rm -rf "$W"' EXIT
export XDG_CACHE_HOME=$W/cache

# ms WANT CMD...: the wall time of CMD in milliseconds; any other exit status than WANT ends the script.
ms() {
  local want=$1 s e st=0
  shift
  s=$(date +%s%N); "$@" >/dev/null 2>&1 || st=$?; e=$(date +%s%N)
  [ "$st" -eq "$want" ] || { echo "bench: exit $st, expected $want: $*" >&2; exit 1; }
  echo $(( (e - s) / 1000000 ))
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

setup() {
  mkdir -p "$W/py" "$W/pytest" "$W/cargo" "$W/sh"
  cat > "$W/py/fail.py" <<'PY'
import json, collections, re
d = json.load(open("data.json"))
raise SystemExit(f"bad value {d['v']}")
PY
  echo '{"v": 3}' > "$W/py/data.json"
  cat > "$W/pytest/test_calc.py" <<'PY'
def add(a, b):
    return a + b
def test_ok():
    assert add(1, 1) == 2
def test_add():
    assert add(2, 2) == 5
PY
  mkdir -p "$W/cargo/src"
  printf '[package]\nname = "calc"\nversion = "0.1.0"\nedition = "2021"\n[workspace]\n' > "$W/cargo/Cargo.toml"
  printf 'pub fn add(a: i32, b: i32) -> i32 { a + b }\n#[cfg(test)]\nmod tests {\n  #[test]\n  fn adds() { assert_eq!(super::add(2, 2), 5); }\n}\n' > "$W/cargo/src/lib.rs"
  (cd "$W/cargo" && CARGO_TARGET_DIR=$W/cargo/target cargo test --no-run -q 2>/dev/null)
  CARGO_BIN=$(ls "$W"/cargo/target/debug/deps/calc-* | grep -v '\.d$' | head -1)
  cp "$CARGO_BIN" "$W/cargo/calc-tests"
  seq 1 20000 > "$W/sh/numbers.txt"
}

row() { # name dir cmd...
  local name=$1 dir=$2; shift 2
  cd "$dir" || return
  local run cap pack size rep0 rep rz_t rz_s want=0
  # The command's own status, natively: `repro run` and `repro capture` end with it.
  "$@" >/dev/null 2>&1 || want=$?
  [ "$want" -ne 0 ] || { echo "bench: $name succeeds natively; it must fail to be captured" >&2; exit 1; }
  run=$(for _ in $(seq "$N"); do ms "$want" "$REPRO" run -q -- "$@"; done | median)
  # Cold: no frame, digest or credential-scan cache (the first capture of these files on this machine).
  cold=$(for i in $(seq "$N"); do rm -rf "$XDG_CACHE_HOME/repro/frames" "$XDG_CACHE_HOME/repro/digests.json" "$XDG_CACHE_HOME/repro/secret-scan.json"; ms "$want" "$REPRO" capture -q -o "$W/$name-cold.repro" -- "$@"; done | median)
  cap=$(for i in $(seq "$N"); do ms "$want" "$REPRO" capture -q -o "$W/$name-$i.repro" -- "$@"; done | median)
  pack="$W/$name-1.repro"
  [ -s "$pack" ] || { echo "bench: $name: no pack written" >&2; exit 1; }
  size=$(stat -c %s "$pack")
  rm -rf "$XDG_CACHE_HOME/repro/roots"
  rep0=$("$REPRO" replay --json "$pack" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["prepare_ms"])')
  rep=$(for _ in $(seq "$N"); do "$REPRO" replay --json "$pack" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["prepare_ms"])'; done | median)
  repro_total=$(for _ in $(seq "$N"); do ms 0 "$REPRO" replay "$pack"; done | median)
  rz_t=n/a; rz_s=n/a
  if command -v reprozip >/dev/null; then
    # trace ends with the traced command's (failing) status; the pack below checks what it recorded.
    rz_t=$(for i in $(seq 3); do rm -rf "$W/rz"; s=$(date +%s%N); reprozip trace -d "$W/rz" --dont-identify-packages "$@" >/dev/null 2>&1 || true; reprozip pack -d "$W/rz" "$W/$name.rpz" >/dev/null 2>&1 || { echo "bench: reprozip pack failed for $name" >&2; exit 1; }; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); done | median)
    rz_s=$(stat -c %s "$W/$name.rpz")
    rm -rf "$W/rz" .reprozip-trace
  fi
  printf '| %s | %s | %s | %.2fx | %s | %.2fx | %s KiB | %s | %s / %s | %s | %s |\n' "$name" "$run" "$cap" "$(echo "$cap / $run" | bc -l)" \
    "$cold" "$(echo "$cold / $run" | bc -l)" \
    "$((size / 1024))" "$([ "$rz_s" = n/a ] && echo n/a || echo "$((rz_s / 1024)) KiB")" "$rep0" "$rep" "$repro_total" "$rz_t"
  rm -rf .repro
}

setup
echo "| command | repro run ms | capture ms | capture/run | cold capture ms | cold/run | pack | ReproZip .rpz | replay prepare ms (first / cached) | replay total ms | ReproZip trace+pack ms |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
row python "$W/py" python3 fail.py
row pytest "$W/pytest" python3 -m pytest -q -p no:cacheprovider test_calc.py
row cargo-test "$W/cargo" ./calc-tests
row shell "$W/sh" sh -c 'cat numbers.txt | sort -rn | head -n 3 | awk "{s+=\$1} END {if (s > 50000) {print \"sum too large: \" s > \"/dev/stderr\"; exit 2}}"'
