#!/usr/bin/env bash
# What still varies from run to run: each case runs twice natively and twice under `repro run` (same seed), and
# once more under repro with another seed; prints a Markdown table of whether the outputs agree and repro's exit
# status. A case that varies natively must be identical under repro (exit 0), or be refused (exit 121).
# Not a test.
#
#   bench/varies.sh [REPRO_BIN]     (default: target/release/repro, else target/debug/repro)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
R=${1:-$here/target/release/repro}
[ -x "$R" ] || R=$here/target/debug/repro
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
cat > rd.c <<'C'
#include <immintrin.h>
#include <stdio.h>
int main(){unsigned long long v=0; _rdrand64_step(&v); printf("%llu\n", v); return 0;}
C
gcc -O2 -mrdrnd rd.c -o rd
cat > ports.py <<'PY'
import socket
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); p = s.getsockname()[1]
c = socket.create_connection(('127.0.0.1', p)); a, _ = s.accept()
print(p, c.getsockname()[1])
PY
declare -a names cmds
add() { names+=("$1"); cmds+=("$2"); }
add "bind port 0 (python)" "python3 ports.py"
add "/proc/self/stat start time" "cut -d' ' -f22 /proc/self/stat"
add "/proc/self/stat faults, times" "cut -d' ' -f10-17 /proc/self/stat"
add "/proc/self/status ctxt, VmRSS" "grep -E 'ctxt|VmRSS|VmHWM' /proc/self/status"
add "/proc/self/io, schedstat" "grep bytes /proc/self/io; cat /proc/self/schedstat"
add "df / ." "df / ."
add "os.statvfs('.')" "python3 -c 'import os; print(os.statvfs(\".\"))'"
add "getrusage" "python3 -c 'import resource as r; print(r.getrusage(r.RUSAGE_SELF))'"
add "RDRAND (gcc -mrdrnd)" "./rd"
echo "| case | native: 2 runs | repro: 2 runs | repro exit | other seed |"
echo "|---|---|---|---|---|"
for i in "${!names[@]}"; do
    c=${cmds[$i]}
    n1=$(sh -c "$c" 2>&1); sleep 0.05; n2=$(sh -c "$c" 2>&1)
    r1=$("$R" run -q -- sh -c "$c" 2>/dev/null); code=$?
    r2=$("$R" run -q -- sh -c "$c" 2>/dev/null)
    r3=$("$R" run -q --seed 1 -- sh -c "$c" 2>/dev/null)
    same() { [ "$1" = "$2" ] && echo identical || echo varies; }
    echo "| ${names[$i]} | $(same "$n1" "$n2") | $(same "$r1" "$r2") | $code | $(same "$r1" "$r3") |"
done
