#!/usr/bin/env bash
# Runs one coverage-guided fuzz target (cargo-fuzz, nightly toolchain) for SECONDS (default 600), one job, at
# the lowest CPU priority, with the files the target writes on a private size-limited tmpfs.
#
#   scripts/fuzz.sh TARGET [SECONDS] [extra libFuzzer flags...]
#   scripts/fuzz.sh list
#
# Targets and their corpora: fuzz/fuzz_targets/*.rs, fuzz/corpus/<target>/ (kept in the repository; new inputs
# found by a run are added there: minimize with `cargo +nightly fuzz cmin -s none <target>` before committing).
# A crash is written to fuzz/artifacts/<target>/, libFuzzer's log to fuzz/logs/<target>/. See docs/fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:?usage: scripts/fuzz.sh TARGET [SECONDS] [libFuzzer flags...] (or: scripts/fuzz.sh list)}"
if [ "$target" = list ]; then
    ls fuzz/fuzz_targets | sed 's/\.rs$//'
    exit 0
fi
secs="${2:-600}"
shift $(( $# >= 2 ? 2 : 1 ))
case "$target" in
    pack|pack_tar) max_len=65536 ;;
    manifest|tape) max_len=16384 ;;
    experiment|prom) max_len=8192 ;;
    chaos_schedule) max_len=16384 ;;
    args) max_len=256 ;;
    run_record) max_len=16384 ;;
    project|procfs) max_len=4096 ;;
    elf_scan) max_len=16384 ;;
    attestation) max_len=32768 ;;
    repair_counts) max_len=16384 ;;
    history) max_len=16384 ;;
    copyback) max_len=1024 ;;
    *) echo "unknown target '$target' (scripts/fuzz.sh list)" >&2; exit 2 ;;
esac
if [ -z "${REPRO_FUZZ_SCRATCH:-}" ]; then
    # A private mount namespace (and a user namespace when not root) holding a small tmpfs for the scratch files.
    if [ "$(id -u)" = 0 ]; then ns=(unshare --mount); else ns=(unshare --user --map-root-user --mount); fi
    exec "${ns[@]}" env REPRO_FUZZ_SCRATCH_MOUNT=1 REPRO_FUZZ_SCRATCH=/tmp/repro-fuzz-scratch "$0" "$target" "$secs" "$@"
fi
if [ -n "${REPRO_FUZZ_SCRATCH_MOUNT:-}" ]; then
    mkdir -p "$REPRO_FUZZ_SCRATCH"
    mount -t tmpfs -o size=64m,nr_inodes=1000,mode=700 repro-fuzz "$REPRO_FUZZ_SCRATCH"
fi
# libFuzzer's own log (fuzz-0.log, with -jobs) goes to the working directory: one per target.
mkdir -p "fuzz/logs/$target"
cd "fuzz/logs/$target"
exec nice -n 19 cargo +nightly fuzz run --fuzz-dir ../.. --sanitizer none --debug-assertions "$target" -- \
    -max_total_time="$secs" -jobs=1 -workers=1 -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 \
    -max_len="$max_len" -print_final_stats=1 "$@"
