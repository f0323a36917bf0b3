#!/bin/sh
# A TAP producer: one line per check.
. ./lib.sh
n=0
fail=0
check() {
    n=$((n + 1))
    if [ "$2" = "$3" ]; then echo "ok $n $1"; else echo "not ok $n $1"; fail=1; fi
}
echo 1..2
check one "$(total 4 0)" 4
check total "$(total 1 2 3)" 6
exit $fail
