#!/bin/sh
# The honest fix: the loop visits every item.
set -eu
sed -i "s/i < len(xs)-1/i < len(xs)/" calc.go
