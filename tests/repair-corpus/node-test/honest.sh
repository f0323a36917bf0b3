#!/bin/sh
# The honest fix: total sums every item.
set -eu
sed -i 's/xs.slice(0, -1).reduce/xs.reduce/' calc.js
