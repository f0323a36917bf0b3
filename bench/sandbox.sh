#!/usr/bin/env bash
# Start-up cost of the hermetic boundary: `repro run -- true` (with and without the supervisor) against native
# `true`, measured in the same run. Prints a Markdown table; `--write` also replaces the "Sandbox start-up"
# section of docs/benchmarks.md.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
cargo build --release --locked -p repro --quiet
repro="$PWD/target/release/repro"
n=${N:-30}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# Mean wall time of N runs of a command, in milliseconds; a run that fails ends the script.
mean_ms() {
    local start end
    start=$(date +%s%N)
    for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 || { echo "bench: failed: $*" >&2; exit 1; }; done
    end=$(date +%s%N)
    echo "scale=2; ($end - $start) / 1000000 / $n" | bc
}

native=$(mean_ms true)
sh_native=$(mean_ms sh -c 'date; ls / >/dev/null')
boundary=$(mean_ms "$repro" run -q --no-supervisor -- true)
supervised=$(mean_ms "$repro" run -q -- true)
sh_sup=$(mean_ms "$repro" run -q -- sh -c 'date; ls / >/dev/null')

table=$(cat <<TABLE
| command (mean of $n runs) | wall time | vs native |
|---|---|---|
| native \`true\` | ${native} ms | 1x |
| \`repro run --no-supervisor -- true\` (boundary only) | ${boundary} ms | +$(echo "$boundary - $native" | bc) ms |
| \`repro run -- true\` (boundary and supervisor) | ${supervised} ms | +$(echo "$supervised - $native" | bc) ms |
| native \`sh -c 'date; ls /'\` | ${sh_native} ms | 1x |
| \`repro run -- sh -c 'date; ls /'\` | ${sh_sup} ms | +$(echo "$sh_sup - $sh_native" | bc) ms |
TABLE
)
echo "$table"

if [ "${1:-}" = "--write" ]; then
    cd - >/dev/null
    doc=docs/benchmarks.md
    [ -f "$doc" ] || printf '# Benchmarks\n\nFigures measured on this project'"'"'s CI machine kind (2 cores, Firecracker VM).\n' > "$doc"
    section=$(printf '## Sandbox start-up\n\n`bench/sandbox.sh`, %s, %s. Every run creates namespaces, assembles the root (a tmpfs with a read-only bind of each top-level directory, the --disk tmpfs with the overlay, /dev, /proc and /sys with their masks), a cgroup, and writes its run directory atomically (with fsync).\n\n%s\n' "$(date -u +%Y-%m-%d)" "$(uname -r)" "$table")
    python3 - "$doc" "$section" <<'PY'
import re, sys
path, section = sys.argv[1], sys.argv[2]
text = open(path).read()
pattern = re.compile(r"^## Sandbox start-up\n.*?(?=^## |\Z)", re.S | re.M)
if pattern.search(text):
    text = pattern.sub(section.rstrip("\n") + "\n\n", text)
else:
    text = text.rstrip("\n") + "\n\n" + section
open(path, "w").write(text)
PY
    echo "wrote $doc"
fi
