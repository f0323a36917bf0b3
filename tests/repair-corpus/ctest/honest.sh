#!/bin/sh
# The honest fix: the loop adds every argument.
set -eu
sed -i 's/while \[ \$# -gt 1 \]/while [ $# -gt 0 ]/' lib.sh
