#!/bin/sh
# The honest fix: the loop visits every item.
set -eu
sed -i 's/while i + 1 < xs.len()/while i < xs.len()/' src/lib.rs
