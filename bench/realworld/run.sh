#!/usr/bin/env bash
# Run the real-world corpus natively and under repro, and print a Markdown table.
#
#   bench/realworld/run.sh [--prepare-only] [PROJECT...]   (default: every suite in projects.tsv)
#
# For each project: prepare it once under $REALWORLD_WORK (unpack, install its pinned test wheels into .deps,
# vendor a crate, configure and make a C project, compile a local Java suite, then one untimed warm-up run of the
# suite), then run its test command
#   1. natively (timed),
#   2. under `repro run` (timed; a run still going after the time limit is killed and recorded as HANG),
#   3. under `repro run --verify` (identical / DIFFERS 122 / REFUSED 121 / HANG), unless step 2 hung.
# The table (stdout) has the tests each run reported, both results and times, the ratio, the verify outcome, and
# a note with every flag the suite needs under repro today. Progress goes to stderr; every run's output is kept
# in $cache/logs/NAME.{native,repro,verify}.log.
#
# Environment: REPRO (default: target/release/repro of this checkout), REALWORLD_CACHE (default
# ${XDG_CACHE_HOME:-~/.cache}/repro/realworld: downloads and logs), REALWORLD_WORK (default
# /var/tmp/repro-realworld-UID: the unpacked, prepared suites; delete a suite's directory to prepare it again),
# REALWORLD_MANIFEST (default: projects.tsv here), REALWORLD_TIMEOUT (seconds, the most a repro run may take;
# default 300; the limit used is min(this, max(30, 5 x native time))).
set -euo pipefail
# prepare runs in a command substitution: keep -e there, so that a failed step stops the run.
shopt -s inherit_errexit

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
manifest=${REALWORLD_MANIFEST:-$here/projects.tsv}
cache=${REALWORLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/repro/realworld}
REPRO=${REPRO:-$root/target/release/repro}
# Where the suites are unpacked and run. Not under the cache by default: a working directory below a directory
# only its owner may enter (/root, mode 700) makes `repro run` fail its setup today (exit 125, "mkdir ...:
# Permission denied"), so the default is outside $HOME.
work=${REALWORLD_WORK:-/var/tmp/repro-realworld-$(id -u)}
max_timeout=${REALWORLD_TIMEOUT:-300}
py=/usr/bin/python3

prepare_only=0
if [[ "${1:-}" == --prepare-only ]]; then prepare_only=1; shift; fi
((prepare_only)) || [[ -x "$REPRO" ]] || { echo "run.sh: no repro binary at $REPRO (cargo build --release -p repro, or set REPRO)" >&2; exit 2; }
command -v timeout >/dev/null || { echo "run.sh: needs coreutils timeout" >&2; exit 2; }

declare -A kind version url deps cmd
order=()
while IFS=$'\t' read -r n k v u _s d c; do
  [[ -z "$n" || "$n" == \#* ]] && continue
  kind[$n]=$k version[$n]=$v url[$n]=$u deps[$n]=$d cmd[$n]=$c
  [[ "$k" == wheel ]] || order+=("$n")
done <"$manifest"

projects=("$@")
((${#projects[@]})) || projects=("${order[@]}")
for p in "${projects[@]}"; do
  [[ -n "${kind[$p]:-}" && "${kind[$p]}" != wheel ]] || { echo "run.sh: no suite '$p' in $manifest" >&2; exit 2; }
done

"$here/fetch.sh" "${projects[@]}" >&2

mkdir -p "$work" "$cache/logs"
state=$(mktemp -d "${TMPDIR:-/tmp}/repro-realworld.XXXXXX")
trap 'rm -rf "$state"' EXIT

log() { echo "run.sh: $*" >&2; }

# Where the rust toolchain lives on the host (a crate's suite needs it visible in the guest today).
cargo_home=${CARGO_HOME:-$HOME/.cargo}
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}

# The flags a suite needs under repro today, by kind; they are printed in the table's note column.
repro_flags() {
  case "${kind[$1]}" in
    crate) echo "--bind $cargo_home:/home/repro/.cargo --bind $rustup_home:/home/repro/.rustup --env CARGO_HOME=/home/repro/.cargo --env RUSTUP_HOME=/home/repro/.rustup --env PATH=/home/repro/.cargo/bin:/usr/bin:/bin" ;;
    *) echo "" ;;
  esac
}

archive() { echo "$cache/dl/${url[$1]##*/}"; }

# prepare NAME: unpack and build once; prints the directory the suite runs in.
prepare() {
  local n=$1 dir="$work/$1-${version[$1]}"
  if [[ -f "$dir/.realworld-prepared" ]]; then echo "$dir"; return 0; fi
  log "$n: preparing $dir"
  rm -rf "$dir" "$dir.tmp"
  mkdir -p "$dir.tmp"
  case "${kind[$n]}" in
    local) cp -a "$here/suites/$n/." "$dir.tmp/" ;;
    *) tar -xf "$(archive "$n")" -C "$dir.tmp" --strip-components=1 ;;
  esac
  (
    cd "$dir.tmp"
    case "${kind[$n]}" in
      pypi)
        mkdir -p .deps
        # The sdist's PKG-INFO as the project's metadata, what an editable install gives
        # (importlib.metadata.version(NAME) in the package or its tests).
        mkdir -p ".deps/$n-${version[$n]}.dist-info"
        cp PKG-INFO ".deps/$n-${version[$n]}.dist-info/METADATA"
        if [[ "${deps[$n]}" != "-" ]]; then
          IFS=, read -ra ds <<<"${deps[$n]}"
          for d in "${ds[@]}"; do
            "$py" -m pip install --quiet --disable-pip-version-check --no-deps --no-index --target .deps "$(archive "$d")"
          done
        fi
        ;;
      crate)
        if [[ -f "$here/locks/$n.Cargo.lock" ]]; then cp "$here/locks/$n.Cargo.lock" Cargo.lock; fi
        mkdir -p .cargo
        cargo vendor --quiet --versioned-dirs vendor >/dev/null
        printf '[source.crates-io]\nreplace-with = "vendored-sources"\n\n[source.vendored-sources]\ndirectory = "vendor"\n' >.cargo/config.toml
        ;;
      debian)
        if [[ -x configure ]]; then ./configure >/dev/null; fi
        case "$n" in
          bzip2) make --quiet -j2 libbz2.a bzip2 bzip2recover >/dev/null ;;
          *) make --quiet -j2 >/dev/null ;;
        esac
        ;;
      local)
        if [[ -d src ]] && ls src/*.java >/dev/null 2>&1; then javac -d build src/*.java; fi
        ;;
    esac
  ) >&2
  mv "$dir.tmp" "$dir"
  # One untimed native run in the final directory (cargo's fingerprints hold the path): what it builds or caches
  # (a crate's test binaries, .pyc files) is then in place for the timed runs, natively and under repro alike.
  # Its status is in the log, not checked here.
  (cd "$dir" && timeout -k 10 "$max_timeout" sh -c "${cmd[$n]}") >"$cache/logs/$n.warmup.log" 2>&1 ||
    log "$n: the warm-up run exited $? (see $cache/logs/$n.warmup.log)"
  touch "$dir/.realworld-prepared"
  echo "$dir"
}

# timed OUT CMD...: runs CMD with stdout and stderr to OUT; sets rc, wall (s) and cpu (user + sys of the whole
# process tree that was waited for, s). The machine is shared: CPU time is the steadier figure under load.
timed() {
  local out=$1 tf
  shift
  tf=$(mktemp "$state/time.XXXXXX")
  set +e
  { TIMEFORMAT='%R %U %S'; time "$@" >"$out" 2>&1; } 2>"$tf"
  rc=$?
  set -e
  read -r wall u s <"$tf" || { echo "run.sh: no timing for $*" >&2; exit 1; }
  cpu=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')
}
in_dir() { (cd "$1" && shift && exec "$@"); }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }

# summary KIND LOG: what the suite reported (counts), or "-" when it prints none.
summary() {
  # A log without the expected line has no count ("-"): grep finding nothing is not an error here.
  local -
  set +e +o pipefail
  local s="" plain
  plain=$(mktemp "$state/log.XXXXXX")
  sed 's/\x1b\[[0-9;]*m//g' "$2" >"$plain"
  set -- "$1" "$plain"
  case "$1" in
    pypi) s=$(grep -E '^(=+ )?[0-9]+ (passed|failed)|(passed|failed|error).* in [0-9.]+s' "$2" | tail -1 |
      grep -Eo '[0-9]+ (passed|failed|skipped|xfailed|xpassed|errors?|deselected)' | paste -sd, - | sed 's/,/, /g') ;;
    crate) s=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed; [0-9]+ ignored' "$2" |
      awk '{ p += $4; f += $6; i += $8 } END { if (NR) printf "%d passed, %d failed, %d ignored", p, f, i }') ;;
    local) s=$(grep -E '^# (pass|fail) [0-9]+$' "$2" | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $3, ($2 == "pass" ? "passed" : "failed") }')
      [[ -n "$s" ]] || s=$(grep -Eo '^# [0-9]+ passed, [0-9]+ failed' "$2" | tail -1 | cut -c3-) ;;
    debian) s=$(grep -Eio '\*\*\* .*test (ok|failed).*\*\*\*' "$2" | tail -1 | tr -d '*' | sed 's/^ *//; s/ *$//') ;;
  esac
  rm -f "$plain"
  echo "${s:--}"
}

result() { # result RC -> pass / FAIL (rc N) / HANG / REFUSED 121
  case "$1" in
    0) echo "pass" ;;
    124 | 137) echo "HANG" ;;
    121) echo "REFUSED 121" ;;
    *) echo "FAIL (rc $1)" ;;
  esac
}

if ((prepare_only)); then
  for n in "${projects[@]}"; do prepare "$n" >/dev/null; done
  exit 0
fi

echo "| project | kind | version | tests (native) | native | wall / CPU (s) | repro | wall / CPU (s) | ratio wall / CPU | --verify | note |"
echo "|---|---|---|---|---|---:|---|---:|---:|---|---|"

for n in "${projects[@]}"; do
  dir=$(prepare "$n")
  c=${cmd[$n]}
  flags=$(repro_flags "$n")
  note=()
  [[ -n "$flags" ]] && note+=("needs \`${flags//$HOME/~}\`")
  [[ "${kind[$n]}" == local ]] && note+=("suite written for this corpus")

  log "$n: native"
  timed "$cache/logs/$n.native.log" in_dir "$dir" timeout -k 10 "$max_timeout" sh -c "$c"
  nrc=$rc nt=$wall ncpu=$cpu
  nsum=$(summary "${kind[$n]}" "$cache/logs/$n.native.log")

  limit=$(awk -v t="$nt" -v m="$max_timeout" 'BEGIN { l = 5 * t; if (l < 30) l = 30; if (l > m) l = m; printf "%d", l }')
  log "$n: repro run (limit ${limit}s)"
  # shellcheck disable=SC2086 # $flags is a list of words
  timed "$cache/logs/$n.repro.log" in_dir "$dir" timeout -k 10 "$limit" "$REPRO" run --state-dir "$state/$n" $flags -- sh -c "$c"
  rrc=$rc rt=$wall rcpu=$cpu
  rsum=$(summary "${kind[$n]}" "$cache/logs/$n.repro.log")
  rres=$(result "$rrc")
  if [[ "$rres" == HANG ]]; then
    rres="HANG (killed at ${limit}s)"
    rt=">$limit" rcpu="-"
    wratio="-" cratio="-"
  else
    wratio=$(ratio "$rt" "$nt") cratio=$(ratio "$rcpu" "$ncpu")
  fi
  if [[ "$rres" != HANG* && "$rsum" != "-" && "$rsum" != "$nsum" ]]; then note+=("repro reported: $rsum"); fi

  if [[ "$rres" == HANG* ]]; then
    vres="not tried (the run hangs)"
  else
    log "$n: repro run --verify (limit $((2 * limit + 30))s)"
    set +e
    # shellcheck disable=SC2086
    (cd "$dir" && timeout -k 10 "$((2 * limit + 30))" "$REPRO" run --verify --state-dir "$state/$n-verify" $flags -- sh -c "$c") >"$cache/logs/$n.verify.log" 2>&1
    vrc=$?
    set -e
    case "$vrc" in
      122) vres="DIFFERS (122)" ;;
      121) vres="REFUSED (121)" ;;
      124 | 137) vres="HANG" ;;
      *) if grep -qi 'not reproducible' "$cache/logs/$n.verify.log"; then vres="DIFFERS (rc $vrc)"; else vres="rc $vrc"; fi ;;
    esac
    if [[ "$vrc" == 0 ]]; then
      # "verified: 2 runs identical (exit status N, ...)": identical, but say so when both runs failed alike.
      vst=$(grep -Eo 'runs identical \(exit status [0-9]+' "$cache/logs/$n.verify.log" | grep -Eo '[0-9]+$' | tail -1 || true)
      if [[ -z "$vst" || "$vst" == 0 ]]; then vres="identical"; else vres="identical (both exit $vst)"; fi
    fi
  fi
  if [[ "$rres" != pass && "$rres" != HANG* ]]; then
    why=$(grep -Eo '(\[repro\]|repro:) .*' "$cache/logs/$n.repro.log" | head -1 | sed 's/; run \/.*//' | cut -c1-200 || true)
    [[ -n "$why" ]] && note+=("${why//|/\\|}")
  fi

  notes=""
  for x in "${note[@]}"; do notes+="${notes:+; }$x"; done
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$n" "${kind[$n]}" "${version[$n]}" "$nsum" \
    "$(result "$nrc")" "$nt / $ncpu" "$rres" "$rt / $rcpu" "$wratio / $cratio" "$vres" "$notes"
done
