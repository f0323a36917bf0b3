#!/usr/bin/env bash
# Offline checks of fetch.sh against a manifest of local file:// archives: a good hash is fetched and then served
# from the cache, a corrupt cached copy is fetched again, a wrong hash is exit 1 and leaves no file, a project
# brings its test_deps, an unknown project is exit 2. Usage: bench/realworld/selftest.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail() { echo "selftest: FAIL: $*" >&2; exit 1; }

printf 'an archive\n' >"$t/a.tar.gz"
printf 'a wheel\n' >"$t/w.whl"
ha=$(sha256sum "$t/a.tar.gz" | cut -d' ' -f1)
hw=$(sha256sum "$t/w.whl" | cut -d' ' -f1)
{
  printf '# name\tkind\tversion\turl\tsha256\ttest_deps\ttest_command\n'
  printf 'good\tpypi\t1\tfile://%s\t%s\twhl\ttrue\n' "$t/a.tar.gz" "$ha"
  printf 'bad\tpypi\t1\tfile://%s\t%s\t-\ttrue\n' "$t/a.tar.gz" "$hw"
  printf 'whl\twheel\t1\tfile://%s\t%s\t-\t-\n' "$t/w.whl" "$hw"
} >"$t/m.tsv"
export REALWORLD_MANIFEST="$t/m.tsv" REALWORLD_CACHE="$t/cache"

"$here/fetch.sh" good >"$t/out" 2>&1 || fail "good: $(cat "$t/out")"
[[ -f "$t/cache/dl/a.tar.gz" && -f "$t/cache/dl/w.whl" ]] || fail "good and its test dep are not in the cache"
"$here/fetch.sh" good >"$t/out" 2>&1 || fail "good, cached: $(cat "$t/out")"
grep -q 'good: cached a.tar.gz' "$t/out" || fail "a cached archive was fetched again: $(cat "$t/out")"

printf 'corrupt\n' >"$t/cache/dl/a.tar.gz"
"$here/fetch.sh" good >"$t/out" 2>&1 || fail "good, corrupt cache: $(cat "$t/out")"
[[ "$(sha256sum "$t/cache/dl/a.tar.gz" | cut -d' ' -f1)" == "$ha" ]] || fail "a corrupt cached copy was kept"

rm -f "$t/cache/dl/a.tar.gz"
rc=0
"$here/fetch.sh" bad >"$t/out" 2>&1 || rc=$?
[[ $rc == 1 ]] || fail "bad: exit $rc, expected 1"
grep -q 'sha256 mismatch' "$t/out" || fail "bad: no mismatch message: $(cat "$t/out")"
[[ ! -e "$t/cache/dl/a.tar.gz" && ! -e "$t/cache/dl/a.tar.gz.part" ]] || fail "bad: a mismatching file was kept"

rc=0
"$here/fetch.sh" nosuch >"$t/out" 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "nosuch: exit $rc, expected 2"
echo "selftest: ok"
