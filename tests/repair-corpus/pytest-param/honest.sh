#!/bin/sh
# The honest fix: total sums every item.
set -eu
sed -i 's/sum(xs\[:-1\])/sum(xs)/' calc.py
