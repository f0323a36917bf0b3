#!/bin/sh
. ./lib.sh
[ "$(total 4 0)" = 4 ]
