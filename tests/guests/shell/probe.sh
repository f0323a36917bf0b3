#!/bin/sh
# Prints what a shell script sees that would differ between runs; $1 is a scratch directory.
set -e
date
date +%s.%N
start=$(date +%s)
sleep 60
echo "elapsed $(( $(date +%s) - start ))"
echo "pid $$"
hostname
uname -a
nproc
cat /proc/sys/kernel/random/uuid /proc/sys/kernel/random/boot_id
head -c 16 /dev/urandom | od -An -tx1
cat /proc/uptime
echo "ls: $(ls -f "$1" | tr '\n' ' ')"
echo a > "$1/new1"
sleep 1
echo b > "$1/new2"
stat -c '%n %Y %y %i' "$1/new1" "$1/new2"
seq 1 1000 | sort -r | head -3 | tr '\n' ' ' && echo
[ "$1/new2" -nt "$1/new1" ] && echo "new2 is newer"
