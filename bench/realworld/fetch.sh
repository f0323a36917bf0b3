#!/usr/bin/env bash
# Download the pinned archives of the real-world corpus (bench/realworld/projects.tsv) into the cache and
# verify each one's sha256. Usage: fetch.sh [PROJECT...]  (default: every row; a project brings its test_deps).
# REALWORLD_MANIFEST overrides the manifest (used to test this script).
# Cache: $REALWORLD_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/repro/realworld. Archives already present and
# matching their hash are not downloaded again; a mismatch is an error (exit 1) and the file is not kept.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
manifest=${REALWORLD_MANIFEST:-$here/projects.tsv}
cache=${REALWORLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/repro/realworld}
dl="$cache/dl"
mkdir -p "$dl"

# name -> "kind url sha256 deps" from the manifest
declare -A kind url sum deps
order=()
while IFS=$'\t' read -r n k _v u s d _cmd; do
  [[ -z "$n" || "$n" == \#* ]] && continue
  kind[$n]=$k url[$n]=$u sum[$n]=$s deps[$n]=$d
  order+=("$n")
done <"$manifest"

want=()
if (($#)); then
  for n in "$@"; do
    [[ -n "${kind[$n]:-}" ]] || { echo "fetch.sh: no project '$n' in $manifest" >&2; exit 2; }
    want+=("$n")
    if [[ "${deps[$n]}" != "-" ]]; then
      IFS=, read -ra ds <<<"${deps[$n]}"
      for d in "${ds[@]}"; do
        [[ -n "${kind[$d]:-}" ]] || { echo "fetch.sh: $n needs '$d', not in $manifest" >&2; exit 2; }
        want+=("$d")
      done
    fi
  done
else
  want=("${order[@]}")
fi

fail=0
declare -A done_
for n in "${want[@]}"; do
  [[ -n "${done_[$n]:-}" ]] && continue
  done_[$n]=1
  [[ "${kind[$n]}" == local ]] && continue
  u=${url[$n]} s=${sum[$n]}
  f="$dl/${u##*/}"
  if [[ -f "$f" ]] && echo "$s  $f" | sha256sum --check --status; then
    echo "fetch.sh: $n: cached ${f##*/}"
    continue
  fi
  echo "fetch.sh: $n: downloading $u" >&2
  if ! curl --fail --silent --show-error --location --retry 2 --max-time 300 -o "$f.part" "$u"; then
    echo "fetch.sh: $n: download failed: $u" >&2
    rm -f "$f.part"
    fail=1
    continue
  fi
  got=$(sha256sum "$f.part" | cut -d' ' -f1)
  if [[ "$got" != "$s" ]]; then
    echo "fetch.sh: $n: sha256 mismatch for $u: expected $s, got $got" >&2
    rm -f "$f.part"
    fail=1
    continue
  fi
  mv -f "$f.part" "$f"
  echo "fetch.sh: $n: ok ${f##*/}"
done
exit "$fail"
