#!/usr/bin/env bash
# Runs the whole test suite: installs what the tests need, then every crate's unit and integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
export CARGO_TERM_COLOR=never
cargo test --workspace --locked --no-fail-fast
