#!/usr/bin/env bash
# Runs the whole test suite: installs what the tests need, then every crate's unit and integration tests under
# cargo-nextest (each test in its own process; .config/nextest.toml names a hung test after a minute and kills it
# after ten), then the doc tests, which nextest does not run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
export CARGO_TERM_COLOR=never
if ! cargo nextest --version >/dev/null 2>&1; then
    echo "installing cargo-nextest"
    cargo install --locked --quiet cargo-nextest@0.9.143
fi
status=0
cargo nextest run --workspace --locked --no-fail-fast --profile "${NEXTEST_PROFILE:-default}" || status=$?
cargo test --doc --workspace --locked || status=$?
exit $status
