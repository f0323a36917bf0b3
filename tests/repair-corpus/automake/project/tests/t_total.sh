#!/bin/sh
. ./lib.sh
[ "$(total 1 2 3)" = 6 ]
