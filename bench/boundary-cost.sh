#!/usr/bin/env bash
# The cost of a change to the sandbox: the same workloads under `repro run` with two repro binaries (BEFORE and
# AFTER, e.g. the release build of the previous commit and of this one), alternating run by run so both see the
# same machine, best of $REPS each, and natively for reference. Prints a Markdown table with the AFTER/BEFORE
# ratio per workload and their geometric mean. Not a test; exits non-zero if any command fails.
#
# The `repro run` rows of bench/compare.sh, which measures the other commands too.
#
#   bench/boundary-cost.sh /path/to/repro-before /path/to/repro-after
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BEFORE_BIN AFTER_BIN" >&2; exit 2; }
ONLY=run exec "$(dirname "$0")/compare.sh" "$@"
