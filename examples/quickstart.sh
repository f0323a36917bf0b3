#!/usr/bin/env bash
# Quick start: build repro, check this machine, then run a failing test inside the sandbox twice and show that
# it fails the same way both times, with every input recorded in a run directory.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"

echo "==> building repro (release)"
cargo build --release --locked -p repro --quiet
repro="$here/target/release/repro"

echo "==> repro doctor"
"$repro" doctor

cd examples/quickstart
state="$(mktemp -d)"
trap 'rm -rf "$state"' EXIT
export REPRO_STATE_DIR="$state"

for i in 1 2; do
    echo "==> run $i: repro run -- python3 test_release_notes.py"
    set +e
    "$repro" run --epoch 2024-02-29T12:00:00Z -- python3 test_release_notes.py
    status=$?
    set -e
    echo "    exit status: $status"
done

echo "==> repro runs"
"$repro" runs

# Both runs must have failed identically: same exit status, same output.
mapfile -t runs < <(ls "$state/runs")
a="$state/runs/${runs[0]}"
b="$state/runs/${runs[1]}"
if [ "$(jq -r .exit_status "$a/run.json" 2>/dev/null || python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["exit_status"])' "$a/run.json")" = 0 ]; then
    echo "unexpected: the example passed" >&2
    exit 1
fi
if cmp -s "$a/stdout" "$b/stdout" && cmp -s "$a/stderr" "$b/stderr"; then
    echo "==> reproduced: both runs failed with identical output"
else
    echo "==> NOT reproduced: the two runs differ" >&2
    diff "$a/stdout" "$b/stdout" >&2 || true
    exit 1
fi

echo "==> repro run --verify: the same command twice from identical starting states, compared"
"$repro" run --verify --epoch 2024-02-29T12:00:00Z -- python3 test_release_notes.py >/dev/null

echo "==> repro capture: the failure as one pack (its whole file closure, environment, seed and epoch)"
pack="$state/release-notes.repro"
set +e
"$repro" capture --epoch 2024-02-29T12:00:00Z -o "$pack" -- python3 test_release_notes.py >/dev/null
set -e
"$repro" inspect "$pack" | head -12

echo "==> repro replay: the pack alone, three times, from its own root"
"$repro" replay "$pack" --runs 3 >/dev/null
echo "    try it yourself: cd examples/quickstart && $repro capture -- python3 test_release_notes.py"
