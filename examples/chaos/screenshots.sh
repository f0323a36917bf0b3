#!/usr/bin/env bash
# Runs every example, writes its report and a screenshot of it (headless chromium) to docs/chaos-report-<id>.png.
# Usage: examples/chaos/screenshots.sh [REPRO]   (REPRO: the repro binary, default: repro on PATH)
# Needs the examples' packages, chromium, and the Docker examples' images (examples/chaos/docker/build-images.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
repro=${1:-repro}
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
for id in hello-world smoke redis-kill-acked-writes redis-freeze postgres-kill-postmaster redis-nemesis \
    redis-partition-acked-writes redis-latency redis-replica-linearizable docker-hello-world \
    docker-redis-kill-acked-writes; do
    dir=$("$repro" chaos run "examples/chaos/$id.yaml" -q --seed 1 --state-dir "$state" | tail -n 1)
    "$repro" chaos report "$dir" >/dev/null
    chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$state/profile" \
        --window-size=1000,1500 --screenshot="docs/chaos-report-$id.png" "file://$dir/report.html" 2>/dev/null
    echo "docs/chaos-report-$id.png"
done
