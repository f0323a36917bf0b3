#!/bin/sh
# total: the sum of its arguments (the planted bug drops the last one).
total() {
    s=0
    while [ $# -gt 1 ]; do
        s=$((s + $1))
        shift
    done
    echo "$s"
}
